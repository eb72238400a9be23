"""The broker's placement rules, compiled (``placement.py``): ``putMessagePositionInfo`` of a
queue's requests and ``IndexFile.putKey`` of a run of records (reference §5.10, §6.5-§6.6)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from mqtool.store._bytes cimport be32, prefetch_w

from ..formats import consumequeue as cqfmt

cpdef enum:
    # queue state: [write_pos (-1: the queue has no file), max_phys_offset, filler_from, filler_to]
    S_WRITE = 0
    S_MAX_PHYS = 1
    S_FILL_FROM = 2
    S_FILL_TO = 3
    # index header state: IndexHeader fields in order, whether a put happened in this session, a spare slot
    H_BEGIN_TS = 0
    H_END_TS = 1
    H_BEGIN_PHY = 2
    H_END_PHY = 3
    H_SLOT_COUNT = 4
    H_INDEX_COUNT = 5
    H_PUT = 6
    # index_records' status
    BATCH_DONE = 0
    ROLL_NEEDED = 1
    BUFFER_FULL = 2

cdef enum:
    # slot table reads asked for this many keys ahead of their put: the 20 MB table is read at random, as
    # verify's ``read_entries`` reads it (``CHAIN_PREFETCH``); 64 keys cover the miss where 16 did not
    PREFETCH_AHEAD = 64

cdef int64_t UNIT = cqfmt.ENTRY_SIZE  # a consume queue unit's bytes


cdef inline int64_t floor_mod(int64_t a, int64_t b) noexcept nogil:
    """Python's (and Java's ``Math.floorMod``) ``a % b``: the sign of ``b``."""
    cdef int64_t m = a % b
    if m != 0 and ((m < 0) != (b < 0)):
        m += b
    return m


cdef inline uint32_t be_word(int64_t v) noexcept nogil:
    """The low 32 bits of ``v`` as stored big-endian, read back as a native uint32."""
    cdef uint32_t w = <uint32_t>v
    return <uint32_t>be32(<const uint8_t*>&w, 0)


def place_units(const int64_t[:] qoff, const int64_t[:] phys, const int64_t[:] size, int64_t[::1] state, int64_t file_size, bint dedup_by_end, bint repeat_guard, int64_t[::1] out_pos):
    """``putMessagePositionInfo`` for a run of requests of one queue, in commit log order.

    ``out_pos[i]`` = logical byte position of unit ``i`` or -1 where the broker skips it.
    ``dedup_by_end`` (4.5.0+, rules §3.1/§3.2): skip when offset + size <= maxPhysicOffset and
    keep offset + size; else (<= 4.4.0) skip when offset <= maxPhysicOffset and keep the offset.
    ``repeat_guard`` (4.2.0+, §3.3): skip a unit whose queue position is already written; before,
    it is appended at the write position anyway.
    ``state`` is updated; ``state[S_FILL_FROM:S_FILL_TO]`` is set when the queue's first file is
    created for a non-zero queue offset (``fillPreBlank``). Returns the number of units placed.
    """
    cdef Py_ssize_t i, placed = 0
    cdef int64_t kept, expect, base
    with nogil:
        for i in range(qoff.shape[0]):
            out_pos[i] = -1
            kept = phys[i] + size[i] if dedup_by_end else phys[i]  # the maxPhysicOffset this unit leaves
            if kept <= state[S_MAX_PHYS]:
                continue
            expect = <int64_t>(<uint64_t>qoff[i] * <uint64_t>UNIT)  # a Java long: a damaged QUEUEOFFSET wraps around
            if state[S_WRITE] < 0:  # getLastMappedFile creates the queue's first file
                base = expect - floor_mod(expect, file_size)
                state[S_WRITE] = base
                if qoff[i] != 0:  # fillPreBlank: whole units while below the position (one more if it wrapped off the unit grid)
                    state[S_FILL_FROM] = base
                    state[S_FILL_TO] = base + (expect - base + UNIT - 1) // UNIT * UNIT
                    state[S_WRITE] = state[S_FILL_TO]
            elif repeat_guard and qoff[i] != 0 and expect < state[S_WRITE]:
                continue  # "Build consume queue repeatedly"
            out_pos[i] = state[S_WRITE]
            state[S_WRITE] += UNIT
            state[S_MAX_PHYS] = kept
            placed += 1
    return placed


def index_records(int32_t[::1] slot_tbl, int64_t index_num, int64_t[::1] hdr, const int64_t[::1] phys, const int64_t[::1] ts, const uint8_t[::1] indexable, const int64_t[::1] key_start, const int64_t[::1] key_count, const int64_t[::1] keys, Py_ssize_t rec_from, int64_t key_from, bint counts_used_slots, uint32_t[::1] ent, bint dry):
    """``buildIndex`` / ``IndexFile.putKey`` (§6.5-§6.6) for records ``rec_from..``; resumes
    inside record ``rec_from`` at key ``key_from`` after a roll. ``slot_tbl`` is the file's slot
    table (native int32, the values the file holds); new entries go to ``ent`` (uint32 words,
    five per 20-byte entry, big-endian, in order, the first being entry number
    ``hdr[H_INDEX_COUNT]`` at the call; the caller views the words as bytes). Returns
    ``(rec, key, status, entries)``: ``ROLL_NEEDED`` when the file is full (call again with a new
    file from ``(rec, key)``), ``BUFFER_FULL`` when ``ent`` is (write it out, call again), else
    ``BATCH_DONE``. ``dry`` only counts (no slot table, no entries). The slot of the key
    ``PREFETCH_AHEAD`` keys on is prefetched: a slot table of the default geometry (20 MB) is
    read at random, and each read waited for a cache miss."""
    cdef int64_t begin_ts = hdr[H_BEGIN_TS], end_ts = hdr[H_END_TS], begin_phy = hdr[H_BEGIN_PHY], end_phy = hdr[H_END_PHY]
    cdef int64_t slot_count = hdr[H_SLOT_COUNT], count = hdr[H_INDEX_COUNT], put = hdr[H_PUT]
    cdef Py_ssize_t slots = slot_tbl.shape[0], n_keys = keys.shape[0], cap = ent.shape[0] // 5, n_recs = phys.shape[0]
    cdef Py_ssize_t n = 0, rec = n_recs, r, q, first, at, w
    cdef int64_t key = 0, status = BATCH_DONE, k, phy, t, key_hash, slot, prev, diff, d
    cdef int32_t* table = &slot_tbl[0]
    cdef bint stop
    with nogil:
        if not dry and rec_from < n_recs:
            first = key_start[rec_from] + key_from
            for q in range(first, min(first + PREFETCH_AHEAD, n_keys)):
                prefetch_w(table + keys[q] % slots)
        r = rec_from
        while r < n_recs:
            k = 0
            if r == rec_from and key_from > 0:
                k = key_from
            else:
                if count >= index_num:
                    rec, key, status = r, 0, ROLL_NEEDED
                    break
                if phys[r] < end_phy or not indexable[r]:
                    r += 1
                    continue
            stop = False
            while k < key_count[r]:
                if count >= index_num:
                    rec, key, status, stop = r, k, ROLL_NEEDED, True
                    break
                phy, t = phys[r], ts[r]
                if not dry:
                    if n >= cap:  # nothing of key k is put yet: the next call resumes here
                        rec, key, status, stop = r, k, BUFFER_FULL, True
                        break
                    at = key_start[r] + k
                    if at + PREFETCH_AHEAD < n_keys:
                        prefetch_w(table + keys[at + PREFETCH_AHEAD] % slots)
                    key_hash = keys[at]
                    slot = key_hash % slots
                    prev = table[slot]
                    if prev <= 0 or prev > count:
                        prev = 0
                    diff = 0
                    if begin_ts > 0:
                        d = t - begin_ts
                        diff = d // 1000 if d >= 0 else -((-d) // 1000)
                        if diff > 0x7FFFFFFF:
                            diff = 0x7FFFFFFF
                        elif diff < 0:
                            diff = 0
                    w = n * 5  # the entry (§6.3): key hash, phy offset (two words), time diff, prev
                    ent[w] = be_word(key_hash)
                    ent[w + 1] = be_word(phy >> 32)
                    ent[w + 2] = be_word(phy)
                    ent[w + 3] = be_word(diff)
                    ent[w + 4] = be_word(prev)
                    n += 1
                    table[slot] = <int32_t>count
                    if prev == 0 or not counts_used_slots:
                        slot_count += 1
                if count <= 1:
                    begin_phy = phy
                    begin_ts = t
                count += 1
                end_phy = phy
                end_ts = t
                put = 1
                k += 1
            if stop:
                break
            r += 1
    hdr[H_BEGIN_TS], hdr[H_END_TS], hdr[H_BEGIN_PHY], hdr[H_END_PHY] = begin_ts, end_ts, begin_phy, end_phy
    hdr[H_SLOT_COUNT], hdr[H_INDEX_COUNT], hdr[H_PUT] = slot_count, count, put
    return rec, key, status, n
