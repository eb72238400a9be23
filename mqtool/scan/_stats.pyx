"""Compiled kernels of ``stats.py``: the group tables (per topic key, queue id and period) filled
from message columns (``accumulate``, the Spark reader's) or straight from a walk batch's record
bytes (``stats_batch``, ``mqtool stats``' pass), tables merged (``combine``), and the topic key
(a 64-bit hash of a topic's bytes, also ``survivors.py``'s id hash: ``string_keys``)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

import numpy as np

from mqtool.store._bytes cimport be32, be64, load8, signed32
from mqtool.store._text cimport topic_slot

from ..formats import commitlog as fmt
from ..store import fastscan as fs

cdef int64_t TRANSACTION_MASK = int(fmt.SysFlag.TRANSACTION_PREPARED | fmt.SysFlag.TRANSACTION_COMMIT)
cdef int64_t PREPARED = int(fmt.TransactionType.PREPARED), COMMIT = int(fmt.TransactionType.COMMIT), ROLLBACK = int(fmt.TransactionType.ROLLBACK)
cdef int64_t COMPRESSED = int(fmt.SysFlag.COMPRESSED), BORN_V6 = int(fmt.SysFlag.BORNHOST_V6)

_V4 = fmt.HEADER_LAYOUTS[(False, False)]
_BORN_V6 = fmt.HEADER_LAYOUTS[(True, False)]
assert _BORN_V6.offset_of("store_timestamp") == fmt.HEADER_LAYOUTS[(True, True)].offset_of("store_timestamp")
cdef Py_ssize_t POS_QUEUE_ID = _V4.offset_of("queue_id"), POS_QUEUE_OFFSET = _V4.offset_of("queue_offset"), POS_SYS_FLAG = _V4.offset_of("sys_flag")
cdef Py_ssize_t POS_BORN_TS = _V4.offset_of("born_timestamp"), POS_STORE_TS_V4 = _V4.offset_of("store_timestamp")
cdef Py_ssize_t POS_STORE_TS_BORN_V6 = _BORN_V6.offset_of("store_timestamp")
cdef Py_ssize_t COL_POS = fs.COL_POS, COL_SIZE = fs.COL_SIZE, COL_BODY_LEN = fs.COL_BODY_LEN, COL_TOPIC = fs.COL_TOPIC, COL_PROPS = fs.COL_PROPS, COL_CRC_OK = fs.COL_CRC_OK
cdef Py_ssize_t PROPS_LEN = fs.PROPS_LEN

# the born-to-store delay histogram's buckets (``stats.delay_bucket``): exact below 2**EXACT_BITS
# ms, then 2**SUB_BITS buckets per power of two (relative error below 1/128)
SUB_BITS = 7
EXACT_BITS = 10
cdef int64_t _SUB_BITS = SUB_BITS, _EXACT_BITS = EXACT_BITS, _EXACT = 1 << EXACT_BITS

cdef uint64_t FNV_OFFSET = 0xCBF29CE484222325ULL, FNV_PRIME = 0x100000001B3ULL


cdef struct Table:  # a ``stats.GroupTable``'s arrays
    int64_t* keys  # (capacity, 3)
    uint8_t* used
    int64_t* values  # (capacity, width)
    int64_t* count
    const int64_t* init
    int64_t capacity, width


cdef Table _table(object parts) except *:
    """The arrays of ``(keys, used, values, count, init)`` (``stats._parts``)."""
    cdef int64_t[:, ::1] keys = parts[0]
    cdef uint8_t[::1] used = parts[1]
    cdef int64_t[:, ::1] values = parts[2]
    cdef int64_t[::1] count = parts[3]
    cdef const int64_t[::1] init = parts[4]
    cdef Table t
    t.keys, t.used, t.values, t.count, t.init = &keys[0, 0], &used[0], &values[0, 0], &count[0], &init[0]
    t.capacity, t.width = used.shape[0], values.shape[1]
    return t


cdef inline bint _half_full(const Table* t) noexcept nogil:
    return 2 * t.count[0] >= t.capacity


cdef inline int64_t _slot(Table* t, int64_t a, int64_t b, int64_t c) noexcept nogil:
    """The slot of key (a, b, c), claimed and initialised when new (linear probing from the
    ``topic_slot`` of the key's hash)."""
    cdef uint64_t h = (<uint64_t>a * 0x9E3779B97F4A7C15ULL) ^ (<uint64_t>b * 0xC2B2AE3D27D4EB4FULL) ^ (<uint64_t>c * 0x165667B19E3779F9ULL)
    cdef int64_t mask = t.capacity - 1, s = topic_slot(<int64_t>h, mask), j
    cdef int64_t* key
    while t.used[s]:
        key = t.keys + 3 * s
        if key[0] == a and key[1] == b and key[2] == c:
            return s
        s = (s + 1) & mask
    t.used[s] = True
    key = t.keys + 3 * s
    key[0], key[1], key[2] = a, b, c
    for j in range(t.width):
        t.values[s * t.width + j] = t.init[j]
    t.count[0] += 1
    return s


cdef inline int64_t _floor_div(int64_t a, int64_t b) noexcept nogil:
    """Python's ``a // b`` (C's division truncates towards zero)."""
    cdef int64_t q = a // b
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef inline int64_t _period(int64_t ts, int64_t period_ms) noexcept nogil:
    return _floor_div(ts, period_ms) * period_ms


def combine(keys, used, values, count, init, const int64_t[::1] ops, const int64_t[:, ::1] src_keys, const uint8_t[::1] src_used, const int64_t[:, ::1] src_values):
    """Fold another table's groups into this one (``ops``: 0 sum, 1 min, 2 max)."""
    cdef Table t = _table((keys, used, values, count, init))
    cdef Py_ssize_t i, k
    cdef int64_t s, v
    cdef int64_t* row
    with nogil:
        for i in range(src_used.shape[0]):
            if not src_used[i]:
                continue
            s = _slot(&t, src_keys[i, 0], src_keys[i, 1], src_keys[i, 2])
            row = t.values + s * t.width
            for k in range(ops.shape[0]):
                v = src_values[i, k]
                if ops[k] == 0:
                    row[k] += v
                elif ops[k] == 1:
                    row[k] = min(row[k], v)
                else:
                    row[k] = max(row[k], v)


cdef inline void _add_message(int64_t* v, int64_t size, int64_t body_length, int64_t crc_ok, int64_t sys_flag, int64_t ts, int64_t delay, int64_t queue_offset) noexcept nogil:
    """One message into its group's values ``v`` (``stats.AGGREGATES``' columns, in order)."""
    cdef int64_t kind = sys_flag & TRANSACTION_MASK
    cdef bint dispatched = kind == 0 or kind == COMMIT
    v[0] += 1
    v[1] += dispatched
    v[2] += size
    v[3] += body_length if body_length > 0 else 0
    v[4] += crc_ok == 0
    v[5] = min(v[5], ts)
    v[6] = max(v[6], ts)
    if dispatched:
        v[7] = min(v[7], queue_offset)
        v[8] = max(v[8], queue_offset)
    v[9] += kind == 0
    v[10] += kind == PREPARED
    v[11] += kind == COMMIT
    v[12] += kind == ROLLBACK
    v[13] += (sys_flag & COMPRESSED) != 0
    v[14] = min(v[14], delay)
    v[15] = max(v[15], delay)


def accumulate(keys, used, values, count, init, Py_ssize_t start, const int64_t[::1] topic, const int64_t[::1] queue_id, const int64_t[::1] size,
               const int64_t[::1] body_length, const int64_t[::1] crc_ok, const int64_t[::1] sys_flag, const int64_t[::1] store_ts,
               const int64_t[::1] born_ts, const int64_t[::1] queue_offset, int64_t period_ms):
    """Rows ``start ..`` into the table; returns where it stopped (the table half full: grow it)."""
    cdef Table t = _table((keys, used, values, count, init))
    cdef Py_ssize_t i, n = topic.shape[0], stop = n
    cdef int64_t ts, s
    with nogil:
        for i in range(start, n):
            if _half_full(&t):
                stop = i
                break
            ts = store_ts[i]
            s = _slot(&t, topic[i], queue_id[i], _period(ts, period_ms))
            _add_message(t.values + s * t.width, size[i], body_length[i], crc_ok[i], sys_flag[i], ts, ts - born_ts[i], queue_offset[i])
    return stop


cdef inline int64_t _bucket(int64_t delay) noexcept nogil:
    """``stats.delay_bucket`` for one value."""
    cdef int64_t a = -delay if delay < 0 else delay, b, e
    if a < _EXACT:
        b = a
    else:
        e = _EXACT_BITS
        while (a >> (e + 1)) > 0:
            e += 1
        b = _EXACT + (e - _EXACT_BITS) * (<int64_t>1 << _SUB_BITS) + ((a >> (e - _SUB_BITS)) & ((<int64_t>1 << _SUB_BITS) - 1))
    return -b - 1 if delay < 0 else b


cdef inline int64_t _topic_key(const uint8_t* buf, Py_ssize_t start, Py_ssize_t stop) noexcept nogil:
    """A 64-bit key of the bytes ``buf[start:stop]``: FNV-1a over native 8-byte words (the last
    word overlapping when the length is not a multiple of 8; bytes one by one below 8), then the
    length (two different topics share a key with probability ~2**-64 per pair)."""
    cdef uint64_t h = FNV_OFFSET
    cdef Py_ssize_t k = start
    while k + 8 <= stop:
        h = (h ^ load8(buf, k)) * FNV_PRIME
        k += 8
    if k < stop and stop - start >= 8:
        h = (h ^ load8(buf, stop - 8)) * FNV_PRIME
    else:
        while k < stop:
            h = (h ^ buf[k]) * FNV_PRIME
            k += 1
    return <int64_t>((h ^ <uint64_t>(stop - start)) * FNV_PRIME)


def string_keys(const int32_t[::1] offsets, const uint8_t[::1] data, int64_t first):
    """``_topic_key`` of each string of an Arrow string array (``offsets`` from ``first``)."""
    cdef Py_ssize_t n = offsets.shape[0] - 1, i
    result = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = result
    cdef const uint8_t* d = &data[0]
    with nogil:
        for i in range(n):
            out[i] = _topic_key(d, offsets[i] - first, offsets[i + 1] - first)
    return result


def stats_batch(const uint8_t[::1] buf, int64_t base, const int64_t[:, ::1] rows, Py_ssize_t start, int64_t period_ms, groups, buckets, topics, int64_t[:, ::1] new_topics):
    """Valid records ``rows[start:]`` of a walk batch, read from their bytes, into the tables
    (each ``(keys, used, values, count, init)`` of a ``GroupTable``): ``groups`` per topic key,
    queue id and period (``_add_message``), ``buckets`` counts per topic key, queue id and delay
    bucket, ``topics`` the topic keys seen. One visit of each record's header and topic; fields
    at the positions of the layouts derived from the construct schema. A topic seen for the first
    time goes into ``new_topics`` as (key, commit log offset, length). Returns (where it stopped,
    new topics): before ``len(rows)`` when a table is half full (grow it, call again from there)."""
    cdef Table g = _table(groups), h = _table(buckets), t = _table(topics)
    cdef const uint8_t* b = &buf[0]
    cdef Py_ssize_t i, found = 0, n = rows.shape[0], stop = n
    cdef int64_t p, topic_start, topic_stop, key, queue_id, flag, born, ts, known, seen, s
    with nogil:
        for i in range(start, n):
            if _half_full(&g) or _half_full(&h) or _half_full(&t):
                stop = i
                break
            p = rows[i, COL_POS]
            topic_start = rows[i, COL_TOPIC]
            topic_stop = rows[i, COL_PROPS] - PROPS_LEN
            key = _topic_key(b, topic_start, topic_stop)
            queue_id = signed32(be32(b, p + POS_QUEUE_ID))
            flag = signed32(be32(b, p + POS_SYS_FLAG))
            born = be64(b, p + POS_BORN_TS)
            ts = be64(b, p + (POS_STORE_TS_BORN_V6 if flag & BORN_V6 else POS_STORE_TS_V4))
            known = g.count[0]
            s = _slot(&g, key, queue_id, _period(ts, period_ms))
            _add_message(g.values + s * g.width, rows[i, COL_SIZE], rows[i, COL_BODY_LEN], rows[i, COL_CRC_OK], flag, ts, ts - born, be64(b, p + POS_QUEUE_OFFSET))
            h.values[_slot(&h, key, queue_id, _bucket(ts - born)) * h.width] += 1
            if g.count[0] != known:  # a new group: maybe a new topic
                seen = t.count[0]
                _slot(&t, key, 0, 0)
                if t.count[0] != seen:
                    new_topics[found, 0] = key
                    new_topics[found, 1] = base + topic_start
                    new_topics[found, 2] = topic_stop - topic_start
                    found += 1
    return stop, found
