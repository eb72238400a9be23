"""Compiled kernel of ``store/textscan.py``: ``java_hash_utf8`` for Python callers (the compiled
readers ``cimport`` its inline form from ``_text.pxd``; tests hold it equal to
``formats.hashing.java_string_hash``)."""

from libc.stdint cimport int64_t, uint8_t

from mqtool.store._text cimport HashRun
from mqtool.store._text cimport java_hash_utf8 as hash_utf8


def java_hash_utf8(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end, int64_t h):
    """Continue Java ``String.hashCode`` (unsigned 32-bit state ``h``) over the UTF-16 code units
    of strict UTF-8 ``buf[start:end]``. Returns ``(h, units, ok)``; ``ok`` is False on any
    malformed sequence (the caller falls back to the Python decoder's replacement rules)."""
    cdef HashRun run
    if start >= end:
        return h, 0, True
    with nogil:
        run = hash_utf8(&buf[0], start, end, h)
    return run.h, run.units, run.ok
