"""Compiled kernel of ``dispatch/topicnumbers.py``: topic ids of dispatched records from the raw
topics seen so far (reference §3.2)."""

from libc.stdint cimport int64_t, uint8_t

from mqtool.dispatch._fastdispatch cimport F_TOPIC_FP, F_TOPIC_LEN, F_TOPIC_POS, topic_id
from mqtool.dispatch._topictable cimport find_topic


def number_topics(const uint8_t[::1] buf, const int64_t[:, ::1] out, Py_ssize_t lo, Py_ssize_t hi, const int64_t[::1] table, const int64_t[::1] fps, const int64_t[::1] starts, const int64_t[::1] lens, const int64_t[::1] ids, const uint8_t[::1] pool, topic_id[::1] topic_ids):
    """``topic_ids[r]`` = the id of the raw topic of ``out[r]`` (``F_TOPIC_POS``/``F_TOPIC_LEN``
    into ``buf``, ``dispatch_rows``' columns) for the rows ``lo <= r < hi`` that ``dispatch_rows``
    left at -1 (the others are numbered); raw topic ``k`` (``_topictable.find_topic``) has id
    ``ids[k]``. Returns the first row whose raw topic is not there (``hi`` when every row was
    numbered)."""
    cdef int64_t mask = table.shape[0] - 1, k
    cdef Py_ssize_t r, buf_len = buf.shape[0], stop = hi
    cdef const uint8_t* b = &buf[0] if buf_len else NULL
    with nogil:
        for r in range(lo, hi):
            if topic_ids[r] >= 0:
                continue
            k = find_topic(b, buf_len, out[r, F_TOPIC_POS], out[r, F_TOPIC_LEN], out[r, F_TOPIC_FP], &table[0], mask, &fps[0], &starts[0], &lens[0], &pool[0])
            if k < 0:
                stop = r
                break
            topic_ids[r] = <topic_id>ids[k]
    return stop
