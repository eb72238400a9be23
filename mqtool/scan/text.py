"""Message batches as ``mqtool dump`` text: JSON Lines, a JSON array's items, or CSV rows, as bytes.

The bytes equal what ``mqtool/cli/output.py`` writes for the same rows as dicts (``json.dumps(row,
ensure_ascii=False)`` per line; ``csv.writer(lineterminator="\\n")`` of each cell, lists and maps as
their JSON text) and tests hold them equal on every fixture record. Each column is encoded on its own
by a compiled kernel into Arrow-style (offsets, bytes) cells, then one kernel interleaves the cells
row by row with the constant text between them (``{"offset": ``, ``, "size": ``, ... or commas).
"""

from __future__ import annotations

import json
from enum import Enum

import numba
import numpy as np
import pyarrow as pa

QUOTE, BACKSLASH, COMMA, NEWLINE = 34, 92, 44, 10
_NULL = np.frombuffer(b"null", dtype=np.uint8)
_EMPTY = np.zeros(0, dtype=np.uint8)
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


class TextFormat(str, Enum):
    jsonl = "jsonl"  # one object per line
    json = "json"  # the items of an array: ``,\n{...}`` per row (the caller drops the first comma)
    csv = "csv"  # one row per line, no header


# ---- kernels ---------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _ints(values, valid, null_text):
    """Decimal text of each value (``null_text`` where not ``valid``)."""
    n = values.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    data = np.empty(n * 20 + n * null_text.shape[0] + 1, dtype=np.uint8)
    offsets[0] = 0
    k = 0
    for i in range(n):
        if not valid[i]:
            for j in range(null_text.shape[0]):
                data[k] = null_text[j]
                k += 1
        else:
            v = values[i]
            if v < 0:
                data[k] = 45
                k += 1
                v = -v
            digits = 1
            t = v
            while t >= 10:
                t //= 10
                digits += 1
            for j in range(digits - 1, -1, -1):
                data[k + j] = 48 + v % 10
                v //= 10
            k += digits
        offsets[i + 1] = k
    return offsets, data[:k]


@numba.njit(cache=True, nogil=True)
def _choices(codes, table_offsets, table_data):
    """Cell ``i`` is entry ``codes[i]`` of a small table of byte strings."""
    n = codes.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    longest = 0
    for t in range(table_offsets.shape[0] - 1):
        longest = max(longest, table_offsets[t + 1] - table_offsets[t])
    data = np.empty(n * longest + 1, dtype=np.uint8)
    offsets[0] = 0
    k = 0
    for i in range(n):
        c = codes[i]
        for j in range(table_offsets[c], table_offsets[c + 1]):
            data[k] = table_data[j]
            k += 1
        offsets[i + 1] = k
    return offsets, data[:k]


@numba.njit(inline="always")
def _put_json_string(out, k, data, s, e):
    """``json.dumps(str, ensure_ascii=False)`` of UTF-8 ``data[s:e]`` at ``out[k:]``."""
    out[k] = QUOTE
    k += 1
    for p in range(s, e):
        b = data[p]
        if b == QUOTE or b == BACKSLASH:
            out[k] = BACKSLASH
            out[k + 1] = b
            k += 2
        elif b >= 32:
            out[k] = b
            k += 1
        elif b == 10 or b == 13 or b == 9 or b == 8 or b == 12:
            out[k] = BACKSLASH
            out[k + 1] = 110 if b == 10 else 114 if b == 13 else 116 if b == 9 else 98 if b == 8 else 102
            k += 2
        else:
            out[k] = BACKSLASH
            out[k + 1] = 117  # u00XX
            out[k + 2] = 48
            out[k + 3] = 48
            out[k + 4] = _HEX[b >> 4]
            out[k + 5] = _HEX[b & 15]
            k += 6
    out[k] = QUOTE
    return k + 1


@numba.njit(cache=True, nogil=True)
def _json_strings(offsets, data, valid):
    """JSON text of each string (``null`` where not ``valid``)."""
    n = offsets.shape[0] - 1
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out = np.empty(6 * (offsets[n] - offsets[0]) + 4 * n + 1, dtype=np.uint8)
    out_offsets[0] = 0
    k = 0
    for i in range(n):
        if valid[i]:
            k = _put_json_string(out, k, data, offsets[i], offsets[i + 1])
        else:
            for j in range(4):
                out[k + j] = _NULL[j]
            k += 4
        out_offsets[i + 1] = k
    return out_offsets, out[:k]


@numba.njit(cache=True, nogil=True)
def _json_string_lists(list_offsets, valid, offsets, data):
    """JSON text of each list of strings: ``["a", "b"]`` (``null`` where not ``valid``)."""
    n = list_offsets.shape[0] - 1
    first, last = list_offsets[0], list_offsets[n]
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out = np.empty(6 * (offsets[last] - offsets[first]) + 4 * (last - first) + 4 * n + 1, dtype=np.uint8)
    out_offsets[0] = 0
    k = 0
    for i in range(n):
        if not valid[i]:
            for j in range(4):
                out[k + j] = _NULL[j]
            k += 4
        else:
            out[k] = 91  # [
            k += 1
            for item in range(list_offsets[i], list_offsets[i + 1]):
                if item > list_offsets[i]:
                    out[k] = COMMA
                    out[k + 1] = 32
                    k += 2
                k = _put_json_string(out, k, data, offsets[item], offsets[item + 1])
            out[k] = 93  # ]
            k += 1
        out_offsets[i + 1] = k
    return out_offsets, out[:k]


@numba.njit(cache=True, nogil=True)
def _json_string_maps(map_offsets, valid, key_offsets, key_data, value_offsets, value_data):
    """JSON text of each string-to-string map: ``{"k": "v", "k2": "v2"}``."""
    n = map_offsets.shape[0] - 1
    first, last = map_offsets[0], map_offsets[n]
    text = (key_offsets[last] - key_offsets[first]) + (value_offsets[last] - value_offsets[first])
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out = np.empty(6 * text + 8 * (last - first) + 4 * n + 1, dtype=np.uint8)
    out_offsets[0] = 0
    k = 0
    for i in range(n):
        if not valid[i]:
            for j in range(4):
                out[k + j] = _NULL[j]
            k += 4
        else:
            out[k] = 123  # {
            k += 1
            for item in range(map_offsets[i], map_offsets[i + 1]):
                if item > map_offsets[i]:
                    out[k] = COMMA
                    out[k + 1] = 32
                    k += 2
                k = _put_json_string(out, k, key_data, key_offsets[item], key_offsets[item + 1])
                out[k] = 58  # :
                out[k + 1] = 32
                k = _put_json_string(out, k + 2, value_data, value_offsets[item], value_offsets[item + 1])
            out[k] = 125  # }
            k += 1
        out_offsets[i + 1] = k
    return out_offsets, out[:k]


@numba.njit(cache=True, nogil=True)
def _csv_cells(offsets, data, valid):
    """``csv.writer`` (QUOTE_MINIMAL, ``lineterminator="\\n"``) of each text: quoted, with quotes
    doubled, when it holds a comma, a quote or a newline; empty where not ``valid``."""
    n = offsets.shape[0] - 1
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out = np.empty(2 * (offsets[n] - offsets[0]) + 2 * n + 1, dtype=np.uint8)
    out_offsets[0] = 0
    k = 0
    for i in range(n):
        if valid[i]:
            s, e = offsets[i], offsets[i + 1]
            quote = False
            for p in range(s, e):
                b = data[p]
                if b == COMMA or b == QUOTE or b == NEWLINE:
                    quote = True
                    break
            if quote:
                out[k] = QUOTE
                k += 1
                for p in range(s, e):
                    out[k] = data[p]
                    k += 1
                    if data[p] == QUOTE:
                        out[k] = QUOTE
                        k += 1
                out[k] = QUOTE
                k += 1
            else:
                for p in range(s, e):
                    out[k] = data[p]
                    k += 1
        out_offsets[i + 1] = k
    return out_offsets, out[:k]


@numba.njit(cache=True, nogil=True)
def _interleave(cell_offsets, cells, piece_offsets, pieces):
    """Rows of text: piece 0, cell 0 of the row, piece 1, cell 1, ..., the last piece. Column
    ``c``'s cells are ``cells[c][cell_offsets[c][i] : cell_offsets[c][i + 1]]`` (tuples of arrays)."""
    columns = len(cells)
    n = cell_offsets[0].shape[0] - 1
    total = n * (piece_offsets[columns + 1] - piece_offsets[0])
    for c in range(columns):
        total += cell_offsets[c][n]
    out = np.empty(total, dtype=np.uint8)
    k = 0
    for i in range(n):
        for c in range(columns):
            for j in range(piece_offsets[c], piece_offsets[c + 1]):
                out[k] = pieces[j]
                k += 1
            data = cells[c]
            offsets = cell_offsets[c]
            for j in range(offsets[i], offsets[i + 1]):
                out[k] = data[j]
                k += 1
        for j in range(piece_offsets[columns], piece_offsets[columns + 1]):
            out[k] = pieces[j]
            k += 1
    return out


# ---- Arrow buffers -----------------------------------------------------------------------------


def _validity(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets of the array's rows, UTF-8 data) of a string array, slices included."""
    _bitmap, offsets, data = arr.buffers()
    offs = np.frombuffer(offsets, dtype=np.int32, count=arr.offset + len(arr) + 1)[arr.offset :].astype(np.int64)
    return offs, (np.frombuffer(data, dtype=np.uint8) if data is not None else _EMPTY)


def _list_offsets(arr: pa.Array) -> np.ndarray:
    return np.frombuffer(arr.buffers()[1], dtype=np.int32, count=arr.offset + len(arr) + 1)[arr.offset :].astype(np.int64)


def _json_cells(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """JSON text of each value of one column (as ``json.dumps`` writes the Python value)."""
    t = arr.type
    if pa.types.is_string(t):
        return _json_strings(*_string_buffers(arr), _validity(arr))
    if pa.types.is_boolean(t):
        codes = np.where(_validity(arr), arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64), 2)
        return _choices(codes, *_table([b"false", b"true", b"null"]))
    if pa.types.is_integer(t):
        return _ints(arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), _validity(arr), _NULL)
    if pa.types.is_map(t):
        keys, items = arr.keys, arr.items
        return _json_string_maps(_list_offsets(arr), _validity(arr), *_string_buffers(keys), *_string_buffers(items))
    if pa.types.is_list(t):
        return _json_string_lists(_list_offsets(arr), _validity(arr), *_string_buffers(arr.values))
    raise TypeError(f"no text encoding for {t}")


def _csv_column(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``csv.writer`` cells of one column, values as ``output._cell`` turns them into text."""
    t = arr.type
    valid = _validity(arr)
    if pa.types.is_string(t):
        return _csv_cells(*_string_buffers(arr), valid)
    if pa.types.is_boolean(t):
        codes = np.where(valid, arr.fill_null(False).to_numpy(zero_copy_only=False).astype(np.int64), 2)
        return _choices(codes, *_table([b"False", b"True", b""]))
    if pa.types.is_integer(t):
        return _ints(arr.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64), valid, _EMPTY)
    return _csv_cells(*_json_cells(arr), valid)


def _table(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in items], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(items) or b"\0", dtype=np.uint8)


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
        self.piece_offsets, self.pieces = _pieces(self.fields, self.fmt)

    def encode(self, batch: pa.RecordBatch) -> np.ndarray:
        """The text of the batch's rows (uint8 array; write it as a buffer)."""
        if batch.num_rows == 0:
            return _EMPTY
        encode = _csv_column if self.fmt is TextFormat.csv else _json_cells
        cells = [encode(batch.column(name)) for name in self.fields]
        return _interleave(tuple(offsets for offsets, _ in cells), tuple(data for _, data in cells), self.piece_offsets, self.pieces)
