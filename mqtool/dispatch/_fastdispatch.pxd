# The dispatch's row layout and key finishing, shared by the compiled modules that read its rows
# (``cimport``-ed: ``queuegroups``, ``topicnumbers``, ``spillrows``, ``verify/columns``).

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from mqtool.store._bytes cimport signed32

# ``dispatch_rows``' output columns (int64), one row per record; Python sees them as ints too.
cpdef enum:
    F_POS = 0  # position of the record in its segment buffer
    F_TOPIC_FP = 1  # a cheap fingerprint of the topic bytes (a hint; topics are told apart by bytes)
    F_TOPIC_POS = 2
    F_TOPIC_LEN = 3
    F_QUEUE_ID = 4
    F_QUEUE_OFFSET = 5
    F_PHYS = 6
    F_SIZE = 7
    F_SYS_FLAG = 8
    F_STORE_TS = 9
    F_TAGS = 10
    F_KEY_START = 11
    F_KEY_COUNT = 12
    F_FLAGS = 13
    N_FIELDS = 14
    FLAG_FALLBACK = 1  # a value the kernel does not decode exactly: the caller decodes the record in Python
    FLAG_MULTI_DISPATCH = 2  # INNER_MULTI_DISPATCH: extra LMQ queue entries the broker may write (§3.6)
    FLAG_NO_PROPERTIES = 4  # propertiesLength 0: a null properties map, on which 4.9.3's multi-dispatch check throws (rules §3.12)

ctypedef fused topic_id:  # topic ids: int32 in the recovery's batches, int64 in verify's columns
    int32_t
    int64_t


cdef inline int64_t index_hash(uint64_t h) noexcept nogil:
    """``IndexFile.indexKeyHashMethod`` of an unsigned 32-bit hash: abs of the signed hash,
    Integer.MIN_VALUE -> 0."""
    cdef int64_t s = signed32(<uint32_t>h)
    if s < 0:
        s = -s
    if s > 0x7FFFFFFF:
        s = 0
    return s


cdef inline void finish_row_keys(int64_t* keys, int64_t start, int64_t count, int64_t state, const int64_t* pow31) noexcept nogil:
    """A record's partial key hashes ``keys[start:start + count]`` (``units << 32 | hash`` of the
    key alone) into index key hashes: ``hash(topic + "#" + key) = state * 31**units + hash(key)``
    (mod 2**32, ``state`` the unsigned hash state of ``topic + "#"``), then ``indexKeyHashMethod``."""
    cdef int64_t k, partial
    cdef uint64_t h
    for k in range(start, start + count):
        partial = keys[k]
        h = <uint32_t>(<uint64_t>state * <uint64_t>pow31[partial >> 32] + <uint32_t>partial)
        keys[k] = index_hash(h)
