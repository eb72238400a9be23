"""Byte copies inside compiled kernels: ``copy_bytes`` (``memcpy`` between uint8 arrays) and
``copy_words`` (many short spans, eight bytes at a time; the word loads are ``store.words``).

numba compiles ``out[k + j] = buf[s + j]`` loops over signed indices into scalar byte moves, far
slower than ``llvm.memcpy`` on spans of 10-60 bytes (the size of topics and property values); the
wraparound numba adds to every signed index is what makes those loops slow. A call to ``memcpy``
of a few bytes whose length is not a constant has a fixed cost, and the text encoder copies
dozens of short pieces a row: spans up to ``SHORT`` bytes are moved by a byte loop over unsigned
indices, longer ones by ``memcpy``. Callers own the bounds: nothing is checked.

numba's on-disk cache checks only the source file of each cached kernel: after editing this
module, touch ``kernels.py`` and ``text.py`` (whose kernels inline these) or they run stale code.
"""

from __future__ import annotations

import ctypes
import sys

from ..jit import interpreted_as, intrinsic, numba
from ..store.words import array_address, load_u64


@intrinsic(python=lambda dst, src, n: ctypes.memmove(int(dst), int(src), int(n)) and None)
def _memcpy(typingctx, dst, src, n):
    """``llvm.memcpy(dst, src, n)`` on raw addresses."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        d, s, length = args
        ptr = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic("llvm.memcpy", [ptr, ptr, length.type])
        builder.call(fn, [builder.inttoptr(d, ptr), builder.inttoptr(s, ptr), length, ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return types.void(types.uintp, types.uintp, types.intp), codegen


SHORT = 32  # spans up to this long are moved by an inline byte loop, longer ones by memcpy


def _copy_slice(out, k, buf, s, n):
    """``copy_bytes`` as a slice assignment (interpreted kernels)."""
    if n > 0:
        out[k : k + n] = buf[s : s + n]
    return k + n


@interpreted_as(_copy_slice)
@numba.njit(inline="always")
def copy_bytes(out, k, buf, s, n):
    """``out[k:k+n] = buf[s:s+n]`` (uint8 arrays, ``n >= 0``, spans not overlapping); returns ``k + n``."""
    if n > SHORT:
        _memcpy(array_address(out) + numba.uintp(k), array_address(buf) + numba.uintp(s), numba.intp(n))
        return k + n
    o, b = numba.uintp(k), numba.uintp(s)  # unsigned: no negative-index wraparound per byte
    for j in range(numba.uintp(max(n, 0))):
        out[o + j] = buf[b + j]
    return k + n


@intrinsic(python=lambda addr, value: ctypes.memmove(int(addr), int(value).to_bytes(8, sys.byteorder), 8) and None)
def _store_u64(typingctx, addr, value):
    """Store a uint64 at a raw address (native byte order, no alignment needed)."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(types.uintp, types.uint64), codegen


WORD_LOOP = 64  # longer spans go to ``memcpy``
WORD_SLACK = 8  # bytes past the end of a span ``copy_words`` may write (and read, when the source has them)


@interpreted_as(lambda out, k, buf, s, n: _copy_slice(out, k, buf, s, n) if n > 0 else k)
@numba.njit(inline="always")
def copy_words(out, k, buf, s, n):
    """``out[k:k+n] = buf[s:s+n]`` eight bytes at a time, for many short spans copied one after the
    other into one buffer: it may write up to ``WORD_SLACK - 1`` bytes past ``k + n`` (the next span
    overwrites them; ``out`` needs that slack at its end). Spans near the end of ``buf`` are copied
    by ``copy_bytes``. Returns ``k + n``."""
    if n <= 0:
        return k
    if n > WORD_LOOP or s + n + WORD_SLACK > buf.shape[0]:
        return copy_bytes(out, k, buf, s, n)  # memcpy beyond WORD_LOOP bytes
    o, b = array_address(out) + numba.uintp(k), array_address(buf) + numba.uintp(s)
    for j in range(0, numba.uintp(n), numba.uintp(8)):
        _store_u64(o + j, load_u64(b + j))
    return k + n
