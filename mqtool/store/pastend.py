"""What lies after a cut of the commit log (``records_after``): the records the broker discards unread."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..formats import commitlog as fmt
from .commitlog import CommitLog
from .fastscan import COL_CRC_OK, COL_POS, COL_SIZE, END_CAPACITY, N_COLS, OK_BLANK, as_array, data_ranges, find_record_start, release_pages, walk_segment
from .mappedfile import MappedFile, open_read_only
from .segments import store_timestamp_at

_PHYS = fmt.PHYS_OFFSET_POSITION
WINDOW = 8 << 20  # bytes searched for a record start between page releases (what stays resident)


@dataclass
class LostScan:
    records: int = 0
    record_bytes: int = 0
    listed: list = field(default_factory=list)  # what ``describe`` made of the first ``limit`` records
    other_bytes: int = 0  # non-zero bytes after the cut that belong to no record
    first_other: int | None = None
    stale: int = 0  # records stored before the newest one kept (``store_timestamp``): see ``records_after``
    stale_bytes: int = 0


def records_after(commitlog: CommitLog, cut: int, *, limit: int, legacy: bool, accept_v2: bool, newest_kept: int | None = None, describe: Callable | None = None) -> LostScan:
    """Records from ``cut`` to the log's end, ``limit`` described; those older than ``newest_kept`` counted ``stale`` (§8.9)."""
    result = LostScan()
    out = np.empty((1 << 14, N_COLS), dtype=np.int64)
    for _, seg, start in commitlog.segments_from(cut):
        with MappedFile(seg.path, seg.base_offset) as mf:
            array = as_array(mf.buf)
            try:
                newest_kept = _walk(array, seg.base_offset, start, out, result, limit, legacy, accept_v2, data_extents(seg.path, start), mf.buf, newest_kept, describe)
            finally:
                release_pages(mf.buf, 0, mf.size)
                del array
    return result


def data_extents(path, start: int = 0) -> list[tuple[int, int]]:
    """``fastscan.data_ranges`` of the file at ``path``, from ``start`` to its end."""
    fd = open_read_only(path)
    try:
        return data_ranges(fd, start, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _search_from(extents: list[tuple[int, int]], pos: int) -> int | None:
    """Where a record search from ``pos`` begins: a few bytes before the first data from ``pos``, never before it."""
    search = next((max(lo, pos) for lo, hi in extents if hi > pos), None)
    return None if search is None else max(pos, search - (search % 8) - 8)


def _next_self_described(array, start: int, base: int, accept_v2: bool, buf, extents: list[tuple[int, int]]) -> int:
    """The first record magic at or after ``start`` whose PHYSICALOFFSET is its own, skipping zero windows."""
    size = array.shape[0]
    tail = _PHYS + 8
    q = start
    while True:
        w = min(size, q + WINDOW + tail)
        found = find_record_start(array[:w], q, w, base, 0, v2=accept_v2, blanks=False)
        if found >= 0 or w == size:
            return found
        searched = w - tail + 1  # every q' < searched was tried
        release_pages(buf, q, searched)
        nxt = _search_from(extents, searched)
        if nxt is None:
            return -1
        q = nxt


def _walk(array, base, pos, out, result: LostScan, limit: int, legacy: bool, accept_v2: bool, extents, buf=None, newest_kept: int | None = None, describe: Callable | None = None) -> int | None:
    """Walk one segment from ``pos``; returns ``newest_kept`` as it stands after it."""
    size = array.shape[0]
    while pos < size:
        count, end, code, _ = walk_segment(array, pos, size, True, False, out)
        for row in out[:count]:
            result.records += 1
            result.record_bytes += int(row[COL_SIZE])
            if newest_kept is not None:
                stored = store_timestamp_at(array, int(row[COL_POS]))
                if stored < newest_kept:
                    result.stale += 1
                    result.stale_bytes += int(row[COL_SIZE])
                else:
                    newest_kept = stored
            if len(result.listed) < limit:
                record = fmt.decode_record(array, int(row[COL_POS]), base, size)
                result.listed.append(describe(record, bool(row[COL_CRC_OK]), legacy))
        if code == END_CAPACITY:
            pos = end
            continue
        if code == OK_BLANK:
            return newest_kept
        search = _search_from(extents, end + 1)
        nxt = -1 if search is None else _next_self_described(array, search, base, accept_v2, buf, extents)
        stop = size if nxt < 0 else nxt
        garbage = sum(_count_nonzero(array, max(lo, end), min(hi, stop), buf) for lo, hi in extents if hi > end and lo < stop)
        if garbage:
            result.other_bytes += garbage
            if result.first_other is None:
                result.first_other = base + end
        if nxt < 0:
            return newest_kept
        pos = nxt
    return newest_kept


def _count_nonzero(array: np.ndarray, start: int, stop: int, buf) -> int:
    total = 0
    for p in range(start, stop, WINDOW):
        total += int(np.count_nonzero(array[p : min(p + WINDOW, stop)]))
        release_pages(buf, p, min(p + WINDOW, stop))
    return total
