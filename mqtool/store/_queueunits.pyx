"""Compiled kernels of ``store/consumequeue.py``: where a consume queue file's valid units end
(``ConsumeQueue.recover``: the first unit whose offset is negative or whose size is not positive,
reference §5.7), and whether a file's units are given ones (``units_equal``). No numpy: a lookup
that never reads units as arrays does not load it."""

import struct

from libc.stdint cimport int32_t, int64_t, uint8_t

from mqtool.store._bytes cimport be_signed

from ..formats import consumequeue as fmt

# where the fields are: the schema's (``fmt.ENTRY_LAYOUT``, held equal to ConsumeQueueEntryStruct)
_L = fmt.ENTRY_LAYOUT
cdef Py_ssize_t UNIT = _L.size, PHYS_AT = _L.offset_of("phys_offset"), SIZE_AT = _L.offset_of("size"), TAGS_AT = _L.offset_of("tags_code")
cdef int PHYS_W = struct.calcsize(">" + _L.codec.format.lstrip(">")[_L.names.index("phys_offset")])
cdef int SIZE_W = struct.calcsize(">" + _L.codec.format.lstrip(">")[_L.names.index("size")])
cdef int TAGS_W = struct.calcsize(">" + _L.codec.format.lstrip(">")[_L.names.index("tags_code")])


def first_invalid_unit(const uint8_t[::1] data, Py_ssize_t first):
    """The number of the first of ``data``'s whole units from unit ``first`` on that is invalid
    (offset < 0 or size <= 0), else the number of whole units."""
    cdef Py_ssize_t i = first, n = data.shape[0] // UNIT
    cdef const uint8_t* buf = &data[0] if n else NULL
    with nogil:
        while i < n and be_signed(buf, i * UNIT + PHYS_AT, PHYS_W) >= 0 and be_signed(buf, i * UNIT + SIZE_AT, SIZE_W) > 0:
            i += 1
    return i


def units_equal(const uint8_t[::1] data, const int64_t[::1] phys, const int32_t[::1] size, const int64_t[::1] tags):
    """Whether ``data`` holds, unit for unit, the units (``phys[i]``, ``size[i]``, ``tags[i]``)."""
    cdef Py_ssize_t i, n = phys.shape[0]
    cdef bint same = data.shape[0] >= n * UNIT and size.shape[0] >= n and tags.shape[0] >= n
    if not same or n == 0:
        return same
    cdef const uint8_t* buf = &data[0]
    with nogil:
        for i in range(n):
            if (be_signed(buf, i * UNIT + PHYS_AT, PHYS_W) != phys[i] or be_signed(buf, i * UNIT + SIZE_AT, SIZE_W) != size[i]
                    or be_signed(buf, i * UNIT + TAGS_AT, TAGS_W) != tags[i]):
                same = False
                break
    return same
