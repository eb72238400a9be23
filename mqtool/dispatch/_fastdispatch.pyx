"""Compiled kernels of ``dispatch/fastdispatch.py``: what ``CommitLog.checkMessageAndReturnSize``
derives from a record for the consume queue and index dispatchers, a batch of records a call."""

from libc.stdint cimport int64_t, uint8_t, uint64_t

from mqtool.store._bytes cimport be32, be64, find_byte, load8, prefetch_w, signed32
from mqtool.store._text cimport HashRun, Item, java_hash_utf8, property_item, span_is
from mqtool.dispatch._topictable cimport find_topic

from ..formats import commitlog as fmt
from ..formats.dispatch import INDEX_KEYS_ONLY as _KEYS_ONLY, INDEX_NONE as _NONE

_V4 = fmt.HEADER_LAYOUTS[(False, False)]
cdef Py_ssize_t POS_QUEUE_ID = _V4.offset_of("queue_id"), POS_QUEUE_OFFSET = _V4.offset_of("queue_offset")
cdef Py_ssize_t POS_PHYS_OFFSET = _V4.offset_of("phys_offset"), POS_SYS_FLAG = _V4.offset_of("sys_flag")
cdef Py_ssize_t POS_STORE_TS_V4 = _V4.offset_of("store_timestamp")
cdef Py_ssize_t POS_STORE_TS_V6 = fmt.HEADER_LAYOUTS[(True, False)].offset_of("store_timestamp")
cdef Py_ssize_t PROPS_LEN_SIZE = fmt.PROPERTIES_LENGTH.size
cdef int64_t BORN_V6 = int(fmt.SysFlag.BORNHOST_V6), TRAN_MASK = fmt.TRANSACTION_TYPE_MASK
cdef int64_t TRAN_ROLLBACK = int(fmt.TransactionType.ROLLBACK), TRAN_COMMIT = int(fmt.TransactionType.COMMIT)
cdef int64_t INDEX_NONE = _NONE, INDEX_KEYS_ONLY = _KEYS_ONLY

cdef enum:
    PREFETCH_AHEAD = 4  # records: the cache lines ``dispatch_rows`` reads are asked for this many records ahead
    PREFETCH_SIZE = 256  # of records this long or longer (shorter ones are a few lines apart: the CPU's own prefetch keeps up)

cdef const uint8_t* TAGS = b"TAGS"
cdef const uint8_t* KEYS = b"KEYS"
cdef const uint8_t* UNIQ = b"UNIQ_KEY"
cdef const uint8_t* DELAY = b"DELAY"
cdef const uint8_t* MULTI = b"INNER_MULTI_DISPATCH"


cdef struct Spans:  # value bounds of the properties dispatch reads (-1: none)
    Py_ssize_t tags_s, tags_e, keys_s, keys_e, uniq_s, uniq_e, delay_s, delay_e
    int64_t flags


cdef inline bint parse_int32(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, int64_t* value) noexcept nogil:
    """``Integer.parseInt`` for plain ASCII ``[+-]?[0-9]+`` into ``value``; False (0) for anything else."""
    cdef Py_ssize_t i = start
    cdef bint neg = False
    cdef int64_t v = 0, d
    value[0] = 0
    if i < end and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    if i >= end or end - i > 10:
        return False
    while i < end:
        d = <int64_t>buf[i] - 48
        if d < 0 or d > 9:
            return False
        v = v * 10 + d
        i += 1
    if neg:
        v = -v
    if v > 0x7FFFFFFF or v < -0x80000000:
        return False
    value[0] = v
    return True


cdef inline int64_t fingerprint(const uint8_t* buf, Py_ssize_t p, Py_ssize_t n) noexcept nogil:
    """Length and the first, middle and last 8 bytes of a topic, mixed: cheap, and only a hint
    (``topicnumbers`` compares the bytes), so equal fingerprints of different topics are fine.
    A topic of 8 bytes or more is read as three words (native order: a hint needs none other), a
    shorter one byte by byte into one integer (a word could run past the buffer)."""
    cdef uint64_t a, b, c, x
    cdef Py_ssize_t j
    if n >= 8:
        a, b, c = load8(buf, p), load8(buf, p + n - 8), load8(buf, p + n // 2 - 4)
    else:
        a = 0
        for j in range(n):
            a = (a << 8) | buf[p + j]
        b = c = a
    x = (a * <uint64_t>0x9E3779B97F4A7C15) ^ (b * <uint64_t>0xC2B2AE3D27D4EB4F) ^ (c * <uint64_t>0x165667B19E3779F9) ^ <uint64_t>n
    return <int64_t>(x ^ (x >> 29))


cdef inline Spans dispatch_properties(const uint8_t* buf, Py_ssize_t props, Py_ssize_t props_end, bint legacy) noexcept nogil:
    """One pass over a record's properties, an item (up to the next \\x02) at a time, read by
    ``property_item``; the last occurrence of each key wins: the value spans of TAGS, KEYS,
    UNIQ_KEY and DELAY, and ``FLAG_MULTI_DISPATCH`` if INNER_MULTI_DISPATCH is there (§2.8); ``FLAG_NO_PROPERTIES`` if
    there are none (``checkMessageAndReturnSize`` leaves the map null)."""
    cdef Spans s
    cdef Item item
    cdef Py_ssize_t i = props, j, n
    s.tags_s = s.tags_e = s.keys_s = s.keys_e = s.uniq_s = s.uniq_e = s.delay_s = s.delay_e = -1
    s.flags = FLAG_NO_PROPERTIES if props >= props_end else 0
    while i < props_end:
        j = find_byte(buf, i, props_end, 2)
        item = property_item(buf, i, j, legacy)
        if item.key >= 0:
            n = item.key_end - item.key
            if n == 4:
                if span_is(buf, item.key, item.key_end, TAGS, 4):
                    s.tags_s, s.tags_e = item.value, item.value_end
                elif span_is(buf, item.key, item.key_end, KEYS, 4):
                    s.keys_s, s.keys_e = item.value, item.value_end
            elif n == 8:
                if span_is(buf, item.key, item.key_end, UNIQ, 8):
                    s.uniq_s, s.uniq_e = item.value, item.value_end
            elif n == 5:
                if span_is(buf, item.key, item.key_end, DELAY, 5):
                    s.delay_s, s.delay_e = item.value, item.value_end
            elif n == 20:
                if span_is(buf, item.key, item.key_end, MULTI, 20):
                    s.flags |= FLAG_MULTI_DISPATCH
        i = j + 1
    return s


cdef inline bint tags_code(const uint8_t* buf, Spans* s, bint delayed, int64_t store_ts, const int64_t* delay_ms, Py_ssize_t levels, int64_t* tags) noexcept nogil:
    """The consume queue tags code into ``tags``: the TAGS hash (§3.4), or for a ``delayed``
    message of the schedule topic its delivery time, the level capped at ``levels - 1`` (§3.5).
    False: a value the kernel does not decode (fallback)."""
    cdef bint ok = True
    cdef HashRun run
    cdef int64_t level
    tags[0] = 0
    if s.tags_s >= 0:
        run = java_hash_utf8(buf, s.tags_s, s.tags_e, 0)
        ok = run.ok
        tags[0] = signed32(run.h)
    if delayed:
        if not parse_int32(buf, s.delay_s, s.delay_e, &level):
            ok = False
        if level > levels - 1:
            level = levels - 1
        if level > 0:
            tags[0] = store_ts + delay_ms[level]
    return ok


cdef inline bint index_keys(const uint8_t* buf, Py_ssize_t uniq_s, Py_ssize_t uniq_e, Py_ssize_t keys_s, Py_ssize_t keys_e, int64_t* keys, int64_t* count) noexcept nogil:
    """The UNIQ_KEY (``uniq_s`` >= 0) and each space-separated KEYS word, hashed into ``keys``
    as ``units << 32 | hash``; their number into ``count``. False: a malformed value (fallback)."""
    cdef bint ok = True
    cdef HashRun run
    cdef Py_ssize_t s, e
    cdef int64_t n = 0
    if uniq_s >= 0:
        run = java_hash_utf8(buf, uniq_s, uniq_e, 0)
        ok = ok and run.ok
        keys[n] = (run.units << 32) | run.h
        n += 1
    if keys_s >= 0:
        s = keys_s
        while s <= keys_e:
            e = s
            while e < keys_e and buf[e] != 32:
                e += 1
            if e > s:
                run = java_hash_utf8(buf, s, e, 0)
                ok = ok and run.ok
                keys[n] = (run.units << 32) | run.h
                n += 1
            s = e + 1
    count[0] = n
    return ok


def dispatch_rows(const uint8_t[::1] buf, const int64_t[:, ::1] rows, Py_ssize_t first_row, bint legacy, const uint8_t[::1] sched_topic, const int64_t[::1] delay_ms, int64_t index_enable, int64_t[:, ::1] out, Py_ssize_t out_base, int64_t[::1] keys, int64_t key_fill, tuple known, topic_id[::1] topic_ids):
    """Fill ``out[out_base + r]`` and ``topic_ids[out_base + r]`` for ``rows[first_row:]`` and
    append partial key hashes to ``keys`` from ``key_fill``.

    ``rows`` are ``walk_segment`` rows (pos, size, body, body_len, topic, props, crc_ok).
    ``delay_ms[level]`` is the delay of ``level`` (index 0 unused); ``len(delay_ms) - 1`` is the
    max level (an empty table, ``len == 1``, reproduces the 4.9.2-4.9.8 recovery quirk, §3.5).
    ``index_enable`` is the index rule (``formats.dispatch.INDEX_*``, rules file §4.2): none, 4.0.0+'s
    UNIQ_KEY and KEYS of all but ROLLBACK, or 3.2.6's KEYS of NOT and PREPARED records only.
    A key is stored as ``units << 32 | hash`` of the key alone; ``finish_keys`` combines it with
    the topic once topics are known (Java's hash of ``topic#key`` is polynomial in the units).
    ``known`` is ``topicnumbers.TopicNumbers.known``: a topic found there gets its id while the
    record is in cache, any other -1 (``number_topics`` numbers it, in walk order).
    Returns ``(rows_done, key_fill)``; fewer rows than given when ``keys`` is full.
    """
    cdef Py_ssize_t n = rows.shape[0], r = first_row, ahead, levels = delay_ms.shape[0], sched_len = sched_topic.shape[0]
    cdef Py_ssize_t capacity = keys.shape[0]
    cdef const uint8_t* b = &buf[0] if buf.shape[0] else NULL
    cdef const uint8_t* sched = &sched_topic[0] if sched_len else NULL
    cdef const int64_t* delays = &delay_ms[0]
    cdef int64_t* key_out = &keys[0] if capacity else NULL
    cdef int64_t* row
    cdef int64_t pos, size, topic, props, topic_len, props_end, sys_flag, store_ts, tags, count, tran
    cdef Spans s
    cdef bint ok
    cdef const int64_t[::1] table, fps, starts, lens, ids
    cdef const uint8_t[::1] pool
    cdef int64_t mask, k
    table, fps, starts, lens, ids, pool = known
    mask = table.shape[0] - 1
    with nogil:
        while r < n:
            if r + PREFETCH_AHEAD < n and rows[r + PREFETCH_AHEAD, 1] >= PREFETCH_SIZE:
                ahead = r + PREFETCH_AHEAD  # its header, topic and properties asked for now, so they are in cache when the walk reaches it
                prefetch_w(b + rows[ahead, 0])
                prefetch_w(b + rows[ahead, 4])
                prefetch_w(b + rows[ahead, 5])
                prefetch_w(b + rows[ahead, 0] + rows[ahead, 1] - 1)
            pos = rows[r, 0]
            size = rows[r, 1]
            topic = rows[r, 4]
            props = rows[r, 5]
            topic_len = props - PROPS_LEN_SIZE - topic
            props_end = pos + size
            if key_fill + (props_end - props) // 2 + 2 > capacity:
                break
            row = &out[out_base + r, 0]
            sys_flag = signed32(be32(b, pos + POS_SYS_FLAG))
            store_ts = be64(b, pos + (POS_STORE_TS_V6 if (sys_flag & BORN_V6) else POS_STORE_TS_V4))
            row[F_POS] = pos
            row[F_TOPIC_POS] = topic
            row[F_TOPIC_LEN] = topic_len
            row[F_QUEUE_ID] = signed32(be32(b, pos + POS_QUEUE_ID))
            row[F_QUEUE_OFFSET] = be64(b, pos + POS_QUEUE_OFFSET)
            row[F_PHYS] = be64(b, pos + POS_PHYS_OFFSET)
            row[F_SIZE] = size
            row[F_SYS_FLAG] = sys_flag
            row[F_STORE_TS] = store_ts
            row[F_TOPIC_FP] = fingerprint(b, topic, topic_len)
            k = find_topic(b, buf.shape[0], topic, topic_len, row[F_TOPIC_FP], &table[0], mask, &fps[0], &starts[0], &lens[0], &pool[0])
            topic_ids[out_base + r] = <topic_id>(ids[k] if k >= 0 else -1)
            s = dispatch_properties(b, props, props_end, legacy)
            ok = tags_code(b, &s, s.delay_s >= 0 and span_is(b, topic, topic + topic_len, sched, sched_len), store_ts, delays, levels, &tags)
            if not ok:
                s.flags |= FLAG_FALLBACK
            row[F_TAGS] = tags
            row[F_KEY_START] = key_fill
            count = 0
            tran = sys_flag & TRAN_MASK
            if index_enable != INDEX_NONE and tran != TRAN_ROLLBACK and (index_enable != INDEX_KEYS_ONLY or tran != TRAN_COMMIT):
                if not index_keys(b, s.uniq_s if index_enable != INDEX_KEYS_ONLY else -1, s.uniq_e, s.keys_s, s.keys_e, key_out + key_fill, &count):
                    s.flags |= FLAG_FALLBACK
            row[F_KEY_COUNT] = count
            row[F_FLAGS] = s.flags
            key_fill += count
            r += 1
    return r, key_fill


def finish_keys(const int64_t[:, ::1] out, Py_ssize_t lo, Py_ssize_t hi, const topic_id[::1] topic_ids, const int64_t[::1] topic_state, const int64_t[::1] pow31, int64_t[::1] keys):
    """Turn the partial hashes of rows ``lo:hi`` into index key hashes (``finish_row_keys``);
    ``topic_state[t]`` is the unsigned hash state of topic ``t`` + "#"."""
    cdef Py_ssize_t r
    if not keys.shape[0]:
        return
    with nogil:
        for r in range(lo, hi):
            finish_row_keys(&keys[0], out[r, F_KEY_START], out[r, F_KEY_COUNT], topic_state[topic_ids[r]], &pow31[0])
