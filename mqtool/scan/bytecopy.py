"""Raw byte access inside compiled kernels: ``copy_bytes`` (``memcpy`` between uint8 arrays) and
``load8`` (eight bytes at any position as one uint64, for scans that test a word at a time).

numba compiles ``out[k + j] = buf[s + j]`` loops over signed indices into scalar byte moves (about
0.5 GB/s on the bench machine, against 2 GB/s and more for ``llvm.memcpy`` on spans of 10-60
bytes, the size of topics and property values). Callers own the bounds: nothing is checked.
"""

from __future__ import annotations

import numba
import numpy as np
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


@intrinsic
def _load_u64(typingctx, addr):
    """The 8 bytes at a raw address as a uint64 (native byte order, no alignment needed)."""

    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()), align=1)

    return types.uint64(types.uintp), codegen


@numba.njit(inline="always")
def load8(buf, p):
    """``buf[p:p+8]`` as one uint64 (``p + 8 <= len(buf)``: the caller checks)."""
    return _load_u64(buf.ctypes.data + numba.uintp(p))


ONES = np.uint64(0x0101010101010101)
HIGH = np.uint64(0x8080808080808080)


@numba.njit(inline="always")
def has_byte_below(x, n):
    """Some byte of ``x`` is below ``n`` (``n <= 128``; exact: a borrow only starts at such a byte)."""
    return ((x - ONES * np.uint64(n)) & ~x & HIGH) != 0


@numba.njit(inline="always")
def has_byte(x, b):
    """Some byte of ``x`` equals ``b``."""
    return has_byte_below(x ^ (ONES * np.uint64(b)), 1)
