"""``spark/mqtool_scan.py`` in local mode against the real-broker fixtures and ``mqtool``'s own
commands: messages equal ``mqtool dump``, stats equal ``mqtool info``, verify equals ``mqtool
verify``, tiny splits equal one split per file. One SparkSession for the whole file, few jobs.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from argparse import Namespace
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import ROOT, copy_store, manifest, store_path
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_USAGE
from mqtool.store.records import MESSAGE_FIELDS
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions

pyspark = pytest.importorskip("pyspark")

from mqtool.spark import job  # noqa: E402  (needs pyspark)
from mqtool.scan.schema import MESSAGE_FILE_SCHEMA, MESSAGE_SCHEMA  # noqa: E402

SCRIPT = ROOT / "spark" / "mqtool_scan.py"
BROKERS = {"a": ("4.9.7", "clean-small"), "b": ("5.3.3", "clean-small"), "c": ("4.9.7", "rewrite-clean")}
runner = CliRunner()
# the JVMs the jobs run as a user starts them (``python mqtool_scan.py``, ``spark-submit``) stop their JIT at C1, as
# conftest's session does: a third less CPU for a short job, its logging untouched
QUICK_JIT = {"JAVA_TOOL_OPTIONS": f"{os.environ.get('JAVA_TOOL_OPTIONS', '')} -XX:TieredStopAtLevel=1".strip()}


def options(out: Path, brokers=BROKERS, **kw) -> job.JobOptions:
    return job.JobOptions(
        paths=[str(store_path(*v)) for v in brokers.values()],
        broker_names=list(brokers),
        output=str(out),
        **kw,
    )


@lru_cache(maxsize=None)
def dump_rows(version: str, name: str) -> list[dict]:
    """``mqtool dump`` of a fixture store (read only: the same store is compared in several tests)."""
    result = runner.invoke(app, ["dump", str(store_path(version, name)), "--format", "jsonl", "--body", "sha256"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def parquet_rows(directory: Path) -> list[dict]:
    return pq.read_table(directory, schema=MESSAGE_FILE_SCHEMA).to_pylist()


def json_rows(directory: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("part-*.json")) for line in f.read_text(encoding="utf-8").splitlines()]


def by_broker(rows: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["broker"], r["offset"])):
        grouped.setdefault(r["broker"], []).append(r)
    return grouped


@pytest.fixture(scope="module")
def one_split_per_file(spark, tmp_path_factory):
    out = tmp_path_factory.mktemp("messages")
    doc = job.run(options(out, body="sha256"), spark)
    return doc, by_broker(parquet_rows(out / "messages"))


def test_messages_equal_dump_and_the_manifest(one_split_per_file):
    doc, rows = one_split_per_file
    assert doc["split_size"] is None and doc["splits"] == 12 and doc["rejected_splits"] == []
    for broker, (version, name) in BROKERS.items():
        expected = dump_rows(version, name)
        got = rows[broker]
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            g = {**g, "properties": dict(g["properties"])}
            assert {k: g[k] for k in MESSAGE_FIELDS} == e
            assert g["store_time"].timestamp() * 1000 == e["store_timestamp"] and g["split_start"] <= g["offset"]
        m = manifest(version, name)
        if name == "clean-small":
            assert [r["msg_id"] for r in got] == [x["msgId"] for x in sorted(m["messages"], key=lambda x: x["commitLogOffset"])]
    assert doc["rows_written"] == doc["rows_read"] == sum(len(v) for v in rows.values())


@pytest.mark.parametrize("fmt, writer", [("json", "auto"), ("parquet", "auto"), ("parquet", "spark")])
def test_tiny_splits_and_filters_change_nothing_but_drop_stale_splits(spark, tmp_path, one_split_per_file, stale_rows, fmt, writer):
    _, reference = one_split_per_file
    since = reference["a"][100]["store_timestamp"]
    topics = ["TopicTest", "orders_eu-west-1"]
    brokers = {b: BROKERS[b] for b in ("a", "c")}
    doc = job.run(options(tmp_path, brokers, format=fmt, writer=writer, split_size="128k", topics=topics, since=since, body="sha256"), spark)
    assert doc["split_size"] == 128 << 10 and doc["splits"] == 7 * 8
    rejected = doc["rejected_splits"]
    assert rejected and {r["broker"] for r in rejected} == {"c"}  # stale records after rewrite-clean's logical end
    assert all(r["first_offset"] > r["expected_offset"] for r in rejected)
    got = by_broker(json_rows(tmp_path / "messages") if fmt == "json" else parquet_rows(tmp_path / "messages"))
    for broker in brokers:
        assert [(r["offset"], r["msg_id"], r["body"], r["keys"], r["tags_code"]) for r in got[broker]] == [
            (r["offset"], r["msg_id"], r["body"], r["keys"], r["tags_code"]) for r in reference[broker]
            if r["topic"] in topics and r["store_timestamp"] >= since
        ]
    assert doc["rows_written"] == sum(len(v) for v in got.values())
    assert doc["rows_read"] == sum(len(reference[b]) for b in brokers) + sum(stale_rows[r["split_start"]] for r in rejected)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["rejected_splits"] == rejected
    assert (tmp_path / "messages" / "_SUCCESS").exists() and not list((tmp_path / "messages").glob("_temporary*"))


@pytest.fixture(scope="module")
def stale_rows(spark) -> dict[int, int]:
    """The rows each 128 KiB split of broker c reads (a rejected split's: its stale records), counted by the
    data source itself, once for the three runs that reject them."""
    from mqtool.spark.source import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    root = store_path(*BROKERS["c"])
    df = spark.read.format("rocketmq").option("splitSize", str(128 << 10)).option("columns", "split_start").load(str(root))
    return {r["split_start"]: r["count"] for r in df.groupBy("split_start").count().collect()}


def test_the_tasks_writer_keeps_the_schema_when_nothing_matches(spark, tmp_path):
    doc = job.run(options(tmp_path, {"a": BROKERS["a"]}, topics=["no-such-topic"]), spark)
    assert doc["rows_written"] == 0 and doc["rows_read"] == len(dump_rows(*BROKERS["a"]))
    files = list((tmp_path / "messages").glob("part-*.parquet"))
    assert len(files) == 1 and pq.read_table(files[0]).schema.equals(MESSAGE_FILE_SCHEMA)
    assert spark.read.parquet(str(tmp_path / "messages")).count() == 0


@lru_cache(maxsize=None)
def info_doc(path) -> dict:
    """``mqtool info`` of a fixture store (read only: each is compared in both split sizes)."""
    result = runner.invoke(app, ["info", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("split_size, dropped", [("256k", {"rewrite"}), (None, set())], ids=["tiny-splits", "one-per-file"])
def test_stats_equal_info(spark, tmp_path, capsys, split_size, dropped):
    brokers = {"clean": ("5.3.3", "clean-small"), "retention": ("4.9.7", "retention-small"), "crashed": ("5.3.3", "crashed-small"), "rewrite": ("4.9.7", "rewrite-clean")}
    doc = job.run(options(tmp_path, brokers, mode="stats", split_size=split_size), spark)
    printed = capsys.readouterr().out
    assert "brokers" in printed and "queues" in printed and "hourly" in printed
    assert {r["broker"] for r in doc["rejected_splits"]} == dropped
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["brokers", "hourly", "queues", "report.json"]  # no staging left
    queues = pq.read_table(tmp_path / "queues").to_pylist()
    hourly = pq.read_table(tmp_path / "hourly").to_pylist()
    summary = {r["broker"]: r for r in pq.read_table(tmp_path / "brokers").to_pylist()}
    for broker, (version, name) in brokers.items():
        info = info_doc(store_path(version, name))
        dump = dump_rows(version, name)
        s = summary[broker]
        assert (s["min_offset"], s["max_offset"]) == (info["commitlog"]["min_offset"], info["commitlog"]["max_offset"])
        assert s["messages"] == len(dump) and s["bytes"] == sum(r["size"] for r in dump)
        mine = {(q["topic"], q["queue_id"]): q for q in queues if q["broker"] == broker}
        assert sum(q["messages"] for q in mine.values()) == len(dump)
        per_hour = Counter((r["topic"], r["store_timestamp"] // 3_600_000) for r in dump)
        assert {(h["topic"], int(h["hour"].timestamp()) // 3600): h["messages"] for h in hourly if h["broker"] == broker} == per_hour
        if name in ("crashed-small", "rewrite-clean"):
            continue  # consume queues behind (crash) or past (rewrite) the commit log until the broker recovers
        for q in info["queues"]:
            row = mine.get((q["topic"], q["queue_id"]))
            if not q["messages"]:
                assert row is None or not row["dispatched"]
            elif row is None or not row["dispatched"]:
                assert name == "retention-small" and q["min_offset"] == 0  # all its segments expired: the broker keeps min 0
            else:
                assert (row["dispatched"], row["min_queue_offset"], row["max_queue_offset"] + 1) == (q["messages"], q["min_offset"], q["max_offset"])


def _damage(version: str, tmp_path: Path) -> Path:
    root = copy_store(version, "clean-small", tmp_path)
    segments = sorted((root / "commitlog").iterdir())
    one = bytearray(segments[1].read_bytes())
    one[5000] ^= 0xFF  # inside a body: a CRC mismatch
    segments[1].write_bytes(bytes(one))
    two = bytearray(segments[2].read_bytes())
    rows = [r.offset - int(segments[2].name) for r in Store.open(root).commitlog.scan(int(segments[2].name), int(segments[2].name) + 200_000)]
    two[rows[50] : rows[50] + 8] = b"\x00\x00\x00\x10\x12\x34\x56\x78"  # a broken record: the chain breaks, records resume
    segments[2].write_bytes(bytes(two))
    return root


def test_verify_finds_what_mqtool_verify_finds(spark, tmp_path):
    stores = {v: _damage(v, tmp_path) for v in ("4.9.7", "5.3.3")}
    out = tmp_path / "out"
    o = job.JobOptions(paths=[str(p) for p in stores.values()], broker_names=list(stores), output=str(out), mode="verify", format="csv", keep_going=True)
    doc = job.run(o, spark)
    assert doc["unsound"]
    rows = [r for f in (out / "findings").glob("part-*.csv") for r in list(csv.reader(io.StringIO(f.read_text())))[1:]]
    for version, root in stores.items():
        with Store.open(root) as store:
            expected = [f for f in Verification(store, VerifyOptions(checks=("commitlog",), keep_going=True)).findings()]
        assert {f.kind for f in expected} >= {"crc-mismatch", "damaged-range"}
        assert sorted((r[1], int(r[4])) for r in rows if r[0] == version) == sorted((f.kind, f.offset) for f in expected)


def test_verify_goes_past_damage_the_broker_never_reads_as_mqtool_verify_does(spark, tmp_path):
    """Without --keep-going too: a destroyed record in segment 0, before the segment the broker's
    next start scans from, does not end the check (the broker serves the records after it), so the
    CRC mismatch in segment 1 is found by both; the Spark job used to stop at the first damage."""
    root = _damage("4.9.7", tmp_path)
    first = root / "commitlog" / f"{0:020d}"
    data = bytearray(first.read_bytes())
    data[:8] = b"\xff" * 8  # the first record's TOTALSIZE and MAGICCODE
    first.write_bytes(bytes(data))
    out = tmp_path / "out"
    o = job.JobOptions(paths=[str(root)], broker_names=["b"], output=str(out), mode="verify", format="csv")
    job.run(o, spark)
    rows = [r for f in (out / "findings").glob("part-*.csv") for r in list(csv.reader(io.StringIO(f.read_text())))[1:]]
    with Store.open(root) as store:
        expected = list(Verification(store, VerifyOptions(checks=("commitlog",))).findings())
    assert [(f.kind, f.offset) for f in expected][:2] == [("damaged-range", 0), ("crc-mismatch", expected[1].offset)]
    assert sorted((r[1], int(r[4])) for r in rows) == sorted((f.kind, f.offset) for f in expected)


def test_verify_reports_the_end_mqtool_verify_reports(spark, tmp_path):
    """A body byte flipped in the segment the broker's normal recovery scans from: the broker cuts
    the log at that record (checkCRCOnRecover), and the brokers table and report say that end, as
    `mqtool verify` does (before: the end of the record chain, 4790502 "zeros", past the cut). And a store
    4.9.7 refuses (a segment of the wrong length) whose log left ends at a blank in its last segment: that
    blank, as `mqtool verify` says (before: the segment's end)."""
    from mqtool.formats.commitlog import encode_blank

    refused = copy_store("4.9.7", "config-real", tmp_path / "refused")
    os.truncate(refused / "commitlog" / f"{1 << 20:020d}", 271493)
    msgs = manifest("4.9.7", "config-real")["messages"]
    present = sorted(m["commitLogOffset"] for m in msgs if m["present"] and m["commitLogOffset"] >= 2 << 20)
    blank = present[len(present) // 2]
    with open(refused / "commitlog" / f"{2 << 20:020d}", "r+b") as f:
        f.seek(blank - (2 << 20))
        f.write(encode_blank((3 << 20) - blank))
    root = copy_store("4.9.7", "clean-small", tmp_path)
    msgs = sorted(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    m = next(m for m in msgs if m["commitLogOffset"] >= 2 << 20 and m["bodyLength"] > 200)
    segment = root / "commitlog" / f"{2 << 20:020d}"
    data = bytearray(segment.read_bytes())
    data[m["commitLogOffset"] - (2 << 20) + 120] ^= 0xFF  # inside the body (88 or 112 bytes of header before it)
    segment.write_bytes(bytes(data))
    o = job.JobOptions(paths=[str(root), str(refused)], broker_names=["b", "r"], output=str(tmp_path / "out"), mode="verify", format="csv")
    brokers = {b["broker"]: b for b in job.run(o, spark)["brokers"]}
    for broker, path, end in (("b", root, (m["commitLogOffset"], "crc")), ("r", refused, (blank, "blank-in-last-segment"))):
        with Store.open(path) as store:
            run = Verification(store, VerifyOptions(checks=("commitlog",)))
            list(run.findings())
        assert (brokers[broker]["logical_end"], brokers[broker]["end_reason"]) == (run.summary.logical_end, run.summary.end_reason) == end


def test_the_data_source_from_user_code(spark):
    from pyspark.sql.pandas.types import to_arrow_schema

    from mqtool.spark.source import RocketMQDataSource

    spark.dataSource.register(RocketMQDataSource)
    df = spark.read.format("rocketmq").option("body", "sha256").load(str(store_path("5.3.3", "clean-small")))
    assert to_arrow_schema(df.schema, timezone="UTC").equals(MESSAGE_SCHEMA)
    m = manifest("5.3.3", "clean-small")
    counts = {r["topic"]: r["count"] for r in df.groupBy("topic").count().collect()}
    assert counts == Counter(x["topic"] for x in m["messages"])
    # smaller splits: the checked DataFrame drops the stale records after rewrite-clean's logical end
    checked, rejected = job.checked_messages(spark, [str(store_path("4.9.7", "rewrite-clean"))], split_size="256k")
    assert rejected and checked.count() == len(dump_rows("4.9.7", "rewrite-clean"))


def test_errors_are_one_line_with_exit_codes(tmp_path, capsys, spark):
    base = dict(output=str(tmp_path), mode="messages", format="parquet", topic=[], queue=None, key=None, tag=None, since=None, until=None,
                uniq_key=None, msg_id=None, from_offset=None, to_offset=None,
                split_size=None, body="none", broker_name=[], broker_version=[], broker_config=None, keep_going=False, writer="auto")
    assert job.main(Namespace(**base, paths=[str(tmp_path / "missing")])) == EXIT_BAD_INPUT
    assert job.main(Namespace(**{**base, "since": "yesterday-ish"}, paths=[str(store_path("5.3.3", "clean-small"))])) == EXIT_USAGE
    two = [str(store_path("4.9.7", "clean-small")), str(store_path("5.3.3", "clean-small"))]
    assert job.main(Namespace(**base, paths=two)) == EXIT_USAGE  # both are named clean-small
    one = [str(store_path("5.3.3", "clean-small"))]
    assert job.main(Namespace(**{**base, "format": "json", "writer": "python"}, paths=one)) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("mqtool-scan: error: ") for line in err)


def test_a_checkout_on_the_path_imports_without_an_installation(tmp_path):
    """A Spark Python worker started in the checkout (its working directory first on the path,
    mqtool not installed, e.g. a cluster's Python) finds mqtool.formats and mqtool.recovery in mqtool/."""
    probe = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import importlib.util, mqtool; "
        "print(importlib.util.find_spec('mqtool.formats').origin); print(importlib.util.find_spec('mqtool.recovery').origin)"
    )
    result = subprocess.run([sys.executable, "-S", "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path)  # -S: no site-packages
    assert result.stdout.split() == [str(ROOT / "mqtool" / "formats" / "__init__.py"), str(ROOT / "mqtool" / "recovery" / "__init__.py")]


def test_spark_job_logs_at_warn(tmp_path):
    """Run as `python spark/mqtool_scan.py` (it starts its own JVM), the job logs at WARN too. Here, not
    in another file: the Spark tests run on one worker, so that two JVMs never start at once."""
    env = {**os.environ, **QUICK_JIT, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = tmp_path / "stats"
    result = subprocess.run(
        [sys.executable, str(ROOT / "spark" / "mqtool_scan.py"), str(store_path("4.9.7", "clean-small")), "--mode", "stats", "--format", "json", "--output", str(out)],
        capture_output=True, text=True, env=env, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert " INFO " not in result.stderr, result.stderr[:3000]
    assert "clean-small" in result.stdout


def test_spark_submit_prints_no_info_line(tmp_path):
    """Under spark-submit (its JVM already running) the job still logs at WARN: no INFO line, the
    stats result printed, report.json written."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, **QUICK_JIT, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    out = tmp_path / "out"
    result = subprocess.run([str(bin_dir / "spark-submit"), "--master", "local[1]", str(SCRIPT), str(store_path("4.9.7", "clean-small")), "--mode", "stats", "--output", str(out)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    printed = result.stdout + result.stderr
    assert [line for line in printed.splitlines() if " INFO " in line] == []
    assert "clean-small" in result.stdout and (out / "report.json").is_file()


def test_stats_tables_fit_100_columns_and_the_summary_says_what_it_counts(spark, tmp_path, capsys, monkeypatch):
    """Issue #28. Before: the queues table was 240 columns wide (the long topic in the middle) and
    the summary said "5 splits of 5242880 bytes" for five 1 MiB splits."""
    monkeypatch.setenv("COLUMNS", "100")
    brokers = {"clean": ("4.9.7", "clean-small")}
    doc = job.run(options(tmp_path, brokers, mode="stats"), spark)
    captured = capsys.readouterr()
    total = sum(p.stat().st_size for p in (store_path("4.9.7", "clean-small") / "commitlog").iterdir())
    assert f"mqtool-scan: stats: {doc['splits']} splits, {total} bytes in all, 0 dropped" in captured.err
    topics = {m["topic"] for m in manifest("4.9.7", "clean-small")["messages"]}
    for line in captured.out.splitlines():  # only a topic longer than the room left may run past the edge
        assert len(line) <= 100 or line.split()[-1] in topics, line


def test_the_script_checks_its_arguments_before_the_jvm_starts(tmp_path):
    """Before: `mqtool_scan.py /nonexistent` started Spark's JVM (10 s and more) to say the path
    does not exist. The probe fails the run if the JVM is started."""
    probe = (
        "import sys, runpy; from pyspark import SparkContext\n"
        "def started(*a, **k):\n    print('JVM STARTED', file=sys.stderr); raise SystemExit(99)\n"
        "SparkContext._ensure_initialized = classmethod(started)\n"
        f"sys.argv = ['mqtool_scan.py', *sys.argv[1:]]\nrunpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    )
    cases = {
        (str(tmp_path / "nonexistent"), "--output", str(tmp_path / "out")): (EXIT_BAD_INPUT, f"mqtool-scan: error: {tmp_path / 'nonexistent'}: no such file or directory"),
        (str(store_path("4.9.7", "clean-small")), "--output", str(tmp_path / "out"), "--since", "1795237465"): (EXIT_USAGE, None),
        (str(store_path("4.9.7", "clean-small")), "--output", str(tmp_path / "out"), "--mode", "verify", "--topic", "TopicTest"): (EXIT_USAGE, None),
        # an output that cannot be written: exit 5 ("NotADirectoryError: ...") after the JVM started, before
        (str(store_path("4.9.7", "clean-small")), "--output", str(ROOT / "README.md")): (EXIT_BAD_INPUT, f"mqtool-scan: error: --output {ROOT / 'README.md'}: not a directory"),
        (str(store_path("4.9.7", "clean-small")), "--output", "/proc/mqtool-scan-out"): (EXIT_BAD_INPUT, "mqtool-scan: error: --output /proc/mqtool-scan-out: cannot create it: No such file or directory"),
    }
    for args, (code, line) in cases.items():
        result = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120)
        assert "JVM STARTED" not in result.stderr and result.returncode == code, (args, result.stderr[-2000:])
        assert result.stderr.strip().splitlines()[-1] == line if line else result.stderr.strip().startswith("mqtool-scan: error: ")
    assert not (tmp_path / "out").exists()


def test_bad_filter_values_are_usage_errors_as_for_dump(tmp_path):
    """Before: `--queue -1` and `--since` after `--until` ran the scan and wrote nothing, and
    `--broker-version 9.9.9` exited 3; `mqtool dump` refuses each with exit 2."""
    from mqtool.errors import UsageError

    store = str(store_path("4.9.7", "clean-small"))
    for given, message in (({"queue": -1}, "^--queue -1"), ({"since": 2, "until": 1}, "^--since is after --until"),
                           ({"broker_versions": ["9.9.9"]}, "^--broker-version: broker version 9.9.9 is not")):
        with pytest.raises(UsageError, match=message):
            job.prepare(job.JobOptions(paths=[store], output=str(tmp_path / "out"), **given))


def test_verify_mode_refuses_every_filter_given_a_zero_too(tmp_path):
    """Before: `--mode verify --queue 0` (or `--since 0`) was taken and ignored, since 0 is false;
    `--queue 1` was refused. Every filter given is refused, whatever its value."""
    from mqtool.errors import UsageError

    store = str(store_path("4.9.7", "clean-small"))
    for given, flag in (({"queue": 0}, "--queue"), ({"since": 0}, "--since"), ({"until": 0}, "--until"), ({"tag": ""}, "--tag"),
                        ({"queue": 1}, "--queue"), ({"uniq_key": ""}, "--uniq-key"), ({"from_offset": 0}, "--from-offset"),
                        ({"to_offset": 0}, "--to-offset")):
        with pytest.raises(UsageError, match=f"^{flag}: --mode verify"):
            job.prepare(job.JobOptions(paths=[store], output=str(tmp_path / "out"), mode="verify", **given))
    assert job.prepare(job.JobOptions(paths=[store], output=str(tmp_path / "out"), mode="verify"))


def test_dropped_splits_are_few_lines(capsys):
    """Before: one stderr line per dropped split, hundreds of the same reason for the splits past
    where a log ends (e.g. 265 for 8 KiB splits of a 5 MB store)."""
    cut = "past the end of the log at 100 (zeros: no record written here), where the broker's recovery cuts it"
    job.print_dropped([{"broker": "a", "split_start": s, "reason": cut} for s in range(200, 300)])
    assert capsys.readouterr().err == f"mqtool-scan: dropped 100 splits of a, from 200 to 299: {cut}\n"
    job.print_dropped([{"broker": "a", "split_start": s, "reason": f"stale at {s}"} for s in range(30)])
    err = capsys.readouterr().err.splitlines()
    assert len(err) == job.DROPPED_LINES + 1 and err[0] == "mqtool-scan: dropped split a@0: stale at 0"
    assert err[-1] == "mqtool-scan: and 10 more dropped splits (report.json lists every one)"


def dump_run(path: Path, *flags: str) -> tuple[int, list[dict], list[str]]:
    """``mqtool dump PATH -f jsonl FLAGS``: its exit code, rows and stderr lines (without the ``mqtool: `` prefix)."""
    result = runner.invoke(app, ["dump", str(path), "--format", "jsonl", *flags])
    notes = [line.removeprefix("mqtool: ") for line in result.stderr.splitlines()]
    return result.exit_code, [json.loads(line) for line in result.stdout.splitlines()], notes


def scan_args(*argv: str):
    """``spark/mqtool_scan.py ARGV``'s arguments, parsed by the script's own parser."""
    from mqtool.spark import mqtool_scan

    return mqtool_scan.parser().parse_args(list(argv))


def scan_main(*argv: str) -> int:
    """``spark/mqtool_scan.py ARGV`` in this session."""
    return job.main(scan_args(*argv))


def written_rows(out: Path, fmt: str) -> list[dict]:
    rows = json_rows(out / "messages") if fmt == "json" else parquet_rows(out / "messages")
    fields = ({k: dict(r[k]) if k == "properties" and r[k] is not None else r[k] for k in MESSAGE_FIELDS} for r in rows)
    return sorted(fields, key=lambda r: r["offset"])


@pytest.mark.parametrize("store, mode, fmt, flags", [
    ("damaged", "messages", "json", ["--split-size", "128k"]),
    ("damaged", "messages", "parquet", ["--keep-going"]),
    ("damaged", "stats", "parquet", ["--split-size", "128k", "--keep-going"]),
    ("damaged", "messages", "parquet", ["--split-size", "128k", "--keep-going", "--to-offset", "2233000"]),  # ends inside the damage
    ("rewrite-clean", "messages", "parquet", []),
])
def test_damage_the_scan_reads_past_or_stops_at_is_said_as_dump_says_it(spark, tmp_path, capsys, store, mode, fmt, flags):
    """Before: the job said nothing on stderr of the damage it read past (a destroyed first record
    before the segment the broker's next start scans from) nor of the damage a log stops at (only
    the splits dropped after it, when it was not in the last segment: rewrite-clean, whose last
    segment ends at stale bytes, got no line at all), so the output silently lacked those ranges;
    and `--keep-going` was taken and ignored in messages and stats modes. Now each range gets
    `mqtool dump`'s line (same flags), the rows are dump's, and the exit code is dump's."""
    if store == "damaged":
        root = _damage("4.9.7", tmp_path)
        first = root / "commitlog" / f"{0:020d}"
        data = bytearray(first.read_bytes())
        data[:8] = b"\xff" * 8  # the first record's TOTALSIZE and MAGICCODE
        first.write_bytes(bytes(data))
    else:
        root = store_path("4.9.7", store)
    code, expected, notes = dump_run(root, *flags[2:] if flags[:1] == ["--split-size"] else flags)
    damage = [n for n in notes if n.startswith(("skipped", "stopped"))]
    assert len(damage) == (2 if store == "damaged" else 1)
    out = tmp_path / "out"
    capsys.readouterr()
    assert scan_main(str(root), "--output", str(out), "--mode", mode, "--format", fmt, "--broker-name", "b", *flags) == code == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("mqtool-scan: b: ")] == [f"mqtool-scan: b: {n}" for n in damage]
    report = json.loads((out / "report.json").read_text())
    assert [d["message"] for d in report["damage"]] == damage
    if mode == "messages":
        assert written_rows(out, fmt) == expected
    else:
        assert pq.read_table(out / "brokers").to_pylist()[0]["messages"] == len(expected)


def test_offsets_msg_id_and_uniq_key_read_what_dump_reads(spark, tmp_path, capsys):
    """Before: the job had no --from-offset/--to-offset (every segment was read), no --msg-id and no
    --uniq-key. Now they take dump's values and words, filter with its MessageFilter, and an offset
    range (a msg id's offset) plans only the splits it covers."""
    root = store_path("4.9.7", "clean-small")
    reference = dump_rows("4.9.7", "clean-small")
    uniq_key, msg_id = reference[700]["uniq_key"], reference[1500]["msg_id"]
    cases = [
        ("json", ["--from-offset", "1000", "--to-offset", "2500000", "--topic", "TopicTest"], 3),
        ("parquet", ["--uniq-key", uniq_key], 5),
        ("parquet", ["--msg-id", msg_id], 1),
    ]
    for i, (fmt, flags, splits) in enumerate(cases):
        code, expected, notes = dump_run(root, *flags, "--body", "sha256")
        assert code == 0 and expected
        out = tmp_path / f"out{i}"
        capsys.readouterr()
        assert scan_main(str(root), "--output", str(out), "--format", fmt, "--body", "sha256", *flags) == 0
        assert written_rows(out, fmt) == expected
        assert json.loads((out / "report.json").read_text())["splits"] == splits
        moved = [n for n in notes if n.startswith("--from-offset")]
        said = [line for line in capsys.readouterr().err.splitlines() if "--from-offset" in line]
        assert said == [f"mqtool-scan: clean-small: {n}" for n in moved]
        assert len(moved) == (i == 0)
    missing = msg_id[:-1] + ("1" if msg_id[-1] == "0" else "0")  # an offset inside that record: no message has it
    code, expected, _ = dump_run(root, "--msg-id", missing)
    assert (code, expected) == (1, [])
    assert scan_main(str(root), "--output", str(tmp_path / "none"), "--msg-id", missing) == code
    assert pq.read_table(tmp_path / "none" / "messages").num_rows == 0


def test_offset_options_are_refused_in_dumps_words(tmp_path, capsys):
    """The offset options' usage errors are dump's lines, found before the JVM starts (exit 2)."""
    root = store_path("4.9.7", "clean-small")
    for flags in (["--from-offset", "10", "--to-offset", "5"], ["--msg-id", "0A0000010000291F000000000008A3C0", "--from-offset", "1"],
                  ["--msg-id", "xyz"], ["--to-offset", "-1"]):
        result = runner.invoke(app, ["dump", str(root), *flags])
        assert result.exit_code == EXIT_USAGE
        dump_error = result.stderr.strip().removeprefix("mqtool: error: ").split("; see 'mqtool dump --help'")[0]
        capsys.readouterr()
        assert job.prepare_args(scan_args(str(root), "--output", str(tmp_path), *flags)) == EXIT_USAGE
        assert capsys.readouterr().err.strip() == f"mqtool-scan: error: {dump_error}"
    dledger = str(store_path("4.9.7", "dledger-small"))  # not planned over entry files: refused, not misread
    for flags in (["--from-offset", "48"], ["--keep-going"]):
        assert job.prepare_args(scan_args(dledger, "--output", str(tmp_path), *flags)) == EXIT_USAGE
        assert "`mqtool dump" in capsys.readouterr().err


def test_msg_id_past_the_end_the_next_start_gives_the_log_is_not_served_as_dump_says(spark, tmp_path, capsys):
    """A body byte flipped in a record of 4.9.7 clean-small's third segment: the broker's next start
    (normal recovery from there, checkCRCOnRecover) ends the log at it, so `dump --msg-id` of a later
    record prints nothing, says why and exits 1. The scan reads that record's split (a scan reads
    past a CRC failure) and must not serve it either."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    messages = manifest("4.9.7", "clean-small")["messages"]
    victim = next(m for m in messages if m["commitLogOffset"] > (2 << 20) + 100_000 and m["bodyLength"] > 200)
    segment = root / "commitlog" / f"{2 << 20:020d}"
    data = bytearray(segment.read_bytes())
    with Store.open(root) as store:
        record = store.commitlog.read_record(victim["commitLogOffset"])
    data[data.index(record.body, victim["commitLogOffset"] - (2 << 20)) + record.body_length // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    gone = max(messages, key=lambda m: m["commitLogOffset"])["msgId"]
    code, rows, notes = dump_run(root, "--msg-id", gone)
    assert (code, rows) == (1, []) and "past the log's end" in notes[-1]
    capsys.readouterr()
    assert scan_main(str(root), "--output", str(tmp_path / "out"), "--msg-id", gone) == code
    assert f"mqtool-scan: 4.9.7-clean-small: {notes[-1]}" in capsys.readouterr().err.splitlines()
    assert pq.read_table(tmp_path / "out" / "messages").num_rows == 0
