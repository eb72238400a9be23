"""The compiled text encoder (``BatchText``) writes, for every fixture record, the bytes
``json.dumps`` and ``csv.writer`` write for ``message_dict``'s row (as ``cli/output.py`` does):
JSON Lines, JSON array items and CSV, bodies as text (escapes, replacement characters) and, in each
version's clean-small, absent; whole batches and slices of them."""

from __future__ import annotations

import csv
import io
import json

import pytest

from conftest import FIXTURES
from mqtool.cli.output import _cell
from mqtool.store.records import MESSAGE_FIELDS, BodyEncoding, message_dict
from mqtool.scan.messages import MessageScan
from mqtool.scan.text import BatchText, TextFormat
from mqtool.store import Store

STORES = sorted(FIXTURES.glob("rocketmq-*/*.manifest.json"))
# bodies as text in every store; absent (every other field as with them) in each version's clean-small
BODIES = {p: (BodyEncoding.none, BodyEncoding.utf8) if p.name == "clean-small.manifest.json" else (BodyEncoding.utf8,) for p in STORES}


def expected_lines(rows: list[dict]) -> dict[TextFormat, list[str]]:
    """Each row as ``json.dumps`` (JSON Lines, JSON array items) and ``csv.writer`` write it: a format's
    text of any run of rows is the join of theirs."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    csv_lines = []
    for row in rows:
        writer.writerow([_cell(row[f]) for f in MESSAGE_FIELDS])
        csv_lines.append(out.getvalue())
        out.seek(0)
        out.truncate()
    dumped = [json.dumps(row, ensure_ascii=False) for row in rows]
    return {TextFormat.csv: csv_lines, TextFormat.json: [",\n" + d for d in dumped], TextFormat.jsonl: [d + "\n" for d in dumped]}


@pytest.mark.parametrize("manifest_path", STORES, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_text_equals_json_and_csv_of_message_dict_on_every_fixture_record(manifest_path):
    path = manifest_path.with_name(manifest_path.name[: -len(".manifest.json")])
    with Store.open(path) as store:
        as_dict = lambda r, body: message_dict(r, body, legacy_properties=store.legacy_properties, delay_table=store.delay_table)  # noqa: E731
        encoders = {fmt: BatchText(MESSAGE_FIELDS, fmt) for fmt in TextFormat}
        seen = 0
        for body in BODIES[manifest_path]:
            for batch in MessageScan(store, body=body, columns=MESSAGE_FIELDS, stop_on_crc=False, batch=400):
                lines = expected_lines([as_dict(store.commitlog.read_record(o), body) for o in batch.column("offset").to_pylist()])
                for fmt, encoder in encoders.items():
                    assert encoder.encode(batch).tobytes().decode() == "".join(lines[fmt]), (body, fmt)
                    assert encoder.encode(batch.slice(5, 150)).tobytes().decode() == "".join(lines[fmt][5:155]), (body, fmt)
                seen += batch.num_rows
        assert seen == len(BODIES[manifest_path]) * sum(1 for _ in store.commitlog.scan()) > 0


def test_every_version_is_written_with_bodies_absent_too():
    assert {p.parent.name for p, bodies in BODIES.items() if BodyEncoding.none in bodies} == {p.parent.name for p in STORES}
    assert all(BodyEncoding.utf8 in bodies for bodies in BODIES.values())


def test_integers_at_every_digit_count_and_the_int64_extremes():
    """The encoder writes integers in groups of eight digits: every length from 1 to 19 digits,
    both signs, the values around each power of ten, and -2**63 (whose negation overflows)."""
    import pyarrow as pa

    values = [0, -(2**63), 2**63 - 1]
    for digits in range(1, 19):
        p = 10**digits
        values += [p - 1, p, p + 1, -(p - 1), -p, -(p + 1)]
    batch = pa.RecordBatch.from_arrays([pa.array(values, pa.int64())], names=["v"])
    for fmt in TextFormat:
        text = BatchText(["v"], fmt).encode(batch).tobytes().decode()
        assert text == expected_text_of_column("v", values, fmt)


def expected_text_of_column(name: str, values: list, fmt: TextFormat) -> str:
    if fmt is TextFormat.csv:
        return "".join(f"{v}\n" for v in values)
    prefix, end = (",\n", "") if fmt is TextFormat.json else ("", "\n")
    return "".join(prefix + json.dumps({name: v}) + end for v in values)
