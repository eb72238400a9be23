"""Byte-range splits of commit log segments for parallel scans, and the check that keeps them exact.

A split ``[start, end)`` of one segment owns the records whose first byte lies in it (a record
never crosses a segment, reference §2.6); one not at the segment's first byte resynchronises
(``find_split_start``). Stale records with correct self-offsets can sit after the logical end or
behind a blank (§2.6, §8.9), so ``check_handoffs`` accepts a split only where the chain of the
splits before it ends. DLedger data files (``Split.entries``, §15) are walked entry by entry."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Hashable, Iterable, Iterator, NamedTuple

import numpy as np

from ..errors import UsageError
from . import fastscan as fs
from ..formats.dledger import ENTRY_HEADER_SIZE
from .commitlog import ScanEnd, Segment, StopReason
from .dledger import commitlog_of
from .mappedfile import MappedFile

MIN_AUTO_SPLIT = 128 << 20
MAX_AUTO_SPLIT = 1 << 30
WINDOW = 32 << 20
"""Bytes walked per compiled call and per mapping: bounds a batch's size and the resident pages."""

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """``128m``, ``1g``, ``4096``: a byte count (binary multiples; ``MiB``/``MB`` accepted)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise UsageError(f"size {text!r}: expected bytes or a number with k, m, g or t")
        value = int(match.group(1)) << (10 * " kmgt".index(match.group(2).lower() or " "))
    if value <= 0:
        raise UsageError(f"size {text!r} must be positive")
    return value


def auto_split_size(total_bytes: int, parallelism: int) -> int:
    """``clamp(total / (3 × parallelism), 128 MiB, 1 GiB)``: enough splits to keep every core busy,
    never so small that the per-task cost dominates."""
    return max(MIN_AUTO_SPLIT, min(MAX_AUTO_SPLIT, total_bytes // max(1, 3 * parallelism)))


@dataclass(frozen=True)
class Split:
    """``[start, end)`` of the segment file ``path`` (positions inside the segment)."""

    path: str
    base_offset: int
    size: int
    start: int
    end: int
    entries: bool = False  # a DLedger data file (records inside 48-byte entries, §15)

    @property
    def offset(self) -> int:
        """Absolute commit log offset where the range starts (the split's tag on every row)."""
        return self.base_offset + self.start

    @property
    def segment(self) -> Segment:
        return Segment(self.path, self.base_offset, self.size, self.entries)

    def handoff_start(self, record_offset: int) -> int:
        """Where the record at ``record_offset`` starts for ``check_handoffs``: its DLedger entry's
        first byte (``ENTRY_HEADER_SIZE`` before it) in a data file, else the record's own offset."""
        return record_offset - (ENTRY_HEADER_SIZE if self.entries else 0)


def plan_splits(segments: Iterable[Segment], split_size: int | None = None) -> list[Split]:
    """One split per segment, or ``split_size`` ranges where a segment is larger."""
    splits = []
    for seg in segments:
        step = seg.size if not split_size or split_size >= seg.size else split_size
        for start in range(0, max(seg.size, 1), max(step, 1)):
            splits.append(Split(str(seg.path), seg.base_offset, seg.size, start, min(start + step, seg.size), seg.entries))
    return splits


def find_split_start(array: np.ndarray, start: int, stop: int, base: int, fd: int | None = None, *, entries: bool = False) -> int | None:
    """Where a split of ``[start, stop)`` resumes, or None: the first record describing itself with
    the ``RESYNC_CHAIN`` records after it doing the same, or an end-of-file blank whose size is the
    bytes left; with ``entries``, the first entry header describing itself (``fastscan.find_record_start``,
    the one resynchronisation). Holes of a sparse file are not read when ``fd`` is the file's."""
    if start == 0:
        return 0
    data = fs.first_nonzero(array, start, min(array.shape[0], stop + fs.POS_MAGIC), fd)
    if data < 0:
        return None  # zeros to the end of the range (e.g. a pre-allocated segment)
    p = max(start, data - fs.POS_MAGIC)  # a record's (an entry's) first bytes may be zero, its magic is not
    found = fs.find_record_start(array, p, stop, base, fs.RESYNC_CHAIN, entries=entries, lenient=True)
    return None if found < 0 else found


class SplitScan:
    """The compiled walk over one split: yields ``SegmentBatch`` es; afterwards ``first``, ``exit``,
    ``records`` and ``end`` describe what it read. ``WINDOW`` bytes are mapped at a time; CRCs are
    checked without stopping (``crc_ok``); it ends where a scan of the segment from the split's first
    record would, or at the first record starting at or after ``end``."""

    def __init__(self, split: Split, *, check_crc: bool = True, window: int = WINDOW, batch: int = 1 << 15):
        self.split = split
        self.check_crc = check_crc
        self.window = window
        self.batch = batch
        self.first: int | None = None  # absolute offset of the first record read
        self.exit: int | None = None  # absolute offset just after the last record read
        self.records = 0
        self.end: ScanEnd | None = None

    def __iter__(self) -> Iterator[fs.SegmentBatch]:
        split = self.split
        base = split.base_offset
        with MappedFile(split.path, base) as mf:
            if mf.size != split.size:
                raise OSError(f"{split.path}: {mf.size} bytes, planned as {split.size}")
            array = fs.as_array(mf.buf)
            fd = os.open(split.path, os.O_RDONLY)
            try:
                begin = find_split_start(array, split.start, split.end, base, fd, entries=split.entries)
            finally:
                os.close(fd)
                del array
        if begin is None:
            self.end = ScanEnd(base + split.end, StopReason.LIMIT, "no record starts in this split")
            return
        commitlog = commitlog_of([split.segment], split.size)
        pos, stop = base + begin, base + split.end
        while True:
            scan = fs.FastScan(commitlog, pos, min(stop, pos + self.window), check_crc=self.check_crc, stop_on_crc=False, batch=self.batch)
            for batch in scan:
                if self.first is None:
                    self.first = split.handoff_start(base + int(batch.rows[0, fs.COL_POS]))
                self.records += len(batch.rows)
                yield batch
            if scan.end.reason != StopReason.LIMIT or scan.end.offset >= stop:
                break
            pos = scan.end.offset  # the window ended, the split did not
        self.end = scan.end
        self.exit = scan.end.offset if self.records else None


class SplitResult(NamedTuple):
    """What one split read, for the handoff check. ``segment`` groups the splits of one segment
    (e.g. ``(broker, segment base offset)``); offsets are absolute."""

    segment: Hashable
    segment_base: int
    start: int
    first: int | None
    exit: int | None


class Rejected(NamedTuple):
    """A split whose rows must be dropped, with the reason (for the report)."""

    segment: Hashable
    start: int
    first: int
    expected: int
    reason: str


def check_handoffs(results: Iterable[SplitResult]) -> list[Rejected]:
    """The splits whose first record is not where the chain of the splits before it ends: per
    segment, in offset order, from the segment's first byte; empty splits neither break nor extend
    the chain."""
    by_segment: dict[Hashable, list[SplitResult]] = {}
    for r in results:
        by_segment.setdefault(r.segment, []).append(r)
    rejected = []
    for segment, splits in by_segment.items():
        splits.sort(key=lambda r: r.start)
        chain_end = splits[0].segment_base
        for r in splits:
            if r.first is None:
                continue
            if r.first == chain_end:
                chain_end = r.exit
                continue
            if r.first < chain_end:
                reason = f"its first record at {r.first} lies inside the record the previous split reads up to {chain_end}"
            else:
                reason = f"the segment's records end at {chain_end}; what follows at {r.first} is not part of the log (stale bytes)"
            rejected.append(Rejected(segment, r.start, r.first, chain_end, reason))
    return rejected
