"""Consume queues against the commit log, in one streaming merge (reference §5, §3.3).

Every dispatched record (transaction type NOT or COMMIT: ``CommitLogDispatcherBuildConsumeQueue``)
must have the entry ``(PHYSICALOFFSET, TOTALSIZE, tagsCode)`` at its QUEUEOFFSET in
``consumequeue/<topic>/<queueId>/``; every entry must point at the start of such a record.
Both sides are ordered by commit log offset, so each queue is read once, in chunks, beside
the commit log walk: memory grows with the number of queues, not with their length.

Expected tags codes are computed as ``checkMessageAndReturnSize`` does (TAGS hash; delivery
time for SCHEDULE_TOPIC_XXXX); a ConsumeQueueExt address (``enableConsumeQueueExt``) stands
in for the tags code and is accepted; for 4.9.2-4.9.8 stores the TAGS hash is also accepted in
SCHEDULE_TOPIC_XXXX entries written by abnormal recovery (the delay table is not loaded yet
then, §3.5); for 3.2.6 stores a delivery time up to ``PRE_LOCK_SLACK_MS`` off (its put-time
dispatch takes the time before the put lock, rules file §2.15).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

from ..formats import consumequeue as cqfmt
from ..formats.dispatch import SCHEDULE_TOPIC, consume_queue_tags_code, dispatches_to_consume_queue
from ..formats.errors import FormatError
from ..formats.properties import PropertyKey
from ..errors import MqtoolError
from ..store import ConsumeQueue, Store
from ..store.consumequeue import READ_BELOW
from ..store import fastscan as fs
from ..store.mappedfile import MappedFile
from .commitlog import relative
from .findings import Finding, error, warning
from .logstream import LogRecord

CHUNK_UNITS = 4096
LMQ_PREFIX = "%LMQ%"  # multi-dispatch queues hold entries of other topics' records (§3.6)
PRE_LOCK_SLACK_MS = 1000  # 3.2.6 delay entries: the pre-lock clock vs STORETIMESTAMP (observed 1-3 ms; SystemClock lag and lock waits)
# Topics with ``batchconsumequeue/<topic>`` (5.x BatchCQ, §5.5) are not dispatched to
# ``consumequeue/``; ``batchqueue.py`` checks their units.


def _data_end(path) -> int | None:
    """One past the last 20-byte unit of a consume queue file holding a non-zero byte (units
    after it are zeros: the queue's end), or None if the file cannot be read."""
    try:
        with MappedFile(path) as mf:
            if not mf.size:
                return 0
            array = fs.as_array(mf.buf)
            fd = os.open(path, os.O_RDONLY)
            try:
                last = fs.last_nonzero(array, 0, mf.size, fd)  # the hole after a queue's last unit is not read
            finally:
                os.close(fd)
            fs.release_pages(mf.buf, 0, mf.size)
            del array
    except (MqtoolError, OSError):
        return None
    return _unit_end(last)


def _unit_end(last_nonzero: int) -> int:
    """One past the 20-byte unit holding byte ``last_nonzero`` (0 for -1: no non-zero byte)."""
    return (last_nonzero // cqfmt.ENTRY_SIZE + 1) * cqfmt.ENTRY_SIZE


class QueueGap(NamedTuple):
    """A queue file that does not follow the one before it: the units of bytes
    ``[expected, base)`` of the queue are gone."""

    path: Path
    expected: int
    base: int


class QueueUnits(NamedTuple):
    """Whole units read from ``path``, the first at queue offset ``first``."""

    path: Path
    first: int
    data: bytes


class QueueFileEnd(NamedTuple):
    """A file's units end at queue offset ``offset``, before the file does (zeros after)."""

    offset: int


def queue_reads(queue: ConsumeQueue, chunk_units: int) -> Iterator[QueueGap | QueueUnits | QueueFileEnd]:
    """A queue's files in order, read ``chunk_units`` units at a time up to each file's data end
    (``_data_end``; a file that cannot be read is passed over): what ``QueueCursor`` (the record
    engine) and ``cqjoin.ArrayQueueCursor`` read, each deciding on the units its own way. A file
    smaller than ``READ_BELOW`` is read once, whole (``_small_file``), not mapped and read again."""
    unit = cqfmt.ENTRY_SIZE
    expected = None
    for base, path in queue.files:
        if expected is not None and base != expected:
            yield QueueGap(path, expected, base)
        expected = base + queue.file_size
        data, fd = _small_file(path), None
        if data is not None:
            end = _unit_end(fs.last_nonzero(fs.as_array(data), 0, len(data)))
        else:
            end = _data_end(path)
            if end is None:
                continue
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
        try:
            pos = 0
            while pos < end:
                size = min(chunk_units * unit, end - pos)
                chunk = data[pos : pos + size] if fd is None else os.pread(fd, size, pos)
                usable = len(chunk) - len(chunk) % unit
                if not usable:
                    break
                yield QueueUnits(path, (base + pos) // unit, chunk if usable == len(chunk) else chunk[:usable])
                pos += usable
        finally:
            if fd is not None:
                os.close(fd)
        if end < queue.file_size:
            yield QueueFileEnd((base + end) // unit)


def _small_file(path) -> bytes | None:
    """The bytes of a file smaller than ``READ_BELOW``, else None (also when it cannot be read:
    ``_data_end`` then says so)."""
    try:
        with open(path, "rb", buffering=0) as f:
            return f.read() if os.fstat(f.fileno()).st_size < READ_BELOW else None
    except OSError:
        return None


class Entry:
    __slots__ = ("queue_offset", "phys", "size", "tags")

    def __init__(self, queue_offset: int, phys: int, size: int, tags: int):
        self.queue_offset, self.phys, self.size, self.tags = queue_offset, phys, size, tags


class QueueCursor:
    """The entries of one queue in order, read ``CHUNK_UNITS`` at a time.

    Filler units (``fillPreBlank``) are skipped; invalid units the broker would treat as the
    end of the queue are reported only when valid entries follow them; missing files between
    two others are reported as gaps.
    """

    def __init__(self, check: "ConsumeQueueCheck", queue: ConsumeQueue | None, topic: str, queue_id: int):
        self.check = check
        self.queue = queue
        self.topic, self.queue_id = topic, queue_id
        self.entries = 0
        self._it = self._iterate() if queue is not None else iter(())
        self.head: Entry | None = None
        self.advance()

    def advance(self) -> None:
        self.head = next(self._it, None)

    @property
    def label(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    def _iterate(self) -> Iterator[Entry]:
        invalid_from = None  # queue offset where a run of invalid units started
        for read in queue_reads(self.queue, CHUNK_UNITS):
            if type(read) is QueueGap:
                self.check.emit(self.gap_finding(read.path, read.expected, read.base))
                invalid_from = None
            elif type(read) is QueueFileEnd:
                if invalid_from is None:
                    invalid_from = read.offset  # the zeros after the last unit
            else:
                for i, (phys, length, tags) in enumerate(cqfmt.ENTRY.iter_unpack(read.data)):
                    queue_offset = read.first + i
                    if phys >= 0 and length > 0:
                        if (phys, length, tags) == cqfmt.FILLER:
                            continue
                        if invalid_from is not None:
                            self._report_invalid(read.path, invalid_from, queue_offset)
                            invalid_from = None
                        self.entries += 1
                        yield Entry(queue_offset, phys, length, tags)
                    elif invalid_from is None:
                        invalid_from = queue_offset

    def gap_finding(self, path, expected_base: int, base: int) -> Finding:
        unit = cqfmt.ENTRY_SIZE
        return error(
            "cq-file-gap",
            f"consume queue {self.label}: file(s) missing before {path.name}: entries for queue offsets "
            f"{expected_base // unit}..{base // unit - 1} are gone (consumers cannot read those messages)",
            file=relative(self.check.store, path),
            expected=expected_base,
            found=base,
            details={"topic": self.topic, "queue_id": self.queue_id, "first_missing_queue_offset": expected_base // unit, "next_queue_offset": base // unit},
        )

    def _report_invalid(self, path, first: int, resume: int) -> None:
        self.check.emit(self.invalid_finding(path, first, resume))

    def invalid_finding(self, path, first: int, resume: int) -> Finding:
        return error(
            "cq-invalid-unit",
            f"consume queue {self.label}: queue offsets {first}..{resume - 1} hold invalid units (offset < 0 or size <= 0) but "
            f"entries follow from {resume}: the broker's consume queue recovery stops at the first invalid unit and drops the rest",
            file=relative(self.check.store, path),
            expected="valid units",
            found=f"invalid units at queue offsets {first}..{resume - 1}",
            details={"topic": self.topic, "queue_id": self.queue_id, "queue_offset": first, "next_valid_queue_offset": resume},
        )


@dataclass
class MissingRun:
    first_offset: int
    last_offset: int
    first_queue_offset: int
    last_queue_offset: int
    count: int


class ConsumeQueueCheck:
    """Feed ``on_record`` every valid record in offset order, then ``finish``; findings are
    collected through ``emit`` and drained with ``take``."""

    cursor_class = QueueCursor

    def __init__(self, store: Store, *, lower: int, upper: int | None, logical_end: int, redispatch_from: int | None, redispatch_why: str):
        self.store = store
        self.lower, self.upper = lower, upper
        self.logical_end = logical_end
        self.redispatch_from, self.redispatch_why = redispatch_from, redispatch_why
        self.delay_table = store.delay_table
        self.quirk = store.version is None or store.rules.delay_table_missing_in_recovery
        self.pre_lock = store.version is None or store.rules.delay_tags_from_pre_lock_time
        self._out: list[Finding] = []
        self.cursors: dict[tuple[str, int], QueueCursor] = {}
        self.skipped_queues: list[str] = []
        batch_dir = store.path("batchconsumequeue")
        self.batch_topics = {p.name for p in batch_dir.iterdir() if p.is_dir()} if batch_dir.is_dir() else set()
        for queue in store.consume_queues:
            if queue.topic.startswith(LMQ_PREFIX):
                self.skipped_queues.append(f"{queue.topic}/{queue.queue_id}")
                continue
            cursor = self.cursor_class(self, queue, queue.topic, queue.queue_id)
            self._skip_below(cursor)
            self.cursors[(queue.topic, queue.queue_id)] = cursor
        self.missing: dict[tuple[str, int], MissingRun] = {}
        self._tags_memo: dict[str | None, int] = {}
        self._dispatched: dict[int, bool] = {}
        self.ext_addresses = 0

    # ---- plumbing ----

    def emit(self, finding: Finding) -> None:
        self._out.append(finding)

    def take(self) -> list[Finding]:
        out, self._out = self._out, []
        return out

    @property
    def queues(self) -> int:
        return len(self.cursors)

    @property
    def entries(self) -> int:
        return sum(c.entries for c in self.cursors.values())

    def _skip_below(self, cursor: QueueCursor) -> None:
        """Entries below the checked range (expired below the commit log min, or before
        ``--from-offset``) are not checked."""
        while cursor.head is not None and cursor.head.phys < self.lower:
            cursor.advance()

    def _file_of(self, cursor: QueueCursor, queue_offset: int) -> str | None:
        if cursor.queue is None:
            return None
        logical = queue_offset * cqfmt.ENTRY_SIZE
        base = logical - logical % cursor.queue.file_size
        return relative(self.store, cursor.queue.directory / f"{base:020d}")

    # ---- the merge ----

    def on_batch(self, records: list[LogRecord]) -> None:
        for record in records:
            self.on_record(record)

    def on_record(self, record: LogRecord) -> None:
        dispatched = self._dispatched.get(record.sys_flag)
        if dispatched is None:
            dispatched = self._dispatched[record.sys_flag] = dispatches_to_consume_queue(record.sys_flag)
        if not dispatched or record.topic in self.batch_topics:
            return
        key = (record.topic, record.queue_id)
        cursor = self.cursors.get(key)
        if cursor is None:
            cursor = self.cursors[key] = self.cursor_class(self, None, *key)
        while cursor.head is not None and cursor.head.phys < record.offset:
            self._stray(cursor, cursor.head)
            cursor.advance()
        head = cursor.head
        if head is not None and head.phys == record.offset:
            self._close_missing(cursor)
            self._compare(cursor, head, record)
            cursor.advance()
        else:
            run = self.missing.get(key)
            if run is None:
                self.missing[key] = MissingRun(record.offset, record.offset, record.queue_offset, record.queue_offset, 1)
            else:
                run.last_offset, run.last_queue_offset, run.count = record.offset, record.queue_offset, run.count + 1

    def _compare(self, cursor: QueueCursor, entry: Entry, record: LogRecord) -> None:
        problems = []
        if entry.size != record.size:
            problems.append(("size", record.size, entry.size))
        if entry.queue_offset != record.queue_offset:
            problems.append(("queue offset", record.queue_offset, entry.queue_offset))
        if cqfmt.is_ext_address(entry.tags):
            self.ext_addresses += 1
        else:
            expected = self._tags_code(record)
            if entry.tags != expected and not self._quirk_tags(record, entry.tags):
                problems.append(("tags code", expected, entry.tags))
        for what, expected, found in problems:
            self.emit(
                error(
                    "cq-entry-mismatch",
                    f"consume queue {cursor.label} entry at queue offset {entry.queue_offset} points to the record at {record.offset} "
                    f"but its {what} is {found}, the record's is {expected}"
                    + (" (consumers filtering by tag would skip or receive the wrong messages)" if what == "tags code" else ""),
                    file=self._file_of(cursor, entry.queue_offset),
                    offset=record.offset,
                    expected=expected,
                    found=found,
                    details={"topic": cursor.topic, "queue_id": cursor.queue_id, "queue_offset": entry.queue_offset, "field": what},
                )
            )

    def _tags_code(self, record: LogRecord) -> int | str:
        """``consume_queue_tags_code``; outside SCHEDULE_TOPIC_XXXX it depends on TAGS alone, so
        those results are memoised."""
        if record.topic != SCHEDULE_TOPIC:
            tags = record.properties.get(PropertyKey.TAGS)
            code = self._tags_memo.get(tags)
            if code is None:
                code = self._tags_memo[tags] = consume_queue_tags_code(record.topic, {PropertyKey.TAGS: tags} if tags else {}, 0, self.delay_table)
            return code
        try:
            return consume_queue_tags_code(record.topic, record.properties, record.store_timestamp, self.delay_table)
        except FormatError as exc:
            return f"undecodable ({exc.reason})"

    def _quirk_tags(self, record: LogRecord, found: int) -> bool:
        """4.9.2-4.9.8 abnormal recovery writes the TAGS hash for SCHEDULE_TOPIC_XXXX (§3.5); the
        3.2.6 master's put-time dispatch writes a delivery time from the pre-lock clock, up to
        ``PRE_LOCK_SLACK_MS`` off the record's (rules file §2.15)."""
        if not (self.quirk or self.pre_lock) or record.topic != SCHEDULE_TOPIC:
            return False
        try:
            if self.pre_lock and abs(found - consume_queue_tags_code(record.topic, record.properties, record.store_timestamp, self.delay_table)) <= PRE_LOCK_SLACK_MS:
                return True
            return self.quirk and found == consume_queue_tags_code(record.topic, record.properties, record.store_timestamp, {})
        except FormatError:
            return False

    def _stray(self, cursor: QueueCursor, entry: Entry) -> None:
        """An entry that no record of its queue starts at (inside the valid log)."""
        where = f"consume queue {cursor.label} entry at queue offset {entry.queue_offset} points to {entry.phys}"
        common = dict(file=self._file_of(cursor, entry.queue_offset), offset=entry.phys)
        details = {"topic": cursor.topic, "queue_id": cursor.queue_id, "queue_offset": entry.queue_offset, "size": entry.size}
        try:
            other = self.store.commitlog.read_record(entry.phys)
        except (FormatError, LookupError):
            other = None
        if other is not None and hasattr(other, "topic"):
            self.emit(
                error(
                    "cq-entry-mismatch",
                    f"{where}, the record of {other.topic_name}/{other.queue_id} at queue offset {other.queue_offset}: consumers of "
                    f"{cursor.label} would receive the wrong message",
                    expected=f"{cursor.topic}/{cursor.queue_id}",
                    found=f"{other.topic_name}/{other.queue_id}",
                    details={**details, "field": "topic/queue"},
                    **common,
                )
            )
        else:
            self.emit(
                error(
                    "cq-entry-dangling",
                    f"{where}, where no record starts (the middle of a record, or bytes overwritten since): the broker serves "
                    "undecodable bytes for it",
                    expected="the start of a record",
                    found="no record",
                    details=details,
                    **common,
                )
            )

    def _close_missing(self, cursor: QueueCursor) -> None:
        run = self.missing.pop((cursor.topic, cursor.queue_id), None)
        if run is None:
            return
        rebuilt = self.redispatch_from is not None and run.first_offset >= self.redispatch_from
        make = warning if rebuilt else error
        consequence = (
            f"the broker will rebuild them on its next start ({self.redispatch_why})"
            if rebuilt
            else f"the broker will not rebuild them by itself ({self.redispatch_why}); consumers never see these messages"
        )
        where = "its consume queue directory is missing" if cursor.queue is None else "they have no consume queue entries"
        self.emit(
            make(
                "cq-entry-missing",
                f"{run.count} records of {cursor.label} (queue offsets {run.first_queue_offset}..{run.last_queue_offset}, commit log "
                f"{run.first_offset}..{run.last_offset}) were dispatched by nobody: {where}; {consequence}",
                file=self._file_of(cursor, run.first_queue_offset),
                offset=run.first_offset,
                expected=f"{run.count} entries",
                found="none",
                details={
                    "topic": cursor.topic,
                    "queue_id": cursor.queue_id,
                    "first_queue_offset": run.first_queue_offset,
                    "last_queue_offset": run.last_queue_offset,
                    "last_offset": run.last_offset,
                    "records": run.count,
                    "rebuilt_by_broker": rebuilt,
                },
            )
        )

    def finish(self) -> None:
        for cursor in self.cursors.values():
            self._close_missing(cursor)
            beyond: list[Entry] = []
            while cursor.head is not None:
                entry = cursor.head
                if self.upper is not None and entry.phys >= self.upper:
                    break
                if entry.phys >= self.logical_end:
                    beyond.append(entry)
                else:
                    self._stray(cursor, entry)
                cursor.advance()
            if beyond:
                first, last = beyond[0], beyond[-1]
                self.emit(
                    warning(
                        "cq-entry-beyond-end",
                        f"consume queue {cursor.label}: {len(beyond)} entries (queue offsets {first.queue_offset}..{last.queue_offset}) point "
                        f"at or past the commit log's logical end {self.logical_end}: the broker's recovery removes them "
                        "(truncateDirtyLogicFiles); until then the queue's max offset counts them",
                        file=self._file_of(cursor, first.queue_offset),
                        offset=first.phys,
                        expected=f"< {self.logical_end}",
                        found=first.phys,
                        details={"topic": cursor.topic, "queue_id": cursor.queue_id, "first_queue_offset": first.queue_offset, "last_queue_offset": last.queue_offset, "entries": len(beyond)},
                    )
                )
