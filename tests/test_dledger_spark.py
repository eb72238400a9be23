"""The Spark scan over DLedger stores: the same rows as ``mqtool dump`` (records inside entries,
offsets = pos + 48), with the data files cut into small splits."""

from __future__ import annotations

import json

import pytest
from conftest import copy_store, manifest, store_path
from typer.testing import CliRunner

from mqtool.cli import app
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
