"""Compiled kernels of ``store/textscan.py``: ``java_hash_utf8`` for Python callers (the compiled
readers ``cimport`` its inline form from ``_text.pxd``) and ``java_hash_states`` over many UTF-16
keys at once; tests hold both equal to ``formats.hashing.java_string_hash``."""

import numpy as np

from libc.stdint cimport int64_t, uint8_t, uint64_t

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


def java_hash_states(const int64_t[::1] units, const int64_t[::1] starts, const int64_t[::1] ends, const int64_t[::1] states):
    """``String.hashCode``'s unsigned 32-bit state ``states[i]`` continued over the UTF-16 code
    units ``units[starts[i]:ends[i]]``, for every ``i`` (a new array)."""
    out_a = np.empty(starts.shape[0], dtype=np.int64)
    cdef int64_t[::1] out = out_a
    cdef Py_ssize_t i, j
    cdef uint64_t h
    with nogil:
        for i in range(starts.shape[0]):
            h = <uint64_t>states[i]
            for j in range(starts[i], ends[i]):
                h = (31 * h + <uint64_t>units[j]) & 0xFFFFFFFFULL
            out[i] = <int64_t>h
    return out_a
