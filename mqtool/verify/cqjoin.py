"""The consume queue check as a join of record columns against queue entries read as arrays.

``ColumnarConsumeQueueCheck`` is ``ConsumeQueueCheck`` (the record engine, the reference) with
``on_columns``: for one walk batch it groups the dispatched records by queue and compares each
group with the next entries of its queue in numpy (offset, size, QUEUEOFFSET, tags code, §5.1).
When every queue of the batch either matches exactly or has no entries for it (a run of
missing entries growing, which emits nothing yet), the batch is done; anything else (a
mismatch, a stray entry, a closing missing run, a gap or invalid-unit finding due) returns
False before any state changed, and the caller hands the batch to the record engine. Findings,
their order and the summary are therefore the record engine's, batch for batch.

``ArrayQueueCursor`` reads a queue as the record engine's ``QueueCursor`` does (same skipping of
filler units, same cq-file-gap and cq-invalid-unit findings, emitted when the same entry
becomes the head) but keeps the entries as arrays, ``CHUNK_UNITS`` at a time.
"""

from __future__ import annotations

from collections import deque
from typing import Iterator

import numpy as np

from ..formats import consumequeue as cqfmt
from ..store import ConsumeQueue
from ..store.consumequeue import UNIT_DTYPE
from ._cqjoin import decode_units, join_groups, queue_groups
from .columns import RecordColumns
from .consumequeue import ConsumeQueueCheck, Entry, MissingRun, QueueCursor, QueueFileEnd, QueueGap, queue_reads

CHUNK_UNITS = 8192  # per queue: memory grows with the number of queues, not their length
_PHYS, _SIZE, _TAGS = UNIT_DTYPE.names
_FILLER_PHYS, _FILLER_SIZE, _FILLER_TAGS = cqfmt.FILLER


QUEUE_CAPACITY = 1024  # queues a batch is first grouped for; a batch with more is grouped again for as many as records


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


class _Chunk:
    """Entries of a queue; ``events[i]``: findings due when entry ``i`` becomes the head
    (for the last, empty chunk: when the head becomes None)."""

    __slots__ = ("qoff", "phys", "size", "tags", "events", "last")

    def __init__(self, qoff, phys, size, tags, events: dict[int, list], last: bool = False):
        self.qoff, self.phys, self.size, self.tags, self.events, self.last = qoff, phys, size, tags, events, last

    def __len__(self) -> int:
        return self.phys.shape[0]


_EMPTY = np.empty(0, dtype=np.int64)


class ArrayQueueCursor:
    """``QueueCursor``'s ``head`` / ``advance`` / ``entries``, plus ``peek`` and ``skip``."""

    label = QueueCursor.label
    gap_finding = QueueCursor.gap_finding
    invalid_finding = QueueCursor.invalid_finding

    def __init__(self, check: ConsumeQueueCheck, queue: ConsumeQueue | None, topic: str, queue_id: int):
        self.check = check
        self.queue = queue
        self.topic, self.queue_id = topic, queue_id
        self._gen = self._chunks() if queue is not None else iter((_Chunk(_EMPTY, _EMPTY, _EMPTY, _EMPTY, {}, True),))
        self._loaded: deque[_Chunk] = deque()
        self._i = 0
        self._passed = 0  # entries the head has moved past
        self.head: Entry | None = None
        self._fill(1)
        self._arrive()

    @property
    def entries(self) -> int:
        """Entries read so far: those passed and the head (as ``QueueCursor`` counts them)."""
        return self._passed + (self.head is not None)

    # ---- reading ----

    def _chunks(self) -> Iterator[_Chunk]:
        """``QueueCursor._iterate`` with the entries in arrays and the findings as events."""
        invalid_from = None
        pending: list = []  # findings due before the next entry
        for read in queue_reads(self.queue, CHUNK_UNITS):
            if type(read) is QueueGap:
                pending.append(self.gap_finding(read.path, read.expected, read.base))
                invalid_from = None
                continue
            if type(read) is QueueFileEnd:
                if invalid_from is None:
                    invalid_from = read.offset
                continue
            count = len(read.data) // cqfmt.ENTRY_SIZE
            phys, size, tags = np.empty(count, np.int64), np.empty(count, np.int64), np.empty(count, np.int64)
            invalid, fillers = decode_units(np.frombuffer(read.data, dtype=np.uint8), phys, size, tags)
            first_qoff = read.first
            if invalid_from is None and not invalid:
                idx = np.flatnonzero(~((phys == _FILLER_PHYS) & (size == _FILLER_SIZE) & (tags == _FILLER_TAGS))) if fillers else None
                events = {}
                if pending and (idx is None or len(idx)):
                    events, pending = {0: pending}, []
            else:
                idx, events, pending, invalid_from = self._slow_units(read.path, phys, size, tags, first_qoff, pending, invalid_from)
            if idx is None:  # no filler, nothing skipped: the arrays as read
                yield _Chunk(np.arange(first_qoff, first_qoff + count, dtype=np.int64), phys, size, tags, events)
            elif len(idx):
                yield _Chunk(idx + first_qoff, phys[idx], size[idx], tags[idx], events)
        yield _Chunk(_EMPTY, _EMPTY, _EMPTY, _EMPTY, {0: pending} if pending else {}, True)

    def _slow_units(self, path, phys, size, tags, first_qoff: int, pending: list, invalid_from):
        """Units with invalid ones among them, one by one as ``QueueCursor._iterate`` reads them."""
        kept: list[int] = []
        events: dict[int, list] = {}
        for i, (p, n, t) in enumerate(zip(phys.tolist(), size.tolist(), tags.tolist())):
            queue_offset = first_qoff + i
            if p >= 0 and n > 0:
                if (p, n, t) == cqfmt.FILLER:
                    continue
                if invalid_from is not None:
                    pending.append(self.invalid_finding(path, invalid_from, queue_offset))
                    invalid_from = None
                if pending:
                    events[len(kept)], pending = pending, []
                kept.append(i)
            elif invalid_from is None:
                invalid_from = queue_offset
        return np.asarray(kept, dtype=np.int64), events, pending, invalid_from

    def _fill(self, n: int) -> None:
        """Load chunks until ``n`` entries from the head on are loaded, or the last chunk is."""
        have = sum(len(c) for c in self._loaded) - self._i
        while have < n and not (self._loaded and self._loaded[-1].last):
            chunk = next(self._gen)
            self._loaded.append(chunk)
            have += len(chunk)

    # ---- moving ----

    def _arrive(self) -> None:
        """The head is at ``(_loaded[0], _i)``: emit what is due there and set ``head``."""
        chunk = self._loaded[0]
        for finding in chunk.events.get(self._i, ()):
            self.check.emit(finding)
        if chunk.last:
            self.head = None
        else:
            i = self._i
            self.head = Entry(int(chunk.qoff[i]), int(chunk.phys[i]), int(chunk.size[i]), int(chunk.tags[i]))

    def advance(self) -> None:
        self.skip(1)

    def skip(self, n: int) -> None:
        """Move the head ``n`` entries on, emitting what is due on the way."""
        while n > 0 and self.head is not None:
            chunk = self._loaded[0]
            step = min(n, len(chunk) - self._i)
            target = self._i + step
            for k in sorted(k for k in chunk.events if self._i < k < target):
                for finding in chunk.events[k]:
                    self.check.emit(finding)
            self._passed += step
            n -= step
            if target == len(chunk):
                self._loaded.popleft()
                self._fill(1)
                self._i = 0
            else:
                self._i = target
            self._arrive()

    def peek(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
        """(queue offsets, offsets, sizes, tags codes) of the head and the ``n - 1`` entries
        after it (fewer at the end), and whether moving the head ``n`` on would emit findings."""
        self._fill(n + 1)
        parts, due, at = [], False, 0  # at: position (from the head) of the chunk's first unread entry
        for c, chunk in enumerate(self._loaded):
            lo = self._i if c == 0 else 0
            hi = min(len(chunk), lo + n - at)
            if hi > lo:
                parts.append((chunk.qoff[lo:hi], chunk.phys[lo:hi], chunk.size[lo:hi], chunk.tags[lo:hi]))
            due = due or any(k >= lo and 1 <= at + k - lo <= n for k in chunk.events)
            at += len(chunk) - lo
            if at > n or chunk.last:
                break
        if len(parts) == 1:
            return (*parts[0], due)
        if not parts:
            return _EMPTY, _EMPTY, _EMPTY, _EMPTY, due
        return (*(np.concatenate(cols) for cols in zip(*parts)), due)


class ColumnarConsumeQueueCheck(ConsumeQueueCheck):
    """``ConsumeQueueCheck`` with a batch join (``on_columns``); the record path stays for the
    batches the join declines."""

    cursor_class = ArrayQueueCursor
    joined = declined = 0  # batches the join took / handed to the record engine

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._batch_topic = np.zeros(0, dtype=np.bool_)  # by topic id: a BatchCQ topic (not checked)

    def _skip_topic(self, columns: RecordColumns) -> np.ndarray:
        names = columns.topics.names
        known = len(self._batch_topic)
        if known < len(names):
            self._batch_topic = np.concatenate([self._batch_topic, np.array([name in self.batch_topics for name in names[known:]], dtype=np.bool_)])
        return self._batch_topic

    def on_columns(self, columns: RecordColumns) -> bool:
        """Check one batch; False (nothing done) when the record engine must take it."""
        names = columns.topics.names
        group_keys, counts, first, last, gid = group_queues(columns.topic_ids, columns.queue_ids, columns.sys_flags, self._skip_topic(columns))
        offsets, queue_offsets = columns.offsets, columns.queue_offsets
        counts, first, last = counts.tolist(), first.tolist(), last.tolist()
        entry_start = np.full(len(counts), -1, dtype=np.int64)  # where each compared group's entries start in ``parts``
        plan, parts, at = [], [], 0
        for g, key in enumerate(group_keys.tolist()):
            queue_id = key & 0xFFFFFFFF
            qkey = (names[key >> 32], queue_id - (1 << 32) if queue_id >= 1 << 31 else queue_id)
            cursor = self.cursors.get(qkey)
            if cursor is None or cursor.head is None or cursor.head.phys > offsets[last[g]]:
                plan.append((qkey, cursor, g, False))
                continue
            if qkey in self.missing:
                return False  # a missing run closes here: its finding comes from the record path
            qoff, phys, size, tags, due = cursor.peek(counts[g])
            if due or phys.shape[0] != counts[g]:
                return False
            parts.append((qoff, phys, size, tags))
            entry_start[g] = at
            at += counts[g]
            plan.append((qkey, cursor, g, True))
        ext = np.zeros(len(counts), dtype=np.int64)
        if parts:
            entries = parts[0] if len(parts) == 1 else [np.concatenate(column) for column in zip(*parts)]
            if not join_groups(gid, entry_start, *entries, offsets, columns.sizes, queue_offsets, columns.tags, ext):
                return False
        for qkey, cursor, g, compared in plan:
            if compared:
                cursor.skip(counts[g])
                self.ext_addresses += int(ext[g])
                continue
            if cursor is None:
                self.cursors[qkey] = self.cursor_class(self, None, *qkey)
            lo, hi = first[g], last[g]
            run = self.missing.get(qkey)
            if run is None:
                self.missing[qkey] = MissingRun(int(offsets[lo]), int(offsets[hi]), int(queue_offsets[lo]), int(queue_offsets[hi]), counts[g])
            else:
                run.last_offset, run.last_queue_offset, run.count = int(offsets[hi]), int(queue_offsets[hi]), run.count + counts[g]
        return True
