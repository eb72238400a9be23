"""Consumer and schedule progress against the queues (reference §1.4, §5.9, §9.3; rules §2.16)."""

from __future__ import annotations

from typing import Any

from ..formats.consumequeue import ENTRY_SIZE
from ..formats.dispatch import SCHEDULE_TOPIC
from ..formats.timer import TIMER_TOPIC, decode_timer_check
from .lookup import QueueRange, pickup_store_timestamp, queue_range
from .store import ConfigDocument, Store

TIMERCHECK_FIELDS = ("last_read_time_ms", "last_timer_log_flush_pos", "last_timer_queue_offset", "master_timer_queue_offset", "data_version_state_version", "data_version_timestamp", "data_version_counter")

AT_MIN, IN_RANGE, AT_MAX, BEYOND_MAX, BELOW_MIN, NO_QUEUE = "at_min", "in_range", "at_max", "beyond_max", "below_min", "no_queue"


def relation(offset: int, rng: QueueRange | None) -> str:
    """Where a committed offset lies in its queue (max first: an empty queue's offset is at max)."""
    if rng is None:
        return NO_QUEUE
    if offset > rng.max_offset:
        return BEYOND_MAX
    if offset == rng.max_offset:
        return AT_MAX
    if offset < rng.min_offset:
        return BELOW_MIN
    if offset == rng.min_offset:
        return AT_MIN
    return IN_RANGE


def progress_row(store: Store, topic: str, queue_id: int, offset: int, cache: dict, lag: bool = True) -> dict[str, Any]:
    """One committed offset against its queue: range, relation, lag, next store time (``lag`` False: unread)."""
    key = (topic, queue_id)
    if key not in cache:
        cache[key] = queue_range(store, topic, queue_id)
    rng = cache[key]
    if rng is None and offset == 0:
        # a queue never written: the broker creates it empty and reads [0, 0]
        # (ConsumeQueueStore.findOrCreateConsumeQueue), so offset 0 is its max, not a queue gone
        rng = QueueRange(0, 0)
    row: dict[str, Any] = {"topic": topic, "queue_id": queue_id, "offset": offset, "relation": relation(offset, rng)}
    row["queue_min_offset"] = rng.min_offset if rng else None
    row["queue_max_offset"] = rng.max_offset if rng else None
    row["lag_messages"] = row["lag_bytes"] = row["next_store_timestamp"] = None
    if rng is not None and lag:
        start = min(max(offset, rng.min_offset), rng.max_offset)  # where the broker resumes
        row["lag_messages"] = rng.max_offset - start
        row["lag_bytes"] = _bytes_between(store, topic, queue_id, start, rng.max_offset)
        if start < rng.max_offset:
            entry = store.consume_queue(topic, queue_id).read_entry(start)
            if entry is not None:
                ts = pickup_store_timestamp(store, entry.phys_offset, entry.size)
                row["next_store_timestamp"] = ts if ts >= 0 else None
    return row


def _bytes_between(store: Store, topic: str, queue_id: int, start: int, stop: int) -> int:
    """Sum of the record sizes the consume queue units [start, stop) name."""
    queue = store.consume_queue(topic, queue_id)
    total = 0
    for base, path in queue.files:
        first, last = base // ENTRY_SIZE, (base + queue.file_size) // ENTRY_SIZE
        if last <= start or first >= stop:
            continue
        units = queue.units(path)
        total += int(units["size"][max(start - first, 0) : min(stop, last) - first].sum())
    return total


def consumer_offsets(store: Store, groups: set[str] | None = None, cache: dict | None = None,
                     lag: bool = True) -> tuple[ConfigDocument, list[dict[str, Any]]]:
    """Every committed offset of ``consumerOffset.json`` (of ``groups`` when given; ``lag``: as ``progress_row``)."""
    loaded = store.load_config("consumerOffset.json")
    cache = {} if cache is None else cache
    rows = []
    if loaded.doc is not None:
        for (topic, group, queue_id), offset in sorted(loaded.offsets.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
            if groups and group not in groups:
                continue
            rows.append({"kind": "consumer", "group": group, **progress_row(store, topic, queue_id, offset, cache, lag)})
    return loaded, rows


def delay_offsets(store: Store, cache: dict | None = None) -> tuple[ConfigDocument, list[dict[str, Any]]]:
    """Schedule progress per delay level, with the offset loaded (``correctDelayOffset`` from 4.9.2, rules §2.16)."""
    loaded = store.load_config("delayOffset.json")
    cache = {} if cache is None else cache
    rows = []
    clamps = store.rules.corrects_delay_offsets
    if loaded.doc is not None:
        for level, offset in sorted(loaded.offsets.items()):
            key = (SCHEDULE_TOPIC, level - 1)
            if key not in cache:  # a level's queue without files is empty, [0, 0]: findConsumeQueue creates it
                cache[key] = queue_range(store, *key) or QueueRange(0, 0)
            row = {"kind": "delay", "group": None, "delay_level": level, **progress_row(store, SCHEDULE_TOPIC, level - 1, offset, cache)}
            lo, hi = row["queue_min_offset"], row["queue_max_offset"]
            row["loaded_offset"] = min(max(offset, lo), hi) if clamps and lo is not None else offset
            rows.append(row)
    return loaded, rows


def timer_progress(store: Store, cache: dict | None = None) -> list[dict[str, Any]]:
    """5.x: the timer store's checkpointed offset in ``rmq_sys_wheel_timer/0`` (``config/timercheck``)."""
    path = store.file("config", "timercheck")
    if not store.rules.v5 or path is None:
        return []
    raw = path.read_bytes()
    if len(raw) < 8 * len(TIMERCHECK_FIELDS):
        return [{"kind": "timer", "group": None, "topic": TIMER_TOPIC, "queue_id": 0, "relation": None, "error": f"config/timercheck: {len(raw)} bytes, too short"}]
    check = dict(zip(TIMERCHECK_FIELDS, decode_timer_check(raw)))  # the file's names for the fields
    row = {"kind": "timer", "group": None, **progress_row(store, TIMER_TOPIC, 0, check["last_timer_queue_offset"], {} if cache is None else cache)}
    row["timercheck"] = check
    return [row]


FIELDS = ("kind", "group", "topic", "queue_id", "delay_level", "offset", "loaded_offset", "relation", "queue_min_offset", "queue_max_offset", "lag_messages", "lag_bytes", "next_store_timestamp", "timercheck", "error")
