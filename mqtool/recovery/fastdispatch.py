"""The compiled half of dispatch: what ``CommitLog.checkMessageAndReturnSize`` derives from a record
for the consume queue and index dispatchers, for a whole batch of records in one call.

``dispatch_rows`` takes the rows ``mqtool.store.fastscan.walk_segment`` found in a segment and,
per record, gathers the fixed fields the dispatchers use (QUEUEID, QUEUEOFFSET, PHYSICALOFFSET,
SYSFLAG, STORETIMESTAMP, TOTALSIZE), parses the properties string the way the broker's reader
does (4.9.1+ index walk, or the split-based reader before 4.9.1, reference §2.8) to find TAGS,
KEYS, UNIQ_KEY and DELAY, and computes:

- the tags code: Java ``String.hashCode`` of TAGS over UTF-16 code units (§3.4), or for
  ``SCHEDULE_TOPIC_XXXX`` the delivery time from the delay-level table (§3.5);
- the index key hashes of ``topic#UNIQ_KEY`` and ``topic#key`` for each KEYS token (§6.4-§6.5),
  in two steps: the hash of the key alone here, combined with the topic's by ``finish_keys``.

Anything the fast path cannot decide exactly (malformed UTF-8 in a topic or a used value, a
DELAY that is not a plain ASCII int32) sets ``FLAG_FALLBACK``; the caller then decodes that one
record with ``formats.dispatch.dispatch_request`` (the single Python source of truth). Tests hold
the two paths equal on every fixture record.
"""

from __future__ import annotations

import struct

from ..jit import interpreted_as, numba
import numpy as np

from ..formats import commitlog as fmt
from ..formats.dispatch import INDEX_KEYS_ONLY, INDEX_NONE
from ..formats.properties import parse_properties
from ..store.textscan import M32, index_key_hashes, java_hash_utf8, property_item, span_is
from ..store.words import M64, WORD, be32, be64, find_byte_below, load8, prefetch, signed32

_V4 = fmt.HEADER_LAYOUTS[(False, False)]
_V6_BORN = fmt.HEADER_LAYOUTS[(True, False)]
POS_QUEUE_ID = _V4.offset_of("queue_id")
POS_QUEUE_OFFSET = _V4.offset_of("queue_offset")
POS_PHYS_OFFSET = _V4.offset_of("phys_offset")
POS_SYS_FLAG = _V4.offset_of("sys_flag")
POS_STORE_TS_V4 = _V4.offset_of("store_timestamp")
POS_STORE_TS_V6 = _V6_BORN.offset_of("store_timestamp")
BORN_V6 = int(fmt.SysFlag.BORNHOST_V6)
PROPS_LEN_SIZE = fmt.PROPERTIES_LENGTH.size
TRAN_MASK = fmt.TRANSACTION_TYPE_MASK
TRAN_ROLLBACK = int(fmt.TransactionType.ROLLBACK)
TRAN_COMMIT = int(fmt.TransactionType.COMMIT)

# output columns (int64), one row per record
(
    F_POS,  # position of the record in its segment buffer
    F_TOPIC_FP,  # a cheap fingerprint of the topic bytes (a hint; topics are told apart by bytes)
    F_TOPIC_POS,
    F_TOPIC_LEN,
    F_QUEUE_ID,
    F_QUEUE_OFFSET,
    F_PHYS,
    F_SIZE,
    F_SYS_FLAG,
    F_STORE_TS,
    F_TAGS,
    F_KEY_START,
    F_KEY_COUNT,
    F_FLAGS,
) = range(14)
N_FIELDS = 14
FLAG_FALLBACK = 1
PREFETCH_AHEAD = 4  # records: the cache lines ``dispatch_rows`` reads are asked for this many records ahead
PREFETCH_SIZE = 256  # of records this long or longer (shorter ones are a few lines apart: the CPU's own prefetch keeps up)
FLAG_MULTI_DISPATCH = 2  # INNER_MULTI_DISPATCH: extra LMQ queue entries the broker may write (§3.6)

_TAGS = np.frombuffer(b"TAGS", dtype=np.uint8)
_KEYS = np.frombuffer(b"KEYS", dtype=np.uint8)
_UNIQ = np.frombuffer(b"UNIQ_KEY", dtype=np.uint8)
_DELAY = np.frombuffer(b"DELAY", dtype=np.uint8)
_MULTI = np.frombuffer(b"INNER_MULTI_DISPATCH", dtype=np.uint8)
SCHEDULE_TOPIC_BYTES = np.frombuffer(b"SCHEDULE_TOPIC_XXXX", dtype=np.uint8)


@numba.njit(inline="always")
def _index_hash(h):
    """``IndexFile.indexKeyHashMethod``: abs of the signed hash, Integer.MIN_VALUE -> 0."""
    s = signed32(h)
    if s < 0:
        s = -s
    if s > 0x7FFFFFFF:
        s = 0
    return s


@numba.njit(inline="always")
def _parse_int32(buf, start, end):
    """``Integer.parseInt`` for plain ASCII ``[+-]?[0-9]+``; ok=False for anything else."""
    i = start
    neg = False
    if i < end and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    if i >= end or end - i > 10:
        return 0, False
    v = np.int64(0)
    while i < end:
        d = np.int64(buf[i]) - 48
        if d < 0 or d > 9:
            return 0, False
        v = v * 10 + d
        i += 1
    if neg:
        v = -v
    if v > 0x7FFFFFFF or v < -0x80000000:
        return 0, False
    return v, True


@numba.njit(inline="always")
def _word(buf, p, n):
    """The ``n < 8`` bytes at ``p`` as one integer (a short topic's fingerprint)."""
    v = np.uint64(0)
    for j in range(n):
        v = (v << np.uint64(8)) | np.uint64(buf[p + j])
    return v


_INT, _LONG = struct.Struct(">i"), struct.Struct(">q")  # interpreted forms


def _fingerprint_python(buf, p, n):
    """``_fingerprint`` on Python integers (interpreted kernels: numpy's uint64 scalars are slower)."""
    if n >= 8:
        a, b, c = WORD.unpack_from(buf, p)[0], WORD.unpack_from(buf, p + n - 8)[0], WORD.unpack_from(buf, p + n // 2 - 4)[0]
    else:
        a = b = c = int.from_bytes(bytes(buf[p : p + n]), "big")
    x = ((a * 0x9E3779B97F4A7C15) ^ (b * 0xC2B2AE3D27D4EB4F) ^ (c * 0x165667B19E3779F9) ^ n) & M64
    x ^= x >> 29
    return np.int64(x - (1 << 64) if x >= 1 << 63 else x)


@interpreted_as(_fingerprint_python)
@numba.njit(inline="always")
def _fingerprint(buf, p, n):
    """Length and the first, middle and last 8 bytes of a topic, mixed: cheap, and only a hint
    (``topicnumbers`` compares the bytes), so equal fingerprints of different topics are fine.
    A topic of 8 bytes or more is read as three words (``load8``, native order: a hint needs none
    other), a shorter one byte by byte (a word could run past the buffer)."""
    if n >= 8:
        a, b, c = load8(buf, p), load8(buf, p + n - 8), load8(buf, p + n // 2 - 4)
    else:
        a = b = c = _word(buf, p, n)
    x = (a * np.uint64(0x9E3779B97F4A7C15)) ^ (b * np.uint64(0xC2B2AE3D27D4EB4F)) ^ (c * np.uint64(0x165667B19E3779F9)) ^ np.uint64(n)
    return np.int64(x ^ (x >> np.uint64(29)))


_MULTI_BYTES = _MULTI.tobytes()
_MULTI_NAME = _MULTI_BYTES.decode()


def _dispatch_rows_for_reference(buf, rows, first_row, legacy, sched_topic, delay_ms, index_enable, out, out_base, keys, key_fill):
    """``dispatch_rows`` for interpreted kernels: the fixed fields and the multi-dispatch flag,
    and every record flagged ``FLAG_FALLBACK`` with no tags code and no keys, which its callers
    then take from ``formats.dispatch.dispatch_request`` (the reference the kernel is held equal
    to): one Python decoder instead of the kernel's property scan run by the interpreter."""
    for r in range(first_row, rows.shape[0]):
        pos, size, _, _, topic, props = rows[r, :6].tolist()
        row = out[out_base + r]
        row[F_POS], row[F_SIZE], row[F_TOPIC_POS], row[F_TOPIC_LEN] = pos, size, topic, props - PROPS_LEN_SIZE - topic
        row[F_TOPIC_FP] = _fingerprint(buf, topic, props - PROPS_LEN_SIZE - topic)
        row[F_SYS_FLAG] = sys_flag = _INT.unpack_from(buf, pos + POS_SYS_FLAG)[0]
        row[F_QUEUE_ID] = _INT.unpack_from(buf, pos + POS_QUEUE_ID)[0]
        row[F_QUEUE_OFFSET] = _LONG.unpack_from(buf, pos + POS_QUEUE_OFFSET)[0]
        row[F_PHYS] = _LONG.unpack_from(buf, pos + POS_PHYS_OFFSET)[0]
        row[F_STORE_TS] = _LONG.unpack_from(buf, pos + (POS_STORE_TS_V6 if sys_flag & BORN_V6 else POS_STORE_TS_V4))[0]
        row[F_TAGS], row[F_KEY_START], row[F_KEY_COUNT] = 0, key_fill, 0
        raw = bytes(buf[props : pos + size])
        multi = _MULTI_BYTES in raw and _MULTI_NAME in parse_properties(raw, legacy=legacy)
        row[F_FLAGS] = FLAG_FALLBACK | (FLAG_MULTI_DISPATCH if multi else 0)
    return rows.shape[0], key_fill


@interpreted_as(_dispatch_rows_for_reference)
@numba.njit(cache=True, nogil=True)
def dispatch_rows(buf, rows, first_row, legacy, sched_topic, delay_ms, index_enable, out, out_base, keys, key_fill):
    """Fill ``out[out_base + r]`` for ``rows[first_row:]`` and append partial key hashes to
    ``keys`` from ``key_fill``.

    ``rows`` are ``walk_segment`` rows (pos, size, body, body_len, topic, props, crc_ok).
    ``delay_ms[level]`` is the delay of ``level`` (index 0 unused); ``len(delay_ms) - 1`` is the
    max level (an empty table, ``len == 1``, reproduces the 4.9.2-4.9.8 recovery quirk, §3.5).
    ``index_enable`` is the index rule (``formats.dispatch.INDEX_*``, rules file §4.2): none, 4.0.0+'s
    UNIQ_KEY and KEYS of all but ROLLBACK, or 3.2.6's KEYS of NOT and PREPARED records only.
    A key is stored as ``units << 32 | hash`` of the key alone; ``finish_keys`` combines it with
    the topic once topics are known (Java's hash of ``topic#key`` is polynomial in the units).
    Returns ``(rows_done, key_fill)``; fewer rows than given when ``keys`` is full.
    """
    n = rows.shape[0]
    r = first_row
    while r < n:
        if r + PREFETCH_AHEAD < n and rows[r + PREFETCH_AHEAD, 1] >= PREFETCH_SIZE:
            ahead = r + PREFETCH_AHEAD  # its header, topic and properties asked for now: rows no longer in cache take half the time
            prefetch(buf, rows[ahead, 0])
            prefetch(buf, rows[ahead, 4])
            prefetch(buf, rows[ahead, 5])
            prefetch(buf, rows[ahead, 0] + rows[ahead, 1] - 1)
        pos = rows[r, 0]
        size = rows[r, 1]
        topic = rows[r, 4]
        props = rows[r, 5]
        topic_len = props - PROPS_LEN_SIZE - topic
        props_end = pos + size
        if key_fill + (props_end - props) // 2 + 2 > keys.shape[0]:
            break
        row = out[out_base + r]
        sys_flag = signed32(be32(buf, pos + POS_SYS_FLAG))
        store_ts_pos = POS_STORE_TS_V6 if (sys_flag & BORN_V6) else POS_STORE_TS_V4
        store_ts = be64(buf, pos + store_ts_pos)
        row[F_POS] = pos
        row[F_TOPIC_POS] = topic
        row[F_TOPIC_LEN] = topic_len
        row[F_QUEUE_ID] = signed32(be32(buf, pos + POS_QUEUE_ID))
        row[F_QUEUE_OFFSET] = be64(buf, pos + POS_QUEUE_OFFSET)
        row[F_PHYS] = be64(buf, pos + POS_PHYS_OFFSET)
        row[F_SIZE] = size
        row[F_SYS_FLAG] = sys_flag
        row[F_STORE_TS] = store_ts
        row[F_TOPIC_FP] = _fingerprint(buf, topic, topic_len)
        tags_s, tags_e, keys_s, keys_e, uniq_s, uniq_e, delay_s, delay_e, flags = _dispatch_properties(buf, props, props_end, legacy)
        delayed = delay_s >= 0 and span_is(buf, topic, topic + topic_len, sched_topic)
        tags, ok = _tags_code(buf, tags_s, tags_e, delay_s if delayed else -1, delay_e, store_ts, delay_ms)
        if not ok:
            flags |= FLAG_FALLBACK
        row[F_TAGS] = tags
        row[F_KEY_START] = key_fill
        count = 0
        tran = sys_flag & TRAN_MASK
        if index_enable != INDEX_NONE and tran != TRAN_ROLLBACK and (index_enable != INDEX_KEYS_ONLY or tran != TRAN_COMMIT):
            count, ok = _index_keys(buf, uniq_s if index_enable != INDEX_KEYS_ONLY else -1, uniq_e, keys_s, keys_e, keys, key_fill)
            if not ok:
                flags |= FLAG_FALLBACK
        row[F_KEY_COUNT] = count
        row[F_FLAGS] = flags
        key_fill += count
        r += 1
    return r, key_fill


@numba.njit(cache=True, nogil=True)
def _dispatch_properties(buf, props, props_end, legacy):
    """``dispatch_rows``' one pass over a record's properties, an item at a time; the last
    occurrence of each key wins: the value spans of TAGS, KEYS, UNIQ_KEY and DELAY (-1: none),
    and ``FLAG_MULTI_DISPATCH`` if INNER_MULTI_DISPATCH is there."""
    flags = 0
    tags_s = tags_e = keys_s = keys_e = uniq_s = uniq_e = delay_s = delay_e = -1
    i = props
    while i < props_end:
        j = i
        k = -1  # the item's first NAME_VALUE_SEPARATOR, j its PROPERTY_SEPARATOR (or the end)
        while True:
            j = find_byte_below(buf, j, props_end, 3)
            if j >= props_end or buf[j] == 2:
                break
            if buf[j] == 1 and k < 0:
                k = j
            j += 1
        if legacy:
            ks, ke, vs, ve = property_item(buf, i, j, True)
        elif i < k and k < j - 1:
            ks, ke, vs, ve = i, k, k + 1, j
        else:
            ks = -1
        if ks >= 0:
            length = ke - ks
            if length == 4:
                if span_is(buf, ks, ke, _TAGS):
                    tags_s, tags_e = vs, ve
                elif span_is(buf, ks, ke, _KEYS):
                    keys_s, keys_e = vs, ve
            elif length == 8:
                if span_is(buf, ks, ke, _UNIQ):
                    uniq_s, uniq_e = vs, ve
            elif length == 5:
                if span_is(buf, ks, ke, _DELAY):
                    delay_s, delay_e = vs, ve
            elif length == 20:
                if span_is(buf, ks, ke, _MULTI):
                    flags |= FLAG_MULTI_DISPATCH
        i = j + 1
    return tags_s, tags_e, keys_s, keys_e, uniq_s, uniq_e, delay_s, delay_e, flags


@numba.njit(cache=True, nogil=True)
def _tags_code(buf, tags_s, tags_e, delay_s, delay_e, store_ts, delay_ms):
    """The consume queue tags code: the TAGS hash, or for a delayed message of the schedule
    topic (``delay_s`` >= 0) its delivery time, the level capped at ``len(delay_ms) - 1``
    (§3.5). Returns ``(tags, ok)``; not ok: a value the kernel does not decode (fallback)."""
    ok = True
    tags = np.int64(0)
    if tags_s >= 0:
        h, _, hashed = java_hash_utf8(buf, tags_s, tags_e, np.int64(0))
        ok = ok and hashed
        tags = signed32(h)
    if delay_s >= 0:
        level, parsed = _parse_int32(buf, delay_s, delay_e)
        ok = ok and parsed
        level = min(level, delay_ms.shape[0] - 1)
        if level > 0:
            tags = store_ts + delay_ms[level]
    return tags, ok


@numba.njit(cache=True, nogil=True)
def _index_keys(buf, uniq_s, uniq_e, keys_s, keys_e, keys, key_fill):
    """The UNIQ_KEY (``uniq_s`` >= 0) and each space-separated KEYS word, hashed into
    ``keys[key_fill:]`` as ``units << 32 | hash``. Returns ``(count, ok)``."""
    ok = True
    count = 0
    if uniq_s >= 0:
        h, units, hashed = java_hash_utf8(buf, uniq_s, uniq_e, np.int64(0))
        ok = ok and hashed
        keys[key_fill + count] = (units << 32) | h
        count += 1
    if keys_s >= 0:
        s = keys_s
        while s <= keys_e:
            e = s
            while e < keys_e and buf[e] != 32:
                e += 1
            if e > s:
                h, units, hashed = java_hash_utf8(buf, s, e, np.int64(0))
                ok = ok and hashed
                keys[key_fill + count] = (units << 32) | h
                count += 1
            s = e + 1
    return count, ok


def _finish_keys_numpy(out, lo, hi, topic_ids, topic_state, pow31, keys):
    """``finish_keys`` over every key of the rows at once (interpreted kernels)."""
    counts = out[lo:hi, F_KEY_COUNT]
    total = int(counts.sum())
    if not total:
        return
    first = np.cumsum(counts) - counts
    at = np.repeat(out[lo:hi, F_KEY_START] - first, counts) + np.arange(total)
    partial = keys[at]
    state = np.repeat(topic_state[topic_ids[lo:hi]], counts).astype(np.uint64)
    h = (state * pow31[partial >> 32].astype(np.uint64) + (partial & M32).astype(np.uint64)) & np.uint64(0xFFFFFFFF)
    keys[at] = index_key_hashes(h.astype(np.int64))


@interpreted_as(_finish_keys_numpy)
@numba.njit(cache=True, nogil=True)
def finish_keys(out, lo, hi, topic_ids, topic_state, pow31, keys):
    """Turn the partial hashes of rows ``lo:hi`` into index key hashes:
    ``hash(topic + "#" + key) = state(topic + "#") * 31**units(key) + hash(key)`` (mod 2**32),
    then ``indexKeyHashMethod``. ``topic_state[t]`` is the unsigned hash state of topic ``t`` + "#"."""
    for r in range(lo, hi):
        state = topic_state[topic_ids[r]]
        start = out[r, F_KEY_START]
        for k in range(start, start + out[r, F_KEY_COUNT]):
            partial = keys[k]
            units = partial >> 32
            h = (state * pow31[units] + (partial & M32)) & M32
            keys[k] = _index_hash(h)


def dispatch_all(buf, rows, legacy, delay_ms, index_enable, out, out_base, keys, key_fill):
    """``dispatch_rows`` over every row of ``rows``, the key buffer doubled whenever it stops
    before a record whose keys may not fit; returns ``(keys, key_fill)`` (``keys`` may be a new
    array, holding the partial hashes written so far)."""
    done = 0
    while True:
        done, key_fill = dispatch_rows(buf, rows, done, legacy, SCHEDULE_TOPIC_BYTES, delay_ms, index_enable, out, out_base, keys, key_fill)
        if done == rows.shape[0]:
            return keys, key_fill
        grown = np.empty(max(2 * keys.shape[0], 64), dtype=np.int64)
        grown[:key_fill] = keys[:key_fill]
        keys = grown


def delay_array(delay_table: dict[int, int]) -> np.ndarray:
    """``delay_ms[level]`` for levels 1..max (index 0 unused); levels missing from a gapped
    table fall back to 1000 ms like ``computeDeliverTimestamp``."""
    top = max(delay_table, default=0)
    arr = np.full(top + 1, 1000, dtype=np.int64)
    for level, ms in delay_table.items():
        arr[level] = ms
    arr[0] = 0
    return arr
