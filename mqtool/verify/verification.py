"""One verification run over an opened store (``Verification``): the checks of ``mqtool.verify``
in order, the cross-checks on the commit log check's walk where they can."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Generator, Iterator

from ..errors import MqtoolError
from ..formats.dispatch import LmqNotifyThrows
from ..handoff import usable_cpus
from ..store import Store
from ..store import fastscan as fs
from ..store.commitlog import ScanEnd
from ..store.layout import unchecked_parts
from . import CHECKS, CROSS_CHECKS, Progress, VerifyOptions
from .commitlog import CommitLogCheck, CommitLogResult
from .crosscheck import CrossCheckOutcome, CrossChecks
from .findings import Finding, Summary
from .lmq import LmqExpected, lmq_findings, stalled_start, throw_finding
from .logstream import LogStream
from ..store.segments import store_timestamp_at
from .state import abort_findings, checkpoint_findings, config_findings, opened_first_findings

if TYPE_CHECKING:
    from ..scan.timer import TimerWalk

SHARE_WALK = True  # the cross-checks read the commit log check's walk (``sharedwalk.py``) where they can


class Verification:
    """One verification run over an opened store."""

    def __init__(self, store: Store, options: VerifyOptions = VerifyOptions(), progress: Progress | None = None):
        self.store, self.options, self.progress = store, options, progress
        self.summary = Summary(
            store=str(store.root) if store.root is not None else str(store.commitlog.segments[0].path.parent) if store.commitlog.segments else None,
            version=str(store.version_guess), checks=tuple(c for c in CHECKS if c in options.checks))
        self.commitlog: CommitLogResult | None = None
        self.last_timestamp: int | None = None  # store time of the last valid record, as the checkpoint check took it
        self.summary.notes.extend(unchecked_parts(store.root))
        self.cross_checks: list = []  # the cq and index checks of the last run
        self.cross_checks_shared = False  # whether they ran on the commit log check's walk (``sharedwalk.py``)
        self.cross_checks_threaded = False  # and in threads beside it
        self._broker_start: int | None = None
        # segment base -> chain prefix already walked and checked by another reader (``recover``'s plan)
        self.walked: dict | None = None
        self.dispatched = None  # what another reader's dispatch of the chain saw (``recover``'s plan: ``lmq.Dispatched``)
        self.stall = None  # the record whose dispatch throws where the next start stops, and how (``_settle_next_start``)
        self.stalled_at: int | None = None  # the end ``stall`` was scanned to (the next start's), once it was
        self.riding: dict[str, object] = {}  # the riders (``_riders``) of the cq check's walk whose findings stand

    def broker_start(self) -> int:
        """Where the broker's start-up recovery scans from (``store.nextstart.scan_start_offset``, the
        start the next-start line reports), asked only at damage."""
        if self._broker_start is None:  # set once, whole: the checks thread may ask first (``sharedwalk``)
            from ..store.nextstart import scan_start_offset

            self._broker_start = scan_start_offset(self.store)
        return self._broker_start

    def _stage(self, name: str, total: int):
        if self.progress is None:
            return None
        return lambda delta: delta and self.progress(name, delta, total)  # 0 would begin the stage again (``activity.Listener``)

    def findings(self) -> Iterator[Finding]:
        started = time.perf_counter()
        try:
            for finding in self._run():
                self.summary.count(finding)
                yield finding
        finally:
            self.summary.elapsed_s = time.perf_counter() - started

    def _run(self) -> Iterator[Finding]:
        opts, store = self.options, self.store
        start = max(opts.from_offset if opts.from_offset is not None else store.commitlog.min_offset, store.commitlog.min_offset)
        stop = opts.to_offset
        cross = [c for c in CROSS_CHECKS if c in opts.checks] if store.root is not None else []
        whole = opts.from_offset is None and stop is None
        plain = SHARE_WALK
        timer = None  # the timer check's walk of the log, fed another check's walk: the commit log check's, or the cq and index checks'
        if whole and SHARE_WALK and "timer" in opts.checks and store.root is not None and (cross or plain and "commitlog" in opts.checks):
            timer = self._timer_walk(start)
        shared = None
        if whole and plain and (cross or timer is not None):
            # the cross-checks on the commit log check's own walk (one walk), in two threads beside
            # it where a second CPU is free (``sharedwalk.py``): faster than any split into
            # processes, whatever ``jobs`` (the cross-checks' own work is the longer part); with
            # ``--only cq`` or ``index`` too, the commit log check walking for them, unheard;
            # the timer check's walk of the log on it too (``SharedWalk.timer_walk``), also without the cross-checks: then
            # inline, as the thread gains nothing there (the timer check's batch work holds the GIL: more CPU, no shorter walk);
            # a DLedger log's check feeds it inline too (``DLedgerLogCheck``: ``SharedWalk.entry_rows``), its files' maps
            # held by the batch being cut alone
            from .sharedwalk import SharedWalk

            threads = bool(cross) and usable_cpus() > 1 and not store.is_dledger
            shared = SharedWalk(self, cross, start, threads=threads, timer=timer, riders=self._riders(cross))
        try:
            yield from self._checks(start, stop, cross, shared)
        finally:
            if shared is not None:
                shared.close()

    def _checks(self, start: int, stop: int | None, cross: list[str], shared) -> Iterator[Finding]:
        opts, store, summary = self.options, self.store, self.summary
        timer_walk = None  # the timer check's walk, where another walk fed it
        last_timestamp = None
        records = 0
        logical_end = None
        heard = "commitlog" in opts.checks  # else the check runs only as the walk the cross-checks read (``shared``)
        if heard or shared is not None:
            if store.is_dledger:
                from .dledger import DLedgerLogCheck as log_check  # DLedger modules: only for a DLedger store
            else:
                log_check = CommitLogCheck
            # a shared walk is one walk, in this process (a pool's segments are not shown to it)
            jobs = 1 if shared is not None else opts.jobs
            extra = {"chain": shared} if store.is_dledger else {"unread_before": self.broker_start, "chain": shared, "walked": self.walked}
            check = log_check(store, start=start, stop=stop, jobs=jobs, keep_going=opts.keep_going and heard, **extra)
            check.progress = self._stage("commitlog" if heard else "cross-check", check.total_bytes)
            if not heard:
                for _ in check.run():  # its findings not asked for
                    pass
                logical_end = check.result.logical_end
            else:
                yield from check.run()
                result = self.commitlog = check.result
                summary.records, summary.bytes, summary.segments = result.records, result.bytes, result.segments
                summary.logical_end, summary.end_reason = result.logical_end, result.end_reason
                summary.notes.extend(check.notes)
                last_timestamp, records, logical_end = result.last_timestamp, result.records, result.logical_end
                self.last_timestamp = last_timestamp
            if opts.from_offset is None and not store.is_dledger:
                offered = self.dispatched  # where the shared walk offers none (verify without the cross checks)
                dispatched = (lambda: offered) if shared is None else (lambda: shared.dispatched(logical_end) or offered)
                self._settle_next_start(check.broker_walk(store.config.check_crc_on_recover), dispatched)
        if summary.next_start is None and {"commitlog", "cq", "index"} & set(opts.checks):
            self._settle_next_start(None)
        if cross and opts.from_offset is not None and start > store.commitlog.min_offset:
            start = fs.scan_start(store.commitlog, start)  # a start inside a record: the next record, as the commit log check does
        if cross:
            self.cross_checks_shared = shared is not None and shared.result(logical_end) is not None
            timer_walk = shared.timer_walk() if shared is not None else None
            if timer_walk is None and shared is not None and shared.timer is not None and store.is_dledger:
                timer_walk = self._timer_walk(start)  # a DLedger log's walk not followed whole: the cross-checks' walk feeds a new one
            self.cross_checks_threaded = self.cross_checks_shared and shared.threaded
            if self.cross_checks_shared:
                self.cross_checks = shared.checks.checks
                self.riding = shared.riders
                try:
                    outcome = yield from shared.replay()
                finally:
                    shared.close()
            else:
                if shared is not None:
                    shared.close()  # its findings do not stand: the checks walk again
                outcome = yield from self._cross_check(cross, start, stop, logical_end, timer_walk)
            summary.notes.extend(outcome.notes)
            if outcome.consume_queues is not None:
                summary.consume_queues, summary.consume_queue_entries = outcome.consume_queues, outcome.consume_queue_entries
            if outcome.index_files is not None:
                summary.index_files, summary.index_entries = outcome.index_files, outcome.index_entries
            lmq = "lmq" in self.riding  # the riders say which checks the walk fed
            if lmq:
                line = yield from lmq_findings(store, self.riding["lmq"], outcome.end.offset, start, stop)
                if line:
                    summary.notes.append(line)
            if "cq" in cross and self.stall is not None:  # the record ``_settle_next_start`` found
                throw, how = self.stall
                if not lmq or isinstance(throw, LmqNotifyThrows):  # else the LMQ check reported it
                    yield throw_finding(throw, how)
            if "batch" in self.riding:
                from .batchqueue import batch_queue_findings

                line = yield from batch_queue_findings(store, self.riding["batch"], outcome.end.offset, start, stop)
                summary.notes.append(line)
            if last_timestamp is None:
                last_timestamp, records = outcome.last_timestamp, outcome.records
            if summary.logical_end is None and outcome.end is not None:
                summary.logical_end, summary.end_reason = outcome.end.offset, outcome.end.reason
            if "commitlog" not in opts.checks:
                summary.records = outcome.records
                summary.bytes = max((outcome.end.offset if outcome.end else start) - start, 0)
        elif shared is not None:  # no cq or index check: the commit log check's walk fed the timer check's alone
            try:
                shared.result(logical_end)  # its batches fed (a failure of theirs raised here)
            finally:
                shared.close()
            timer_walk = shared.timer_walk()
            if timer_walk is not None:
                timer_walk.walk(after=shared.stream_end)  # on past damage the broker's recovery never reads, by itself
        elif store.root is None and any(c in opts.checks for c in CROSS_CHECKS):
            summary.notes.append("consume queue and index checks need a store directory, not commit log segments")
        if "checkpoint" in opts.checks and store.root is not None:
            if last_timestamp is None or stop is not None:  # the checkpoint against the log's last message, not a range's
                last_timestamp, records = self._last_timestamp()
            self.last_timestamp = last_timestamp
            yield from checkpoint_findings(store, last_timestamp, records)
            yield from abort_findings(store)
            yield from opened_first_findings(store)
            yield from config_findings(store)
        if "timer" in opts.checks and store.root is not None:
            from .timer import timer_findings

            line = yield from timer_findings(store, summary.next_start, timer_walk)
            if line:
                summary.notes.append(line)

    def _riders(self, cross: list[str]) -> dict[str, object]:
        """What reads the cq check's walk besides it, fed each batch it checks (``add``) by whoever walks (``SharedWalk``,
        ``_cross_check``), so that no check walks the log again: what the LMQ queues are owed (``lmq.LmqExpected``) and the
        batch consume queues (``batchqueue.BatchUnitsExpected``), their checks run after the cq check's findings. New for each
        walk (one that does not stand is left with its riders); ``riding`` holds those of the walk that stands."""
        store, riders = self.store, {}
        if "cq" in cross:
            if store.multi_dispatch_on:
                riders["lmq"] = LmqExpected(store)
            if store.batch_consume_queues:
                from .batchqueue import BatchUnitsExpected

                riders["batch"] = BatchUnitsExpected(store, {q.topic for q in store.batch_consume_queues})
        return riders

    def _timer_walk(self, start: int) -> TimerWalk | None:
        """The timer check's walk of the log (``scan.timer.TimerWalk``: the timer log's units read first), to be fed another
        walk's batches from ``start`` (its ``end`` until then); None without a timer store, or where its files cannot be read
        (the timer check then walks alone and meets the failure in its turn, after the findings before it)."""
        from ..store.timer import TimerStore

        try:
            timer = TimerStore.open(self.store.root)
            if timer is None:
                return None
            from ..scan.timer import TimerWalk  # pyarrow: only where there is a timer store

            walk = TimerWalk(self.store, timer)
        except (MqtoolError, OSError):
            return None
        walk.end = start
        return walk

    def settled_stall(self) -> tuple[int, tuple | None] | None:
        """(the end ``stall`` was scanned to, ``stall``) once ``_settle_next_start`` scanned, for the cq check's stall at the same
        end (``ConsumeQueueCheck.stall``: no second scan); else None."""
        return None if self.stalled_at is None else (self.stalled_at, self.stall)

    def _settle_next_start(self, walked: tuple[int, ScanEnd] | None, dispatched=None) -> None:
        """``summary.next_start``: the broker's next start (``store.nextstart``), from the
        commit log check's walk where it made one (no second walk of the log), with where a
        record whose dispatch throws stops it (``lmq.stalled_start``, kept in ``stall``; ``dispatched``: the shared walk's
        dispatch of the chain, which spares it a scan of its own); the logical end the summary reports is its end
        (``NextStart.reported_end``)."""
        from ..store.nextstart import next_start

        walked_from, end = walked if walked is not None else (None, None)
        found, self.stall = stalled_start(self.store, next_start(self.store, end, walked_from), dispatched)
        self.stalled_at = None if found is None else found.logical_end  # ``stalled_start`` scans where the start ends the log
        if found is not None:
            self.summary.logical_end, self.summary.end_reason = found.reported_end(end)
            self.summary.next_start = found

    def _cross_check(self, cross: list[str], start: int, stop: int | None, logical_end: int | None,
                     timer: TimerWalk | None = None) -> Generator[Finding, None, CrossCheckOutcome]:
        """The cq and index checks over one stream of the valid records (``LogStream``);
        ``logical_end``: the commit log check's, when it ran first (else the end of the files); ``timer``: the timer check's walk,
        fed the shared walk's batches to its ``end`` (``SharedWalk.timer_walk``), goes on with this stream's batches from there
        (past damage the broker's recovery never reads, where the stream resumes and the shared walk stopped)."""
        store = self.store
        stream = LogStream(store, start, stop, unread_before=None if store.is_dledger else self.broker_start)
        end_guess = logical_end if logical_end is not None else store.commitlog.end_of_files
        total = (stop if stop is not None else end_guess) - start
        stream.progress = self._stage("cross-check", max(total, 0))
        cross_checks = CrossChecks(store, cross, start, stop, end_guess, self.options.index_files)
        cross_checks.settled = self.settled_stall
        self.cross_checks = cross_checks.checks
        self.riding = self._riders(cross)
        riders = list(self.riding.values())
        yield from cross_checks.begin()
        for batch in stream.walk():
            yield from cross_checks.feed(batch)
            for rider in riders:
                rider.add(batch)
            if timer is not None and batch.base_offset + int(batch.rows[0, fs.COL_POS]) >= timer.end:
                timer.add_rows(batch)
        if timer is not None and stream.end is not None and stream.end.offset > timer.end:
            timer.end = stream.end.offset
        outcome = CrossCheckOutcome(records=stream.records, end=stream.end)
        end = stream.end.offset if stream.end is not None and stream.end.reason != "limit" else end_guess
        return (yield from cross_checks.finish(end, outcome))

    def _last_timestamp(self) -> tuple[int | None, int]:
        """Store time of the last valid record, from a walk of the last three segments."""
        segments = self.store.commitlog.segments
        if not segments:
            return None, 0
        start = segments[max(0, len(segments) - 3)].base_offset
        scan = fs.FastScan(self.store.commitlog, start, check_crc=False, stop_on_crc=False, release_behind=True)
        last = None
        records = 0
        for batch in scan:
            records += len(batch.rows)
            last = store_timestamp_at(batch.array, int(batch.rows[-1, fs.COL_POS]))
        return last, records
