"""Raw word access inside compiled kernels: the broker's big-endian integers (``be32``, ``be64``,
``be_signed``, ``signed32``: Java's ``ByteBuffer.getInt``/``getLong``), ``load8`` (the eight bytes
at any position of a uint8 array as one uint64, native byte order), ``prefetch`` (a cache line
asked for ahead of its use) and the SWAR tests on such a word (``has_byte_below``, ``has_byte``,
``find_byte_below``), for scans that skip a word at a time where no byte they look for can be.
Shared by the store's readers, the recovery dispatch (``recovery/fastdispatch.py``), the index
writer (``mqtool/writers.py``), verify's kernels and the columnar scan (``mqtool/scan``). Callers
own the bounds: nothing is checked.

numba's on-disk cache checks only the source file of each cached kernel: after editing this
module, touch the modules whose kernels inline these (``mqtool/store/fastscan.py``,
``dledgerwalk.py``, ``recovery/fastdispatch.py``, ``recovery/topicnumbers.py``,
``mqtool/writers.py``, ``mqtool/verify/segments.py``, ``cqjoin.py``, ``index.py``, ``mqtool/scan/bytecopy.py``,
``kernels.py``, ``text.py``, ``stats.py``) or they run stale code.
"""

from __future__ import annotations

import ctypes
import re
import struct
import sys

from ..jit import interpreted, interpreted_as, intrinsic, numba
import numpy as np


@intrinsic(python=lambda addr: np.uint64(int.from_bytes(ctypes.string_at(int(addr), 8), sys.byteorder)))
def load_u64(typingctx, addr):
    """The 8 bytes at a raw address as a uint64 (native byte order, no alignment needed): numba
    does not combine single byte loads into one."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        return builder.load(builder.inttoptr(args[0], ir.IntType(64).as_pointer()), align=1)

    return types.uint64(types.uintp), codegen


@intrinsic(python=lambda array: array.ctypes.data)
def array_address(typingctx, array):
    """The address of an array's first element (``array.ctypes.data`` without the ctypes view)."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.ptrtoint(data, ir.IntType(64))

    return types.uintp(array), codegen


@intrinsic(python=lambda array, index: None)
def prefetch(typingctx, array, index):
    """Ask the CPU to bring ``array[index]`` into its caches for a write (``llvm.prefetch``, high
    locality); never faults, whatever the index."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p], ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
        builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), i8p), ir.Constant(i32, 1), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(array, types.intp), codegen


if interpreted():

    def trailing_zeros(x):
        """The count of trailing zero bits of a non-zero integer."""
        x = int(x)
        return (x & -x).bit_length() - 1

else:
    from numba.cpython.unsafe.numbers import trailing_zeros


_BE32, _BE64 = struct.Struct(">I"), struct.Struct(">q")  # interpreted forms: one C call, not eight numpy scalars
WORD = struct.Struct("=Q")  # ``load8`` interpreted (and the interpreted forms of kernels that hash words)
M64 = (1 << 64) - 1


@interpreted_as(lambda buf, p: _BE32.unpack_from(buf, p)[0])
@numba.njit(inline="always")
def be32(buf, p):
    """The 4 bytes at ``buf[p]`` as an unsigned big-endian integer (an int64)."""
    return (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | np.int64(buf[p + 3])


@numba.njit(inline="always")
def signed32(v):
    """The low 32 bits of ``v`` (at most 32 bits wide) as Java's ``int``."""
    return v - (np.int64(1) << 32) if v >= (np.int64(1) << 31) else v


@interpreted_as(lambda buf, p: _BE64.unpack_from(buf, p)[0])
@numba.njit(inline="always")
def be64(buf, p):
    """The 8 bytes at ``buf[p]`` as a signed big-endian integer (Java's ``long``); unrolled in two
    halves, which LLVM turns into one load and a byte swap."""
    hi = (np.uint64(buf[p]) << np.uint64(24)) | (np.uint64(buf[p + 1]) << np.uint64(16)) | (np.uint64(buf[p + 2]) << np.uint64(8)) | np.uint64(buf[p + 3])
    lo = (np.uint64(buf[p + 4]) << np.uint64(24)) | (np.uint64(buf[p + 5]) << np.uint64(16)) | (np.uint64(buf[p + 6]) << np.uint64(8)) | np.uint64(buf[p + 7])
    return np.int64((hi << np.uint64(32)) | lo)


@numba.njit(inline="always")
def be_signed(buf, p, width):
    """The signed big-endian integer of ``width`` bytes (1 to 8) at ``buf[p]``."""
    if width == 4:
        return signed32(be32(buf, p))
    if width == 8:
        return be64(buf, p)
    v = np.int64(0)
    for j in range(width):
        v = (v << 8) | np.int64(buf[p + j])
    if v >= (np.int64(1) << (8 * width - 1)):
        v -= np.int64(1) << (8 * width)
    return v


@interpreted_as(lambda buf, p: np.uint64(WORD.unpack_from(buf, p)[0]))
@numba.njit(inline="always")
def load8(buf, p):
    """``buf[p:p+8]`` as one uint64 (``p + 8 <= len(buf)``: the caller checks)."""
    return load_u64(array_address(buf) + numba.uintp(p))


LITTLE_ENDIAN = sys.byteorder == "little"  # ``load8``'s first byte is its least significant one
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


_PATTERNS: dict[tuple[bool, int], re.Pattern] = {}


def _search(below: bool, n: int, buf, p, end):
    """The first position in ``[p, end)`` of a byte below ``n`` (``below``) or equal to it, else
    ``end``: a cached regular expression's search (``find_byte``, ``find_byte_below`` interpreted)."""
    pattern = _PATTERNS.get((below, n))
    if pattern is None:
        pattern = _PATTERNS[below, n] = re.compile(rb"[\x00-" + re.escape(bytes([n - 1])) + rb"]" if below else re.escape(bytes([n])))
    found = pattern.search(buf, int(p), int(end))
    return end if found is None else found.start()


@interpreted_as(lambda buf, p, end, b: _search(False, b, buf, p, end))
@numba.njit(inline="always")
def find_byte(buf, p, end, b):
    """The first position in ``[p, end)`` whose byte is ``b``, else ``end``: a word at a time."""
    while p + 8 <= end and not has_byte(load8(buf, p), b):
        p += 8
    while p < end and buf[p] != b:
        p += 1
    return p


@interpreted_as(lambda buf, p, end, n: _search(True, n, buf, p, end))
@numba.njit(inline="always")
def find_byte_below(buf, p, end, n):
    """The first position in ``[p, end)`` whose byte is below ``n`` (``n <= 128``), else ``end``: a
    word at a time; in a word with such a byte, its least significant flagged byte is one (a
    borrow only runs upwards from a byte below ``n``), so on a little-endian machine the count of
    trailing zero bits says where it is."""
    while p + 8 <= end:
        x = load8(buf, p)
        flags = (x - ONES * np.uint64(n)) & ~x & HIGH
        if flags != 0:
            if LITTLE_ENDIAN:
                return p + (trailing_zeros(flags) >> 3)
            break
        p += 8
    while p < end and buf[p] >= n:
        p += 1
    return p
