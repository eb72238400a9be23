"""Compiled kernel of ``verify/segments.py``: what ``check_rows`` looks at, per valid record."""

from libc.stdint cimport int8_t, int64_t, uint8_t

from mqtool.store._bytes cimport be64

from . import fastscan as fs
from ..formats.properties import PROP_CRC_KEY, PROP_CRC_LEN as _PROP_CRC_LEN

cdef Py_ssize_t COL_POS = fs.COL_POS, COL_SIZE = fs.COL_SIZE, COL_PROPS = fs.COL_PROPS, COL_CRC_OK = fs.COL_CRC_OK
cdef Py_ssize_t POS_PHYS_OFFSET = fs.POS_PHYS_OFFSET, PROP_CRC_LEN = _PROP_CRC_LEN
cdef int64_t PROP_CRC_TAG = int.from_bytes(PROP_CRC_KEY[:8], "big", signed=True)  # its first eight bytes


def row_flags(const uint8_t[::1] buf, const int64_t[:, ::1] rows, int64_t base, int8_t[::1] flags):
    """Per valid record, what ``check_rows`` looks at (one pass): bit 1 body CRC failed, bit 2
    PHYSICALOFFSET is not the record's offset (§2.1), bit 4 the record ends with a ``__CRC32#``
    property (§2.10). Returns the number of flagged records."""
    cdef const uint8_t* b = &buf[0]
    cdef Py_ssize_t i, flagged = 0
    cdef int64_t pos, tail
    cdef int8_t f
    with nogil:
        for i in range(rows.shape[0]):
            pos = rows[i, COL_POS]
            f = 0
            if rows[i, COL_CRC_OK] == 0:
                f |= 1
            if be64(b, pos + POS_PHYS_OFFSET) != pos + base:
                f |= 2
            tail = pos + rows[i, COL_SIZE] - PROP_CRC_LEN
            if tail >= rows[i, COL_PROPS] and be64(b, tail) == PROP_CRC_TAG:
                f |= 4
            flags[i] = f
            if f:
                flagged += 1
    return flagged
