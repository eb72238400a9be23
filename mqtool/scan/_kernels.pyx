"""Compiled helpers that turn the walk's row positions into Arrow column buffers.

``walk_segment`` (``mqtool.store.fastscan``) validates records and says where each part lies;
these kernels read the variable-length parts in one pass per batch: byte spans gathered into one
buffer (Arrow string data), the properties string split into name/value spans the way the
broker reads it (reference §2.8, ``_text.pxd``'s ``property_item``), the KEYS value split on
spaces, Java's ``String.hashCode`` of the TAGS value (the consume queue tags code, §3.4), hosts,
offsetMsgIds and bodies as text. Records these kernels cannot decide exactly (see
``parse_properties``) are flagged so the caller decodes them with the Python decoder instead.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memcmp

import numpy as np

from mqtool.store._bytes cimport HIGH, WORD_SLACK, be_signed, copy_bytes, copy_words, find_byte, load8, signed32, be32
from mqtool.store._text cimport Item, java_hash_utf8, property_item, span_is, utf8_sequence
from mqtool.scan._format cimport LOWER_HEX, UPPER_HEX, put_hex, put_hex_byte, put_int

KEY_TAGS = np.frombuffer(b"TAGS", dtype=np.uint8)
KEY_KEYS = np.frombuffer(b"KEYS", dtype=np.uint8)
KEY_UNIQ = np.frombuffer(b"UNIQ_KEY", dtype=np.uint8)
KEY_DELAY = np.frombuffer(b"DELAY", dtype=np.uint8)

cdef enum:
    PROPERTY_END = 2  # \x02 between items; \x01 between a name and its value
    SPACE = 32
    _BASE64 = 0
    _HEX = 1
    _UTF8 = 2

BODY_BASE64, BODY_HEX, BODY_UTF8 = _BASE64, _HEX, _UTF8
cdef const char* B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def gather_spans(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Concatenate ``buf[starts[i]:starts[i]+lengths[i]]``: (int32 Arrow offsets, data bytes)."""
    cdef Py_ssize_t n = starts.shape[0], i, buf_len = buf.shape[0]
    offsets_a = np.empty(n + 1, dtype=np.int32)
    cdef int32_t[::1] offsets = offsets_a
    cdef int64_t total = 0
    with nogil:
        offsets[0] = 0
        for i in range(n):
            total += lengths[i] if lengths[i] > 0 else 0
            offsets[i + 1] = <int32_t>total
    data = np.empty(total + WORD_SLACK, dtype=np.uint8)
    cdef uint8_t[::1] out = data
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(n):
            copy_words(&out[0], offsets[i], b, buf_len, starts[i], offsets[i + 1] - offsets[i])
    return offsets_a, data[:total]


def parse_properties(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths, bint legacy,
                     const uint8_t[::1] tags_key, const uint8_t[::1] keys_key, const uint8_t[::1] uniq_key, const uint8_t[::1] delay_key):
    """Split each record's properties into name/value spans (``string2messageProperties``).

    Items are separated by ``\\x02`` and read by ``property_item`` (the 4.9.1+ reader, or with
    ``legacy`` the split-based one). Returns
    ``(counts, name_start, name_len, value_start, value_len, special, fallback)``: ``special``
    has per record the item index of TAGS, KEYS, UNIQ_KEY and DELAY (-1 when absent).
    ``fallback`` marks records whose properties the Python decoder must parse: a repeated name
    (the last value wins but the first position counts).
    """
    cdef Py_ssize_t n = starts.shape[0], i, k = 0, first, t, p, end, item_start, capacity = 0
    cdef int64_t nlen
    cdef Item item
    for i in range(n):
        capacity += (lengths[i] if lengths[i] > 0 else 0) // 3 + 1
    counts_a = np.zeros(n, dtype=np.int32)
    columns = np.empty((4, capacity), dtype=np.int64)
    special_a = np.full((n, 4), -1, dtype=np.int64)
    fallback_a = np.zeros(n, dtype=np.bool_)
    cdef int32_t[::1] counts = counts_a
    cdef int64_t[:, ::1] spans = columns
    cdef int64_t[:, ::1] special = special_a
    cdef uint8_t[::1] fallback = fallback_a
    cdef const uint8_t* b = &buf[0]
    cdef const uint8_t* tags = &tags_key[0]
    cdef const uint8_t* keys = &keys_key[0]
    cdef const uint8_t* uniq = &uniq_key[0]
    cdef const uint8_t* delay = &delay_key[0]
    cdef Py_ssize_t tags_n = tags_key.shape[0], keys_n = keys_key.shape[0], uniq_n = uniq_key.shape[0], delay_n = delay_key.shape[0]
    with nogil:
        for i in range(n):
            first = k
            p = starts[i]
            end = p + (lengths[i] if lengths[i] > 0 else 0)
            while p < end:
                item_start = p
                p = find_byte(b, p, end, PROPERTY_END)
                item = property_item(b, item_start, p, legacy)
                p += 1
                if item.key < 0:
                    continue  # the reader drops this item
                nlen = item.key_end - item.key
                for t in range(first, k):
                    if spans[1, t] == nlen and memcmp(b + spans[0, t], b + item.key, nlen) == 0:
                        fallback[i] = True
                spans[0, k] = item.key
                spans[1, k] = nlen
                spans[2, k] = item.value
                spans[3, k] = item.value_end - item.value
                if span_is(b, item.key, item.key_end, tags, tags_n):
                    special[i, 0] = k
                elif span_is(b, item.key, item.key_end, keys, keys_n):
                    special[i, 1] = k
                elif span_is(b, item.key, item.key_end, uniq, uniq_n):
                    special[i, 2] = k
                elif span_is(b, item.key, item.key_end, delay, delay_n):
                    special[i, 3] = k
                k += 1
            counts[i] = <int32_t>(k - first)
    return counts_a, columns[0, :k].copy(), columns[1, :k].copy(), columns[2, :k].copy(), columns[3, :k].copy(), special_a, fallback_a


def split_on_spaces(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """``split_keys`` on spans: the non-empty pieces between spaces. Returns (counts per span,
    piece starts, piece lengths); a negative start means no value (empty list)."""
    cdef Py_ssize_t n = starts.shape[0], i, k = 0, first, p, s, end, capacity = 0
    for i in range(n):
        capacity += (lengths[i] if lengths[i] > 0 else 0) // 2 + 1
    counts_a = np.zeros(n, dtype=np.int32)
    pieces = np.empty((2, capacity), dtype=np.int64)
    cdef int32_t[::1] counts = counts_a
    cdef int64_t[:, ::1] piece = pieces
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(n):
            if starts[i] < 0:
                continue
            p = starts[i]
            end = p + lengths[i]
            first = k
            while p < end:
                while p < end and b[p] == SPACE:
                    p += 1
                s = p
                while p < end and b[p] != SPACE:
                    p += 1
                if p > s:
                    piece[0, k] = s
                    piece[1, k] = p - s
                    k += 1
            counts[i] = <int32_t>(k - first)
    return counts_a, pieces[0, :k].copy(), pieces[1, :k].copy()


def java_hash_spans(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Java ``String.hashCode`` (signed int32) of each UTF-8 span; 0 for a negative start (no
    value). Spans must be valid UTF-8 (callers validate)."""
    cdef Py_ssize_t n = starts.shape[0], i
    result = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] out = result
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(n):
            if starts[i] >= 0:
                out[i] = signed32(java_hash_utf8(b, starts[i], starts[i] + lengths[i], 0).h)
    return result


def gather_fields(const uint8_t[::1] buf, const int64_t[::1] positions, const int64_t[::1] deltas, const int64_t[::1] widths):
    """Signed big-endian integers of ``widths[f]`` bytes at ``positions + deltas[f]``: one row per
    field, read in one pass over the records, all of a record's fields while its header is in
    cache (``fastscan.gather_be`` for several fields)."""
    cdef Py_ssize_t n = positions.shape[0], fields = deltas.shape[0], f, i
    cdef int64_t p
    result = np.empty((fields, n), dtype=np.int64)
    cdef int64_t[:, ::1] out = result
    cdef const uint8_t* b = &buf[0]
    with nogil:
        for i in range(n):
            p = positions[i]
            for f in range(fields):
                out[f, i] = be_signed(b, p + deltas[f], <int>widths[f])
    return result


def item_spans(const int64_t[::1] items, const int64_t[::1] value_start, const int64_t[::1] value_len):
    """(start, length, present) of the value of item ``items[i]`` of each record (-1: absent,
    start -1 and length 0)."""
    cdef Py_ssize_t n = items.shape[0], i
    starts_a = np.full(n, -1, dtype=np.int64)
    lengths_a = np.zeros(n, dtype=np.int64)
    cdef int64_t[::1] starts = starts_a, lengths = lengths_a
    with nogil:
        for i in range(n):
            if items[i] >= 0:
                starts[i] = value_start[items[i]]
                lengths[i] = value_len[items[i]]
    return starts_a, lengths_a, np.asarray(items) >= 0


cdef inline int64_t _port(const uint8_t* b, Py_ssize_t p) noexcept nogil:
    return signed32(be32(b, p))


cdef inline Py_ssize_t _put_ipv4_host(uint8_t* data, Py_ssize_t k, const uint8_t* b, Py_ssize_t p) noexcept nogil:
    """``a.b.c.d:port`` of the 4 address bytes and int32 port at ``b[p]``, at ``data[k:]``."""
    cdef int j
    for j in range(4):
        k = put_int(data, k, b[p + j])
        data[k] = 46 if j < 3 else 58  # '.' or ':'
        k += 1
    return put_int(data, k, _port(b, p + 4))


cdef inline Py_ssize_t _put_ipv6_host(uint8_t* data, Py_ssize_t k, const uint8_t* b, Py_ssize_t p, bint* mapped) noexcept nogil:
    """``[compressed]:port`` of the 16 address bytes and int32 port at ``b[p]``, at ``data[k:]``,
    compressed as Python's ``ipaddress`` does (the longest run of zero hextets, the first of equal
    runs, at least two); ``mapped``: the address is IPv4-mapped."""
    cdef int64_t hextets[8]
    cdef int j, best_start = -1, best_len = 0, run_start = -1, run_len = 0
    for j in range(8):
        hextets[j] = (<int64_t>b[p + 2 * j] << 8) | b[p + 2 * j + 1]
    mapped[0] = hextets[0] == 0 and hextets[1] == 0 and hextets[2] == 0 and hextets[3] == 0 and hextets[4] == 0 and hextets[5] == 0xFFFF
    for j in range(8):
        if hextets[j] == 0:
            run_len += 1
            if run_start < 0:
                run_start = j
            if run_len > best_len:
                best_len = run_len
                best_start = run_start
        else:
            run_start = -1
            run_len = 0
    data[k] = 91  # '['
    k += 1
    if best_len > 1:
        for j in range(best_start):
            k = put_hex(data, k, hextets[j])
            data[k] = 58
            k += 1
        if best_start == 0:
            data[k] = 58
            k += 1
        data[k] = 58
        k += 1
        for j in range(best_start + best_len, 8):
            k = put_hex(data, k, hextets[j])
            if j < 7:
                data[k] = 58
                k += 1
    else:
        for j in range(8):
            k = put_hex(data, k, hextets[j])
            if j < 7:
                data[k] = 58
                k += 1
    data[k] = 93  # ']'
    data[k + 1] = 58
    return put_int(data, k + 2, _port(b, p + 16))


def format_hosts(const uint8_t[::1] buf, const int64_t[::1] positions, const int64_t[::1] deltas, const uint8_t[::1] wide):
    """``msgid.format_host`` of the host field at ``positions + deltas`` of each record: IPv6
    (``[compressed]:port``) where ``wide`` is set, IPv4 (``a.b.c.d:port``) elsewhere; one pass
    over a batch whatever its mix of layouts. Returns offsets (int64), data and a mask of
    IPv4-mapped IPv6 addresses, which Python versions print differently: callers format those
    with ``msgid.format_host``."""
    cdef Py_ssize_t n = positions.shape[0], i, k = 0
    cdef bint m
    offsets_a = np.empty(n + 1, dtype=np.int64)
    data_a = np.empty(n * 54, dtype=np.uint8)
    mapped_a = np.zeros(n, dtype=np.bool_)
    cdef int64_t[::1] offsets = offsets_a
    cdef uint8_t[::1] data = data_a
    cdef uint8_t[::1] mapped = mapped_a
    cdef const uint8_t* b = &buf[0]
    with nogil:
        offsets[0] = 0
        for i in range(n):
            if wide[i]:
                k = _put_ipv6_host(&data[0], k, b, positions[i] + deltas[i], &m)
                mapped[i] = m
            else:
                k = _put_ipv4_host(&data[0], k, b, positions[i] + deltas[i])
            offsets[i + 1] = k
    return offsets_a, data_a[:k], mapped_a


cdef inline bint _is_utf8(const uint8_t* buf, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    cdef Py_ssize_t n
    cdef int64_t cp
    while p < end:
        if p + 8 <= end and (load8(buf, p) & HIGH) == 0:  # eight ASCII bytes
            p += 8
            continue
        n = utf8_sequence(buf, p, end, &cp)
        if n == 0:
            return False
        p += n
    return True


def is_utf8(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    """``buf[start:end]`` is strict UTF-8 (``bytes.decode("utf-8")`` would not fail)."""
    return _is_utf8(&buf[0], start, end)


def spans_are_utf8(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths):
    """Every span ``buf[starts[i]:starts[i]+lengths[i]]`` is strict UTF-8 (what ``pa.Array.validate(full=True)``
    checks of the strings gathered from them, without gathering them)."""
    cdef Py_ssize_t i
    cdef const uint8_t* b = &buf[0]
    cdef bint ok = True
    with nogil:
        for i in range(starts.shape[0]):
            if not _is_utf8(b, starts[i], starts[i] + lengths[i]):
                ok = False
                break
    return ok


def body_text(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] lengths, int mode, uint8_t[::1] python_rows):
    """``encode_body`` of each body span (a negative length is an empty body), as Arrow string
    offsets (int64: the caller checks they fit int32) and data. ``mode``: ``BODY_BASE64`` (RFC
    4648 with padding, ``base64.b64encode``), ``BODY_HEX`` (lowercase, ``bytes.hex``) or
    ``BODY_UTF8`` (strict UTF-8 copied as is). Rows set in ``python_rows`` (in: rows the caller
    encodes itself; out: also bodies that are not strict UTF-8, whose replacement characters
    Python's decoder decides) are left empty."""
    cdef Py_ssize_t n = starts.shape[0], i, j, k, s, length, whole, rest
    cdef int64_t total = 0
    cdef uint32_t v
    cdef const uint8_t* b = &buf[0]
    cdef uint8_t[::1] data
    cdef uint8_t* out
    offsets_a = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] offsets = offsets_a
    with nogil:
        offsets[0] = 0
        for i in range(n):
            length = lengths[i] if lengths[i] > 0 else 0
            if python_rows[i]:
                length = 0
            elif mode == _BASE64:
                length = (length + 2) // 3 * 4
            elif mode == _HEX:
                length *= 2
            elif not _is_utf8(b, starts[i], starts[i] + length):
                python_rows[i] = True
                length = 0
            total += length
            offsets[i + 1] = total
    data_a = np.empty(total, dtype=np.uint8)
    data = data_a
    out = &data[0]
    with nogil:
        for i in range(n):
            k = offsets[i]
            if k == offsets[i + 1]:
                continue
            s = starts[i]
            length = lengths[i] if lengths[i] > 0 else 0
            if mode == _UTF8:
                copy_bytes(out, k, b, s, length)
            elif mode == _HEX:
                for j in range(s, s + length):
                    k = put_hex_byte(out, k, b[j], LOWER_HEX)
            else:
                whole = length - length % 3
                for j in range(s, s + whole, 3):
                    v = (<uint32_t>b[j] << 16) | (<uint32_t>b[j + 1] << 8) | b[j + 2]
                    out[k] = B64[v >> 18]
                    out[k + 1] = B64[(v >> 12) & 63]
                    out[k + 2] = B64[(v >> 6) & 63]
                    out[k + 3] = B64[v & 63]
                    k += 4
                rest = length - whole
                if rest:
                    v = <uint32_t>b[s + whole] << 16
                    if rest == 2:
                        v |= <uint32_t>b[s + whole + 1] << 8
                    out[k] = B64[v >> 18]
                    out[k + 1] = B64[(v >> 12) & 63]
                    out[k + 2] = B64[(v >> 6) & 63] if rest == 2 else 61  # '='
                    out[k + 3] = 61
    return offsets_a, data_a


def splice_rows(const int64_t[::1] offsets, const uint8_t[::1] data, const int64_t[::1] rows, const int64_t[::1] row_offsets, const uint8_t[::1] row_data):
    """Strings ``offsets``/``data`` with row ``rows[j]`` replaced by ``row_data[row_offsets[j]:
    row_offsets[j + 1]]`` (rows ascending and empty in ``data``): new (offsets, data)."""
    cdef Py_ssize_t n = offsets.shape[0] - 1, m = rows.shape[0], i, j = 0, k = 0
    out_offsets_a = np.empty(n + 1, dtype=np.int64)
    out_a = np.empty(offsets[n] + row_offsets[m], dtype=np.uint8)
    cdef int64_t[::1] out_offsets = out_offsets_a
    cdef uint8_t[::1] out = out_a
    with nogil:
        out_offsets[0] = 0
        for i in range(n):
            if j < m and rows[j] == i:
                k = copy_bytes(&out[0], k, &row_data[0], row_offsets[j], row_offsets[j + 1] - row_offsets[j])
                j += 1
            else:
                k = copy_bytes(&out[0], k, &data[0], offsets[i], offsets[i + 1] - offsets[i])
            out_offsets[i + 1] = k
    return out_offsets_a, out_a


def format_msg_ids_rows(const uint8_t[::1] buf, const int64_t[::1] positions, const int64_t[::1] store_deltas, const uint8_t[::1] wide, Py_ssize_t phys_delta):
    """offsetMsgId of each record (``msgid.encode_msg_id``): uppercase hex of the store host's
    address (16 bytes where ``wide`` is set, else 4) and port at ``positions + store_deltas``,
    then PHYSICALOFFSET (8 bytes at ``positions + phys_delta``), as Arrow string offsets and
    data; one pass over a batch whatever its mix of layouts."""
    cdef Py_ssize_t n = positions.shape[0], i, j, p, host, width, k = 0
    offsets_a = np.empty(n + 1, dtype=np.int32)
    data_a = np.empty(n * 2 * (16 + 4 + 8), dtype=np.uint8)
    cdef int32_t[::1] offsets = offsets_a
    cdef uint8_t[::1] data = data_a
    cdef const uint8_t* b = &buf[0]
    with nogil:
        offsets[0] = 0
        for i in range(n):
            p = positions[i]
            host = p + store_deltas[i]
            width = (16 if wide[i] else 4) + 4
            for j in range(host, host + width):
                k = put_hex_byte(&data[0], k, b[j], UPPER_HEX)
            for j in range(p + phys_delta, p + phys_delta + 8):
                k = put_hex_byte(&data[0], k, b[j], UPPER_HEX)
            offsets[i + 1] = <int32_t>k
    return offsets_a, data_a[:k]
