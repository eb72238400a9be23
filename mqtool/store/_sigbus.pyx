"""The SIGBUS handlers ``mappedfile.exit_on_sigbus`` installs, compiled: plain C functions that run
no Python and take no lock.

A faulting read re-executes when a handler returns, so Python's ``signal`` module cannot end it.
These handlers are installed with ``signal(2)`` and run on whichever thread takes the signal, a
thread in a ``nogil`` loop or the pool's result thread included; each calls only async-signal-safe
``write(2)``, ``kill(2)`` and ``_exit(2)`` and never returns. A callback that runs Python would
first have to take the GIL, which a thread interrupted in the interpreter's own lock may never give
back (a hang instead of the exit). A worker process (``verify --jobs``) sends SIGBUS to its parent
instead, whose handler prints and exits."""

from libc.stdlib cimport malloc
from libc.string cimport memcpy


cdef extern from "<signal.h>" nogil:
    ctypedef void (*sighandler_t)(int)
    sighandler_t signal(int signum, sighandler_t handler)
    int kill(int pid, int sig)
    int SIGBUS

cdef extern from "<unistd.h>" nogil:
    ssize_t write(int fd, const void *buf, size_t count)
    void _exit(int status)
    int getppid()

cdef char *_message = NULL
cdef size_t _length = 0
cdef int _status = 0


cdef void _print_and_exit(int signum) noexcept nogil:
    write(2, _message, _length)
    _exit(_status)


cdef void _to_parent_and_exit(int signum) noexcept nogil:
    kill(getppid(), signum)
    _exit(_status)


def install(bytes message, int status, bint worker):
    """Install the handler for SIGBUS: print ``message`` and exit with ``status`` (``worker``: hand
    the signal to the parent, then exit). The message is copied into memory that is never freed."""
    global _message, _length, _status
    cdef char *copy = <char *> malloc(len(message))
    if copy == NULL:
        raise MemoryError()
    memcpy(copy, <const char *> message, len(message))
    _message, _length, _status = copy, len(message), status
    signal(SIGBUS, _to_parent_and_exit if worker else _print_and_exit)
