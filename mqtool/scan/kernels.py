"""Compiled helpers that turn the walk's row positions into Arrow column buffers.

``walk_segment`` (``mqtool.store.fastscan``) validates records and says where each part lies;
these kernels read the variable-length parts in one pass per batch: byte spans gathered into one
buffer (Arrow string data), the properties string split into name/value spans the way the
broker reads it (reference §2.8), the KEYS value split on spaces, and Java's ``String.hashCode``
of the TAGS value (the consume queue tags code, §3.4). Records these kernels cannot decide
exactly (see ``parse_properties``) are flagged so the caller decodes them with the Python
decoder instead.
"""

from __future__ import annotations

import struct

from ..jit import interpreted_as, numba
import numpy as np

from ..store.fastscan import gather_be
from ..store.textscan import java_hash_utf8, property_item, span_is
from ..store.words import HIGH, be_signed, find_byte, load8
from .bytecopy import WORD_SLACK, copy_bytes, copy_words

KEY_TAGS = np.frombuffer(b"TAGS", dtype=np.uint8)
KEY_KEYS = np.frombuffer(b"KEYS", dtype=np.uint8)
KEY_UNIQ = np.frombuffer(b"UNIQ_KEY", dtype=np.uint8)
KEY_DELAY = np.frombuffer(b"DELAY", dtype=np.uint8)
NAME_VALUE = 1  # \x01
PROPERTY_END = 2  # \x02
SPACE = 32


def _gather_spans_numpy(buf, starts, lengths):
    """``gather_spans`` by one fancy index over every span's bytes (interpreted kernels)."""
    sizes = np.maximum(lengths, 0)
    offsets = np.zeros(starts.shape[0] + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    index = np.repeat(starts - offsets[:-1], sizes) + np.arange(int(offsets[-1]))
    return offsets, buf[index]


@interpreted_as(_gather_spans_numpy)
@numba.njit(cache=True, nogil=True)
def gather_spans(buf, starts, lengths):
    """Concatenate ``buf[starts[i]:starts[i]+lengths[i]]``: (int32 Arrow offsets, data bytes)."""
    n = starts.shape[0]
    offsets = np.empty(n + 1, dtype=np.int32)
    total = 0
    offsets[0] = 0
    for i in range(n):
        total += max(lengths[i], 0)
        offsets[i + 1] = total
    data = np.empty(total + WORD_SLACK, dtype=np.uint8)
    for i in range(n):
        copy_words(data, offsets[i], buf, starts[i], offsets[i + 1] - offsets[i])
    return offsets, data[:total]


@numba.njit(inline="always")
def _spans_equal(buf, a, b, length):
    for j in range(length):
        if buf[a + j] != buf[b + j]:
            return False
    return True


def _item_bounds(item: bytes, legacy: bool) -> tuple[int, int, int] | None:
    """``property_item`` on one item's bytes: (key end, value start, value end), or None."""
    if not legacy:
        k = item.find(b"\x01")
        return (k, k + 1, len(item)) if 0 < k < len(item) - 1 else None
    t = len(item.rstrip(b"\x01"))
    k = item.find(b"\x01", 0, t)
    return (k, k + 1, t) if k >= 0 and item.count(b"\x01", 0, t) == 1 else None


def _parse_properties_python(buf, starts, lengths, legacy, tags_key, keys_key, uniq_key, delay_key):
    """``parse_properties`` on each record's properties as bytes (``split`` and ``find``: interpreted
    kernels); the per-record arrays are filled once at the end, not an element at a time."""
    specials = {key.tobytes(): column for column, key in enumerate((tags_key, keys_key, uniq_key, delay_key))}
    n, view = starts.shape[0], memoryview(buf)
    counts, special_at, repeated = [0] * n, {}, []
    spans: list[tuple[int, int, int, int]] = []
    for i, (start, length) in enumerate(zip(starts.tolist(), lengths.tolist())):
        first, names, at = len(spans), set(), start
        for item in view[start : start + max(length, 0)].tobytes().split(b"\x02"):
            bounds = _item_bounds(item, legacy)
            if bounds is not None:
                name = item[: bounds[0]]
                if name in names:
                    repeated.append(i)
                names.add(name)
                column = specials.get(name)
                if column is not None:
                    special_at[i, column] = len(spans)  # a repeated name: its last item
                spans.append((at, bounds[0], at + bounds[1], bounds[2] - bounds[1]))
            at += len(item) + 1
        counts[i] = len(spans) - first
    special, fallback = np.full((n, 4), -1, dtype=np.int64), np.zeros(n, dtype=np.bool_)
    if special_at:
        (rows, cols), items = zip(*special_at), list(special_at.values())
        special[list(rows), list(cols)] = items
    fallback[repeated] = True
    columns = np.array(spans, dtype=np.int64).reshape(-1, 4)
    return np.array(counts, dtype=np.int32), columns[:, 0].copy(), columns[:, 1].copy(), columns[:, 2].copy(), columns[:, 3].copy(), special, fallback


@interpreted_as(_parse_properties_python)
@numba.njit(cache=True, nogil=True)
def parse_properties(buf, starts, lengths, legacy, tags_key, keys_key, uniq_key, delay_key):
    """Split each record's properties into name/value spans (``string2messageProperties``).

    Items are separated by ``\\x02`` and read by ``property_item`` (the 4.9.1+ reader, or with
    ``legacy`` the split-based one). Returns
    ``(counts, name_start, name_len, value_start, value_len, special, fallback)``: ``special``
    has per record the item index of TAGS, KEYS, UNIQ_KEY and DELAY (-1 when absent).
    ``fallback`` marks records whose properties the Python decoder must parse: a repeated name
    (the last value wins but the first position counts).
    """
    n = starts.shape[0]
    capacity = 0
    for i in range(n):
        capacity += max(lengths[i], 0) // 3 + 1
    counts = np.zeros(n, dtype=np.int32)
    name_start = np.empty(capacity, dtype=np.int64)
    name_len = np.empty(capacity, dtype=np.int64)
    value_start = np.empty(capacity, dtype=np.int64)
    value_len = np.empty(capacity, dtype=np.int64)
    special = np.full((n, 4), -1, dtype=np.int64)
    fallback = np.zeros(n, dtype=np.bool_)
    k = 0
    for i in range(n):
        first_item = k
        p = starts[i]
        end = p + max(lengths[i], 0)
        while p < end:
            item = p
            p = find_byte(buf, p, end, PROPERTY_END)
            ks, ke, vs, ve = property_item(buf, item, p, legacy)
            p += 1
            if ks < 0:
                continue  # the reader drops this item
            nlen = ke - ks
            vlen = ve - vs
            for t in range(first_item, k):
                if name_len[t] == nlen and _spans_equal(buf, name_start[t], ks, nlen):
                    fallback[i] = True
            name_start[k] = ks
            name_len[k] = nlen
            value_start[k] = vs
            value_len[k] = vlen
            if span_is(buf, ks, ke, tags_key):
                special[i, 0] = k
            elif span_is(buf, ks, ke, keys_key):
                special[i, 1] = k
            elif span_is(buf, ks, ke, uniq_key):
                special[i, 2] = k
            elif span_is(buf, ks, ke, delay_key):
                special[i, 3] = k
            k += 1
        counts[i] = k - first_item
    return counts, name_start[:k], name_len[:k], value_start[:k], value_len[:k], special, fallback


@numba.njit(cache=True, nogil=True)
def split_on_spaces(buf, starts, lengths):
    """``split_keys`` on spans: the non-empty pieces between spaces. Returns (counts per span,
    piece starts, piece lengths); a negative start means no value (empty list)."""
    n = starts.shape[0]
    capacity = 0
    for i in range(n):
        capacity += max(lengths[i], 0) // 2 + 1
    counts = np.zeros(n, dtype=np.int32)
    piece_start = np.empty(capacity, dtype=np.int64)
    piece_len = np.empty(capacity, dtype=np.int64)
    k = 0
    for i in range(n):
        if starts[i] < 0:
            continue
        p = starts[i]
        end = p + lengths[i]
        first = k
        while p < end:
            while p < end and buf[p] == SPACE:
                p += 1
            s = p
            while p < end and buf[p] != SPACE:
                p += 1
            if p > s:
                piece_start[k] = s
                piece_len[k] = p - s
                k += 1
        counts[i] = k - first
    return counts, piece_start[:k], piece_len[:k]


@numba.njit(cache=True, nogil=True)
def java_hash_spans(buf, starts, lengths):
    """Java ``String.hashCode`` (signed int32) of each UTF-8 span; 0 for a negative start (no
    value). Spans must be valid UTF-8 (callers validate)."""
    n = starts.shape[0]
    result = np.zeros(n, dtype=np.int64)
    for i in range(n):
        if starts[i] >= 0:
            h, _units, _ok = java_hash_utf8(buf, starts[i], starts[i] + lengths[i], np.int64(0))
            result[i] = h - (np.int64(1) << 32) if h >= (np.int64(1) << 31) else h
    return result


def _gather_fields_numpy(buf, positions, deltas, widths):
    """``gather_fields`` a field at a time, each by ``gather_be`` (interpreted kernels)."""
    result = np.empty((deltas.shape[0], positions.shape[0]), dtype=np.int64)
    for f, (delta, width) in enumerate(zip(deltas.tolist(), widths.tolist())):
        result[f] = gather_be(buf, positions, delta, width, True)
    return result


@interpreted_as(_gather_fields_numpy)
@numba.njit(cache=True, nogil=True)
def gather_fields(buf, positions, deltas, widths):
    """Signed big-endian integers of ``widths[f]`` bytes at ``positions + deltas[f]``: one row per
    field, read in one pass over the records (``fastscan.gather_be`` for several fields)."""
    n = positions.shape[0]
    fields = deltas.shape[0]
    result = np.empty((fields, n), dtype=np.int64)
    for f in range(fields):
        delta, width = deltas[f], widths[f]
        row = result[f]
        if width == 4:
            for i in range(n):
                row[i] = be_signed(buf, positions[i] + delta, 4)
        elif width == 8:
            for i in range(n):
                row[i] = be_signed(buf, positions[i] + delta, 8)
        else:
            for i in range(n):
                row[i] = be_signed(buf, positions[i] + delta, width)
    return result


@numba.njit(cache=True, nogil=True)
def item_spans(items, value_start, value_len):
    """(start, length, present) of the value of item ``items[i]`` of each record (-1: absent,
    start -1 and length 0)."""
    n = items.shape[0]
    starts = np.full(n, -1, dtype=np.int64)
    lengths = np.zeros(n, dtype=np.int64)
    present = items >= 0
    for i in range(n):
        if items[i] >= 0:
            starts[i] = value_start[items[i]]
            lengths[i] = value_len[items[i]]
    return starts, lengths, present


def _put_text(out, k, text: bytes) -> int:
    out[k : k + len(text)] = np.frombuffer(text, dtype=np.uint8)
    return k + len(text)


_PORT = struct.Struct(">i")


@interpreted_as(lambda out, k, value: _put_text(out, k, b"%d" % value))
@numba.njit(inline="always")
def _put_int(out, k, value):
    """Write ``value`` in decimal at ``out[k:]``; returns the new end."""
    if value < 0:
        out[k] = 45  # '-'
        k += 1
        value = -value
    digits = 1
    v = value
    while v >= 10:
        v //= 10
        digits += 1
    for j in range(digits - 1, -1, -1):
        out[k + j] = 48 + value % 10
        value //= 10
    return k + digits


@interpreted_as(lambda data, k, buf, p: _put_text(data, k, b"%d.%d.%d.%d:%d" % (*buf[p : p + 4].tolist(), _PORT.unpack_from(buf, p + 4)[0])))
@numba.njit(inline="always")
def _put_ipv4_host(data, k, buf, p):
    """``a.b.c.d:port`` of the 4 address bytes and int32 port at ``buf[p]``, at ``data[k:]``; returns the new end."""
    for j in range(4):
        k = _put_int(data, k, np.int64(buf[p + j]))
        data[k] = 46 if j < 3 else 58  # '.' or ':'
        k += 1
    port = (np.int64(buf[p + 4]) << 24) | (np.int64(buf[p + 5]) << 16) | (np.int64(buf[p + 6]) << 8) | np.int64(buf[p + 7])
    if port >= (np.int64(1) << 31):
        port -= np.int64(1) << 32
    return _put_int(data, k, port)


@numba.njit(cache=True, nogil=True)
def join_port(prefix_offsets, prefix_data, which, ports):
    """``prefix[which[i]] + ':' + ports[i]`` for each row, as Arrow string offsets and data."""
    n = which.shape[0]
    offsets = np.empty(n + 1, dtype=np.int32)
    longest = 0
    for u in range(prefix_offsets.shape[0] - 1):
        longest = max(longest, prefix_offsets[u + 1] - prefix_offsets[u])
    data = np.empty(n * (longest + 12), dtype=np.uint8)
    offsets[0] = 0
    k = 0
    for i in range(n):
        u = which[i]
        for j in range(prefix_offsets[u], prefix_offsets[u + 1]):
            data[k] = prefix_data[j]
            k += 1
        data[k] = 58  # ':'
        k = _put_int(data, k + 1, ports[i])
        offsets[i + 1] = k
    return offsets, data[:k]


@numba.njit(inline="always")
def _put_hex(out, k, value):
    digits = 1
    v = value >> 4
    while v:
        v >>= 4
        digits += 1
    for j in range(digits - 1, -1, -1):
        d = value & 15
        out[k + j] = 48 + d if d < 10 else 87 + d
        value >>= 4
    return k + digits


@numba.njit(inline="always")
def _put_ipv6_host(data, k, buf, p, hextets):
    """``[compressed]:port`` of the 16 address bytes and int32 port at ``buf[p]``, at ``data[k:]``
    (``hextets``: 8 int64 of scratch); returns the new end and whether the address is IPv4-mapped."""
    for j in range(8):
        hextets[j] = (np.int64(buf[p + 2 * j]) << 8) | np.int64(buf[p + 2 * j + 1])
    mapped = hextets[0] == 0 and hextets[1] == 0 and hextets[2] == 0 and hextets[3] == 0 and hextets[4] == 0 and hextets[5] == 0xFFFF
    best_start, best_len, run_start, run_len = -1, 0, -1, 0
    for j in range(8):
        if hextets[j] == 0:
            run_len += 1
            if run_start < 0:
                run_start = j
            if run_len > best_len:
                best_len, best_start = run_len, run_start
        else:
            run_start, run_len = -1, 0
    data[k] = 91  # '['
    k += 1
    if best_len > 1:
        for j in range(best_start):
            k = _put_hex(data, k, hextets[j])
            data[k] = 58
            k += 1
        if best_start == 0:
            data[k] = 58
            k += 1
        data[k] = 58
        k += 1
        for j in range(best_start + best_len, 8):
            k = _put_hex(data, k, hextets[j])
            if j < 7:
                data[k] = 58
                k += 1
    else:
        for j in range(8):
            k = _put_hex(data, k, hextets[j])
            if j < 7:
                data[k] = 58
                k += 1
    data[k] = 93  # ']'
    data[k + 1] = 58
    port = (np.int64(buf[p + 16]) << 24) | (np.int64(buf[p + 17]) << 16) | (np.int64(buf[p + 18]) << 8) | np.int64(buf[p + 19])
    if port >= (np.int64(1) << 31):
        port -= np.int64(1) << 32
    return _put_int(data, k + 2, port), mapped


@numba.njit(cache=True, nogil=True)
def format_hosts(buf, positions, deltas, wide):
    """``msgid.format_host`` of the host field at ``positions + deltas`` of each record: IPv6
    (``[compressed]:port``, compressed as Python's ``ipaddress`` does) where ``wide`` is set, IPv4
    (``a.b.c.d:port``) elsewhere; one pass over a batch whatever its mix of layouts. Returns
    offsets (int64), data and a mask of IPv4-mapped IPv6 addresses, which Python versions print
    differently: callers format those with ``msgid.format_host``."""
    n = positions.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    data = np.empty(n * 54, dtype=np.uint8)
    mapped = np.zeros(n, dtype=np.bool_)
    hextets = np.empty(8, dtype=np.int64)
    offsets[0] = 0
    k = 0
    for i in range(n):
        if wide[i]:
            k, mapped[i] = _put_ipv6_host(data, k, buf, positions[i] + deltas[i], hextets)
        else:
            k = _put_ipv4_host(data, k, buf, positions[i] + deltas[i])
        offsets[i + 1] = k
    return offsets, data[:k], mapped


BODY_BASE64, BODY_HEX, BODY_UTF8 = 0, 1, 2
_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", dtype=np.uint8)
_LOWER_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


@numba.njit(inline="always")
def _utf8_length(buf, p, end):
    """Length of the strict UTF-8 sequence at ``buf[p]`` (RFC 3629: no overlongs, surrogates or
    code points past U+10FFFF, as Python's decoder), or 0 when it is malformed."""
    b = buf[p]
    if b < 0x80:
        return 1
    if b < 0xC2:
        return 0
    if b < 0xE0:
        n, lo, hi = 2, 0x80, 0xBF
    elif b < 0xF0:
        n = 3
        lo = 0xA0 if b == 0xE0 else 0x80
        hi = 0x9F if b == 0xED else 0xBF
    elif b < 0xF5:
        n = 4
        lo = 0x90 if b == 0xF0 else 0x80
        hi = 0x8F if b == 0xF4 else 0xBF
    else:
        return 0
    if p + n > end or buf[p + 1] < lo or buf[p + 1] > hi:
        return 0
    for j in range(2, n):
        if buf[p + j] < 0x80 or buf[p + j] > 0xBF:
            return 0
    return n


def _is_utf8_python(buf, start, end):
    """``is_utf8`` by Python's strict decoder (interpreted kernels)."""
    try:
        bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@interpreted_as(_is_utf8_python)
@numba.njit(cache=True, nogil=True)
def is_utf8(buf, start, end):
    """``buf[start:end]`` is strict UTF-8 (``bytes.decode("utf-8")`` would not fail)."""
    p = start
    while p < end:
        if p + 8 <= end and (load8(buf, p) & HIGH) == 0:  # eight ASCII bytes
            p += 8
            continue
        if buf[p] < 0x80:
            p += 1
            continue
        n = _utf8_length(buf, p, end)
        if n == 0:
            return False
        p += n
    return True


def _spans_are_utf8_python(buf, starts, lengths):
    """``spans_are_utf8``: the spans that are all ASCII found at once, the others each read by
    Python's decoder (interpreted kernels)."""
    offsets, data = _gather_spans_numpy(buf, starts, lengths)
    high = np.zeros(data.shape[0] + 1, dtype=np.int64)
    np.cumsum(data >= 0x80, out=high[1:])
    wide = np.flatnonzero(high[offsets[1:]] > high[offsets[:-1]])
    return all(_is_utf8_python(buf, s, s + n) for s, n in zip(starts[wide].tolist(), lengths[wide].tolist()))


@interpreted_as(_spans_are_utf8_python)
@numba.njit(cache=True, nogil=True)
def spans_are_utf8(buf, starts, lengths):
    """Every span ``buf[starts[i]:starts[i]+lengths[i]]`` is strict UTF-8 (what ``pa.Array.validate(full=True)``
    checks of the strings gathered from them, without gathering them)."""
    for i in range(starts.shape[0]):
        if not is_utf8(buf, starts[i], starts[i] + lengths[i]):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def body_text(buf, starts, lengths, mode, python_rows):
    """``encode_body`` of each body span (a negative length is an empty body), as Arrow string
    offsets (int64: the caller checks they fit int32) and data. ``mode``: ``BODY_BASE64`` (RFC
    4648 with padding, ``base64.b64encode``), ``BODY_HEX`` (lowercase, ``bytes.hex``) or
    ``BODY_UTF8`` (strict UTF-8 copied as is). Rows set in ``python_rows`` (in: rows the caller
    encodes itself; out: also bodies that are not strict UTF-8, whose replacement characters
    Python's decoder decides) are left empty."""
    n = starts.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    total = 0
    for i in range(n):
        length = max(lengths[i], 0)
        if python_rows[i]:
            length = 0
        elif mode == BODY_BASE64:
            length = (length + 2) // 3 * 4
        elif mode == BODY_HEX:
            length *= 2
        elif not is_utf8(buf, starts[i], starts[i] + length):
            python_rows[i] = True
            length = 0
        total += length
        offsets[i + 1] = total
    data = np.empty(total, dtype=np.uint8)
    for i in range(n):
        k = offsets[i]
        if k == offsets[i + 1]:
            continue
        s = starts[i]
        length = max(lengths[i], 0)
        if mode == BODY_UTF8:
            copy_bytes(data, k, buf, s, length)
        elif mode == BODY_HEX:
            for j in range(length):
                b = buf[s + j]
                data[k] = _LOWER_HEX[b >> 4]
                data[k + 1] = _LOWER_HEX[b & 15]
                k += 2
        else:
            whole = length - length % 3
            for j in range(s, s + whole, 3):
                v = (np.uint32(buf[j]) << 16) | (np.uint32(buf[j + 1]) << 8) | np.uint32(buf[j + 2])
                data[k] = _B64[v >> 18]
                data[k + 1] = _B64[(v >> 12) & 63]
                data[k + 2] = _B64[(v >> 6) & 63]
                data[k + 3] = _B64[v & 63]
                k += 4
            rest = length - whole
            if rest:
                v = np.uint32(buf[s + whole]) << 16
                if rest == 2:
                    v |= np.uint32(buf[s + whole + 1]) << 8
                data[k] = _B64[v >> 18]
                data[k + 1] = _B64[(v >> 12) & 63]
                data[k + 2] = _B64[(v >> 6) & 63] if rest == 2 else 61  # '='
                data[k + 3] = 61
    return offsets, data


@numba.njit(cache=True, nogil=True)
def splice_rows(offsets, data, rows, row_offsets, row_data):
    """Strings ``offsets``/``data`` with row ``rows[j]`` replaced by ``row_data[row_offsets[j]:
    row_offsets[j + 1]]`` (rows ascending and empty in ``data``): new (offsets, data)."""
    n = offsets.shape[0] - 1
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out = np.empty(offsets[n] + row_offsets[rows.shape[0]], dtype=np.uint8)
    out_offsets[0] = 0
    k = 0
    j = 0
    for i in range(n):
        if j < rows.shape[0] and rows[j] == i:
            k = copy_bytes(out, k, row_data, row_offsets[j], row_offsets[j + 1] - row_offsets[j])
            j += 1
        else:
            k = copy_bytes(out, k, data, offsets[i], offsets[i + 1] - offsets[i])
        out_offsets[i + 1] = k
    return out_offsets, out


_UPPER_HEX = np.frombuffer(b"0123456789ABCDEF", dtype=np.uint8)


@numba.njit(cache=True, nogil=True)
def format_msg_ids(buf, positions, store_delta, store_width, phys_delta):
    """offsetMsgId of each record: uppercase hex of the store host's address and port
    (``store_width`` + 4 bytes at ``positions + store_delta``) then PHYSICALOFFSET (8 bytes at
    ``positions + phys_delta``), as Arrow string offsets and data (``msgid.encode_msg_id``)."""
    n = positions.shape[0]
    width = 2 * (store_width + 4 + 8)
    offsets = np.arange(n + 1).astype(np.int32) * np.int32(width)
    data = np.empty(n * width, dtype=np.uint8)
    k = 0
    for i in range(n):
        p = positions[i]
        for j in range(store_width + 4 + 8):
            b = buf[p + store_delta + j] if j < store_width + 4 else buf[p + phys_delta + j - store_width - 4]
            data[k] = _UPPER_HEX[b >> 4]
            data[k + 1] = _UPPER_HEX[b & 15]
            k += 2
    return offsets, data


def _format_msg_ids_rows_python(buf, positions, store_deltas, wide, phys_delta):
    """``format_msg_ids_rows`` by ``hex`` a record at a time (interpreted kernels)."""
    view = memoryview(buf)
    ids = [
        (view[host : host + (20 if w else 8)].hex() + view[p + phys_delta : p + phys_delta + 8].hex()).upper().encode()
        for p, host, w in zip(positions.tolist(), (positions + store_deltas).tolist(), wide.tolist())
    ]
    offsets = np.zeros(len(ids) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, ids), dtype=np.int32, count=len(ids)), out=offsets[1:])
    return offsets, np.frombuffer(b"".join(ids), dtype=np.uint8)


@interpreted_as(_format_msg_ids_rows_python)
@numba.njit(cache=True, nogil=True)
def format_msg_ids_rows(buf, positions, store_deltas, wide, phys_delta):
    """``format_msg_ids`` with each record's own store host position and width (16 bytes where
    ``wide`` is set, else 4): one pass over a batch whatever its mix of layouts."""
    n = positions.shape[0]
    offsets = np.empty(n + 1, dtype=np.int32)
    data = np.empty(n * 2 * (16 + 4 + 8), dtype=np.uint8)
    offsets[0] = 0
    k = 0
    for i in range(n):
        p = positions[i]
        host = p + store_deltas[i]
        width = (16 if wide[i] else 4) + 4
        for j in range(width):
            b = buf[host + j]
            data[k] = _UPPER_HEX[b >> 4]
            data[k + 1] = _UPPER_HEX[b & 15]
            k += 2
        for j in range(8):
            b = buf[p + phys_delta + j]
            data[k] = _UPPER_HEX[b >> 4]
            data[k + 1] = _UPPER_HEX[b & 15]
            k += 2
        offsets[i + 1] = k
    return offsets, data[:k]
