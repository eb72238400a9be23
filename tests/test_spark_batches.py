"""The Spark scan's Arrow batches equal ``mqtool dump``'s JSON objects (Spark-free, no JVM)."""

from __future__ import annotations

import ipaddress
import json
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import VERSIONS, manifest, store_path
from mqtool.formats import commitlog as cl
from mqtool.formats.hashing import java_string_hash
from mqtool.formats.msgid import format_host
from mqtool.formats.properties import parse_properties
from mqtool.errors import BadInput, UsageError
from mqtool.store.records import MESSAGE_FIELDS, BodyEncoding, message_dict
from mqtool.scan import _kernels as kernels
from mqtool.scan.batches import MessageBatchBuilder
from mqtool.spark.inputs import broker_name_for, resolve_inputs
from mqtool.scan.filter import MessageFilter
from mqtool.spark.reader import plan_tasks, read_messages, read_stats, write_messages
from mqtool.scan.schema import MESSAGE_FILE_SCHEMA, MESSAGE_SCHEMA, SPLIT_CHECK_COLUMNS, STATS_SCHEMA, WRITTEN_SCHEMA
from mqtool.store import Store
from mqtool.store.commitlog import Segment
from mqtool.store.splits import SplitScan, check_handoffs, plan_splits

STORES = [(v, n) for v in VERSIONS for n in ("clean-small", "crashed-small")] + [("4.9.7", "rewrite-clean"), ("4.9.7", "retention-small")]


def file_row(row: dict) -> dict:
    """A ``messages`` row as a written file holds it (without the split check's columns)."""
    return {k: v for k, v in row.items() if k not in SPLIT_CHECK_COLUMNS}


def as_dump(row: dict) -> dict:
    """A batch row reduced to ``mqtool dump``'s fields (the map back to a dict, in stored order)."""
    d = {k: row[k] for k in MESSAGE_FIELDS}
    d["properties"] = dict(d["properties"])
    return d


def built_rows(store: Store, body=BodyEncoding.none, split_size=None, **kw) -> tuple[list[dict], MessageBatchBuilder]:
    builder = MessageBatchBuilder("b", legacy_properties=store.legacy_properties, delay_table=store.delay_table, body=body, **kw)
    rows = []
    for sp in plan_splits(store.commitlog.segments, split_size):
        for batch in SplitScan(sp, batch=333):
            rb = builder.build(batch, sp.offset)
            assert rb.schema.equals(builder.schema)
            rows.extend(rb.to_pylist())
    return rows, builder


def expected_rows(store: Store, body=BodyEncoding.none) -> list[dict]:
    return [message_dict(r, body, legacy_properties=store.legacy_properties, delay_table=store.delay_table) for r in store.commitlog.scan()]


@pytest.mark.parametrize("version,name", STORES)
def test_batches_equal_dump_for_every_fixture_record(version, name):
    with Store.open(store_path(version, name)) as store:
        rows, builder = built_rows(store, BodyEncoding.sha256)
        expected = expected_rows(store, BodyEncoding.sha256)
    assert builder.python_batches == 0, "the column path decides every real-broker record"
    assert [as_dump(r) for r in rows] == expected
    for r in rows:
        assert r["broker"] == "b"
        assert r["store_time"].timestamp() * 1000 == pytest.approx(r["store_timestamp"])
        assert r["born_time"].timestamp() * 1000 == pytest.approx(r["born_timestamp"])


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_batches_match_the_manifest(version):
    with Store.open(store_path(version, "clean-small")) as store:
        rows, _ = built_rows(store, BodyEncoding.sha256, split_size=100_000)
    by_offset = {r["offset"]: r for r in rows}
    messages = manifest(version, "clean-small")["messages"]
    assert len(by_offset) == len(messages)
    for m in messages:
        r = by_offset[m["commitLogOffset"]]
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"], r["uniq_key"], r["tags"], r["keys"]) == (
            m["topic"], m["queueId"], m["queueOffset"], m["msgId"], m["uniqKey"], m["tags"], m["keys"]
        )
        assert dict(r["properties"]) == m["properties"] and r["body"] == m["bodySha256"] and r["body_crc"] == m["bodyCRC"]
        if m.get("dispatched"):
            assert r["tags_code"] == m["cqTagsCode"]


def test_the_python_path_gives_the_same_batches():
    with Store.open(store_path("5.3.3", "crashed-small")) as store:
        fast, _ = built_rows(store, BodyEncoding.base64)
        slow, builder = built_rows(store, BodyEncoding.base64, force_python=True)
    assert builder.python_batches > 0 and fast == slow


def _segment_of(tmp_path, records: list[dict]) -> Segment:
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        template = next(iter(store.commitlog.scan()))._asdict()
    template.pop("offset")
    data, pos = bytearray(), 0
    for fields in records:
        raw = cl.encode_message({**template, "phys_offset": pos, **fields}, compute_crc=True)
        data += raw
        pos += len(raw)
    data += bytes((1 << 16) - len(data))
    path = tmp_path / f"{0:020d}"
    path.write_bytes(bytes(data))
    return Segment(path, 0, len(data))


ODD_RECORDS = [
    {"properties": b"TAGS\x01a\x02TAGS\x01b\x02KEYS\x01k1"},  # a repeated name: the last value wins, first position
    {"properties": b"\x01lonely\x02KEYS\x01 x  y \x02UNIQ_KEY\x01u"},  # an empty name; keys split on spaces
    {"properties": b"A\x01b\x01c\x02D\x01\x02\x02E"},  # a value holding \x01; an empty value; no separator
    {"properties": "TAGS\x01t\u00e9\U0001f600\x02K\x01\u4e3b".encode()},  # multi-byte UTF-8, an astral TAGS
    {"properties": b"TAGS\x01\xff\xfe\x02X\x01y"},  # malformed UTF-8: replaced like Java's decoder
    {"topic": b"top\xc3", "properties": b"X\x01y"},  # malformed topic
    {"topic": b"SCHEDULE_TOPIC_XXXX", "properties": b"DELAY\x013\x02TAGS\x01t"},  # delivery time as tags code
    {"topic": b"SCHEDULE_TOPIC_XXXX", "properties": b"DELAY\x01x"},  # unparsable level: no tags code
    {"sys_flag": 0x30, "born_host_address": bytes(10) + b"\xff\xff\x0a\x00\x00\x01", "store_host_address": bytes(15) + b"\x01"},
    {"body": b"", "properties": b""},
]


@pytest.mark.parametrize("legacy", [False, True])
def test_odd_records_equal_the_python_decoder(tmp_path, legacy):
    seg = _segment_of(tmp_path, ODD_RECORDS)
    store = Store.open(seg.path)
    builder = MessageBatchBuilder("b", legacy_properties=legacy, delay_table=store.delay_table, body=BodyEncoding.hex)
    rows = []
    for batch in SplitScan(plan_splits([seg])[0], batch=1):  # one record per batch: each decides its own path
        rows.extend(builder.build(batch, 0).to_pylist())
    expected = [message_dict(r, BodyEncoding.hex, legacy_properties=legacy, delay_table=store.delay_table) for r in store.commitlog.scan()]
    assert len(rows) == len(ODD_RECORDS) and [as_dump(r) for r in rows] == expected
    assert builder.python_batches >= 3  # repeated names and malformed UTF-8 take the Python decoder


def test_edges_mark_the_first_and_last_row_of_a_split():
    inputs = resolve_inputs([store_path("4.9.7", "clean-small")])
    task = plan_tasks(inputs, 300_000)[1]
    batches = list(read_messages(task))
    edges = [e for b in batches for e in b.column("split_edge").to_pylist()]
    assert len(batches) == 1 or len(edges) > 2
    assert edges[0] and edges[-1] and not any(edges[1:-1])
    assert {s for b in batches for s in b.column("split_start").to_pylist()} == {task.split.offset}


def test_the_messages_output_applies_the_filters_and_keeps_every_edge():
    """Before: the data source's messages output ignored its filter options (``topics``, ``key``...),
    every row returned. Now the rows ``MessageFilter`` drops are marked ``filtered_out`` (the split's
    edges kept for the check), or left out when the columns asked for do not include the mark."""
    from mqtool.scan.filter import MessageFilter

    task = plan_tasks(resolve_inputs([store_path("4.9.7", "clean-small")]), 300_000)[1]
    match = MessageFilter(topics=("TopicTest",))
    every = [r for b in read_messages(task) for r in b.to_pylist()]
    marked = [r for b in read_messages(task, match=match) for r in b.to_pylist()]
    assert [r["offset"] for r in marked] == [r["offset"] for r in every]
    assert [r["filtered_out"] for r in marked] == [r["topic"] != "TopicTest" for r in every] and any(r["filtered_out"] for r in marked)
    assert [r["split_edge"] for r in marked] == [r["split_edge"] for r in every]
    left = [r for b in read_messages(task, columns=["offset", "topic"], match=match) for r in b.to_pylist()]
    assert left == [{"offset": r["offset"], "topic": r["topic"]} for r in every if r["topic"] == "TopicTest"]


@pytest.mark.parametrize("name", ["dledger-small", "clean-small"])
def test_split_edges_pass_the_handoff_check_as_the_scan_bounds_do(name):
    """The first and last rows of each split (what Spark's writer observes) give the handoff check
    the bounds ``SplitScan`` gives it, a DLedger record counted from its entry's header."""
    tasks = plan_tasks(resolve_inputs([store_path("5.3.3", name)]), 64 << 10)
    by_rows, by_scan = [], []
    for task in tasks:
        rows = [r for b in read_messages(task, columns=["offset", "size"]) for r in b.to_pylist()]
        scan = task.scan()
        sum(1 for _ in scan)
        by_scan.append(task.result(scan.first, scan.exit))
        by_rows.append(task.result_of_rows(rows[0]["offset"], rows[-1]["offset"] + rows[-1]["size"]) if rows else task.result(None, None))
    assert by_rows == by_scan and check_handoffs(by_rows) == []


@pytest.mark.parametrize("name, read_past", [("clean-small", True), ("crashed-small", False)])
@pytest.mark.parametrize("split_size", [None, 64 << 10], ids=["one-per-segment", "64k"])
def test_splits_read_damage_as_dump_reads_it(tmp_path, name, read_past, split_size):
    """A zeroed page inside segment 1. Clean store: the broker's next start scans from the last
    segment, never reads it and serves the records after it, which `mqtool dump` prints; the splits
    used to lose them (the rest of the segment, or the splits after the page, dropped as stale).
    Crashed store (abort file: the scan starts at the first segment): the broker cuts the log at
    the page and `dump` stops there; the splits used to read the later segments too."""
    from conftest import copy_store
    from typer.testing import CliRunner

    from mqtool.cli import app
    from mqtool.store.splits import check_splits

    root = copy_store("5.3.3", name, tmp_path)
    segment = sorted((root / "commitlog").iterdir())[1]
    data = bytearray(segment.read_bytes())
    data[200_000:204_096] = bytes(4096)
    segment.write_bytes(bytes(data))
    dumped = CliRunner().invoke(app, ["dump", str(root), "--format", "jsonl"])
    expected = [json.loads(line)["offset"] for line in dumped.stdout.splitlines()]
    tasks = plan_tasks(resolve_inputs([root]), split_size)
    results, rows = [], {}
    for task in tasks:
        scan = task.scan()
        rows[task.split.offset] = [o for batch in scan for o in task.builder(columns=["offset"]).build(batch, task.split.offset).column("offset").to_pylist()]
        results.append(task.result(scan.first, scan.exit))
    rejected = {r.start for r in check_splits(results, {(r.segment, r.start): t.split for r, t in zip(results, tasks)})}
    got = [o for t in tasks if t.split.offset not in rejected for o in rows[t.split.offset]]
    assert got == expected and (expected[-1] > 3 << 20) == read_past


def test_inputs_group_segments_by_broker():
    root = store_path("5.3.3", "clean-small")
    one = resolve_inputs([root / "commitlog" / f"{1 << 20:020d}", root / "commitlog" / f"{0:020d}"])
    assert [b.broker for b in one] == ["clean-small"] and [s.base_offset for s in one[0].segments] == [0, 1 << 20]
    two = resolve_inputs([root, store_path("4.9.7", "clean-small")], ["x", "y"])
    assert [(b.broker, b.version, len(b.segments)) for b in two] == [("x", "5.3.3", 5), ("y", "4.9.7", 5)]
    with pytest.raises(UsageError, match="--broker-name"):
        resolve_inputs([root, store_path("4.9.7", "clean-small")])  # two stores called clean-small
    with pytest.raises(UsageError, match="both hold segment 0"):
        resolve_inputs([root, store_path("4.9.7", "clean-small")], ["same"])
    with pytest.raises(BadInput):
        resolve_inputs([root / "nothing-here"])


def test_broker_names_come_from_the_store_directory(tmp_path):
    root = store_path("5.3.3", "clean-small")
    assert broker_name_for(root) == broker_name_for(root / "commitlog") == broker_name_for(root / "commitlog" / f"{0:020d}") == "clean-small"
    store_dir = tmp_path / "broker-a" / "store"
    store_dir.mkdir(parents=True)
    assert broker_name_for(store_dir) == "broker-a"


# ---- the kernels against the Python reference functions ------------------------------------------

property_bytes = st.lists(st.sampled_from([b"a", b"b", b"\x01", b"\x02", b" ", "\u00e9".encode(), b"TAGS", b"KEYS"]), max_size=24).map(b"".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(property_bytes, min_size=1, max_size=6), st.booleans())
def test_property_kernel_equals_the_broker_reader(strings, legacy):
    buf = np.frombuffer(b"".join(strings) or b"\0", dtype=np.uint8)
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    counts, ns, nl, vs, vl, special, fallback = kernels.parse_properties(buf, starts, lengths, legacy, kernels.KEY_TAGS, kernels.KEY_KEYS, kernels.KEY_UNIQ, kernels.KEY_DELAY)
    k = 0
    for i, s in enumerate(strings):
        items = [(bytes(buf[ns[j] : ns[j] + nl[j]]).decode(), bytes(buf[vs[j] : vs[j] + vl[j]]).decode()) for j in range(k, k + counts[i])]
        k += counts[i]
        if not fallback[i]:
            assert dict(items) == parse_properties(s, legacy=legacy) and len(items) == len(dict(items))
            names = [n for n, _ in items]
            assert special[i, 0] == (k - counts[i] + names.index("TAGS") if "TAGS" in names else -1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=8))
def test_java_hash_kernel_equals_string_hash_code(texts):
    raw = [t.encode("utf-8", "surrogatepass") for t in texts]
    if any(b"\xed\xa0" <= r[i : i + 2] <= b"\xed\xbf" for r in raw for i in range(len(r))):
        return  # lone surrogates are not UTF-8
    buf = np.frombuffer(b"".join(raw) or b"\0", dtype=np.uint8)
    lengths = np.array([len(r) for r in raw], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    assert kernels.java_hash_spans(buf, starts, lengths).tolist() == [java_string_hash(t) for t in texts]


def test_java_hash_kernel_over_ascii_runs_of_every_length_and_a_wide_character_anywhere():
    """The kernel hashes four ASCII bytes a step, others one character at a time: every run length
    up to 40, with a two-, three- and four-byte character at every place, equals ``String.hashCode``."""
    texts = ["".join(chr(33 + (7 * i + n) % 94) for i in range(n)) for n in range(41)]
    texts += [t[:k] + wide + t[k:] for t in texts[::5] for k in range(len(t) + 1) for wide in ("é", "主", "𝄞")]
    raw = [t.encode("utf-8") for t in texts]
    buf = np.frombuffer(b"".join(raw), dtype=np.uint8)
    lengths = np.array([len(r) for r in raw], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    assert kernels.java_hash_spans(buf, starts, lengths).tolist() == [java_string_hash(t) for t in texts]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0xDB8, 0x2001]), min_size=8, max_size=8), st.integers(-(2**31), 2**31 - 1)), min_size=1, max_size=20))
def test_host_kernels_equal_format_host(hosts):
    raw = b"".join(b"".join(h.to_bytes(2, "big") for h in hextets) + port.to_bytes(4, "big", signed=True) for hextets, port in hosts)
    buf = np.frombuffer(raw, dtype=np.uint8)
    pos = np.arange(len(hosts), dtype=np.int64) * 20
    n = len(hosts)
    wide = np.ones(n, dtype=np.bool_)
    offsets, data, mapped = kernels.format_hosts(buf, pos, np.zeros(n, dtype=np.int64), wide)
    for i, (hextets, port) in enumerate(hosts):
        address = raw[i * 20 : i * 20 + 16]
        assert mapped[i] == (ipaddress.ip_address(address).ipv4_mapped is not None)
        if not mapped[i]:
            assert bytes(data[offsets[i] : offsets[i + 1]]).decode() == format_host(address, port)
    wide[::2] = False  # a mix of layouts in one pass: IPv4 reads the last 4 address bytes and the port
    offsets, data, mapped = kernels.format_hosts(buf, pos, np.where(wide, 0, 12).astype(np.int64), wide)
    for i, (hextets, port) in enumerate(hosts):
        if not wide[i]:
            assert bytes(data[offsets[i] : offsets[i + 1]]).decode() == format_host(raw[i * 20 + 12 : i * 20 + 16], port)
        elif not mapped[i]:
            assert bytes(data[offsets[i] : offsets[i + 1]]).decode() == format_host(raw[i * 20 : i * 20 + 16], port)


def test_schema_is_what_the_batches_hold():
    assert MESSAGE_SCHEMA.names[1 : 1 + len(MESSAGE_FIELDS)] == list(MESSAGE_FIELDS)
    assert MESSAGE_SCHEMA.field("properties").type == pa.map_(pa.string(), pa.string())


@pytest.mark.parametrize("columns", [["broker", "offset", "size", "topic", "store_time", "split_start", "split_edge"], ["tags_code", "offset"], ["msg_id", "born_host", "keys"]])
def test_projected_batches_hold_the_same_values(columns):
    with Store.open(store_path("5.3.3", "clean-small")) as store:
        full, _ = built_rows(store)
        part, _ = built_rows(store, columns=columns)
    assert list(part[0]) == [f.name for f in MESSAGE_SCHEMA if f.name in columns]
    assert part == [{k: r[k] for k in part[0]} for r in full]


def test_reader_stats_aggregate_exactly_the_kept_messages():
    root = store_path("5.3.3", "clean-small")
    with Store.open(root) as store:
        rows = expected_rows(store)
    tasks = plan_tasks(resolve_inputs([root]), 300_000)
    since = rows[700]["store_timestamp"]
    keep = MessageFilter(topics=("TopicTest", "orders_eu-west-1"), since=since)
    got = [r for t in tasks for b in read_stats(t, keep) for r in b.to_pylist()]
    assert all(b.schema.equals(STATS_SCHEMA) for t in tasks[:2] for b in read_stats(t, keep))
    kept = [r for r in rows if r["topic"] in keep.topics and r["store_timestamp"] >= since]
    per_group = Counter((r["topic"], r["queue_id"], r["store_timestamp"] // 3_600_000) for r in kept)
    totals: Counter = Counter()
    for r in got:
        if r["messages"]:
            totals[(r["topic"], r["queue_id"], int(r["hour"].timestamp()) // 3600)] += r["messages"]
    assert totals == per_group
    assert sum(r["bytes"] for r in got) == sum(r["size"] for r in kept)
    assert sum(r["dispatched"] for r in got) == sum(r["transaction_type"] in ("NOT_TYPE", "COMMIT") for r in kept)
    # every split that read records reports its bounds, even when nothing was kept
    nothing = [r for t in tasks for b in read_stats(t, MessageFilter(topics=("no-such-topic",))) for r in b.to_pylist()]
    assert all(r["messages"] == 0 and r["topic"] is None for r in nothing)
    firsts = {r["split_start"]: (r["first_offset"], r["exit_offset"]) for r in nothing}
    for t in tasks:
        scan = SplitScan(t.split)
        for _ in scan:
            pass
        assert firsts.get(t.split.offset) == ((scan.first, scan.exit) if scan.records else None)


def test_written_files_hold_what_the_reader_yields(tmp_path):
    root = store_path("4.9.7", "clean-small")
    tasks = plan_tasks(resolve_inputs([root]), 300_000)
    keep = MessageFilter(topics=("TopicTest",), key="ключ-2")
    kept_rows = 0
    for task in tasks:
        read = [r for b in read_messages(task, BodyEncoding.sha256) for r in b.to_pylist()]
        rows = [b for b in write_messages(task, str(tmp_path), BodyEncoding.sha256)]
        again = [b for b in write_messages(task, str(tmp_path), BodyEncoding.sha256, keep)]
        if not read:
            assert rows == again == []
            continue
        assert len(rows) == len(again) == 1 and rows[0].schema.equals(WRITTEN_SCHEMA)
        row, kept = rows[0].to_pylist()[0], again[0].to_pylist()[0]
        assert row["file"] != kept["file"]  # each attempt its own file
        scan = SplitScan(task.split)
        for _ in scan:
            pass
        assert (row["first_offset"], row["exit_offset"], row["rows_read"]) == (scan.first, scan.exit, len(read))
        written = pq.read_table(row["file"])
        assert written.schema.equals(MESSAGE_FILE_SCHEMA) and written.to_pylist() == [file_row(r) for r in read]
        expected = [r for r in read if r["topic"] == "TopicTest" and "ключ-2" in (r["keys"] or [])]
        assert kept["rows_read"] == len(read) and kept["rows_written"] == len(expected)
        kept_rows += len(expected)
        assert (pq.read_table(kept["file"]).to_pylist() if kept["file"] else []) == [file_row(r) for r in expected]
    assert kept_rows  # the filter keeps some rows of some splits, none of others

