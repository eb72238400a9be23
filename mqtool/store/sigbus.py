"""The SIGBUS handlers ``mappedfile.exit_on_sigbus`` installs: C-callable ``ctypes`` callbacks.

A faulting read re-executes when a handler returns, so Python's ``signal`` module cannot end it.
These callbacks are installed with ``signal(2)`` and run on the faulting thread, which holds the
GIL; each does only ``write(2)`` of a prepared line and ``_exit(2)``, never returning. A worker
process (``verify --jobs``) sends SIGBUS to its parent instead, whose handler prints and exits."""

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
