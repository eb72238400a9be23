"""Compiled kernel of ``recovery/topicnumbers.py``: topic ids of dispatched records from the raw
topics seen so far (reference §3.2)."""

from libc.stdint cimport int64_t, uint8_t, uint64_t

from mqtool.dispatch._fastdispatch cimport F_TOPIC_FP, F_TOPIC_LEN, F_TOPIC_POS, topic_id
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


def number_topics(const uint8_t[::1] buf, const int64_t[:, ::1] out, Py_ssize_t lo, Py_ssize_t hi, const int64_t[::1] table, const int64_t[::1] fps, const int64_t[::1] starts, const int64_t[::1] lens, const int64_t[::1] ids, const uint8_t[::1] pool, topic_id[::1] topic_ids, bint missing_only, bint lookup):
    """``topic_ids[r]`` = the id of the raw topic of ``out[r]`` (``F_TOPIC_POS``/``F_TOPIC_LEN``
    into ``buf``, ``dispatch_rows``' columns) for ``lo <= r < hi``; raw topic ``k`` is
    ``pool[starts[k]:starts[k] + lens[k]]`` with fingerprint ``fps[k]`` and id ``ids[k]``,
    found through ``table`` (slot -> k, -1 empty; open addressing). ``missing_only``: rows
    already numbered (``topic_ids[r] >= 0``) are passed over. Returns the first row whose raw
    topic is not there (``hi`` when every row was numbered); with ``lookup``, such rows get -1
    and the walk goes on."""
    cdef int64_t mask = table.shape[0] - 1, p, n, fp, slot, k
    cdef Py_ssize_t r, buf_len = buf.shape[0], stop = hi
    cdef const uint8_t* b = &buf[0] if buf_len else NULL
    cdef const uint8_t* topics = &pool[0]
    with nogil:
        for r in range(lo, hi):
            if missing_only and topic_ids[r] >= 0:
                continue
            p = out[r, F_TOPIC_POS]
            n = out[r, F_TOPIC_LEN]
            fp = out[r, F_TOPIC_FP]
            slot = topic_slot(fp, mask)
            k = table[slot]
            while k >= 0 and not (fps[k] == fp and lens[k] == n and same_bytes(b, buf_len, p, topics, starts[k], n)):
                slot = (slot + 1) & mask
                k = table[slot]
            if k >= 0:
                topic_ids[r] = <topic_id>ids[k]
            elif lookup:
                topic_ids[r] = -1
            else:
                stop = r
                break
    return stop
