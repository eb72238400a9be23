"""Byte-range splits of commit log segments for parallel scans (reference §2.6, §8.9), checked against ``mqtool dump``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Hashable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from ..errors import UsageError
from . import fastscan as fs
from ..formats.dledger import ENTRY_HEADER_SIZE
from .commitlog import ScanEnd, Segment, StopReason
from .dledger import commitlog_of
from .mappedfile import MappedFile

if TYPE_CHECKING:
    from .dledgerstart import ServedLog

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
    """``clamp(total / (3 × parallelism), 128 MiB, 1 GiB)``: every core busy, the per-task cost small."""
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
    resume_before: int | None = None  # damage or zeros before this offset are read past (``resume``)
    records_from: int = 0  # where the segment's records are read from: 0, or the record ``--from-offset`` names
    keep_going: bool = False  # read past every damaged range, as ``mqtool dump --keep-going`` (``resume``)
    served: "ServedLog | None" = None  # a DLedger store's log: read past the damage its broker keeps (``resume``)

    @property
    def chain_start(self) -> int:
        """Absolute offset where the chain of the segment's records read begins (``check_handoffs``)."""
        return self.base_offset + self.records_from

    @property
    def offset(self) -> int:
        """Absolute commit log offset where the range starts (the split's tag on every row)."""
        return self.base_offset + self.start

    @property
    def segment(self) -> Segment:
        return Segment(self.path, self.base_offset, self.size, self.entries)

    def resume(self, end: ScanEnd) -> int | None:
        """Where this segment's records go on after ``end``, or None: past damage or zeros before ``resume_before``, past damage
        with ``keep_going``, never past a blank; DLedger (``served``): ``dledgerstart.walk_resume``."""
        if end.reason in (StopReason.LIMIT, StopReason.NO_SEGMENTS, StopReason.BLANK_LAST):
            return None
        if self.served is not None:
            return self.served.commitlog.resume_after_damage(end)
        return commitlog_of([self.segment], self.size).resume_after_damage(end) if self.reads_past(end) else None

    def reads_past(self, end: ScanEnd) -> bool:
        """Whether the read goes on past ``end``: before ``resume_before``, with ``keep_going``, or where DLedger keeps it."""
        if self.served is not None:
            return self.resume(end) is not None
        return (self.resume_before is not None and end.offset < self.resume_before) or (self.keep_going and not end.is_clean)

    def end_at(self, offset: int) -> ScanEnd:
        """Why this segment's records end at ``offset``, as ``mqtool dump`` words it; a record there ends nothing."""
        walk = commitlog_of([self.segment], self.size).scan(offset)
        if next(iter(walk), None) is not None or walk.end is None:
            return ScanEnd(offset, StopReason.LIMIT, "a record starts here")
        return walk.end

    def handoff_start(self, record_offset: int) -> int:
        """Where the record at ``record_offset`` starts for ``check_handoffs``: its DLedger entry's first byte, else itself."""
        return record_offset - (ENTRY_HEADER_SIZE if self.entries else 0)


def plan_splits(segments: Iterable[Segment], split_size: int | None = None, resume_before: int | None = None,
                start: int | None = None, stop: int | None = None, keep_going: bool = False,
                served: "ServedLog | None" = None) -> list[Split]:
    """One split per segment, or ``split_size`` ranges, for records starting in ``[start, stop)`` (options: ``Split``)."""
    if start is not None and stop is not None and stop <= start:
        return []
    splits = []
    for seg in segments:
        if (start is not None and seg.end_offset <= start) or (stop is not None and seg.base_offset >= stop):
            continue
        first = start - seg.base_offset if start is not None and start > seg.base_offset else 0
        last = min(seg.size, stop - seg.base_offset) if stop is not None else seg.size
        step = seg.size if not split_size or split_size >= seg.size else split_size
        for begin in range(0, max(seg.size, 1), max(step, 1)):
            if begin + step <= first or begin >= last:
                continue
            splits.append(Split(str(seg.path), seg.base_offset, seg.size, max(begin, first), min(begin + step, last), seg.entries,
                                resume_before, first, keep_going, served))
    return splits


def find_split_start(array: np.ndarray, start: int, stop: int, base: int, fd: int | None = None, *, entries: bool = False,
                     records_from: int = 0) -> int | None:
    """Where a split of ``[start, stop)`` resumes (``fastscan.find_record_start``), or None; ``fd``: holes skipped."""
    if start == records_from:
        return start
    data = fs.first_nonzero(array, start, min(array.shape[0], stop + fs.POS_MAGIC), fd)
    if data < 0:
        return None  # zeros to the end of the range (e.g. a pre-allocated segment)
    p = max(start, data - fs.POS_MAGIC)  # a record's (an entry's) first bytes may be zero, its magic is not
    found = fs.find_record_start(array, p, stop, base, fs.RESYNC_CHAIN, entries=entries, lenient=True)
    return None if found < 0 else found


class SplitScan:
    """The compiled walk over one split to where a scan of its segment would end; then ``first``, ``exit``, ``records``."""

    def __init__(self, split: Split, *, check_crc: bool = True, window: int = WINDOW, batch: int = 1 << 15):
        self.split, self.check_crc, self.window, self.batch = split, check_crc, window, batch
        self.first: int | None = None  # absolute offset of the first record read
        self.exit: int | None = None  # absolute offset just after the last record read
        self.records = 0
        self.end: ScanEnd | None = None
        self.skipped: list[tuple[ScanEnd, int]] = []  # (where damage began, where the records resume)

    def __iter__(self) -> Iterator[fs.SegmentBatch]:
        split = self.split
        base = split.base_offset
        with MappedFile(split.path, base) as mf:
            if mf.size != split.size:
                raise OSError(f"{split.path}: {mf.size} bytes, planned as {split.size}")
            array = fs.as_array(mf.buf)
            fd = os.open(split.path, os.O_RDONLY)
            try:
                begin = find_split_start(array, split.start, split.end, base, fd, entries=split.entries, records_from=split.records_from)
            finally:
                os.close(fd)
                del array
        if split.served is not None and split.entries and begin != split.start:
            begin = self._damaged_first_entry(begin)  # an entry the resynchronisation passes
        if begin is None:
            self.end = ScanEnd(base + split.end, StopReason.LIMIT, "no record starts in this split")
            return
        commitlog = commitlog_of([split.segment], split.size)
        pos, stop = base + begin, base + split.end
        exit = None
        while True:
            scan = fs.FastScan(commitlog, pos, min(stop, pos + self.window), check_crc=self.check_crc, stop_on_crc=False, batch=self.batch)
            yield from self._counted(scan)
            exit = scan.end.offset
            if scan.end.reason == StopReason.LIMIT and scan.end.offset < stop:
                pos = scan.end.offset  # the window ended, the split did not
                continue
            resumed = split.resume(scan.end) if scan.end.offset < stop else None
            if resumed is None:
                break
            self.skipped.append((scan.end, resumed))
            yield from self._counted(self._loose(scan.end, resumed))
            if resumed >= stop:
                exit = resumed  # the next split's records begin there
                break
            pos = resumed
        self.end = scan.end
        self.exit = exit if self.records else None

    def _damaged_first_entry(self, found: int | None) -> int | None:
        """Where this DLedger split's records begin: the first entry its broker serves in it (``dledgerstart.served_entry_after``)
        when the resynchronisation passed it and its header alone is broken, as ``mqtool dump`` reads it; else ``found``."""
        from .dledgerstart import record_in_broken_entry, served_entry_after

        split, base = self.split, self.split.base_offset
        cl = split.served.commitlog
        at = served_entry_after(cl, base + split.start - 1)
        if at is None or at >= base + (split.end if found is None else found):
            return found
        end = split.end_at(at)
        resumed = split.resume(end)
        return at - base if resumed is not None and record_in_broken_entry(cl, end, resumed) is not None else found

    def _counted(self, batches: Iterable[fs.SegmentBatch]) -> Iterator[fs.SegmentBatch]:
        """``batches`` as they are, counted into ``first`` and ``records``."""
        for batch in batches:
            if self.first is None:
                self.first = self.split.handoff_start(self.split.base_offset + int(batch.rows[0, fs.COL_POS]))
            self.records += len(batch.rows)
            yield batch

    def _loose(self, end: ScanEnd, resumed: int) -> Iterable[fs.SegmentBatch]:
        """In a DLedger store, the served record inside the header-broken entry at ``end`` (``dledgerstart.loose_walk``)."""
        if self.split.served is None:
            return ()
        from .dledgerstart import loose_walk

        return loose_walk(self.split.served.commitlog, end, resumed, check_crc=self.check_crc, stop_on_crc=False, batch=self.batch) or ()


class SplitResult(NamedTuple):
    """What one split read, for the handoff check; ``segment`` groups a segment's splits; offsets absolute."""

    segment: Hashable
    chain_start: int  # where the segment's records are read from (``Split.chain_start``)
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


class Damage(NamedTuple):
    """Damage or zeros ending ``segment``'s records, read past to ``resumed`` or ending the log (None), as ``dump`` says."""

    segment: Hashable
    end: ScanEnd
    resumed: int | None


def check_handoffs(results: Iterable[SplitResult], resume: Callable[[SplitResult, int], int | None] | None = None,
                   ends: dict[Hashable, int] | None = None) -> list[Rejected]:
    """The splits whose first record is not where the chain before ends; ``resume`` past damage; ``ends`` receives ends."""
    by_segment: dict[Hashable, list[SplitResult]] = {}
    for r in results:
        by_segment.setdefault(r.segment, []).append(r)
    rejected = []
    for segment, splits in by_segment.items():
        splits.sort(key=lambda r: r.start)
        chain_end = splits[0].chain_start
        for r in splits:
            if r.first is None:
                continue
            if r.first == chain_end or (r.first > chain_end and resume is not None and resume(r, chain_end) == r.first):
                chain_end = r.exit
                continue
            if r.first < chain_end:
                reason = f"its first record at {r.first} lies inside the record the previous split reads up to {chain_end}"
            else:
                reason = f"the segment's records end at {chain_end}; what follows at {r.first} is not part of the log (stale bytes)"
            rejected.append(Rejected(segment, r.start, r.first, chain_end, reason))
        if ends is not None:
            ends[segment] = chain_end
    return rejected


def check_splits(results: Iterable[SplitResult], splits: dict[tuple[Hashable, int], Split], damage: list[Damage] | None = None,
                 skipped: Mapping[tuple[Hashable, int], Sequence[tuple[int, int]]] | None = None) -> list[Rejected]:
    """The splits whose records are not the log ``mqtool dump`` reads; ``damage`` receives its stderr reports in order."""
    results = list(results)
    ends: dict[Hashable, int] = {}
    found: list[Damage] = []

    def resume(r: SplitResult, chain_end: int) -> int | None:
        """Where the read goes on past the damage at ``chain_end``, step by step up to ``r.first``, as ``dump`` reads."""
        split, at, steps = splits[(r.segment, r.start)], chain_end, []
        while at < r.first:
            end = split.end_at(at)
            resumed = split.resume(end)
            if resumed is None or resumed <= at:
                return None
            steps.append(Damage(r.segment, end, resumed))
            at = resumed
        if at == r.first:
            found.extend(steps)
        return at

    rejected = check_handoffs(results, resume, ends)
    rejected += cut_logs(results, splits, ends, rejected, found)
    if damage is not None:
        dropped = {(r.segment, r.start) for r in rejected}
        for (segment, start), ranges in (skipped or {}).items():
            if (segment, start) not in dropped:
                found += [Damage(segment, splits[(segment, start)].end_at(at), resumed) for at, resumed in ranges]
        once = {(d.segment[0], d.end.offset): d for d in found}  # damage at a split's start: seen by its task and by the handoff
        damage += _joined([once[k] for k in sorted(once)], {segment for (segment, _), split in splits.items() if split.entries})
    return rejected


def _joined(damage: list[Damage], entry_files: set[Hashable]) -> list[Damage]:
    """Adjacent ranges read past joined, but in DLedger data files (``entry_files``), where ``mqtool dump`` reports each."""
    joined: list[Damage] = []
    for d in damage:
        last = joined[-1] if joined else None
        if (last is not None and last.resumed is not None and last.segment[0] == d.segment[0] and last.resumed == d.end.offset
                and d.segment not in entry_files):
            joined[-1] = last._replace(resumed=d.resumed)
        else:
            joined.append(d)
    return joined


def cut_logs(results: Iterable[SplitResult], splits: dict[tuple[Hashable, int], Split], ends: dict[Hashable, int],
             rejected: Iterable[Rejected], damage: list[Damage] | None = None) -> list[Rejected]:
    """The splits past where each log ends: at the first segment whose chain stops at damage or zeros before the last, unless read
    past (``Split.reads_past``), as the broker's recovery cuts it; ``damage`` receives that end and the damage read past."""
    done = {(r.segment, r.start) for r in rejected}
    by_log: dict[Hashable, dict[Hashable, list[SplitResult]]] = {}
    for r in results:
        by_log.setdefault(r.segment[0], {}).setdefault(r.segment, []).append(r)
    cut = []
    for segments in by_log.values():
        order = sorted(segments, key=lambda k: segments[k][0].chain_start)
        end = None
        for i, key in enumerate(order):
            split = splits[(key, segments[key][0].start)]
            if end is not None:
                reason = f"past the end of the log at {end.offset} ({end.reason}: {end.detail}), where the broker's recovery cuts it"
                cut += [Rejected(key, r.start, r.first, end.offset, reason) for r in segments[key] if r.first is not None and (key, r.start) not in done]
                continue
            stop = _chain_stop(split, ends.get(key))
            if stop is None:
                continue
            steps, stop = _read_past(key, split, stop)
            if damage is not None:
                damage += steps
            if key != order[-1] and split.reads_past(stop):
                if damage is not None:  # the broker never reads it, or --keep-going: the log goes on in the next segment
                    damage.append(Damage(key, stop, segments[order[i + 1]][0].chain_start))
                continue
            end = stop if key != order[-1] else None
            if damage is not None and not stop.is_clean:  # zeros: where the written data ends, no damage
                damage.append(Damage(key, stop, None))
    return cut


def _read_past(key: Hashable, split: Split, stop: ScanEnd) -> tuple[list[Damage], ScanEnd]:
    """The ranges read past one at a time after damage ``stop`` in a segment, and the damage the read stops at."""
    steps = []
    while (resumed := split.resume(stop)) is not None and resumed < split.base_offset + split.size:
        following = split.end_at(resumed)
        if following.is_clean:  # a record (``LIMIT``), zeros or a blank: the read goes on, as ``cut_logs`` says
            break
        steps.append(Damage(key, stop, resumed))
        stop = following
    return steps, stop


def _chain_stop(split: Split, chain_end: int | None) -> ScanEnd | None:
    """Why ``split``'s segment chain stops at ``chain_end`` (``Split.end_at``); None at its blank, end or a limit."""
    chain_end = split.chain_start if chain_end is None else chain_end
    if chain_end >= split.base_offset + split.size:
        return None
    stop = split.end_at(chain_end)
    return None if stop.reason in (StopReason.LIMIT, StopReason.BLANK_LAST, StopReason.NO_SEGMENTS) else stop
