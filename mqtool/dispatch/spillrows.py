"""The compiled packing of ``DispatchCache``'s spill: a batch's row-major ``fields`` to and from aligned column blocks."""

from __future__ import annotations

import numpy as np

from . import fastdispatch as fd
from ._spillrows import NARROW, WIDE, pack_rows, unpack_rows
from .queuegroups import QueueGroups, group_unpacked

ROW_BYTES = 8 * len(WIDE) + 4 * (len(NARROW) + 1) + 1


def spill_size(rows: int, keys: int, groups: int) -> int:
    return _groups_at(rows, keys) + 8 * (2 * groups + 1) + 4 * rows


def _groups_at(rows: int, keys: int) -> int:
    return -(-(_keys_at(rows) + 4 * keys) // 8) * 8


def _keys_at(rows: int) -> int:
    end = ROW_BYTES * rows
    return -(-end // 8) * 8


def _views(buf: np.ndarray, rows: int, keys: int):
    wide = buf[: 8 * len(WIDE) * rows].view("<i8").reshape(len(WIDE), rows)
    at = 8 * len(WIDE) * rows
    narrow = buf[at : at + 4 * (len(NARROW) + 1) * rows].view("<i4").reshape(len(NARROW) + 1, rows)
    at += 4 * (len(NARROW) + 1) * rows
    flags = buf[at : at + rows].view("i1")
    at = _keys_at(rows)
    return wide, narrow, flags, buf[at : at + 4 * keys].view("<i4")


def _group_views(buf: np.ndarray, rows: int, keys: int, groups: int):
    at = _groups_at(rows, keys)
    group_keys = buf[at : at + 8 * groups].view("<i8")
    at += 8 * groups
    starts = buf[at : at + 8 * (groups + 1)].view("<i8")
    at += 8 * (groups + 1)
    return group_keys, starts, buf[at : at + 4 * rows].view("<i4")


def pack(fields: np.ndarray, topic_ids: np.ndarray, keys: np.ndarray, groups: QueueGroups) -> np.ndarray | None:
    """The spill bytes of a batch (uint8), or None when a key is outside ``[0, 2**31)``."""
    rows, n_keys, n_groups = fields.shape[0], keys.shape[0], groups.keys.shape[0]
    buf = np.zeros(spill_size(rows, n_keys, n_groups), dtype=np.uint8)
    if not pack_rows(fields, topic_ids, keys, *_views(buf, rows, n_keys)):
        return None
    group_keys, starts, dest = _group_views(buf, rows, n_keys, n_groups)
    group_keys[:], starts[:], dest[:] = groups.keys, groups.starts, groups.dest
    return buf


class Columns:
    """A spilled batch's bytes as column block views: what the writers read, without the row-major ``fields``."""

    def __init__(self, data, rows: int, keys: int, groups: int):
        self.buf = np.frombuffer(data, dtype=np.uint8, count=spill_size(rows, keys, groups))
        self.rows, self.n_keys, self.n_groups = rows, keys, groups
        self.wide, self.narrow, self.flags, self.key_in = _views(self.buf, rows, keys)

    @property
    def topic_ids(self) -> np.ndarray:
        return self.narrow[len(NARROW)]

    def grouped(self) -> QueueGroups:
        group_keys, starts, dest = _group_views(self.buf, self.rows, self.n_keys, self.n_groups)
        return group_unpacked(group_keys.astype(np.int64), starts.astype(np.int64), dest.astype(np.int32), self.wide, self.narrow, self.flags, WIDE, NARROW)

    def unpack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fields, topic_ids, keys)``: the row-major fields (topic bytes zero), the topic ids and the keys as int64."""
        fields = np.empty((self.rows, fd.N_FIELDS), dtype=np.int64)
        topic_ids = np.empty(self.rows, dtype=np.int32)
        out_keys = np.empty(self.n_keys, dtype=np.int64)
        unpack_rows(self.wide, self.narrow, self.flags, self.key_in, fields, topic_ids, out_keys)
        return fields, topic_ids, out_keys
