"""Commit log verification: every record of every segment, then the broker's view of the whole.

Segment reports (``segments.analyze_segment``, in parallel with ``jobs > 1``) are stitched in
offset order into the chain the broker reads, ending at the *logical end*
(``CommitLog.recoverNormally``'s ``processOffset``, reference §8.3; CRC failures do not end it),
and what lies after it is classified: zeros, a torn last write, stale records (§8.9) or live
records after damage (docs/verify.md). Without ``keep_going`` the check stops at the first
damaged range the broker reads (at or after its recovery's start); damage before that start, which
the broker never reads, does not end the check, as it does not end the log the broker serves."""

from __future__ import annotations

import queue
import signal
from itertools import zip_longest
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..formats import commitlog as clfmt
from ..handoff import Failure
from ..formats.errors import FormatError
from ..store import Store
from ..store import fastscan as fs
from ..store.store import EMPTY_LAST_SEGMENT, SEGMENT_NAME, SEGMENT_SIZE, STRAY_ENTRY, empty_not_last, stray_differs, stray_effects
from ..store.store import stray_text
from ..store.nextstart import refusing_eras
from ..store.version import eras_label
from ..store.mappedfile import MAPPED_FILE_QUEUE, exit_on_sigbus, sigbus_handled, unmounted_text
from .findings import Finding, error, info, warning
from ..store.segments import Gap, Run, SegmentReport, SegmentTask, analyze_segment, store_timestamp_at

Progress = Callable[[int], None]


@dataclass
class CommitLogResult:
    """What the other checks need to know about the commit log."""

    logical_end: int | None = None
    end_reason: str | None = None
    records: int = 0
    bytes: int = 0
    segments: int = 0
    last_timestamp: int | None = None  # STORETIMESTAMP of the last record before the logical end
    first_crc: int | None = None  # the first record on the chain whose body CRC fails (the chain goes on past it)
    stopped_early: bool = False


def stray_finding(store: Store, kind: str, entry, file_size: int | None, later: int, noun: str, folder: str, details: dict | None = None,
                  loader: str = MAPPED_FILE_QUEUE, eras=None) -> Finding:
    """An entry of a folder ``loader`` loads that is no file of it (``mappedfile.load_effect``, rules §2.13): an
    error where every era the store may be from refuses to start on it or loads the folder otherwise than mqtool
    reads it, a warning where some do, else an info (5.1.0+ skip a directory, 5.1.3+ delete a zero-length last entry); a
    file that is a dangling symlink (``StrayEntry.unmounted``) an error in every era, which no repair moves out.
    ``eras``: those of the store's that load the folder (all by default)."""
    eras = store.version_guess.eras if eras is None else eras
    effects = stray_effects(eras, entry, file_size, later, loader)
    differ = stray_differs(effects)
    message = f"{entry.path.name} is {entry.what} in {folder}: {stray_text(effects, entry, file_size, noun, loader, later)}"
    where = {"file": relative(store, entry.path), "expected": file_size, "found": entry.length, "details": {**(details or {}), "effects": {k: eras_label(v) for k, v in effects.items()}}}
    if entry.unmounted:
        return error(kind, f"{message}; {unmounted_text(entry.path)}", **where)
    if not differ:
        return info(kind, message, **where)
    message += "; `mqtool repair` moves it out"
    return (error if len(differ) == len(eras) else warning)(kind, message, **where)


def left_out_findings(store: Store) -> Iterator[Finding]:
    """The findings of the files and entries of ``commitlog/`` ``Store.open`` left out of the segment list
    (``Store.problems``, ``MappedFileQueue.load``'s rules §2.13): a classic store's, and a mixed DLedger store's,
    whose ``DLedgerCommitLog.load`` is ``CommitLog.load`` (``super.load()``, 4.5.0-5.3.3) of the classic folder."""
    for problem in store.problems:
        if problem.kind in (SEGMENT_SIZE, SEGMENT_NAME):
            yield error(problem.kind, problem.message, file=relative(store, problem.path), expected=problem.expected, found=problem.found)
        elif problem.kind == EMPTY_LAST_SEGMENT:
            yield empty_last_segment(store, problem)
        elif problem.kind == STRAY_ENTRY:
            yield stray_finding(store, STRAY_ENTRY, problem.entry, problem.expected, problem.later, "segment", "commitlog/")


def empty_last_segment(store: Store, problem) -> Finding:
    """A zero-length last commit log file (rules §2.13, ``MappedFileQueue.load``/``doLoad``): an error
    where every era the store may be from refuses to start on it, a warning where some do,
    otherwise an info (5.1.3+ delete it, 3.2.6-4.4.0 and 4.9.2 leave it out and start). With an entry
    sorting after it (``problem.entry``) it is no last entry, which 5.1.3+ ``doLoad`` refuse too."""
    file, last = relative(store, problem.path), problem.entry is None  # entry: one sorting after it, so no last entry (``last_listed``)
    refusing = refusing_eras(store.version_guess.eras, last)
    if not refusing:
        deleted = last and bool(store.eras_where("zero_length_last_file_deleted"))
        what = "deletes it at start (MappedFileQueue.doLoad, 5.1.3+)" if deleted else "leaves it out at load and starts (3.2.6-4.4.0, 4.9.2)"
        return info(EMPTY_LAST_SEGMENT, f"{problem.path.name} is a zero-length last commit log file: the broker {what}", file=file, found=0)
    after = empty_not_last(problem.entry, store.version_guess.eras)
    message = (f"{problem.path.name} is a zero-length last commit log file{after}: the broker of {eras_label(refusing)} logs \"length not "
               "matched message store config value\" and refuses to start (MappedFileQueue.load); it holds nothing: "
               "`mqtool repair` removes it")
    if len(refusing) < len(store.version_guess.eras):
        others = " (5.1.3+ delete it, 3.2.6-4.4.0 and 4.9.2 leave it out)" if last else " (3.2.6-4.4.0 and 4.9.2 leave it out)"
        return warning(EMPTY_LAST_SEGMENT, message + others, file=file, expected=problem.expected, found=0)
    return error(EMPTY_LAST_SEGMENT, message, file=file, expected=problem.expected, found=0)


def relative(store: Store, path: str | Path) -> str:
    """``path`` as findings name it: below the store's root where it lies there."""
    path = Path(path)
    return str(path.relative_to(store.root) if store.root is not None and path.is_relative_to(store.root) else path)


# ---- the segment reports, serially or from a process pool ------------------------------------

_worker_counter = None


def _init_worker(counter) -> None:
    global _worker_counter
    _worker_counter = counter
    # Ctrl-C reaches the whole process group: the parent stops and terminates the pool; a worker
    # interrupted itself would print "Process ForkPoolWorker-N:" and its traceback, and lose its task
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sigbus_handled():
        exit_on_sigbus(worker=True)  # a failed mapped read ends the parent with its one line, not a hang
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # and the other workers end silently when it is gone


def _count(delta: int) -> None:
    """A worker's ``analyze_segment`` progress: bytes added to the parent's shared counter."""
    with _worker_counter.get_lock():
        _worker_counter.value += delta


def segment_reports(tasks: list[SegmentTask], jobs: int, progress: Progress | None, chain=None, walked: dict[int, Run] | None = None) -> Iterator[SegmentReport]:
    """Reports in segment order. ``jobs > 1`` forks a pool (one segment per task); closing the
    generator early terminates it. Serially, ``chain`` (``sharedwalk.SharedWalk``) is shown the
    chain run of each segment it ``wants``, and a segment whose base is in ``walked`` continues
    that walked chain prefix (``segments.analyze_segment``).

    The pool's result thread hands each report over through a ``SimpleQueue``: the caller waits
    only in its ``get``, which a Ctrl-C interrupts whole (``handoff.Stage``). ``imap``'s iterator
    waits on a ``threading.Condition``, which a KeyboardInterrupt can leave with its lock released
    under the result thread, or held, and the pool's ``terminate`` then joins that thread forever."""
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield analyze_segment(task, progress, chain if chain is not None and chain.wants(task) else None, (walked or {}).get(task.base))
        return
    import multiprocessing  # here: the pool's modules (socket, pickle) are not for a serial run

    ctx = multiprocessing.get_context("fork")
    counter = ctx.Value("q", 0)
    shown = 0
    done: queue.SimpleQueue = queue.SimpleQueue()  # (task number, its report or Failure), put in the pool's result thread
    with ctx.Pool(min(jobs, len(tasks)), initializer=_init_worker, initargs=(counter,)) as pool:
        for number, task in enumerate(tasks):
            pool.apply_async(analyze_segment, (task, _count), callback=lambda report, number=number: done.put((number, report)),
                             error_callback=lambda exc, number=number: done.put((number, Failure(exc))))
        arrived: dict[int, SegmentReport | Failure] = {}
        for number in range(len(tasks)):
            while number not in arrived:
                try:
                    at, report = done.get(timeout=0.2)
                    arrived[at] = report
                except queue.Empty:
                    pass
                if progress is not None:
                    now = counter.value
                    progress(now - shown)
                    shown = now
            report = arrived.pop(number)
            if isinstance(report, Failure):  # raised where imap raised it: after the reports before it
                raise report.exc
            yield report


# ---- stitching ---------------------------------------------------------------------------------


class CommitLogCheck:
    """Stitch segment reports into findings; ``result`` is filled as the generator runs."""

    analyze = staticmethod(analyze_segment)  # what walks each of ``tasks()`` (``run``'s ``reports``)

    def __init__(self, store: Store, *, start: int | None = None, stop: int | None = None, jobs: int = 1, keep_going: bool = False, progress: Progress | None = None,
                 unread_before: Callable[[], int] | None = None, chain=None, walked: dict[int, Run] | None = None):
        self.store = store
        self.chain = chain  # shown the chain's rows as they are walked (``segment_reports``)
        self.walked = walked  # segment base -> chain prefix another reader walked (``segment_reports``)
        self.unread_before = unread_before  # where the broker's recovery starts scanning (asked only at damage)
        self._broker_start: int | None = None  # set when the chain ends at damage before it
        self._resume: int | None = None  # where valid records resume after that damage
        self.commitlog = store.commitlog
        self.start = self.commitlog.min_offset if start is None else start
        self.stop, self.jobs, self.keep_going, self.progress = stop, jobs, keep_going, progress
        self.result = CommitLogResult()
        self.crashed = store.abort_present
        self.notes: list[str] = []
        self._end_code = fs.OK_BLANK  # why the chain ended (set when it does)

    def tasks(self) -> list[SegmentTask]:
        tasks = []
        for i, seg in enumerate(self.commitlog.segments):
            if seg.end_offset <= self.start:
                continue
            if self.stop is not None and seg.base_offset >= self.stop:
                break
            start = max(self.start - seg.base_offset, 0)
            stop = None if self.stop is None or self.stop >= seg.end_offset else self.stop - seg.base_offset
            tasks.append(SegmentTask(i, str(seg.path), seg.base_offset, start, stop, resync=start > 0 and not tasks))
        return tasks

    @property
    def total_bytes(self) -> int:
        return sum((t.stop if t.stop is not None else self.commitlog.segments[t.index].size) - t.start for t in self.tasks())

    def run(self, reports: Iterable[SegmentReport] | None = None) -> Iterator[Finding]:
        """Findings of the commit log. ``reports`` (in segment order, one per ``tasks()``) may
        come from elsewhere, e.g. Spark tasks running ``analyze_segment``; by default the
        segments are analysed here (``jobs`` processes)."""
        yield from self._segment_sequence()
        result = self.result
        after: list[tuple[SegmentReport, Run | Gap]] = []
        blank_at = None  # the last blank the chain went on at: where it ends if no segment follows (§8.3)
        reports = iter(segment_reports(self.tasks(), self.jobs, self.progress, self.chain, self.walked) if reports is None else reports)
        try:
            for report in reports:
                result.segments += 1
                result.bytes += report.bytes
                if report.resumed_at is not None and report.resumed_at != report.start:
                    self.notes.append(f"--from-offset {report.base + report.start} is not a record start; checked from the next record at {report.base + report.resumed_at}")
                if result.logical_end is None and result.end_reason != "limit":
                    chain = report.chain
                    yield from self._record_findings(report, chain)
                    if result.first_crc is None and chain.crc:
                        result.first_crc = report.base + chain.crc[0][0]
                    result.records += chain.records
                    if chain.last_ts is not None:
                        result.last_timestamp = chain.last_ts
                    if chain.code == fs.OK_BLANK:
                        blank_at = report.base + chain.end
                        yield from self._blank_findings(report)
                        continue
                    if chain.code == fs.END_LIMIT:
                        result.end_reason = "limit"
                        continue
                    result.logical_end = report.base + chain.end
                    result.end_reason = fs.CODE_REASONS[chain.code]
                    self._end_code = chain.code
                    after.extend(_interleave(report, report.gaps, report.runs[1:]))
                elif result.end_reason != "limit" and report.has_data:
                    after.extend(_interleave(report, report.runs, report.gaps))
                live = any(isinstance(item, Run) and item.records and not self._is_stale(item, result.last_timestamp) for _, item in after)
                if live and not (self.keep_going or self._end_unread()):
                    result.stopped_early = True
                    break
        finally:
            if hasattr(reports, "close"):
                reports.close()  # ends a worker pool early
        log = self.commitlog
        if result.segments == 0 and log.segments:  # a range outside the files, as ``dump`` says it
            asked = f"[{self.start}, {self.stop})" if self.stop is not None else f"offset {self.start}"
            self.notes.append(f"no commit log segment holds {asked} (the files hold [{log.min_offset}, {log.end_of_files})): no record was checked")
        if result.logical_end is None and result.end_reason is None:
            last = self.commitlog.segments[-1] if self.commitlog.segments else None
            result.logical_end = blank_at if blank_at is not None else last.end_offset if last is not None else self.start
            result.end_reason = fs.StopReason.BLANK_LAST if last is not None else fs.StopReason.NO_SEGMENTS
        if self._end_unread():
            self._broker_start = self.unread_before()
        yield from sorted(self._after_end(after), key=lambda f: (f.offset if f.offset is not None else -1))
        if self._broker_start is not None and self._resume is not None:  # the log the broker serves goes on past the damage
            from ..store.summary import logical_end as recovery_end
            from .logstream import LogStream

            _, end = recovery_end(self.store, self._broker_start)
            stop = end.offset if self.stop is None else min(self.stop, end.offset)
            served = LogStream(self.store, self._resume, stop, unread_before=lambda: self._broker_start)
            last = None
            for last in served.walk():
                pass
            if last is not None:  # the last record the broker serves: the checkpoint check compares its time
                result.last_timestamp = store_timestamp_at(last.array, int(last.rows[-1, fs.COL_POS]))
            self.notes.append(f"the damage at {result.logical_end} lies before {self._broker_start}, where the broker's recovery starts scanning: "
                              f"the broker never reads it and serves the log to {end.offset}")
            result.records += served.records
            result.logical_end, result.end_reason = end.offset, end.reason
        if result.stopped_early:
            self.notes.append("stopped at the first damaged range the broker reads; run with --keep-going to check and count what follows")

    # ---- structure of the segment sequence ----

    def broker_walk(self, check_crc: bool) -> tuple[int, fs.ScanEnd] | None:
        """(from, end) of this check's walk as the broker's recovery walk ends it: at the first
        CRC failure on the chain when ``check_crc`` (``checkCRCOnRecover``: the chain here goes on
        past it, §8.3), else at the logical end; from the broker's start where the walk went past
        damage before it (``run``). None for a walk that stopped at a requested limit."""
        result = self.result
        if result.end_reason == fs.StopReason.LIMIT or result.logical_end is None:
            return None
        end = fs.ScanEnd(result.logical_end, result.end_reason)
        if check_crc and end.reason == fs.StopReason.LENGTH_MISMATCH:  # the walk judged its length; the broker's judges its body CRC first
            end = fs.ScanEnd(end.offset, self._crc_first(end.offset))
        if self._broker_start is not None and self._resume is not None:
            return self._broker_start, end
        if check_crc and result.first_crc is not None and result.first_crc < result.logical_end:
            return self.start, fs.ScanEnd(result.first_crc, fs.StopReason.CRC)
        return self.start, end

    def _segment_sequence(self) -> Iterator[Finding]:
        yield from left_out_findings(self.store)
        segments, size = self.commitlog.segments, self.commitlog.file_size
        left_out = {int(p.path.name) for p in self.store.problems if p.kind == SEGMENT_SIZE}
        for prev, seg in zip(segments, segments[1:]):
            if seg.base_offset != prev.base_offset + size:
                if all(base in left_out for base in range(prev.end_offset, seg.base_offset, size)):
                    continue  # the segment(s) there exist with the wrong length: reported above
                missing = (seg.base_offset - prev.base_offset) // size - 1
                yield error("segment-gap",
                            f"{missing} commit log segment(s) missing between {prev.path.name} and {seg.path.name}: the broker logs "
                            f"\"[BUG]The mappedFile queue's data is damaged, the adjacent mappedFile's offset don't match\" and "
                            f"messages in [{prev.end_offset}, {seg.base_offset}) are gone", file=relative(self.store, seg.path),
                            offset=prev.end_offset, expected=prev.end_offset, found=seg.base_offset,
                            details={"missing_from": prev.end_offset, "missing_to": seg.base_offset})

    # ---- findings inside valid runs ----

    def _record_findings(self, report: SegmentReport, run: Run) -> Iterator[Finding]:
        file = relative(self.store, report.path)
        for pos, size, stored, computed in run.crc:
            cut = self.unread_before is not None and report.base + pos >= self.unread_before()
            read = "" if self.unread_before is None else (
                f" (its next start scans from {self.unread_before()}, so it does{'' if cut else ' not'})")
            yield error("crc-mismatch",
                        f"body CRC of the message at {report.base + pos} is {computed}, the record says {stored}: the broker logs "
                        f"\"CRC check failed\" and its recovery (checkCRCOnRecover) cuts the log here if it re-reads this segment{read}; "
                        "consumers would get a corrupted body", file=file, offset=report.base + pos, expected=stored, found=computed,
                        details={"size": size, "cut_by_next_start": True} if cut else {"size": size})
        for pos, found in run.phys:
            yield error("phys-offset-mismatch",
                        f"the record at {report.base + pos} says its PHYSICALOFFSET is {found}: the broker's dispatch trusts the field, "
                        "so consume queue and index entries built from it point elsewhere", file=file, offset=report.base + pos,
                        expected=report.base + pos, found=found)
        for pos, expected, found in run.prop_crc:
            yield error("property-crc-mismatch",
                        f"the __CRC32# property of the record at {report.base + pos} does not match the record's bytes: with "
                        "forceVerifyPropCRC the broker's recovery cuts the log here", file=file, offset=report.base + pos,
                        expected=expected, found=found)
        if run.unlisted:
            self.notes.append(f"{file}: {run.unlisted} more record findings in [{report.base + run.start}, {report.base + run.end}) were counted but not listed")

    def _blank_findings(self, report: SegmentReport) -> Iterator[Finding]:
        file = relative(self.store, report.path)
        blank_offset = report.base + report.blank
        left = report.size - report.blank
        if report.blank_total != left:
            yield info("blank-size",
                       f"the end-of-file blank record at {blank_offset} says {report.blank_total} bytes are left, there are {left}; "
                       "the broker ignores this field", file=file, offset=blank_offset, expected=left, found=report.blank_total)
        if report.after_blank is not None:
            first, last = report.after_blank
            legacy = bool(self.store.eras_where("stale_blank_fill"))
            stale = (f"; {report.stale_after_blank} of them still parse as records at their own offsets "
                     f"(from {report.base + report.stale_after_blank_at})" if report.stale_after_blank else "")
            yield info(
                "stale-after-blank",
                f"{last - report.blank - clfmt.END_FILE_MIN_BLANK_LENGTH} bytes after the end-of-file blank at {blank_offset} are not zero{stale}: "
                "the broker jumps to the next segment at a blank and never reads them"
                + ("; brokers before 4.9.1 fill the blank with leftovers of earlier messages" if legacy else ""),
                file=file, offset=report.base + first,
                details={"blank_offset": blank_offset, "stale_bytes_end": report.base + last, "stale_records": report.stale_after_blank})

    # ---- after the logical end ----

    def _is_stale(self, run: Run, last_ts: int | None) -> bool:
        return last_ts is not None and run.first_ts is not None and run.first_ts < last_ts

    def _crc_first(self, offset: int) -> str:
        """Why the broker's recovery stops at ``offset``, a record whose length does not match: its body CRC where that
        fails (``checkMessageAndReturnSize`` checks the body as it reads it, before it compares the lengths, §1.14)."""
        scan = fs.FastScan(self.commitlog, offset, check_crc=True, stop_on_crc=True, batch=1)
        next(iter(scan), None)
        return scan.end.reason

    def _describe_end(self, offset: int, code: int) -> tuple[str, str]:
        """(what was found at ``offset``, the broker log line for it)."""
        if code == fs.END_ZEROS:
            return "zeros where a record should start", "recover physics file end"
        if code == fs.END_SEGMENT:
            return "the segment end with no end-of-file blank record", "recover physics file end"
        try:
            self.commitlog.read_record(offset)
            reason = fs.CODE_REASONS.get(code, "invalid record")
        except FormatError as exc:
            reason = exc.reason
        except LookupError:
            reason = "nothing"
        if code == fs.END_LENGTH_MISMATCH and self.store.config.check_crc_on_recover and self._crc_first(offset) == fs.StopReason.CRC:
            return f"a body CRC mismatch, and {reason}", "CRC check failed"
        if code == fs.END_LENGTH_MISMATCH:
            return reason, f"[BUG]read total count not equals msg total size ... found a half message at {offset}, it will be truncated."
        if "illegal magic" in reason:
            return reason, "found a illegal magic code"
        return reason, "recover physics file end"

    def _after_end(self, after: list[tuple[SegmentReport, Run | Gap]]) -> list[Finding]:
        result = self.result
        end = result.logical_end
        if end is None or result.end_reason == "limit":
            return []
        findings: list[Finding] = []
        last_ts = result.last_timestamp
        cursor = (end, self._end_code)  # where the last valid data stopped, and why
        damaged: list[tuple[tuple[int, int], SegmentReport, Run]] = []  # (cursor, report, first live run after it)
        live_records: list[int] = []  # records of each live stretch, parallel to ``damaged``
        stale: list[tuple[SegmentReport, Run]] = []
        tail: list[tuple[SegmentReport, Gap]] = []
        last_kind = None
        for report, item in after:
            if isinstance(item, Gap):
                tail.append((report, item))
                continue
            if not item.records:
                continue
            if self._is_stale(item, last_ts):
                stale.append((report, item))
                tail.clear()
                last_kind = "stale"
                continue
            continues = last_kind == "live" and cursor[1] == fs.OK_BLANK and item.start == 0 and not tail
            if continues:
                live_records[-1] += item.records
            else:
                damaged.append((cursor, report, item))
                live_records.append(item.records)
            tail.clear()
            last_kind = "live"
            last_ts = item.last_ts
            cursor = (report.base + item.end, item.code)
            if not (self.keep_going or self._unread(damaged[-1][0][0])):
                self.result.stopped_early = True
                break
            findings.extend(self._record_findings(report, item))
            if item.code == fs.OK_BLANK:
                findings.extend(self._blank_findings(report))
        for i, ((start, code), report, run) in enumerate(damaged):
            resume = report.base + run.start
            found, line = self._describe_end(start, code)
            after_count = sum(live_records[i:]) if not self.result.stopped_early else None  # every run after it walked
            counted = f"{after_count} valid records lie after it" if after_count is not None else "run with --keep-going to count the valid records after it"
            unread = self._unread(start)
            if unread and self._resume is None:
                self._resume = resume
            effect = (f"the broker's recovery starts scanning at {self._broker_start} and never reads it, so the broker keeps the log and "
                      "serves the records around it; a consumer reading this range gets no message" if unread else
                      f"the broker's recovery logs \"{line}\" and truncates the log at {start}, discarding everything after it")
            findings.append(error(
                "damaged-range", f"no valid record at {start} ({found}) but valid records resume at {resume}: {effect}; {counted}",
                file=relative(self.store, self._path_of(start)), offset=start, expected="a valid record or the end of data", found=found,
                details={"range_end": resume, "range_bytes": resume - start, "valid_records_after": after_count,
                         "read_by_broker_recovery": not unread}))
        if stale:
            report, first = stale[0]
            count = sum(run.records for _, run in stale)
            findings.append(info(
                "stale-records",
                f"{count} valid-looking records from {report.base + first.start}, stored before the log's last message, lie after "
                f"the logical end {end}: leftovers of a log the broker cut back and rewrote (reference §8.9); the broker never "
                "reads them, a scan that ignores the logical end would", file=relative(self.store, report.path),
                offset=report.base + first.start, details={"logical_end": end, "stale_records": count}))
        if tail and last_kind != "stale" and (self.keep_going or all(self._unread(start) for (start, _), _, _ in damaged)):
            findings.extend(self._trailing(tail, cursor))
        return findings

    def _end_unread(self) -> bool:
        """Whether the broker never reads the damage the chain ends at (it lies before the recovery's start) and so
        serves the records after it, whose own findings stand as any served record's: the check goes on past it."""
        result = self.result
        return self.unread_before is not None and fs.ScanEnd(result.logical_end, result.end_reason).unread_by_broker(self.unread_before())

    def _unread(self, offset: int) -> bool:
        """Damage at ``offset`` lies before the broker's recovery start: the broker reads past it."""
        return self._broker_start is not None and offset < self._broker_start

    def _path_of(self, offset: int):
        index = self.commitlog.segment_index(offset)
        if index is None:
            index = max(0, min(len(self.commitlog.segments) - 1, self.commitlog.segment_index(offset - 1) or 0))
        return self.commitlog.segments[index].path

    def _trailing(self, gaps: list[tuple[SegmentReport, Gap]], cursor: tuple[int, int]) -> list[Finding]:
        """Non-zero bytes after the last valid data that hold no record: a torn last write where
        they start right at the end of the data, leftovers elsewhere."""
        start, code = cursor
        findings = []
        for report, gap in gaps:
            gap_start, gap_end = report.base + gap.start, report.base + gap.end
            if gap_start == start:
                found, line = self._describe_end(start, code)
                make = warning if self.crashed else error
                why = " (the broker was probably killed while writing it)" if self.crashed else " (an acknowledged message may be lost)"
                findings.append(make("half-message",
                                     f"the last record at {start} is cut short ({found}) and nothing valid follows{why}: the broker logs "
                                     f"\"{line}\" and truncates the log at {start}", file=relative(self.store, report.path), offset=start,
                                     expected="a complete record or zeros", found=found,
                                     details={"range_end": gap_end, "range_bytes": gap_end - start}))
            else:
                findings.append(warning(
                    "data-after-end",
                    f"bytes [{report.base + gap.first_nonzero}, {gap_end}) after the end of the valid data hold no valid record: "
                    "the broker never reads them (it deletes segments after the logical end on recovery)",
                    file=relative(self.store, report.path), offset=report.base + gap.first_nonzero, details={"range_end": gap_end}))
        return findings


def _interleave(report: SegmentReport, first: list, second: list) -> list[tuple[SegmentReport, Run | Gap]]:
    """``first[0], second[0], first[1], ...`` (the longer list's rest last), each with ``report``."""
    return [(report, item) for pair in zip_longest(first, second) for item in pair if item is not None]
