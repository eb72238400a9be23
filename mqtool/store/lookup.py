"""The broker's own lookups, offline (reference §5, §6): ``query_message``, ``queue_range_and_offset_by_time``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from ..formats import commitlog as clfmt
from ..formats.consumequeue import ENTRY_SIZE
from ..formats.dispatch import indexed_keys
from ..formats.errors import FormatError
from ..formats.properties import PropertyKey, split_keys
from .consumequeue import read_unit
from .index import LONG_MAX, query_entries
from .nextstart import ENDS, Cut, end_before, ends_before
from .startfile import log_recovery_mode
from .store import Store
from .version import eras_label

DEFAULT_MAX_KEY = 64  # mqadmin queryMsgByKey asks 64; IndexService caps at maxMsgsNumBatch = 64
DEFAULT_MAX_UNIQ = 32  # QueryMessageProcessor: UNIQ_KEY queries use defaultQueryMaxNum = 32
KEY, UNIQ_KEY = "key", "uniq-key"


@dataclass
class Found:
    """A lookup result: the offset, how it was found, the record (None where the broker would not return it: ``error``)."""

    offset: int
    source: str  # "index", "unindexed" (after the index's last entry) or "scan" (no index)
    record: clfmt.CommitLogRecord | None = None
    key_matches: bool | None = None
    index_file: str | None = None  # an index hit's file (an entry on ``topic#key``'s slot chain with the key's hash)
    index_entry: int | None = None  # and its entry number in that file
    error: str | None = None


@dataclass
class Lookup:
    """``query_message``'s answer: every index hit in the broker's order, plus what was scanned."""

    found: list[Found] = field(default_factory=list)
    indexed_until: int | None = None  # the newest index file's end_phy_offset
    indexed: bool = True  # False: no index file, the caller scans (``mqtool.scan.lookup``)
    notes: list[str] = field(default_factory=list)

    @property
    def matches(self) -> list[Found]:
        return [f for f in self.found if f.key_matches]


def key_matches(record: clfmt.CommitLogRecord, topic: str, key: str, kind: str, legacy: bool) -> bool:
    """What mqadmin keeps (``MQAdminImpl.queryMessage``): the topic, and the key among KEYS or the UNIQ_KEY equal, by kind."""
    if record.topic_name != topic:
        return False
    props = record.property_map(legacy=legacy)
    if kind == UNIQ_KEY:
        return props.get(PropertyKey.UNIQ_KEY) == key
    return key in split_keys(props.get(PropertyKey.KEYS))


def _indexed_keys(record: clfmt.CommitLogRecord, legacy: bool, rule: int) -> list[str]:
    """The keys ``IndexService.buildIndex`` puts for a record under ``rule`` (rules §4.2; none for a rollback)."""
    props = record.property_map(legacy=legacy)
    return indexed_keys(record.sys_flag, props.get(PropertyKey.UNIQ_KEY), split_keys(props.get(PropertyKey.KEYS)), rule)


def read_message(store: Store, offset: int) -> tuple[clfmt.CommitLogRecord | None, str | None]:
    """The record at ``offset`` as ``CommitLog.getData`` would serve it, or why not."""
    if offset < store.commitlog.min_offset:
        return None, f"expired (below the log's min {store.commitlog.min_offset})"
    try:
        record = store.commitlog.read_record(offset)
    except LookupError:
        return None, "no commit log segment holds it"
    except FormatError as exc:
        return None, f"no record: {exc}"
    if not isinstance(record, clfmt.CommitLogRecord):
        return None, "a blank record"
    return record, None


def read_served(store: Store, offset: int) -> tuple[clfmt.CommitLogRecord | None, str | None]:
    """``read_message`` less a record the next start cuts off: what ``viewMessage`` returns after a restart."""
    record, error = read_message(store, offset)
    cut = None if record is None else end_before(store, record.offset, record.total_size)
    return (record, error) if cut is None else (None, past_end_error(cut))


def past_end_error(cut: Cut) -> str:
    """Why a record past the next start's end is not served: the log before a crash, or an earlier life of the segment."""
    ends = f"the broker's next start ends the log at {cut.end.offset} ({ENDS.get(cut.end.reason, cut.end.reason)})"
    eras = f" (the next start of {cut.eras} brokers; the others serve it: --broker-version decides)" if cut.eras else ""
    return f"past the log's end: {ends} and serves nothing after it{eras}"


def _after_index(store: Store) -> tuple[int | None, int | None]:
    """The offset of the index's last entry (``end_phy_offset``) and of the record after it (None: no record there)."""
    files = store.index_files
    if not files or files[-1].header.index_count <= 1:
        return None, None
    last = files[-1].header.end_phy_offset
    record, _ = read_message(store, last)
    return last, None if record is None else last + record.total_size


def query_message(store: Store, topic: str, key: str, kind: str = KEY, max_hits: int | None = None, begin: int = 0, end: int = LONG_MAX) -> Lookup:
    """``DefaultMessageStore.queryMessage`` on the files as they are, hits checked, unindexed records too."""
    if max_hits is None:
        max_hits = DEFAULT_MAX_UNIQ if kind == UNIQ_KEY else DEFAULT_MAX_KEY
    legacy = store.legacy_properties
    result = Lookup()
    if not store.index_files:
        result.indexed = False
        result.notes.append("no index file (deleted, or messageIndexEnable off): the commit log has to be scanned")
        return result
    rule = store.rules.index_rule
    result.indexed_until, first_after = _after_index(store)
    tail = store.commitlog.scan(first_after) if first_after is not None else ()
    unindexed = [r for r in tail if begin <= r.store_timestamp <= end and r.topic_name == topic and key in _indexed_keys(r, legacy, rule)]
    # The broker tries three times, but asks again with an earlier end time only after serving the first hit, when it
    # has stopped: its later tries repeat the first.
    hits = sorted(query_entries(store.index_files, topic, key, max_hits, begin, end), key=lambda hit: hit[2])
    result.found = [_read_found(store, offset, "index", topic, key, kind, f.name, entry) for f, entry, offset, _ in hits]
    seen = {f.offset for f in result.found}
    for record in unindexed:
        if record.offset not in seen:
            result.found.append(Found(record.offset, "unindexed", record, key_matches(record, topic, key, kind, legacy)))
    if unindexed:
        result.notes.append(f"{len(unindexed)} record(s) after the index's last entry (offset {result.indexed_until}) matched by a scan")
    return served(store, result)


def served(store: Store, result: Lookup) -> Lookup:
    """``result`` less the records the next start cuts off (``nextstart.ends_before``), their ``error`` saying why."""
    read = [f for f in result.found if f.record is not None]
    for f, cut in zip(read, ends_before(store, [(f.offset, f.record.total_size) for f in read])):
        if cut is not None:
            f.record, f.key_matches, f.error = None, None, past_end_error(cut)
    return result


def _read_found(store: Store, offset: int, source: str, topic: str, key: str, kind: str, index_file: str | None = None,
                index_entry: int | None = None) -> Found:
    """The record at ``offset`` read as the broker serves it (``read_message``) and matched (``key_matches``)."""
    record, error = read_message(store, offset)
    matches = None if record is None else key_matches(record, topic, key, kind, store.legacy_properties)
    return Found(offset, source, record, matches, index_file, index_entry, error)


def found_by_scan(store: Store, offsets: list[int], topic: str, key: str, kind: str) -> list[Found]:
    """The records a scan matched (``mqtool.scan.lookup.scan_key_offsets``), read and checked (``served``)."""
    return served(store, Lookup([_read_found(store, offset, "scan", topic, key, kind) for offset in offsets])).found


# ---- consume queue lookups -------------------------------------------------------------------


class QueueRange(NamedTuple):
    """A queue's offsets as the broker loads them (recovery end, ``correctMinOffset``)."""

    min_offset: int
    max_offset: int


def queue_range(store: Store, topic: str, queue_id: int) -> QueueRange | None:
    """``getMinOffsetInQueue`` / ``getMaxOffsetInQueue`` as loaded, or None without such a queue."""
    queue = store.consume_queue(topic, queue_id)
    return _range(store, queue, queue.recover()) if queue.files else None


def _range(store: Store, queue, recovered) -> QueueRange:
    return QueueRange(queue.corrected_min_offset(store.commitlog.min_offset, recovered.end, v5=store.rules.v5), recovered.max_offset)


def read_queue_entry(store: Store, topic: str, queue_id: int, queue_offset: int, phys_offset: int,
                     size: int) -> tuple[clfmt.CommitLogRecord | None, str | None, str]:
    """(record, error, status) of a queue entry as the restarted broker's ``getMessage`` serves it (§5.8; rules 2.4, 2.8)."""
    cut = end_before(store, phys_offset, size)
    if cut is None:
        record, error = read_message(store, phys_offset)
        return record, error, "FOUND" if record is not None else "MESSAGE_WAS_REMOVING"
    eras = store.version_guess.eras
    always = store.recovers_dledger_data or log_recovery_mode(store, store.rules) == "abnormal"
    keeping = [] if always else [e for e in eras if e not in store.eras_where("normal_truncates_cq")]  # eras whose start keeps it
    if phys_offset < cut.end.offset or len(keeping) == len(eras):
        return None, past_end_error(cut), "MESSAGE_WAS_REMOVING"
    max_offset = queue_max_after_cut(store, topic, queue_id, cut.end.offset, queue_offset)
    status = "NO_MESSAGE_IN_QUEUE" if max_offset == 0 else "OFFSET_OVERFLOW_ONE" if max_offset == queue_offset else "OFFSET_OVERFLOW_BADLY"
    undecided = f"; {eras_label(keeping)} brokers keep the entry (MESSAGE_WAS_REMOVING): --broker-version decides" if keeping else ""
    return None, f"{past_end_error(cut)}; it truncates this queue to max offset {max_offset}{undecided}", status


def queue_max_after_cut(store: Store, topic: str, queue_id: int, end: int, below: int) -> int:
    """The queue's max offset once ``truncateDirtyLogicFiles(end)`` (§5.8) removed its units at or past ``end``."""
    queue = store.consume_queue(topic, queue_id)
    first = low = queue.files[0][0] // ENTRY_SIZE
    high = below
    while low < high:
        mid = (low + high) // 2
        entry = queue.read_entry(mid)
        if entry is None or not entry.is_valid or entry.phys_offset >= end:
            high = mid
        else:
            low = mid + 1
    return 0 if low == first else low


def pickup_store_timestamp(store: Store, phys_offset: int, size: int) -> int:
    """``CommitLog.pickupStoreTimestamp``: the record's store time, or -1 where nothing is mapped or read."""
    segment = store.commitlog.file_size
    if phys_offset < store.commitlog.min_offset or phys_offset % segment + size > segment:
        return -1
    record, _ = read_message(store, phys_offset)
    return -1 if record is None else record.store_timestamp


class _QueueFile:
    """A consume queue file with its readable range after load; units read one ``pread`` each, only those searched."""

    def __init__(self, store: Store, base: int, path, readable: int):
        self.store, self.base, self.path, self.readable = store, base, path, readable
        self._units: dict[int, tuple[int, int]] = {}

    def unit(self, pos: int) -> tuple[int, int]:
        if pos not in self._units:
            self._units[pos] = (read_unit(self.path, pos) or (0, 0, 0))[:2]
        return self._units[pos]

    def time_at(self, pos: int) -> int:
        return pickup_store_timestamp(self.store, *self.unit(pos))


def queue_range_and_offset_by_time(store: Store, topic: str, queue_id: int, timestamp: int) -> tuple[QueueRange | None, int]:
    """``queue_range`` and ``getOffsetInQueueByTime`` on one recovery of the queue (``(None, 0)`` without it)."""
    queue = store.consume_queue(topic, queue_id)
    if not queue.files:
        return None, 0
    recovered = queue.recover()
    rng = _range(store, queue, recovered)
    files = []
    for base, path in queue.files:
        if base >= recovered.end and files:
            break  # truncated away on load (truncateDirtyFiles)
        readable = min(queue.file_size, max(recovered.end - base, 0))
        files.append(_QueueFile(store, base, path, readable))
    chosen = next((f for f in files[:-1] if f.readable >= ENTRY_SIZE and f.time_at(queue.file_size - ENTRY_SIZE) >= timestamp), files[-1])
    if store.rules.v5:
        offset = _search_v5(chosen, timestamp, rng.min_offset * ENTRY_SIZE, queue.file_size)
        return rng, min(max(offset, rng.min_offset), recovered.max_offset)
    return rng, _search_v4(chosen, timestamp, rng.min_offset * ENTRY_SIZE)


def _bisect(f: _QueueFile, low: int, high: int, timestamp: int) -> tuple[int, int, int, int, int] | None:
    """Both versions' binary search: ``(target, left, lvalue, right, rvalue)`` (-1: none), None on an unreadable record."""
    target = left = right = left_value = right_value = -1
    min_phys = f.store.commitlog.min_offset
    while high >= low:
        mid = (low + high) // (2 * ENTRY_SIZE) * ENTRY_SIZE
        phys, size = f.unit(mid)
        if phys < min_phys:
            low, left = mid + ENTRY_SIZE, mid
            continue
        t = pickup_store_timestamp(f.store, phys, size)
        if t < 0:
            return None
        if t == timestamp:
            target = mid
            break
        if t > timestamp:
            high, right, right_value = mid - ENTRY_SIZE, mid, t
        else:
            low, left, left_value = mid + ENTRY_SIZE, mid, t
    return target, left, left_value, right, right_value


def _search_v4(f: _QueueFile, timestamp: int, min_logic: int) -> int:
    """4.x ``getOffsetInQueueByTime``: binary search, the nearer entry (earlier on a tie), clamped to the ends."""
    found = _bisect(f, max(min_logic - f.base, 0), f.readable - ENTRY_SIZE, timestamp)
    if found is None:
        return 0
    target, left, left_value, right, right_value = found
    if target != -1:
        offset = target
    elif left_value == -1:
        offset = right
    elif right_value == -1:
        offset = left
    else:
        offset = right if abs(timestamp - left_value) > abs(timestamp - right_value) else left
    position = f.base + offset
    return -(-position // ENTRY_SIZE) if position < 0 else position // ENTRY_SIZE  # Java's division: -1 / 20 == 0


def _search_v5(f: _QueueFile, timestamp: int, min_logic: int, file_size: int) -> int:
    """5.x ``binarySearchInQueueByTime`` (``LOWER``): the first entry at or after ``timestamp``, else the max offset."""
    low = max(min_logic - f.base, 0)
    readable = f.readable if 0 < f.readable < file_size else file_size
    ceiling = readable - ENTRY_SIZE
    if f.time_at(ceiling) < timestamp:
        return (f.base + ceiling + ENTRY_SIZE) // ENTRY_SIZE
    if f.time_at(low) > timestamp:
        return f.base // ENTRY_SIZE
    found = _bisect(f, low, ceiling, timestamp)
    if found is None:
        return 0
    target, _, _, right, _ = found
    if target != -1:
        offset = target
        while offset - ENTRY_SIZE >= low and f.time_at(offset - ENTRY_SIZE) == timestamp:
            offset -= ENTRY_SIZE
    else:
        offset = right
    return (f.base + offset) // ENTRY_SIZE
