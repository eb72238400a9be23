"""Compiled readers of a record's text fields, shared by the recovery dispatch
(``recovery/fastdispatch.py``) and the Spark reader (``mqtool/scan/kernels.py``).

- ``java_hash_utf8``: Java ``String.hashCode`` over the UTF-16 code units of strict UTF-8
  (reference §3.4), the state carried so that ``topic#key`` hashes compose;
- ``property_item``: the name and value bounds of one ``name \\x01 value`` item of a properties
  string, by the broker's 4.9.1+ reader or the split-based reader before it (§2.8);
- ``span_is``: a byte span equal to a constant word;
- ``java_hash_states``, ``index_key_hashes``: the hash of many UTF-16 keys at once by whole-array
  numpy, for interpreted kernels and for the few keys the Python decoder settles.

Tests hold them equal to ``formats.hashing.java_string_hash`` and
``formats.properties.parse_properties``.
"""

from __future__ import annotations

from ..formats.hashing import java_hash_units, utf16_units
from ..jit import interpreted_as, numba
import numpy as np

M32 = np.int64(0xFFFFFFFF)


def pow31_table(n: int = 1 << 15) -> np.ndarray:
    """``31**i mod 2**32`` for ``i < n`` (a properties value has at most 32767 UTF-16 units)."""
    powers = np.ones(n, dtype=np.uint64)
    np.cumprod(np.full(n - 1, 31, dtype=np.uint64), out=powers[1:])  # wraps mod 2**64, a multiple of 2**32
    return (powers & np.uint64(0xFFFFFFFF)).astype(np.int64)


POW31 = pow31_table()


def utf16_units_of(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The UTF-16 code units of ``texts`` end to end (what Java's ``String`` holds), and where
    each text's units start and end among them."""
    encoded = [t.encode("utf-16-be", "surrogatepass") for t in texts]
    lengths = np.fromiter((len(e) >> 1 for e in encoded), dtype=np.int64, count=len(encoded))
    ends = np.cumsum(lengths)
    return np.frombuffer(b"".join(encoded), dtype=">u2").astype(np.int64), ends - lengths, ends


def java_hash_states(units: np.ndarray, starts: np.ndarray, ends: np.ndarray, states: np.ndarray) -> np.ndarray:
    """``String.hashCode``'s unsigned 32-bit state ``states[i]`` continued over the code units
    ``units[starts[i]:ends[i]]``, for every ``i`` at once: ``state * 31**n + sum(unit_j *
    31**(n-1-j))`` mod 2**32 (numpy's uint64 wraps mod 2**64, a multiple of 2**32)."""
    lengths = ends - starts
    top = int(lengths.max(initial=0))
    pow31 = (POW31 if top < POW31.shape[0] else pow31_table(top + 1)).view(np.uint64)
    first = np.cumsum(lengths) - lengths  # each text's first term
    total = int(lengths.sum())
    at = np.repeat(starts - first, lengths) + np.arange(total)
    terms = units[at].astype(np.uint64) * pow31[np.repeat(first + lengths, lengths) - 1 - np.arange(total)]
    sums = np.zeros(lengths.shape[0], dtype=np.uint64)
    nonempty = lengths > 0
    if total:
        sums[nonempty] = np.add.reduceat(terms, first[nonempty])
    return ((states.astype(np.uint64) * pow31[lengths] + sums) & np.uint64(0xFFFFFFFF)).astype(np.int64)


def index_key_hashes(states: np.ndarray) -> np.ndarray:
    """``IndexFile.indexKeyHashMethod`` of unsigned 32-bit hash states: the absolute value of
    the int32, Integer.MIN_VALUE -> 0 (reference §6.4)."""
    h = np.where(states >= 1 << 31, (1 << 32) - states, states)
    return np.where(h > 0x7FFFFFFF, 0, h)


@numba.njit(inline="always")
def _cont(buf, i, end):
    return i < end and (buf[i] & 0xC0) == 0x80


def _java_hash_utf8_python(buf, start, end, h):
    """``java_hash_utf8`` on Python's strict UTF-8 decoder, which refuses what the kernel refuses
    (interpreted kernels)."""
    raw, ok = bytes(buf[start:end]), True
    if raw.isascii():  # a byte per unit
        return java_hash_units(raw, int(h)), len(raw), ok
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text, ok = raw[: exc.start].decode("utf-8"), False
    units = utf16_units(text)
    return java_hash_units(units, int(h)), len(units), ok


@interpreted_as(_java_hash_utf8_python)
@numba.njit(cache=True, nogil=True)
def java_hash_utf8(buf, start, end, h):
    """Continue Java ``String.hashCode`` (unsigned 32-bit state ``h``) over the UTF-16 code
    units of strict UTF-8 ``buf[start:end]``. Returns ``(h, units, ok)``; ``ok`` is False on any
    malformed sequence (the caller falls back to the Python decoder's replacement rules)."""
    i = start
    units = 0
    while i < end:
        if i + 4 <= end:  # four ASCII bytes at once: h*31**4 + ..., a quarter of the multiply chain
            b0, b1, b2, b3 = np.int64(buf[i]), np.int64(buf[i + 1]), np.int64(buf[i + 2]), np.int64(buf[i + 3])
            if (b0 | b1 | b2 | b3) < 0x80:
                h = (h * 923521 + b0 * 29791 + b1 * 961 + b2 * 31 + b3) & M32
                units += 4
                i += 4
                continue
        c = np.int64(buf[i])
        if c < 0x80:
            h = (h * 31 + c) & M32
            units += 1
            i += 1
            continue
        if c < 0xC2:
            return h, units, False
        elif c < 0xE0:
            if not _cont(buf, i + 1, end):
                return h, units, False
            cp = ((c & 0x1F) << 6) | (np.int64(buf[i + 1]) & 0x3F)
            i += 2
        elif c < 0xF0:
            if not (_cont(buf, i + 1, end) and _cont(buf, i + 2, end)):
                return h, units, False
            c1 = np.int64(buf[i + 1])
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 > 0x9F):
                return h, units, False
            cp = ((c & 0x0F) << 12) | ((c1 & 0x3F) << 6) | (np.int64(buf[i + 2]) & 0x3F)
            i += 3
        elif c < 0xF5:
            if not (_cont(buf, i + 1, end) and _cont(buf, i + 2, end) and _cont(buf, i + 3, end)):
                return h, units, False
            c1 = np.int64(buf[i + 1])
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 > 0x8F):
                return h, units, False
            cp = ((c & 0x07) << 18) | ((c1 & 0x3F) << 12) | ((np.int64(buf[i + 2]) & 0x3F) << 6) | (np.int64(buf[i + 3]) & 0x3F)
            i += 4
        else:
            return h, units, False
        if cp >= 0x10000:
            cp -= 0x10000
            h = (h * 31 + (0xD800 + (cp >> 10))) & M32
            h = (h * 31 + (0xDC00 + (cp & 0x3FF))) & M32
            units += 2
        else:
            h = (h * 31 + cp) & M32
            units += 1
    return h, units, True


@numba.njit(inline="always")
def property_item(buf, i, j, legacy):
    """Key and value bounds of one ``name \\x01 value`` item in ``[i, j)``, or (-1, ..) if the
    reader drops it. Modern reader (4.9.1+): the first \\x01, non-empty key and value, the value
    may contain \\x01. Legacy reader: ``item.split("\\x01")`` minus trailing empties must give
    exactly 2 parts (the key may be empty)."""
    if not legacy:
        k = i
        while k < j and buf[k] != 1:
            k += 1
        if i < k and k < j - 1:
            return i, k, k + 1, j
        return -1, -1, -1, -1
    t = j
    while t > i and buf[t - 1] == 1:
        t -= 1
    k = -1
    for p in range(i, t):
        if buf[p] == 1:
            if k >= 0:
                return -1, -1, -1, -1
            k = p
    if k < 0:
        return -1, -1, -1, -1
    return i, k, k + 1, t


@numba.njit(inline="always")
def span_is(buf, start, end, word):
    n = word.shape[0]
    if end - start != n or buf[start] != word[0]:
        return False
    for i in range(1, n):
        if buf[start + i] != word[i]:
            return False
    return True
