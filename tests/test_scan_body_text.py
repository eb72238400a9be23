"""The compiled body column (``kernels.body_text``, spliced with ``encode_body`` for the rows it
leaves to Python) equals ``message_dict``'s body on every fixture record, in every ``--body``
encoding, inflated or not on every version; its UTF-8 check equals Python's strict decoder byte for byte."""

from __future__ import annotations

import base64
import random

import numpy as np
import pytest

from conftest import FIXTURES
from mqtool.store.records import BodyEncoding, message_dict
from mqtool.scan import _kernels as kernels
from mqtool.scan.messages import MessageScan
from mqtool.store import Store

STORES = sorted(FIXTURES.glob("rocketmq-*/*.manifest.json"))
# every version has two stores or more: they take turns, inflated or not, so each version's records are read both ways
INFLATED = {p: sum(q.parent == p.parent for q in STORES[: STORES.index(p)]) % 2 == 1 for p in STORES}


@pytest.mark.parametrize("manifest_path", STORES, ids=lambda p: f"{p.parent.name}/{p.name.split('.')[0]}")
def test_body_column_equals_message_dict_on_every_fixture_record(manifest_path):
    path = manifest_path.with_name(manifest_path.name[: -len(".manifest.json")])
    with Store.open(path) as store:
        records = {r.offset: r for r in store.commitlog.scan(check_crc=False)}
        assert records
        decompress = INFLATED[manifest_path]
        for body in (BodyEncoding.utf8, BodyEncoding.hex, BodyEncoding.base64, BodyEncoding.sha256):
            got = {}
            for batch in MessageScan(store, body=body, decompress=decompress, columns=["offset", "body"], stop_on_crc=False, batch=300):
                got.update(zip(batch.column("offset").to_pylist(), batch.column("body").to_pylist()))
            expected = {o: message_dict(r, body, decompress=decompress, legacy_properties=store.legacy_properties)["body"] for o, r in records.items()}
            assert got == expected, (body, decompress)


def test_every_version_is_read_inflated_and_not():
    versions = {p.parent.name for p in STORES}
    assert {(p.parent.name, d) for p, d in INFLATED.items()} == {(v, d) for v in versions for d in (False, True)}


def test_utf8_check_equals_pythons_decoder():
    """Every lead byte with every second byte, complete, truncated and with bad continuations
    (overlongs, surrogates, past U+10FFFF), and random runs."""
    samples = []
    for lead in range(256):
        for second in range(256):
            for tail in (b"", b"\x80", b"\xbf", b"\x80\x80", b"\xbf\xbf", b"\x80\x7f", b"\xc0\x80"):
                samples.append(bytes([lead, second]) + tail)
    rng = random.Random(7)
    samples += [bytes(rng.choice([rng.randrange(256), rng.randrange(0x80, 0xC0), rng.randrange(0xE0, 0xF5), 0x41]) for _ in range(rng.randrange(1, 12))) for _ in range(20000)]
    buf = np.frombuffer(b"".join(samples), dtype=np.uint8)
    at = 0
    for s in samples:
        try:
            s.decode("utf-8")
            ok = True
        except UnicodeDecodeError:
            ok = False
        assert kernels.is_utf8(buf, at, at + len(s)) == ok, s
        at += len(s)


@pytest.mark.parametrize("mode,encode", [(kernels.BODY_BASE64, lambda b: base64.b64encode(b)), (kernels.BODY_HEX, lambda b: b.hex().encode()), (kernels.BODY_UTF8, lambda b: b)])
def test_body_text_of_every_length(mode, encode):
    """Bodies of 0 to 99 bytes (every base64 tail) and a negative length (no body): one call, row by row equal."""
    rng = random.Random(mode)
    bodies = [bytes(rng.randrange(0x20, 0x7F) for _ in range(n)) for n in range(100)] + [b""]
    buf = np.frombuffer(b"".join(bodies), dtype=np.uint8)
    lengths = np.array([len(b) for b in bodies[:-1]] + [-1], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.int64)
    python_rows = np.zeros(len(bodies), dtype=np.bool_)
    python_rows[3] = True
    offsets, data = kernels.body_text(buf, starts, lengths, mode, python_rows)
    for i, body in enumerate(bodies):
        text = data[offsets[i] : offsets[i + 1]].tobytes()
        assert text == (b"" if i == 3 else encode(body)), i
    assert python_rows.tolist() == [i == 3 for i in range(len(bodies))]
