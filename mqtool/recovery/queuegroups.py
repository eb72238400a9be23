"""A dispatch batch's consume queue rows grouped by queue, computed once per batch (by the plan)
and handed on with it (through ``DispatchCache``'s spill to the apply).

``CommitLogDispatcherBuildConsumeQueue`` dispatches NOT_TYPE and COMMIT records only (reference
§3.2), each to the queue ``(topic, QUEUEID)`` of its record, in commit log order. ``group_queues``
does in one compiled pass over the batch's row-major ``fields`` what a numpy column at a time did
in several strided passes: the eligibility mask, a stable counting sort of the eligible rows by
queue, the four columns ``putMessagePositionInfo`` reads (queue offset, physical offset, size,
tags code) gathered into queue order, and the counts the plan reports (queued rows, the
INNER_MULTI_DISPATCH rows, the last queued row), and by the way the index dispatcher's mask (all
but ROLLBACK, §6.5). ``dest[r]`` is where row ``r`` lands in the
grouped columns (-1 when it is not queued): the spill keeps it, so an apply rebuilds the grouped
columns while unpacking, without grouping again.
"""

from __future__ import annotations

from typing import NamedTuple

from ..jit import interpreted_as, numba
import numpy as np

from ..formats import commitlog as clfmt
from . import fastdispatch as fd

TRAN_MASK = clfmt.TRANSACTION_TYPE_MASK
TRAN_NOT_TYPE = int(clfmt.TransactionType.NOT_TYPE)
TRAN_COMMIT = int(clfmt.TransactionType.COMMIT)
TRAN_ROLLBACK = int(clfmt.TransactionType.ROLLBACK)
CQ_COLUMNS = (fd.F_QUEUE_OFFSET, fd.F_PHYS, fd.F_SIZE, fd.F_TAGS)
# stats slots
S_GROUPS, S_QUEUED, S_MULTI, S_MULTI_QUEUED, S_LAST_QUEUED = range(5)


class QueueGroups(NamedTuple):
    """Group ``g`` is queue ``keys[g]`` (``topic id << 32 | queue id & 0xFFFFFFFF``, in order of
    first appearance); its rows are ``columns[:, starts[g]:starts[g + 1]]`` in commit log order."""

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
    stats = np.zeros(5, dtype=np.int64)
    while not _group(fields, topic_ids, keys, starts, dest, indexed, columns, stats, np.full(_table_slots[0], -1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64)):
        _table_slots[0] *= 2
    groups, queued = int(stats[S_GROUPS]), int(stats[S_QUEUED])
    return QueueGroups(keys[:groups], starts[: groups + 1], columns[:, :queued], dest, indexed, int(stats[S_MULTI]), int(stats[S_MULTI_QUEUED]), int(stats[S_LAST_QUEUED]))


def _group_numpy(fields, topic_ids, keys, starts, dest, indexed, columns, stats, table, counts):
    """``_group`` by whole-array sorts (interpreted kernels): queues numbered in order of first
    appearance, rows stably sorted by queue; never short of ``table``."""
    tran = fields[:, fd.F_SYS_FLAG] & TRAN_MASK
    flagged = (fields[:, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH) != 0
    indexed[:] = tran != TRAN_ROLLBACK
    rows = np.flatnonzero((tran == TRAN_NOT_TYPE) | (tran == TRAN_COMMIT))
    queue_keys = (topic_ids[rows].astype(np.int64) << 32) | (fields[rows, fd.F_QUEUE_ID] & 0xFFFFFFFF)
    by_key = np.argsort(queue_keys, kind="stable")
    sorted_keys = queue_keys[by_key]
    new = np.ones(rows.shape[0], dtype=np.bool_)
    new[1:] = sorted_keys[1:] != sorted_keys[:-1]
    by_first = np.argsort(by_key[new])  # the queues in order of their first row
    number = np.empty(by_first.shape[0], dtype=np.int64)
    number[by_first] = np.arange(by_first.shape[0])
    group = np.empty(rows.shape[0], dtype=np.int64)
    group[by_key] = number[np.cumsum(new) - 1]
    groups = by_first.shape[0]
    keys[:groups] = sorted_keys[new][by_first]
    starts[0] = 0
    np.cumsum(np.bincount(group, minlength=groups), out=starts[1 : groups + 1])
    placed = rows[np.argsort(group, kind="stable")]
    dest[:] = -1
    dest[placed] = np.arange(placed.shape[0])
    columns[:, : placed.shape[0]] = fields[placed][:, list(CQ_COLUMNS)].T
    stats[:] = groups, rows.shape[0], int(flagged.sum()), int(flagged[rows].sum()), rows[-1] if rows.shape[0] else -1
    return True


@interpreted_as(_group_numpy)
@numba.njit(cache=True, nogil=True)
def _group(fields, topic_ids, keys, starts, dest, indexed, columns, stats, table, counts):
    """The batch grouped into ``keys``, ``starts``, ``dest``, ``indexed``, ``columns``, ``stats``;
    False (nothing usable) when ``table`` (all -1, a power of two) would be half full: the
    caller gives a larger one. ``counts``: zeros, one more than the rows. The caller allocates:
    a kernel that makes arrays loads numba's array lowering with it."""
    n = fields.shape[0]
    size = table.shape[0]
    last_key = np.int64(-1)
    last_g = -1
    groups = 0
    queued = 0
    multi = 0
    multi_queued = 0
    last = -1
    for r in range(n):
        flagged = (fields[r, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH) != 0
        if flagged:
            multi += 1
        tran = fields[r, fd.F_SYS_FLAG] & TRAN_MASK
        indexed[r] = tran != TRAN_ROLLBACK
        if tran != TRAN_NOT_TYPE and tran != TRAN_COMMIT:
            dest[r] = -1
            continue
        if flagged:
            multi_queued += 1
        queued += 1
        last = r
        key = (np.int64(topic_ids[r]) << 32) | (fields[r, fd.F_QUEUE_ID] & 0xFFFFFFFF)
        if key == last_key:
            g = last_g
        else:
            slot = (key ^ (key >> 31)) & (size - 1)
            while True:
                g = table[slot]
                if g < 0:
                    g = groups
                    table[slot] = g
                    keys[g] = key
                    groups += 1
                    if 2 * groups >= size:
                        return False
                    break
                if keys[g] == key:
                    break
                slot = (slot + 1) & (size - 1)
            last_key, last_g = key, g
        dest[r] = g  # the group for now, the place below
        counts[g] += 1
    starts[0] = 0
    for g in range(groups):
        starts[g + 1] = starts[g] + counts[g]
        counts[g] = starts[g]  # the fill cursor
    for r in range(n):
        g = dest[r]
        if g < 0:
            continue
        j = counts[g]
        counts[g] = j + 1
        dest[r] = j
        for i in range(len(CQ_COLUMNS)):
            columns[i, j] = fields[r, CQ_COLUMNS[i]]
    stats[S_GROUPS] = groups
    stats[S_QUEUED] = queued
    stats[S_MULTI] = multi
    stats[S_MULTI_QUEUED] = multi_queued
    stats[S_LAST_QUEUED] = last
    return True


def group_unpacked(keys: np.ndarray, starts: np.ndarray, dest: np.ndarray, wide: np.ndarray, narrow: np.ndarray, flags: np.ndarray, wide_cols, narrow_cols) -> QueueGroups:
    """The ``QueueGroups`` of a spilled batch: its stored ``keys``, ``starts`` and ``dest``, the
    grouped columns scattered from the spill's column blocks (``wide``/``narrow`` hold fields
    ``wide_cols``/``narrow_cols``)."""
    queued = int(starts[-1])
    columns = np.empty((len(CQ_COLUMNS), queued), dtype=np.int64)
    src_wide = np.array([wide_cols.index(c) if c in wide_cols else -1 for c in CQ_COLUMNS], dtype=np.int64)
    src_narrow = np.array([narrow_cols.index(c) if c in narrow_cols else -1 for c in CQ_COLUMNS], dtype=np.int64)
    stats = np.zeros(5, dtype=np.int64)
    indexed = np.empty(dest.shape[0], dtype=np.bool_)
    _scatter(dest, wide, narrow, flags, narrow_cols.index(fd.F_SYS_FLAG), src_wide, src_narrow, columns, indexed, stats)
    return QueueGroups(keys, starts, columns, dest, indexed, int(stats[S_MULTI]), int(stats[S_MULTI_QUEUED]), int(stats[S_LAST_QUEUED]))


@numba.njit(cache=True, nogil=True)
def _scatter(dest, wide, narrow, flags, sys_flag_row, src_wide, src_narrow, columns, indexed, stats):
    multi = 0
    multi_queued = 0
    last = -1
    for r in range(dest.shape[0]):
        indexed[r] = (narrow[sys_flag_row, r] & TRAN_MASK) != TRAN_ROLLBACK
        flagged = (flags[r] & fd.FLAG_MULTI_DISPATCH) != 0
        if flagged:
            multi += 1
        j = dest[r]
        if j < 0:
            continue
        if flagged:
            multi_queued += 1
        last = r
        for i in range(src_wide.shape[0]):
            if src_wide[i] >= 0:
                columns[i, j] = wide[src_wide[i], r]
            else:
                columns[i, j] = narrow[src_narrow[i], r]
    stats[S_MULTI] = multi
    stats[S_MULTI_QUEUED] = multi_queued
    stats[S_LAST_QUEUED] = last
