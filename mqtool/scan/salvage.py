"""``SalvageScan``: every valid record of a commit log with a ``status`` (docs/reading.md), past the broker's cut too."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterator

import pyarrow as pa

from ..store.records import BodyEncoding
from ..store import Store
from ..formats.dledger import ENTRY_HEADER_SIZE
from ..store.commitlog import ScanEnd, StopReason
from ..store.dledgerstart import loose_walk, readable_entry, record_in_broken_entry, walk_resume
from ..store.nextstart import NextStart, next_start
from ..store.fastscan import COL_POS, FastScan
from ..store.segments import Gap, Run, SegmentReport, SegmentTask, analyze_segment, store_timestamp_at
from .batches import projected_schema
from .messages import MessageScan

LIVE, PAST_DAMAGE, STALE = "live", "past-damage", "stale"
STATUSES = (LIVE, PAST_DAMAGE, STALE)


@dataclass(frozen=True)
class Stretch:
    """A run of valid records after the cut: ``[start, stop)`` commit log offsets."""

    start: int
    stop: int
    status: str
    records: int | None  # None until read: the part of a run before or after the broker's end


@dataclass(frozen=True)
class Unreadable:
    """Bytes after the cut that hold no valid record: ``[start, stop)``; ``resumed``: valid records start at ``stop``."""

    start: int
    stop: int
    resumed: bool


@dataclass(frozen=True)
class Unread:
    """Bytes before the next start's scan start holding no valid record, never read; ``queue_entries``: messages lost."""

    start: int
    stop: int
    queue_entries: int


@dataclass
class SalvageSummary:
    cut: ScanEnd | None = None  # where the broker's recovery scan ends
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    stretches: list[Stretch] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # (offset, size) of records with a bad body CRC
    unread: Unread | None = None  # the damage the walk ended at, when the broker's next start never reads it

    @property
    def damaged(self) -> bool:
        """True when valid records lie where the broker would not read them: past damage, or skipped for a bad body CRC."""
        return bool(self.counts[PAST_DAMAGE] or self.skipped)


class SalvageScan:
    """Iterate to get ``messages`` batches (``columns`` + ``status``); ``summary`` fills as it goes."""

    def __init__(self, store: Store, *, columns=None, body: BodyEncoding = BodyEncoding.none, include_stale: bool = False, progress: Callable[[int], None] | None = None, batch: int = 1 << 15):
        self.store = store
        self.next_start: NextStart | None = None  # the broker's next start, once the walk from the first segment has ended
        self.columns = None if columns is None else list(columns)
        self.read = None if columns is None else list(dict.fromkeys([*columns, "offset", "size", "store_timestamp"]))
        self.body = body
        self.include_stale = include_stale
        self.progress = progress
        self.batch = batch
        self.summary = SalvageSummary()

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        last_ts, start = None, None
        while True:
            live = MessageScan(self.store, start=start, columns=self.read, body=self.body, batch=self.batch)
            for batch in live:
                last_ts = int(batch["store_timestamp"][-1].as_py())
                yield self._finish(batch, LIVE)
            if (kept := self._kept_past(live.end)) is None:
                break
            start, walk = kept
            if walk is not None:  # the record inside an entry whose header alone is broken
                yield from self._read(Stretch(walk.start, start, LIVE, 1), walk)
        self.summary.cut = cut = self._served_to(live.end)
        resumed = None  # where valid records resume after the walk's end
        for stretch in self._stretches(live.end, last_ts, cut.offset):
            resumed = stretch.start if resumed is None else resumed
            if stretch.status != STALE or self.include_stale:
                read = self.summary.counts[stretch.status]
                yield from self._read(stretch)
                if stretch.records is None:  # a run the broker's scan ends inside: counted as read
                    stretch = dataclasses.replace(stretch, records=self.summary.counts[stretch.status] - read)
            self.summary.stretches.append(stretch)
        if cut.offset > live.end.offset and resumed is not None and resumed > live.end.offset:  # the broker reads on past the walk's end
            start = live.end.offset
            lost = sum(end - first for q in self.store.consume_queues for first, end in q.runs_into(start, resumed))
            self.summary.unread = Unread(start, resumed, lost)

    def _kept_past(self, end: ScanEnd) -> tuple[int, FastScan | None] | None:
        """In a DLedger store, where the served log goes on past damage its recovery keeps: a bad-CRC record ``skipped``, else
        ``unreadable``, with a header-broken entry's record walk (``dledgerstart.loose_walk``); else None."""
        resume = self.store.commitlog.resume_after_damage(end) if self.store.is_dledger else None
        if resume is None:
            return None
        if end.reason == StopReason.CRC and end.total_size is not None:
            self.summary.skipped.append((resume - end.total_size, end.total_size))  # the record ends its entry
            return resume, None
        walk = loose_walk(self.store.commitlog, end, resume)  # served: only the entry header is unreadable
        self.summary.unreadable.append(Unreadable(end.offset, resume if walk is None else walk.start, True))
        return resume, walk

    def _served_to(self, walked: ScanEnd) -> ScanEnd:
        """Where the next start ends the log, settled from this walk: records up to it are live (reference §8.3)."""
        self.next_start = found = next_start(self.store, walked if self.store.config.check_crc_on_recover else None, self.store.commitlog.min_offset)
        return walked if found.logical_end in (None, walked.offset) else ScanEnd(found.logical_end, found.end_reason)

    def empty(self) -> pa.RecordBatch:
        """A batch of no record with the columns of those iterated: a file of no message still has them."""
        return self._shaped(pa.RecordBatch.from_pylist([], schema=projected_schema(self.read)), LIVE)

    def _finish(self, batch: pa.RecordBatch, status: str) -> pa.RecordBatch:
        self.summary.counts[status] += batch.num_rows
        if self.progress is not None:
            self.progress(int(batch["offset"][-1].as_py()))
        return self._shaped(batch, status)

    def _shaped(self, batch: pa.RecordBatch, status: str) -> pa.RecordBatch:
        if self.columns is not None:
            batch = batch.select(self.columns)
        return batch.append_column("status", pa.repeat(status, batch.num_rows))

    def _stretches(self, cut: ScanEnd, last_ts: int | None, served: int) -> Iterator[Stretch]:
        """Runs of valid records after ``cut``, classified, in offset order: live before ``served``."""
        segments = self.store.commitlog.segments
        first = self.store.commitlog.segment_index(cut.offset)
        if first is None:  # the cut is the end of the last segment
            return
        for i in range(first, len(segments)):
            seg = segments[i]
            start = cut.offset - seg.base_offset if i == first else 0
            report = (self._entry_report(i, start) if self._entry_file(i)
                      else analyze_segment(SegmentTask(i, str(seg.path), seg.base_offset, start, None)))
            for gap in report.gaps:
                self.summary.unreadable.append(Unreadable(seg.base_offset + gap.first_nonzero, seg.base_offset + gap.end, gap.resumed))
            for run in report.runs:
                if not run.records:
                    continue
                start, stop = seg.base_offset + run.start, seg.base_offset + run.end
                if start < served:
                    last_ts = run.last_ts
                    if stop > served:  # the broker's scan ends inside this run (a bad CRC): the rest is past it
                        yield Stretch(start, served, LIVE, None)
                        yield Stretch(served, stop, PAST_DAMAGE, None)
                    else:
                        yield Stretch(start, stop, LIVE, run.records)
                    continue
                stale = last_ts is not None and run.first_ts is not None and run.first_ts < last_ts  # CommitLogCheck._is_stale
                if not stale:
                    last_ts = run.last_ts
                yield Stretch(start, stop, STALE if stale else PAST_DAMAGE, run.records)
            if self.progress is not None:
                self.progress(seg.end_offset)

    def _entry_file(self, index: int) -> bool:
        """Whether segment ``index`` is a DLedger data file (its records inside entries)."""
        cl = self.store.commitlog
        return self.store.is_dledger and cl.is_entry_file(cl.segments[index])

    def _entry_report(self, index: int, start: int) -> SegmentReport:
        """``analyze_segment``'s runs and gaps of a DLedger data file (§15.2): one walk to every readable entry (``every``)."""
        cl = self.store.commitlog
        seg = cl.segments[index]
        report = SegmentReport(index, str(seg.path), seg.base_offset, seg.size, start, seg.size)
        unread = start  # the first byte after the last run
        at = readable_entry(cl, seg.base_offset + start)
        while at is not None and at < seg.end_offset:
            run = Run(at - seg.base_offset)
            scan = FastScan(cl, at, seg.end_offset, check_crc=False, stop_on_crc=False)
            for batch in scan:
                run.records += len(batch.rows)
                run.first_ts = store_timestamp_at(batch.array, int(batch.rows[0, COL_POS])) if run.first_ts is None else run.first_ts
                run.last_ts = store_timestamp_at(batch.array, int(batch.rows[-1, COL_POS]))
            run.end = scan.end.offset - seg.base_offset
            unread = self._add_run(report, run, unread)
            if scan.end.is_clean and scan.end.reason != StopReason.ZEROS:  # zeros: a page zeroed, or the end of the data
                break
            at = walk_resume(cl, scan.end, every=True)
            if at is not None and (record := record_in_broken_entry(cl, scan.end, at)) is not None:
                ts = cl.read_record(record).store_timestamp
                unread = self._add_run(report, Run(record - seg.base_offset, at - seg.base_offset, 1, first_ts=ts, last_ts=ts), unread)
        return report

    @staticmethod
    def _add_run(report: SegmentReport, run: Run, unread: int) -> int:
        """``run`` into ``report`` if it holds records, the bytes since the last run a gap; returns the end of the last run."""
        if not run.records:
            return unread
        if run.start > unread:
            report.gaps.append(Gap(unread, run.start, unread, True))
        report.runs.append(run)
        return run.end

    def _read(self, stretch: Stretch, walk: FastScan | None = None) -> Iterator[pa.RecordBatch]:
        """The stretch's records by ``read_batches`` (``walk``: given), bad CRCs skipped, broken entries by ``loose_walk``."""
        start, cl = stretch.start, self.store.commitlog
        if walk is None and self._entry_file(cl.segment_index(start)):  # the entry at ``start - 48`` may be broken
            walk = loose_walk(cl, ScanEnd(start - ENTRY_HEADER_SIZE, StopReason.CORRUPT), stretch.stop)
        loose = walk is not None
        while start < stretch.stop:  # a loose stretch is one record: walked once
            scan = MessageScan(self.store, start=start, stop=stretch.stop, columns=self.read, body=self.body, batch=self.batch, walk=walk)
            for batch in scan:
                yield self._finish(batch, stretch.status)
            end = scan.end
            if end.reason != StopReason.CRC or end.total_size is None:
                return
            header = ENTRY_HEADER_SIZE if not loose and self._entry_file(cl.segment_index(end.offset)) else 0  # ends at the entry
            self.summary.skipped.append((end.offset + header, end.total_size))
            start = end.offset + header + end.total_size
