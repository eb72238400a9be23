"""Compiled kernels of ``verify/index.py``: the hash chains replayed and index keys hashed
(reference §6.3-§6.4)."""

from libc.stdint cimport int32_t, int64_t, uint64_t

from mqtool.store._bytes cimport prefetch_w

cdef enum:
    CHAIN_PREFETCH = 16  # entries: ``check_chains`` asks for a slot this far ahead of its use

cdef uint64_t M32 = 0xFFFFFFFF, INT_MIN_ABS = 0x80000000  # Java's int: the low 32 bits, |Integer.MIN_VALUE|


def check_chains(const int64_t[::1] hashes, const int64_t[::1] prevs, int64_t first_number, int32_t[::1] last_seen, int64_t slot_num):
    """Replay ``IndexFile.putKey``'s slot updates over a chunk of entries.

    Returns (entries whose prev is not their slot's previous entry, first such entry number,
    entries with a negative hash, entries that started a slot chain). The slots are read at
    random (tens of MB of them): each is asked for ``CHAIN_PREFETCH`` entries ahead."""
    cdef Py_ssize_t i, n = hashes.shape[0], bad = 0, negative = 0, heads = 0
    cdef int64_t first_bad = -1, h, slot, ahead
    if n == 0:
        return 0, -1, 0, 0
    with nogil:
        for i in range(n):
            if i + CHAIN_PREFETCH < n:
                ahead = hashes[i + CHAIN_PREFETCH]
                if ahead >= 0:
                    prefetch_w(&last_seen[ahead % slot_num])
            h = hashes[i]
            if h < 0:
                negative += 1
                continue
            slot = h % slot_num
            if prevs[i] != last_seen[slot]:
                bad += 1
                if first_bad < 0:
                    first_bad = first_number + i
            if prevs[i] == 0:
                heads += 1
            last_seen[slot] = <int32_t>(first_number + i)
    return bad, first_bad, negative, heads


def index_hashes(const int64_t[::1] units, const int64_t[::1] starts, const int64_t[::1] ends, const int64_t[::1] prefixes, int64_t[::1] out):
    """``IndexFile.indexKeyHashMethod`` of many keys at once: Java's ``String.hashCode`` of
    ``topic#key`` (``prefixes[i]`` = the hash of ``topic#``, continued over the key's UTF-16
    units ``units[starts[i]:ends[i]]``), then ``abs`` with MIN_VALUE mapped to 0 (§6.4)."""
    cdef Py_ssize_t i, j
    cdef uint64_t h
    with nogil:
        for i in range(starts.shape[0]):
            h = <uint64_t>prefixes[i]
            for j in range(starts[i], ends[i]):
                h = (31 * h + <uint64_t>units[j]) & M32
            if h >= INT_MIN_ABS:
                h = (<uint64_t>1 << 32) - h
            out[i] = 0 if h >= INT_MIN_ABS else <int64_t>h
    return None
