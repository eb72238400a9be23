"""The SIGBUS handlers ``mappedfile.exit_on_sigbus`` installs: C-callable ``ctypes`` callbacks.

A read through a map that faults re-executes the faulting instruction when a handler returns, so
Python's own ``signal`` module (which only sets a flag and returns) cannot end it. These
callbacks are C function pointers installed with ``signal(2)``; each ends the process without
returning. They run on the faulting thread while it holds the GIL (a read of a mapped file from
Python code, numpy or a compiled kernel, with or without ``nogil``), so ``ctypes`` takes
the GIL it already has and the body does only two system calls: ``write(2)`` of a prepared
line and ``_exit(2)``; nothing is flushed or freed. A worker process (``verify --jobs``) does not
print: it sends SIGBUS to its parent, whose handler prints the one line and exits, so the parent
never waits for a result that will not come.
"""

from __future__ import annotations

import ctypes
import os
import signal

from ..errors import EXIT_BAD_INPUT

_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_int)
_STDERR = 2


_installed: list = []  # the callbacks installed, kept alive: a collected callback would be a dangling pointer


def install(message: bytes, *, worker: bool) -> None:
    """Install the handler for SIGBUS (``worker``: hand the signal to the parent instead)."""

    def on_sigbus(signum: int) -> None:
        if worker:
            os.kill(os.getppid(), signum)
        else:
            os.write(_STDERR, message)
        os._exit(EXIT_BAD_INPUT)

    handler = _HANDLER(on_sigbus)
    _installed.append(handler)
    libc = ctypes.CDLL(None)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signal.SIGBUS, ctypes.cast(handler, ctypes.c_void_p).value)
