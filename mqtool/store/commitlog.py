"""The commit log as the broker sees it: segments and ``CommitLog.scan``, the recovery loop (reference §8.3, §8.9)."""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

from ..errors import BadStoreFile
from ..formats import commitlog as fmt
from ..formats.hashing import body_crc
from ..formats.errors import FormatError, LengthMismatch, TruncatedRecord
from .mappedfile import MappedFile

STORE_TS_POSITION = {v6: fmt.HEADER_LAYOUTS[(v6, False)].offset_of("store_timestamp") for v6 in (False, True)}  # by IPv6 born host


@dataclass(frozen=True)
class Segment:
    """One commit log file: ``base_offset`` is its name, ``size`` its length on disk."""

    path: Path
    base_offset: int
    size: int
    entries: bool = False  # a DLedger data file: records sit inside 48-byte entries (§15)

    @property
    def end_offset(self) -> int:
        return self.base_offset + self.size


class StopReason:
    """Why a scan ended (``ScanEnd.reason``)."""

    ZEROS = "zeros"  # unwritten (all-zero) bytes: the normal end of data
    BLANK_LAST = "blank-in-last-segment"  # a blank record and no further segment
    CORRUPT = "corrupt"  # illegal magic code or impossible length
    LENGTH_MISMATCH = "length-mismatch"  # the broker's "half message"
    TRUNCATED = "truncated"  # the record runs past the end of its segment
    CRC = "crc"  # body CRC mismatch (only when the scan checks CRCs)
    SEGMENT_END = "segment-end"  # a record ended exactly at the segment end
    LIMIT = "limit"  # reached the requested end offset
    NO_SEGMENTS = "no-segments"


class ScanEnd(NamedTuple):
    """Where and why a scan stopped. ``offset`` is the broker's ``processOffset``."""

    offset: int
    reason: str
    detail: str = ""
    total_size: int | None = None  # TOTALSIZE of the record at ``offset`` when it has one

    @property
    def is_clean(self) -> bool:
        """True when the scan reached the end of written data rather than damage."""
        return self.reason in (StopReason.ZEROS, StopReason.BLANK_LAST, StopReason.LIMIT, StopReason.NO_SEGMENTS)

    def unread_by_broker(self, broker_start: int) -> bool:
        """Whether this end lies before ``broker_start``, where the broker's recovery starts: damage it never reads."""
        return self.reason not in (StopReason.LIMIT, StopReason.NO_SEGMENTS) and self.offset < broker_start

    def skipped_note(self, resumed: int, scan_start: int | None = None, kept: str | None = None) -> str:
        """``mqtool dump``'s stderr line for this damage read past up to ``resumed``, saying why it is read past."""
        if kept is not None:
            return (f"skipped [{self.offset}, {resumed}) ({self.reason}: {self.detail}): {kept}, so the broker serves the records after "
                    "it; reading on")
        if scan_start is not None:
            return (f"skipped [{self.offset}, {resumed}) ({self.reason}): before {scan_start}, where the broker's next start "
                    "scans from, so it never reads it and serves the records after it; reading on")
        return (f"skipped the damaged range [{self.offset}, {resumed}) ({self.reason}: {self.detail}; "
                "the broker would cut the log there); reading on")

    def stopped_note(self, keep_going: bool = False) -> str:
        """``mqtool dump``'s stderr line for the damage its read stops at."""
        more = "" if keep_going else "; --keep-going reads past it"
        return f"stopped at offset {self.offset}: {self.reason}: {self.detail} (the broker would cut the log here{more})"


class CommitLogScan:
    """Iterate valid records from a start offset; afterwards ``end`` says where and why it stopped."""

    def __init__(self, commitlog: "CommitLog", start: int, stop: int | None, check_crc: bool):
        self.commitlog, self.start, self.stop, self.check_crc = commitlog, start, stop, check_crc
        self.end: ScanEnd | None = None
        self.blanks: list[fmt.BlankRecord] = []

    def __iter__(self) -> Iterator[fmt.CommitLogRecord]:
        index = self.commitlog.segment_index(self.start)
        if index is None:
            self.end = ScanEnd(self.start, StopReason.NO_SEGMENTS, "no segment holds this offset")
            return
        yield from self._walk(index, self.start - self.commitlog.segments[index].base_offset)

    LAST_BLANK = "blank record at the end of the last segment"

    def _walk(self, index: int, pos: int) -> Iterator[fmt.CommitLogRecord]:
        """The records from ``pos`` in segment ``index`` on, the next segment after a blank."""
        segments, stop = self.commitlog.segments, self.stop
        while True:
            segment = segments[index]
            with MappedFile(segment.path, segment.base_offset, sequential=True) as mf:
                buf, base, size = mf.buf, segment.base_offset, mf.size
                while True:
                    if stop is not None and base + pos >= stop:
                        self.end = ScanEnd(base + pos, StopReason.LIMIT)
                        return
                    record = self._record_at(buf, pos, base, size)
                    if self.end is not None:
                        return
                    if record is None:  # a blank
                        break
                    yield record
                    pos = record.offset - base + record.total_size
            index += 1
            if index >= len(segments):
                self.end = ScanEnd(base + pos, StopReason.BLANK_LAST, self.LAST_BLANK)
                return
            pos = 0

    def _record_at(self, buf, pos: int, base: int, size: int) -> fmt.CommitLogRecord | None:
        """The valid record at ``pos``, or None: after a blank (kept in ``blanks``), or with ``end`` set."""
        if pos >= size:
            self.end = ScanEnd(base + pos, StopReason.SEGMENT_END, "a record ended exactly at the segment end")
            return None
        try:
            record = fmt.decode_record(buf, pos, base, size)
        except FormatError as exc:
            self.end = _classify(buf, pos, base, size, exc, self.check_crc)
            return None
        if record.magic_code == fmt.BLANK_MAGIC:
            self.blanks.append(record)
            return None
        if self.check_crc and not record.crc_ok():
            self.end = crc_end(record.offset, record)
            return None
        return record


def crc_end(offset: int, record: fmt.CommitLogRecord) -> ScanEnd:
    """The end at a record whose body CRC fails (``checkCRCOnRecover``)."""
    return ScanEnd(offset, StopReason.CRC, f"body CRC {body_crc(record.body)} != stored {record.body_crc}", record.total_size)


def _classify(buf, pos: int, base: int, size: int, exc: FormatError, check_crc: bool = False) -> ScanEnd:
    offset = base + pos
    if not any(buf[pos : min(pos + 8, size)]):
        return ScanEnd(offset, StopReason.ZEROS, "no record written here")
    if isinstance(exc, LengthMismatch):
        crc = _body_crc_failure(buf, pos) if check_crc else None  # checkMessageAndReturnSize checks the body CRC first (reference §3.1)
        if crc is not None:
            return ScanEnd(offset, StopReason.CRC, crc, exc.total_size)
        return ScanEnd(offset, StopReason.LENGTH_MISMATCH, exc.reason, exc.total_size)
    if isinstance(exc, TruncatedRecord):
        return ScanEnd(offset, StopReason.TRUNCATED, exc.reason)
    return ScanEnd(offset, StopReason.CORRUPT, exc.reason)


def _body_crc_failure(buf, pos: int) -> str | None:
    """Why the body CRC of the (length-mismatched, but fully present) record at ``pos`` fails, or None."""
    flags = int.from_bytes(buf[pos + fmt.SYS_FLAG_POSITION : pos + fmt.SYS_FLAG_POSITION + 4], "big")
    header = fmt.HEADER_LAYOUTS[(bool(flags & fmt.SysFlag.BORNHOST_V6), bool(flags & fmt.SysFlag.STOREHOST_V6))]
    fields = dict(zip(header.names, header.codec.unpack_from(buf, pos)))
    stored, length, start = fields["body_crc"], fields["body_length"], pos + header.size
    crc = body_crc(bytes(buf[start : start + length])) if length > 0 else stored
    return None if crc == stored else f"body CRC {crc} != stored {stored}"


class CommitLog:
    """The ordered segments of ``commitlog/`` (possibly several directories, §1.6)."""

    def __init__(self, segments: list[Segment], file_size: int, *, cache_size: int = 8):
        self.segments = segments
        self.file_size = file_size
        self._open: OrderedDict[int, MappedFile] = OrderedDict()
        self._cache_size = cache_size
        for prev, seg in zip(segments, segments[1:]):
            if seg.base_offset == prev.base_offset:
                raise BadStoreFile(f"{seg.path}: two segments start at offset {seg.base_offset}")

    @property
    def min_offset(self) -> int:
        """First offset of the first segment (the broker's ``getMinOffset`` when it is available)."""
        return self.segments[0].base_offset if self.segments else 0

    @property
    def end_of_files(self) -> int:
        return self.segments[-1].end_offset if self.segments else 0

    def end_of_writes(self, stop: int | None = None) -> int:
        """Where the written bytes end up to ``stop`` (a progress total): at the last written segment's first hole."""
        end = self.end_of_files
        for seg in reversed(self.segments):
            try:
                with open(seg.path, "rb") as f:
                    if f.read(4) in (b"", b"\0\0\0\0"):
                        end = seg.base_offset  # never written: pre-allocated
                        continue
                    hole = os.lseek(f.fileno(), 0, os.SEEK_HOLE)
            except (OSError, AttributeError):  # no SEEK_HOLE here: the whole file counts
                hole = seg.size
            end = seg.base_offset + min(hole, seg.size)
            break
        return end if stop is None else min(stop, end)

    def segment_index(self, offset: int) -> int | None:
        """Index of the segment holding ``offset`` (``findMappedFileByOffset``)."""
        if not self.segments:
            return None
        guess = (offset - self.segments[0].base_offset) // self.file_size
        if 0 <= guess < len(self.segments) and self.segments[guess].base_offset <= offset < self.segments[guess].end_offset:
            return guess
        for i, seg in enumerate(self.segments):  # gaps in the sequence: fall back to a search
            if seg.base_offset <= offset < seg.end_offset:
                return i
        return None

    def next_segment(self, offset: int) -> int | None:
        """The first offset of the segment after the one holding ``offset`` (where the chain goes on past a blank), or None."""
        index = self.segment_index(offset)
        return None if index is None or index + 1 >= len(self.segments) else self.segments[index + 1].base_offset

    def segments_from(self, offset: int) -> Iterator[tuple[int, Segment, int]]:
        """``(index, segment, position)`` from the segment holding ``offset`` to the last; nothing if none holds it."""
        first = self.segment_index(offset)
        for i in range(len(self.segments) if first is None else first, len(self.segments)):
            yield i, self.segments[i], offset - self.segments[i].base_offset if i == first else 0

    def scan(self, start: int | None = None, stop: int | None = None, *, check_crc: bool = False) -> CommitLogScan:
        """Valid records from ``start`` (default: the first segment) until the logical end."""
        return CommitLogScan(self, self.min_offset if start is None else start, stop, check_crc)

    def resume_after_damage(self, end: ScanEnd) -> int | None:
        """Where the log goes on after ``end`` (``resync.resume_after``), asked only where the broker serves past it."""
        from .resync import resume_after  # the compiled resync: only where a walk stopped at damage

        return resume_after(self, end.offset + 1)

    def mapped(self, index: int) -> MappedFile:
        """A cached read-only map of segment ``index`` (for random access)."""
        mf = self._open.get(index)
        if mf is None:
            seg = self.segments[index]
            mf = self._open[index] = MappedFile(seg.path, seg.base_offset)
            if len(self._open) > self._cache_size:
                self._open.popitem(last=False)[1].close()
        else:
            self._open.move_to_end(index)
        return mf

    def mapped_at(self, offset: int) -> MappedFile:
        """The map of the segment holding ``offset`` (``LookupError`` when none does)."""
        index = self.segment_index(offset)
        if index is None:
            raise LookupError(f"no commit log segment holds offset {offset}")
        return self.mapped(index)

    def read_record(self, offset: int) -> fmt.Record:
        """Decode the record starting at ``offset`` (raises ``FormatError`` or ``LookupError``)."""
        mf = self.mapped_at(offset)
        return fmt.decode_record(mf.buf, offset - mf.base_offset, mf.base_offset, mf.size)

    def read_bytes(self, offset: int, length: int) -> bytes:
        mf = self.mapped_at(offset)
        return bytes(mf.buf[offset - mf.base_offset : offset - mf.base_offset + length])

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()
