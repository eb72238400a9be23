"""Compiled kernel of ``store/dledgerwalk.py``: the walk of DLedger data files (reference §15.2)."""

from libc.stdint cimport int64_t, uint8_t

from mqtool.store._bytes cimport be32, be64, signed32
from mqtool.store._fastscan cimport END_CAPACITY, END_CORRUPT, END_LIMIT, END_TRUNCATED, END_ZEROS, N_COLS, OK_BLANK, Walk, walk_records

from ..formats import dledger as dfmt

_L = dfmt.ENTRY_HEADER_LAYOUT
cdef Py_ssize_t HEADER = dfmt.ENTRY_HEADER_SIZE
cdef Py_ssize_t POS_MAGIC = _L.offset_of("magic"), POS_SIZE = _L.offset_of("size"), POS_INDEX = _L.offset_of("index")
cdef Py_ssize_t POS_TERM = _L.offset_of("term"), POS_POS = _L.offset_of("pos"), POS_BODY_SIZE = _L.offset_of("body_size")
cdef int64_t ENTRY_MAGIC = dfmt.ENTRY_MAGIC, BLANK_MAGIC = dfmt.BLANK_MAGIC

cpdef enum:
    # ``state`` slots: the previous entry's index and term (index -1: none seen yet), and why an
    # entry was refused (``ENTRY_*``: the walk's code is then ``END_CORRUPT``/``END_TRUNCATED``)
    ST_INDEX = 0
    ST_TERM = 1
    ST_WHY = 2
    ENTRY_OK = 0
    ENTRY_MAGIC_BAD = 1
    ENTRY_SIZE_BAD = 2
    ENTRY_POS_BAD = 3
    ENTRY_INDEX_BAD = 4
    ENTRY_TERM_BAD = 5
    ENTRY_BODY_BAD = 6


cdef Walk _ended(Py_ssize_t count, Py_ssize_t pos, int code, int64_t detail, int64_t* state, int why) noexcept nogil:
    cdef Walk w
    w.count, w.pos, w.code, w.detail = count, pos, code, detail
    state[ST_WHY] = why
    return w


cdef Walk _walk(const uint8_t* b, Py_ssize_t end, Py_ssize_t pos, Py_ssize_t stop, bint check_crc, bint stop_on_crc, int64_t* out, Py_ssize_t capacity, int64_t base, int64_t* state) noexcept nogil:
    cdef Py_ssize_t count = 0, i
    cdef int64_t magic, size, body_size, index, term
    cdef bint zero
    cdef Walk r
    while True:
        if pos >= stop:
            return _ended(count, pos, END_LIMIT, 0, state, ENTRY_OK)
        if pos >= end:
            return _ended(count, pos, OK_BLANK, 0, state, ENTRY_OK)
        if count >= capacity:
            return _ended(count, pos, END_CAPACITY, 0, state, ENTRY_OK)
        if end - pos < 8:
            zero = True
            for i in range(pos, end):
                if b[i] != 0:
                    zero = False
            return _ended(count, pos, END_ZEROS if zero else END_TRUNCATED, 0, state, ENTRY_OK)
        magic = signed32(be32(b, pos + POS_MAGIC))
        size = signed32(be32(b, pos + POS_SIZE))
        if magic == BLANK_MAGIC:
            return _ended(count, pos, OK_BLANK, size, state, ENTRY_OK)
        if magic == 0 and size == 0:
            return _ended(count, pos, END_ZEROS, 0, state, ENTRY_OK)
        if magic != ENTRY_MAGIC:
            return _ended(count, pos, END_CORRUPT, 0, state, ENTRY_MAGIC_BAD)
        if end - pos < HEADER:
            return _ended(count, pos, END_TRUNCATED, 0, state, ENTRY_OK)
        body_size = signed32(be32(b, pos + POS_BODY_SIZE))
        if size <= HEADER - 4 or size != body_size + HEADER:
            return _ended(count, pos, END_CORRUPT, 0, state, ENTRY_SIZE_BAD)
        if be64(b, pos + POS_POS) != base + pos:
            return _ended(count, pos, END_CORRUPT, 0, state, ENTRY_POS_BAD)
        index = be64(b, pos + POS_INDEX)
        term = be64(b, pos + POS_TERM)
        if state[ST_INDEX] >= 0 and index != state[ST_INDEX] + 1:
            return _ended(count, pos, END_CORRUPT, 0, state, ENTRY_INDEX_BAD)
        if state[ST_INDEX] >= 0 and term < state[ST_TERM]:
            return _ended(count, pos, END_CORRUPT, 0, state, ENTRY_TERM_BAD)
        if pos + size > end:
            return _ended(count, pos, END_TRUNCATED, 0, state, ENTRY_OK)
        r = walk_records(b, end, pos + HEADER, pos + size, check_crc, stop_on_crc, out + count * N_COLS, 1)
        if r.count != 1:
            if r.code == END_LIMIT or r.code == OK_BLANK:
                return _ended(count, pos, END_CORRUPT, r.detail, state, ENTRY_BODY_BAD)
            return _ended(count, pos, r.code, r.detail, state, ENTRY_OK)
        if r.pos != pos + size:
            return _ended(count, pos, END_CORRUPT, 0, state, ENTRY_BODY_BAD)
        state[ST_INDEX] = index
        state[ST_TERM] = term
        count += 1
        pos = r.pos


def walk_entries(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t stop, bint check_crc, bint stop_on_crc, int64_t[:, ::1] out, int64_t base, int64_t[::1] state):
    """Walk entries from ``pos`` while ``pos < stop``; one ``out`` row per valid record: the checks
    of ``DLedgerMmapFileStore.recover`` (magic 1, ``size`` = body length + 48, ``pos`` = the
    entry's own offset, index = previous + 1, term never decreasing), then ``walk_segment``'s on
    the record inside, which must fill the body exactly.

    Returns ``walk_segment``'s ``(count, pos, code, detail)`` with ``pos`` an entry position:
    ``OK_BLANK`` at the end-of-file blank (or when an entry ends exactly at the file end), the
    entry that failed otherwise (``state[ST_WHY]`` says which header rule, 0 for the record).
    """
    cdef Walk w
    with nogil:
        w = _walk(&buf[0], buf.shape[0], pos, stop, check_crc, stop_on_crc, &out[0, 0], out.shape[0], base, &state[0])
    return w.count, w.pos, w.code, w.detail
