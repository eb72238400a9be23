# Numbers as text for the compiled scan (``cimport``-ed by ``_kernels.pyx`` and ``_text.pyx``;
# inlined, no module): decimal integers as ``str(int)`` writes them, hexadecimal digits, into an
# output buffer at a position; each returns the new end. Callers own the bounds.

from libc.stdint cimport int64_t, uint8_t, uint64_t

cdef extern from *:
    """
    static const char mq_pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    static const char mq_lower_hex[] = "0123456789abcdef";
    static const char mq_upper_hex[] = "0123456789ABCDEF";
    """
    const char* PAIRS "mq_pairs"  # "00" to "99"
    const char* LOWER_HEX "mq_lower_hex"
    const char* UPPER_HEX "mq_upper_hex"


cdef inline void put_pair(uint8_t* out, Py_ssize_t k, uint64_t v) noexcept nogil:
    """Two digits of ``v < 100`` at ``out[k:k+2]``."""
    out[k] = PAIRS[2 * v]
    out[k + 1] = PAIRS[2 * v + 1]


cdef inline Py_ssize_t put_8_digits(uint8_t* out, Py_ssize_t k, uint64_t v) noexcept nogil:
    """``v < 10**8`` as exactly eight digits (leading zeros) at ``out[k:k+8]``."""
    cdef uint64_t high = v // 10000, low = v % 10000
    put_pair(out, k, high // 100)
    put_pair(out, k + 2, high % 100)
    put_pair(out, k + 4, low // 100)
    put_pair(out, k + 6, low % 100)
    return k + 8


cdef inline Py_ssize_t put_short(uint8_t* out, Py_ssize_t k, uint64_t v) noexcept nogil:
    """``v < 10**8`` in decimal (no leading zeros) at ``out[k:]``."""
    cdef Py_ssize_t digits = 1, j
    cdef uint64_t t = 10
    while digits < 8 and v >= t:
        t *= 10
        digits += 1
    j = k + digits
    while v >= 100:
        j -= 2
        put_pair(out, j, v % 100)
        v //= 100
    if v >= 10:
        put_pair(out, j - 2, v)
    else:
        out[j - 1] = <uint8_t>(48 + v)
    return k + digits


cdef inline Py_ssize_t put_int(uint8_t* out, Py_ssize_t k, int64_t v) noexcept nogil:
    """Decimal ``v`` (int64, its minimum included) at ``out[k:]``, in groups of eight digits
    that do not wait on each other's divisions."""
    cdef uint64_t u, high, low
    cdef uint64_t e8 = 100000000
    if v < 0:
        out[k] = 45  # '-'
        k += 1
        u = <uint64_t>(-(v + 1)) + 1
    else:
        u = <uint64_t>v
    if u < e8:
        return put_short(out, k, u)
    high = u // e8
    low = u % e8
    if high < e8:
        return put_8_digits(out, put_short(out, k, high), low)
    return put_8_digits(out, put_8_digits(out, put_short(out, k, high // e8), high % e8), low)


cdef inline Py_ssize_t put_hex(uint8_t* out, Py_ssize_t k, uint64_t value) noexcept nogil:
    """Lowercase hexadecimal ``value`` (no leading zeros) at ``out[k:]``."""
    cdef Py_ssize_t digits = 1, j
    cdef uint64_t v = value >> 4
    while v:
        v >>= 4
        digits += 1
    for j in range(digits - 1, -1, -1):
        out[k + j] = LOWER_HEX[value & 15]
        value >>= 4
    return k + digits


cdef inline Py_ssize_t put_hex_byte(uint8_t* out, Py_ssize_t k, uint8_t b, const char* digits) noexcept nogil:
    """The two hexadecimal digits of byte ``b`` (``digits``: ``LOWER_HEX`` or ``UPPER_HEX``)."""
    out[k] = digits[b >> 4]
    out[k + 1] = digits[b & 15]
    return k + 2
