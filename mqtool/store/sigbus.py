"""The compiled SIGBUS handlers ``mappedfile.exit_on_sigbus`` installs (numba ``cfunc``).

They run in signal context on the faulting thread, so they call only ``write(2)``, ``kill(2)``,
``getppid(2)`` and ``_exit(2)`` (async-signal-safe). A worker process (``verify --jobs``) does
not print: it sends SIGBUS to its parent, whose handler prints the one line and exits, so the
parent never waits for a result that will not come. Both are registered with LLVM under fixed names and linked by name, and
the message is a constant compiled into the code, so numba can cache the handler on disk.
"""

from __future__ import annotations

import ctypes

import numba
import numpy as np
from llvmlite import binding as llvm_binding
from numba import types

from ..errors import EXIT_BAD_INPUT
from .mappedfile import SIGBUS_MESSAGE

_libc = ctypes.CDLL(None)
llvm_binding.add_symbol("mqtool_write", ctypes.cast(_libc.write, ctypes.c_void_p).value)
llvm_binding.add_symbol("mqtool_exit", ctypes.cast(_libc._exit, ctypes.c_void_p).value)
llvm_binding.add_symbol("mqtool_kill", ctypes.cast(_libc.kill, ctypes.c_void_p).value)
llvm_binding.add_symbol("mqtool_getppid", ctypes.cast(_libc.getppid, ctypes.c_void_p).value)
_kill = types.ExternalFunction("mqtool_kill", types.int32(types.int32, types.int32))
_getppid = types.ExternalFunction("mqtool_getppid", types.int32())
_write = types.ExternalFunction("mqtool_write", types.intp(types.int32, types.voidptr, types.uintp))
_exit = types.ExternalFunction("mqtool_exit", types.void(types.int32))

_MESSAGE = np.frombuffer(SIGBUS_MESSAGE, dtype=np.uint8)
_STDERR = 2


@numba.cfunc(types.void(types.int32), cache=True)
def _on_sigbus(signum):
    _write(_STDERR, _MESSAGE.ctypes.data, _MESSAGE.size)
    _exit(EXIT_BAD_INPUT)


@numba.cfunc(types.void(types.int32), cache=True)
def _on_sigbus_in_worker(signum):
    _kill(_getppid(), signum)
    _exit(EXIT_BAD_INPUT)


def handler_address(worker: bool = False) -> int:
    return (_on_sigbus_in_worker if worker else _on_sigbus).address
