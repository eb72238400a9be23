"""How glibc's ``malloc`` keeps what the batches free: fixed thresholds instead of its sliding ones.

Every walk allocates and frees arrays of a few MiB per batch (rows, dispatched fields, decoded
entries). By default glibc hands a block over its mmap threshold back to the kernel when it is
freed, and trims a heap whose free top passes its trim threshold (a thread's heap is trimmed with
``MADV_DONTNEED``); the next batch then faults the same amount in again, a zeroed page at a time.
``keep_freed_memory`` sets both thresholds (``mallopt(3)``): blocks up to ``MMAP_THRESHOLD`` come
from the heaps, and up to ``TRIM_THRESHOLD`` of free memory stays in each for the next batch.
The peak grows only by what stays free between batches (BENCHMARKS.md: "Allocator"). Elsewhere
than glibc (no ``mallopt``), nothing changes."""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 << 20  # the ceiling of glibc's own sliding threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Set the thresholds; whether the C library took them (False where it has no ``mallopt``)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # a C library without it (musl has a stub that returns 0)
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
