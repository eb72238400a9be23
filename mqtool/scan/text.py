"""Message batches as ``mqtool dump``'s text, bytes equal to ``cli/output.py``'s, by one kernel (``_text.pyx``)."""

from __future__ import annotations

import json
from enum import Enum

import numpy as np
import pyarrow as pa

from . import compute
from ._text import KINDS, OUT_SLACK, render

_EMPTY = np.zeros(0, dtype=np.uint8)
# a column's kind: how the kernel writes its cells
KIND_INT, KIND_BOOL, KIND_STRING, KIND_LIST, KIND_MAP = KINDS
# the words of a boolean or a null cell: JSON and CSV (``output._cell``: str(True), "" for None)
_WORDS = {False: [b"false", b"true", b"null"], True: [b"False", b"True", b""]}


class TextFormat(str, Enum):
    jsonl = "jsonl"  # one object per line
    json = "json"  # the items of an array: ``,\n{...}`` per row (the caller drops the first comma)
    csv = "csv"  # one row per line, no header


# ---- Arrow buffers -----------------------------------------------------------------------------


def _offsets(arr: pa.Array, which: int = 1) -> np.ndarray:
    """The int32 offsets of the array's rows (a slice's rows included)."""
    return np.frombuffer(arr.buffers()[which], dtype=np.int32, count=arr.offset + len(arr) + 1)[arr.offset :]


class _Columns:
    """A batch's columns laid out for ``render``, and an upper bound of the text's length."""

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
            self.valid[c] = compute.is_valid(arr).to_numpy(zero_copy_only=False) if arr.null_count else True
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
                group.append(np.zeros(1, dtype=np.int32))
        if not self.str_data:
            self.str_data.append(_EMPTY)

    def _string(self, arr: pa.Array) -> int:
        data = arr.buffers()[2]
        self.str_offsets.append(_offsets(arr))
        self.str_data.append(np.frombuffer(data, dtype=np.uint8) if data is not None and data.size else _EMPTY)
        return len(self.str_offsets) - 1


def _table(items: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in items], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(items) + bytes(OUT_SLACK), dtype=np.uint8)  # padded: ``copy_words`` reads words


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
        """The batch's text (uint8 array), a view of a buffer the next ``encode`` reuses unless ``fresh``."""
        if batch.num_rows == 0:
            return _EMPTY
        c = _Columns(batch, self.fields)
        bound = c.bound + batch.num_rows * int(self.piece_offsets[-1]) + OUT_SLACK  # ``copy_words`` writes up to a word past the text
        if fresh:
            out = np.empty(bound, dtype=np.uint8)
        else:
            if len(self.out) < bound:
                self.out = np.empty(max(bound, 2 * len(self.out)), dtype=np.uint8)
            out = self.out
        k = render(batch.num_rows, c.kinds, c.slots, c.ints, c.valid, self.words_offsets, self.words, tuple(c.str_offsets), tuple(c.str_data), tuple(c.nests), self.piece_offsets, self.pieces, self.csv, out)
        return out[:k]
