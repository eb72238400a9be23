"""Give freed C heap pages back to the system (glibc's ``malloc_trim``) before a phase that needs memory."""

from __future__ import annotations

import gc


def release_free_heap() -> None:
    import ctypes

    gc.collect(1)  # the young generations only: a full collection finds next to nothing more
    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols, the C library's among them (no ``find_library`` search)
    except (OSError, AttributeError):
        pass
