# Raw byte access for the compiled kernels (``cimport``-ed by every ``.pyx``; inlined, no module).
#
# The broker's big-endian integers (``be32``, ``be64``, ``be_signed``, ``signed32``: Java's
# ``ByteBuffer.getInt``/``getLong``), ``load8`` (the eight bytes at any position as one native
# uint64), the SWAR tests on such a word (``has_byte_below``, ``has_byte``, ``find_byte``:
# scans that skip a word at a time where no byte they look for can be),
# ``copy_bytes``/``copy_words`` (short spans into an output buffer) and ``prefetch_w``/``prefetch_r``.
# All take a raw pointer and a position: callers own the bounds, nothing is checked. GCC and Clang
# builtins (the byte swaps, the prefetches).

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline uint64_t mq_load8(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
    static inline void mq_store8(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
    #if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    #define MQ_LITTLE_ENDIAN 1
    static inline uint32_t mq_be32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v); }
    static inline uint64_t mq_be64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v); }
    #else
    #define MQ_LITTLE_ENDIAN 0
    static inline uint32_t mq_be32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
    static inline uint64_t mq_be64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
    #endif
    #define mq_lowest_marked(m) (__builtin_ctzll(m) >> 3)
    #define MQ_ONES 0x0101010101010101ULL
    #define MQ_HIGH 0x8080808080808080ULL
    #define mq_prefetch_w(p) __builtin_prefetch((p), 1, 3)
    #define mq_prefetch_r(p) __builtin_prefetch((p), 0, 3)
    """
    bint MQ_LITTLE_ENDIAN  # load8's first byte is its least significant one
    uint64_t ONES "MQ_ONES"
    uint64_t HIGH "MQ_HIGH"
    uint64_t mq_load8(const uint8_t* p) noexcept nogil
    void mq_store8(uint8_t* p, uint64_t v) noexcept nogil
    uint32_t mq_be32(const uint8_t* p) noexcept nogil
    uint64_t mq_be64(const uint8_t* p) noexcept nogil
    void mq_prefetch_w(const void* p) noexcept nogil
    void mq_prefetch_r(const void* p) noexcept nogil
    int mq_lowest_marked(uint64_t m) noexcept nogil  # the least significant byte whose high bit is set (m != 0)

cdef enum:
    WORD_LOOP = 64  # copy_words: longer spans go to memcpy
    WORD_SLACK = 8  # copy_words: bytes past a span's end it may write (the output needs them)
    SHORT = 32  # copy_bytes: spans up to this long are a byte loop, longer ones memcpy



cdef inline uint64_t load8(const uint8_t* buf, Py_ssize_t p) noexcept nogil:
    """``buf[p:p+8]`` as one uint64, native byte order."""
    return mq_load8(buf + p)


cdef inline int64_t be32(const uint8_t* buf, Py_ssize_t p) noexcept nogil:
    """The 4 bytes at ``buf[p]`` as an unsigned big-endian integer."""
    return <int64_t>mq_be32(buf + p)


cdef inline int64_t signed32(int64_t v) noexcept nogil:
    """The low 32 bits of ``v`` (at most 32 bits wide) as Java's ``int``."""
    return v - (<int64_t>1 << 32) if v >= (<int64_t>1 << 31) else v


cdef inline int64_t be64(const uint8_t* buf, Py_ssize_t p) noexcept nogil:
    """The 8 bytes at ``buf[p]`` as a signed big-endian integer (Java's ``long``)."""
    return <int64_t>mq_be64(buf + p)


cdef inline int64_t be_signed(const uint8_t* buf, Py_ssize_t p, int width) noexcept nogil:
    """The signed big-endian integer of ``width`` bytes (1 to 8) at ``buf[p]``."""
    cdef int64_t v = 0
    cdef int j
    if width == 4:
        return signed32(be32(buf, p))
    if width == 8:
        return be64(buf, p)
    for j in range(width):
        v = (v << 8) | buf[p + j]
    if v >= (<int64_t>1 << (8 * width - 1)):
        v -= <int64_t>1 << (8 * width)
    return v


cdef inline bint has_byte_below(uint64_t x, uint64_t n) noexcept nogil:
    """Some byte of ``x`` is below ``n`` (``n <= 128``; exact: a borrow only starts at such a byte)."""
    return ((x - ONES * n) & ~x & HIGH) != 0


cdef inline bint has_byte(uint64_t x, uint8_t b) noexcept nogil:
    """Some byte of ``x`` equals ``b``."""
    return has_byte_below(x ^ (ONES * b), 1)


cdef inline Py_ssize_t find_byte(const uint8_t* buf, Py_ssize_t p, Py_ssize_t end, uint8_t b) noexcept nogil:
    """The first position in ``[p, end)`` whose byte is ``b``, else ``end``: a word at a time,
    the byte found in its word by its lowest mark (exact, as in ``has_byte_below``; on a
    big-endian machine the word's first byte is its highest, so the bytes are tried in turn)."""
    cdef uint64_t x, marks
    while p + 8 <= end:
        x = load8(buf, p) ^ (ONES * b)
        marks = (x - ONES) & ~x & HIGH
        if marks:
            if MQ_LITTLE_ENDIAN:
                return p + mq_lowest_marked(marks)
            break
        p += 8
    while p < end and buf[p] != b:
        p += 1
    return p


cdef inline Py_ssize_t copy_bytes(uint8_t* out, Py_ssize_t k, const uint8_t* buf, Py_ssize_t s, Py_ssize_t n) noexcept nogil:
    """``out[k:k+n] = buf[s:s+n]`` (spans not overlapping); returns ``k + n``."""
    cdef Py_ssize_t j
    if n > SHORT:
        memcpy(out + k, buf + s, n)
    else:
        for j in range(n):
            out[k + j] = buf[s + j]
    return k + (n if n > 0 else 0)


cdef inline Py_ssize_t copy_words(uint8_t* out, Py_ssize_t k, const uint8_t* buf, Py_ssize_t buf_len, Py_ssize_t s, Py_ssize_t n) noexcept nogil:
    """``out[k:k+n] = buf[s:s+n]`` eight bytes at a time, for many short spans copied one after
    the other into one buffer: it may write up to ``WORD_SLACK - 1`` bytes past ``k + n`` (the
    next span overwrites them; ``out`` needs that slack at its end). Spans near the end of
    ``buf`` (``buf_len`` bytes) are copied exactly. Returns ``k + n``."""
    cdef Py_ssize_t j
    if n <= 0:
        return k
    if n > WORD_LOOP or s + n + WORD_SLACK > buf_len:
        return copy_bytes(out, k, buf, s, n)
    for j in range(0, n, 8):
        mq_store8(out + k + j, mq_load8(buf + s + j))
    return k + n


cdef inline void prefetch_w(const void* p) noexcept nogil:
    """Ask the CPU to bring ``p`` into its caches for a write (never faults)."""
    mq_prefetch_w(p)


cdef inline void prefetch_r(const void* p) noexcept nogil:
    """Ask the CPU to bring ``p`` into its caches for a read (never faults)."""
    mq_prefetch_r(p)
