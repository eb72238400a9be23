"""Give the C heap's freed pages back to the system before a phase that needs memory.

A plan's dispatch allocates and frees some hundred megabytes of numpy batches, many of them in
the malloc arena of the thread that walked the commit log; glibc keeps such freed pages mapped
(they count in the resident size) until ``malloc_trim``. Called between a plan and its apply (and
before ``recover``'s verify-after run), it keeps the next phase's peak at its own working set.
Does nothing where the C library has no
``malloc_trim``, nor on a store small enough for interpreted kernels (``mqtool.jit``): its
batches are a few megabytes, and ``ctypes`` alone would take longer to load than they matter.
"""

from __future__ import annotations

import gc

from ..jit import interpreted


def release_free_heap() -> None:
    if interpreted():
        return
    import ctypes
    from ctypes.util import find_library

    gc.collect(1)  # the young generations only: a full collection walks every object of the loaded
    # modules (numba's included) and, after a plan, finds next to nothing to free
    try:
        libc = ctypes.CDLL(find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass
