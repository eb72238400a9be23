# The raw-topic hash table of ``topicnumbers.TopicNumbers`` (``cimport``-ed; inlined, no module):
# ``find_topic`` looks a topic up, by ``dispatch_rows`` while the record is in cache and by
# ``number_topics`` for the topics learned since.

from libc.stdint cimport int64_t, uint8_t, uint64_t

from mqtool.store._bytes cimport MQ_LITTLE_ENDIAN, load8
from mqtool.store._text cimport topic_slot


cdef inline bint same_bytes(const uint8_t* buf, Py_ssize_t buf_len, Py_ssize_t p, const uint8_t* pool, Py_ssize_t q, Py_ssize_t n) noexcept nogil:
    """``buf[p:p + n] == pool[q:q + n]``: a topic of up to 8 bytes in one masked word (``pool``
    has 8 bytes to spare after every topic), a longer one a word at a time."""
    cdef uint64_t x
    cdef Py_ssize_t j = 0
    if n <= 8 and p + 8 <= buf_len:
        x = load8(buf, p) ^ load8(pool, q)
        if n < 8:
            if MQ_LITTLE_ENDIAN:
                x &= (<uint64_t>1 << (8 * n)) - 1
            else:
                x >>= 64 - 8 * n
        return x == 0
    while j + 8 <= n:
        if load8(buf, p + j) != load8(pool, q + j):
            return False
        j += 8
    while j < n:
        if buf[p + j] != pool[q + j]:
            return False
        j += 1
    return True


cdef inline int64_t find_topic(const uint8_t* buf, Py_ssize_t buf_len, Py_ssize_t p, Py_ssize_t n, int64_t fp, const int64_t* table, int64_t mask, const int64_t* fps, const int64_t* starts, const int64_t* lens, const uint8_t* pool) noexcept nogil:
    """The raw topic ``buf[p:p + n]`` (fingerprint ``fp``) in the table: its number ``k``
    (``pool[starts[k]:starts[k] + lens[k]]``), or -1. ``table``: slot -> k, -1 empty (open
    addressing, ``mask + 1`` slots)."""
    cdef int64_t slot = topic_slot(fp, mask)
    cdef int64_t k = table[slot]
    while k >= 0 and not (fps[k] == fp and lens[k] == n and same_bytes(buf, buf_len, p, pool, starts[k], n)):
        slot = (slot + 1) & mask
        k = table[slot]
    return k
