"""Compiled kernel of ``verify/columns.py``: a batch's last pass over its dispatched rows."""

from libc.stdint cimport int64_t

from mqtool.dispatch._fastdispatch cimport F_FLAGS, F_KEY_COUNT, F_KEY_START, F_POS, FLAG_FALLBACK, finish_row_keys


def finish_columns(const int64_t[:, ::1] out, Py_ssize_t n, int64_t base_offset, const int64_t[::1] topic_ids, const int64_t[::1] topic_state, const int64_t[::1] pow31, int64_t[::1] keys, int64_t[::1] offsets):
    """A batch's last pass, while its rows are in cache: the index key hashes finished
    (``finish_row_keys``, as the recovery's ``finish_keys``), each record's commit log offset
    into ``offsets``; whether some record needs the Python decoder (``FLAG_FALLBACK``)."""
    cdef Py_ssize_t r
    cdef bint fallback = False
    cdef int64_t* key_out = &keys[0] if keys.shape[0] else NULL
    with nogil:
        for r in range(n):
            finish_row_keys(key_out, out[r, F_KEY_START], out[r, F_KEY_COUNT], topic_state[topic_ids[r]], &pow31[0])
            offsets[r] = out[r, F_POS] + base_offset
            if out[r, F_FLAGS] & FLAG_FALLBACK:
                fallback = True
    return fallback
