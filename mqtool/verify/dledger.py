"""Commit log verification of a DLedger store (reference §15): entries, the records inside, the
entry index and DLedger's checkpoint. Takes ``CommitLogCheck``'s place (same ``result``).

Every entry is walked compiled (``store.dledgerwalk``) with every check of the record decoder and
the entry's own (magic, size = body + 48, pos, index, term; PHYSICALOFFSET = pos + 48). Where an
entry header fails, ``DLedgerMmapFileStore.recover`` truncates data and index; a damaged record in
an entry it keeps is lost data and the walk goes on after it (``resume_after_damage``).
``index/`` and ``checkpoint`` are held against the last entry it keeps (``data_recovery``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

import numpy as np

from ..formats import commitlog as clfmt
from ..formats import dledger as dfmt
from ..store import Store
from ..store.commitlog import ScanEnd, Segment, StopReason
from ..store import fastscan as fs
from ..store.consumequeue import numpy_dtype
from ..store.dledger import DLedgerCommitLog, DLedgerLayout, entry_problem
from ..store.dledgerwalk import ST_INDEX, ST_TERM
from ..store.dledgerstart import DataRecovery, data_recovery, record_in_broken_entry
from ..store.mappedfile import MMAP_FILE_LIST, MappedFile
from .commitlog import CommitLogResult, Progress, left_out_findings, relative, stray_finding
from .findings import Finding, error, info, warning
from ..store.segments import store_timestamp_at

if TYPE_CHECKING:
    from .sharedwalk import SharedWalk

HEADER = dfmt.ENTRY_HEADER_SIZE
_L = dfmt.ENTRY_HEADER_LAYOUT
UNIT_DTYPE = numpy_dtype(dfmt.INDEX_UNIT_LAYOUT)


class IndexUnits:
    """The ``index/`` files as one big-endian structured array per file (mapped, no copy)."""

    def __init__(self, commitlog: DLedgerCommitLog):
        self.maps = [MappedFile(path, base) for base, path in commitlog.layout.index_files()]
        self.arrays = [(mf.base_offset // dfmt.INDEX_UNIT_SIZE, np.frombuffer(mf.buf, dtype=UNIT_DTYPE, count=mf.size // dfmt.INDEX_UNIT_SIZE) if mf.size else np.empty(0, UNIT_DTYPE)) for mf in self.maps]

    def lookup(self, numbers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(units, found) for entry indexes ``numbers``."""
        units = np.zeros(numbers.shape[0], dtype=UNIT_DTYPE)
        found = np.zeros(numbers.shape[0], dtype=bool)
        for first, array in self.arrays:
            sel = (numbers >= first) & (numbers < first + array.shape[0])
            if sel.any():
                units[sel] = array[numbers[sel] - first]
                found |= sel
        return units, found

    def close(self) -> None:
        self.arrays = []
        for mf in self.maps:
            mf.close()


@dataclass(frozen=True)
class DataFileTask:
    """One file of a DLedger commit log to walk (``analyze_data_file``), picklable for a Spark task
    (``spark/job.py``): the file and the next one (where the walk goes on after the file's blank),
    and where DLedger's recovery starts and stops (``walk_resume``: which damage the broker keeps)."""

    index: int  # of the file in the commit log's list
    file: str  # as findings name it
    start: int
    stop: int | None
    segments: tuple[Segment, ...]  # the file and the next one
    file_size: int
    divided_offset: int
    layout: DLedgerLayout | None
    recovery: DataRecovery
    recovery_start: int  # offset of the data file DLedger's recovery starts at

    def commitlog(self) -> DLedgerCommitLog:
        cl = DLedgerCommitLog(self.layout, list(self.segments), self.file_size, self.divided_offset)
        cl.recovery_walk = self.recovery
        return cl


@dataclass
class DataFileReport:
    """What the walk of one file found (``analyze_data_file``), for ``DLedgerLogCheck.run`` to stitch."""

    findings: list[Finding] = field(default_factory=list)
    records: int = 0
    last_timestamp: int | None = None
    first_mismatch: tuple[int, int] | None = None  # (entry index, offset) of the first entry its index unit disagrees with
    missing_units: int = 0
    end: ScanEnd | None = None  # where the walk of the file ended
    goes_on: bool = False  # the walk of the log goes on in the next file
    state: tuple[int, int] | None = None  # then the entry index and term it carries there (None: a fresh walk, past damage)
    inherited: bool = False  # no entry walked since the file's start: the walk carries on the index and term it came with


def analyze_data_file(task: DataFileTask, commitlog: DLedgerCommitLog | None = None, state: tuple[int, int] | None = None,
                      reached: Callable[[int], None] | None = None, chain: "SharedWalk | None" = None) -> DataFileReport:
    """Walk one file of a DLedger commit log as ``DLedgerLogCheck`` walks the log: every entry and the
    record inside (``store.dledgerwalk``), the record checks, the entries against ``index/``, past the
    damage DLedger's recovery keeps (``resume_after_damage``) within the file. ``state``: the entry index
    and term the walk comes with from the file before (``EntryWalker.state``); None: a fresh walk, which
    differs only where the file's first entry does not follow them (``DLedgerLogCheck.run`` walks it again).
    ``reached(offset)``: where the walk is, after each batch. ``chain``: shown the batches and how each walk of the file ends
    (``sharedwalk.SharedWalk.entry_rows``, ``entry_end``), the cross-checks' walk of the records."""
    cl = task.commitlog() if commitlog is None else commitlog
    seg = cl.segments[cl.segment_index(task.start)]
    stop = seg.end_offset if task.stop is None else min(task.stop, seg.end_offset)
    report = DataFileReport()
    units = IndexUnits(cl)
    walker, start = None, task.start
    if state is not None:
        walker = cl.entry_walker()
        walker.state[ST_INDEX], walker.state[ST_TERM] = state
    try:
        while True:
            scan = fs.FastScan(cl, start, stop, check_crc=True, stop_on_crc=False, release_behind=True, walker=walker)
            for batch in scan:
                report.findings.extend(_record_findings(batch, units, report, task.file, cl.divided_offset))
                if chain is not None:
                    chain.entry_rows(batch)
                if reached:
                    reached(batch.base_offset + int(batch.rows[-1, fs.COL_POS] + batch.rows[-1, fs.COL_SIZE]))
            end, short = scan.end, task.stop is None or scan.end.offset < task.stop  # not at the check's own stop
            if end.reason == StopReason.LIMIT and end.offset == seg.end_offset and not scan.blanks and short:
                end = ScanEnd(end.offset, StopReason.SEGMENT_END)  # an entry ending at the file end, as the walk of the whole log ends
            report.end = end
            if end.reason == StopReason.LIMIT and scan.blanks and short:
                report.goes_on, report.state = True, (int(scan.walker.state[ST_INDEX]), int(scan.walker.state[ST_TERM]))
                report.inherited = start == task.start and report.state[0] < 0
                if chain is not None:
                    chain.entry_end(scan.end, "blank")
                return report
            resume = cl.resume_after_damage(end)  # damage DLedger's recovery keeps: the walk goes on after it
            if chain is not None:
                chain.entry_end(scan.end, None if resume is None else "damage")
            if resume is None:
                return report
            classic = seg.base_offset < cl.divided_offset
            intact = None if classic else record_in_broken_entry(cl, end, resume)
            report.records += intact is not None
            report.findings.append(_kept_damage(task.file, end, resume, task.recovery, task.recovery_start, classic, intact))
            next_file = cl.segment_index(resume)
            if resume >= seg.end_offset and next_file is not None and (task.stop is None or resume < task.stop):
                report.goes_on = True  # in the next file, a fresh walk
                return report
            start, walker = resume, None
    finally:
        units.close()


def _record_findings(batch: fs.SegmentBatch, units: IndexUnits, report: DataFileReport, file: str,
                     divided_offset: int) -> Iterator[Finding]:
    """The record checks of one batch (PHYSICALOFFSET, body CRC) and its entries held against ``index/``."""
    rows, array, base = batch.rows, batch.array, batch.base_offset
    report.records += rows.shape[0]
    pos = rows[:, fs.COL_POS]
    phys = fs.gather_be(array, pos, fs.POS_PHYS_OFFSET, 8, True)
    classic = base < divided_offset  # the classic records before the DLedger data (a mixed log): no recovery reads them
    where = "its own position" if classic else "its entry's pos + 48"
    for i in np.flatnonzero(phys != base + pos):
        yield error("phys-offset-mismatch", f"a record's PHYSICALOFFSET is not {where}: consume queues and message ids point elsewhere",
                    file=file, offset=base + int(pos[i]), expected=base + int(pos[i]), found=int(phys[i]))
    where = ("in the classic commit log before the DLedger data (no recovery reads it once DLedger data exist"  # ``_kept_damage``
             if classic else "inside a DLedger entry (the broker's recovery does not check it")
    for i in np.flatnonzero(rows[:, fs.COL_CRC_OK] == 0):
        yield error("crc-mismatch", f"message body CRC differs from BODYCRC {where}; consumers get corrupt bytes)",
                    file=file, offset=base + int(pos[i]), details={"size": int(rows[i, fs.COL_SIZE])})
    report.last_timestamp = store_timestamp_at(array, int(pos[-1]))
    if classic:
        return  # in no entry, named by no index unit
    entry = pos - HEADER
    numbers = fs.gather_be(array, entry, _L.offset_of("index"), 8, True)
    unit, found = units.lookup(numbers)
    report.missing_units += int((~found).sum())
    same = found & (unit["magic"] == dfmt.ENTRY_MAGIC) & (unit["pos"] == base + entry) & (unit["index"] == numbers)
    same &= unit["size"] == fs.gather_be(array, entry, _L.offset_of("size"), 4, True)
    same &= unit["term"] == fs.gather_be(array, entry, _L.offset_of("term"), 8, True)
    if report.first_mismatch is None and not same.all():
        k = int(np.flatnonzero(~same)[0])
        report.first_mismatch = (int(numbers[k]), base + int(entry[k]))


def _kept_damage(file: str, end: ScanEnd, resume: int, dl: DataRecovery, first: int, classic: bool, intact: int | None = None) -> Finding:
    """Damage the record walk stops at but ``DLedgerMmapFileStore.recover`` walks past (it checks
    entry headers only, and from its start file, at ``first``, on: §15.4): the broker keeps the entry and
    the data after it; the message in it is lost, unless the entry's header alone is broken and its record
    whole (at ``intact``, ``record_in_broken_entry``): consumers get it. In the ``classic`` commit log of a mixed store, which no
    recovery reads once DLedger data exist (``dledgerstart.walk_resume``), a ``damaged-range`` as in a classic
    log before its recovery's start (``verify.commitlog``)."""
    if classic:
        return error(
            "damaged-range",
            f"no valid record at {end.offset} ({end.detail}) but valid records resume at {resume}: a DLedger broker never "
            f"recovers the classic commit log before its DLedger data (DLedgerCommitLog: DLedger's recovery alone, from {first}), "
            "so the broker keeps the log and serves the records around it; a consumer reading this range gets no message",
            file=file, offset=end.offset, expected="a valid record or the end of data", found=end.detail,
            details={"range_end": resume, "range_bytes": resume - end.offset, "read_by_broker_recovery": False})
    why = (f"DLedger's recovery starts at {first} and never reads it" if end.offset < first
           else "DLedger's recovery (DLedgerMmapFileStore.recover) checks only the entry header, which is sound")
    if intact is not None:
        return error(
            "dledger-entry",
            f"{end.detail}: {why}, so the broker keeps the entry and the data to {dl.end.offset}; the message record inside, at {intact}, "
            "is whole and a consumer reading it by its consume queue entry gets it, but DLedger's own read of this entry "
            "(DLedgerMmapFileStore.get, as when a follower catches up) meets the broken header",
            file=file, offset=end.offset,
            details={"reason": end.reason, "range_end": resume, "record": intact, "read_by_broker_recovery": False})
    return error(
        "dledger-record",
        f"{end.detail}: {why}, so the broker keeps the entry and the data to {dl.end.offset}; the message in [{end.offset}, {resume}) is lost "
        "(no dispatch reads it, a consumer reading it gets no message)",
        file=file, offset=end.offset, details={"reason": end.reason, "range_end": resume})


class DLedgerLogCheck:
    """``CommitLogCheck`` for a DLedger commit log; ``result`` is filled as ``run`` goes."""

    analyze = staticmethod(analyze_data_file)  # what walks each of ``tasks()`` (``run``'s ``reports``)

    def __init__(self, store: Store, *, start: int | None = None, stop: int | None = None, jobs: int = 1, keep_going: bool = False, progress: Progress | None = None,
                 chain: "SharedWalk | None" = None):
        self.store = store
        self.chain = chain  # shown the walk of the files (``analyze_data_file``) where they are walked here
        self.commitlog: DLedgerCommitLog = store.commitlog
        self.start = self.commitlog.min_offset if start is None else start
        self.stop, self.keep_going, self.progress = stop, keep_going, progress
        self.shown = self.start  # where the last progress report reached
        self.result = CommitLogResult()
        self.notes: list[str] = []

    @property
    def total_bytes(self) -> int:
        end = self.stop if self.stop is not None else self.commitlog.end_of_files
        return max(end - self.start, 0)

    def tasks(self) -> list[DataFileTask]:
        """One per file from the one holding ``start`` (none when no file does: the walk ends there)."""
        cl, tasks = self.commitlog, []
        first = cl.segment_index(self.start)
        if first is None:
            return tasks
        dl = data_recovery(cl)
        recovery_start = cl.segments[dl.start_file].base_offset if dl.start_file < len(cl.segments) else cl.divided_offset
        for i, seg in enumerate(cl.segments[first:], first):
            if self.stop is not None and seg.base_offset >= self.stop:
                break
            tasks.append(DataFileTask(i, relative(self.store, seg.path), max(self.start, seg.base_offset), self.stop,
                                      tuple(cl.segments[i : i + 2]), cl.file_size, cl.divided_offset, cl.layout, dl, recovery_start))
        return tasks

    def run(self, reports: Iterable[DataFileReport] | None = None) -> Iterator[Finding]:
        """Findings of the commit log. ``reports`` (one per ``tasks()``, in order) may come from
        elsewhere, e.g. Spark tasks running ``analyze_data_file``; by default the files are walked here."""
        cl, result = self.commitlog, self.result
        yield from left_out_findings(self.store)  # a mixed store's commitlog/: DLedgerCommitLog.load is CommitLog.load
        for entry, file_size, later in self.store.dledger_strays:  # MmapFileList.load lists every entry (mappedfile.load_effect)
            folder = entry.path.parent.name
            yield stray_finding(self.store, "dledger-stray-entry", entry, file_size, later, f"DLedger {folder} file",
                                f"{entry.path.parent.parent.name}/{folder}/", loader=MMAP_FILE_LIST)
        if self.start > cl.min_offset and cl.entry_start(self.start) != self.start:
            self.notes.append(f"--from-offset {self.start} is not an entry start: checked from the entry it belongs to")
        dl = data_recovery(cl)
        tasks = self.tasks()
        given = iter(reports) if reports is not None else None
        end = fs.ScanEnd(self.start, StopReason.NO_SEGMENTS, "no segment holds this offset")
        first_mismatch, missing, state = None, 0, None
        for task in tasks:
            # the walk that carries the state stops at the file's first entry, where a fresh walk's does not: walked with it
            carried = state if state is not None and self._breaks(task, state) else None
            if given is None:
                report = analyze_data_file(task, cl, carried, reached=self._reached if self.progress else None, chain=self.chain)
            else:
                report = next(given, None)
                if report is None:
                    break
                if carried is not None:
                    report = analyze_data_file(task, cl, carried)
            yield from report.findings
            result.records += report.records
            result.last_timestamp = report.last_timestamp if report.last_timestamp is not None else result.last_timestamp
            first_mismatch = first_mismatch or report.first_mismatch
            missing += report.missing_units
            end = report.end
            if not report.goes_on:
                break
            state = None if report.state is None else state if report.inherited else report.state
        units = IndexUnits(cl)
        try:
            result.logical_end, result.end_reason = end.offset, end.reason
            result.bytes = max(end.offset - self.start, 0)
            result.segments = sum(1 for s in cl.segments if s.end_offset > self.start and (self.stop is None or s.base_offset < self.stop))
            yield from self._end(end)
            yield from self._index(units, first_mismatch, missing, dl)
            yield from self._checkpoint(dl)
        finally:
            units.close()

    def _reached(self, offset: int) -> None:
        self.progress(offset - self.shown)  # the bytes walked since the last report, as the walk of a plain log reports
        self.shown = offset

    def _breaks(self, task: DataFileTask, state: tuple[int, int]) -> bool:
        """Whether the file's first entry passes DLedger's entry checks but does not follow the entry
        index and term the walk comes with (``entry_problem``): a walk from a fresh state passes it."""
        seg = self.commitlog.segments[task.index]
        if not self.commitlog.is_entry_file(seg) or state[0] < 0:
            return False
        h = dfmt.decode_entry_header(self.commitlog.mapped(task.index).buf, task.start - seg.base_offset, seg.base_offset)
        return entry_problem(h, None) is None and entry_problem(h, h._replace(index=state[0], term=state[1])) is not None

    def _end(self, end) -> Iterator[Finding]:
        cl = self.commitlog
        index = cl.segment_index(end.offset)
        if end.reason == "limit" or index is None:
            return
        seg = cl.segments[index]
        if end.is_clean:
            # a log ending at a blank: the one DLedger's first load writes in the classic log of a store without data files
            # (``dledgerstart.FirstLoadBlank``), or DLedger's own at the end of its last data file (``MmapFileList.preAppend``:
            # magic -1 and the bytes left, then zeros; 8 bytes too), is no data after the end
            skip = clfmt.BLANK_HEADER_SIZE if end.reason == StopReason.BLANK_LAST else 0
            with MappedFile(seg.path, seg.base_offset) as mf:
                array = fs.as_array(mf.buf)
                nz = fs.first_nonzero(array, min(end.offset - seg.base_offset + skip, mf.size), mf.size)
                del array
            if nz >= 0:
                yield warning("data-after-end", "non-zero bytes after the last entry: DLedger's recovery ignores them and the next append overwrites them",
                              file=relative(self.store, seg.path), offset=seg.base_offset + nz, details={"dledger_tail": True} if cl.is_entry_file(seg) else None)
            return
        self.result.stopped_early = True
        after = _entries_after(cl, end.offset)
        yield error(
            "dledger-entry",
            f"{end.detail}: DLedger's recovery (DLedgerMmapFileStore.recover) stops here and truncates the data and the index, "
            f"discarding {after} well-formed entr{'y' if after == 1 else 'ies'} after it" + (" (if this is more than one file before the last, the broker exits: \"check it manually\")" if index < len(cl.segments) - 2 else ""),
            file=relative(self.store, seg.path), offset=end.offset, details={"reason": end.reason, "entries_after": after, **({"dledger_tail": True} if cl.is_entry_file(seg) else {})})

    def _index(self, units: IndexUnits, first_mismatch, missing: int, dl: DataRecovery) -> Iterator[Finding]:
        """``index/`` against the entries: ``DLedgerMmapFileStore.recover`` rewrites it from the first unit its walk finds
        disagreeing (``dl.rewrite_from``), and leaves a unit of a data file before its start file as it is (§15.4)."""
        home, last_index = relative(self.store, self.commitlog.layout.index_dir), dl.last_index
        if first_mismatch is not None:
            number, offset = first_mismatch
            if dl.rewrite_from is not None and number >= dl.rewrite_from:
                fate = "the broker rewrites the index from there on its next start"
            else:
                start = self.commitlog.segments[dl.start_file].base_offset
                fate = f"its entry lies before the data file DLedger's recovery starts at ({start}), so the broker leaves the unit as it is"
                if dl.rewrite_from is not None:
                    fate += f" and rewrites the index from unit {dl.rewrite_from} on"
            yield warning("dledger-index", f"index unit {number} disagrees with its entry: {fate} ({missing} unit(s) missing)",
                          file=home, offset=offset, details={"index": number})
        written = self.commitlog.units_written_from(last_index + 1)
        if last_index >= 0 and written > last_index + 1:
            yield warning("dledger-index", f"{written - last_index - 1} index unit(s) past the last entry {last_index}: the broker's "
                          "recovery leaves them (it only moves the index's write position); `repair` zeroes them",
                          file=home, expected=last_index + 1, found=written)

    def _checkpoint(self, dl: DataRecovery) -> Iterator[Finding]:
        layout, last_index = self.commitlog.layout, dl.last_index
        path = relative(self.store, layout.home / "checkpoint")
        committed, end_index = layout.committed_index, layout.end_index
        if layout.checkpoint is None or last_index < 0:
            return
        if committed is not None and committed != -1 and dl.committed_index is None:  # below ledgerBeginIndex (``data_recovery``)
            begin = self.commitlog.ledger_begin_index
            yield info("dledger-checkpoint", f"DLedger's checkpoint committedIndex {committed} is below its first entry {begin}"
                       + (" (older data files deleted)" if begin > 0 else "") + ": updateCommittedIndex skips it, so right after "
                       "load nothing is committed and the commit log's max offset is its first data file's start", file=path, found=committed)
        elif committed is not None and committed > last_index:
            yield error("dledger-checkpoint", f"DLedger's checkpoint says entry {committed} was committed but the data ends at entry {last_index}: committed (acknowledged) entries are gone", file=path, expected=last_index, found=committed)
        elif committed is not None and committed < last_index:
            many = last_index > committed + 1
            what, them = (f"entries {committed + 1}..{last_index} are", "them") if many else (f"entry {last_index} is", "it")
            yield info(
                "dledger-checkpoint",
                f"{what} written but not committed in DLedger's checkpoint: right after load the commit log ends at entry {committed}; "
                f"see `mqtool recover --dry-run` for what the broker's recovery does with {them}",
                file=path, expected=last_index, found=committed)
        if end_index is not None and end_index > last_index:
            yield warning("dledger-checkpoint", f"DLedger's checkpoint endIndex {end_index} is past the last entry {last_index}", file=path, expected=last_index, found=end_index)


def _entries_after(cl: DLedgerCommitLog, offset: int) -> int:
    """Well-formed entries after damage: positions holding magic 1 and their own offset as pos."""
    count = 0
    for seg in cl.entry_segments():
        if seg.end_offset <= offset:
            continue
        with MappedFile(seg.path, seg.base_offset) as mf:
            array = fs.as_array(mf.buf)
            lo = max(offset - seg.base_offset + 1, 0)
            ones = np.flatnonzero(array[lo + 3 : mf.size - HEADER + 4] == 1) + lo  # last byte of magic = 1
            cand = ones[(array[ones] == 0) & (array[ones + 1] == 0) & (array[ones + 2] == 0)]
            if cand.size:
                pos = fs.gather_be(array, cand, _L.offset_of("pos"), 8, True)
                count += int((pos == seg.base_offset + cand).sum())
            del array
    return count
