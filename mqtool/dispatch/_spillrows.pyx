"""Compiled kernels of ``dispatch/spillrows.py``: a dispatch batch's columns moved between its
row-major ``fields`` and the spill's column blocks, one pass over the rows each way."""

from libc.stdint cimport int8_t, int32_t, int64_t

from mqtool.dispatch._fastdispatch cimport (
    F_FLAGS, F_KEY_COUNT, F_KEY_START, F_PHYS, F_POS, F_QUEUE_ID, F_QUEUE_OFFSET, F_SIZE, F_STORE_TS, F_SYS_FLAG, F_TAGS,
    F_TOPIC_FP, F_TOPIC_LEN, F_TOPIC_POS, N_FIELDS, topic_id,
)

cdef enum:
    N_WIDE = 5
    N_NARROW = 4
    N_UNSPILLED = 3

cdef Py_ssize_t[N_WIDE] WIDE_COLS = [F_POS, F_QUEUE_OFFSET, F_PHYS, F_STORE_TS, F_TAGS]  # spilled as int64
cdef Py_ssize_t[N_NARROW] NARROW_COLS = [F_QUEUE_ID, F_SIZE, F_SYS_FLAG, F_KEY_COUNT]  # spilled as int32
cdef Py_ssize_t[N_UNSPILLED] UNSPILLED_COLS = [F_TOPIC_FP, F_TOPIC_POS, F_TOPIC_LEN]  # the topic byte columns: zero when read back
WIDE, NARROW, UNSPILLED = tuple(WIDE_COLS), tuple(NARROW_COLS), tuple(UNSPILLED_COLS)
assert sorted(WIDE + NARROW + UNSPILLED + (F_FLAGS, F_KEY_START)) == list(range(N_FIELDS))


def pack_rows(const int64_t[:, ::1] fields, const topic_id[::1] topic_ids, const int64_t[::1] keys, int64_t[:, ::1] wide, int32_t[:, ::1] narrow, int8_t[::1] flags, int32_t[::1] key_out):
    """``fields`` and ``topic_ids`` into the column blocks, the keys into ``key_out``; False when
    a key is outside ``[0, 2**31)``."""
    cdef Py_ssize_t r, i, k
    cdef int64_t key
    cdef bint ok = True
    with nogil:
        for r in range(fields.shape[0]):
            for i in range(N_WIDE):
                wide[i, r] = fields[r, WIDE_COLS[i]]
            for i in range(N_NARROW):
                narrow[i, r] = <int32_t>fields[r, NARROW_COLS[i]]
            narrow[N_NARROW, r] = <int32_t>topic_ids[r]
            flags[r] = <int8_t>fields[r, F_FLAGS]
        for k in range(keys.shape[0]):
            key = keys[k]
            if key < 0 or key > 0x7FFFFFFF:
                ok = False
                break
            key_out[k] = <int32_t>key
    return ok


def unpack_rows(const int64_t[:, ::1] wide, const int32_t[:, ::1] narrow, const int8_t[::1] flags, const int32_t[::1] key_in, int64_t[:, ::1] fields, int32_t[::1] topic_ids, int64_t[::1] keys):
    """The column blocks back into row-major ``fields`` (``F_KEY_START`` the running sum of the
    key counts, the topic byte columns zero), ``topic_ids`` and ``keys``."""
    cdef Py_ssize_t r, i, k
    cdef int64_t start = 0
    with nogil:
        for r in range(fields.shape[0]):
            for i in range(N_WIDE):
                fields[r, WIDE_COLS[i]] = wide[i, r]
            for i in range(N_NARROW):
                fields[r, NARROW_COLS[i]] = narrow[i, r]
            for i in range(N_UNSPILLED):
                fields[r, UNSPILLED_COLS[i]] = 0
            topic_ids[r] = narrow[N_NARROW, r]
            fields[r, F_FLAGS] = flags[r]
            fields[r, F_KEY_START] = start
            start += fields[r, F_KEY_COUNT]
        for k in range(key_in.shape[0]):
            keys[k] = key_in[k]
