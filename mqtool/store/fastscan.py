"""The compiled hot loop: walk commit log records at memory speed (numba + ISA-L CRC32).

``walk_segment`` applies exactly the checks of ``formats.commitlog.decode_record`` (and the
body CRC) to a whole segment in one call, with every field position taken from the layouts
derived from the construct schema. It records where each valid record's parts lie, so callers
gather any fixed-position column with numpy and slice variable fields from the same buffer.
Tests hold it equal to the Python decoder on every fixture record.

CRC32 comes from ISA-L's ``crc32_gzip_refl`` (the ``isal`` package exports it; bit-identical
to zlib's CRC32), called from compiled code through ctypes; zlib's ``crc32`` is the fallback.
Interpreted (``mqtool.jit``), the walk is ``_walk_decoded``: the decoder itself, record by
record, with zlib's CRC32.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import re
from typing import Iterator, NamedTuple

import zlib

from ..jit import external, interpreted, interpreted_as, numba
import numpy as np

from ..formats import commitlog as fmt
from ..formats.errors import FormatError, LengthMismatch, TruncatedRecord
from .commitlog import CommitLog, ScanEnd, StopReason
from .mappedfile import MappedFile
from .words import be32, be64, signed32

# ---- constants derived from the construct declaration (compile-time globals for numba) ------
_V4 = fmt.HEADER_LAYOUTS[(False, False)]
MAGIC_V1 = fmt.MESSAGE_MAGIC_V1 & 0xFFFFFFFF
MAGIC_V2 = fmt.MESSAGE_MAGIC_V2 & 0xFFFFFFFF
MAGIC_BLANK = fmt.BLANK_MAGIC & 0xFFFFFFFF
POS_MAGIC = _V4.offset_of("magic_code")
POS_BODY_CRC = _V4.offset_of("body_crc")
POS_SYS_FLAG = _V4.offset_of("sys_flag")
POS_PHYS_OFFSET = _V4.offset_of("phys_offset")
HEADER_V4 = _V4.size
HOST_V6_EXTRA = fmt.HEADER_LAYOUTS[(True, False)].size - HEADER_V4
BORN_V6 = int(fmt.SysFlag.BORNHOST_V6)
STORE_V6 = int(fmt.SysFlag.STOREHOST_V6)
TOPIC_LEN_V1 = fmt.TOPIC_LENGTH[fmt.MESSAGE_MAGIC_V1].size
TOPIC_LEN_V2 = fmt.TOPIC_LENGTH[fmt.MESSAGE_MAGIC_V2].size
PROPS_LEN = fmt.PROPERTIES_LENGTH.size
assert HOST_V6_EXTRA == fmt.HEADER_LAYOUTS[(False, True)].size - HEADER_V4 == 12

# ---- walk result codes -----------------------------------------------------------------------
OK_BLANK = 0  # a blank record: the segment ends here
END_ZEROS = 1
END_CORRUPT = 2
END_TRUNCATED = 3
END_LENGTH_MISMATCH = 4
END_CRC = 5
END_SEGMENT = 6  # a record ended exactly at the end of the buffer
END_LIMIT = 7  # reached ``stop``
END_CAPACITY = 8  # the output arrays are full; call again from the returned position
CODE_REASONS = {
    END_ZEROS: StopReason.ZEROS,
    END_CORRUPT: StopReason.CORRUPT,
    END_TRUNCATED: StopReason.TRUNCATED,
    END_LENGTH_MISMATCH: StopReason.LENGTH_MISMATCH,
    END_CRC: StopReason.CRC,
    END_SEGMENT: StopReason.SEGMENT_END,
    END_LIMIT: StopReason.LIMIT,
}

# Columns of the ``out`` array, one row per valid record (positions are buffer positions).
COL_POS, COL_SIZE, COL_BODY, COL_BODY_LEN, COL_TOPIC, COL_PROPS, COL_CRC_OK = range(7)
N_COLS = 7


def _crc_symbol() -> str:
    """Address of ISA-L's CRC32 if the ``isal`` extension exports it, else zlib's (same result).

    The symbol is registered with LLVM under a fixed name so compiled code links to it by
    name, which lets numba cache the compiled walk on disk.
    """
    try:
        from isal import isal_zlib

        fn = ctypes.CDLL(isal_zlib.__file__).crc32_gzip_refl
        name = "isal"
    except (ImportError, OSError, AttributeError):
        from ctypes.util import find_library  # here: it loads tempfile, which interpreted kernels need not

        fn = ctypes.CDLL(find_library("z") or "libz.so.1").crc32
        name = "zlib"
    from llvmlite import binding as llvm_binding

    llvm_binding.add_symbol("mqtool_crc32", ctypes.cast(fn, ctypes.c_void_p).value)
    return name


def _crc32_at(crc: int, address: int, length: int) -> int:
    """``mqtool_crc32`` for interpreted kernels: zlib's CRC32 of ``length`` bytes at ``address``."""
    return zlib.crc32(ctypes.string_at(int(address), int(length)), int(crc))


CRC_IMPLEMENTATION = "zlib" if interpreted() else _crc_symbol()
_crc32 = external("mqtool_crc32", lambda types: types.uint32(types.uint32, types.voidptr, types.uint32), python=_crc32_at)


def _walk_decoded(buf, pos, stop, check_crc, stop_on_crc, out):
    """``walk_segment`` on the schema's decoder (``formats.commitlog.decode_record`` makes the same
    checks in the same order) and zlib's CRC, for interpreted kernels."""
    view = memoryview(buf)  # decoded faster than from the array (its slices are cheaper)
    end, count, capacity = buf.shape[0], 0, out.shape[0]
    while True:
        if pos >= stop:
            return count, pos, END_LIMIT, 0
        if pos >= end:
            return count, pos, END_SEGMENT, 0
        if count >= capacity:
            return count, pos, END_CAPACITY, 0
        try:
            record = fmt.decode_record(view, pos, 0, end)
        except FormatError as exc:
            if not buf[pos : pos + 8].any():
                return count, pos, END_ZEROS, 0
            if isinstance(exc, LengthMismatch):
                return count, pos, END_LENGTH_MISMATCH, exc.total_size
            return count, pos, END_TRUNCATED if isinstance(exc, TruncatedRecord) else END_CORRUPT, 0
        if record.magic_code == fmt.BLANK_MAGIC:
            return count, pos, OK_BLANK, record.total_size
        crc_ok = -1
        if check_crc:
            crc_ok = 1 if record.crc_ok() else 0
            if not crc_ok and stop_on_crc:
                return count, pos, END_CRC, record.total_size
        body = pos + fmt.header_size(record.sys_flag)
        topic = body + max(record.body_length, 0) + (TOPIC_LEN_V2 if record.magic_code == fmt.MESSAGE_MAGIC_V2 else TOPIC_LEN_V1)
        out[count] = (pos, record.total_size, body, record.body_length, topic, topic + record.topic_length + PROPS_LEN, crc_ok)
        count += 1
        pos += record.total_size


@interpreted_as(_walk_decoded)
@numba.njit(cache=True, nogil=True)
def walk_segment(buf, pos, stop, check_crc, stop_on_crc, out):
    """Walk records from ``pos`` while ``pos < stop``; fill ``out`` rows for valid records.

    Returns ``(count, pos, code, detail)``: ``pos`` is where the walk ended (the record that
    failed, the blank, or ``stop``); ``detail`` is the TOTALSIZE for a length mismatch or a
    bad-CRC record, the computed CRC's stored value otherwise 0.
    """
    end = buf.shape[0]
    base_ptr = buf.ctypes.data
    count = 0
    capacity = out.shape[0]
    while True:
        if pos >= stop:
            return count, pos, END_LIMIT, 0
        if pos >= end:
            return count, pos, END_SEGMENT, 0
        if count >= capacity:
            return count, pos, END_CAPACITY, 0
        if end - pos < 8:
            zero = True
            for i in range(pos, end):
                if buf[i] != 0:
                    zero = False
            return count, pos, END_ZEROS if zero else END_TRUNCATED, 0
        total = signed32(be32(buf, pos))
        magic = be32(buf, pos + POS_MAGIC)
        if magic == MAGIC_BLANK:
            return count, pos, OK_BLANK, total
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            if total == 0 and magic == 0:
                return count, pos, END_ZEROS, 0
            return count, pos, END_CORRUPT, 0
        if total <= 0:
            return count, pos, END_CORRUPT, 0
        if end - pos < POS_SYS_FLAG + 4:
            return count, pos, END_TRUNCATED, 0
        flags = buf[pos + POS_SYS_FLAG + 3]
        header = HEADER_V4
        if flags & BORN_V6:
            header += HOST_V6_EXTRA
        if flags & STORE_V6:
            header += HOST_V6_EXTRA
        if pos + header > end:
            return count, pos, END_TRUNCATED, 0
        body_len = signed32(be32(buf, pos + header - 4))
        if body_len > total:
            return count, pos, END_CORRUPT, 0
        body = pos + header
        body_end = body + (body_len if body_len > 0 else 0)
        tl_size = TOPIC_LEN_V2 if magic == MAGIC_V2 else TOPIC_LEN_V1
        if body_end + tl_size > end:
            return count, pos, END_TRUNCATED, 0
        if tl_size == 1:
            topic_len = np.int64(buf[body_end])
            if topic_len >= 128:
                topic_len -= 256
        else:
            topic_len = (np.int64(buf[body_end]) << 8) | np.int64(buf[body_end + 1])
            if topic_len >= 32768:
                topic_len -= 65536
        if topic_len < 0 or topic_len > total:
            return count, pos, END_CORRUPT, 0
        topic = body_end + tl_size
        props = topic + topic_len + PROPS_LEN
        if props > end:
            return count, pos, END_TRUNCATED, 0
        props_len = (np.int64(buf[props - 2]) << 8) | np.int64(buf[props - 1])
        if props_len >= 32768:
            props_len -= 65536
        if props_len > total:
            return count, pos, END_CORRUPT, 0
        props_end = props + (props_len if props_len > 0 else 0)
        if props_end > end:
            return count, pos, END_TRUNCATED, 0
        if props_end - pos != total:
            return count, pos, END_LENGTH_MISMATCH, total
        crc_ok = -1
        if check_crc:
            crc_ok = 1
            if body_len > 0:
                stored = be32(buf, pos + POS_BODY_CRC)
                if (_crc32(np.uint32(0), base_ptr + body, np.uint32(body_len)) & 0x7FFFFFFF) != stored:
                    if stop_on_crc:
                        return count, pos, END_CRC, total
                    crc_ok = 0
        row = out[count]
        row[COL_POS] = pos
        row[COL_SIZE] = total
        row[COL_BODY] = body
        row[COL_BODY_LEN] = body_len
        row[COL_TOPIC] = topic
        row[COL_PROPS] = props
        row[COL_CRC_OK] = crc_ok
        count += 1
        pos = props_end


def _gather_be_numpy(buf, positions, delta, width, signed):
    """``gather_be`` by whole-array operations (interpreted kernels)."""
    at = np.asarray(positions, dtype=np.int64) + delta
    result = np.zeros(at.shape[0], dtype=np.int64)
    for j in range(width):
        result = (result << 8) | buf[at + j]
    if signed and width < 8:
        result = np.where(result >= (1 << (8 * width - 1)), result - (1 << (8 * width)), result)
    return result


@interpreted_as(_gather_be_numpy)
@numba.njit(cache=True, nogil=True)
def gather_be(buf, positions, delta, width, signed):
    """Big-endian integers of ``width`` bytes at ``positions + delta`` (one column)."""
    n = positions.shape[0]
    result = np.empty(n, dtype=np.int64)
    for i in range(n):
        p = positions[i] + delta
        v = np.int64(0)
        for j in range(width):
            v = (v << 8) | np.int64(buf[p + j])
        if signed and width < 8 and v >= (np.int64(1) << (8 * width - 1)):
            v -= np.int64(1) << (8 * width)
        result[i] = v
    return result


def as_array(buf) -> np.ndarray:
    """A read-only uint8 view of a mapped file's buffer (no copy)."""
    if isinstance(buf, mmap.mmap):
        return np.frombuffer(buf, dtype=np.uint8)
    return np.frombuffer(memoryview(buf), dtype=np.uint8)


class SegmentBatch(NamedTuple):
    """Valid records found in one call: ``rows`` (a view of ``out``), the segment's array."""

    base_offset: int
    array: np.ndarray
    rows: np.ndarray


class FastScan:
    """``CommitLog.scan`` on the compiled walk: yields ``SegmentBatch`` es, then sets ``end``.

    With ``stop_on_crc`` (the broker's recovery) a CRC failure ends the scan; without it the
    batch rows carry ``crc_ok = 0`` and the walk continues (verification). ``release_behind``
    unmaps pages once their batch is consumed, so the resident size stays flat on 1 GiB segments
    (rows of earlier batches stay readable: their pages fault back in from the page cache).
    ``batch_bytes``: batches after the first hold about that many bytes of records, between
    ``batch // 8`` rows (the first batch's) and ``batch`` (few records per call on small records
    is per-call overhead for the consumer; many on large ones, resident pages).
    """

    def __init__(self, commitlog: CommitLog, start: int | None = None, stop: int | None = None, *, check_crc: bool = True, stop_on_crc: bool = True, batch: int = 1 << 16, batch_bytes: int | None = None, release_behind: bool = False):
        self.commitlog = commitlog
        self.release_behind = release_behind  # drop pages already walked from this process (bounded RSS)
        self.start = commitlog.min_offset if start is None else start
        self.stop = stop
        self.check_crc = check_crc
        self.stop_on_crc = stop_on_crc
        self.out = np.empty((batch, N_COLS), dtype=np.int64)
        self.batch_bytes = batch_bytes
        self.end: ScanEnd | None = None
        self.blanks: list[int] = []
        self.records = 0

    def __iter__(self) -> Iterator[SegmentBatch]:
        segments = self.commitlog.segments
        index = self.commitlog.segment_index(self.start)
        if index is None:
            self.end = ScanEnd(self.start, StopReason.NO_SEGMENTS, "no segment holds this offset")
            return
        pos = self.start - segments[index].base_offset
        entry_walker = getattr(self.commitlog, "entry_walker", None)  # DLedger entries (store.dledger)
        walk = self.walker = entry_walker() if entry_walker else (lambda a, p, s, c, sc, o, base: walk_segment(a, p, s, c, sc, o))
        if entry_walker and self.start > segments[index].base_offset:
            pos = self.commitlog.entry_start(self.start) - segments[index].base_offset
        most = self.out.shape[0]
        rows = most if self.batch_bytes is None else max(most // 8, 1)
        while True:
            seg = segments[index]
            stop = seg.size if self.stop is None else min(seg.size, self.stop - seg.base_offset)
            with MappedFile(seg.path, seg.base_offset, sequential=True) as mf:
                array = as_array(mf.buf)
                released = 0  # pages before this are already dropped (releasing from 0 each time is quadratic)
                try:
                    while True:
                        count, pos, code, detail = walk(array, pos, max(stop, 0), self.check_crc, self.stop_on_crc, self.out[:rows], seg.base_offset)
                        if count:
                            self.records += count
                            if self.batch_bytes is not None:
                                span = int(self.out[count - 1, COL_POS] + self.out[count - 1, COL_SIZE] - self.out[0, COL_POS])
                                rows = min(most, max(most // 8, 1, self.batch_bytes * count // max(span, 1)))
                            yield SegmentBatch(seg.base_offset, array, self.out[:count])
                            if self.release_behind:
                                release_pages(mf.buf, released, pos)
                                released = pos - pos % mmap.PAGESIZE
                        if code != END_CAPACITY:
                            break
                    if code != OK_BLANK:
                        offset = seg.base_offset + pos
                        if code == END_LIMIT and (self.stop is None or offset < self.stop):
                            code = END_SEGMENT  # clipped by the segment end, not by ``stop``
                        reason = getattr(walk, "reason", lambda: "")() or _detail(code, array, pos, detail)
                        self.end = ScanEnd(offset, CODE_REASONS[code], reason, detail if code in (END_LENGTH_MISMATCH, END_CRC) else None)
                        return
                    self.blanks.append(seg.base_offset + pos)
                finally:
                    del array
            index += 1
            if index >= len(segments):
                self.end = ScanEnd(seg.base_offset + pos, StopReason.BLANK_LAST, "blank record at the end of the last segment")
                return
            if self.stop is not None and segments[index].base_offset >= self.stop:  # the limit: the next segment is not mapped
                self.end = ScanEnd(segments[index].base_offset, CODE_REASONS[END_LIMIT], "")
                return
            pos = 0


def _detail(code: int, array: np.ndarray, pos: int, detail: int) -> str:
    if code == END_LENGTH_MISMATCH:
        return f"total size {detail} disagrees with the record's fields"
    if code == END_CRC:
        return "body CRC mismatch"
    if code == END_CORRUPT:
        if pos + 8 > array.shape[0]:
            return "record header cut by the segment end"
        size = int.from_bytes(bytes(array[pos : pos + 4]), "big", signed=True)
        magic = int.from_bytes(bytes(array[pos + 4 : pos + 8]), "big")
        if magic in (MAGIC_V1, MAGIC_V2):
            return f"impossible TOTALSIZE {size} (the magic code 0x{magic:08X} is a message's)"
        return f"illegal magic code 0x{magic:08X} or impossible length"
    if code == END_ZEROS:
        return "no record written here"
    if code == END_TRUNCATED:
        return "record runs past the end of the segment"
    return ""


# ---- resynchronisation and zero detection (used by ``mqtool verify``) ----------------------


@numba.njit(cache=True, nogil=True)
def chain_holds(buf, p, base, chain, scratch):
    """True when ``walk_segment`` accepts the record at ``p``, its PHYSICALOFFSET equals
    ``base + p`` (the record describes its own position), and so do the records after it: ``chain``
    records in all, or fewer when the chain meets a blank record, zeros or the buffer end."""
    end = buf.shape[0]
    q = p
    for i in range(chain):
        if q >= end:
            return i > 0
        if i > 0 and end - q >= 8 and be32(buf, q + POS_MAGIC) == MAGIC_BLANK:
            return True
        count, nxt, code, _ = walk_segment(buf, q, q + 1, False, False, scratch)
        if count != 1:
            return i > 0 and (code == END_ZEROS or code == END_SEGMENT)
        if be64(buf, q + POS_PHYS_OFFSET) != base + q:
            return False
        q = nxt
    return True


_MAGICS = re.compile(rb"\xda\xa3\x20[\xa7\xab]|" + re.escape(MAGIC_BLANK.to_bytes(4, "big")))  # V1, V2 and the blank's


def _find_record_start_re(buf, start, stop, base, chain, scratch):
    """``find_record_start`` with the magic codes found by a regular expression (interpreted kernels)."""
    end = buf.shape[0]
    limit = min(stop, end - 8 + 1)
    for found in _MAGICS.finditer(buf, start + 4, max(limit + 7, start + 4)):
        p = found.start() - 4
        if p >= limit:
            break
        if buf[p + 4] == 0xDA:
            if chain_holds(buf, p, base, chain, scratch):
                return p
        elif signed32(be32(buf, p)) == end - p:
            return p
    return -1


@interpreted_as(_find_record_start_re)
@numba.njit(cache=True, nogil=True)
def find_record_start(buf, start, stop, base, chain, scratch):
    """The first position in ``[start, stop)`` where the commit log can be resumed after damage:
    a message record whose magic, size chain and self-describing PHYSICALOFFSET agree
    (``chain_holds``), or an end-of-file blank whose TOTALSIZE is exactly the bytes left (as the
    broker writes it). Both magics share the prefix ``DA A3 20``. Returns -1 when there is none.
    ``scratch`` is a one-row array shaped like ``walk_segment``'s ``out``."""
    end = buf.shape[0]
    limit = min(stop, end - 8 + 1)
    blank0 = (MAGIC_BLANK >> 24) & 0xFF
    for p in range(start, limit):
        b = buf[p + 4]
        if b == 0xDA:
            if buf[p + 5] == 0xA3 and buf[p + 6] == 0x20 and (buf[p + 7] == 0xA7 or buf[p + 7] == 0xAB):
                if chain_holds(buf, p, base, chain, scratch):
                    return p
        elif b == blank0:
            if be32(buf, p + POS_MAGIC) == MAGIC_BLANK and signed32(be32(buf, p)) == end - p:
                return p
    return -1


def _first_nonzero_numpy(buf, start, stop):
    """``_first_nonzero_in`` by one comparison and ``argmax``, which stops at the first True
    (interpreted kernels)."""
    nonzero = buf[start:stop] != 0
    at = int(np.argmax(nonzero)) if nonzero.shape[0] else 0
    return start + at if nonzero.shape[0] and nonzero[at] else -1


def _last_nonzero_numpy(buf, start, stop):
    """``_last_nonzero_in`` as ``_first_nonzero_numpy``, from the end (interpreted kernels)."""
    nonzero = buf[start:stop][::-1] != 0
    at = int(np.argmax(nonzero)) if nonzero.shape[0] else 0
    return stop - 1 - at if nonzero.shape[0] and nonzero[at] else -1


@interpreted_as(_first_nonzero_numpy)
@numba.njit(cache=True, nogil=True)
def _first_nonzero_in(buf, start, stop):
    for p in range(start, stop):
        if buf[p] != 0:
            return p
    return -1


@interpreted_as(_last_nonzero_numpy)
@numba.njit(cache=True, nogil=True)
def _last_nonzero_in(buf, start, stop):
    for p in range(stop - 1, start - 1, -1):
        if buf[p] != 0:
            return p
    return -1


ZERO_WINDOW = 1 << 20


def first_nonzero(array: np.ndarray, start: int, stop: int, fd: int | None = None) -> int:
    """Position of the first non-zero byte in ``array[start:stop]``, or -1.

    Scans 1 MiB windows with numpy (memory speed); with the file's descriptor, holes of a
    sparse file (``SEEK_DATA``) are skipped without reading them.
    """
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
        if array[p:q].any():
            return _first_nonzero_in(array, p, q)
        p = q
    return -1


def data_end(fd: int, start: int, stop: int) -> int:
    """The end of the last data extent of the file in ``[start, stop)`` (``SEEK_DATA`` and
    ``SEEK_HOLE``): bytes after it are a hole, zeros never written. ``start`` when there is no
    data; ``stop`` where the file system keeps no holes (or cannot say)."""
    end, p = start, start
    try:
        while p < stop:
            p = os.lseek(fd, p, os.SEEK_DATA)
            if p >= stop:
                break
            p = os.lseek(fd, p, os.SEEK_HOLE)
            end = min(p, stop)
    except OSError as exc:
        return end if exc.errno == errno.ENXIO else stop  # ENXIO: no data after ``p``
    return end


def last_nonzero(array: np.ndarray, start: int, stop: int, fd: int | None = None) -> int:
    """Position of the last non-zero byte in ``array[start:stop]``, or -1; with the file's
    descriptor, the holes of a sparse file after its last data (``data_end``) are not read."""
    q = stop if fd is None else data_end(fd, start, stop)
    while q > start:
        p = max(start, q - ZERO_WINDOW)
        if array[p:q].any():
            return _last_nonzero_in(array, p, q)
        q = p
    return -1


def release_pages(buf, start: int, stop: int) -> None:
    """Drop this process's mapping of the whole pages inside ``[start, stop)`` of a read-only
    map (``MADV_DONTNEED``): the resident size shrinks, the page cache keeps the data and a
    later access faults it back in. Does nothing where madvise is unavailable."""
    if not isinstance(buf, mmap.mmap):
        return
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = stop - stop % mmap.PAGESIZE
    if last > first:
        try:
            buf.madvise(mmap.MADV_DONTNEED, first, last - first)
        except (AttributeError, OSError, ValueError):
            pass


RESYNC_CHAIN = 3  # records that must chain after a resynchronisation candidate


def scan_start(commitlog: CommitLog, offset: int, chain: int = RESYNC_CHAIN) -> int:
    """Where a scan asked to begin at ``offset`` begins: ``offset`` when a valid record (or an
    end-of-file blank) starts there, otherwise the next position where the log can be resumed
    (``find_record_start``: magic, size chain and self-describing PHYSICALOFFSET agree), the
    next segment's start when the rest of this segment holds none. The one resynchronisation
    of ``dump --from-offset``, ``verify --from-offset`` and version detection past damage.
    Returns ``offset`` itself when no segment holds it or nothing after it can be resumed."""
    index = commitlog.segment_index(offset)
    if index is None:
        return offset
    scratch = np.empty((1, N_COLS), dtype=np.int64)
    for i in range(index, len(commitlog.segments)):
        seg = commitlog.segments[i]
        pos = offset - seg.base_offset if i == index else 0
        with MappedFile(seg.path, seg.base_offset) as mf:
            array = as_array(mf.buf)
            try:
                count, _, code, _ = walk_segment(array, pos, pos + 1, False, False, scratch)
                if count == 1 or code == OK_BLANK:
                    return seg.base_offset + pos
                found = find_record_start(array, pos, array.shape[0], seg.base_offset, chain, scratch)
            finally:
                del array
        if found >= 0:
            return seg.base_offset + found
    return offset
