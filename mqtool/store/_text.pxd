# A record's text fields for the compiled kernels (``cimport``-ed; inlined, no module).
#
# - ``java_hash_utf8``: Java ``String.hashCode`` over the UTF-16 code units of strict UTF-8
#   (reference §3.4), the state carried so that ``topic#key`` hashes compose;
# - ``property_item``: the name and value bounds of one ``name \x01 value`` item of a properties
#   string, by the broker's 4.9.1+ reader or the split-based reader before it (§2.8;
#   ``MessageDecoder.string2messageProperties``);
# - ``utf8_sequence``: one strict UTF-8 sequence (the hash's decoder and the text kernels' check);
# - ``span_is``: a byte span equal to a constant.
# Tests hold them equal to ``formats.hashing.java_string_hash`` and
# ``formats.properties.parse_properties`` on every fixture record.

from libc.stdint cimport int64_t, uint8_t

from mqtool.store._bytes cimport find_byte

cdef struct HashRun:
    int64_t h  # the unsigned 32-bit state after the units read
    int64_t units  # UTF-16 code units hashed
    bint ok  # False: a malformed sequence stopped it (the caller falls back to Python's decoder)

cdef struct Item:
    Py_ssize_t key, key_end, value, value_end  # key == -1: the reader drops the item


cdef inline Py_ssize_t utf8_sequence(const uint8_t* buf, Py_ssize_t p, Py_ssize_t end, int64_t* cp) noexcept nogil:
    """Length of the strict UTF-8 sequence at ``buf[p]`` (RFC 3629: no overlongs, surrogates or
    code points past U+10FFFF, as Python's decoder) with its code point in ``cp``, or 0 when it
    is malformed: the one UTF-8 validation of the hash, the dispatch and the text columns."""
    cdef int64_t c = buf[p], lo = 0x80, hi = 0xBF
    cdef Py_ssize_t n, j
    if c < 0x80:
        cp[0] = c
        return 1
    if c < 0xC2:
        return 0
    if c < 0xE0:
        n = 2
        c &= 0x1F
    elif c < 0xF0:
        n = 3
        lo = 0xA0 if c == 0xE0 else 0x80
        hi = 0x9F if c == 0xED else 0xBF
        c &= 0x0F
    elif c < 0xF5:
        n = 4
        lo = 0x90 if c == 0xF0 else 0x80
        hi = 0x8F if c == 0xF4 else 0xBF
        c &= 0x07
    else:
        return 0
    if p + n > end or buf[p + 1] < lo or buf[p + 1] > hi:
        return 0
    for j in range(1, n):
        if j > 1 and (buf[p + j] < 0x80 or buf[p + j] > 0xBF):
            return 0
        c = (c << 6) | (buf[p + j] & 0x3F)
    cp[0] = c
    return n


cdef inline HashRun java_hash_utf8(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, int64_t h) noexcept nogil:
    """Continue Java ``String.hashCode`` (unsigned 32-bit state ``h``) over the UTF-16 code units
    of strict UTF-8 ``buf[start:end]``."""
    cdef HashRun run
    cdef Py_ssize_t i = start, n
    cdef int64_t cp, b0, b1, b2, b3
    run.units = 0
    run.ok = False
    while i < end:
        if i + 4 <= end:  # four ASCII bytes at once: h*31**4 + ..., a quarter of the multiply chain
            b0 = buf[i]
            b1 = buf[i + 1]
            b2 = buf[i + 2]
            b3 = buf[i + 3]
            if (b0 | b1 | b2 | b3) < 0x80:
                h = (h * 923521 + b0 * 29791 + b1 * 961 + b2 * 31 + b3) & 0xFFFFFFFFLL
                run.units += 4
                i += 4
                continue
        n = utf8_sequence(buf, i, end, &cp)
        if n == 0:
            run.h = h
            return run
        i += n
        if cp >= 0x10000:
            cp -= 0x10000
            h = (h * 31 + (0xD800 + (cp >> 10))) & 0xFFFFFFFFLL
            h = (h * 31 + (0xDC00 + (cp & 0x3FF))) & 0xFFFFFFFFLL
            run.units += 2
        else:
            h = (h * 31 + cp) & 0xFFFFFFFFLL
            run.units += 1
    run.h = h
    run.ok = True
    return run


cdef inline Item property_item(const uint8_t* buf, Py_ssize_t i, Py_ssize_t j, bint legacy) noexcept nogil:
    """Key and value bounds of one ``name \\x01 value`` item in ``[i, j)``. Modern reader (4.9.1+):
    the first \\x01, non-empty key and value, the value may contain \\x01. Legacy reader:
    ``item.split("\\x01")`` minus trailing empties must give exactly 2 parts (the key may be empty)."""
    cdef Item item
    cdef Py_ssize_t k, t, p
    item.key = item.key_end = item.value = item.value_end = -1
    if not legacy:
        k = find_byte(buf, i, j, 1)
        if i < k and k < j - 1:
            item.key, item.key_end, item.value, item.value_end = i, k, k + 1, j
        return item
    t = j
    while t > i and buf[t - 1] == 1:
        t -= 1
    k = -1
    for p in range(i, t):
        if buf[p] == 1:
            if k >= 0:
                return item
            k = p
    if k >= 0:
        item.key, item.key_end, item.value, item.value_end = i, k, k + 1, t
    return item


cdef inline bint span_is(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, const uint8_t* word, Py_ssize_t n) noexcept nogil:
    """``buf[start:end]`` equals the ``n`` bytes of ``word``."""
    cdef Py_ssize_t i
    if end - start != n:
        return False
    for i in range(n):
        if buf[start + i] != word[i]:
            return False
    return True


cdef inline int64_t topic_slot(int64_t fingerprint, int64_t mask) noexcept nogil:
    """The first slot of a topic's fingerprint in an open-addressing table of ``mask + 1`` slots
    (``dispatch/topicnumbers.py`` builds the tables; the statistics share them)."""
    return (fingerprint ^ (fingerprint >> 31)) & mask
