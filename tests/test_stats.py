"""``mqtool stats`` against the real-broker manifests (every acknowledged message, field by field) and
against the Spark reader's ``stats`` aggregates on the same stores (the figures must be equal)."""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

import pytest
from conftest import VERSIONS, copy_store, manifest, store_path
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.scan.stats import BASE_AGGREGATES, EXTENDED_AGGREGATES, bucket_floor, collect, delay_bucket, grouped, period_rows, queue_rows
from mqtool.spark.inputs import resolve_inputs
from mqtool.spark.reader import plan_tasks, read_stats
from mqtool.store import Store

import numpy as np

CLEAN = [(v, "clean-small") for v in VERSIONS] + [("4.9.7", "batch-small"), ("5.3.3", "lmq-small"), ("5.3.3", "timer-small")]


def _expected(messages: list[dict]) -> dict[tuple[str, int], dict]:
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for m in messages:
        groups[m["topic"], m["queueId"]].append(m)
    out = {}
    for key, ms in groups.items():
        kinds = [m["sysFlag"] & 0xC for m in ms]
        delays = [m["storeTimestamp"] - m["bornTimestamp"] for m in ms]
        dispatched = [m["queueOffset"] for m, k in zip(ms, kinds) if k in (0, 8)]
        out[key] = {
            "messages": len(ms),
            "bytes": sum(m["size"] for m in ms),
            "body_bytes": sum(m["bodyLength"] for m in ms),
            "first_store_timestamp": min(m["storeTimestamp"] for m in ms),
            "last_store_timestamp": max(m["storeTimestamp"] for m in ms),
            "dispatched": len(dispatched),
            "min_queue_offset": min(dispatched, default=None),
            "max_queue_offset": max(dispatched, default=None),
            "not_type": kinds.count(0),
            "prepared": kinds.count(4),
            "commit": kinds.count(8),
            "rollback": kinds.count(12),
            "compressed": sum(1 for m in ms if m["sysFlag"] & 1),
            "delay_min_ms": min(delays),
            "delay_max_ms": max(delays),
            "median": statistics.median_low(delays),
            "retried": len(ms) if key[0].startswith("%RETRY%") else 0,
            "delayed": len(ms) if key[0] in ("SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer") else 0,
        }
    return out


def _all_records(version: str, name: str) -> list[dict]:
    """The manifest's acknowledged messages plus, for the timer store, the deliveries the broker
    wrote before its shutdown (each a record of its own)."""
    doc = manifest(version, name)
    return doc["messages"] + [d for d in doc.get("timerDeliveries", []) if "commitLogOffset" in d and "size" in d]


@pytest.mark.parametrize("version,name", CLEAN)
def test_stats_equal_the_manifest_per_topic_and_queue(version, name):
    with Store.open(store_path(version, name)) as store:
        result = collect(store)
    rows = {(r["topic"], r["queue_id"]): r for r in queue_rows(result)}
    want = _expected(_all_records(version, name))
    if name == "timer-small":  # deliveries are written records too: compare what the manifest lists fully
        assert sum(r["messages"] for r in rows.values()) >= sum(w["messages"] for w in want.values())
        rows = {k: v for k, v in rows.items() if k[0] == "rmq_sys_wheel_timer"}
        want = {k: v for k, v in want.items() if k[0] == "rmq_sys_wheel_timer"}
    assert set(rows) == set(want)
    for key, w in want.items():
        r = rows[key]
        for k, v in w.items():
            if k == "median":
                assert r["delay_min_ms"] <= r["delay_median_ms"] <= r["delay_max_ms"]
                assert abs(r["delay_median_ms"] - v) <= max(abs(v) // 128, 0), (key, r["delay_median_ms"], v)
            else:
                assert r[k] == v, (key, k)
        assert r["crc_failures"] == 0 and r["row"] == "queue"


@pytest.mark.parametrize("version,name", [(v, "clean-small") for v in VERSIONS] + [("4.9.7", "retention-small"), ("4.9.7", "crashed-small")])
def test_stats_equal_the_spark_readers_aggregates(version, name):
    assert_stats_equal_the_spark_readers(store_path(version, name))


def test_stats_count_records_whose_body_crc_fails_as_dump_and_spark_read_them(tmp_path):
    """A record whose body CRC fails, before the segment the broker's next start scans from (it serves it) and in the
    last segment: ``dump`` shows both (``crc_ok`` false) and reads on, so do Spark's splits; ``stats`` skipped the first,
    ended the log at the second and never counted a ``crc_failures``."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    rows = [r for r in _dump_rows(root) if r["body_length"] > 0]
    damaged = [rows[10], rows[-10]]
    for r in damaged:  # the stored BODYCRC (+8) changed
        seg = max(p for p in (root / "commitlog").iterdir() if int(p.name) <= r["offset"])
        with open(seg, "r+b") as f:
            f.seek(r["offset"] - int(seg.name) + 8)
            f.write(((r["body_crc"] ^ 1) & 0x7FFFFFFF).to_bytes(4, "big"))
    dumped = _dump_rows(root)
    assert [r["offset"] for r in dumped if not r["crc_ok"]] == [r["offset"] for r in damaged]
    result = assert_stats_equal_the_spark_readers(root, 64 << 10)
    assert result.records == len(dumped)
    assert sum(r["crc_failures"] for r in queue_rows(result)) == 2


def _dump_rows(root) -> list[dict]:
    out = CliRunner().invoke(app, ["dump", str(root), "--format", "jsonl"])
    assert out.exit_code == 0, out.output
    return [json.loads(line) for line in out.stdout.splitlines()]


def assert_stats_equal_the_spark_readers(root, split_size: int = 300_000):
    """``collect`` of the store at ``root`` against the Spark reader's per split aggregates combined; returns ``collect``'s."""
    spark: dict[tuple[str, int], dict] = {}
    hourly: dict[tuple[str, int], int] = defaultdict(int)
    for task in plan_tasks(resolve_inputs([root]), split_size):
        for batch in read_stats(task):
            for r in batch.to_pylist():
                if not r["messages"]:
                    continue
                s = spark.setdefault((r["topic"], r["queue_id"]), defaultdict(int, first_store_timestamp=2**63, last_store_timestamp=-1))
                for k in ("messages", "dispatched", "bytes", "body_bytes", "crc_failures"):
                    s[k] += r[k]
                s["first_store_timestamp"] = min(s["first_store_timestamp"], r["first_store_timestamp"])
                s["last_store_timestamp"] = max(s["last_store_timestamp"], r["last_store_timestamp"])
                for k, pick in (("min_queue_offset", min), ("max_queue_offset", max)):
                    if r[k] is not None:
                        s[k] = pick(s[k], r[k]) if k in s else r[k]
                hourly[r["topic"], int(r["hour"].timestamp() * 1000)] += r["messages"]
    with Store.open(root) as store:
        result = collect(store)
    rows = {(r["topic"], r["queue_id"]): r for r in queue_rows(result)}
    assert set(rows) == set(spark)
    for key, s in spark.items():
        for k, v in s.items():
            assert rows[key][k] == v, (key, k)
        for k in ("min_queue_offset", "max_queue_offset"):
            assert rows[key][k] == s.get(k)
    periods = {(r["topic"], r["period_start"]): r["messages"] for r in period_rows(result, "hour")}
    assert periods == dict(hourly)
    return result


@pytest.mark.parametrize("version,name", CLEAN + [("4.9.7", "retention-small"), ("4.9.7", "crashed-small")])
def test_the_compiled_histogram_equals_delay_bucket_of_every_record(version, name):
    """``stats_batch``'s delay histogram (compiled) against ``delay_bucket`` of each record the
    schema decodes (``CommitLog.scan``), per topic and queue: every record counted once."""
    with Store.open(store_path(version, name)) as store:
        result = collect(store)
        records = list(store.commitlog.scan(check_crc=False))
    expected: dict[tuple[str, int, int], int] = defaultdict(int)
    for r in records:
        expected[r.topic_name, r.queue_id, int(delay_bucket(np.array([r.store_timestamp - r.born_timestamp]))[0])] += 1
    got = {(result.topics[t], q, b): n for t, q, b, n in zip(*(result.histogram[c].to_pylist() for c in ("topic", "queue_id", "bucket", "n")))}
    assert got == dict(expected)


def test_delay_buckets_keep_order_and_bound_the_error():
    values = np.array([-10**11, -5000, -1024, -1023, -1, 0, 1, 1023, 1024, 1025, 4097, 10**6, 95_438_842_711, 2**62], dtype=np.int64)
    buckets = delay_bucket(values)
    assert list(buckets) == sorted(buckets)
    for v, b in zip(values.tolist(), buckets.tolist()):
        floor = bucket_floor(b)
        if abs(v) < 1024:
            assert floor == v
        else:
            assert abs(floor) <= abs(v) and abs(v) - abs(floor) <= abs(v) // 128


def test_cli_stats_jsonl_rows_topic_filter_and_periods():
    root = store_path("4.9.7", "clean-small")
    want = _expected(manifest("4.9.7", "clean-small")["messages"])
    res = CliRunner().invoke(app, ["stats", str(root), "--topic", "TopicTest", "--by", "minute", "-f", "jsonl"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    queues = [r for r in rows if r["row"] == "queue"]
    periods = [r for r in rows if r["row"] == "period"]
    assert {(r["topic"], r["queue_id"]) for r in queues} == {k for k in want if k[0] == "TopicTest"}
    for r in queues:
        w = want[r["topic"], r["queue_id"]]
        assert (r["messages"], r["bytes"], r["first_store_timestamp"], r["last_store_timestamp"]) == (w["messages"], w["bytes"], w["first_store_timestamp"], w["last_store_timestamp"])
        assert r["first_store_time"].endswith("Z") and r["last_store_time"] >= r["first_store_time"]
    per_minute = defaultdict(int)
    for m in manifest("4.9.7", "clean-small")["messages"]:
        if m["topic"] == "TopicTest":
            per_minute[m["storeTimestamp"] // 60_000 * 60_000] += 1
    assert {r["period_start"]: r["messages"] for r in periods} == dict(per_minute)
    assert all(r["period"] == "minute" and r["topic"] == "TopicTest" for r in periods)
    res = CliRunner().invoke(app, ["stats", str(root) + "-missing"])
    assert res.exit_code == 3


def test_aggregation_grows_its_table_and_equals_a_plain_group_by():
    from mqtool.scan.stats import aggregate
    import pyarrow as pa

    rng = np.random.default_rng(7)
    n = 20_000
    t = pa.table(
        {
            "topic": pa.array([f"t{i}" for i in rng.integers(0, 7, n)]),
            "queue_id": pa.array(rng.integers(0, 900, n).astype(np.int32)),
            "size": pa.array(rng.integers(100, 2000, n).astype(np.int32)),
            "body_length": pa.array(rng.integers(-1, 1000, n).astype(np.int32)),
            "crc_ok": pa.array(rng.random(n) > 0.01),
            "sys_flag": pa.array(rng.choice([0, 4, 8, 12, 1, 16], n).astype(np.int32)),
            "store_timestamp": pa.array(rng.integers(0, 3 * 3_600_000, n)),
            "queue_offset": pa.array(rng.integers(0, 10**6, n)),
        }
    )
    got = {(r["topic"], r["queue_id"], r["period"]): r for r in aggregate(t, 3_600_000).to_pylist()}
    assert len(got) > 1024  # more groups than the table's first capacity
    want = defaultdict(lambda: {"messages": 0, "bytes": 0, "dispatched": 0, "body_bytes": 0, "crc_failures": 0})
    mins: dict = {}

    def key_of(r):
        return r["topic"], r["queue_id"], r["store_timestamp"] // 3_600_000 * 3_600_000

    for r in t.to_pylist():
        w = want[key_of(r)]
        w["messages"] += 1
        w["bytes"] += r["size"]
        w["body_bytes"] += max(r["body_length"], 0)
        w["crc_failures"] += not r["crc_ok"]
        if r["sys_flag"] & 12 in (0, 8):
            w["dispatched"] += 1
            mins[key_of(r)] = min(mins.get(key_of(r), 2**63), r["queue_offset"])
    assert set(got) == set(want)
    for key, w in want.items():
        assert {k: got[key][k] for k in w} == w
        assert got[key]["min_queue_offset"] == mins.get(key)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_python_grouping_equals_arrows_group_by(version):
    """``grouped`` (the CLI's per-queue and per-period rows) equals ``Table.group_by().aggregate()``,
    nulls (a group without a delay) included."""
    import pyarrow as pa

    with Store.open(store_path(version, "clean-small")) as store:
        per_period = collect(store, 60_000).per_period
    assert per_period.num_rows > 1
    aggregates = [(name, op) for name, _, op in BASE_AGGREGATES + EXTENDED_AGGREGATES]
    masked = per_period.set_column(per_period.schema.get_field_index("delay_min_ms"), "delay_min_ms",
                                   pa.array([None if i % 3 else v for i, v in enumerate(per_period["delay_min_ms"].to_pylist())], pa.int64()))
    for table in (per_period, masked):
        for keys in (["topic", "queue_id"], ["topic", "period"]):
            arrow = table.group_by(keys, use_threads=False).aggregate(aggregates).to_pylist()
            order = sorted(arrow, key=lambda r: tuple(r[k] for k in keys))
            assert sorted(grouped(table, keys, aggregates), key=lambda r: tuple(r[k] for k in keys)) == order
