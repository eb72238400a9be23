"""Give the C heap's freed pages back to the system (glibc's ``malloc_trim``) before a phase that
needs memory: a plan's dispatch frees some hundred megabytes of numpy batches that glibc keeps
mapped, so the next phase (the apply, ``recover``'s verify-after) peaks at its own working set.
Nothing where the C library has no ``malloc_trim``.
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
