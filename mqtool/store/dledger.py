"""DLedger commit logs (reference §15): entry files, ``index/``, ``checkpoint``, ``currterm``, and one view over them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..errors import BadInput, BadStoreFile
from ..formats import commitlog as fmt
from ..formats import dledger as dfmt
from ..formats.config import parse_java_properties
from ..formats.dispatch import java_int_or_none
from ..formats.errors import FormatError
from .commitlog import CommitLog, CommitLogScan, ScanEnd, Segment, StopReason, _classify, crc_end
from .mappedfile import OFFSET_NAME, MappedFile, file_size, inferred_file_size, offset_named_files

if TYPE_CHECKING:
    from .store import Store


@dataclass(frozen=True)
class DLedgerLayout:
    """The files of one DLedger member: ``home`` is ``dledger-<selfId>`` (checkpoint, currterm)."""

    home: Path
    data_dir: Path
    index_dir: Path

    @property
    def self_id(self) -> str:
        return self.home.name.removeprefix("dledger-")

    def properties(self, name: str) -> dict[str, str] | None:
        """``checkpoint`` or ``currterm`` (falling back to ``.bak`` as ``IOUtils.file2String`` does)."""
        for candidate in (self.home / name, self.home / (name + ".bak")):
            if candidate.is_file():
                return parse_java_properties(candidate.read_text(encoding="utf-8", errors="replace"))
        return None

    @cached_property
    def checkpoint(self) -> dict[str, str] | None:
        return self.properties("checkpoint")

    @cached_property
    def currterm(self) -> dict[str, str] | None:
        return self.properties("currterm")

    def checkpoint_value(self, key: str) -> int | None:
        """``key`` of the checkpoint as DLedger reads it (``Long.valueOf``: no spaces, no underscores), or None."""
        return java_int_or_none((self.checkpoint or {}).get(key), 64)

    @property
    def committed_index(self) -> int | None:
        return self.checkpoint_value("committedIndex")

    @property
    def end_index(self) -> int | None:
        return self.checkpoint_value("endIndex")

    def index_files(self) -> list[tuple[int, Path]]:
        return offset_named_files(self.index_dir)


def locate(root: Path, data_path: Path | None = None, self_id: str | None = None) -> DLedgerLayout | None:
    """The DLedger member under ``root`` (``dledger-<selfId>/`` or ``storePathDLedgerCommitLog``); None if classic."""
    homes = [root / f"dledger-{self_id}"] if self_id else sorted(p for p in root.glob("dledger-*") if p.is_dir())
    homes = [h for h in homes if h.is_dir()]
    if data_path is not None:
        home = homes[0] if homes else data_path.parent
        return DLedgerLayout(home, data_path, home / "index")
    for home in homes:
        if (home / "data").is_dir():
            return DLedgerLayout(home, home / "data", home / "index")
    return None


def segments_of(paths: list[tuple[int, Path]], expected: int | None) -> tuple[list[Segment], int]:
    """DLedger data files, fixed-size like ``MmapFileList.load``: a file of another length is refused."""
    sizes = [(base, p, file_size(p)) for base, p in paths]
    if expected is None and sizes:
        expected = inferred_file_size(size for _, _, size in sizes)
    for base, p, size in sizes:
        if size != expected:
            raise BadStoreFile(f"{p}: {size} bytes, expected {expected} like the other DLedger data files (the broker refuses to load it)")
    return [Segment(p, base, size, True) for base, p, size in sizes], expected or 1 << 30


UNITS_A_STEP = 1 << 15  # index units ``units_written_from`` looks at a time (1 MiB)


class DLedgerCommitLog(CommitLog):
    """The commit log of a DLedger store: records sit inside entries (offsets = pos + 48)."""

    def __init__(self, layout: DLedgerLayout | None, segments: list[Segment], file_size: int, divided_offset: int = 0):
        super().__init__(segments, file_size)
        self.layout = layout
        self.divided_offset = divided_offset
        self._index_maps: list[MappedFile] | None = None
        self.recovery_walk = None  # DLedger's recovery walk of these files (``dledgerstart.data_recovery``)

    def is_entry_file(self, segment: Segment) -> bool:
        return segment.base_offset >= self.divided_offset

    def scan(self, start: int | None = None, stop: int | None = None, *, check_crc: bool = False) -> "DLedgerScan":
        return DLedgerScan(self, self.min_offset if start is None else start, stop, check_crc)

    def entry_walker(self):
        """The compiled walk ``FastScan`` uses on these files (imported here: the compiled walk loads numpy)."""
        from .dledgerwalk import EntryWalker

        return EntryWalker(self.divided_offset)

    def resume_after_damage(self, end: ScanEnd) -> int | None:
        """Past damage DLedger's recovery keeps, before its start file or after (``dledgerstart.walk_resume``)."""
        from .dledgerstart import walk_resume  # imports this module

        return walk_resume(self, end)

    def file_alone(self, offset: int) -> CommitLog:
        """The data file holding ``offset`` as a classic log of its own, for a header-broken entry's record."""
        return CommitLog([self.segments[self.segment_index(offset)]], self.file_size)

    def entries(self, start: int | None = None, *, with_blanks: bool = False) -> "EntryScan":
        """Raw entry headers from ``start`` (an entry position) to where the entry walk stops."""
        return EntryScan(self, self.min_offset if start is None else start, with_blanks)

    def entry_start(self, offset: int) -> int:
        """The entry position for a start ``offset``: a record offset (pos + 48) means its entry."""
        index = self.segment_index(offset)
        if index is None or not self.is_entry_file(self.segments[index]):
            return offset
        segment = self.segments[index]
        pos = offset - segment.base_offset - dfmt.ENTRY_HEADER_SIZE
        if pos < 0:
            return offset
        header = dfmt.decode_entry_header(self.mapped(index).buf, pos, segment.base_offset)
        return header.offset if header.magic == dfmt.ENTRY_MAGIC and header.pos == header.offset else offset

    def entry_segments(self) -> list[Segment]:
        return [s for s in self.segments if self.is_entry_file(s)]

    @cached_property
    def ledger_begin_index(self) -> int:
        """``ledgerBeginIndex`` after ``recover`` (``reviseLedgerBeginIndex``), read once (DLedger 0.1-0.3.1.2)."""
        first = self.entry_segments()[0]
        return dfmt.decode_entry_header(self.mapped_at(first.base_offset).buf, 0, first.base_offset).index

    def _index_files(self) -> list[MappedFile]:
        """The files of ``index/`` mapped, once (none without a layout)."""
        if self._index_maps is None:
            self._index_maps = [MappedFile(path, base) for base, path in self.layout.index_files()] if self.layout is not None else []
        return self._index_maps

    def index_unit(self, number: int) -> dfmt.IndexUnit | None:
        """Unit ``number`` of ``index/`` (byte ``number x 32`` of its file list), or None."""
        offset = number * dfmt.INDEX_UNIT_SIZE
        for mf in self._index_files():
            if mf.base_offset <= offset and offset + dfmt.INDEX_UNIT_SIZE <= mf.base_offset + mf.size:
                return dfmt.decode_index_unit(mf.buf, offset - mf.base_offset, number)
        return None

    def units_written_from(self, number: int) -> int:
        """The first never-written unit of ``index/`` at or after ``number`` (``truncateOffset`` moves the position, §15.4)."""
        unit = dfmt.INDEX_UNIT_SIZE
        for mf in self._index_files():
            first, count = mf.base_offset // unit, mf.size // unit
            if number >= first + count:
                continue
            if number < first:  # no file holds it
                return number
            rows = np.frombuffer(mf.buf, np.uint8, count * unit).reshape(count, unit)
            for at in range(number - first, count, UNITS_A_STEP):  # a step at a time: the first zero unit is usually near
                empty = np.flatnonzero(~rows[at : at + UNITS_A_STEP].any(axis=1))
                if empty.size:
                    del rows
                    return first + at + int(empty[0])
            del rows
            number = first + count
        return number

    def unit_bytes(self, first: int, stop: int) -> bytes:
        """The index units of entries ``first``..``stop - 1`` as DLedger writes them, from the entry headers."""
        start = self.divided_offset
        for seg in self.entry_segments():
            head = dfmt.decode_entry_header(self.mapped_at(seg.base_offset).buf, 0, seg.base_offset)
            if head.magic == dfmt.ENTRY_MAGIC and head.index <= first:
                start = seg.base_offset
        out = bytearray()
        for h in EntryScan(self, start):
            if h.index >= stop:
                break
            if h.index >= first:
                out += dfmt.encode_index_unit(h.magic, h.pos, h.size, h.index, h.term)
        return bytes(out)

    def close(self) -> None:
        super().close()
        for mf in self._index_maps or []:
            mf.close()
        self._index_maps = None

    def index_units(self) -> Iterator[dfmt.IndexUnit]:
        """Every unit of ``index/`` up to the first all-zero one (a never-written unit)."""
        for mf in self._index_files():
            for p in range(0, mf.size - dfmt.INDEX_UNIT_SIZE + 1, dfmt.INDEX_UNIT_SIZE):
                unit = dfmt.decode_index_unit(mf.buf, p, (mf.base_offset + p) // dfmt.INDEX_UNIT_SIZE)
                if not any(unit[1:]):
                    return
                yield unit


def unit_matches(unit: dfmt.IndexUnit | None, h: dfmt.EntryHeader) -> bool:
    """``recover``'s comparison of an entry with its index unit (magic, pos, size, index, term)."""
    return unit is not None and unit[1:] == (h.magic, h.pos, h.size, h.index, h.term)


def entry_end(header: dfmt.EntryHeader, previous: dfmt.EntryHeader | None, room: int, zeros: bool = True) -> ScanEnd | None:
    """Where and why ``recover``'s walk stops at this entry (``room``: bytes left; ``zeros``: none written), or None."""
    if zeros and header.magic == 0 and header.size == 0:
        return ScanEnd(header.offset, StopReason.ZEROS, "no entry written here")
    problem = entry_problem(header, previous)
    if problem is None and header.size > room:
        return ScanEnd(header.offset, StopReason.TRUNCATED, "entry runs past the end of its file")
    return None if problem is None else ScanEnd(header.offset, StopReason.CORRUPT, problem)


def entry_problem(header: dfmt.EntryHeader, previous: dfmt.EntryHeader | None) -> str | None:
    """Why ``DLedgerMmapFileStore.recover`` stops at this entry, or None (§15.4)."""
    if header.magic != dfmt.ENTRY_MAGIC:
        return f"entry magic {header.magic} is not 1"
    if header.size <= dfmt.ENTRY_HEADER_SIZE - 4 or header.size != header.body_size + dfmt.ENTRY_HEADER_SIZE:
        return f"entry size {header.size} is not body length {header.body_size} + 48"
    if header.pos != header.offset:
        return f"entry pos {header.pos} is not its own offset {header.offset}"
    if previous is not None and header.index != previous.index + 1:
        return f"entry index {header.index} does not follow {previous.index}"
    if previous is not None and header.term < previous.term:
        return f"entry term {header.term} is lower than the previous {previous.term}"
    return None


class EntryScan:
    """Entry headers in order (a blank moves to the next file), then ``end``, as ``DLedgerMmapFileStore.recover`` walks."""

    def __init__(self, commitlog: DLedgerCommitLog, start: int, with_blanks: bool = False):
        self.commitlog = commitlog
        self.start = start
        self.with_blanks = with_blanks  # also yield the end-of-file blanks
        self.end: ScanEnd | None = None
        self.blanks: list[dfmt.EntryHeader] = []

    def __iter__(self) -> Iterator[dfmt.EntryHeader]:
        segments = self.commitlog.entry_segments()
        pos_abs = max(self.start, self.commitlog.divided_offset)
        previous = None
        for segment in segments:
            if segment.end_offset <= pos_abs:
                continue
            pos = max(pos_abs - segment.base_offset, 0)
            with MappedFile(segment.path, segment.base_offset, sequential=True) as mf:
                while pos < mf.size:
                    header = dfmt.decode_entry_header(mf.buf, pos, segment.base_offset)
                    if header.is_blank:
                        self.blanks.append(header)
                        if self.with_blanks:
                            yield header
                        break
                    if (end := entry_end(header, previous, mf.size - pos)) is not None:
                        self.end = end
                        return
                    yield header
                    previous = header
                    pos += header.size
        last = segments[-1].end_offset if segments else self.start
        self.end = ScanEnd(last, StopReason.BLANK_LAST, "blank at the end of the last data file")


class DLedgerScan(CommitLogScan):
    """``CommitLog.scan`` over DLedger entries with §15.4's checks; ``end.offset`` is an entry position."""

    LAST_BLANK = "blank at the end of the last data file"

    def __init__(self, commitlog: DLedgerCommitLog, start: int, stop: int | None, check_crc: bool):
        super().__init__(commitlog, start, stop, check_crc)
        self.entries = 0

    def __iter__(self) -> Iterator[fmt.CommitLogRecord]:
        cl: DLedgerCommitLog = self.commitlog
        self.previous: dfmt.EntryHeader | None = None  # the last entry walked (``entry_problem``)
        segments = cl.segments
        index = cl.segment_index(self.start)
        if index is None:
            self.end = ScanEnd(self.start, StopReason.NO_SEGMENTS, "no segment holds this offset")
            return
        if not cl.is_entry_file(segments[index]):
            classic = CommitLogScan(cl, self.start, min(self.stop, cl.divided_offset) if self.stop is not None else cl.divided_offset, self.check_crc)
            yield from classic
            self.blanks.extend(classic.blanks)
            if classic.end.reason != StopReason.LIMIT or classic.end.offset < cl.divided_offset:
                self.end = classic.end
                return
            index = cl.segment_index(cl.divided_offset)
            if index is None:
                self.end = ScanEnd(cl.divided_offset, StopReason.NO_SEGMENTS, "no DLedger data file")
                return
        base = segments[index].base_offset
        yield from self._walk(index, cl.entry_start(self.start) - base if self.start >= base else 0)

    def _record_at(self, buf, pos: int, base: int, size: int) -> fmt.CommitLogRecord | None:
        """The record inside the entry at ``pos``, with the entry checks of §15.4 (``end`` at the entry)."""
        if pos >= size:
            return None
        header = dfmt.decode_entry_header(buf, pos, base)
        if header.is_blank:
            self.blanks.append(fmt.BlankRecord(header.offset, header.size, header.magic))
            return None
        if (end := entry_end(header, self.previous, size - pos, not any(buf[pos : min(pos + dfmt.ENTRY_HEADER_SIZE, size)]))) is not None:
            self.end = end
            return None
        try:
            record = fmt.decode_record(buf, pos + dfmt.ENTRY_HEADER_SIZE, base, pos + header.size)
        except FormatError as exc:
            end = _classify(buf, pos + dfmt.ENTRY_HEADER_SIZE, base, pos + header.size, exc)
            self.end = ScanEnd(base + pos, end.reason, f"record in entry {header.index}: {end.detail}", end.total_size)
            return None
        if record.magic_code == fmt.BLANK_MAGIC or record.total_size != header.body_size:
            self.end = ScanEnd(base + pos, StopReason.CORRUPT, f"entry {header.index}: body is not exactly one message record")
            return None
        if self.check_crc and not record.crc_ok():
            self.end = crc_end(base + pos, record)
            return None
        self.entries += 1
        self.previous = header
        return record


def open_commitlog(layout: DLedgerLayout, classic: list[Segment], file_size: int | None) -> DLedgerCommitLog:
    """The commit log view of a DLedger store (4.5.1-5.3.3: without data files, the classic segments' size)."""
    files = offset_named_files(layout.data_dir)
    data, size = segments_of(files, file_size if file_size is not None or files or not classic else classic[-1].size)
    divided = classic[-1].end_offset if classic else 0
    return DLedgerCommitLog(layout, classic + [s for s in data if s.base_offset >= divided], size, divided)


def open_entry_files(path: Path) -> DLedgerCommitLog:
    """``dump dledger PATH``: a store, a ``dledger-<id>`` folder, its ``data/`` folder or one data file."""
    if path.is_file():
        if not OFFSET_NAME.match(path.name):
            raise BadInput(f"{path}: a DLedger data file is named by its 20-digit start offset")
        return open_data_files([(int(path.name), path)], None)
    if (path / "data").is_dir() and path.name.startswith("dledger-"):
        layout = DLedgerLayout(path, path / "data", path / "index")
    elif path.name == "data" and path.parent.name.startswith("dledger-"):
        layout = DLedgerLayout(path.parent, path, path.parent / "index")
    else:
        layout = locate(path)
    if layout is None:
        raise BadInput(f"{path}: no DLedger data here (expected dledger-<id>/data/ under a store, a dledger-<id> folder or its data/ folder)")
    return open_commitlog(layout, [], None)


def commitlog_of(segments: list[Segment], file_size: int) -> CommitLog:
    """A commit log over gathered segments (Spark inputs): a DLedger view when they are entry files."""
    if any(s.entries for s in segments):
        classic = [s for s in segments if not s.entries]
        return DLedgerCommitLog(None, segments, file_size, classic[-1].end_offset if classic else 0)
    return CommitLog(segments, file_size)


def is_entry_file(path: Path, base: int) -> bool:
    """Whether a file starts with a self-describing DLedger entry (§15.6, as ``recover`` checks), not a classic record."""
    try:
        with open(path, "rb") as f:
            head = f.read(dfmt.ENTRY_HEADER_SIZE)
    except OSError:
        return False
    return len(head) == dfmt.ENTRY_HEADER_SIZE and entry_problem(dfmt.decode_entry_header(head, 0, base), None) is None


def open_data_files(paths: list[tuple[int, Path]], file_size: int | None) -> DLedgerCommitLog:
    """Entry files given without their store (a data folder, one file)."""
    home = paths[0][1].parent.parent
    layout = DLedgerLayout(home, paths[0][1].parent, home / "index")
    return DLedgerCommitLog(layout, *segments_of(paths, file_size))


def index_file_size(store: Store) -> int:
    """The DLedger index file length: the files', else ``DLedgerConfig.mappedFileSizeForEntryIndex``'s default."""
    sizes = [size for size in (p.stat().st_size for _, p in store.commitlog.layout.index_files()) if size]
    return inferred_file_size(sizes) if sizes else DLEDGER_INDEX_FILE_SIZE


DLEDGER_INDEX_FILE_SIZE = dfmt.INDEX_UNIT_SIZE * 5 * 1024 * 1024
