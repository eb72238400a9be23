"""Compiled kernels of ``dispatch/queuegroups.py``: a dispatch batch's consume queue rows grouped
by queue (reference §3.2), from its rows or from its spill."""

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t

from mqtool.dispatch._fastdispatch cimport F_FLAGS, F_PHYS, F_QUEUE_ID, F_QUEUE_OFFSET, F_SIZE, F_SYS_FLAG, F_TAGS, FLAG_MULTI_DISPATCH, topic_id

from mqtool.store._text cimport topic_slot

from ..formats import commitlog as clfmt

cdef int64_t TRAN_MASK = clfmt.TRANSACTION_TYPE_MASK
cdef int64_t TRAN_NOT_TYPE = int(clfmt.TransactionType.NOT_TYPE), TRAN_COMMIT = int(clfmt.TransactionType.COMMIT)
cdef int64_t TRAN_ROLLBACK = int(clfmt.TransactionType.ROLLBACK)

cpdef enum:
    # the grouped columns: what ``putMessagePositionInfo`` reads, in this order
    N_CQ_COLUMNS = 4
    # stats slots
    S_GROUPS = 0
    S_QUEUED = 1
    S_MULTI = 2
    S_MULTI_QUEUED = 3
    S_LAST_QUEUED = 4
    N_STATS = 5

cdef Py_ssize_t[N_CQ_COLUMNS] CQ = [F_QUEUE_OFFSET, F_PHYS, F_SIZE, F_TAGS]
CQ_COLUMNS = tuple(CQ)


def group(const int64_t[:, ::1] fields, const topic_id[::1] topic_ids, int64_t[::1] keys, int64_t[::1] starts, int32_t[::1] dest, uint8_t[::1] indexed, int64_t[:, ::1] columns, int64_t[::1] stats, int64_t[::1] table, int64_t[::1] counts):
    """The batch grouped into ``keys``, ``starts``, ``dest``, ``indexed``, ``columns``, ``stats``;
    False (nothing usable) when ``table`` (all -1, a power of two) would be half full: the
    caller gives a larger one. ``counts``: zeros, one more than the rows."""
    cdef Py_ssize_t n = fields.shape[0], size = table.shape[0], r, i
    cdef int64_t last_key = -1, key, slot, g, last_g = -1, groups = 0, queued = 0, multi = 0, multi_queued = 0, last = -1, tran, j
    cdef bint flagged, full = False
    with nogil:
        for r in range(n):
            flagged = (fields[r, F_FLAGS] & FLAG_MULTI_DISPATCH) != 0
            if flagged:
                multi += 1
            tran = fields[r, F_SYS_FLAG] & TRAN_MASK
            indexed[r] = tran != TRAN_ROLLBACK
            if tran != TRAN_NOT_TYPE and tran != TRAN_COMMIT:
                dest[r] = -1
                continue
            if flagged:
                multi_queued += 1
            queued += 1
            last = r
            key = (<int64_t>topic_ids[r] << 32) | (fields[r, F_QUEUE_ID] & 0xFFFFFFFFLL)
            if key == last_key:
                g = last_g
            else:
                slot = topic_slot(key, size - 1)
                while True:
                    g = table[slot]
                    if g < 0:
                        g = groups
                        table[slot] = g
                        keys[g] = key
                        groups += 1
                        full = 2 * groups >= size
                        break
                    if keys[g] == key:
                        break
                    slot = (slot + 1) & (size - 1)
                if full:
                    break
                last_key, last_g = key, g
            dest[r] = <int32_t>g  # the group for now, the place below
            counts[g] += 1
    if full:
        return False
    with nogil:
        starts[0] = 0
        for g in range(groups):
            starts[g + 1] = starts[g] + counts[g]
            counts[g] = starts[g]  # the fill cursor
        for r in range(n):
            g = dest[r]
            if g < 0:
                continue
            j = counts[g]
            counts[g] = j + 1
            dest[r] = <int32_t>j
            for i in range(N_CQ_COLUMNS):
                columns[i, j] = fields[r, CQ[i]]
        stats[S_GROUPS] = groups
        stats[S_QUEUED] = queued
        stats[S_MULTI] = multi
        stats[S_MULTI_QUEUED] = multi_queued
        stats[S_LAST_QUEUED] = last
    return True


def scatter(const int32_t[::1] dest, const int64_t[:, ::1] wide, const int32_t[:, ::1] narrow, const int8_t[::1] flags, Py_ssize_t sys_flag_row, const int64_t[::1] src_wide, const int64_t[::1] src_narrow, int64_t[:, ::1] columns, uint8_t[::1] indexed, int64_t[::1] stats):
    """The grouped columns of a spilled batch, each row to its place ``dest[r]`` (-1: not
    queued), column ``i`` from ``wide[src_wide[i]]`` or else ``narrow[src_narrow[i]]``; the
    index mask and the multi-dispatch counts into ``indexed`` and ``stats``."""
    cdef int64_t multi = 0, multi_queued = 0, last = -1, j
    cdef Py_ssize_t r, i
    cdef bint flagged
    with nogil:
        for r in range(dest.shape[0]):
            indexed[r] = (narrow[sys_flag_row, r] & TRAN_MASK) != TRAN_ROLLBACK
            flagged = (flags[r] & FLAG_MULTI_DISPATCH) != 0
            if flagged:
                multi += 1
            j = dest[r]
            if j < 0:
                continue
            if flagged:
                multi_queued += 1
            last = r
            for i in range(src_wide.shape[0]):
                if src_wide[i] >= 0:
                    columns[i, j] = wide[src_wide[i], r]
                else:
                    columns[i, j] = narrow[src_narrow[i], r]
        stats[S_MULTI] = multi
        stats[S_MULTI_QUEUED] = multi_queued
        stats[S_LAST_QUEUED] = last
