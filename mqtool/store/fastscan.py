"""The compiled hot loop (``_fastscan.pyx``): a segment's records checked as ``decode_record`` does, CRC too, per call."""

from __future__ import annotations

import errno
import mmap
import os
import queue
import threading
from typing import Iterator, NamedTuple

import numpy as np

from ..errors import BadStoreFile
from ..formats import commitlog as fmt
from .commitlog import CommitLog, ScanEnd, StopReason
from .mappedfile import MappedFile, open_read_only
from ._pages import populate
from ._fastscan import (  # noqa: F401  (the kernels and their codes, for this module's users)
    COL_BODY, COL_BODY_LEN, COL_CRC_OK, COL_POS, COL_PROPS, COL_SIZE, COL_TOPIC, CRC_IMPLEMENTATION, END_CAPACITY, END_CORRUPT,
    END_CRC, END_LENGTH_MISMATCH, END_LIMIT, END_SEGMENT, END_TRUNCATED, END_ZEROS, N_COLS, OK_BLANK, chain_holds,
    find_record_start, first_nonzero_in, gather_be, last_nonzero_in, walk_segment,
)
from .resync import RESYNC_CHAIN, scan_start  # noqa: F401

# ---- constants derived from the construct declaration ----------------------------------------
_V4 = fmt.HEADER_LAYOUTS[(False, False)]
MAGIC_V1 = fmt.MESSAGE_MAGIC_V1 & 0xFFFFFFFF
MAGIC_V2 = fmt.MESSAGE_MAGIC_V2 & 0xFFFFFFFF
POS_MAGIC = _V4.offset_of("magic_code")
POS_BODY_CRC = _V4.offset_of("body_crc")
POS_SYS_FLAG = _V4.offset_of("sys_flag")
POS_PHYS_OFFSET = _V4.offset_of("phys_offset")
BORN_V6 = int(fmt.SysFlag.BORNHOST_V6)
PROPS_LEN = fmt.PROPERTIES_LENGTH.size

CODE_REASONS = {END_ZEROS: StopReason.ZEROS, END_CORRUPT: StopReason.CORRUPT, END_TRUNCATED: StopReason.TRUNCATED, END_LENGTH_MISMATCH: StopReason.LENGTH_MISMATCH,
                END_CRC: StopReason.CRC, END_SEGMENT: StopReason.SEGMENT_END, END_LIMIT: StopReason.LIMIT}


def as_array(buf) -> np.ndarray:
    """A read-only uint8 view of a mapped file's buffer (no copy)."""
    return np.frombuffer(memoryview(buf), dtype=np.uint8)


class SegmentBatch(NamedTuple):
    """Records found in one call: ``rows`` (a view of ``out``), the array they index and its first byte's log offset."""

    base_offset: int
    array: np.ndarray
    rows: np.ndarray


class FastScan:
    """``CommitLog.scan`` on the compiled walk, then ``end``: ``stop_on_crc`` (else ``crc_ok = 0``); ``release_behind`` unmaps
    consumed pages; ``batch_bytes`` sizes batches; ``read_window`` reads through a ``ReadWindow``."""

    def __init__(self, commitlog: CommitLog, start: int | None = None, stop: int | None = None, *, check_crc: bool = True,
                 stop_on_crc: bool = True, batch: int = 1 << 16, batch_bytes: int | None = None, release_behind: bool = False, walker=None,
                 read_window: int = 0):
        self.commitlog = commitlog
        self.release_behind = release_behind  # drop pages already walked from this process (bounded RSS)
        self.start = commitlog.min_offset if start is None else start
        self.stop, self.check_crc, self.stop_on_crc = stop, check_crc, stop_on_crc
        self.out = np.empty((batch, N_COLS), dtype=np.int64)
        self.batch_bytes = batch_bytes
        self.end: ScanEnd | None = None
        self.blanks: list[int] = []
        self.records = 0
        self.walker = walker  # the walk of the segments, once one is walked (a DLedger ``EntryWalker`` keeps its state; given: continued)
        self.read_window = read_window

    def __iter__(self) -> Iterator[SegmentBatch]:
        segments = self.commitlog.segments
        index = self.commitlog.segment_index(self.start)
        if index is None:
            self.end = ScanEnd(self.start, StopReason.NO_SEGMENTS, "no segment holds this offset")
            return
        pos = self.start - segments[index].base_offset
        entry_walker = getattr(self.commitlog, "entry_walker", None)  # DLedger entries (store.dledger)
        if self.walker is None:
            self.walker = entry_walker() if entry_walker else (lambda a, p, s, c, sc, o, base: walk_segment(a, p, s, c, sc, o))
        walk = self.walker
        if entry_walker and self.start > segments[index].base_offset:
            pos = self.commitlog.entry_start(self.start) - segments[index].base_offset
        most = self.out.shape[0]
        rows = most if self.batch_bytes is None else max(most // 8, 1)
        while True:
            seg = segments[index]
            stop = max(0, seg.size if self.stop is None else min(seg.size, self.stop - seg.base_offset))
            with MappedFile(seg.path, seg.base_offset, sequential=True) as mf:
                array = mapped = as_array(mf.buf)
                reads = self.read_window and not entry_walker and pos < mf.size  # DLedger data files: walked mapped
                window = ReadWindow(seg.path, self.read_window, mf.size) if reads else None
                origin = 0  # the segment position of ``array[0]``
                if window is not None:
                    array, origin = window.read(pos)
                released = 0  # pages before this are already dropped (releasing from 0 each time is quadratic)
                ahead = PagesAhead(mf.buf, mapped, pos, stop if window is None else pos)
                try:
                    while True:
                        one = window is not None and array is mapped  # a record that outgrows the window: walked mapped, alone
                        limit = stop - origin if array is mapped else min(stop - origin, array.shape[0])
                        out = self.out[: 1 if one else rows]
                        count, at, code, detail = walk(array, pos - origin, limit, self.check_crc, self.stop_on_crc, out, seg.base_offset)
                        pos = origin + at
                        ahead.at(pos)
                        if count:
                            self.records += count
                            if self.batch_bytes is not None and not one:
                                span = int(self.out[count - 1, COL_POS] + self.out[count - 1, COL_SIZE] - self.out[0, COL_POS])
                                rows = min(most, max(most // 8, 1, self.batch_bytes * count // max(span, 1)))
                            yield SegmentBatch(seg.base_offset + origin, array, self.out[:count])
                            if self.release_behind and array is mapped:
                                release_pages(mf.buf, released, pos)
                                released = pos - pos % mmap.PAGESIZE
                        if window is not None and ((one and code == END_CAPACITY) or window.cut_short(array, at, code, pos < stop)):
                            array, origin = (mapped, 0) if not one and at == 0 else window.read(pos)
                            continue
                        if code != END_CAPACITY:
                            break
                    if code != OK_BLANK:
                        offset = seg.base_offset + pos
                        if code == END_LIMIT and (self.stop is None or offset < self.stop):
                            code = END_SEGMENT  # clipped by the segment end, not by ``stop``
                        reason = getattr(walk, "reason", lambda: "")() or _detail(code, array, pos - origin, detail)
                        self.end = ScanEnd(offset, CODE_REASONS[code], reason, detail if code in (END_LENGTH_MISMATCH, END_CRC) else None)
                        return
                    self.blanks.append(seg.base_offset + pos)
                finally:
                    ahead.close()
                    if window is not None:
                        window.close()
                    del array, mapped
            index += 1
            if index >= len(segments):
                self.end = ScanEnd(seg.base_offset + pos, StopReason.BLANK_LAST, "blank record at the end of the last segment")
                return
            if self.stop is not None and segments[index].base_offset >= self.stop:  # the limit: the next segment is not mapped
                self.end = ScanEnd(segments[index].base_offset, CODE_REASONS[END_LIMIT], "")
                return
            pos = 0


class ReadWindow:
    """A segment read through one ``pread`` buffer, no page tables; a record the window cuts is read again whole."""

    def __init__(self, path, size: int, file_size: int):
        self.path, self.fd = path, open_read_only(path)
        self.buffer = np.empty(size, dtype=np.uint8)
        self.file_size = file_size
        self.array, self.origin = self.buffer[:0], 0

    def read(self, pos: int) -> tuple[np.ndarray, int]:
        """The window at segment position ``pos``: (its bytes, ``pos``)."""
        want = min(self.buffer.shape[0], self.file_size - pos)
        try:
            got = os.preadv(self.fd, [self.buffer[:want]], pos)
        except OSError as exc:  # EIO: a mapped walk's SIGBUS, the same exit 3
            raise BadStoreFile(f"{self.path}: {exc.strerror}") from None
        if got != want:
            raise BadStoreFile(f"{self.path}: file shrank while reading the store")
        self.array, self.origin = self.buffer[:want], pos
        return self.array, pos

    def cut_short(self, array: np.ndarray, at: int, code: int, before_stop: bool) -> bool:
        """Whether a walk of the window ended at ``at`` only because the window ends (a record cut, or its end before stop)."""
        if array is not self.array or self.origin + array.shape[0] >= self.file_size:
            return False
        return code == END_TRUNCATED or (code == END_ZEROS and array.shape[0] - at < 8) or (code == END_LIMIT and before_stop)

    def close(self) -> None:
        os.close(self.fd)


_DETAILS = {END_CRC: "body CRC mismatch", END_ZEROS: "no record written here", END_TRUNCATED: "record runs past the end of the segment"}


def _detail(code: int, array: np.ndarray, pos: int, detail: int) -> str:
    if code == END_LENGTH_MISMATCH:
        return f"total size {detail} disagrees with the record's fields"
    if code != END_CORRUPT:
        return _DETAILS.get(code, "")
    if pos + 8 > array.shape[0]:
        return "record header cut by the segment end"
    size = int.from_bytes(bytes(array[pos : pos + 4]), "big", signed=True)
    magic = int.from_bytes(bytes(array[pos + 4 : pos + 8]), "big")
    if magic in (MAGIC_V1, MAGIC_V2):
        return f"impossible TOTALSIZE {size} (the magic code 0x{magic:08X} is a message's)"
    return f"illegal magic code 0x{magic:08X} or impossible length"


# ---- zero detection and resynchronisation ----------------------------------------------------
ZERO_WINDOW = 1 << 20


def first_nonzero(array: np.ndarray, start: int, stop: int, fd: int | None = None) -> int:
    """Position of the first non-zero byte in ``array[start:stop]``, or -1; with ``fd``, sparse holes are skipped."""
    p = start
    while p < stop:
        if fd is not None:
            try:
                p = max(p, os.lseek(fd, p, os.SEEK_DATA))
            except OSError:  # ENXIO: no data at or after p
                return -1
            if p >= stop:
                return -1
        q = min(stop, p + ZERO_WINDOW)
        found = first_nonzero_in(array, p, q)
        if found >= 0:
            return found
        p = q
    return -1


def data_ranges(fd: int, start: int, stop: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` ranges in ``[start, stop)`` that may hold data (``SEEK_DATA``/``SEEK_HOLE``), else all of it."""
    ranges, pos = [], start
    try:
        while pos < stop:
            lo = os.lseek(fd, pos, os.SEEK_DATA)
            if lo >= stop:
                break
            pos = os.lseek(fd, lo, os.SEEK_HOLE)
            ranges.append((lo, min(pos, stop)))
    except OSError as exc:
        if exc.errno != errno.ENXIO:  # ENXIO: no data after ``pos``
            return [(start, stop)] if start < stop else []
    return ranges


def data_end(fd: int, start: int, stop: int) -> int:
    """The end of the last data range of the file in ``[start, stop)`` (``data_ranges``), else ``start``."""
    ranges = data_ranges(fd, start, stop)
    return ranges[-1][1] if ranges else start


def last_nonzero(array: np.ndarray, start: int, stop: int, fd: int | None = None, buf=None) -> int:
    """Position of the last non-zero byte in ``array[start:stop]``, or -1; ``fd``: no trailing holes read; ``buf``: released."""
    q = stop if fd is None else data_end(fd, start, stop)
    while q > start:
        p = max(start, q - ZERO_WINDOW)
        found = last_nonzero_in(array, p, q)
        release_pages(buf, p, q)
        if found >= 0:
            return found
        q = p
    return -1


class PagesAhead:
    """Maps a map's pages up to ``AHEAD`` bytes ahead of a sequential walk (``at``) in a thread (``_pages.populate``)."""

    AHEAD = 16 << 20
    STEP = 2 << 20

    def __init__(self, buf, array: np.ndarray, start: int, stop: int):
        self.array, self.stop = array, stop
        self.mapped = start
        self.positions: queue.SimpleQueue = queue.SimpleQueue()  # where the walk is; None: stop (read before every step)
        active = isinstance(buf, mmap.mmap) and stop - start > self.STEP
        self.thread = threading.Thread(target=self._map, args=(start,), name="mqtool-pages-ahead", daemon=True) if active else None
        if self.thread is not None:
            self.thread.start()

    def at(self, pos: int) -> None:
        if self.thread is not None and pos + self.AHEAD > self.mapped:
            self.positions.put(pos)

    def close(self) -> None:
        if self.thread is not None:
            self.positions.put(None)
            self.thread.join()
            self.thread = None
        self.array = None  # the map may be closed now

    def _map(self, reached: int) -> None:
        try:  # the lowest priority: only a core the other threads leave idle maps ahead
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (AttributeError, OSError):
            pass
        while self.mapped < self.stop:
            try:  # where the walk is now, without waiting
                while True:
                    pos = self.positions.get_nowait()
                    if pos is None:
                        return
                    reached = max(reached, pos)
            except queue.Empty:
                pass
            # behind the walk (this thread waits for an idle core): never map what it passed, which it may have released
            self.mapped = max(self.mapped, reached)
            if self.mapped >= reached + self.AHEAD:
                pos = self.positions.get()  # far enough ahead: wait for the walk
                if pos is None:
                    return
                reached = max(reached, pos)
                continue
            upto = min(self.stop, self.mapped + self.STEP)
            if not populate(self.array, self.mapped, upto, mmap.PAGESIZE):
                return
            self.mapped = upto


def release_pages(buf, start: int, stop: int) -> None:
    """Drop this process's mapping of the whole pages in ``[start, stop)`` of a read-only map (``MADV_DONTNEED``)."""
    if not isinstance(buf, mmap.mmap):
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = stop - stop % mmap.PAGESIZE
    if last > first:
        try:
            buf.madvise(mmap.MADV_DONTNEED, first, last - first)
        except (AttributeError, OSError, ValueError):
            pass
