"""numba, as mqtool's kernels use it: compiled (the default) or interpreted, chosen once per process.

Every module with kernels imports numba from here (``from mqtool.jit import numba``), and its
intrinsics and external functions through ``intrinsic`` and ``external``. What ``numba`` is gets
settled when the first such module asks for it:

- **compiled**: numba itself, its cached kernels loaded the lean way below;
- **interpreted** (``interpret()`` called before): ``mqtool.jitless``, the part of numba's
  interface the kernels use as plain Python, so the kernels run as the Python they are written
  in, with no numba import (a noticeable share of a process's start). A command on a small store asks
  for it (``mqtool/cli/engine.py``), where loading compiled code costs more than running the
  kernels in the interpreter. The same source either way; ``tests/test_interpreted.py`` holds
  the commands' output equal both ways on every fixture.

Compiled loading: loading a kernel from the cache (``numba.core.caching.Cache.load_overload``)
first refreshes the target context: it imports and installs every lowering registry numba has,
hundreds of modules imported in every process, which only *compiling* needs (and the
compiler refreshes on its own: ``numba.core.compiler.CompilerBase.__init__``). A loaded kernel
needs at run time only the symbols its object code links against: numba's C helpers, exception
classes and math functions (added when the context is made: ``BaseContext.__init__``,
``CPUContext.init``), the NRT's (``rtsys.initialize``, done here before each load) and mqtool's
own (``fastscan``'s ``mqtool_crc32``, added at its import). So ``load_overload`` is replaced by
one that initialises the NRT and loads; a kernel missing from the cache is compiled exactly as
before. ``MQTOOL_NUMBA_LOAD=stock`` keeps numba's own loading, as does a numba whose cache class
lacks the methods this relies on. ``tests/test_kernel_loading.py`` loads every cached kernel
this way in a fresh process and holds the compiled commands' output equal both ways.
"""

from __future__ import annotations

import os
from typing import Callable

__all__ = ["interpret", "interpreted", "interpreted_as", "interpreted_forms", "intrinsic", "external"]  # and ``numba``, ``lean_loading`` (``__getattr__``)

_numba = None  # the module the kernels got (numba or mqtool.jitless), once one asked
_interpret = False
_lean = False


def interpret() -> bool:
    """Run the kernels interpreted in this process, unless a kernel module already loaded them
    compiled; whether they will run interpreted."""
    return interpreted()  # the interpreted mode is going: the kernels move to ahead-of-time C


def interpreted() -> bool:
    """Whether the kernels run (or, once loaded, will run) as plain Python in this process."""
    return _interpret if _numba is None else _numba.__name__ != "numba"


def _settle():
    global _numba, _lean
    if _numba is None:
        if _interpret:
            from . import jitless as module
        else:
            import numba as module

            _lean = _install()
        _numba = module
    return _numba


def _compiled() -> bool:
    """Settle the kernels' numba (``_settle``); whether it is numba itself."""
    return _settle().__name__ == "numba"


def __getattr__(name: str):
    if name == "numba":
        return _settle()
    if name == "lean_loading":  # whether cached kernels load the lean way in this process
        _settle()
        return _lean
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def intrinsic(python: Callable) -> Callable:
    """``numba.extending.intrinsic`` on the decorated typing function (LLVM code inside compiled
    kernels); ``python``, the same operation in Python, when the kernels run interpreted."""

    def declare(typer: Callable) -> Callable:
        if not _compiled():
            return python
        from numba.extending import intrinsic as numba_intrinsic

        return numba_intrinsic(typer)

    return declare


def external(name: str, signature: Callable, python: Callable):
    """A C function compiled kernels call by its LLVM symbol ``name`` (``numba.types.ExternalFunction``,
    of the type ``signature(numba.types)`` gives); ``python`` when the kernels run interpreted."""
    if not _compiled():
        return python
    return _numba.types.ExternalFunction(name, signature(_numba.types))


interpreted_forms: dict[str, tuple[Callable, Callable]] = {}  # kernel name -> (compiled kernel, interpreted form), compiled


def interpreted_as(python: Callable) -> Callable:
    """The decorated kernel is ``python`` when the kernels run interpreted: the same result by
    whole-array numpy, ``struct`` or ``re`` operations, where the interpreter would run the
    kernel's loop a byte at a time. Compiled, the pair is kept in ``interpreted_forms`` for the
    tests that hold the two equal (``tests/test_interpreted.py``)."""

    def choose(kernel: Callable) -> Callable:
        if not _compiled():
            return python
        interpreted_forms[f"{kernel.py_func.__module__}.{kernel.py_func.__name__}"] = (kernel, python)
        return kernel

    return choose


def _load_overload(self, sig, target_context):
    """``Cache.load_overload`` without ``target_context.refresh()``: the NRT is all a loaded kernel needs."""
    from numba.core.runtime import rtsys

    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def _install() -> bool:
    from numba.core import caching

    cache = caching.Cache
    if os.environ.get("MQTOOL_NUMBA_LOAD") == "stock":
        return False
    if not all(callable(getattr(cache, name, None)) for name in ("load_overload", "_load_overload", "_guard_against_spurious_io_errors")):
        return False
    cache.load_overload = _load_overload
    return True
