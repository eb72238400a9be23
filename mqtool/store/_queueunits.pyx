"""Compiled kernel of ``store/consumequeue.py``: where a consume queue file's valid units end
(``ConsumeQueue.recover``: the first unit whose offset is negative or whose size is not positive,
reference §5.7). No numpy: a lookup that never reads units as arrays does not load it."""

import struct

from libc.stdint cimport int64_t, uint8_t

from mqtool.store._bytes cimport be_signed

from ..formats import consumequeue as fmt

# where the fields are: the schema's (``fmt.ENTRY_LAYOUT``, held equal to ConsumeQueueEntryStruct)
_L = fmt.ENTRY_LAYOUT
cdef Py_ssize_t UNIT = _L.size, PHYS_AT = _L.offset_of("phys_offset"), SIZE_AT = _L.offset_of("size")
cdef int PHYS_W = struct.calcsize(">" + _L.codec.format.lstrip(">")[_L.names.index("phys_offset")])
cdef int SIZE_W = struct.calcsize(">" + _L.codec.format.lstrip(">")[_L.names.index("size")])


def first_invalid_unit(const uint8_t[::1] data, Py_ssize_t first):
    """The number of the first of ``data``'s whole units from unit ``first`` on that is invalid
    (offset < 0 or size <= 0), else the number of whole units."""
    cdef Py_ssize_t i = first, n = data.shape[0] // UNIT
    cdef const uint8_t* buf = &data[0] if n else NULL
    with nogil:
        while i < n and be_signed(buf, i * UNIT + PHYS_AT, PHYS_W) >= 0 and be_signed(buf, i * UNIT + SIZE_AT, SIZE_W) > 0:
            i += 1
    return i
