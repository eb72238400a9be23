"""The cq and index checks on the commit log check's own walk: the valid records are walked once.

The commit log check walks the broker's chain first in each segment (``segments.analyze_segment``,
CRC checked but never ending it), so ``SharedWalk`` is shown those rows (``segments.ChainReader``),
cuts them into exactly the batches ``LogStream`` would yield (``fastscan.FastScan``'s sizes) and
dispatches them while they are in cache (``columns.ColumnBuilder.add``), topics numbered through
one table in walk order; the timer check takes them too (``scan.timer.TimerWalk``,
``timer_walk``), also beside the commit log check alone (no cq or index check: nothing dispatched),
and so do the riders of the cq check (``Verification._riders``: what the LMQ and batch consume queues
are owed). A DLedger log's check shows it the batches of its walk of each data file instead
(``dledger.analyze_data_file``: ``entry_rows``, ``entry_end``), checked inline.
Each whole batch is checked (``CrossChecks.feed``) in a thread of its own while the walk goes on
(``handoff.Stage``), which also makes the checks first (``CrossChecks.begin``) and reads ahead when idle (``_ahead``). Findings are spilled to an
unlinked temporary file and replayed after the commit log's, as if the checks had run after it.

The end of the files stands in for the logical end: ``result`` declines when
the logical end is below where the stream ended, when the chain was not seen whole, or when the
stream would have resumed after damage before the broker's recovery start; the caller then walks
again."""

from __future__ import annotations

import pickle
from collections import deque
from typing import TYPE_CHECKING, Generator, Iterator

import numpy as np

from ..handoff import Stage
from ..scratch import scratch_file, working_file_error
from ..store import fastscan as fs
from ..store.commitlog import ScanEnd, StopReason
from . import logstream
from .crosscheck import CrossCheckOutcome, CrossChecks
from .findings import Finding, replay_spilled
from .lmq import Dispatched, last_flagged
from ..store.segments import ChainReader, Run, SegmentTask

if TYPE_CHECKING:
    from ..scan.timer import TimerWalk
    from .verification import Verification

_BEGIN = object()  # the checks' first work: made, and their findings before any record (``CrossChecks.begin``)
_AHEAD = object()  # a step of the read-ahead (``_ahead``), handed over when the checks thread is idle
CHUNK = 4096  # findings per pickled chunk
CHECK_DEPTH = 1  # batches (8 MiB of records, or 16384 records) waiting for the checks thread, at most (each holds about 5 MB at 128 B)


class SharedWalk(ChainReader):
    """Fed by ``CommitLogCheck`` (``chain``); ``result`` says whether its findings stand.

    ``threads``: the batches are checked in a thread beside the walk, in the order cut, so the
    findings and their order are those of the inline run. ``timer``: the timer check's walk, to be fed the batches
    (``timer_walk``); its units read before the checks thread starts (``CommitLog.mapped``'s cache is not thread-safe)."""

    def __init__(self, verification: "Verification", cross: list[str], start: int, threads: bool = False, timer: "TimerWalk | None" = None,
                 riders: dict[str, object] | None = None):
        store = verification.store
        self.verification = verification
        self.riders = riders or {}  # what reads the checked batches besides the checks (``Verification._riders``)
        self.segments = store.commitlog.segments
        self.checks = CrossChecks(store, cross, start, None, store.commitlog.end_of_files, verification.options.index_files)
        self.start = start
        self.last_flagged = -1  # the offset of the last record dispatched with a ``THROW_FLAGS`` flag
        self.stood: Dispatched | None = None  # what was dispatched, once ``result`` stands (every batch checked)
        self.checks.dispatched = lambda: self.stood
        self.checks.settled = verification.settled_stall
        self.outcome = CrossCheckOutcome()
        self.next_index = store.commitlog.segment_index(start) if self.segments else None
        self.base = 0
        self.array: np.ndarray | None = None  # the DLedger data file being walked (``entry_rows``)
        self.ended = False  # ``end`` was shown for the segment being walked
        self.stream_end: ScanEnd | None = None  # where the stream ends, once the chain has
        self.spill = None
        self.pending: list[Finding] = []
        self.timer = timer
        self.dispatching = bool(cross)  # the cq or index check runs: the batches' dispatch columns are built
        # FastScan(batch=BATCH, batch_bytes=BATCH_BYTES): the first batch an eighth of the most
        self.most = logstream.BATCH
        self.rows_per_batch = max(self.most // 8, 1)
        self.buffer = np.empty((self.most, fs.N_COLS), dtype=np.int64)
        self.fill = 0
        self.builder = self.checks.column_builder(self.rows_per_batch)  # the batch's columns, built as rows come
        self.threaded = threads
        self.defer = False  # whether the batch being cut leaves its dispatch (``ColumnBuilder.add``) to the checks thread
        self.handed: deque[int] = deque()  # first position of each batch handed to the thread, not yet checked
        self.ahead: Iterator[None] = self._ahead()  # the read-ahead's steps, run in the checks thread
        self.ahead_left = threads  # whether steps may remain
        self.checking = Stage(self._work, CHECK_DEPTH, "mqtool-verify-check") if threads else None
        if self.checking is None:
            self._work(_BEGIN)
        else:
            self.checking.put(_BEGIN)  # the checks read the queue files while the walk starts

    # ---- fed by the commit log check ----

    def wants(self, task: SegmentTask) -> bool:
        """Whether to be shown ``task``'s chain run: the next segment of an unbroken chain."""
        if self.stream_end is not None or self.next_index is None or task.index != self.next_index or task.resync:
            self.next_index = None  # a segment skipped: the chain is not followed any further
            return False
        self.base = task.base
        self.ended = False
        return True

    def rows(self, array: np.ndarray, rows: np.ndarray) -> None:
        """Cut into batches; each batch's records dispatched now, in cache (``ColumnBuilder.add``)."""
        at, n = 0, rows.shape[0]
        while at < n:
            take = min(n - at, self.rows_per_batch - self.fill)
            self.buffer[self.fill : self.fill + take] = rows[at : at + take]
            if self.dispatching and not self.defer:
                self.builder.add(array, rows[at : at + take])
            self.fill += take
            at += take
            if self.fill == self.rows_per_batch:
                self._cut(self.base, array)

    def end(self, array: np.ndarray, run: Run) -> None:
        """A segment's batches are checked before the next segment is mapped; the chain's last ones
        while the commit log check and the next start are settled (``result`` waits for them), their
        segment's map kept until then (``MappedFile.close``)."""
        if self.fill:
            self._cut(self.base, array)
        self.ended = True
        index = self.next_index
        if run.code == fs.OK_BLANK:
            if index + 1 < len(self.segments):
                if self.checking is not None:
                    self.checking.drain()
                self.next_index = index + 1
                return
            self.stream_end = ScanEnd(self.base + run.end, StopReason.BLANK_LAST, "blank record at the end of the last segment")
        else:
            code = fs.END_SEGMENT if run.code == fs.END_LIMIT else run.code  # no ``stop``: clipped by the segment end
            self.stream_end = ScanEnd(self.base + run.end, fs.CODE_REASONS[code], fs._detail(code, array, run.end, run.detail),
                               run.detail if code in (fs.END_LENGTH_MISMATCH, fs.END_CRC) else None)
        self.next_index = None

    def held(self) -> int | None:
        """The records of a batch reported record by record are read again when it is checked
        (``CrossChecks.feed``): the pages of batches not yet checked stay mapped until then."""
        try:
            return self.handed[0]
        except IndexError:
            return int(self.buffer[0, fs.COL_POS]) if self.fill else None

    def let_go(self) -> None:
        if self.checking is not None and self.checking.pending() and not self.ended:
            self._stop()  # the walk failed before ``end``: what waits is dropped with the segment

    # ---- fed by the DLedger check (``dledger.analyze_data_file``), inline ----

    def entry_rows(self, batch: fs.SegmentBatch) -> None:
        """A batch of the DLedger check's walk of a data file (``FastScan`` with DLedger's ``EntryWalker``: the records
        ``LogStream`` walks), cut as ``rows`` cuts the chain's; the file's map kept (``array``) until its last batch is cut."""
        if self.stream_end is None and self.next_index is not None:
            self.base, self.array = batch.base_offset, batch.array
            self.rows(batch.array, batch.rows)

    def entry_end(self, end: ScanEnd, on: str | None) -> None:
        """The DLedger check's walk of a file ended at ``end`` (its ``FastScan``'s): the file's last rows cut, as ``LogStream``'s
        walk cuts them at a file's end. ``on``: ``"blank"``, the walk goes on into the next file, its batches sized on as one
        ``FastScan`` sizes them; ``"damage"``, on past damage DLedger's recovery keeps (``resume_after_damage``), where
        ``LogStream`` walks again, sized anew, with the record of a broken entry of its own: not followed, nor an end at a file's
        end (``LogStream``'s says why otherwise): ``result`` declines and the cross-checks walk again; None, the log ends there."""
        if self.stream_end is not None or self.next_index is None:
            return
        if self.fill:
            self._cut(self.base, self.array)
        self.array = None
        if on == "blank":
            return
        if on is not None or end.reason == StopReason.LIMIT:
            self.next_index = None
        else:
            self.stream_end = end

    # ---- batches to findings ----

    def _cut(self, base: int, array: np.ndarray) -> None:
        """The batch is whole: to the checks; the next batch sized as ``FastScan`` sizes it."""
        count = self.fill
        rows = self.buffer[:count]
        batch = (base, array, rows, self.builder, self.defer)
        span = int(rows[count - 1, fs.COL_POS] + rows[count - 1, fs.COL_SIZE] - rows[0, fs.COL_POS])
        self.rows_per_batch = min(self.most, max(self.most // 8, 1, logstream.BATCH_BYTES * count // max(span, 1)))
        self.fill = 0
        self.builder = self.checks.column_builder(self.rows_per_batch)
        # the checks thread idle: the next batch's dispatch is its work (the walk is the longer
        # part on 1 KiB records, the checks on 128 B; reading the rows again costs less than waiting)
        self.defer = self.checking is not None and self.checking.idle()
        if self.checking is None:
            self._check(batch)
        else:
            self.handed.append(int(rows[0, fs.COL_POS]))
            self.checking.put(batch)
            self.buffer = np.empty((self.rows_per_batch, fs.N_COLS), dtype=np.int64)  # ``rows`` are the checks' now
            if self.defer and self.ahead_left:
                self.checking.put(_AHEAD)  # and a step of the read-ahead, in time it would spend waiting

    def _work(self, item) -> None:
        if item is _BEGIN:
            self.pending.extend(self.checks.begin())
        elif item is _AHEAD:  # one step of ``_ahead``; a failure ends them (the serial code meets it again, in order)
            try:
                next(self.ahead)
            except Exception:  # noqa: BLE001 - StopIteration, or a read ahead's failure: the serial code reports it
                self.ahead_left = False
        else:
            self._check(item)

    def _ahead(self) -> Iterator[None]:
        """What the checks after the walk read, a step at a time, each kept where they look for it
        (the same answers, found while the walk goes on): where the broker's recovery starts
        (``Verification.broker_start``), then each queue's recovery (``ConsumeQueue.recover``), where
        the checkpoint check places the consumer offsets (``state.config_findings``)."""
        verification = self.verification
        store = verification.store
        verification.broker_start()
        yield
        if "checkpoint" in verification.options.checks and store.config_file("consumerOffset.json") is not None:
            for queue in store.consume_queues:
                queue.recover()
                yield

    def _check(self, batch: tuple[int, np.ndarray, np.ndarray, object, bool]) -> None:
        base, array, rows, builder, deferred = batch
        self.outcome.records += rows.shape[0]
        segment = fs.SegmentBatch(base, array, rows)
        if self.dispatching:
            if deferred:
                builder.add(array, rows)
            columns = builder.build(base)
            self.last_flagged = last_flagged(columns.offsets, columns.flags, self.last_flagged)
            for finding in self.checks.feed(segment, columns):
                self.pending.append(finding)
                if len(self.pending) >= CHUNK:
                    self._spill()
            for rider in self.riders.values():
                rider.add(segment)
        if self.timer is not None:
            self.timer.add_rows(segment)
        if self.checking is not None:
            self.handed.popleft()

    def _stop(self) -> None:
        if self.checking is not None:
            self.checking.close()
            self.checking = None

    def _spill(self) -> None:
        try:
            if self.spill is None:
                self.spill = scratch_file("mqtool-verify-")
            pickle.dump(self.pending, self.spill, pickle.HIGHEST_PROTOCOL)
            self.spill.flush()  # a full file system says so here, not when the findings are read back
        except OSError as exc:
            raise working_file_error(exc) from exc
        self.pending = []

    # ---- after the commit log check ----

    def result(self, logical_end: int | None) -> "SharedWalk | None":
        """Self when the findings are those of a separate walk of the chain, else None; the
        checks done first (a failure of theirs raised here)."""
        if self.checking is not None:
            self.checking.drain()
        end = self.stream_end
        if end is None or logical_end is None or logical_end < end.offset:
            return None
        if not self.verification.store.is_dledger and end.unread_by_broker(self.verification.broker_start()):
            return None  # ``LogStream`` would resume after this damage: the broker reads on
        if self.dispatching and not self.verification.store.is_dledger:  # a classic chain: the records ``stall_throw`` scans
            self.stood = Dispatched(self.start, end.offset, self.last_flagged)
        return self

    def dispatched(self, logical_end: int | None) -> Dispatched | None:
        """The chain's records as the cq and index checks' dispatch saw them (``lmq.stall_throw``), where ``result`` stands."""
        return self.stood if self.result(logical_end) is not None else None

    def timer_walk(self) -> "TimerWalk | None":
        """The timer check's walk (``timer``) where it was fed the whole chain, to where it ends: the batches of the scan
        of its own (``TimerWalk.walk``) up to damage; where the broker reads on past it (``result`` declines), the cross-checks'
        walk again feeds it from there (``Verification._cross_check``), or without them it goes on itself
        (``TimerWalk.walk(after=...)``); else None. After ``result`` (the checks done)."""
        if self.timer is None or self.stream_end is None:
            return None
        self.timer.end = self.stream_end.offset
        return self.timer

    def replay(self) -> Generator[Finding, None, CrossCheckOutcome]:
        if self.spill is not None:
            yield from replay_spilled(self.spill)
        yield from self.pending
        self.pending = []
        self.outcome.end = self.stream_end
        return (yield from self.checks.finish(self.stream_end.offset, self.outcome))

    def close(self) -> None:
        self._stop()
        if self.spill is not None:
            self.spill.close()
            self.spill = None
        self.pending = []

