"""Message batches as ``mqtool dump`` text: JSON Lines, a JSON array's items, or CSV rows, as bytes.

The bytes equal what ``mqtool/cli/output.py`` writes for the same rows as dicts (``json.dumps(row,
ensure_ascii=False)`` per line; ``csv.writer(lineterminator="\\n")`` of each cell, lists and maps as
their JSON text) and tests hold them equal on every fixture record. One compiled kernel writes the
rows straight into one reused output buffer, row by row: the constant text between cells
(``{"offset": ``, ``, "size": ``, ... or commas) and each cell from the column's Arrow buffers,
plain runs of string bytes copied a word at a time (``bytecopy.copy_words``).
"""

from __future__ import annotations

import json
from enum import Enum

from ..jit import numba
import numpy as np
import pyarrow as pa

from ..store.words import has_byte, has_byte_below, load8
from . import compute
from .bytecopy import WORD_SLACK, copy_words

QUOTE, BACKSLASH, COMMA, NEWLINE = 34, 92, 44, 10
_EMPTY = np.zeros(0, dtype=np.uint8)
_EMPTY.flags.writeable = False
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_PAIRS = np.frombuffer("".join(f"{i:02d}" for i in range(100)).encode(), dtype=np.uint8)  # "00" to "99"
# a column's kind: how the kernel writes its cells
KIND_INT, KIND_BOOL, KIND_STRING, KIND_LIST, KIND_MAP = range(5)
# the words of a boolean or a null cell: JSON and CSV (``output._cell``: str(True), "" for None)
_WORDS = {False: [b"false", b"true", b"null"], True: [b"False", b"True", b""]}


class TextFormat(str, Enum):
    jsonl = "jsonl"  # one object per line
    json = "json"  # the items of an array: ``,\n{...}`` per row (the caller drops the first comma)
    csv = "csv"  # one row per line, no header


# ---- the kernel ---------------------------------------------------------------------------------


@numba.njit(inline="always")
def _put(out, k, byte, doubled):
    """One byte; a quote twice when ``doubled`` (JSON text inside a CSV cell)."""
    out[k] = byte
    if doubled and byte == QUOTE:
        out[k + 1] = QUOTE
        return k + 2
    return k + 1


@numba.njit(cache=True, nogil=True)
def _put_json_string(out, k, data, s, e, doubled):
    """``json.dumps(str, ensure_ascii=False)`` of UTF-8 ``data[s:e]`` at ``out[k:]`` (quotes
    doubled when ``doubled``)."""
    k = _put(out, k, QUOTE, doubled)
    run = s
    p = s
    while p < e:
        if p + 8 <= e:
            x = load8(data, p)
            if not (has_byte_below(x, 32) or has_byte(x, QUOTE) or has_byte(x, BACKSLASH)):
                p += 8
                continue
        b = data[p]
        p += 1
        if b >= 32 and b != QUOTE and b != BACKSLASH:
            continue
        k = copy_words(out, k, data, run, p - 1 - run)
        run = p
        out[k] = BACKSLASH
        if b == QUOTE or b == BACKSLASH:
            k = _put(out, k + 1, b, doubled)
        elif b == 10 or b == 13 or b == 9 or b == 8 or b == 12:
            out[k + 1] = 110 if b == 10 else 114 if b == 13 else 116 if b == 9 else 98 if b == 8 else 102
            k += 2
        else:
            out[k + 1] = 117  # u00XX
            out[k + 2] = 48
            out[k + 3] = 48
            out[k + 4] = _HEX[b >> 4]
            out[k + 5] = _HEX[b & 15]
            k += 6
    k = copy_words(out, k, data, run, e - run)
    return _put(out, k, QUOTE, doubled)


@numba.njit(cache=True, nogil=True)
def _put_csv_cell(out, k, data, s, e):
    """``csv.writer`` (QUOTE_MINIMAL) of ``data[s:e]``: quoted, quotes doubled, when it holds a
    comma, a quote or a newline."""
    p = s
    while p + 8 <= e:
        x = load8(data, p)
        if has_byte(x, COMMA) or has_byte(x, QUOTE) or has_byte(x, NEWLINE):
            break
        p += 8
    for p in range(p, e):
        b = data[p]
        if b == COMMA or b == QUOTE or b == NEWLINE:
            out[k] = QUOTE
            k = copy_words(out, k + 1, data, s, p - s)
            for q in range(p, e):
                k = _put(out, k, data[q], True)
            out[k] = QUOTE
            return k + 1
    return copy_words(out, k, data, s, e - s)


@numba.njit(inline="always")
def _put_pair(out, k, v):
    """Two digits of ``v < 100`` at ``out[k:k+2]``."""
    out[k] = _PAIRS[v * np.uint64(2)]
    out[k + 1] = _PAIRS[v * np.uint64(2) + np.uint64(1)]


@numba.njit(inline="always")
def _put_8_digits(out, k, v):
    """``v < 10**8`` as exactly eight digits (leading zeros) at ``out[k:k+8]``."""
    high, low = v // np.uint64(10000), v % np.uint64(10000)
    _put_pair(out, k, high // np.uint64(100))
    _put_pair(out, k + 2, high % np.uint64(100))
    _put_pair(out, k + 4, low // np.uint64(100))
    _put_pair(out, k + 6, low % np.uint64(100))
    return k + 8


@numba.njit(inline="always")
def _put_short(out, k, v):
    """``v < 10**8`` in decimal (no leading zeros) at ``out[k:]``; returns the new end."""
    digits = 1
    t = np.uint64(10)
    while digits < 8 and v >= t:
        t *= np.uint64(10)
        digits += 1
    j = k + digits
    while v >= 100:
        j -= 2
        _put_pair(out, j, v % np.uint64(100))
        v //= np.uint64(100)
    if v >= 10:
        _put_pair(out, j - 2, v)
    else:
        out[j - 1] = np.uint8(48) + np.uint8(v)
    return k + digits


@numba.njit(inline="always")
def _put_int(out, k, v):
    """Decimal ``v`` (int64, its minimum included) at ``out[k:]``, in groups of eight digits
    that do not wait on each other's divisions."""
    if v < 0:
        out[k] = 45  # '-'
        k += 1
        u = np.uint64(-(v + 1)) + np.uint64(1)
    else:
        u = np.uint64(v)
    e8 = np.uint64(100000000)
    if u < e8:
        return _put_short(out, k, u)
    high, low = u // e8, u % e8
    if high < e8:
        return _put_8_digits(out, _put_short(out, k, high), low)
    return _put_8_digits(out, _put_8_digits(out, _put_short(out, k, high // e8), high % e8), low)


@numba.njit(cache=True, nogil=True)
def _render(n, kinds, slots, ints, valid, words_offsets, words, str_offsets, str_data, nest_offsets, piece_offsets, pieces, csv, out):
    """Rows of text into ``out``: piece 0, cell 0 of the row, piece 1, cell 1, ..., the last
    piece; returns the length written. Column ``c`` is of kind ``kinds[c]``: ``KIND_INT`` and
    ``KIND_BOOL`` read ``ints[slots[c, 0]]``, ``KIND_STRING`` the strings ``slots[c, 0]`` of
    ``str_offsets``/``str_data``, ``KIND_LIST`` the lists ``nest_offsets[slots[c, 0]]`` of strings
    ``slots[c, 1]``, ``KIND_MAP`` the maps ``nest_offsets[slots[c, 0]]`` of keys ``slots[c, 1]``
    and values ``slots[c, 2]``; ``valid[c]`` is false for a null. ``words``: false, true, null."""
    columns = kinds.shape[0]
    k = 0
    for i in range(n):
        for c in range(columns):
            k = copy_words(out, k, pieces, piece_offsets[c], piece_offsets[c + 1] - piece_offsets[c])
            kind = kinds[c]
            if not valid[c, i] or kind == KIND_BOOL:
                w = 2 if not valid[c, i] else ints[slots[c, 0], i]
                k = copy_words(out, k, words, words_offsets[w], words_offsets[w + 1] - words_offsets[w])
            elif kind == KIND_INT:
                k = _put_int(out, k, ints[slots[c, 0], i])
            elif kind == KIND_STRING:
                offsets, data = str_offsets[slots[c, 0]], str_data[slots[c, 0]]
                if csv:
                    k = _put_csv_cell(out, k, data, offsets[i], offsets[i + 1])
                else:
                    k = _put_json_string(out, k, data, offsets[i], offsets[i + 1], False)
            else:
                nest = nest_offsets[slots[c, 0]]
                first, last = nest[i], nest[i + 1]
                quoted = csv and last > first  # the JSON text holds quotes: csv.writer quotes it
                if quoted:
                    out[k] = QUOTE
                    k += 1
                out[k] = 91 if kind == KIND_LIST else 123  # [ or {
                k += 1
                key_offsets, key_data = str_offsets[slots[c, 1]], str_data[slots[c, 1]]
                value_offsets, value_data = str_offsets[slots[c, 2]], str_data[slots[c, 2]]
                for item in range(first, last):
                    if item > first:
                        out[k] = COMMA
                        out[k + 1] = 32
                        k += 2
                    k = _put_json_string(out, k, key_data, key_offsets[item], key_offsets[item + 1], quoted)
                    if kind == KIND_MAP:
                        out[k] = 58  # :
                        out[k + 1] = 32
                        k = _put_json_string(out, k + 2, value_data, value_offsets[item], value_offsets[item + 1], quoted)
                out[k] = 93 if kind == KIND_LIST else 125  # ] or }
                k += 1
                if quoted:
                    out[k] = QUOTE
                    k += 1
        k = copy_words(out, k, pieces, piece_offsets[columns], piece_offsets[columns + 1] - piece_offsets[columns])
    return k


# ---- Arrow buffers -----------------------------------------------------------------------------


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view: the kernel's tuples of arrays must all have one numba type."""
    a = a.view()
    a.flags.writeable = False
    return a


def _validity(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    return compute.is_valid(arr).to_numpy(zero_copy_only=False)


def _offsets(arr: pa.Array, which: int = 1) -> np.ndarray:
    """The int32 offsets of the array's rows (a slice's rows included)."""
    return _readonly(np.frombuffer(arr.buffers()[which], dtype=np.int32, count=arr.offset + len(arr) + 1)[arr.offset :])


def _data(arr: pa.Array) -> np.ndarray:
    data = arr.buffers()[2]
    return _readonly(np.frombuffer(data, dtype=np.uint8)) if data is not None and data.size else _EMPTY


class _Columns:
    """A batch's columns laid out for ``_render``, and an upper bound of the text's length."""

    def __init__(self, batch: pa.RecordBatch, fields: list[str]):
        n = batch.num_rows
        self.kinds = np.empty(len(fields), dtype=np.int64)
        self.slots = np.zeros((len(fields), 3), dtype=np.int64)
        self.valid = np.empty((len(fields), n), dtype=np.bool_)
        ints, self.str_offsets, self.str_data, self.nests = [], [], [], []
        self.bound = 0
        for c, name in enumerate(fields):
            arr = batch.column(name)
            t = arr.type
            self.valid[c] = _validity(arr)
            if pa.types.is_boolean(t) or pa.types.is_integer(t):
                self.kinds[c] = KIND_BOOL if pa.types.is_boolean(t) else KIND_INT
                self.slots[c, 0] = len(ints)
                ints.append((compute.fill_null(arr, False if pa.types.is_boolean(t) else 0) if arr.null_count else arr).to_numpy(zero_copy_only=False))
                self.bound += 20 * n
            elif pa.types.is_string(t):
                self.kinds[c] = KIND_STRING
                self.slots[c, 0] = self._string(arr)
                offsets = self.str_offsets[-1]
                self.bound += 6 * int(offsets[-1] - offsets[0]) + 4 * n
            elif pa.types.is_list(t) or pa.types.is_map(t):
                is_map = pa.types.is_map(t)
                self.kinds[c] = KIND_MAP if is_map else KIND_LIST
                nest = _offsets(arr)
                self.slots[c, 0] = len(self.nests)
                self.nests.append(nest)
                parts = [arr.keys, arr.items] if is_map else [arr.values]
                self.slots[c, 1] = self._string(parts[0])
                self.slots[c, 2] = self._string(parts[-1])
                items = int(nest[-1] - nest[0])
                text = sum(int(o[nest[-1]] - o[nest[0]]) for o in (self.str_offsets[s] for s in set(self.slots[c, 1:].tolist())))
                self.bound += 6 * text + 14 * items + 4 * n
            else:
                raise TypeError(f"no text encoding for {t}")
        self.ints = np.array(ints, dtype=np.int64).reshape(len(ints) or 1, n) if ints else np.zeros((1, n), dtype=np.int64)
        for group in (self.str_offsets, self.nests):
            if not group:
                group.append(_readonly(np.zeros(1, dtype=np.int32)))
        if not self.str_data:
            self.str_data.append(_EMPTY)

    def _string(self, arr: pa.Array) -> int:
        self.str_offsets.append(_offsets(arr))
        self.str_data.append(_data(arr))
        return len(self.str_offsets) - 1


def _table(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in items], out=offsets[1:])
    return offsets, _readonly(np.frombuffer(b"".join(items) + bytes(WORD_SLACK), dtype=np.uint8))  # padded: ``copy_words`` reads words


def _pieces(fields, fmt: TextFormat) -> tuple[np.ndarray, np.ndarray]:
    if fmt is TextFormat.csv:
        return _table([b"", *[b","] * (len(fields) - 1), b"\n"])
    names = [json.dumps(f, ensure_ascii=False).encode() + b": " for f in fields]
    first = (b",\n" if fmt is TextFormat.json else b"") + b"{"
    end = b"}" if fmt is TextFormat.json else b"}\n"
    return _table([first + names[0], *[b", " + n for n in names[1:]], end])


class BatchText:
    """Encodes record batches holding ``fields`` (in that order) as ``fmt`` text."""

    def __init__(self, fields, fmt: TextFormat):
        self.fields = list(fields)
        self.fmt = TextFormat(fmt)
        self.csv = self.fmt is TextFormat.csv
        self.piece_offsets, self.pieces = _pieces(self.fields, self.fmt)
        self.words_offsets, self.words = _table(_WORDS[self.csv])
        self.out = _EMPTY

    def encode(self, batch: pa.RecordBatch, *, fresh: bool = False) -> np.ndarray:
        """The text of the batch's rows (uint8 array; write it as a buffer). The array is a view
        of a buffer the next ``encode`` reuses: write or copy it before; with ``fresh`` it has a
        buffer of its own (threads may then encode at once)."""
        if batch.num_rows == 0:
            return _EMPTY
        c = _Columns(batch, self.fields)
        bound = c.bound + batch.num_rows * int(self.piece_offsets[-1]) + WORD_SLACK  # ``copy_words`` writes up to a word past the text
        if fresh:
            out = np.empty(bound, dtype=np.uint8)
        else:
            if len(self.out) < bound:
                self.out = np.empty(max(bound, 2 * len(self.out)), dtype=np.uint8)
            out = self.out
        k = _render(batch.num_rows, c.kinds, c.slots, c.ints, c.valid, self.words_offsets, self.words, tuple(c.str_offsets), tuple(c.str_data), tuple(c.nests), self.piece_offsets, self.pieces, self.csv, out)
        return out[:k]
