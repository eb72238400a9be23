"""Per-segment commit log analysis on the compiled walk (``analyze_segment``: runs, gaps, blank; §2.1, §2.6, §2.10)."""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field

import numpy as np

from ..formats import commitlog as clfmt
from ..formats.hashing import CRC31_MASK, body_crc
from ..formats.properties import PROP_CRC_KEY, PROP_CRC_LEN
from . import fastscan as fs
from .commitlog import STORE_TS_POSITION
from .mappedfile import MappedFile, open_read_only
from ._segments import row_flags

WINDOW = 32 << 20  # bytes walked between page releases and progress reports
SHOWN_STEP = 2 << 20  # bytes walked per call when a reader is shown the rows: they are still in cache (L2)
SHOWN_RELEASE = 4 << 20  # and bytes released at a time behind what the reader still holds
BATCH_ROWS = 16384
MAX_LISTED = 10_000  # per run and kind: beyond this, findings are counted, not listed

_I64 = struct.Struct(">q")


@dataclass
class Run:
    """Valid records chained from ``start`` to ``end`` (segment positions)."""

    start: int
    end: int = 0
    records: int = 0
    code: int = fs.END_LIMIT  # why the chain stopped at ``end`` (fastscan END_* / OK_BLANK)
    detail: int = 0  # TOTALSIZE of the record at ``end`` for a length mismatch
    first_ts: int | None = None
    last_ts: int | None = None
    crc: list[tuple[int, int, int, int]] = field(default_factory=list)  # (pos, size, stored, computed)
    phys: list[tuple[int, int]] = field(default_factory=list)  # (pos, PHYSICALOFFSET found)
    prop_crc: list[tuple[int, int, object]] = field(default_factory=list)  # (pos, expected, found)
    unlisted: int = 0  # findings beyond MAX_LISTED


@dataclass
class Gap:
    """Bytes ``[start, end)`` holding no valid record; ``resumed``: a record starts at ``end``, else the data ended."""

    start: int
    end: int
    first_nonzero: int
    resumed: bool


@dataclass
class SegmentReport:
    index: int
    path: str
    base: int
    size: int
    start: int
    stop: int
    runs: list[Run] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    blank: int | None = None  # position of the end-of-file blank record
    blank_total: int | None = None
    after_blank: tuple[int, int] | None = None  # (first, last + 1) non-zero byte after the blank
    stale_after_blank: int = 0  # valid records with their own offsets found after the blank
    stale_after_blank_at: int | None = None
    resumed_at: int | None = None  # with ``SegmentTask.resync``: the first record start found

    @property
    def bytes(self) -> int:
        return max(self.stop - self.start, 0)

    @property
    def has_data(self) -> bool:
        return any(r.records for r in self.runs) or bool(self.gaps)

    @property
    def chain(self) -> Run:
        """The run the broker reads (from ``start``)."""
        return self.runs[0]


@dataclass(frozen=True)
class SegmentTask:
    index: int
    path: str
    base: int
    start: int
    stop: int | None  # exclusive segment position; None = the segment end
    resync: bool = False  # ``start`` may be inside a record: begin at the next record start


def store_timestamp_at(array: np.ndarray, pos: int) -> int:
    """STORETIMESTAMP of the record at ``pos`` (its position depends on the born-host width)."""
    born_v6 = bool(array[pos + fs.POS_SYS_FLAG + 3] & fs.BORN_V6)
    return _I64.unpack_from(array, pos + STORE_TS_POSITION[born_v6])[0]


def check_rows(array: np.ndarray, rows: np.ndarray, base: int, run: Run) -> None:
    """Checks of one batch of valid records (``row_flags``); details only for the failures."""
    positions = rows[:, fs.COL_POS]
    if run.first_ts is None:
        run.first_ts = store_timestamp_at(array, int(positions[0]))
    run.last_ts = store_timestamp_at(array, int(positions[-1]))
    flags = np.empty(rows.shape[0], dtype=np.int8)
    if not row_flags(array, rows, base, flags):
        return
    for i in np.flatnonzero(flags & 1):
        if len(run.crc) >= MAX_LISTED:
            run.unlisted += 1
            continue
        pos, size, body, body_len = (int(v) for v in rows[i, [fs.COL_POS, fs.COL_SIZE, fs.COL_BODY, fs.COL_BODY_LEN]])
        stored = int.from_bytes(array[pos + fs.POS_BODY_CRC : pos + fs.POS_BODY_CRC + 4].tobytes(), "big", signed=True)
        run.crc.append((pos, size, stored, body_crc(array[body : body + body_len])))
    for i in np.flatnonzero(flags & 2):
        if len(run.phys) >= MAX_LISTED:
            run.unlisted += 1
            continue
        pos = int(positions[i])
        run.phys.append((pos, _I64.unpack_from(array, pos + fs.POS_PHYS_OFFSET)[0]))
    for i in np.flatnonzero(flags & 4):
        pos, size = int(positions[i]), int(rows[i, fs.COL_SIZE])
        expected, found = property_crc(array[pos : pos + size])
        if expected != found:
            if len(run.prop_crc) >= MAX_LISTED:
                run.unlisted += 1
                continue
            run.prop_crc.append((pos, expected, found))


def property_crc(record) -> tuple[int, object]:
    """(expected, stored) ``__CRC32#`` of a record ending with one (``MessageDecoder.createCrc32``, reference §2.10)."""
    raw = bytes(record[-PROP_CRC_LEN:])
    expected = body_crc(record[: len(record) - PROP_CRC_LEN]) & CRC31_MASK
    digits = raw[len(PROP_CRC_KEY) : -1]
    if raw[-1:] != b"\x02" or not digits.isdigit():
        return expected, raw[len(PROP_CRC_KEY) :].decode("latin-1")
    return expected, sum(int(chr(d)) * 10**i for i, d in enumerate(digits))


def walk_run(array: np.ndarray, buf, pos: int, stop: int, base: int, out: np.ndarray, progress=None, on_rows=None, held=None, run: Run | None = None) -> Run:
    """Walk valid records from ``pos`` releasing pages behind ``held()``; ``on_rows`` sees the rows; ``run`` continued."""
    run = Run(pos) if run is None else run
    released = reported = pos
    ahead = fs.PagesAhead(buf, array, pos, stop)
    step = SHOWN_STEP if on_rows is not None or ahead.thread is not None else WINDOW  # a step well inside what is mapped ahead
    release_step = WINDOW if on_rows is None else SHOWN_RELEASE  # a reader's held pages are kept: release nearer behind
    try:
        while True:
            count, npos, code, detail = fs.walk_segment(array, pos, min(stop, pos + step), True, False, out)
            if count:
                run.records += count
                check_rows(array, out[:count], base, run)
                if on_rows is not None:
                    on_rows(array, out[:count])
            pos = npos
            ahead.at(pos)
            if code == fs.END_CAPACITY or (code == fs.END_LIMIT and pos < stop):
                keep = held() if held is not None else None
                upto = pos if keep is None else min(pos, keep)
                if upto - released >= release_step:
                    fs.release_pages(buf, released, upto)
                    released = upto
                if pos - reported >= WINDOW:
                    if progress is not None:
                        progress(pos - reported)
                    reported = pos
                continue
            if progress is not None:
                progress(pos - reported)
            run.end, run.code, run.detail = pos, code, int(detail)
            return run
    finally:
        ahead.close()


class ChainReader:
    """What ``analyze_segment`` shows of the chain run to a reader of the same walk (``sharedwalk.py``)."""

    def rows(self, array: np.ndarray, rows: np.ndarray) -> None:
        """Rows of ``walk_segment`` (with CRC results), in order."""

    def end(self, array: np.ndarray, run: Run) -> None:
        """The chain run ended (``run.end``, ``run.code``)."""

    def held(self) -> int | None:
        """The first segment position the reader may still read (its pages are kept), or None."""
        return None

    def let_go(self) -> None:
        """The segment is unmapped next; a reference to ``array`` kept after ``end`` keeps the map (``MappedFile.close``)."""


def analyze_segment(task: SegmentTask, progress=None, chain: ChainReader | None = None, walked: Run | None = None) -> SegmentReport:
    """Walk one segment into its runs, gaps and blank; ``walked``: its chain's first records, checked by another reader."""
    ticked = 0

    def tick(n: int) -> None:
        nonlocal ticked
        ticked += n
        progress(n)

    with MappedFile(task.path, task.base, sequential=True) as mf:
        array = fs.as_array(mf.buf)
        stop = mf.size if task.stop is None else min(task.stop, mf.size)
        report = SegmentReport(task.index, task.path, task.base, mf.size, task.start, stop)
        out = np.empty((BATCH_ROWS, fs.N_COLS), dtype=np.int64)
        fd = open_read_only(task.path)
        shown = chain
        try:
            pos = task.start
            if task.resync:
                found = fs.find_record_start(array, pos, stop, task.base, fs.RESYNC_CHAIN)
                pos = report.resumed_at = found if found >= 0 else stop
            if walked is not None and (task.start != 0 or task.resync or walked.start != 0 or walked.end > stop or chain is not None):
                walked = None  # not this walk's prefix: walk it all
            pos = pos if walked is None else walked.end
            while True:
                run = walk_run(array, mf.buf, pos, stop, task.base, out, tick if progress is not None else None,
                               on_rows=chain.rows if chain is not None else None,
                               held=chain.held if chain is not None else None, run=walked)
                walked = None
                report.runs.append(run)
                if chain is not None:
                    chain.end(array, run)
                    chain = None
                if run.code == fs.OK_BLANK:
                    _after_blank(report, array, run.end, fd, out)
                    break
                if run.code in (fs.END_LIMIT, fs.END_SEGMENT):
                    break
                if run.code == fs.END_ZEROS:
                    nonzero = fs.first_nonzero(array, run.end, stop, fd)
                    if nonzero < 0:
                        break  # zeros to the end: the end of written data
                    search_from = max(run.end + 1, nonzero - 4)  # a record's first bytes may be zero
                else:
                    nonzero, search_from = run.end, run.end + 1
                resume = fs.find_record_start(array, search_from, stop, task.base, fs.RESYNC_CHAIN)
                end = resume if resume >= 0 else fs.last_nonzero(array, nonzero, stop, fd) + 1
                report.gaps.append(Gap(run.end, end, nonzero, resume >= 0))
                if resume < 0:
                    break
                pos = resume
        finally:
            if shown is not None:
                shown.let_go()
            os.close(fd)
            fs.release_pages(mf.buf, 0, mf.size)
            del array
    if progress is not None and report.bytes > ticked:
        progress(report.bytes - ticked)
    return report


def _after_blank(report: SegmentReport, array: np.ndarray, pos: int, fd: int, out) -> None:
    report.blank = pos
    report.blank_total = int(np.int32(int.from_bytes(array[pos : pos + 4].tobytes(), "big", signed=True)))
    first = fs.first_nonzero(array, pos + clfmt.END_FILE_MIN_BLANK_LENGTH, report.size, fd)
    if first < 0:
        return
    report.after_blank = (first, fs.last_nonzero(array, first, report.size, fd) + 1)
    start = fs.find_record_start(array, max(pos + clfmt.END_FILE_MIN_BLANK_LENGTH, first - 4), report.size, report.base, fs.RESYNC_CHAIN)
    while start >= 0:
        count, npos, code, _ = fs.walk_segment(array, start, report.size, False, False, out)
        if report.stale_after_blank_at is None:
            report.stale_after_blank_at = start
        report.stale_after_blank += count
        if code == fs.END_CAPACITY:
            start = npos
        elif code in (fs.OK_BLANK, fs.END_SEGMENT, fs.END_LIMIT) or npos + 1 >= report.size:
            break
        else:
            start = fs.find_record_start(array, npos + 1, report.size, report.base, fs.RESYNC_CHAIN)
