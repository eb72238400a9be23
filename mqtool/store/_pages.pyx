"""Compiled page mapping of ``fastscan.PagesAhead``: ``madvise(MADV_POPULATE_READ)`` without the
GIL (``mmap.madvise`` holds it through the call), so the walk goes on while the pages ahead are mapped."""

from libc.stdint cimport uint8_t, uintptr_t


cdef extern from "<sys/mman.h>" nogil:
    int madvise(void *addr, size_t length, int advice)

cdef int MADV_POPULATE_READ = 22  # Linux 5.14+ (uapi asm-generic/mman-common.h); EINVAL before


def populate(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t stop, Py_ssize_t page):
    """Map ``buf[start:stop]`` (a read-only file map; ``start`` rounded down to a ``page``):
    True, or False where the kernel cannot (an older kernel, or bytes past the file's end:
    EFAULT where a read would raise SIGBUS)."""
    if stop <= start:
        return True
    cdef uintptr_t first = <uintptr_t>&buf[0] + start
    first -= first % page
    cdef uintptr_t last = <uintptr_t>&buf[0] + stop
    cdef int failed
    with nogil:
        failed = madvise(<void*>first, last - first, MADV_POPULATE_READ)
    return failed == 0
