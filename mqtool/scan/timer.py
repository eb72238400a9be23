"""Timer messages and their fate (reference §9, §2.13): each timer log unit joined with its record and re-put copy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa

from ..formats import timer as fmt
from ..formats.dispatch import java_int_or_none
from ..formats.errors import FormatError
from ..formats.properties import PropertyKey
from ..store import Store
from ..store.lookup import QueueRange, queue_max_after_cut, queue_range
from ..store.redispatch import dispatching_recovery, redispatch_start
from ..store.commitlog import ScanEnd
from ..store.fastscan import SegmentBatch
from ..store.resync import record_start
from ..store.timer import TimerLogEnd, TimerStore
from . import compute
from .filter import MessageFilter
from .messages import MessageScan

if TYPE_CHECKING:
    from ..store.nextstart import NextStart

TIMER_FIELDS = (
    "timer_log_offset", "magic", "prev_pos", "enqueue_time", "delivery_time", "offset", "size",
    "real_topic", "real_queue_id", "uniq_key", "keys", "state", "delivered_offset",
)
STATES = ("pending", "delivered", "rolled", "cancelled", "lost")


@dataclass
class TimerReport:
    """The units' rows, where the logs end, and from the same walk the ``queued`` records and ``deliveries``."""

    rows: list[dict]
    log_end: TimerLogEnd
    commitlog_end: int
    queued: pa.Table
    deliveries: dict[str, list[tuple[int, str]]]


def _timer_record(store: Store, offset: int, size: int):
    """The ``rmq_sys_wheel_timer`` record at ``offset`` with ``size`` bytes, or None."""
    try:
        record = store.commitlog.read_record(offset)
    except (FormatError, LookupError):
        return None
    return record if record.total_size == size and record.topic_name == fmt.TIMER_TOPIC else None


def _identity(uniq_key: str | None, born_timestamp: int, body_crc: int) -> str:
    """What ties a delivered copy to its timer record: the UNIQ_KEY, else born time and body CRC (both copied)."""
    return f"u:{uniq_key}" if uniq_key else f"b:{born_timestamp}:{body_crc}"


WALK_COLUMNS = ("offset", "topic", "queue_id", "queue_offset", "uniq_key", "born_timestamp", "body_crc")


class TimerWalk:
    """The one commit log walk of ``timer_report``: ``units``, then the log's batches in order (``add``, ``add_rows``)."""

    def __init__(self, store: Store, timer: TimerStore):
        self.store, self.timer = store, timer
        self.units = list(timer.log.walk())
        records = {}
        for unit in self.units:
            if unit.offset_py not in records:
                records[unit.offset_py] = _timer_record(store, unit.offset_py, unit.size_py)
        legacy = store.legacy_properties
        readable = {offset: r for offset, r in records.items() if r is not None}
        props = self.props = {offset: r.property_map(legacy=legacy) for offset, r in readable.items()}
        self.identity = {offset: _identity(props[offset].get(PropertyKey.UNIQ_KEY), r.born_timestamp, r.body_crc) for offset, r in readable.items()}
        identities = set(self.identity.values())
        self.uniqs = {i[2:] for i in identities if i.startswith("u:")}
        self.borns = {i for i in identities if i.startswith("b:")}
        self.found: dict[str, list[tuple[int, str]]] = {}
        self.queued: list[pa.RecordBatch] = []
        self.end: int | None = None
        self.timers = MessageFilter(topics=(fmt.TIMER_TOPIC,), queue=0)
        self.builder: MessageScan | None = None  # the columns of another walk's batches (``add_rows``)

    def walk(self, after: ScanEnd | None = None) -> "TimerWalk":
        """Fed by its own scan to the end of the served log (``_resume``); ``after``: where another walk feeding it stopped."""
        end, start = after, None if after is None else self._resume(after)
        while end is None or start is not None:
            if end is not None:
                self._loose(end, start)
            scan = MessageScan(self.store, start=start, columns=list(WALK_COLUMNS), check_crc=False)
            for batch in scan:
                self.add(batch)
            end = scan.end
            self.end = end.offset
            start = self._resume(end)
        return self

    def _resume(self, end: ScanEnd) -> int | None:
        """Where the scan goes on after ``end`` as verify's walk and ``dump`` do (``resume_after_damage``), else None."""
        store, segments = self.store, self.store.commitlog.segments
        if store.root is None or not segments:
            return None
        from ..store.nextstart import scan_start_offset

        kept = store.is_dledger or end.offset < segments[-1].base_offset and end.unread_by_broker(scan_start_offset(store))
        resumed = store.commitlog.resume_after_damage(end) if kept else None
        return resumed if resumed is not None and resumed > end.offset else None

    def _loose(self, end: ScanEnd, resume: int) -> None:
        """The served record inside a header-broken DLedger entry (``loose_walk``), fed as the scan's records."""
        from ..store.dledgerstart import loose_walk

        walk = loose_walk(self.store.commitlog, end, resume, check_crc=False, stop_on_crc=False)
        if walk is not None:
            for batch in MessageScan(self.store, columns=list(WALK_COLUMNS), walk=walk):
                self.add(batch)

    def add_rows(self, batch: SegmentBatch) -> None:
        """One batch of another walk of the log, the one ``walk``'s scan would read: its columns built as that scan builds them."""
        if self.builder is None:
            self.builder = MessageScan(self.store, columns=list(WALK_COLUMNS), walk=())
        built = self.builder.build(batch)
        if built is not None:
            self.add(built)

    def add(self, batch: pa.RecordBatch) -> None:
        """The next batch: its queue 0 records queued and their identities sought from here on, matching records kept."""
        uniqs, borns = self.uniqs, self.borns
        timer = compute.filter(batch, self.timers.mask(batch))
        if len(timer):
            self.queued.append(timer.select(["offset", "queue_offset"]))
            for key, born, crc in zip(*(timer[c].to_pylist() for c in ("uniq_key", "born_timestamp", "body_crc"))):
                if key:
                    uniqs.add(key)
                else:
                    borns.add(_identity(None, born, crc))
        keys = batch["uniq_key"].to_pylist()
        take = [i for i, key in enumerate(keys) if key in uniqs]
        if borns:  # the keyless rows: by born time and body CRC
            born, crc = batch["born_timestamp"].to_pylist(), batch["body_crc"].to_pylist()
            take = sorted(take + [i for i, key in enumerate(keys) if not key and _identity(None, born[i], crc[i]) in borns])
        rows = batch.take(pa.array(take, pa.int64()))  # typed: an empty list is a null array, which ``take`` refuses
        for key, born, crc, offset, topic in zip(*(rows[c].to_pylist() for c in ("uniq_key", "born_timestamp", "body_crc", "offset", "topic"))):
            self.found.setdefault(_identity(key, born, crc), []).append((offset, topic))

    def queued_table(self) -> pa.Table:
        """``TimerReport.queued``."""
        return pa.Table.from_batches(self.queued, pa.schema([("offset", pa.int64()), ("queue_offset", pa.int64())]))


def _delivered(deliveries: dict[str, list[tuple[int, str]]], identity: str | None, real_topic: str | None, offset: int) -> int | None:
    """Where the timer record at ``offset`` was delivered: the first later record of its real topic with its identity."""
    return next((o for o, t in deliveries.get(identity, ()) if t == real_topic and o > offset), None)


def delivered_again(store: Store, report: TimerReport, start: int) -> int:
    """How many timer messages the recovery enqueues again were delivered or still queued (delivered twice; §9)."""
    after = report.rows[-1]["offset"] if report.rows else store.commitlog.min_offset
    try:  # where the queue has ``start``, from its message on; else after the last unit's message (the queue is in log order)
        entry = store.consume_queue(fmt.TIMER_TOPIC, 0).read_entry(start)
    except (LookupError, OSError, ValueError):
        entry = None
    after = min(after, entry.phys_offset) if entry is not None else after
    queued = report.queued
    again = compute.and_(compute.greater_equal(queued["offset"], after), compute.greater_equal(queued["queue_offset"], start))
    in_log = {row["offset"] for row in report.rows if row["state"] in ("pending", "delivered", "rolled")}
    n = 0
    for offset in compute.filter(queued["offset"], again).to_pylist():
        record = store.commitlog.read_record(offset)
        props = record.property_map(legacy=store.legacy_properties)
        identity = _identity(props.get(PropertyKey.UNIQ_KEY), record.born_timestamp, record.body_crc)
        n += offset in in_log or _delivered(report.deliveries, identity, props.get(PropertyKey.REAL_TOPIC), offset) is not None
    return n


def timer_report(store: Store, timer: TimerStore, walked: TimerWalk | None = None) -> TimerReport:
    """The report of ``timer``; ``walked``: its ``TimerWalk`` already fed a walk of the log (``verify``'s), else it walks its own."""
    walk = walked if walked is not None else TimerWalk(store, timer).walk()
    units, props, identity, deliveries, end = walk.units, walk.props, walk.identity, walk.found, walk.end
    rows = []
    for unit in units:
        p = props.get(unit.offset_py)
        readable = p is not None and store.commitlog.min_offset <= unit.offset_py < end
        real_topic, uniq_key, real_qid = (p.get(k) if p else None for k in (PropertyKey.REAL_TOPIC, PropertyKey.UNIQ_KEY, PropertyKey.REAL_QID))
        delivered = _delivered(deliveries, identity.get(unit.offset_py), real_topic, unit.offset_py) if readable else None
        if not readable:
            state = "lost"
        elif delivered is not None:
            state = "delivered"
        elif unit.magic & fmt.MAGIC_DELETE:
            state = "cancelled"
        elif unit.magic & fmt.MAGIC_ROLL:
            state = "rolled"
        else:
            state = "pending"
        real_queue_id = java_int_or_none(real_qid)  # as TimerMessageStore reads it (Integer.parseInt)
        keys = p.get(PropertyKey.KEYS, "").split() if p else []
        rows.append(dict(zip(TIMER_FIELDS, (unit.timer_log_offset, unit.magic, unit.prev_pos, unit.curr_write_time_ms, unit.delivery_time,
                                            unit.offset_py, unit.size_py, real_topic, real_queue_id, uniq_key, keys, state, delivered))))
    return TimerReport(rows, timer.log.end, end, walk.queued_table(), deliveries)


def timer_summary(store: Store, start: NextStart | None = None, *, next_count: int = 5) -> dict | None:
    """``info``'s timer section: units by state, deliveries, backlog per hour, timercheck, not-yet-enqueued messages."""
    timer = TimerStore.open(store.root) if store.root is not None else None
    if timer is None:
        return None
    report = timer_report(store, timer)
    states = {state: 0 for state in STATES}
    backlog: dict[int, int] = {}
    waiting = []
    for row in report.rows:
        states[row["state"]] += 1
        if row["state"] in ("pending", "rolled"):
            waiting.append(row)
            hour = row["delivery_time"] - row["delivery_time"] % 3_600_000
            backlog[hour] = backlog.get(hour, 0) + 1
    waiting.sort(key=lambda r: (r["delivery_time"], r["timer_log_offset"]))
    check = timer.check
    resume = timer_resume(store, report, check, start)
    return {
        "units": len(report.rows),
        "states": states,
        "log_end": report.log_end.offset,
        "log_end_reason": report.log_end.reason,
        "next_deliveries": [{k: r[k] for k in ("delivery_time", "real_topic", "real_queue_id", "uniq_key", "offset", "state")} for r in waiting[:next_count]],
        "backlog_by_hour": [{"hour": h, "messages": n} for h, n in sorted(backlog.items())],
        "timercheck": check._asdict() if check is not None else None,
        "queue_max_offset": resume.queue_end,
        "not_enqueued": max(resume.queue_end - resume.offset, 0) if resume.queue_end is not None else None,
        "wheel_size": timer.wheel_size,
    }


class Resume(NamedTuple):
    """Where ``TimerMessageStore.recover`` resumes enqueuing queue 0 (reference §9, rules §8.1), and why."""

    offset: int
    after_unit: bool
    master: bool
    queue_end: int | None
    raised_from: int | None = None
    checked: bool = True

    @property
    def past_end(self) -> bool:
        """Past the queue's lost end: 5.0.0-5.3.1 wait there, never enqueuing what it gets before; 5.3.2+ resume at the end."""
        return self.queue_end is not None and self.offset > self.queue_end

    @property
    def requeued(self) -> bool:
        """The enqueue resumes at or before the last unit's message, enqueuing the later ones again: nothing lost."""
        return self.after_unit and not self.past_end


def timer_resume(store: Store, report: TimerReport, check: fmt.TimerCheck | None, start: NextStart | None) -> Resume:
    """The ``Resume`` of ``TimerMessageStore.recover`` (``reviseQueueOffset``, ``masterTimerQueueOffset``, queue min)."""
    rows, end = report.rows, report.log_end.offset
    after_unit = bool(rows) and rows[-1]["timer_log_offset"] == end - fmt.UNIT_SIZE and rows[-1]["state"] != "lost"
    last_offset = check.last_timer_queue_offset if check is not None else 0
    offset = store.commitlog.read_record(rows[-1]["offset"]).queue_offset + 1 if after_unit else last_offset
    master_offset = check.master_timer_queue_offset if check is not None else 0
    master = check is None or master_offset < offset
    offset = min(offset, master_offset)
    queue = timer_queue_range(store, start)
    low = queue.min_offset if queue is not None and offset < queue.min_offset else None
    return Resume(offset if low is None else low, after_unit, master, queue.max_offset if queue is not None else None,
                  None if low is None else offset, check is not None)


def timer_queue_range(store: Store, start: NextStart | None) -> QueueRange | None:
    """Timer queue 0's min and max offsets after the next start's recovery (``start``; rules §2.3), None if unreadable."""
    try:
        loaded = queue_range(store, fmt.TIMER_TOPIC, 0) or QueueRange(0, 0)
    except (LookupError, OSError, ValueError):
        return None
    end = start.logical_end if start is not None else None
    if end is None:
        return loaded
    top, last = loaded.max_offset, None
    if top:
        queue = store.consume_queue(fmt.TIMER_TOPIC, 0)
        last = queue.read_entry(top - 1)
        if last is not None and last.phys_offset >= end:
            top = queue_max_after_cut(store, fmt.TIMER_TOPIC, 0, end, top - 1)
            last = queue.read_entry(top - 1) if top else None
    since = redispatch_start(store)[0] if dispatching_recovery(store) is not None else None  # None: the release decides
    if since is not None:
        after = last.phys_offset + last.size if last is not None else store.commitlog.min_offset
        scan = MessageScan(store, start=record_start(store.commitlog, max(since, after)), stop=end, columns=["offset"],
                           match=MessageFilter(topics=(fmt.TIMER_TOPIC,), queue=0), check_crc=False)
        top += sum(o >= since for batch in scan for o in batch["offset"].to_pylist())
    return QueueRange(min(loaded.min_offset, top), top)
