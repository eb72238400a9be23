"""Compiled kernels of ``verify/consumequeue.py``: consume queue units decoded, a batch's records
grouped by queue, and the groups joined with their queues' entries (reference §5.1)."""

from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

from mqtool.store._bytes cimport be_signed

from ..formats import commitlog as clfmt
from ..formats import consumequeue as cqfmt
from ..store.consumequeue import UNIT_DTYPE

# where ``decode_units`` finds the fields: the schema's (``UNIT_DTYPE``, from the construct struct)
cdef Py_ssize_t UNIT = UNIT_DTYPE.itemsize
cdef Py_ssize_t PHYS_AT = UNIT_DTYPE.fields["phys_offset"][1], SIZE_AT = UNIT_DTYPE.fields["size"][1], TAGS_AT = UNIT_DTYPE.fields["tags_code"][1]
cdef int PHYS_W = UNIT_DTYPE["phys_offset"].itemsize, SIZE_W = UNIT_DTYPE["size"].itemsize, TAGS_W = UNIT_DTYPE["tags_code"].itemsize
assert UNIT_DTYPE.names == ("phys_offset", "size", "tags_code")
assert all(UNIT_DTYPE[f].kind == "i" and UNIT_DTYPE[f].byteorder == ">" for f in UNIT_DTYPE.names)
cdef int64_t FILLER_SIZE = cqfmt.FILLER_SIZE, FILLER_TAGS = cqfmt.FILLER[2]  # ``cqfmt.is_filler``, without the GIL
cdef int64_t EXT_MAX_ADDRESS = cqfmt.EXT_MAX_ADDRESS
cdef int64_t TRAN_MASK = clfmt.TRANSACTION_TYPE_MASK
cdef int64_t TO_CQ_NOT = clfmt.TransactionType.NOT_TYPE, TO_CQ_COMMIT = clfmt.TransactionType.COMMIT
cdef uint64_t M32 = 0xFFFFFFFF
cdef uint64_t MIX = 0x9E3779B97F4A7C15  # Fibonacci hashing of the queue keys: the top bits index the table


cdef enum:  # the columns of a queue's entries (``decode_units``, ``join_groups``)
    QOFF, PHYS, SIZE, TAGS, ENTRY_COLUMNS

COLUMNS = (QOFF, PHYS, SIZE, TAGS)  # for ``consumequeue.py``: queue offset, commit log offset, size, tags code


def decode_units(const uint8_t[::1] data, int64_t first, int64_t[:, ::1] entries):
    """The units of ``data`` as rows of ``entries`` (``COLUMNS``; the first unit's queue offset is
    ``first``; ``UNIT_DTYPE`` read in one pass); returns (units that are not entries, phys < 0 or
    size <= 0: filler units)."""
    cdef Py_ssize_t i, p, n = entries.shape[0], invalid = 0, fillers = 0
    cdef int64_t a, b, c
    cdef const uint8_t* buf
    assert entries.shape[1] == ENTRY_COLUMNS and data.shape[0] >= n * UNIT
    if n == 0:
        return 0, 0
    buf = &data[0]
    with nogil:
        for i in range(n):
            p = UNIT * i
            a = be_signed(buf, p + PHYS_AT, PHYS_W)
            b = be_signed(buf, p + SIZE_AT, SIZE_W)
            c = be_signed(buf, p + TAGS_AT, TAGS_W)
            entries[i, QOFF] = first + i
            entries[i, PHYS] = a
            entries[i, SIZE] = b
            entries[i, TAGS] = c
            if a < 0 or b <= 0:
                invalid += 1
            elif b == FILLER_SIZE and c == FILLER_TAGS:  # a >= 0 here: ``cqfmt.is_filler``
                fillers += 1
    return invalid, fillers


cdef inline Py_ssize_t queue_slot(int64_t key, int shift) noexcept nogil:
    return <Py_ssize_t>((<uint64_t>key * MIX) >> shift)


def queue_groups(const int64_t[:] topic_ids, const int64_t[:] queue_ids, const int64_t[:] sys_flags, const uint8_t[::1] skip_topic,
                 int64_t[::1] table, int64_t[::1] group_key, int64_t[::1] counts, int64_t[::1] first, int64_t[::1] last, int32_t[::1] gid):
    """The records dispatched to a consume queue (transaction type NOT_TYPE or COMMIT,
    ``CommitLogDispatcherBuildConsumeQueue``; topics in ``skip_topic`` left out), grouped by
    queue (topic id << 32 | QUEUEID; queues in order of first appearance): returns the number of
    groups (-1 when more than ``capacity``, the length of ``group_key``) and fills the group
    keys, each group's record count, first and last record, and each record's group (``gid``,
    -1: not dispatched to a queue). One sequential pass; ``table`` (all -1, a power of two at
    least twice the capacity; ``counts`` all 0) holds the batch's queues."""
    cdef Py_ssize_t r, n = topic_ids.shape[0], capacity = group_key.shape[0], mask = table.shape[0] - 1, slot, groups = 0
    cdef int bits = 0
    cdef int64_t tran, key, g
    while (<Py_ssize_t>1 << bits) < table.shape[0]:
        bits += 1
    with nogil:
        for r in range(n):
            tran = sys_flags[r] & TRAN_MASK
            if not ((tran == TO_CQ_NOT or tran == TO_CQ_COMMIT) and not skip_topic[topic_ids[r]]):
                gid[r] = -1
                continue
            key = <int64_t>((<uint64_t>topic_ids[r] << 32) | (<uint64_t>queue_ids[r] & M32))
            slot = queue_slot(key, 64 - bits)
            while True:
                g = table[slot]
                if g < 0 or group_key[g] == key:
                    break
                slot = (slot + 1) & mask
            if g < 0:
                if groups == capacity:
                    groups = -1
                    break
                g = groups
                groups += 1
                group_key[g] = key
                first[g] = r
                table[slot] = g
            gid[r] = <int32_t>g
            counts[g] += 1
            last[g] = r
    return groups


def join_groups(const int32_t[::1] gid, const int64_t[::1] view_of, list views, const int64_t[:] offsets, const int64_t[:] sizes,
                const int64_t[:] queue_offsets, const int64_t[:] rec_tags, int64_t[::1] ext):
    """Whether the queue entries equal the records of their groups, in commit log order: group
    ``g``'s entries are the rows of ``views[view_of[g]]`` (-1: the group is not compared; each
    view is ``decode_units``' rows from its queue's head on), one per record of the group in
    turn (offset, size, QUEUEOFFSET, and the tags code unless the entry's is a ConsumeQueueExt
    address, §5.1, which is not compared: ``ext[g]`` counts them). False at the first
    difference, or when a group has more records than its view rows."""
    cdef Py_ssize_t r, g, groups = view_of.shape[0]
    cdef bint same = True
    cdef const int64_t[:, ::1] view
    cdef const int64_t* e
    cdef const int64_t** at = <const int64_t**>PyMem_Malloc(groups * sizeof(int64_t*) + 1)
    cdef const int64_t** end = <const int64_t**>PyMem_Malloc(groups * sizeof(int64_t*) + 1)
    if at == NULL or end == NULL:
        PyMem_Free(at)
        PyMem_Free(end)
        raise MemoryError()
    try:
        for g in range(groups):  # the views stay referenced by ``views`` while their rows are read
            at[g] = end[g] = NULL
            if view_of[g] >= 0:
                view = views[view_of[g]]
                assert view.shape[1] == ENTRY_COLUMNS
                if view.shape[0]:
                    at[g] = &view[0, 0]
                    end[g] = at[g] + view.shape[0] * ENTRY_COLUMNS
        with nogil:
            for r in range(gid.shape[0]):
                g = gid[r]
                if g < 0 or view_of[g] < 0:
                    continue
                e = at[g]
                if e == end[g]:
                    same = False
                    break
                at[g] = e + ENTRY_COLUMNS
                if e[PHYS] != offsets[r] or e[SIZE] != sizes[r] or e[QOFF] != queue_offsets[r]:
                    same = False
                    break
                if e[TAGS] <= EXT_MAX_ADDRESS:
                    ext[g] += 1
                elif e[TAGS] != rec_tags[r]:
                    same = False
                    break
    finally:
        PyMem_Free(at)
        PyMem_Free(end)
    return same
