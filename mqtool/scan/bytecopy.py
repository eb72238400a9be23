"""``copy_bytes``: ``memcpy`` between uint8 arrays inside compiled kernels.

numba compiles ``out[k + j] = buf[s + j]`` loops over signed indices into scalar byte moves (about
0.5 GB/s on the bench machine, against 2 GB/s and more for ``llvm.memcpy`` on spans of 10-60
bytes, the size of topics and property values). Callers own the bounds: nothing is checked.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def _memcpy(typingctx, dst, src, n):
    """``llvm.memcpy(dst, src, n)`` on raw addresses (``array.ctypes.data + i``)."""

    def codegen(context, builder, signature, args):
        d, s, length = args
        ptr = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic("llvm.memcpy", [ptr, ptr, length.type])
        builder.call(fn, [builder.inttoptr(d, ptr), builder.inttoptr(s, ptr), length, ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return types.void(types.uintp, types.uintp, types.intp), codegen


@numba.njit(inline="always")
def copy_bytes(out, k, buf, s, n):
    """``out[k:k+n] = buf[s:s+n]`` (uint8 arrays, ``n >= 0``); returns ``k + n``."""
    if n > 0:
        _memcpy(out.ctypes.data + numba.uintp(k), buf.ctypes.data + numba.uintp(s), numba.intp(n))
    return k + n
