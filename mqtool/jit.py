"""numba, as mqtool's compiled kernels use it: a kernel found in numba's cache loads without the compiler's set-up.

Every module with compiled kernels imports numba from here (``from mqtool.jit import numba``).

Loading a kernel from the cache (``numba.core.caching.Cache.load_overload``) first refreshes the
target context: it imports and installs every lowering registry numba has, some 550 modules and
0.4-0.6 s of CPU per process, which only *compiling* needs (and the compiler refreshes on its own:
``numba.core.compiler.CompilerBase.__init__``). A loaded kernel needs at run time only the symbols
its object code links against: numba's C helpers, exception classes and math functions (added when
the context is made: ``BaseContext.__init__``, ``CPUContext.init``), the NRT's (``rtsys.initialize``,
done here before each load) and mqtool's own (``fastscan``'s ``mqtool_crc32``, added at its import).
So ``load_overload`` is replaced by one that initialises the NRT and loads; a kernel missing from the
cache is compiled exactly as before.

``MQTOOL_NUMBA_LOAD=stock`` keeps numba's own loading, as does a numba whose cache class lacks the
methods this relies on. ``tests/test_kernel_loading.py`` loads every cached kernel this way in a fresh
process and holds the compiled commands' output equal both ways.
"""

from __future__ import annotations

import os

import numba
from numba.core import caching
from numba.core.runtime import rtsys

__all__ = ["numba", "lean_loading"]


def _load_overload(self, sig, target_context):
    """``Cache.load_overload`` without ``target_context.refresh()``: the NRT is all a loaded kernel needs."""
    rtsys.initialize(target_context)
    with self._guard_against_spurious_io_errors():
        return self._load_overload(sig, target_context)


def _install() -> bool:
    cache = caching.Cache
    if os.environ.get("MQTOOL_NUMBA_LOAD") == "stock":
        return False
    if not all(callable(getattr(cache, name, None)) for name in ("load_overload", "_load_overload", "_guard_against_spurious_io_errors")):
        return False
    cache.load_overload = _load_overload
    return True


lean_loading = _install()  # whether cached kernels load the lean way in this process
