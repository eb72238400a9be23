"""Compiled kernels of ``verify/consumequeue.py``: consume queue units decoded, a batch's records
grouped by queue, and the groups joined with their queues' entries (reference §5.1)."""

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


def decode_units(const uint8_t[::1] data, int64_t[::1] phys, int64_t[::1] size, int64_t[::1] tags):
    """The units of ``data`` into ``phys``, ``size``, ``tags`` (§5.1; ``UNIT_DTYPE`` read in one
    pass); returns (units that are not entries, phys < 0 or size <= 0: filler units)."""
    cdef Py_ssize_t i, p, n = phys.shape[0], invalid = 0, fillers = 0
    cdef int64_t a, b, c
    cdef const uint8_t* buf
    if n == 0:
        return 0, 0
    buf = &data[0]
    with nogil:
        for i in range(n):
            p = UNIT * i
            a = be_signed(buf, p + PHYS_AT, PHYS_W)
            b = be_signed(buf, p + SIZE_AT, SIZE_W)
            c = be_signed(buf, p + TAGS_AT, TAGS_W)
            phys[i] = a
            size[i] = b
            tags[i] = c
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


def join_groups(const int32_t[::1] gid, int64_t[::1] fill, const int64_t[:] qoff, const int64_t[:] phys, const int64_t[:] size, const int64_t[:] tags,
                const int64_t[:] offsets, const int64_t[:] sizes, const int64_t[:] queue_offsets, const int64_t[:] rec_tags, int64_t[::1] ext):
    """Whether the queue entries equal the records of their groups, in commit log order: group
    ``g``'s entries are ``fill[g]`` on (-1: the group is not compared; ``fill`` is used up: each
    moves on as its entries are read), one per record of the group (offset, size, QUEUEOFFSET,
    and the tags code unless the entry's is a ConsumeQueueExt address, §5.1, which is not
    compared: ``ext[g]`` counts them). False at the first difference. Records are read in
    order, each group's entries as a stream of its own."""
    cdef Py_ssize_t r, g, i
    cdef bint same = True
    with nogil:
        for r in range(gid.shape[0]):
            g = gid[r]
            if g < 0:
                continue
            i = fill[g]
            if i < 0:
                continue
            fill[g] = i + 1
            if phys[i] != offsets[r] or size[i] != sizes[r] or qoff[i] != queue_offsets[r]:
                same = False
                break
            if tags[i] <= EXT_MAX_ADDRESS:
                ext[g] += 1
            elif tags[i] != rec_tags[r]:
                same = False
                break
    return same
