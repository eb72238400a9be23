"""What is in a store: messages aggregated per topic, queue and period of store time.

One aggregation (``aggregate`` then ``merge``) serves ``mqtool stats`` and the Spark reader
(``mqtool.spark.reader.read_stats``: per split, hourly). Its input is a table of message columns
(``topic``, ``queue_id``, ``size``, ``body_length``, ``crc_ok``, ``sys_flag``, ``store_timestamp``,
``queue_offset``, and ``born_timestamp`` for the extended figures); ``topic`` may be the topic
string or any exact key standing for it.

``StoreStats`` is ``mqtool stats``' pass: the compiled walk (``FastScan``, the broker's recovery
scan, reference §8.3) and one compiled kernel per batch (``stats_fields``: every field a record
contributes, read in one visit of its header, positions from the layouts derived from the
construct schema), then the aggregation above. Born-to-store delay medians come from a
log-bucketed histogram (exact below 1024 ms, within 1/128 above).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..formats import commitlog as fmt
from ..formats.dispatch import SCHEDULE_TOPIC
from ..store import Store
from ..store import fastscan as fs

HOUR_MS = 3_600_000
PERIODS = {"minute": 60_000, "hour": HOUR_MS, "day": 86_400_000}
KEYS = ["topic", "queue_id", "period"]
TIMER_TOPIC = "rmq_sys_wheel_timer"  # 5.x timer messages wait here (TimerMessageStore)
TRANSACTION_MASK = int(fmt.SysFlag.TRANSACTION_PREPARED | fmt.SysFlag.TRANSACTION_COMMIT)
PREPARED, COMMIT, ROLLBACK = int(fmt.TransactionType.PREPARED), int(fmt.TransactionType.COMMIT), int(fmt.TransactionType.ROLLBACK)

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
    ("not_type", "not_type", "sum"),
    ("prepared", "prepared", "sum"),
    ("commit", "commit", "sum"),
    ("rollback", "rollback", "sum"),
    ("compressed", "compressed", "sum"),
    ("delay_min_ms", "delay", "min"),
    ("delay_max_ms", "delay", "max"),
]
STATS_INPUT = ("topic", "queue_id", "size", "body_length", "crc_ok", "sys_flag", "store_timestamp", "queue_offset")
EXTENDED_INPUT = (*STATS_INPUT, "born_timestamp")


def _np(column) -> np.ndarray:
    return column.to_numpy() if not isinstance(column, np.ndarray) else column


def aggregate(t: pa.Table, period_ms: int = HOUR_MS, *, extended: bool = False) -> pa.Table:
    """One table of messages aggregated per topic, queue and period (start, epoch ms)."""
    sys_flag = _np(t["sys_flag"])
    kind = sys_flag & TRANSACTION_MASK
    dispatched = (kind == 0) | (kind == COMMIT)
    ts = _np(t["store_timestamp"])
    queue_offset = _np(t["queue_offset"])
    work = {
        "topic": t["topic"],
        "queue_id": t["queue_id"],
        "period": pa.array(ts // period_ms * period_ms),
        "one": pa.array(np.ones(len(ts), dtype=np.int64)),
        "dispatched": pa.array(dispatched.astype(np.int64)),
        "size": pa.array(_np(t["size"]).astype(np.int64)),
        "body_bytes": pa.array(np.maximum(_np(t["body_length"]), 0).astype(np.int64)),
        "crc_failed": pa.array((~_np(t["crc_ok"]).astype(bool)).astype(np.int64)),
        "store_timestamp": pa.array(ts),
        "dispatched_offset": pa.array(queue_offset, pa.int64(), mask=~dispatched),
    }
    specs = BASE_AGGREGATES
    if extended:
        work.update(
            not_type=pa.array((kind == 0).astype(np.int64)),
            prepared=pa.array((kind == PREPARED).astype(np.int64)),
            commit=pa.array((kind == COMMIT).astype(np.int64)),
            rollback=pa.array((kind == ROLLBACK).astype(np.int64)),
            compressed=pa.array((sys_flag & int(fmt.SysFlag.COMPRESSED) != 0).astype(np.int64)),
            delay=pa.array(ts - _np(t["born_timestamp"])),
        )
        specs = BASE_AGGREGATES + EXTENDED_AGGREGATES
    return _group(pa.table(work), [(src, op, out) for out, src, op in specs])


def merge(partials: list[pa.Table], *, extended: bool = False) -> pa.Table:
    """Partial aggregates (of ``aggregate``) combined per topic, queue and period."""
    t = pa.concat_tables(partials)
    if len(partials) == 1:
        return t
    specs = BASE_AGGREGATES + (EXTENDED_AGGREGATES if extended else [])
    return _group(t, [(out, op, out) for out, _, op in specs])


def _group(t: pa.Table, specs: list[tuple[str, str, str]]) -> pa.Table:
    """Group ``t`` by ``KEYS``; ``specs``: (column, aggregation, output name)."""
    unique = list(dict.fromkeys((col, op) for col, op, _ in specs))
    grouped = t.group_by(KEYS, use_threads=False).aggregate(unique)
    columns = {name: grouped[f"{col}_{op}"] for col, op, name in specs}
    return pa.table({**{k: grouped[k] for k in KEYS}, **columns})


# ---- born-to-store delay histogram ----------------------------------------------------------------

SUB_BITS = 7  # 128 sub-buckets per power of two above the exact range: relative error < 1/128
EXACT = 1 << 10  # delays below 1024 ms are counted exactly
_EXACT_BITS = 10


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


def delay_histogram(t: pa.Table) -> pa.Table:
    """Counts per topic, queue and delay bucket."""
    delay = _np(t["store_timestamp"]) - _np(t["born_timestamp"])
    work = pa.table({"topic": t["topic"], "queue_id": t["queue_id"], "bucket": pa.array(delay_bucket(delay)), "n": pa.array(np.ones(len(delay), dtype=np.int64))})
    return work.group_by(["topic", "queue_id", "bucket"], use_threads=False).aggregate([("n", "sum")])


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

_V4 = fmt.HEADER_LAYOUTS[(False, False)]
_BORN_V6 = fmt.HEADER_LAYOUTS[(True, False)]
assert _BORN_V6.offset_of("store_timestamp") == fmt.HEADER_LAYOUTS[(True, True)].offset_of("store_timestamp")
POS_QUEUE_ID = _V4.offset_of("queue_id")
POS_QUEUE_OFFSET = _V4.offset_of("queue_offset")
POS_SYS_FLAG = _V4.offset_of("sys_flag")
POS_BORN_TS = _V4.offset_of("born_timestamp")
POS_STORE_TS_V4 = _V4.offset_of("store_timestamp")
POS_STORE_TS_BORN_V6 = _BORN_V6.offset_of("store_timestamp")
BORN_V6 = int(fmt.SysFlag.BORNHOST_V6)
# rows of the field block ``stats_fields`` fills (one column per record)
F_TOPIC, F_QUEUE_ID, F_SYS_FLAG, F_BORN_TS, F_STORE_TS, F_QUEUE_OFFSET, F_SIZE, F_BODY_LEN, F_CRC_OK, F_BUCKET, F_TOPIC_AT, F_TOPIC_LEN, N_FIELDS = range(13)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@numba.njit(inline="always")
def _be(buf, p, width):
    v = np.int64(0)
    for j in range(width):
        v = (v << 8) | np.int64(buf[p + j])
    return v


@numba.njit(inline="always")
def _signed32(v):
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@numba.njit(inline="always")
def _bucket(delay):
    """``delay_bucket`` for one value."""
    a = -delay if delay < 0 else delay
    if a < EXACT:
        b = a
    else:
        e = np.int64(_EXACT_BITS)
        while (a >> (e + 1)) > 0:
            e += 1
        b = EXACT + (e - _EXACT_BITS) * (np.int64(1) << SUB_BITS) + ((a >> (e - SUB_BITS)) & ((np.int64(1) << SUB_BITS) - 1))
    return -b - 1 if delay < 0 else b


@numba.njit(inline="always")
def _topic_key(buf, start, stop):
    """A 64-bit key of the topic bytes: FNV-1a over 8-byte words, then the tail bytes, then the
    length (two different topics share a key with probability ~2**-64 per pair)."""
    h = _FNV_OFFSET
    k = start
    while k + 8 <= stop:
        h = (h ^ np.uint64(_be(buf, k, 8))) * _FNV_PRIME
        k += 8
    while k < stop:
        h = (h ^ np.uint64(buf[k])) * _FNV_PRIME
        k += 1
    return np.int64((h ^ np.uint64(stop - start)) * _FNV_PRIME)


@numba.njit(cache=True, nogil=True)
def stats_fields(buf, base, rows, out, at):
    """Per valid record (``rows`` of the walk), into column ``at + i`` of ``out``: topic key,
    queue id, sys flag, born and store timestamps, queue offset, size, body length, CRC ok, delay
    bucket, topic offset and length; one visit of each record's header."""
    for i in range(rows.shape[0]):
        p = rows[i, 0]
        j = at + i
        topic_start, topic_stop = rows[i, 4], rows[i, 5] - 2
        out[0, j] = _topic_key(buf, topic_start, topic_stop)
        out[10, j] = base + topic_start
        out[11, j] = topic_stop - topic_start
        out[1, j] = _signed32(_be(buf, p + POS_QUEUE_ID, 4))
        flag = _signed32(_be(buf, p + POS_SYS_FLAG, 4))
        out[2, j] = flag
        born = _be(buf, p + POS_BORN_TS, 8)
        store = _be(buf, p + (POS_STORE_TS_BORN_V6 if flag & BORN_V6 else POS_STORE_TS_V4), 8)
        out[3, j] = born
        out[4, j] = store
        out[5, j] = _be(buf, p + POS_QUEUE_OFFSET, 8)
        out[6, j] = rows[i, 1]
        out[7, j] = rows[i, 3]
        out[8, j] = rows[i, 6]
        out[9, j] = _bucket(store - born)


assert (F_TOPIC, F_QUEUE_ID, F_SYS_FLAG, F_BORN_TS, F_STORE_TS, F_QUEUE_OFFSET, F_SIZE, F_BODY_LEN, F_CRC_OK, F_BUCKET, F_TOPIC_AT, F_TOPIC_LEN) == tuple(range(12))
assert (fs.COL_POS, fs.COL_SIZE, fs.COL_BODY_LEN, fs.COL_TOPIC, fs.COL_PROPS, fs.COL_CRC_OK, fs.PROPS_LEN) == (0, 1, 3, 4, 5, 6, 2)


@dataclass
class StoreStats:
    """The aggregates of one pass: per topic/queue (all time) and per topic/queue/period."""

    per_period: pa.Table  # KEYS + aggregate columns (period start in epoch ms)
    histogram: pa.Table  # topic, queue_id, bucket, n
    topics: dict[int, str]  # topic key -> topic name
    end: object = None  # the walk's ScanEnd
    records: int = 0


ACCUMULATE = 1 << 16  # records gathered before one aggregation (Arrow's group-by per call has a cost)
WALK_BATCH = 1 << 10  # records per walk call: their bytes are still in cache when the kernel reads them


def collect(store: Store, period_ms: int = HOUR_MS, *, progress: Callable[[int], None] | None = None, batch: int = WALK_BATCH) -> StoreStats:
    """One pass over the store's records (the broker's recovery scan) into ``StoreStats``."""
    walk = fs.FastScan(store.commitlog, check_crc=True, batch=batch, release_behind=True)
    topics: dict[int, str] = {}
    partials: list[pa.Table] = []
    histograms: list[pa.Table] = []
    block = np.empty((N_FIELDS, ACCUMULATE + batch), dtype=np.int64)
    filled = 0

    def flush() -> None:
        c = block[:, :filled]
        keys, first = np.unique(c[F_TOPIC], return_index=True)
        for key, i in zip(keys.tolist(), first.tolist()):
            if key not in topics:
                topics[key] = store.commitlog.read_bytes(int(c[F_TOPIC_AT, i]), int(c[F_TOPIC_LEN, i])).decode("utf-8", "replace")
        t = pa.table(
            {
                "topic": c[F_TOPIC],
                "queue_id": c[F_QUEUE_ID].astype(np.int32),
                "size": c[F_SIZE],
                "body_length": c[F_BODY_LEN],
                "crc_ok": c[F_CRC_OK] != 0,
                "sys_flag": c[F_SYS_FLAG],
                "born_timestamp": c[F_BORN_TS],
                "store_timestamp": c[F_STORE_TS],
                "queue_offset": c[F_QUEUE_OFFSET],
            }
        )
        partials.append(aggregate(t, period_ms, extended=True))
        work = pa.table({"topic": t["topic"], "queue_id": t["queue_id"], "bucket": c[F_BUCKET], "n": np.ones(filled, dtype=np.int64)})
        histograms.append(work.group_by(["topic", "queue_id", "bucket"], use_threads=False).aggregate([("n", "sum")]))

    for b in walk:
        rows = b.rows
        stats_fields(b.array, b.base_offset, rows, block, filled)
        filled += len(rows)
        if filled >= ACCUMULATE:
            flush()
            filled = 0
        if progress is not None:
            progress(b.base_offset + int(rows[-1, fs.COL_POS]))
    if filled:
        flush()
    if partials:
        per_period = merge(partials, extended=True)
        hist = pa.concat_tables(histograms).group_by(["topic", "queue_id", "bucket"], use_threads=False).aggregate([("n_sum", "sum")]).rename_columns(["topic", "queue_id", "bucket", "n"])
    else:
        per_period = _empty_aggregate()
        hist = pa.table({"topic": pa.array([], pa.int64()), "queue_id": pa.array([], pa.int32()), "bucket": pa.array([], pa.int64()), "n": pa.array([], pa.int64())})
    return StoreStats(per_period, hist, topics, walk.end, walk.records)


def _empty_aggregate() -> pa.Table:
    empty = {k: np.zeros(0, dtype=np.int64) for k in EXTENDED_INPUT}
    empty["crc_ok"] = np.zeros(0, dtype=bool)
    return aggregate(pa.table(empty), HOUR_MS, extended=True)


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


def _is_delay_topic(topic: str) -> bool:
    return topic in (SCHEDULE_TOPIC, TIMER_TOPIC)


def queue_rows(stats: StoreStats, topics: Iterable[str] | None = None) -> list[dict]:
    """One row per topic and queue (``row: "queue"``), sorted by topic and queue id."""
    wanted = set(topics) if topics else None
    sums = [(out, op) for out, _, op in BASE_AGGREGATES + EXTENDED_AGGREGATES]
    per_queue = stats.per_period.group_by(["topic", "queue_id"], use_threads=False).aggregate(sums)
    medians: dict[tuple[int, int], int] = {}
    hist: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    for r in stats.histogram.to_pylist():
        b, c = hist.setdefault((r["topic"], r["queue_id"]), ([], []))
        b.append(r["bucket"])
        c.append(r["n"])
    for key, (b, c) in hist.items():
        medians[key] = median_from_histogram(b, c)  # clamped into [min, max] below
    rows = []
    for r in per_queue.to_pylist():
        topic = stats.topics[r["topic"]]
        if wanted is not None and topic not in wanted:
            continue
        v = {out: r[f"{out}_{op}"] for out, op in sums}
        messages = v["messages"]
        rows.append(
            {
                "row": "queue",
                "topic": topic,
                "queue_id": r["queue_id"],
                **{k: v[k] for k in ("messages", "bytes", "first_store_timestamp", "last_store_timestamp")},
                "first_store_time": _iso(v["first_store_timestamp"]),
                "last_store_time": _iso(v["last_store_timestamp"]),
                **{k: v[k] for k in ("body_bytes", "dispatched", "min_queue_offset", "max_queue_offset", "delay_min_ms")},
                "delay_median_ms": min(max(medians[r["topic"], r["queue_id"]], v["delay_min_ms"]), v["delay_max_ms"]),
                **{k: v[k] for k in ("delay_max_ms", "not_type", "prepared", "commit", "rollback")},
                "delayed": messages if _is_delay_topic(topic) else 0,
                "compressed": v["compressed"],
                "retried": messages if topic.startswith("%RETRY%") else 0,
                "dlq": messages if topic.startswith("%DLQ%") else 0,
                "crc_failures": v["crc_failures"],
            }
        )
    rows.sort(key=lambda r: (r["topic"], r["queue_id"]))
    return rows


def period_rows(stats: StoreStats, period: str, topics: Iterable[str] | None = None) -> list[dict]:
    """One row per topic and period (``row: "period"``, ``queue_id`` null): volumes over time."""
    wanted = set(topics) if topics else None
    t = stats.per_period.group_by(["topic", "period"], use_threads=False).aggregate([("messages", "sum"), ("bytes", "sum")])
    rows = []
    for r in t.to_pylist():
        topic = stats.topics[r["topic"]]
        if wanted is not None and topic not in wanted:
            continue
        rows.append({"row": "period", "topic": topic, "queue_id": None, "period": period, "period_start": r["period"], "period_start_time": _iso(r["period"]), "messages": r["messages_sum"], "bytes": r["bytes_sum"]})
    rows.sort(key=lambda r: (r["topic"], r["period_start"]))
    return rows
