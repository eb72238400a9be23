"""Where a DLedger broker's load cuts and scans (reference §15.4): ``data_recovery`` and ``dledger_start``."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from ..fileops import read_range
from ..formats import commitlog as clfmt
from ..formats import dledger as dfmt
from ..formats.errors import FormatError
from .commitlog import ScanEnd, Segment, StopReason
from .dledger import DLedgerCommitLog, DLedgerLayout, EntryScan, entry_problem, open_commitlog, unit_matches
from .mappedfile import MappedFile
from .rules import BrokerVersion, VersionRules
from .startfile import ScanStart, abnormal_bound, matched_start
from .store import Store


@dataclass(frozen=True)
class DataRecovery:
    """Where ``DLedgerMmapFileStore.recover`` starts and stops."""

    start_file: int  # index of the data file the walk starts from
    end: ScanEnd  # entry walk end: data truncated here
    last_index: int  # last valid entry index (-1: none)
    index_units_on_disk: int  # units written in index/ (up to the first all-zero unit)
    committed_index: int | None  # DLedger's committedIndex after load: the checkpoint's, clamped to last_index (None: none taken)
    committed_pos: int | None  # end of that entry: the commit log max offset right after load
    rewrite_from: int | None = None  # first walked entry its index unit disagrees with: units rewritten from there
    last_term: int | None = None  # term of the last valid entry (None: none)
    walked: int = 0  # entries walked
    first_walked: int | None = None  # index of the first entry walked: the walk checks (or rewrites) the units from it on

    @property
    def index_cut(self) -> int:
        return (self.last_index + 1) * dfmt.INDEX_UNIT_SIZE


def data_recovery(cl: DLedgerCommitLog) -> DataRecovery:
    """``DLedgerMmapFileStore.recover``'s walk, once per open commit log, for every reader of the DLedger cut."""
    if cl.recovery_walk is None:
        cl.recovery_walk = _data_recovery(cl)
    return cl.recovery_walk


def _data_recovery(cl: DLedgerCommitLog) -> DataRecovery:
    files = cl.entry_segments()
    offset = len(cl.segments) - len(files)  # classic segments of a mixed store come first
    if not files:  # recover keeps nothing and returns before reading the checkpoint
        return DataRecovery(offset, ScanEnd(cl.divided_offset, StopReason.NO_SEGMENTS, "no DLedger data file"), -1, 0, None, None)
    start = max(len(files) - 3, 0)
    for start in range(start, -1, -1):  # recover's pre-check: a file's first entry (at its own pos) against its index unit
        with MappedFile(files[start].path, files[start].base_offset) as mf:
            h = dfmt.decode_entry_header(mf.buf, 0, files[start].base_offset)
        if entry_problem(h, None) is None and unit_matches(cl.index_unit(h.index), h):
            break
    scan = EntryScan(cl, files[start].base_offset)
    last = rewrite_from = committed_entry = None
    committed = cl.layout.committed_index
    walked, first_walked = 0, None
    for walked, header in enumerate(scan, 1):
        last = header
        first_walked = header.index if first_walked is None else first_walked
        if rewrite_from is None and not unit_matches(cl.index_unit(header.index), header):
            rewrite_from = header.index
        if header.index == committed:
            committed_entry = header
    last_index = last.index if last is not None else -1
    committed_pos = None
    if committed is not None and (last is None or committed == -1 or committed < cl.ledger_begin_index):
        committed = None  # updateCommittedIndex returns: nothing committed, committedPos stays -1
    if committed is not None:
        committed = min(committed, last_index)
        # updateCommittedIndex, after the walk: the end of unit ``committed`` (getEntryPosAndSize reads it at committed x 32,
        # whatever the units before it hold), which the walk has rewritten from its entry where a unit up to it disagreed
        rewritten = rewrite_from is not None and committed >= rewrite_from
        unit = (committed_entry or last) if rewritten else cl.index_unit(committed)
        committed_pos = None if unit is None else unit.pos + unit.size
    return DataRecovery(offset + start, scan.end, last_index, sum(1 for _ in cl.index_units()), committed, committed_pos, rewrite_from,
                        last.term if last is not None else None, walked, first_walked)


def committed_read_failure(cl: DLedgerCommitLog, dl: DataRecovery) -> tuple[str, bool] | None:
    """(why) ``updateCommittedIndex`` throws at the end of ``recover`` on ``dl.committed_index``, or None (DLedger 0.1-0.2.2)."""
    c = dl.committed_index
    if c is None or dl.first_walked is None or c >= dl.first_walked:
        return None
    unit = cl.index_unit(c)
    if unit is None:
        return f"index/ has no unit for entry {c}", True
    files, end, pos, size = cl.entry_segments(), dl.end.offset, unit.pos, unit.size
    # findMappedFileByOffset (the first file for offset 0), among the files truncateOffset(end) keeps; read up to end
    seg = files[0] if pos == 0 else next((f for f in files if f.base_offset <= pos < f.base_offset + f.size and f.base_offset <= end), None)
    at = 0 if pos == 0 else pos - seg.base_offset if seg is not None else 0
    where = f"its index unit places it at [{pos}, {pos + size})"
    if seg is None or size < 0 or at + size > min(seg.size, end - seg.base_offset):
        return f"{where}, outside the data DLedger's recovery keeps", False
    if size < dfmt.ENTRY_HEADER_SIZE:
        return f"{where}, shorter than an entry header", False
    h = dfmt.decode_entry_header(read_range(seg.path, at, at + dfmt.ENTRY_HEADER_SIZE), 0, pos)
    if h.body_size < h.size and not 0 <= h.body_size <= size - dfmt.ENTRY_HEADER_SIZE:
        return f"{where}, where an entry header gives body length {h.body_size}", False
    if h.pos != pos:
        return f"{where}, where the entry header gives pos {h.pos}", False
    return None


def reput_start(cl: DLedgerCommitLog, dl: DataRecovery) -> tuple[int, str]:
    """Where 5.x's reput starts on DLedger data, and why: ``getConfirmOffset``, raised to the min offset (reference §15.4)."""
    if dl.committed_pos:
        return dl.committed_pos, f"DLedger's committed position {dl.committed_pos}"
    files = cl.entry_segments()
    first = files[0].base_offset if files else 0
    start = max(first, cl.min_offset)
    why = f"{start}: DLedger's checkpoint gives no committed position, so getMaxOffset falls back to its first data file at {first}"
    return start, why + (f", and doReput to the log's min offset {start}" if start != first else "")


def walk_resume(cl: DLedgerCommitLog, end: ScanEnd, *, every: bool = False) -> int | None:
    """Where a walk stopped at ``end`` goes on in the data DLedger keeps (§15.4, §15.5); ``every``: every readable entry."""
    index = cl.segment_index(end.offset)
    if end.reason in (StopReason.LIMIT, StopReason.SEGMENT_END, StopReason.BLANK_LAST, StopReason.NO_SEGMENTS) or index is None:
        return None
    seg = cl.segments[index]
    if not cl.is_entry_file(seg):
        return None if every else _classic_resume(cl, end)
    if not every and ((end.reason == StopReason.ZEROS and index == len(cl.segments) - 1) or end.offset >= data_recovery(cl).end.offset):
        return None  # where the written data ends (``recover`` stops at these zeros, or before them), or where it cuts
    if end.offset + dfmt.ENTRY_HEADER_SIZE <= seg.end_offset:
        with MappedFile(seg.path, seg.base_offset) as mf:
            header = dfmt.decode_entry_header(mf.buf, end.offset - seg.base_offset, seg.base_offset)
        if entry_problem(header, None) is None and end.offset + header.size <= seg.end_offset:
            return end.offset + header.size
    if every:
        record = _self_described(cl, end.offset + dfmt.ENTRY_HEADER_SIZE)
        if record is not None and end.offset + dfmt.ENTRY_HEADER_SIZE + record.total_size <= seg.end_offset:
            return end.offset + dfmt.ENTRY_HEADER_SIZE + record.total_size
        return readable_entry(cl, end.offset + 1)
    served = served_entry_after(cl, end.offset)
    return served if served is not None and served < data_recovery(cl).end.offset else seg.end_offset


def served_entry_after(cl: DLedgerCommitLog, offset: int) -> int | None:
    """The first entry after ``offset`` whose record the broker serves (``readable_entry``; by offset, §15.4), or None."""
    return readable_entry(cl, offset + 1)


def _classic_resume(cl: DLedgerCommitLog, end: ScanEnd) -> int | None:
    """``walk_resume`` in the classic commit log of a mixed store: the next record start, once DLedger data exist."""
    if end.offset >= data_recovery(cl).end.offset or not cl.entry_segments():
        return None
    from .resync import resume_after

    return resume_after(cl, end.offset + 1)


def readable_entry(cl: DLedgerCommitLog, offset: int) -> int | None:
    """The first entry at or after ``offset`` in its file whose header or record describes itself, or None."""
    from .resync import resume_after

    seg = cl.segments[cl.segment_index(offset)]
    found = (resume_after(cl, offset + dfmt.ENTRY_HEADER_SIZE), resume_after(cl, offset + dfmt.ENTRY_HEADER_SIZE, 0, entries=False))
    return min((f - dfmt.ENTRY_HEADER_SIZE for f in found if f is not None and f < seg.end_offset), default=None)


def _self_described(cl: DLedgerCommitLog, at: int) -> clfmt.CommitLogRecord | None:
    """The message record at ``at`` when it decodes and its PHYSICALOFFSET is ``at``, else None."""
    try:
        record = cl.read_record(at)
    except (FormatError, LookupError):
        return None
    return record if record.phys_offset == at else None


def record_in_broken_entry(cl: DLedgerCommitLog, end: ScanEnd, resume: int) -> int | None:
    """The offset of the served self-describing record inside the header-broken entry at ``end``, or None."""
    at = end.offset + dfmt.ENTRY_HEADER_SIZE
    index = cl.segment_index(end.offset)
    if end.reason == StopReason.CRC or index is None or not cl.is_entry_file(cl.segments[index]) or at >= resume:
        return None
    record = _self_described(cl, at)
    return at if record is not None and at + record.total_size == resume else None


def loose_walk(cl, end: ScanEnd, resume: int, **options):
    """The ``FastScan`` of the served record inside a header-broken entry in its file alone, or None."""
    at = record_in_broken_entry(cl, end, resume) if isinstance(cl, DLedgerCommitLog) else None
    if at is None:
        return None
    from .fastscan import FastScan  # loads numpy

    return FastScan(cl.file_alone(at), at, resume, **options)


KEPT = ("a DLedger broker keeps it (DLedger's recovery checks entry headers only, from its start file on, and no recovery reads "
        "the classic commit log before DLedger data)")  # ``mqtool dump``'s words for damage ``walk_resume`` reads past


@dataclass(frozen=True)
class ServedLog:
    """A DLedger store's log as a split's reader needs it to read past damage as ``mqtool dump`` does; picklable."""

    layout: DLedgerLayout
    classic: tuple[Segment, ...]  # the classic segments of a mixed store (§15.5)
    file_size: int

    @classmethod
    def of(cls, cl: DLedgerCommitLog) -> "ServedLog":
        return cls(cl.layout, tuple(s for s in cl.segments if not cl.is_entry_file(s)), cl.file_size)

    @property
    @functools.lru_cache(maxsize=8)  # by value: the copies a process unpickles share one
    def commitlog(self) -> DLedgerCommitLog:
        return open_commitlog(self.layout, list(self.classic), self.file_size)


def abnormal_start(store: Store, index_safe: bool | None) -> ScanStart:
    """``isMmapFileMatchedRecover``: the newest data file whose first record is V1 with a time in (0, bound]."""
    cl: DLedgerCommitLog = store.commitlog
    offset = len(cl.segments) - len(cl.entry_segments())
    bound, what = abnormal_bound(store, index_safe)
    found = matched_start(cl, offset, bound, what, accept_v2=False, skip=dfmt.ENTRY_HEADER_SIZE, files="DLedger data file")
    first = cl.segments[offset].base_offset if offset < len(cl.segments) else cl.divided_offset
    return found or ScanStart(offset, first, f"no DLedger data file's first record is older than the checkpoint's {what} = {bound}: from the first file")


def dledger_start(store: Store, dl: DataRecovery, version: BrokerVersion, *, mode: str | None = None, index_safe: bool | None = None, full_scan: bool = False) -> ScanStart:
    """Where ``DLedgerCommitLog``'s recovery scans from: 5.2.0+ abnormal from ``abnormal_start``, else ``dl.start_file``."""
    cl = store.commitlog
    abnormal = (mode or ("abnormal" if store.abort_present else "normal")) == "abnormal"
    if abnormal and VersionRules(version).dledger_abnormal_redispatch and not full_scan:
        return abnormal_start(store, index_safe)
    first = cl.segments[dl.start_file].base_offset if cl.segments else 0
    return ScanStart(dl.start_file, first, f"DLedgerMmapFileStore.recover: {_start_file(cl, dl)}")


def _start_file(cl: DLedgerCommitLog, dl: DataRecovery) -> str:
    """Which data file ``recover`` starts from, in words: the third-from-last, or earlier where its pre-check failed (§15.4)."""
    files = cl.entry_segments()
    at = dl.start_file - (len(cl.segments) - len(files))
    if not files:
        return "no data file"
    if len(files) < 3:
        return "the first data file (it starts at the third-from-last, the first of fewer than 3)"
    if at == len(files) - 3:
        return "the third-from-last data file"
    return f"data file {files[at].path.name}, the newest from the third-from-last back whose first entry matches its index unit"


@dataclass(frozen=True)
class FirstLoadBlank:
    """The blank a DLedger broker writes on its first load of a classic log (rules §8.4, §15.5), unless ``present``."""

    path: Path
    base_offset: int
    position: int
    file_size: int  # the mapped file's size: the blank's bytes left run to it
    present: bool  # a BLANK magic is there already: nothing is written

    @property
    def offset(self) -> int:
        return self.base_offset + self.position

    @property
    def divided_offset(self) -> int:
        return self.base_offset + self.file_size

    @property
    def data(self) -> bytes:
        return clfmt.encode_blank(self.file_size - self.position)

    @property
    def writes(self) -> bool:
        """Whether the broker writes the blank (none there, and its load does not fail first)."""
        return not self.present and self.failure is None

    @property
    def failure(self) -> str | None:
        """Why the load fails here, or None: under 8 bytes left, ``getInt`` throws ``BufferUnderflowException``."""
        left = self.file_size - self.position
        if left >= clfmt.BLANK_HEADER_SIZE:
            return None
        return (f"{self.path.name}: the classic recovery ends {left} byte(s) before the file's end, and a DLedger broker's first load of the "
                f"classic commit log reads 8 bytes there (DLedgerCommitLog: BufferUnderflowException), so its load fails and it does not start")


def first_load_blank(store: Store, rules: VersionRules, end: int) -> FirstLoadBlank | None:
    """The ``FirstLoadBlank`` of a DLedger store without data files, its classic recovery ending at ``end``; else None."""
    cl = store.commitlog
    if not store.is_dledger or store.recovers_dledger_data or not rules.dledger_commitlog or not cl.segments:
        return None
    index = cl.segment_index(end)  # truncateDirtyFiles keeps the file holding ``end`` last; none: the last file is whole
    seg = cl.segments[-1] if index is None else cl.segments[index]
    position = min(max(end - seg.base_offset, 0), seg.size)
    head = read_range(seg.path, position, position + clfmt.BLANK_HEADER_SIZE)
    present = len(head) == clfmt.BLANK_HEADER_SIZE and int.from_bytes(head[4:], "big", signed=True) == clfmt.BLANK_MAGIC
    return FirstLoadBlank(seg.path, seg.base_offset, position, seg.size, present)
