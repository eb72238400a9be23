"""Consume queues against the commit log, in one streaming merge (reference §5, §3.3).

Every dispatched record (NOT or COMMIT: ``CommitLogDispatcherBuildConsumeQueue``) must have the
entry ``(PHYSICALOFFSET, TOTALSIZE, tagsCode)`` at its QUEUEOFFSET, and every entry must point at
the start of such a record; both sides are in commit log order, so each queue is read once, in
chunks, beside the walk. Tags codes are computed as ``checkMessageAndReturnSize`` does; a
ConsumeQueueExt address is accepted, and so are the 4.9.2-4.9.8 TAGS hash in abnormal recovery's
SCHEDULE_TOPIC_XXXX entries (§3.5) and a 3.2.6 delivery time up to ``PRE_LOCK_SLACK_MS`` off
(rules file §2.15).

A walk batch is first joined compiled (``on_columns``: ``queue_groups``, ``join_groups``, §5.1);
anything else returns False before any state changed and is reported record by record (``on_batch``)."""

from __future__ import annotations

import os
from collections import namedtuple
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..formats import consumequeue as cqfmt
from ..formats.dispatch import LMQ_PREFIX, SCHEDULE_TOPIC, consume_queue_tags_code, dispatches_to_consume_queue
from ..formats.errors import FormatError
from ..formats.properties import PropertyKey
from ..errors import MqtoolError
from ..store import ConsumeQueue, Store
from ..store.consumequeue import READ_BELOW, QueueDirectory, has_queue_directory
from ..store import fastscan as fs
from ..store.mappedfile import LOAD_CONSUME_QUEUE, MappedFile, offset_named_files, stray_after
from ..store.nextstart import refused_by
from ..store.store import empty_not_last, stray_differs, stray_effects
from ._consumequeue import COLUMNS, decode_units, join_groups, queue_groups
from .commitlog import relative, stray_finding
from .findings import Finding, FindingSink, error, info, warning
from .lmq import stall_of, stall_throw
from .logstream import LogRecord

if TYPE_CHECKING:
    from .columns import RecordColumns

QOFF, PHYS, SIZE, TAGS = COLUMNS  # of a queue's entry rows
_dispatched = lru_cache(256)(dispatches_to_consume_queue)  # by SYSFLAG, for the records reported one by one
CHUNK_UNITS = 8192  # per queue at most: a window holds up to a read of rows (32 bytes each) for every queue at once
WINDOWS_BUDGET = 64 << 20  # bytes of rows for all the windows: a store of thousands of queues reads each in smaller chunks
MIN_CHUNK_UNITS = 64
QUEUE_CAPACITY = 1024  # queues a batch is first grouped for; a batch with more is grouped again for as many as records
PRE_LOCK_SLACK_MS = 1000  # 3.2.6 delay entries: the pre-lock clock vs STORETIMESTAMP (observed 1-3 ms; SystemClock lag and lock waits)
# Topics with ``batchconsumequeue/<topic>`` (5.x BatchCQ, §5.5) are not dispatched to
# ``consumequeue/``; ``batchqueue.py`` checks their units.


def _data_end(path, fd: int) -> int | None:
    """One past the last 20-byte unit of a consume queue file holding a non-zero byte (units
    after it are zeros: the queue's end), or None if the file cannot be mapped."""
    try:
        with MappedFile(path) as mf:
            if not mf.size:
                return 0
            array = fs.as_array(mf.buf)
            last = fs.last_nonzero(array, 0, mf.size, fd)  # the hole after a queue's last unit is not read
            fs.release_pages(mf.buf, 0, mf.size)
            del array
    except (MqtoolError, OSError):
        return None
    return _unit_end(last)


def _unit_end(last_nonzero: int) -> int:
    """One past the 20-byte unit holding byte ``last_nonzero`` (0 for -1: no non-zero byte)."""
    return (last_nonzero // cqfmt.ENTRY_SIZE + 1) * cqfmt.ENTRY_SIZE


# what ``queue_reads`` yields: a file that does not follow the one before it (the units of bytes ``[expected, base)``
# of the queue are gone); whole units read from ``path``, the first at queue offset ``first``; a file's units ending at
# queue offset ``offset``, before the file does (zeros after)
QueueGap = namedtuple("QueueGap", "path expected base")
QueueUnits = namedtuple("QueueUnits", "path first data")
QueueFileEnd = namedtuple("QueueFileEnd", "offset")


def queue_reads(queue: ConsumeQueue, chunk_units: int) -> Iterator[QueueGap | QueueUnits | QueueFileEnd]:
    """A queue's files in order, read ``chunk_units`` units at a time up to each file's data end
    (``_data_end``; a file that cannot be read is passed over): what ``QueueCursor`` reads. A file
    smaller than ``READ_BELOW`` is read once, whole, not mapped and read again."""
    unit = cqfmt.ENTRY_SIZE
    expected = None
    for base, path in queue.files:
        if expected is not None and base != expected:
            yield QueueGap(path, expected, base)
        expected = base + queue.file_size
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                data = os.pread(fd, READ_BELOW, 0) if os.fstat(fd).st_size < READ_BELOW else None
            except OSError:
                continue
            end = _data_end(path, fd) if data is None else _unit_end(fs.last_nonzero(fs.as_array(data), 0, len(data)))
            pos = 0
            while end is not None and pos < end:
                size = min(chunk_units * unit, end - pos)
                chunk = os.pread(fd, size, pos) if data is None else data[pos : pos + size]
                usable = len(chunk) - len(chunk) % unit
                if not usable:
                    break
                yield QueueUnits(path, (base + pos) // unit, chunk if usable == len(chunk) else chunk[:usable])
                pos += usable
        finally:
            os.close(fd)
        if end is not None and end < queue.file_size:
            yield QueueFileEnd((base + end) // unit)


def chunk_units(queues: int) -> int:
    """Units a queue's window reads at a time: ``CHUNK_UNITS``, less where the windows of ``queues``
    queues, all loaded at once, would pass ``WINDOWS_BUDGET`` (memory flat in the number of queues
    too, down to ``MIN_CHUNK_UNITS`` each)."""
    return min(CHUNK_UNITS, max(MIN_CHUNK_UNITS, WINDOWS_BUDGET // (len(COLUMNS) * 8 * max(queues, 1))))


class Entry:
    __slots__ = ("queue_offset", "phys", "size", "tags")

    def __init__(self, queue_offset: int, phys: int, size: int, tags: int):
        self.queue_offset, self.phys, self.size, self.tags = queue_offset, phys, size, tags


def group_queues(topic_ids, queue_ids, sys_flags, skip_topic):
    """``queue_groups`` with room for every queue of the batch: (keys, counts, first, last, gid)."""
    n = topic_ids.shape[0]
    gid = np.empty(n, dtype=np.int32)
    for capacity in (min(QUEUE_CAPACITY, max(n, 1)), n):
        slots = 1 << max(2 * capacity - 1, 1).bit_length()
        found = np.empty(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int64), np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.int64)
        groups = queue_groups(topic_ids, queue_ids, sys_flags, skip_topic.view(np.uint8), np.full(slots, -1, dtype=np.int64), *found, gid)
        if groups >= 0:
            return (*(column[:groups] for column in found), gid)
    raise AssertionError("a batch has no more queues than records")


_NO_ENTRIES = np.empty((0, len(COLUMNS)), dtype=np.int64)


class QueueCursor:
    """The entries of one queue in order, read ``check.chunk_units`` at a time into the rows of a window
    (``decode_units``' ``COLUMNS``): ``head`` (an ``Entry``), ``skip``, ``peek``, ``entries``.
    Fillers a read passes (``ConsumeQueueCheck.skipped``) are left out; invalid units followed by
    valid ones, and missing files, are findings, each due when the entry after it becomes the head
    (or the head None): in the merge's commit log order. ``_due`` holds them by window row (a row
    one past the window's last: due when the entry after it comes, or at the queue's end)."""

    def __init__(self, check: "ConsumeQueueCheck", queue: ConsumeQueue | None, topic: str, queue_id: int):
        self.check = check
        self.queue = queue
        self.topic, self.queue_id = topic, queue_id
        self._reads = self._chunks() if queue is not None else iter(((_NO_ENTRIES, {}, True),))
        self._rows, self._due, self._ended = _NO_ENTRIES, {}, False
        self._i = 0
        self._passed = 0  # entries the head has moved past
        self.head: Entry | None = None
        self._arrive()
        # the queue offset of the entry the queue's previous dispatched record was found at (``ConsumeQueueCheck._compare``);
        # before the queue's first entry, one less than it: the first record belongs there
        self.last_pos: int | None = None if self.head is None else self.head.queue_offset - 1
        self.placed = False  # a record of the queue was found at its entry: last_pos is a write position the dispatch reached
        # (entry queue offset - record QUEUEOFFSET, the record's QUEUEOFFSET) of the last entry ``_compare`` found shifted from
        # its record's and judged a queue fault, not a damaged field: the entries after it shifted alike are that fault too
        self.shift: tuple[int, int] | None = None

    @property
    def entries(self) -> int:
        """Entries read so far: those passed and the head."""
        return self._passed + (self.head is not None)

    # ---- reading ----

    def _chunks(self) -> Iterator[tuple[np.ndarray, dict[int, list], bool]]:
        """The queue's entries, a read at a time: (rows, findings due by row, whether the queue ends there)."""
        invalid_from = None
        pending: list = []  # findings due before the next entry
        for read in queue_reads(self.queue, self.check.chunk_units):
            if type(read) is QueueGap:
                pending.append(self.gap_finding(read.path, read.expected, read.base))
                invalid_from = None
                continue
            if type(read) is QueueFileEnd:
                if invalid_from is None:
                    invalid_from = read.offset
                continue
            rows = np.empty((len(read.data) // cqfmt.ENTRY_SIZE, len(COLUMNS)), np.int64)
            invalid, fillers = decode_units(np.frombuffer(read.data, dtype=np.uint8), read.first, rows)
            if invalid_from is None and not invalid:
                if fillers:
                    rows = rows[~self.check.skipped(rows[:, PHYS], rows[:, SIZE], rows[:, TAGS])]
                due = {}
                if pending and len(rows):
                    due, pending = {0: pending}, []
            else:
                rows, due, pending, invalid_from = self._slow_units(read.path, rows, pending, invalid_from)
            if len(rows):
                yield rows, due, False
        yield _NO_ENTRIES, {0: pending} if pending else {}, True

    def _slow_units(self, path, rows: np.ndarray, pending: list, invalid_from):
        """Units with invalid ones among them, one by one."""
        kept: list[int] = []
        due: dict[int, list] = {}
        for i, (queue_offset, p, n, t) in enumerate(rows.tolist()):
            if p >= 0 and n > 0:
                if self.check.skipped(p, n, t):
                    continue
                if invalid_from is not None:
                    pending.append(self.invalid_finding(path, invalid_from, queue_offset))
                    invalid_from = None
                if pending:
                    due[len(kept)], pending = pending, []
                kept.append(i)
            elif invalid_from is None:
                invalid_from = queue_offset
        return rows[kept], due, pending, invalid_from

    def _read_on(self, n: int) -> None:
        """Read until ``n`` entries from the head on are in the window, or the queue's end is: the
        window keeps its rows from the head on, the next reads after them."""
        while len(self._rows) - self._i < n and not self._ended:
            rows, due, self._ended = next(self._reads)
            kept = len(self._rows) - self._i
            shifted = {k - self._i: v for k, v in self._due.items() if k >= self._i}
            for k, v in due.items():
                shifted.setdefault(k + kept, []).extend(v)
            self._rows = np.concatenate((self._rows[self._i :], rows)) if kept else rows
            self._due, self._i = shifted, 0

    # ---- moving ----

    def _arrive(self) -> None:
        """The head moved to row ``_i``: the entry there read, what is due there emitted, ``head`` set."""
        if self._i == len(self._rows):
            self._read_on(1)
        if self._due:
            for finding in self._due.pop(self._i, ()):
                self.check.emit(finding)
        i = self._i
        self.head = Entry(*self._rows[i].tolist()) if i < len(self._rows) else None

    @property
    def label(self) -> str:
        return f"{self.topic}/{self.queue_id}"

    def details(self, **more) -> dict:
        """A finding's ``details``: the queue, then ``more``."""
        return {"topic": self.topic, "queue_id": self.queue_id, **more}

    def gap_finding(self, path, expected_base: int, base: int) -> Finding:
        unit = cqfmt.ENTRY_SIZE
        return error("cq-file-gap", f"consume queue {self.label}: file(s) missing before {path.name}: entries for queue offsets "
                     f"{expected_base // unit}..{base // unit - 1} are gone (consumers cannot read those messages)",
                     file=relative(self.check.store, path), expected=expected_base, found=base,
                     details=self.details(first_missing_queue_offset=expected_base // unit, next_queue_offset=base // unit))

    def invalid_finding(self, path, first: int, resume: int) -> Finding:
        return error("cq-invalid-unit", f"consume queue {self.label}: queue offsets {first}..{resume - 1} hold invalid units (offset < 0 "
                     f"or size <= 0) but entries follow from {resume}: the broker's consume queue recovery stops at the first invalid "
                     "unit and drops the rest", file=relative(self.check.store, path), expected="valid units",
                     found=f"invalid units at queue offsets {first}..{resume - 1}",
                     details=self.details(queue_offset=first, next_valid_queue_offset=resume))

    def skip(self, n: int) -> None:
        """Move the head ``n`` entries on, emitting what is due on the way."""
        if not self._due and 0 < n < len(self._rows) - self._i:  # the usual case: nothing due, the new head read
            self._i += n
            self._passed += n
            self.head = Entry(*self._rows[self._i].tolist())
            return
        while n > 0 and self.head is not None:
            step = min(n, len(self._rows) - self._i)
            target = self._i + step
            for k in sorted(k for k in self._due if self._i < k < target) if self._due else ():
                for finding in self._due.pop(k):
                    self.check.emit(finding)
            self._passed += step
            n -= step
            self._i = target
            self._arrive()

    def peek(self, n: int) -> tuple[np.ndarray, bool]:
        """The rows of the head and the ``n - 1`` entries after it (fewer at the end), and
        whether moving the head ``n`` on would emit findings."""
        i = self._i
        if len(self._rows) - i <= n:
            self._read_on(n + 1)
            i = self._i
        return self._rows[i : i + n], bool(self._due) and any(i < k <= i + n for k in self._due)


@dataclass
class MissingRun:
    first_offset: int
    last_offset: int
    first_queue_offset: int
    last_queue_offset: int
    count: int


def entries_missing(topic: str, queue_id: int, file: str | None, run: MissingRun, said: str, *, lost: bool = True, rebuilt: bool = False,
                    **more) -> Finding:
    """The ``cq-entry-missing`` of ``run``, records of ``topic``/``queue_id`` without a consume queue entry, ``said`` after their
    count and place (why they have none, and what follows); ``lost``: an error, else a warning (the broker's start rebuilds
    them). ``repair`` predicts the entries a recovery cuts from records it keeps with it (``recovery.repair.unqueued_findings``)."""
    return (error if lost else warning)(
        "cq-entry-missing",
        f"{run.count} records of {topic}/{queue_id} (queue offsets {run.first_queue_offset}..{run.last_queue_offset}, commit log "
        f"{run.first_offset}..{run.last_offset}) {said}", file=file, offset=run.first_offset, expected=f"{run.count} entries", found="none",
        details={"topic": topic, "queue_id": queue_id, "first_queue_offset": run.first_queue_offset, "last_queue_offset": run.last_queue_offset,
                 "last_offset": run.last_offset, "records": run.count, "rebuilt_by_broker": rebuilt, **more})


def entry_mismatch(topic: str, queue_id: int, file: str | None, queue_offset: int, offset: int, what: str, expected, found, *,
                   record_damaged: bool = False, wrapped: bool = False) -> Finding:
    """The ``cq-entry-mismatch`` of the entry at ``queue_offset`` of ``topic``/``queue_id`` pointing at the record at ``offset``:
    its ``what`` (size, queue offset, tags code) is ``found``, the record's ``expected``. ``record_damaged``: an entry in the
    queue's order at another queue offset than its record's QUEUEOFFSET (``ConsumeQueueCheck._compare``), lost data;
    ``wrapped``: its position wrapped around. ``repair`` predicts the entries a dispatch writes away from their record's QUEUEOFFSET with it."""
    label, details = f"{topic}/{queue_id}", {"topic": topic, "queue_id": queue_id, "queue_offset": queue_offset, "field": what}
    where = f"consume queue {label} entry at queue offset {queue_offset} points to the record at {offset}"
    if not record_damaged:
        return error("cq-entry-mismatch", f"{where} but its {what} is {found}, the record's is {expected}"
                     + (" (consumers filtering by tag would skip or receive the wrong messages)" if what == "tags code" else ""),
                     file=file, offset=offset, expected=expected, found=found, details=details)
    why = ("times the unit size it is past a Java long, so the broker's position wrapped around and it wrote the entry where no "
           "read of that queue offset finds it: the record's field is damaged" if wrapped else
           "the entry follows the queue's previous record, as the broker wrote it, so the record's field is damaged or records of "
           "the queue before it are lost")
    return error("cq-entry-mismatch", f"{where}, whose QUEUEOFFSET field says {expected}: {why}; no rebuild of the queue mends it"
                 + ("" if wrapped else f" (consumers get the message with queue offset {expected})"),
                 file=file, offset=offset, expected=expected, found=found, details={**details, "record_damaged": True})


def wrong_length_files(store: Store, queue, what: str = "consume queue", details: dict | None = None) -> Iterator[Finding]:
    """``cq-file-size`` for each file of ``queue`` (a consume queue, LMQ's too, or a batch consume queue) of
    another length than its file size (cut past its data, grown by a file system): ``MappedFileQueue.load``
    refuses it, so the broker does not start (4.5.0-4.9.1, 4.9.3+), or leaves it and the queue's later files
    out (3.2.6-4.4.0, 4.9.2; rules §2.13); then ``cq-stray-entry`` for each entry of its folder that is no file of it. The units it holds read as ever: ``recover``'s rewrite of the
    queue or ``rebuild-cq`` writes its files at full size. A zero-length last file holds nothing: an ``info`` where
    no era the store may be from refuses it (5.1.3+ delete it, 3.2.6-4.4.0 and 4.9.2 leave it out;
    ``nextstart.refused_by``)."""
    label, details = f"{what} {queue.topic}/{queue.queue_id}", {"topic": queue.topic, "queue_id": queue.queue_id, **(details or {})}
    for _, path, size, last in queue.wrong_lengths:
        where = {"file": relative(store, path), "expected": queue.file_size, "found": size, "details": details}
        if size == 0 and path == queue.files[-1][1] and refused_by(store, empty_last=last) is None:  # last: no entry after it either
            yield info("cq-file-size", f"{label}: {path.name}, its last file, is empty: the broker deletes it "
                       "(5.1.3+) or leaves it out (3.2.6-4.4.0, 4.9.2); it holds nothing", **where)
        else:
            after = empty_not_last(stray_after(path, queue.files, queue.strays), store.version_guess.eras) if size == 0 else ""
            yield error("cq-file-size", f"{label}: {path.name} is {size} bytes, not {queue.file_size}{after}: the broker refuses to "
                        "load it (MappedFileQueue.load: \"length not matched\"), or leaves it and the queue's later files out", **where)
    for entry in queue.strays:  # a directory, a symlink, a misnamed file: MappedFileQueue.load lists it (``mappedfile.load_effect``)
        yield stray_finding(store, "cq-stray-entry", entry, queue.file_size, queue.after(entry), f"{what} file", f"{label}'s folder", details)


def unread_directory_findings(store: Store, found: list[QueueDirectory], what: str = "consume queue", details: dict | None = None
                              ) -> Iterator[Finding]:
    """``cq-directory-unread`` for each directory of ``found`` the broker never reads (``QueueDirectory.read``): its load takes
    the queue id from the name (``Integer.parseInt``: ``01``, ``+1``), but the queue it makes reads and writes ``<topic>/<id>``
    (``consumequeue.discover_queues``), an empty queue where that is missing, and nothing reads or writes this one. The
    queue's records get entries only as a dispatch reaches them, none from here: the reput starts at the queues' highest
    ``maxPhysicOffset`` (``DefaultMessageStore.start``), so ``cq-entry-missing`` says which, and whether the next start writes
    them. A warning: no load fails on it, and what it holds is no queue's."""
    for directory in found:
        if directory.read:
            continue
        queue_dir = directory.path.parent / str(directory.queue_id)
        rel, read, files = relative(store, directory.path), relative(store, queue_dir), len(offset_named_files(directory.path))
        yield warning("cq-directory-unread", f"a {what} directory the broker never reads: it takes queue id {directory.queue_id} of "
                      f"{directory.topic} from the name (Integer.parseInt) but reads and writes that queue in {read}"
                      f"{'' if queue_dir.is_dir() else ', which is no directory' if os.path.lexists(queue_dir) else ', which is missing'}"
                      f"{'' if queue_dir.is_dir() else ' (an empty queue)'}, so the {files} file(s) here are never served "
                      f"and no start rebuilds the queue from them; move it aside (or, if it holds that queue and {read} is missing, rename it)",
                      file=rel, expected=read, found=directory.path.name,
                      details={"topic": directory.topic, "queue_id": directory.queue_id, "read_from": read, "files": files, **(details or {})})


def queue_path_file_findings(store: Store, found: list[Path], what: str = "consume queue", details: dict | None = None) -> Iterator[Finding]:
    """``cq-queue-path-not-a-directory`` (an error) for each file of ``found`` at a queue's own path
    (``consumequeue.queue_path_files``): an empty queue the broker loads but cannot write, and the first entry it dispatches
    there stops the store taking any put."""
    for path in found:
        target = f"a dangling symlink to {os.readlink(path)}" if os.path.islink(path) else "a file"
        yield error("cq-queue-path-not-a-directory", f"{target} where the broker reads and writes queue {path.name} of {path.parent.name}'s "
                    f"{what} directory: it loads an empty queue, but cannot write the first entry it dispatches there (no file can be made "
                    "under it): after 30 tries a second apart ConsumeQueue.putMessagePositionInfoWrapper marks the logics queue in error "
                    "and the store refuses every put; move it aside", file=relative(store, path),
                    details={"topic": path.parent.name, "queue_id": int(path.name), **(details or {})})


def topic_stray_findings(store: Store) -> Iterator[Finding]:
    """``cq-topic-stray-entry`` for each entry of a topic's folder named by no queue id (``Store.topic_strays``) that some era
    the store may be from refuses to start on (3.2.6: ``mappedfile.load_effect``'s ``LOAD_CONSUME_QUEUE``); 4.0.0+ skip it, so
    where only they remain there is nothing to say."""
    for entry, file_size, later in store.topic_strays:
        if stray_differs(stray_effects(store.version_guess.eras, entry, file_size, later, LOAD_CONSUME_QUEUE)):
            topic = entry.path.parent.name
            yield stray_finding(store, "cq-topic-stray-entry", entry, file_size, later, "queue", f"topic {topic}'s folder", {"topic": topic},
                                loader=LOAD_CONSUME_QUEUE)


class ConsumeQueueCheck(FindingSink):
    """Feed every batch of valid records in offset order (``on_columns``, or ``on_batch`` when
    the join declines it), then ``finish``."""

    def __init__(self, store: Store, *, lower: int, upper: int | None, logical_end: int, redispatch_from: int | None, redispatch_why: str,
                 dispatched=None, settled=None):
        self.store = store
        self.dispatched = dispatched  # what the walk feeding the check dispatched (``lmq.stall_throw``), or None
        self.settled = settled  # the next start's stall and the end it was scanned to (``Verification.settled_stall``), or None
        self.lower, self.upper = lower, upper
        self.logical_end = logical_end
        self.redispatch_from, self.redispatch_why = redispatch_from, redispatch_why
        self.delay_table = store.delay_table
        # what any era the store may be from writes is accepted, not what some other era would
        self.quirk = bool(store.eras_where("delay_table_missing_in_recovery"))
        self.pre_lock = bool(store.eras_where("delay_tags_from_pre_lock_time"))
        self.repeat_guard = bool(store.eras_where("cq_repeat_guard"))  # rules §3.3: 4.2.0+
        self._out: list[Finding] = []
        self.cursors: dict[tuple[str, int], QueueCursor] = {}
        batch_dir = store.path("batchconsumequeue")
        self.batch_topics = {p.name for p in batch_dir.iterdir() if p.is_dir()} if batch_dir.is_dir() else set()
        self.dedup_by_end = bool(store.eras_where("cq_dedup_by_end"))  # rules §3.4: maxPhysicOffset = offset + size
        self.chunk_units = chunk_units(sum(1 for q in store.consume_queues if not q.topic.startswith(LMQ_PREFIX)))  # the windows loaded
        for finding in (*unread_directory_findings(store, store.queue_directories), *queue_path_file_findings(store, store.queue_path_files)):
            self.emit(finding)  # LMQ queues' too
        for finding in topic_stray_findings(store):
            self.emit(finding)
        for queue in store.consume_queues:
            for finding in wrong_length_files(store, queue):  # LMQ queues too: the broker loads them as it loads the others
                self.emit(finding)
            self._filler_tail(queue)
            if queue.topic.startswith(LMQ_PREFIX):  # multi-dispatch queues (§3.6): lmq.py checks their entries
                continue
            cursor = QueueCursor(self, queue, queue.topic, queue.queue_id)
            # entries below the checked range (expired below the commit log min, or before --from-offset) are not checked;
            # the broker wrote them in order, so the range's first record of the queue belongs at the next entry
            while cursor.head is not None and cursor.head.phys < self.lower:
                cursor.skip(1)
                cursor.last_pos, cursor.placed = (None if cursor.head is None else cursor.head.queue_offset - 1), True
            self.cursors[(queue.topic, queue.queue_id)] = cursor
        self.missing: dict[tuple[str, int], MissingRun] = {}
        self._tags_memo: dict[str | None, int] = {}
        self.ext_addresses = 0
        self._batch_topic = np.zeros(0, dtype=np.bool_)  # by topic id: a BatchCQ topic (not checked)
        self._by_key: dict[int, QueueCursor] = {}  # ``queue_groups``' key (topic id << 32 | QUEUEID) to the queue's cursor

    def skipped(self, phys, size, tags):
        """The fillers (``cqfmt.is_filler``) a consumer's read passes: ``MappedFile.selectMappedBuffer(pos,
        2147483647)`` returns null at a segment's base (pos 0), and there is no segment to read below the
        log's min offset or past its files (``getMessage``: ``rollNextFile``). Anywhere else ``pos + size``
        overflows and the read throws, so such a unit is checked as an entry. Ints or numpy arrays."""
        cl = self.store.commitlog
        return cqfmt.is_filler(phys, size, tags) & ((phys % cl.file_size == 0) | (phys < cl.min_offset) | (phys >= cl.end_of_files))

    def _filler_tail(self, queue: ConsumeQueue) -> None:
        """A queue whose last unit is a filler (``fillPreBlank``'s, the entry after it never written; or fillers of
        lost records whose later entries a recovery cut): from 4.5.0 ``ConsumeQueue.recover`` sets ``maxPhysicOffset``
        to its offset + size (2147483647 for ``fillPreBlank``'s, a cut segment's base + 2147483647 for repair's), and
        ``putMessagePositionInfo`` skips every new message of the queue ending at or before it, so none is consumable
        until the log passes that offset. A rebuild of the queue ends it before them."""
        if not self.dedup_by_end:
            return
        recovered = queue.recover()
        if not recovered.end or recovered.max_phys_offset <= self.store.commitlog.end_of_files:
            return
        last = queue.read_entry(recovered.max_offset - 1)
        if last is not None and self.skipped(last.phys_offset, last.size, last.tags_code):
            self.emit(warning(
                "cq-filler-tail",
                f"consume queue {queue.topic}/{queue.queue_id} ends with a filler unit (queue offset {recovered.max_offset - 1}): the broker's "
                f"recovery sets the queue's maxPhysicOffset to {recovered.max_phys_offset}, and its dispatch skips every new message of the queue "
                "until the commit log passes that offset (putMessagePositionInfo: \"Maybe try to build consume queue repeatedly\")",
                file=relative(self.store, queue.directory), expected="a last unit that is an entry", found="a filler",
                details={"topic": queue.topic, "queue_id": queue.queue_id, "queue_offset": recovered.max_offset - 1}))

    @property
    def entries(self) -> int:
        return sum(c.entries for c in self.cursors.values())

    def _file_of(self, cursor: QueueCursor, queue_offset: int) -> str | None:
        return None if cursor.queue is None else relative(self.store, cursor.queue.unit_file(queue_offset))

    # ---- the merge ----

    def on_columns(self, columns: "RecordColumns") -> bool:
        """Check one batch; False (nothing done) when it must be reported record by record."""
        names = columns.topics.names
        known = len(self._batch_topic)
        if known < len(names):
            self._batch_topic = np.concatenate([self._batch_topic, np.array([name in self.batch_topics for name in names[known:]], dtype=np.bool_)])
        group_keys, counts, first, last, gid = group_queues(columns.topic_ids, columns.queue_ids, columns.sys_flags, self._batch_topic)
        offsets, queue_offsets = columns.offsets, columns.queue_offsets
        counts, last_offsets, first_qoffs = counts.tolist(), offsets[last].tolist(), queue_offsets[first].tolist()
        view_of = np.full(len(counts), -1, dtype=np.int64)  # each compared group's entries: ``views[view_of[g]]``
        plan, views = [], []
        for g, key in enumerate(group_keys.tolist()):
            cursor = self._by_key.get(key)
            if cursor is None:
                queue_id = key & 0xFFFFFFFF
                qkey = (names[key >> 32], queue_id - (1 << 32) if queue_id >= 1 << 31 else queue_id)
                cursor = self.cursors.get(qkey)
                if cursor is None:
                    plan.append((key, qkey, g))
                    continue
                self._by_key[key] = cursor
            head = cursor.head
            if head is None or head.phys > last_offsets[g]:
                if self._skipped_by_dispatch(cursor, first_qoffs[g]):
                    return False  # the record path reports it
                plan.append((key, cursor, g))
                continue
            if (cursor.topic, cursor.queue_id) in self.missing:
                return False  # a missing run closes here: its finding comes from the record path
            rows, due = cursor.peek(counts[g])
            if due or len(rows) != counts[g]:
                return False
            view_of[g] = len(views)
            views.append(rows)
            plan.append((key, cursor, g))
        ext = np.zeros(len(counts), dtype=np.int64)
        if views and not join_groups(gid, view_of, views, offsets, columns.sizes, queue_offsets, columns.tags, ext):
            return False
        last_qoffs = queue_offsets[last].tolist()
        compared = view_of.tolist()
        lo_offset, hi_offset = int(offsets[0]), int(offsets[-1])
        if any(compared[g] < 0 for _, _, g in plan) and any(a <= hi_offset and b > lo_offset for a, b in self.reput_gaps):
            return False  # missing runs split where the reput skips: the record path
        for key, cursor, g in plan:
            if compared[g] >= 0:
                cursor.skip(counts[g])
                cursor.last_pos, cursor.placed, cursor.shift = last_qoffs[g], True, None  # the join found every entry at its record's QUEUEOFFSET
                continue
            if type(cursor) is tuple:  # a queue without a directory
                cursor = self.cursors[cursor] = self._by_key[key] = QueueCursor(self, None, *cursor)
            cursor.last_pos = None
            lo, hi = first[g], last[g]
            self._missing((cursor.topic, cursor.queue_id), int(offsets[lo]), int(offsets[hi]), int(queue_offsets[lo]), int(queue_offsets[hi]), counts[g])
        self.ext_addresses += int(ext.sum())
        return True

    def on_batch(self, records: list[LogRecord]) -> None:
        """Each record against its queue's entries, one by one."""
        for record in records:
            if not _dispatched(record.sys_flag) or record.topic in self.batch_topics:
                continue
            key = (record.topic, record.queue_id)
            cursor = self.cursors.get(key)
            if cursor is None:
                cursor = self.cursors[key] = QueueCursor(self, None, *key)
            while cursor.head is not None and cursor.head.phys < record.offset:
                self._stray(cursor, cursor.head)
                cursor.skip(1)
            head = cursor.head
            if head is not None and head.phys == record.offset:
                self._close_missing(cursor)
                self._compare(cursor, head, record)
                cursor.last_pos, cursor.placed = head.queue_offset, True
                cursor.skip(1)
            elif self._skipped_by_dispatch(cursor, record.queue_offset):
                self.emit(self._record_skipped(cursor, record))
            else:
                cursor.last_pos = None
                self._missing(key, record.offset, record.offset, record.queue_offset, record.queue_offset, 1)

    def _missing(self, key: tuple[str, int], first: int, last: int, first_qoff: int, last_qoff: int, count: int) -> None:
        """Records ``[first, last]`` of queue ``key`` have no entry: a run is opened or extended."""
        run = self.missing.get(key)
        if run is not None and self._reput_gap(first) != self._reput_gap(run.first_offset):
            self._close_missing(self.cursors[key])
            run = None
        if run is None:
            self.missing[key] = MissingRun(first, last, first_qoff, last_qoff, count)
        else:
            run.last_offset, run.last_queue_offset, run.count = last, last_qoff, run.count + count

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
        # only the queue offset differs and either the record's QUEUEOFFSET times the unit size is past a Java long:
        # ``putMessagePositionInfo``'s position wrapped around, so the broker wrote the entry where no read of that queue
        # offset finds it (a damaged field: damage seed 4800051, 2^60 + 3); or the entry comes right after the one of the
        # queue's previous record (the queue's first entry, for its first record): the queue is in the order the broker
        # wrote it and the record's QUEUEOFFSET is the odd one out. ``putMessagePositionInfo`` appends at the write position
        # whatever a higher QUEUEOFFSET says and skips a lower one (reference §5.10): no rebuild puts the entry at the field's offset.
        # Not an entry shifted as the one before it, whose record's QUEUEOFFSET its own follows (``QueueCursor.shift``): that one
        # was a queue fault (entries missing before it, and the broker's dispatch then appending the records it re-dispatches at its
        # write position, ``putMessagePositionInfo`` only logging "[BUG]logic queue order maybe wrong"); a rebuild puts them all in place
        only_queue_offset = [what for what, _, _ in problems] == ["queue offset"]
        wrapped = only_queue_offset and not 0 <= record.queue_offset * cqfmt.ENTRY_SIZE < 1 << 63
        shift, cursor.shift = cursor.shift, None
        follows = shift == (entry.queue_offset - record.queue_offset, record.queue_offset - 1)
        # damaged: the field (outside the body CRC) is damaged, or records of the queue before it are lost; no rebuild mends it
        damaged = wrapped or only_queue_offset and not follows and cursor.last_pos is not None and entry.queue_offset == cursor.last_pos + 1
        if only_queue_offset and not damaged:
            cursor.shift = (entry.queue_offset - record.queue_offset, record.queue_offset)
        for what, expected, found in problems:
            self.emit(entry_mismatch(cursor.topic, cursor.queue_id, self._file_of(cursor, entry.queue_offset), entry.queue_offset,
                                     record.offset, what, expected, found, record_damaged=damaged, wrapped=wrapped))

    def _skipped_by_dispatch(self, cursor: QueueCursor, queue_offset: int) -> bool:
        """A record without an entry whose non-zero QUEUEOFFSET puts it below the queue's write position after its previous
        record: ``putMessagePositionInfo`` skips it ("Build consume queue repeatedly", reference §5.10; from 4.2.0,
        rules §3.3: older brokers append it at the write position). The position is a Java long: a negative QUEUEOFFSET,
        or one so large its position wraps around negative (damage seed 8800114, 2^61 + 44), is below it too. Before the
        queue's first entry no dispatch of the queue reached a write position: a record there was never dispatched (its
        queue file gone when the reput started after it, damage seed 7000128), and a rebuild gives it its entry."""
        return (self.repeat_guard and cursor.placed and cursor.last_pos is not None and queue_offset != 0
                and cqfmt.unit_position(queue_offset) <= cqfmt.unit_position(cursor.last_pos))

    def _record_skipped(self, cursor: QueueCursor, record: LogRecord) -> Finding:
        """A record the broker's dispatch skips (``_skipped_by_dispatch``): its QUEUEOFFSET is damaged, and no rebuild
        gives it an entry: lost data (``record_damaged``), not a consume queue fault."""
        position = cqfmt.unit_position(record.queue_offset)  # what a QUEUEOFFSET whose position wraps around a Java long stands for
        wrapped = "" if position == record.queue_offset * cqfmt.ENTRY_SIZE else f" (times the unit size, as a Java long: position {position})"
        return error(
            "cq-entry-missing",
            f"the record at {record.offset} of {cursor.label} has no consume queue entry and its QUEUEOFFSET field says "
            f"{record.queue_offset}{wrapped}, below the queue offset {cursor.last_pos + 1} after the queue's previous record: the broker's "
            "dispatch skips it (\"Build consume queue repeatedly\"), so the record's field is damaged; no rebuild of the queue mends it",
            file=self._file_of(cursor, cursor.last_pos + 1), offset=record.offset, expected=cursor.last_pos + 1, found=record.queue_offset,
            details=cursor.details(queue_offset=record.queue_offset, record_damaged=True))

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
        details = cursor.details(queue_offset=entry.queue_offset, size=entry.size)
        try:
            other = self.store.commitlog.read_record(entry.phys)
        except (FormatError, LookupError):
            other = None
        if other is not None and hasattr(other, "topic"):
            self.emit(error(
                "cq-entry-mismatch",
                f"{where}, the record of {other.topic_name}/{other.queue_id} at queue offset {other.queue_offset}: consumers of "
                f"{cursor.label} would receive the wrong message", expected=f"{cursor.topic}/{cursor.queue_id}",
                found=f"{other.topic_name}/{other.queue_id}", details={**details, "field": "topic/queue"}, **common))
        else:
            self.emit(error("cq-entry-dangling",
                            f"{where}, where no record starts (the middle of a record, or bytes overwritten since): the broker serves "
                            "undecodable bytes for it", expected="the start of a record", found="no record", details=details, **common))

    def _close_missing(self, cursor: QueueCursor) -> None:
        """The queue's run of records without entries ends: reported. Records whose TOPIC no consume queue directory can be
        named after (``has_queue_directory``): the broker's dispatch fails for them and no rebuild writes their entries: lost
        data (``record_damaged``)."""
        run = self.missing.pop((cursor.topic, cursor.queue_id), None)
        if run is None:
            return
        if not has_queue_directory(cursor.topic):
            self.emit(error(
                "cq-entry-missing",
                f"{run.count} records (commit log {run.first_offset}..{run.last_offset}) have a TOPIC with NUL bytes ({cursor.label!r}): "
                "the field is damaged, and no file can be named after it, so the broker's dispatch fails for them (\"[BUG]consume "
                "queue can not write\") and no rebuild gives them an entry", offset=run.first_offset, expected=f"{run.count} entries",
                found="none", details=cursor.details(last_offset=run.last_offset, records=run.count, record_damaged=True)))
            return
        gap = self._reput_gap(run.first_offset)
        rebuilt = self.redispatch_from is not None and run.first_offset >= self.redispatch_from and gap is None
        stall = self.stall if rebuilt else None
        consequence = (f"the broker's next start would rebuild them ({self.redispatch_why}), but {stall_of(*stall)}" if stall else
                       f"the broker will not rebuild them by itself: its reput from {self.redispatch_from} meets the unreadable record at "
                       f"{gap[0]} and goes on only at {gap[1]} ({self.redispatch_why}; doReput skips to the next file); consumers never "
                       "see these messages" if gap else
                       f"the broker will rebuild them on its next start ({self.redispatch_why})" if rebuilt else
                       f"the broker will not rebuild them by itself ({self.redispatch_why}); consumers never see these messages")
        lost = not rebuilt or stall is not None and not stall[0].undecided  # an undecided stall (lmq.stall_of says what decides) warns
        rebuilt = rebuilt and not stall
        unlisted = cursor.queue is None or not cursor.queue.files and not cursor.queue.directory.is_dir()  # no directory the broker reads
        where = "its consume queue directory is missing" if unlisted else "they have no consume queue entries"
        self.emit(entries_missing(cursor.topic, cursor.queue_id, self._file_of(cursor, run.first_queue_offset), run,
                                  f"were dispatched by nobody: {where}; {consequence}", lost=lost, rebuilt=rebuilt,
                                  **({"reput_resumes_at": gap[1]} if gap else {})))

    @cached_property
    def reput_gaps(self) -> list[tuple[int, int]]:
        """The ranges the start-up reput that would rebuild missing entries skips (``DispatchScanner.skipped_ranges``, the
        model ``recover`` plans with: ``doReput`` meeting a record it cannot dispatch goes on at the next file, §8.12, rules
        §2.12): no recovery cuts a mixed store's classic log (§15.5), so its records there get no entry. None where a
        recovery re-dispatches (``redispatch.dispatching_recovery``: its scan ends at such a record)."""
        from ..dispatch.scanner import TAGS_DELIVERY_TIME, phase_scanner
        from ..store.redispatch import dispatching_recovery

        store, start = self.store, self.redispatch_from
        if start is None or start >= self.logical_end or dispatching_recovery(store) is not None:
            return []
        reput = phase_scanner(store.commitlog, start, self.logical_end, discipline="reput", tags=TAGS_DELIVERY_TIME,
                              delay_table=store.delay_table, legacy_properties=store.legacy_properties, index_enable=False, check_crc=False)
        for _ in reput:
            pass
        return reput.skipped_ranges()

    def _reput_gap(self, offset: int) -> tuple[int, int] | None:
        return next(((a, b) for a, b in self.reput_gaps if a <= offset < b), None)

    @cached_property
    def stall(self):
        """The record whose dispatch throws where the start that would rebuild missing entries stops (``lmq.stall_throw``): the
        next start's where verify settled it at this end (the same scan)."""
        settled = self.settled() if self.settled is not None else None
        if settled is not None and settled[0] == self.logical_end:
            return settled[1]
        return stall_throw(self.store, self.logical_end, self.dispatched)

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
                cursor.skip(1)
            if beyond:
                first, last = beyond[0], beyond[-1]
                self.emit(warning(
                    "cq-entry-beyond-end",
                    f"consume queue {cursor.label}: {len(beyond)} entries (queue offsets {first.queue_offset}..{last.queue_offset}) point "
                    f"at or past the commit log's logical end {self.logical_end}: the broker's recovery removes them "
                    "(truncateDirtyLogicFiles); until then the queue's max offset counts them",
                    file=self._file_of(cursor, first.queue_offset), offset=first.phys, expected=f"< {self.logical_end}", found=first.phys,
                    details=cursor.details(first_queue_offset=first.queue_offset, last_queue_offset=last.queue_offset,
                                           entries=len(beyond))))
