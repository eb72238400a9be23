"""Compiled kernels of ``store/fastscan.py``: the commit log walk, the one resynchronisation after
damage (records or DLedger entries), column gathers and zero scans.

Field positions come from the layouts derived from the construct schemas (``formats.commitlog``,
``formats.dledger``). The body CRC is ISA-L's ``crc32_gzip_refl`` (the ``isal`` package's shared
object; bit-identical to zlib's CRC32), or zlib's ``crc32`` without it: its address is taken with
ctypes at import and called through a C function pointer inside the ``nogil`` loops.
"""

import ctypes

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t, uintptr_t

from mqtool.store._bytes cimport be32, be64, has_byte, load8, prefetch_r, signed32

from ..formats import commitlog as fmt
from ..formats import dledger as dfmt

# ---- constants derived from the construct declarations -------------------------------------
_V4 = fmt.HEADER_LAYOUTS[(False, False)]
cdef int64_t MAGIC_V1 = fmt.MESSAGE_MAGIC_V1 & 0xFFFFFFFF, MAGIC_V2 = fmt.MESSAGE_MAGIC_V2 & 0xFFFFFFFF
cdef int64_t MAGIC_BLANK = fmt.BLANK_MAGIC & 0xFFFFFFFF
cdef Py_ssize_t POS_MAGIC = _V4.offset_of("magic_code"), POS_BODY_CRC = _V4.offset_of("body_crc")
cdef Py_ssize_t POS_SYS_FLAG = _V4.offset_of("sys_flag"), POS_PHYS = _V4.offset_of("phys_offset")
cdef Py_ssize_t HEADER_V4 = _V4.size, HOST_V6_EXTRA = fmt.HEADER_LAYOUTS[(True, False)].size - _V4.size
assert HOST_V6_EXTRA == fmt.HEADER_LAYOUTS[(False, True)].size - HEADER_V4 == 12  # either host
cdef int BORN_V6 = int(fmt.SysFlag.BORNHOST_V6), STORE_V6 = int(fmt.SysFlag.STOREHOST_V6)
cdef Py_ssize_t TOPIC_LEN_V1 = fmt.TOPIC_LENGTH[fmt.MESSAGE_MAGIC_V1].size, TOPIC_LEN_V2 = fmt.TOPIC_LENGTH[fmt.MESSAGE_MAGIC_V2].size
cdef Py_ssize_t PROPS_LEN = fmt.PROPERTIES_LENGTH.size
_E = dfmt.ENTRY_HEADER_LAYOUT
cdef Py_ssize_t ENTRY_HEADER = dfmt.ENTRY_HEADER_SIZE, ENTRY_POS_SIZE = _E.offset_of("size")
cdef Py_ssize_t ENTRY_POS_POS = _E.offset_of("pos"), ENTRY_POS_BODY_SIZE = _E.offset_of("body_size")
cdef int64_t ENTRY_MAGIC = dfmt.ENTRY_MAGIC & 0xFFFFFFFF, ENTRY_BLANK = dfmt.BLANK_MAGIC & 0xFFFFFFFF
assert _E.offset_of("magic") == 0 and 0 < ENTRY_MAGIC < 0x100 and ENTRY_BLANK & 0xFF == 0xFF  # the last magic byte tells them
assert MAGIC_V1 >> 8 == MAGIC_V2 >> 8 and MAGIC_V1 >> 24 != MAGIC_BLANK >> 24  # the first magic byte tells them

# ---- the body CRC ----------------------------------------------------------------------------
ctypedef uint32_t (*isal_crc_t)(uint32_t, const uint8_t*, uint64_t) noexcept nogil
ctypedef unsigned long (*zlib_crc_t)(unsigned long, const uint8_t*, unsigned int) noexcept nogil
cdef isal_crc_t isal_crc = NULL
cdef zlib_crc_t zlib_crc = NULL


def _crc_function():
    """ISA-L's CRC32 if the ``isal`` extension exports it, else zlib's (same result)."""
    try:
        from isal import isal_zlib

        return "isal", ctypes.CDLL(isal_zlib.__file__).crc32_gzip_refl
    except (ImportError, OSError, AttributeError):
        from ctypes.util import find_library

        return "zlib", ctypes.CDLL(find_library("z") or "libz.so.1").crc32


CRC_IMPLEMENTATION, _CRC_FUNCTION = _crc_function()
CRC_ADDRESS = ctypes.cast(_CRC_FUNCTION, ctypes.c_void_p).value
if CRC_IMPLEMENTATION == "isal":
    isal_crc = <isal_crc_t><uintptr_t>CRC_ADDRESS
else:
    zlib_crc = <zlib_crc_t><uintptr_t>CRC_ADDRESS


cdef inline uint32_t crc32(const uint8_t* p, Py_ssize_t n) noexcept nogil:
    if isal_crc != NULL:
        return isal_crc(0, p, <uint64_t>n)
    return <uint32_t>zlib_crc(0, p, <unsigned int>n)


cdef enum:
    PREFETCH_DISTANCE = 8192  # bytes past the record being walked asked for ahead: the loads of the next
                              # headers no longer wait for memory (a tenth of the walk's time on 1 KiB records)

# ---- the walk --------------------------------------------------------------------------------
cdef inline Walk _ended(Py_ssize_t count, Py_ssize_t pos, int code, int64_t detail) noexcept nogil:
    cdef Walk w
    w.count, w.pos, w.code, w.detail = count, pos, code, detail
    return w


cdef Walk walk_records(const uint8_t* b, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t stop, bint check_crc, bint stop_on_crc, int64_t* out, Py_ssize_t capacity) noexcept nogil:
    """``walk_segment`` on a raw buffer of ``end`` bytes and ``capacity`` rows of ``N_COLS``."""
    cdef Py_ssize_t count = 0, i, header, body, body_end, tl_size, topic, props, props_end
    cdef int64_t total, magic, body_len, topic_len, props_len, crc_ok, crc
    cdef Py_ssize_t ahead, fetched = pos
    cdef bint zero
    cdef int64_t* row
    while True:
        if pos >= stop:
            return _ended(count, pos, END_LIMIT, 0)
        if pos >= end:
            return _ended(count, pos, END_SEGMENT, 0)
        if count >= capacity:
            return _ended(count, pos, END_CAPACITY, 0)
        if end - pos < 8:
            zero = True
            for i in range(pos, end):
                if b[i] != 0:
                    zero = False
            return _ended(count, pos, END_ZEROS if zero else END_TRUNCATED, 0)
        total = signed32(be32(b, pos))
        magic = be32(b, pos + POS_MAGIC)
        if magic == MAGIC_BLANK:
            return _ended(count, pos, OK_BLANK, total)
        if magic != MAGIC_V1 and magic != MAGIC_V2:
            if total == 0 and magic == 0:
                return _ended(count, pos, END_ZEROS, 0)
            return _ended(count, pos, END_CORRUPT, 0)
        if total <= 0:
            return _ended(count, pos, END_CORRUPT, 0)
        if end - pos < POS_SYS_FLAG + 4:
            return _ended(count, pos, END_TRUNCATED, 0)
        header = HEADER_V4
        if b[pos + POS_SYS_FLAG + 3] & BORN_V6:
            header += HOST_V6_EXTRA
        if b[pos + POS_SYS_FLAG + 3] & STORE_V6:
            header += HOST_V6_EXTRA
        if pos + header > end:
            return _ended(count, pos, END_TRUNCATED, 0)
        body_len = signed32(be32(b, pos + header - 4))
        if body_len > total:
            return _ended(count, pos, END_CORRUPT, 0)
        body = pos + header
        body_end = body + (body_len if body_len > 0 else 0)
        tl_size = TOPIC_LEN_V2 if magic == MAGIC_V2 else TOPIC_LEN_V1
        if body_end + tl_size > end:
            return _ended(count, pos, END_TRUNCATED, 0)
        if capacity > 1:  # a walk of many records: the bytes a little ahead fetched while this body is read
            ahead = pos + (total if total < PREFETCH_DISTANCE else PREFETCH_DISTANCE) + PREFETCH_DISTANCE
            if ahead > end:
                ahead = end
            while fetched < ahead:
                prefetch_r(b + fetched)
                fetched += 64
        crc = 0
        if check_crc and body_len > 0:
            crc = crc32(b + body, body_len) & 0x7FFFFFFF  # judged below, in the order of the checks
        if tl_size == 1:
            topic_len = <int64_t>b[body_end]
            if topic_len >= 128:
                topic_len -= 256
        else:
            topic_len = (<int64_t>b[body_end] << 8) | b[body_end + 1]
            if topic_len >= 32768:
                topic_len -= 65536
        if topic_len < 0 or topic_len > total:
            return _ended(count, pos, END_CORRUPT, 0)
        topic = body_end + tl_size
        props = topic + topic_len + PROPS_LEN
        if props > end:
            return _ended(count, pos, END_TRUNCATED, 0)
        props_len = (<int64_t>b[props - 2] << 8) | b[props - 1]
        if props_len >= 32768:
            props_len -= 65536
        if props_len > total:
            return _ended(count, pos, END_CORRUPT, 0)
        props_end = props + (props_len if props_len > 0 else 0)
        if props_end > end:
            return _ended(count, pos, END_TRUNCATED, 0)
        crc_ok = -1
        if check_crc:  # before the length: checkMessageAndReturnSize checks the body CRC as it reads the body (reference §3.1 steps 5, 9)
            crc_ok = 1
            if body_len > 0 and crc != be32(b, pos + POS_BODY_CRC):
                if stop_on_crc:
                    return _ended(count, pos, END_CRC, total)
                crc_ok = 0
        if props_end - pos != total:
            return _ended(count, pos, END_LENGTH_MISMATCH, total)
        row = out + count * N_COLS
        row[COL_POS] = pos
        row[COL_SIZE] = total
        row[COL_BODY] = body
        row[COL_BODY_LEN] = body_len
        row[COL_TOPIC] = topic
        row[COL_PROPS] = props
        row[COL_CRC_OK] = crc_ok
        count += 1
        pos = props_end


def walk_segment(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t stop, bint check_crc, bint stop_on_crc, int64_t[:, ::1] out):
    """Walk records from ``pos`` while ``pos < stop``, applying exactly the checks of
    ``formats.commitlog.decode_record`` (``CommitLog.checkMessageAndReturnSize``) and the body CRC;
    fill ``out`` rows for valid records.

    Returns ``(count, pos, code, detail)``: ``pos`` is where the walk ended (the record that
    failed, the blank, or ``stop``); ``detail`` is the TOTALSIZE for a blank, a length mismatch or
    a bad-CRC record, otherwise 0.
    """
    cdef Walk w
    with nogil:
        w = walk_records(&buf[0], buf.shape[0], pos, stop, check_crc, stop_on_crc, &out[0, 0], out.shape[0])
    return w.count, w.pos, w.code, w.detail


# ---- the resynchronisation -------------------------------------------------------------------
cdef bint chain_holds_at(const uint8_t* b, Py_ssize_t end, Py_ssize_t p, int64_t base, Py_ssize_t chain, bint lenient) noexcept nogil:
    cdef int64_t row[N_COLS]
    cdef Py_ssize_t i, q = p
    cdef Walk w
    for i in range(chain):
        if q >= end:
            return i > 0
        if i > 0 and end - q >= 8 and be32(b, q + POS_MAGIC) == MAGIC_BLANK:
            return True
        w = walk_records(b, end, q, q + 1, False, False, row, 1)
        if w.count != 1:
            return i > 0 and (lenient or w.code == END_ZEROS or w.code == END_SEGMENT)
        if be64(b, q + POS_PHYS) != base + q:
            return False
        q = w.pos
    return True


def chain_holds(const uint8_t[::1] buf, Py_ssize_t p, int64_t base, Py_ssize_t chain):
    """True when ``walk_segment`` accepts the record at ``p``, its PHYSICALOFFSET equals
    ``base + p`` (the record describes its own position), and so do the records after it: ``chain``
    records in all, or fewer when the chain meets a blank record, zeros or the buffer end."""
    cdef bint holds
    with nogil:
        holds = chain_holds_at(&buf[0], buf.shape[0], p, base, chain, False)
    return holds


cdef Py_ssize_t resync(const uint8_t* b, Py_ssize_t end, Py_ssize_t start, Py_ssize_t stop, int64_t base, Py_ssize_t chain, bint entries, bint v2, bint blanks, bint lenient) noexcept nogil:
    cdef Py_ssize_t p = start, limit = min(stop, end - 8 + 1)
    cdef Py_ssize_t key = 3 if entries else POS_MAGIC  # the magic byte that tells a message from a blank
    cdef uint8_t message = ENTRY_MAGIC if entries else MAGIC_V1 >> 24
    cdef uint8_t blank = 0xFF if entries else MAGIC_BLANK >> 24
    cdef int64_t magic, size
    if not blanks:
        blank = message
    while p < limit:
        while p + 8 <= limit:  # a word of key bytes (``p + key + 8 <= end``) with neither: eight candidates fail
            if has_byte(load8(b, p + key), message) or has_byte(load8(b, p + key), blank):
                break
            p += 8
        if p >= limit:
            break
        if b[p + key] == message:
            if entries:
                if be32(b, p) == ENTRY_MAGIC and p + ENTRY_HEADER <= end and be64(b, p + ENTRY_POS_POS) == base + p:
                    size = signed32(be32(b, p + ENTRY_POS_SIZE))
                    if size > ENTRY_HEADER - 4 and size == signed32(be32(b, p + ENTRY_POS_BODY_SIZE)) + ENTRY_HEADER:
                        return p
            else:
                magic = be32(b, p + POS_MAGIC)
                if magic == MAGIC_V1 or (v2 and magic == MAGIC_V2):
                    if chain == 0:
                        if p + POS_PHYS + 8 <= end and be64(b, p + POS_PHYS) == base + p:
                            return p
                    elif chain_holds_at(b, end, p, base, chain, lenient):
                        return p
        elif blanks and b[p + key] == blank:
            if entries:
                if be32(b, p) == ENTRY_BLANK and signed32(be32(b, p + ENTRY_POS_SIZE)) == end - p:
                    return p
            elif be32(b, p + POS_MAGIC) == MAGIC_BLANK and signed32(be32(b, p)) == end - p:
                return p
        p += 1
    return -1


def find_record_start(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t stop, int64_t base, Py_ssize_t chain, *, bint entries=False, bint v2=True, bint blanks=True, bint lenient=False):
    """The first position in ``[start, stop)`` where the log can be resumed after damage, -1 when
    there is none (reference §8.9: the broker never zeroes what it cuts, so the search asks each
    candidate to describe itself):

    - a message record (magic V1, or V2 with ``v2``) that ``walk_segment`` accepts with its
      PHYSICALOFFSET equal to its own offset, and so for the records after it, ``chain`` in all
      (fewer at a blank, zeros or the buffer end; with ``lenient`` at any end of the walk);
      ``chain`` 0: the PHYSICALOFFSET alone;
    - with ``blanks``, an end-of-file blank whose TOTALSIZE is exactly the bytes left;
    - with ``entries``, a DLedger data file instead (§15.2, ``DLedgerMmapFileStore.recover``): an
      entry header describing itself (magic 1, ``pos`` its own offset, ``size`` the body length +
      48), or a blank entry (magic -1) whose size is exactly the bytes left.

    Candidates are tested only where the magic's distinguishing byte is present, found a word at
    a time (zeros and bodies are skipped at memory speed)."""
    cdef Py_ssize_t found
    with nogil:
        found = resync(&buf[0], buf.shape[0], start, stop, base, chain, entries, v2, blanks, lenient)
    return found


def resume_at(const uint8_t[::1] buf, Py_ssize_t pos, int64_t base, Py_ssize_t chain):
    """``pos`` when a record ``walk_segment`` accepts, or a blank, starts there, else
    ``find_record_start(buf, pos, len(buf), base, chain)``: where a scan asked to begin at ``pos``
    of one segment begins (``resync.scan_start``)."""
    cdef int64_t row[N_COLS]
    cdef Py_ssize_t end = buf.shape[0], found = pos
    cdef Walk w
    if end == 0:
        return -1
    with nogil:
        w = walk_records(&buf[0], end, pos, pos + 1, False, False, row, 1)
        if w.count != 1 and w.code != OK_BLANK:
            found = resync(&buf[0], end, pos, end, base, chain, False, True, True, False)
    return found


# ---- columns and zero scans ------------------------------------------------------------------
def gather_be(const uint8_t[::1] buf, const int64_t[:] positions, Py_ssize_t delta, int width, bint signed):
    """Big-endian integers of ``width`` bytes (1 to 8) at ``positions + delta`` (one column)."""
    cdef Py_ssize_t i, n = positions.shape[0], p
    cdef int j
    cdef int64_t v
    import numpy as np  # here: the resynchronisation needs no numpy (a record-by-record dump loads none)

    result = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] r = result
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(n):
            p = positions[i] + delta
            if width == 8:
                v = be64(b, p)
            elif width == 4 and signed:
                v = signed32(be32(b, p))
            else:
                v = 0
                for j in range(width):
                    v = (v << 8) | b[p + j]
                if signed and width < 8 and v >= (<int64_t>1 << (8 * width - 1)):
                    v -= <int64_t>1 << (8 * width)
            r[i] = v
    return result


def first_nonzero_in(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t stop):
    """The position of the first non-zero byte in ``buf[start:stop]``, or -1 (a word at a time)."""
    cdef const uint8_t* b = &buf[0]
    cdef Py_ssize_t p = start
    with nogil:
        while p + 8 <= stop and load8(b, p) == 0:
            p += 8
        while p < stop and b[p] == 0:
            p += 1
    return p if p < stop else -1


def last_nonzero_in(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t stop):
    """The position of the last non-zero byte in ``buf[start:stop]``, or -1 (a word at a time)."""
    cdef const uint8_t* b = &buf[0]
    cdef Py_ssize_t q = stop
    with nogil:
        while q - 8 >= start and load8(b, q - 8) == 0:
            q -= 8
        while q > start and b[q - 1] == 0:
            q -= 1
    return q - 1 if q > start else -1
