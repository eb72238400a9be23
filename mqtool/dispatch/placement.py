"""The broker's placement rules, compiled (``_placement.pyx``; reference §5.10, §6.5-§6.6)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..formats import index as ixfmt
from ..formats.dispatch import DispatchRequest
from ..formats.hashing import index_key_hash
from ..store.index import index_file_name, next_index_name
from ._placement import (  # noqa: F401 - the state layouts and kernels, re-exported
    H_INDEX_COUNT, H_PUT, ROLL_NEEDED, S_FILL_FROM, S_FILL_TO, S_MAX_PHYS, S_WRITE, index_records, place_units,
)


ENTRY_BUFFER = 1 << 16  # index entries placed between two hand-overs to ``IndexPlacement._append`` (one pwrite, one comparison)


@dataclass
class QueueState:
    """Where a queue continues: next write position (None: no file yet) and max phys offset."""

    write_pos: int | None = None
    max_phys_offset: int = -1

    def as_array(self) -> np.ndarray:
        return np.array([-1 if self.write_pos is None else self.write_pos, self.max_phys_offset, -1, -1], dtype=np.int64)


class IndexPlacement:
    """``IndexService.buildIndex``/``IndexFile.putKey`` (§6.5-§6.8, rules §4.2) writing nothing; ``results``: each file's header
    before and after; ``previous``, ``append_to``, ``after_name``, ``taken_names``, ``names``: the files it continues or names."""

    dry = True  # ``index_records`` only counts: no slot table (``hash_slot_count`` stays as seeded), no entries

    def __init__(self, hash_slot_num: int, index_num: int, previous: ixfmt.IndexHeader | None = None,
                 taken_names: set[str] | None = None, *, append_to: tuple | None = None, after_name: str | None = None,
                 counts_used_slots: bool = True, names: tuple[str, ...] = ()):
        self.results: list[IndexFileResult] = []
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.previous = previous
        self.taken = set(taken_names or ())
        self.after_name = after_name
        self.names = list(names)
        self.counts_used_slots = counts_used_slots
        self.hdr: np.ndarray | None = None
        self._slots: np.ndarray | None = None  # the current file's slot table (native int32)
        self._ent_words = self._entry_buffer()
        self._ent = self._ent_words.view(np.uint8)
        self.current_name: str | None = None  # the file keys go to
        self.full_end_timestamp = 0  # what the broker stores as checkpoint indexMsgTimestamp
        if append_to is not None:
            self._open(*append_to, None)

    def _entry_buffer(self) -> np.ndarray:
        return np.empty(0, dtype=np.uint32)

    def _open(self, name: str, source, seed: ixfmt.IndexHeader | None) -> None:
        """Start file ``name``: continue the existing file whose header is ``source``, or a new one with header ``seed``."""
        self._begin(name, seed if seed is not None else source, np.zeros(1, dtype=np.int32), seed is not None)

    def _begin(self, name: str, header, slots: np.ndarray, created: bool) -> None:
        self.current_name, self._created, self._slots = name, created, slots
        self.hdr = np.array([*header, 0, 0], dtype=np.int64)
        self._start = self._header()
        if self.hdr[H_INDEX_COUNT] <= 0:
            self.hdr[H_INDEX_COUNT] = 1

    def _roll(self, store_timestamp: int) -> None:
        """``getAndCreateLastIndexFile``: a new file seeded with the last one's end values."""
        prev = self._header() if self.hdr is not None else self.previous
        if prev is not None and prev.index_count >= self.index_num:
            self.full_end_timestamp = prev.end_timestamp  # IndexService.flush of the full file
        last = self.current_name or self.after_name
        self._finish_current()
        if self.names:
            name = self.names.pop(0)
        else:
            name = next_index_name(index_file_name(store_timestamp), last)
            while name in self.taken:
                name = next_index_name(name, name)
        self.taken.add(name)
        phy = prev.end_phy_offset if prev is not None and prev.end_phy_offset > 0 else 0
        ts = prev.end_timestamp if prev is not None and prev.end_timestamp > 0 else 0
        self._open(name, None, ixfmt.IndexHeader(ts, ts, phy, phy, 0, 1))

    def _header(self) -> ixfmt.IndexHeader:
        return ixfmt.IndexHeader(*(int(v) for v in self.hdr[:6]))

    def put_batch(self, phys, store_ts, indexable, key_start, key_count, keys) -> None:
        """Dispatch a run of records in log order, keys ``keys[key_start[i]:+key_count[i]]``, columns made contiguous."""
        phys, store_ts, key_start, key_count = (np.ascontiguousarray(a, dtype=np.int64) for a in (phys, store_ts, key_start, key_count))
        indexable, keys = np.ascontiguousarray(indexable, dtype=np.bool_).view(np.uint8), np.ascontiguousarray(keys, dtype=np.int64)
        rec, key = 0, 0
        n = len(phys)
        while rec < n:
            if self.hdr is None:
                self._roll(int(store_ts[rec]))
            first = int(self.hdr[H_INDEX_COUNT])
            rec, key, status, added = index_records(self._slots, self.index_num, self.hdr, phys, store_ts, indexable, key_start, key_count,
                                                    keys, rec, key, self.counts_used_slots, self._ent_words, self.dry)
            if added:
                self._append(first, added)
            if status == ROLL_NEEDED:
                self._roll(int(store_ts[rec]))

    def _append(self, first: int, added: int) -> None:
        """The entries ``index_records`` left in the entry buffer from entry number ``first``; nothing where none is written."""

    def put_request(self, request: DispatchRequest) -> None:
        keys = [index_key_hash(k) for k in request.index_keys()]
        self.put_batch([request.commit_log_offset], [request.store_timestamp], [request.to_index], [0], [len(keys)], keys)  # put_batch makes them arrays

    def _finish_current(self) -> None:
        if self.hdr is None:
            return
        self.results.append(IndexFileResult(self.current_name, self._created, self._start, self._header()))
        self._write_current()
        self.hdr = self.current_name = self._slots = None

    def _write_current(self) -> None:
        """Write the current file out (nothing here: ``IndexWriterService`` writes)."""

    def close(self) -> list:
        """Finish the current file; the files written (none here)."""
        self._finish_current()
        return []


@dataclass(frozen=True)
class IndexFileResult:
    """One index file an ``IndexPlacement`` placed keys in (``IndexWriterService``: wrote): header before and after."""

    name: str
    created: bool
    start: ixfmt.IndexHeader
    end: ixfmt.IndexHeader

    @property
    def entries_added(self) -> int:
        return max(self.end.index_count, 1) - max(self.start.index_count, 1)
