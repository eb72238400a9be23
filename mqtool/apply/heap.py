"""Give the C heap's freed pages back to the system before a phase that needs memory.

A plan's dispatch allocates and frees some hundred megabytes of numpy batches, many of them in
the malloc arena of the thread that walked the commit log; glibc keeps such freed pages mapped
(they count in the resident size) until ``malloc_trim``. Called between a plan and its apply (and
before ``recover``'s verify-after run), it keeps the next phase's peak at its own working set.
Does nothing where the C library has no ``malloc_trim``.
"""

from __future__ import annotations

import gc


def release_free_heap() -> None:
    import ctypes

    gc.collect(1)  # the young generations only: a full collection walks every object of the loaded
    # modules and, after a plan, finds next to nothing to free
    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols, the C library's among them (no ``find_library`` search)
    except (OSError, AttributeError):
        pass
