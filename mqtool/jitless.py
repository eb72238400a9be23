"""The part of numba's interface mqtool's kernels use, as plain Python (``mqtool.jit.interpret``).

With it the kernels run as the Python they are written in, on the same numpy arrays: ``njit``
gives the function back (every option ignored), ``uintp`` and ``intp`` are ``int``, and the
intrinsics and external functions are their ``python`` forms (``mqtool.jit.intrinsic``,
``external``). numba's machine integers wrap silently; numpy's scalars wrap too but warn, so the
overflow warnings are silenced here (a filter, not ``numpy.seterr``: that one is per thread).
``mqtool.jit.interpreted_as`` gives a kernel a faster Python form for this mode.
"""

from __future__ import annotations

import warnings

warnings.filterwarnings("ignore", message="overflow encountered in scalar", category=RuntimeWarning)

uintp = intp = int


def njit(*args, **options):
    """``numba.njit``: the function itself, with or without options."""
    if len(args) == 1 and callable(args[0]) and not options:
        return args[0]
    return lambda function: function
