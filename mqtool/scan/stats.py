"""Messages aggregated per topic, queue and period of store time for ``mqtool stats`` and Spark (reference §8.3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa

from ..formats.dispatch import SCHEDULE_TOPIC
from ..formats.timer import TIMER_TOPIC  # 5.x timer messages wait there (TimerMessageStore)
from ..store import Store, fastscan as fs
from ..store.dledgerstart import loose_walk
from . import _stats, compute
from ._stats import EXACT_BITS as _EXACT_BITS, SUB_BITS

HOUR_MS = 3_600_000
PERIODS = {"minute": 60_000, "hour": HOUR_MS, "day": 86_400_000}
KEYS = ["topic", "queue_id", "period"]

# (output column, work column, Arrow aggregation); merging applies the same kind again
BASE_AGGREGATES = [
    ("messages", "one", "sum"),
    ("dispatched", "dispatched", "sum"),  # NOT_TYPE and COMMIT records: the ones the consume queue holds
    ("bytes", "size", "sum"),
    ("body_bytes", "body_bytes", "sum"),
    ("crc_failures", "crc_failed", "sum"),
    ("first_store_timestamp", "store_timestamp", "min"),
    ("last_store_timestamp", "store_timestamp", "max"),
    ("min_queue_offset", "dispatched_offset", "min"),  # of dispatched records
    ("max_queue_offset", "dispatched_offset", "max"),
]
EXTENDED_AGGREGATES = [
    *((name, name, "sum") for name in ("not_type", "prepared", "commit", "rollback", "compressed")), ("delay_min_ms", "delay", "min"),
    ("delay_max_ms", "delay", "max"),
]
STATS_INPUT = ("topic", "queue_id", "size", "body_length", "crc_ok", "sys_flag", "store_timestamp", "queue_offset")


AGGREGATES = BASE_AGGREGATES + EXTENDED_AGGREGATES
_INT64_MAX, _INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
_INIT = np.array([{"sum": 0, "min": _INT64_MAX, "max": _INT64_MIN}[op] for _, _, op in AGGREGATES], dtype=np.int64)
_OPS = np.array([{"sum": 0, "min": 1, "max": 2}[op] for _, _, op in AGGREGATES], dtype=np.int64)


class GroupTable:
    """Aggregates per (topic key, queue id, period) in an open-addressing hash table, filled by ``accumulate``."""

    def __init__(self, init: np.ndarray = _INIT, ops: np.ndarray = _OPS, capacity: int = 1 << 10):
        self.init, self.ops = init, ops
        self.count = np.zeros(1, dtype=np.int64)
        self._allocate(capacity)

    def _allocate(self, capacity: int) -> None:
        self.keys = np.zeros((capacity, 3), dtype=np.int64)
        self.used = np.zeros(capacity, dtype=np.bool_)
        self.values = np.zeros((capacity, len(self.init)), dtype=np.int64)
        self.count[0] = 0

    def grow(self) -> None:
        old = (self.keys, self.used, self.values)
        self._allocate(len(self.used) * 2)
        _stats.combine(self.keys, self.used, self.values, self.count, self.init, self.ops, *old)

    def groups(self) -> tuple[np.ndarray, np.ndarray]:
        return self.keys[self.used], self.values[self.used]

    def parts(self) -> tuple:
        """The arrays the compiled kernels fill (``_stats.accumulate``, ``stats_batch``)."""
        return self.keys, self.used, self.values, self.count, self.init


assert [out for out, _, _ in AGGREGATES] == [
    "messages", "dispatched", "bytes", "body_bytes", "crc_failures", "first_store_timestamp", "last_store_timestamp", "min_queue_offset",
    "max_queue_offset", "not_type", "prepared", "commit", "rollback", "compressed", "delay_min_ms", "delay_max_ms",
]  # fmt: skip  (the value columns _stats.accumulate writes)


def accumulate(table: GroupTable, columns: dict[str, np.ndarray], period_ms: int) -> None:
    """Add rows (int64 columns ``STATS_INPUT`` and ``born_timestamp``, ``topic`` as an int64 key) to ``table``."""
    c = columns
    start, n = 0, len(c["topic"])
    while start < n:
        start = _stats.accumulate(*table.parts(), start, c["topic"], c["queue_id"], c["size"], c["body_length"], c["crc_ok"], c["sys_flag"], c["store_timestamp"], c["born_timestamp"], c["queue_offset"], period_ms)
        if start < n:
            table.grow()


def to_arrow(table: GroupTable, topic_of: Callable[[np.ndarray], pa.Array], *, extended: bool) -> pa.Table:
    """The groups as Arrow: ``KEYS`` then the aggregates (``topic_of`` names the topics; null offsets where none dispatched)."""
    keys, values = table.groups()
    order = np.lexsort((keys[:, 2], keys[:, 1], keys[:, 0]))
    keys, values = keys[order], values[order]
    columns = {"topic": topic_of(keys[:, 0]), "queue_id": compute.numbers(keys[:, 1], pa.int32()), "period": compute.numbers(keys[:, 2], pa.int64())}
    specs = AGGREGATES if extended else BASE_AGGREGATES
    for k, (out, _, _) in enumerate(specs):
        v = values[:, k]
        valid = v != (_INT64_MAX if out == "min_queue_offset" else _INT64_MIN) if out in ("min_queue_offset", "max_queue_offset") else None
        columns[out] = compute.numbers(v, pa.int64(), valid)
    return pa.table(columns)


def _int64(column) -> np.ndarray:
    return np.ascontiguousarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)


def aggregate(t: pa.Table, period_ms: int = HOUR_MS) -> pa.Table:
    """One table of messages (``STATS_INPUT``) aggregated per topic, queue and period (``BASE_AGGREGATES``)."""
    encoded = compute.dictionary_encode(t["topic"]).combine_chunks()
    store_ts = _int64(t["store_timestamp"])
    columns = {
        "topic": np.ascontiguousarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64),
        **{k: _int64(t[k]) for k in ("queue_id", "size", "body_length", "crc_ok", "sys_flag", "queue_offset")}, "store_timestamp": store_ts,
        "born_timestamp": _int64(t["born_timestamp"]) if "born_timestamp" in t.column_names else store_ts,
    }
    table = GroupTable()
    accumulate(table, columns, period_ms)
    return to_arrow(table, lambda codes: compute.take(encoded.dictionary, codes), extended=False)


def merge(partials: list[pa.Table]) -> pa.Table:
    """Partial aggregates (of ``aggregate``) combined per topic, queue and period."""
    t = pa.concat_tables(partials)
    if len(partials) == 1:
        return t
    grouped = t.group_by(KEYS, use_threads=False).aggregate([(out, op) for out, _, op in BASE_AGGREGATES])
    return pa.table({**{k: grouped[k] for k in KEYS}, **{out: grouped[f"{out}_{op}"] for out, _, op in BASE_AGGREGATES}})


# ---- born-to-store delay histogram ----------------------------------------------------------------

EXACT = 1 << _EXACT_BITS  # delays below 1024 ms are counted exactly (``SUB_BITS``: sub-buckets per power of two above)


def delay_bucket(delay: np.ndarray) -> np.ndarray:
    """A signed bucket per delay (ms): exact below ``EXACT``, log-linear above; order-preserving."""
    a = np.abs(delay)
    e = np.maximum(np.floor(np.log2(np.maximum(a, 1))).astype(np.int64), _EXACT_BITS)
    sub = (a >> (e - SUB_BITS)) & ((1 << SUB_BITS) - 1)
    bucket = np.where(a < EXACT, a, EXACT + (e - _EXACT_BITS) * (1 << SUB_BITS) + sub)
    return np.where(delay < 0, -bucket - 1, bucket)


def bucket_floor(bucket: int) -> int:
    """The smallest delay (ms) of a bucket (the largest magnitude's floor for negative ones)."""
    if bucket < 0:
        return -bucket_floor(-bucket - 1)
    if bucket < EXACT:
        return bucket
    e, sub = divmod(bucket - EXACT, 1 << SUB_BITS)
    e += _EXACT_BITS
    return (1 << e) | (sub << (e - SUB_BITS))


def median_from_histogram(buckets: list[int], counts: list[int]) -> int:
    """The lower median's bucket floor (exact for delays below 1024 ms)."""
    order = np.argsort(buckets)
    rank = (sum(counts) - 1) // 2
    seen = 0
    for i in order.tolist():
        seen += counts[i]
        if seen > rank:
            return bucket_floor(buckets[i])
    raise ValueError("empty histogram")


# ---- mqtool stats' pass ------------------------------------------------------------------------

@dataclass
class StoreStats:
    """The aggregates of one pass: per topic/queue (all time) and per topic/queue/period."""

    per_period: pa.Table  # KEYS + aggregate columns (period start in epoch ms)
    histogram: pa.Table  # topic, queue_id, bucket, n
    topics: dict[int, str]  # topic key -> topic name
    end: object = None  # the walk's ScanEnd
    records: int = 0


WALK_BATCH = 1 << 11  # records per walk call: their bytes are still in cache when the kernel reads them
_COUNT_INIT, _COUNT_OPS = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)


def collect(store: Store, period_ms: int = HOUR_MS, *, progress: Callable[[int], None] | None = None, batch: int = WALK_BATCH, read_on=None) -> StoreStats:
    """One pass over the store's records into ``StoreStats`` (bad CRCs read past, as ``dump``); ``read_on``: past damage."""
    records, start = 0, store.commitlog.min_offset
    topics: dict[int, str] = {}
    groups = GroupTable()
    buckets = GroupTable(_COUNT_INIT, _COUNT_OPS)
    seen = GroupTable(_COUNT_INIT, _COUNT_OPS, capacity=1 << 6)
    new_topics = np.empty((batch, 3), dtype=np.int64)
    parts = groups.parts(), buckets.parts(), seen.parts()
    loose = None  # the record inside a DLedger entry whose header alone is broken (``loose_walk``), read before ``start``
    while True:
        walk = loose or fs.FastScan(store.commitlog, start, check_crc=True, stop_on_crc=False, batch=batch, release_behind=True)
        for b in walk:
            rows = b.rows
            at = 0
            while True:
                at, found = _stats.stats_batch(b.array, b.base_offset, rows, at, period_ms, *parts, new_topics)
                for key, pos, length in new_topics[:found].tolist():
                    topics[key] = store.commitlog.read_bytes(pos, length).decode("utf-8", "replace")
                if at == len(rows):
                    break
                for table in (groups, buckets, seen):
                    if 2 * table.count[0] >= len(table.used):
                        table.grow()
                parts = groups.parts(), buckets.parts(), seen.parts()
            if progress is not None:
                progress(b.base_offset + int(rows[-1, fs.COL_POS]))
        records += walk.records
        if loose is not None:
            loose = None
            continue
        start = None if read_on is None or walk.end is None else read_on(walk.end)
        if start is None:
            break
        loose = loose_walk(store.commitlog, walk.end, start, check_crc=True, stop_on_crc=False, batch=batch, release_behind=True)
    per_period = to_arrow(groups, lambda codes: compute.numbers(codes, pa.int64()), extended=True)
    bucket_keys, bucket_counts = buckets.groups()
    hist = pa.table({"topic": compute.numbers(bucket_keys[:, 0], pa.int64()), "queue_id": compute.numbers(bucket_keys[:, 1], pa.int32()), "bucket": compute.numbers(bucket_keys[:, 2], pa.int64()), "n": compute.numbers(bucket_counts[:, 0], pa.int64())})
    return StoreStats(per_period, hist, topics, walk.end, records)


QUEUE_FIELDS = (
    "row", "topic", "queue_id", "messages", "bytes", "first_store_timestamp", "last_store_timestamp", "first_store_time", "last_store_time",
    "body_bytes", "dispatched", "min_queue_offset", "max_queue_offset", "delay_min_ms", "delay_median_ms", "delay_max_ms",
    "not_type", "prepared", "commit", "rollback", "delayed", "compressed", "retried", "dlq", "crc_failures",
)  # fmt: skip
PERIOD_FIELDS = ("row", "topic", "queue_id", "period", "period_start", "period_start_time", "messages", "bytes")


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None


_COMBINE = {"sum": lambda a, b: a + b, "min": min, "max": max}


def grouped(table: pa.Table, keys: list[str], aggregates: list[tuple[str, str]]) -> list[dict]:
    """``table.group_by(keys).aggregate(aggregates)`` as rows in Python: small tables, no acero import."""
    groups: dict[tuple, dict] = {}
    names = [(column, op, f"{column}_{op}") for column, op in aggregates]
    for row in table.to_pylist():
        key = tuple(row[k] for k in keys)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {**dict(zip(keys, key)), **{name: None for _, _, name in names}}
        for column, op, name in names:
            value = row[column]
            if value is not None:
                group[name] = value if group[name] is None else _COMBINE[op](group[name], value)
    return list(groups.values())


def queue_rows(stats: StoreStats, topics: Iterable[str] | None = None) -> list[dict]:
    """One row per topic and queue (``row: "queue"``), sorted by topic and queue id."""
    wanted = set(topics) if topics else None
    sums = [(out, op) for out, _, op in AGGREGATES]
    per_queue = grouped(stats.per_period, ["topic", "queue_id"], sums)
    hist: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for r in stats.histogram.to_pylist():
        b, c = hist.setdefault((r["topic"], r["queue_id"]), ([], []))
        b.append(r["bucket"])
        c.append(r["n"])
    medians = {key: median_from_histogram(b, c) for key, (b, c) in hist.items()}  # clamped into [min, max] below
    rows = []
    for r in per_queue:
        topic = stats.topics[r["topic"]]
        if wanted is not None and topic not in wanted:
            continue
        v = {out: r[f"{out}_{op}"] for out, op in sums}
        messages = v["messages"]
        v.update({"row": "queue", "topic": topic, "queue_id": r["queue_id"], "first_store_time": _iso(v["first_store_timestamp"]),
                  "last_store_time": _iso(v["last_store_timestamp"]),
                  "delay_median_ms": min(max(medians[r["topic"], r["queue_id"]], v["delay_min_ms"]), v["delay_max_ms"]),
                  "delayed": messages if topic in (SCHEDULE_TOPIC, TIMER_TOPIC) else 0,
                  "retried": messages if topic.startswith("%RETRY%") else 0, "dlq": messages if topic.startswith("%DLQ%") else 0})
        rows.append({k: v[k] for k in QUEUE_FIELDS})
    rows.sort(key=lambda r: (r["topic"], r["queue_id"]))
    return rows


def period_rows(stats: StoreStats, period: str, topics: Iterable[str] | None = None) -> list[dict]:
    """One row per topic and period (``row: "period"``, ``queue_id`` null): volumes over time."""
    wanted = set(topics) if topics else None
    rows = []
    for r in grouped(stats.per_period, ["topic", "period"], [("messages", "sum"), ("bytes", "sum")]):
        topic = stats.topics[r["topic"]]
        if wanted is not None and topic not in wanted:
            continue
        rows.append({"row": "period", "topic": topic, "queue_id": None, "period": period, "period_start": r["period"], "period_start_time": _iso(r["period"]), "messages": r["messages_sum"], "bytes": r["bytes_sum"]})
    rows.sort(key=lambda r: (r["topic"], r["period_start"]))
    return rows
