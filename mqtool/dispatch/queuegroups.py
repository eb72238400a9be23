"""A dispatch batch's consume queue rows grouped by queue once (``group_queues``, reference §3.2, §6.5)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import fastdispatch as fd
from ._queuegroups import CQ_COLUMNS, N_STATS, S_GROUPS, S_LAST_QUEUED, S_MULTI, S_MULTI_QUEUED, S_QUEUED, group, scatter


class QueueGroups(NamedTuple):
    """Group ``g``: queue ``keys[g]`` (``topic id << 32 | queue id``), rows ``columns[:, starts[g]:starts[g + 1]]``."""

    keys: np.ndarray  # int64 (groups,)
    starts: np.ndarray  # int64 (groups + 1,)
    columns: np.ndarray  # int64 (4, queued): queue offset, phys offset, size, tags code
    dest: np.ndarray  # int32 (rows,): the row's place in ``columns``, -1 if not queued
    indexed: np.ndarray  # bool (rows,): all but ROLLBACK (``IndexService.buildIndex``)
    multi: int  # rows flagged INNER_MULTI_DISPATCH
    multi_queued: int  # of them, rows the consume queue dispatcher takes
    last_queued: int  # index of the last queued row, -1 if none

    @property
    def queued(self) -> int:
        return self.columns.shape[1]


_table_slots = [256]  # the queue table's size: open addressing at most half full, a small table stays in cache; doubled for good when a batch needs more


def group_queues(fields: np.ndarray, topic_ids: np.ndarray) -> QueueGroups:
    n = fields.shape[0]
    keys = np.empty(n + 1, dtype=np.int64)
    starts = np.empty(n + 2, dtype=np.int64)
    dest = np.empty(n, dtype=np.int32)
    indexed = np.empty(n, dtype=np.bool_)
    columns = np.empty((len(CQ_COLUMNS), n), dtype=np.int64)
    stats = np.zeros(N_STATS, dtype=np.int64)
    while not group(fields, topic_ids, keys, starts, dest, indexed.view(np.uint8), columns, stats, np.full(_table_slots[0], -1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)):
        _table_slots[0] *= 2
    groups, queued = int(stats[S_GROUPS]), int(stats[S_QUEUED])
    return QueueGroups(keys[:groups], starts[: groups + 1], columns[:, :queued], dest, indexed, int(stats[S_MULTI]), int(stats[S_MULTI_QUEUED]), int(stats[S_LAST_QUEUED]))


def group_unpacked(keys: np.ndarray, starts: np.ndarray, dest: np.ndarray, wide: np.ndarray, narrow: np.ndarray, flags: np.ndarray, wide_cols, narrow_cols) -> QueueGroups:
    """The ``QueueGroups`` of a spilled batch: stored ``keys``, ``starts``, ``dest``, columns scattered from its blocks."""
    queued = int(starts[-1])
    columns = np.empty((len(CQ_COLUMNS), queued), dtype=np.int64)
    src_wide = np.array([wide_cols.index(c) if c in wide_cols else -1 for c in CQ_COLUMNS], dtype=np.int64)
    src_narrow = np.array([narrow_cols.index(c) if c in narrow_cols else -1 for c in CQ_COLUMNS], dtype=np.int64)
    stats = np.zeros(N_STATS, dtype=np.int64)
    indexed = np.empty(dest.shape[0], dtype=np.bool_)
    scatter(dest, wide, narrow, flags, narrow_cols.index(fd.F_SYS_FLAG), src_wide, src_narrow, columns, indexed.view(np.uint8), stats)
    return QueueGroups(keys, starts, columns, dest, indexed, int(stats[S_MULTI]), int(stats[S_MULTI_QUEUED]), int(stats[S_LAST_QUEUED]))
