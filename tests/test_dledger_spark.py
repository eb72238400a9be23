"""The Spark scan over DLedger stores: the same rows as ``mqtool dump`` (records inside entries,
offsets = pos + 48), with the data files cut into small splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import copy_store, manifest, store_path
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions
from mqtool.store.records import MESSAGE_FIELDS

pyspark = pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from mqtool.scan.schema import MESSAGE_FILE_SCHEMA  # noqa: E402
from mqtool.spark import job  # noqa: E402  (needs pyspark)


@pytest.mark.parametrize("writer", ["python", "spark"])
def test_spark_messages_equal_dump_on_dledger_stores(spark, tmp_path, writer):
    """Spark's writer checks the splits from their first and last rows: it used to compare a
    record's offset with where the entry before ended (48 bytes apart) and drop every split."""
    brokers = {"b5": ("5.3.3", "dledger-small")}
    out = tmp_path / "out"
    opts = job.JobOptions(paths=[str(store_path(*v)) for v in brokers.values()], broker_names=list(brokers), output=str(out), split_size="512k", writer=writer)
    doc = job.run(opts, spark)
    assert doc["rejected_splits"] == [] and doc["splits"] == 4
    rows = pq.read_table(out / "messages", schema=MESSAGE_FILE_SCHEMA).to_pylist()
    for broker, (version, name) in brokers.items():
        got = sorted((r for r in rows if r["broker"] == broker), key=lambda r: r["offset"])
        result = CliRunner().invoke(app, ["dump", str(store_path(version, name)), "--format", "jsonl"])
        expected = [json.loads(line) for line in result.stdout.splitlines()]
        assert [{k: {**r, "properties": dict(r["properties"])}[k] for k in MESSAGE_FIELDS if k != "body"} for r in got] == [
            {k: e[k] for k in MESSAGE_FIELDS if k != "body"} for e in expected
        ]
        assert [r["msg_id"] for r in got] == [x["msgId"] for x in manifest(version, name)["messages"]]


def test_a_damaged_data_file_ends_the_log_as_dump_reads_it(spark, tmp_path, capsys):
    """An entry of the first data file broken: DLedger's recovery (``DLedgerMmapFileStore.recover``)
    and `mqtool dump` end the log there. Before, the job read each data file up to its own damage:
    the second file's records were in the output, and nothing was said on stderr."""
    root = copy_store("4.9.7", "dledger-small", tmp_path)
    data = root / "dledger-n0" / "data" / f"{0:020d}"
    dump = lambda: CliRunner().invoke(app, ["dump", str(root), "--format", "jsonl"])  # noqa: E731
    entry = json.loads(dump().stdout.splitlines()[2])["offset"] - 48  # the third record's entry header
    raw = bytearray(data.read_bytes())
    raw[entry : entry + 8] = b"\x00\x00\x00\x10\x12\x34\x56\x78"  # its magic broken
    data.write_bytes(bytes(raw))
    result = dump()
    expected = [json.loads(line) for line in result.stdout.splitlines()]
    stopped = [line.removeprefix("mqtool: ") for line in result.stderr.splitlines() if line.startswith("mqtool: stopped")]
    assert len(expected) == 2 and len(stopped) == 1
    out = tmp_path / "out"
    capsys.readouterr()
    doc = job.run(job.JobOptions(paths=[str(root)], broker_names=["b"], output=str(out), split_size="256k"), spark)
    got = sorted(pq.read_table(out / "messages", schema=MESSAGE_FILE_SCHEMA).to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in got] == [e["offset"] for e in expected] and doc["rejected_splits"]
    assert f"mqtool-scan: b: {stopped[0]}" in capsys.readouterr().err.splitlines()


def test_verify_finds_what_mqtool_verify_finds_on_dledger_stores(spark, tmp_path):
    """`--mode verify` ran the classic record walk on DLedger data files: every store, sound or not, got
    one `damaged-range` at 0 (an entry header is no record) and 0 records. Each data file is now walked
    by `mqtool verify`'s own DLedger check (``analyze_data_file``) in a Spark task and stitched by its
    ``DLedgerLogCheck.run``: the same findings, records and logical end, with damage in either file and
    where the second file's first entry does not follow the first file's last (an index the walk carries)."""
    def broken(version: str, name: str, changes) -> Path:
        root = copy_store(version, name, tmp_path / version)
        msgs = manifest(version, name)["messages"]
        for file, number, at, change in changes:
            entry = [m["dledgerEntry"] for m in msgs if m["dledgerEntry"]["file"].endswith(f"{file << 20:020d}")][number]
            path = root / "dledger-n0" / entry["file"]
            raw = bytearray(path.read_bytes())
            p = entry["filePosition"] + at
            raw[p : p + 8] = change(raw[p : p + 8])
            path.write_bytes(bytes(raw))
        return root

    flip = lambda b: bytes([b[0] ^ 0xFF]) + b[1:]  # noqa: E731
    magic = lambda b: b"\x12\x34\x56\x78" + b[4:]  # noqa: E731
    stores = {
        "a": broken("4.9.7", "dledger-small", [(0, 30, 48 + 120, flip), (0, 60, 48 + 4, magic), (1, 10, 0, magic)]),  # body, record, entry
        "b": broken("5.3.3", "dledger-small", [(1, 0, 8, lambda b: (int.from_bytes(b, "big") + 5).to_bytes(8, "big"))]),  # entry index
        "c": store_path("5.3.3", "dledger-crashed-cqloss"),
    }
    out = tmp_path / "out"
    doc = job.run(job.JobOptions(paths=[str(p) for p in stores.values()], broker_names=list(stores), output=str(out), mode="verify"), spark)
    rows = pq.read_table(out / "findings").to_pylist()
    for broker, root in stores.items():
        with Store.open(root) as store:
            run = Verification(store, VerifyOptions(checks=("commitlog",)))
            expected = sorted(((f.kind, f.offset, f.message) for f in run.findings()), key=str)
        assert sorted(((r["kind"], r["offset"], r["message"]) for r in rows if r["broker"] == broker), key=str) == expected
        [got] = [b for b in doc["brokers"] if b["broker"] == broker]
        summary = run.summary
        assert (got["records"], got["logical_end"], got["end_reason"]) == (summary.records, summary.logical_end, summary.end_reason)
        kinds = {kind for kind, _, _ in expected}
        assert {"a": kinds >= {"crc-mismatch", "dledger-record", "dledger-entry"},
                "b": ("dledger-entry", 1 << 20) in {e[:2] for e in expected},  # at the second file's first entry
                "c": kinds == {"dledger-checkpoint"}}[broker]  # c: sound but for its checkpoint



@pytest.mark.parametrize("edge", [None, 0, 24])
def test_the_job_reads_on_past_damage_a_dledger_broker_keeps_as_dump_does(spark, tmp_path, capsys, edge):
    """DLedger's recovery checks entry headers only, from its start file on (§15.4), and keeps the log past a damaged record
    in a sound entry (``record``: dledger-small, the TOTALSIZE of entry 300's record changed; ``records``: of entries 300 and
    301) and past an entry whose header alone is broken before its start file (``header``: ``relaid_store``, 8 data files;
    the record inside is served too): `mqtool dump` reads on (``walk_resume``, ``loose_walk``). Before: the job's split
    reader stopped there, its line said "the broker would cut the log here; --keep-going reads past it" and the later
    splits were dropped "past the end of the log ..., where the broker's recovery cuts it". Now the splits read on with the
    same rows and lines as `mqtool dump`. With a split boundary ``edge`` bytes before the (first) damaged entry (0: at it;
    24: inside the entry before), the entry is the first of its split. Before, there: with a broken header no split read
    the record inside (the split's resynchronisation passes the broken header, the split before stops at its boundary)
    while the line still said ``skipped [pos, pos+48)``; with ``records`` the split was dropped. ``records`` also had one
    line for the two ranges, where dump has one for each. The three stores are brokers of one job where their split size
    is the same (each broker's rows, lines and counts its own), rather than a job each."""
    from test_dledger import _broken_entry_header, _patch

    stores, expected, skipped = {}, {}, {}  # stores: damage -> (root, split size)
    for damage in ("record", "records", "header"):
        (tmp_path / damage).mkdir()
        if damage.startswith("record"):
            root = copy_store("4.9.7", "dledger-small", tmp_path / damage)
            entries = [m["dledgerEntry"] for m in manifest("4.9.7", "dledger-small")["messages"][300 : 300 + (damage == "records") + 1]]
            for e in entries:
                _patch(root / "dledger-n0" / e["file"], e["filePosition"] + 48, (e["bodySize"] + 1).to_bytes(4, "big"))
            position = entries[0]["filePosition"]  # in its data file
        else:
            root, _, pos, _ = _broken_entry_header(tmp_path / damage, "4.9.7")
            position = pos - (1 << 18)  # in the second data file
        stores[damage] = root, "128k" if edge is None else str(position - edge)
        result = CliRunner().invoke(app, ["dump", str(root), "--format", "jsonl"])
        expected[damage] = [json.loads(line)["offset"] for line in result.stdout.splitlines()]
        skipped[damage] = [line.removeprefix("mqtool: ") for line in result.stderr.splitlines() if line.startswith("mqtool: skipped")]
        assert (len(skipped[damage]), len(expected[damage])) == {"record": (1, 699), "records": (2, 698), "header": (1, 700)}[damage]
    for split_size in sorted({size for _, size in stores.values()}):
        brokers = {damage: root for damage, (root, size) in stores.items() if size == split_size}
        for mode in ("messages", "stats"):
            capsys.readouterr()
            out = tmp_path / f"{mode}-{split_size}"
            paths = [str(p) for p in brokers.values()]
            doc = job.run(job.JobOptions(paths=paths, broker_names=list(brokers), output=str(out), split_size=split_size, mode=mode), spark)
            assert doc["rejected_splits"] == []
            err = set(capsys.readouterr().err.splitlines())
            table = pq.read_table(out / "messages", schema=MESSAGE_FILE_SCHEMA) if mode == "messages" else pq.read_table(out / "queues")
            rows = table.to_pylist()
            for broker in brokers:
                assert [d["message"] for d in doc["damage"] if d["broker"] == broker] == skipped[broker]
                assert {f"mqtool-scan: {broker}: {line}" for line in skipped[broker]} <= err
                if mode == "messages":
                    assert sorted(r["offset"] for r in rows if r["broker"] == broker) == expected[broker]
                else:
                    assert sum(r["messages"] for r in rows if r["broker"] == broker) == len(expected[broker])


def test_the_job_reads_what_dump_reads_at_a_stale_index_and_a_cut_after_damage(spark, tmp_path, capsys):
    """``damaged_entries`` in data file 6, which DLedger's recovery walks, with a split boundary at the middle entry: ``a``
    no damage, every unit of its ``index/`` on the last byte of its entry (stale); ``b`` that entry's record damaged and the
    next entry's header broken, where DLedger's recovery cuts the log; ``c`` the same with the units from there on placing
    the entries past the data (stale: the recovery starts its walk at an earlier file). Before: ``a`` lost 406 of its 700
    messages without a word (a split took a stale unit for its first entry), ``b`` and ``c`` kept 646 messages where dump
    prints 613 (the splits past the cut) and said one range where dump says "skipped" then "stopped"."""
    from test_dledger import damaged_entries

    stores = {}
    for broker, damage, index in (("a", "none", "last-byte"), ("b", "record-header", None), ("c", "record-header", "past")):
        (tmp_path / broker).mkdir()
        stores[broker], (_, first, _, _) = damaged_entries(tmp_path / broker, damage, 6, index)
    out = tmp_path / "out"
    capsys.readouterr()
    doc = job.run(job.JobOptions(paths=[str(p) for p in stores.values()], broker_names=list(stores), output=str(out),
                                 split_size=str(first - (6 << 18))), spark)
    rows = pq.read_table(out / "messages", schema=MESSAGE_FILE_SCHEMA).to_pylist()
    err = capsys.readouterr().err.splitlines()
    for broker, root in stores.items():
        result = CliRunner().invoke(app, ["dump", str(root), "--format", "jsonl"])
        expected = [json.loads(line)["offset"] for line in result.stdout.splitlines()]
        said = ("mqtool: skipped", "mqtool: stopped")
        lines = [line.removeprefix("mqtool: ") for line in result.stderr.splitlines() if line.startswith(said)]
        assert len(expected) == {"a": 700, "b": 613, "c": 613}[broker] and len(lines) == {"a": 0, "b": 2, "c": 2}[broker]
        assert sorted(r["offset"] for r in rows if r["broker"] == broker) == expected
        assert [d["message"] for d in doc["damage"] if d["broker"] == broker] == lines
        assert {f"mqtool-scan: {broker}: {line}" for line in lines} <= set(err)


def test_the_job_reads_every_record_past_a_broken_header_a_stale_index_does_not_place(spark, tmp_path, capsys):
    """``stale_index_store``: an entry header broken before DLedger's start file, ``index/`` zeroed before it (``z``) or
    shifted by 7 bytes in its file (``s``), with a split boundary inside the broken entry's header. The job reads the 700
    messages `mqtool dump` reads and says its one range. Before: both dropped the rest of that data file (658 of 700), and
    with ``s`` dump said some 40 ranges, at positions no entry starts at."""
    from test_dledger import stale_index_store

    stores = {}
    for broker, index in (("z", "zeroed"), ("s", "shifted")):
        (tmp_path / broker).mkdir()
        stores[broker], placed, broken, _ = stale_index_store(tmp_path / broker, "4.9.7", index)
    out = tmp_path / "out"
    capsys.readouterr()
    doc = job.run(job.JobOptions(paths=[str(p) for p in stores.values()], broker_names=list(stores), output=str(out),
                                 split_size=str(broken + 7 - (1 << 18))), spark)
    rows = pq.read_table(out / "messages", schema=MESSAGE_FILE_SCHEMA).to_pylist()
    for broker, root in stores.items():
        result = CliRunner().invoke(app, ["dump", str(root), "--format", "jsonl"])
        expected = [json.loads(line)["offset"] for line in result.stdout.splitlines()]
        lines = [line.removeprefix("mqtool: ") for line in result.stderr.splitlines() if line.startswith("mqtool: skipped")]
        assert expected == [pos + 48 for _, pos in placed] and len(lines) == 1
        assert sorted(r["offset"] for r in rows if r["broker"] == broker) == expected
        assert [d["message"] for d in doc["damage"] if d["broker"] == broker] == lines
