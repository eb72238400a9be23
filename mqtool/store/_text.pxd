# A record's text fields for the compiled kernels (``cimport``-ed; inlined, no module).
#
# - ``java_hash_utf8``: Java ``String.hashCode`` over the UTF-16 code units of strict UTF-8
#   (reference §3.4), the state carried so that ``topic#key`` hashes compose;
# - ``property_item``: the name and value bounds of one ``name \x01 value`` item of a properties
#   string, by the broker's 4.9.1+ reader or the split-based reader before it (§2.8;
#   ``MessageDecoder.string2messageProperties``);
# - ``span_is``: a byte span equal to a constant.
# Tests hold them equal to ``formats.hashing.java_string_hash`` and
# ``formats.properties.parse_properties`` on every fixture record.

from libc.stdint cimport int64_t, uint8_t

cdef struct HashRun:
    int64_t h  # the unsigned 32-bit state after the units read
    int64_t units  # UTF-16 code units hashed
    bint ok  # False: a malformed sequence stopped it (the caller falls back to Python's decoder)

cdef struct Item:
    Py_ssize_t key, key_end, value, value_end  # key == -1: the reader drops the item


cdef inline bint _cont(const uint8_t* buf, Py_ssize_t i, Py_ssize_t end) noexcept nogil:
    return i < end and (buf[i] & 0xC0) == 0x80


cdef inline HashRun java_hash_utf8(const uint8_t* buf, Py_ssize_t start, Py_ssize_t end, int64_t h) noexcept nogil:
    """Continue Java ``String.hashCode`` (unsigned 32-bit state ``h``) over the UTF-16 code units
    of strict UTF-8 ``buf[start:end]``."""
    cdef HashRun run
    cdef Py_ssize_t i = start
    cdef int64_t c, c1, cp, b0, b1, b2, b3
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
        c = buf[i]
        if c < 0x80:
            h = (h * 31 + c) & 0xFFFFFFFFLL
            run.units += 1
            i += 1
            continue
        if c < 0xC2:
            run.h = h
            return run
        elif c < 0xE0:
            if not _cont(buf, i + 1, end):
                run.h = h
                return run
            cp = ((c & 0x1F) << 6) | (buf[i + 1] & 0x3F)
            i += 2
        elif c < 0xF0:
            if not (_cont(buf, i + 1, end) and _cont(buf, i + 2, end)):
                run.h = h
                return run
            c1 = buf[i + 1]
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                run.h = h
                return run
            cp = ((c & 0x0F) << 12) | ((c1 & 0x3F) << 6) | (buf[i + 2] & 0x3F)
            i += 3
        elif c < 0xF5:
            if not (_cont(buf, i + 1, end) and _cont(buf, i + 2, end) and _cont(buf, i + 3, end)):
                run.h = h
                return run
            c1 = buf[i + 1]
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
                run.h = h
                return run
            cp = ((c & 0x07) << 18) | ((c1 & 0x3F) << 12) | ((<int64_t>buf[i + 2] & 0x3F) << 6) | (buf[i + 3] & 0x3F)
            i += 4
        else:
            run.h = h
            return run
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
        k = i
        while k < j and buf[k] != 1:
            k += 1
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
    (``recovery/topicnumbers.py`` builds the tables; the statistics share them)."""
    return (fingerprint ^ (fingerprint >> 31)) & mask
