"""Compiled kernels of ``verify/index.py``: entries read with their hash chains replayed, and a
batch's index entries joined with its records' keys (reference §6.3-§6.6)."""

import struct

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from mqtool.store._bytes cimport be_signed, prefetch_w

from ..formats import index as ixfmt

# where ``read_entries`` finds the fields: the schema's (``ixfmt.ENTRY_LAYOUT``, held equal to the construct struct)
_E = ixfmt.ENTRY_LAYOUT
assert _E.names == ("key_hash", "phy_offset", "time_diff", "prev_index")
cdef Py_ssize_t ENTRY = _E.size
cdef Py_ssize_t HASH_AT = _E.offset_of("key_hash"), PHY_AT = _E.offset_of("phy_offset"), DIFF_AT = _E.offset_of("time_diff"), PREV_AT = _E.offset_of("prev_index")
cdef int HASH_W, PHY_W, DIFF_W, PREV_W
HASH_W, PHY_W, DIFF_W, PREV_W = (struct.calcsize(">" + code) for code in _E.codec.format.lstrip(">"))

cdef enum:
    # entries: ``read_entries`` asks for a slot this far ahead of its use. The slots (20 MB) are read at random
    # from L3 or memory, most of all beside the walk: 64 entries (about 0.3 us of the loop) cover that wait,
    # 16 did not (``read_entries`` 28-30 ms a run of the 1 KiB store, not 48-52; 48 or 96 in between)
    CHAIN_PREFETCH = 64

cdef int64_t INT32_MAX = ixfmt.INT32_MAX
cdef Py_ssize_t SLOT_W = ixfmt.SLOT.size
assert ixfmt.SLOT.format.lstrip(">") in ("l", "i")  # a big-endian int32


cdef inline int64_t slot_of(int64_t h, int64_t slot_num, bint narrow) noexcept nogil:
    """``h % slot_num`` (``IndexFile.putKey``'s slot of a hash ``h >= 0``), by a 32-bit division where both fit
    (Java's ``int`` arithmetic; a hash is a 4-byte field): it takes a fraction of the 64-bit one's cycles."""
    if narrow:
        return <int64_t>(<uint32_t>h % <uint32_t>slot_num)
    return h % slot_num


def read_entries(const uint8_t[::1] data, int64_t first_number, int32_t[::1] last_seen, int64_t slot_num,
                 int64_t[::1] hashes, int64_t[::1] phys, int64_t[::1] diffs):
    """The index entries of ``data`` (§6.3, ``IndexEntryStruct``; the first is entry number
    ``first_number``) into the three arrays, replaying ``IndexFile.putKey``'s slot updates as
    they are read (``last_seen[slot]``: the slot's newest entry so far), in one pass.

    Returns (entries whose prev is not their slot's previous entry, first such entry number,
    entries with a negative hash, entries that started a slot chain). The slots are read at
    random (tens of MB of them): each is asked for ``CHAIN_PREFETCH`` entries ahead."""
    cdef Py_ssize_t i, p, n = hashes.shape[0], bad = 0, negative = 0, heads = 0
    cdef int64_t first_bad = -1, h, prev, slot, ahead
    cdef const uint8_t* buf
    cdef bint narrow = 0 < slot_num <= 0xFFFFFFFF and HASH_W <= 4
    assert data.shape[0] >= n * ENTRY and phys.shape[0] >= n and diffs.shape[0] >= n
    if n == 0:
        return 0, -1, 0, 0
    buf = &data[0]
    with nogil:
        for i in range(n):
            if i + CHAIN_PREFETCH < n:
                ahead = be_signed(buf, (i + CHAIN_PREFETCH) * ENTRY + HASH_AT, HASH_W)
                if ahead >= 0:
                    prefetch_w(&last_seen[slot_of(ahead, slot_num, narrow)])
            p = ENTRY * i
            h = be_signed(buf, p + HASH_AT, HASH_W)
            hashes[i] = h
            phys[i] = be_signed(buf, p + PHY_AT, PHY_W)
            diffs[i] = be_signed(buf, p + DIFF_AT, DIFF_W)
            if h < 0:
                negative += 1
                continue
            prev = be_signed(buf, p + PREV_AT, PREV_W)
            slot = slot_of(h, slot_num, narrow)
            if prev != last_seen[slot]:
                bad += 1
                if first_bad < 0:
                    first_bad = first_number + i
            if prev == 0:
                heads += 1
            last_seen[slot] = <int32_t>(first_number + i)
    return bad, first_bad, negative, heads


def slots_differ(const uint8_t[::1] table, const int32_t[::1] last_seen):
    """The hash slots whose table value (``IndexSlotStruct``, from the file's map; a table cut short
    reads as zeros) is not the newest entry of their chain (``last_seen``): (how many, the first,
    its table value; -1, 0 for none). One pass, no copy of the table."""
    cdef Py_ssize_t s, n = last_seen.shape[0], have = table.shape[0] // SLOT_W, count = 0, first = -1
    cdef int64_t v, first_value = 0
    cdef const uint8_t* buf = &table[0] if table.shape[0] else NULL
    with nogil:
        for s in range(n):
            v = be_signed(buf, s * SLOT_W, SLOT_W) if s < have else 0
            if v != last_seen[s]:
                count += 1
                if first < 0:
                    first, first_value = s, v
    return count, first, first_value


def first_beyond(const int64_t[::1] values, Py_ssize_t lo, int64_t limit, bint or_equal):
    """The first ``i >= lo`` with ``values[i] > limit`` (``>=`` with ``or_equal``), else ``len(values)``:
    a batch's entries are found at the head of a chunk without reading the rest of it."""
    cdef Py_ssize_t i = lo, n = values.shape[0]
    while i < n and not (values[i] > limit or (or_equal and values[i] == limit)):
        i += 1
    return i


def entries_match(const int64_t[::1] phy, const int64_t[::1] hashes, const int64_t[::1] diffs, const int64_t[::1] begins, const int64_t[::1] ends,
                  const int64_t[::1] offsets, const int64_t[:] counts, const int64_t[::1] keys, const int64_t[:] store_ts, int64_t lower):
    """Whether index entries (in file order; entry ``j`` of the file slice ``k`` where
    ``ends[k - 1] <= j < ends[k]`` has that file's ``begins[k]``) are exactly the keys of the
    batch's records (``offsets``, ``counts`` keys each, ``keys`` in put order): entries below
    ``lower`` lead and are not judged; the others point at records in order, each record has as
    many entries as keys, each carries its record's time difference (``ixfmt.time_diff_seconds``,
    §6.6). One pass over the entries. Returns (code, entries skipped below ``lower``): code -1 a
    difference, 0 equal, 1 equal but for the hashes' order (the caller compares each record's
    keys as a multiset)."""
    cdef Py_ssize_t m = phy.shape[0], n = offsets.shape[0], j, r = 0, k = 0, skipped = 0, at = 0, timed_r = -1, timed_k = -1
    cdef int64_t p, begin, d, expected = 0, seen = 0  # seen: entries of record ``r`` so far
    cdef int code = 0  # -1 at the first difference, 1 once a hash is out of put order
    with nogil:
        while skipped < m and phy[skipped] < lower:
            if skipped and phy[skipped] < phy[skipped - 1]:
                code = -1
                break
            skipped += 1
        j = skipped
        while code >= 0 and j < m:
            p = phy[j]
            if j and p < phy[j - 1]:
                code = -1
                break
            while r < n and offsets[r] < p and seen == counts[r]:
                r += 1
                seen = 0
            if r >= n or offsets[r] != p or at >= keys.shape[0]:
                code = -1
                break
            seen += 1
            while ends[k] <= j:
                k += 1
            if r != timed_r or k != timed_k:  # the record's time difference, once per record and file
                timed_r, timed_k = r, k
                begin = begins[k]
                expected = 0
                if begin > 0:
                    d = store_ts[r] - begin
                    expected = (d if d > 0 else 0) // 1000
                    if expected > INT32_MAX:
                        expected = INT32_MAX
            if diffs[j] != expected:
                code = -1
                break
            if hashes[j] != keys[at]:
                code = 1
            at += 1
            j += 1
        while code >= 0 and r < n:  # the records from the last entry's on: each with all its keys
            if seen != counts[r]:
                code = -1
            r += 1
            seen = 0
    return code, (skipped if code >= 0 else 0)
