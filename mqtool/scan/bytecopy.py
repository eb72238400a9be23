"""Raw byte access inside compiled kernels: ``copy_bytes`` (``memcpy`` between uint8 arrays) and
``load8`` (eight bytes at any position as one uint64, for scans that test a word at a time).

numba compiles ``out[k + j] = buf[s + j]`` loops over signed indices into scalar byte moves (about
0.5 GB/s on the bench machine, against 2 GB/s and more for ``llvm.memcpy`` on spans of 10-60
bytes, the size of topics and property values); the wraparound numba adds to every signed index
is what makes those loops slow. A call to ``memcpy`` of a few bytes whose length is not a
constant costs about 15 ns there, and the text encoder copies about 40 short pieces a row: spans
up to ``SHORT`` bytes are moved by a byte loop over unsigned indices (about 9 ns for 16 bytes),
longer ones by ``memcpy``. Callers own the bounds: nothing is checked.

numba's on-disk cache checks only the source file of each cached kernel: after editing this
module, touch ``kernels.py`` and ``text.py`` (whose kernels inline these) or they run stale code.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic


@intrinsic
def _memcpy(typingctx, dst, src, n):
    """``llvm.memcpy(dst, src, n)`` on raw addresses."""

    def codegen(context, builder, signature, args):
        d, s, length = args
        ptr = ir.IntType(8).as_pointer()
        fn = builder.module.declare_intrinsic("llvm.memcpy", [ptr, ptr, length.type])
        builder.call(fn, [builder.inttoptr(d, ptr), builder.inttoptr(s, ptr), length, ir.Constant(ir.IntType(1), 0)])
        return context.get_dummy_value()

    return types.void(types.uintp, types.uintp, types.intp), codegen


@intrinsic
def _load_u64(typingctx, addr):
    """The 8 bytes at a raw address as a uint64 (native byte order, no alignment needed); the
    ``uintp`` twin of ``textscan.load_u64`` for the address arithmetic here."""

    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()), align=1)

    return types.uint64(types.uintp), codegen


@intrinsic
def _address(typingctx, array):
    """The address of an array's first element (``array.ctypes.data`` without the ctypes view)."""

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))

    return types.uintp(array), codegen


SHORT = 32  # spans up to this long are moved by an inline byte loop, longer ones by memcpy


@numba.njit(inline="always")
def copy_bytes(out, k, buf, s, n):
    """``out[k:k+n] = buf[s:s+n]`` (uint8 arrays, ``n >= 0``, spans not overlapping); returns ``k + n``."""
    if n > SHORT:
        _memcpy(_address(out) + numba.uintp(k), _address(buf) + numba.uintp(s), numba.intp(n))
        return k + n
    o, b = numba.uintp(k), numba.uintp(s)  # unsigned: no negative-index wraparound per byte
    for j in range(numba.uintp(max(n, 0))):
        out[o + j] = buf[b + j]
    return k + n


@numba.njit(inline="always")
def copy_span(out, k, buf, s, n):
    """``copy_bytes`` always through ``memcpy``: for spans whose lengths vary from one to the
    next (a byte loop mispredicts its exit); returns ``k + n``."""
    if n > 0:
        _memcpy(_address(out) + numba.uintp(k), _address(buf) + numba.uintp(s), numba.intp(n))
    return k + n


@intrinsic
def _store_u64(typingctx, addr, value):
    """Store a uint64 at a raw address (native byte order, no alignment needed)."""

    def codegen(context, builder, signature, args):
        builder.store(args[1], builder.inttoptr(args[0], ir.IntType(64).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.void(types.uintp, types.uint64), codegen


WORD_LOOP = 64  # longer spans go to ``memcpy``
WORD_SLACK = 8  # bytes past the end of a span ``copy_words`` may write (and read, when the source has them)


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
    o, b = _address(out) + numba.uintp(k), _address(buf) + numba.uintp(s)
    for j in range(0, numba.uintp(n), numba.uintp(8)):
        _store_u64(o + j, _load_u64(b + j))
    return k + n


@numba.njit(inline="always")
def load8(buf, p):
    """``buf[p:p+8]`` as one uint64 (``p + 8 <= len(buf)``: the caller checks)."""
    return _load_u64(_address(buf) + numba.uintp(p))


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
