"""The index check as a join of record columns against index entries read as arrays.

``ColumnarIndexCheck`` is ``IndexCheck`` (the record engine, the reference) with ``on_columns``:
for one walk batch it takes the index entries up to the batch's last record and, in numpy,
checks that they point at the batch's records in order, that each record's entries hash to
exactly its keys (``topic#UNIQ_KEY``, ``topic#key``: §6.4-§6.5) and carry its time difference
(§6.6). A batch whose records have no entries at all only lengthens the run of missing keys
(no finding yet). Anything else (a stray or mismatched entry, a closing run of missing keys, a
duplicate, a time to excuse) returns False before any state changed and the record engine
takes the batch, so findings and their order stay the record engine's.

``IndexEntryCursor`` reads the files as ``IndexEntries`` does (same chunks, same chain replay)
and runs ``IndexCheck.structure`` for a file when the head moves past its last entry, as the
record engine's generator does.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ._indexjoin import entries_match
from .columns import RecordColumns
from .index import IndexCheck, IndexEntries

MAX_LOOKAHEAD = 1 << 18  # entries peeked for one batch (about 8 MB) before the record engine takes it


class _Chunk:
    """Entries ``number .. number + len - 1`` of one file, or the end of a file (``end``: no
    entries; passing it runs the file's structural checks)."""

    __slots__ = ("meta", "number", "hash", "phy", "diff", "prev", "end")

    def __init__(self, meta: IndexEntries, number: int, entries: np.ndarray | None, hashes_prevs=None):
        self.meta, self.number = meta, number
        self.end = entries is None
        if entries is None:
            self.hash = self.phy = self.diff = self.prev = np.empty(0, dtype=np.int64)
        else:
            self.hash, self.prev = hashes_prevs  # converted once, for the chain replay
            self.phy = entries["phy"].astype(np.int64)
            self.diff = entries["time_diff"].astype(np.int64)

    def __len__(self) -> int:
        return self.phy.shape[0]

    def entry(self, i: int) -> tuple:
        return (self.meta, self.number + i, int(self.hash[i]), int(self.phy[i]), int(self.diff[i]), int(self.prev[i]))


class IndexEntryCursor:
    def __init__(self, check: "ColumnarIndexCheck"):
        self.check = check
        self._gen = self._chunks()
        self._loaded: deque[_Chunk] = deque()
        self._done = False
        self._i = 0
        self.passed = 0
        self.head: tuple | None = None
        self._settle()

    def _chunks(self):
        for meta in self.check._files_meta:
            for number, entries, hashes_prevs in meta.chunks():
                yield _Chunk(meta, number, entries, hashes_prevs)
            yield _Chunk(meta, 0, None)

    def _load(self) -> bool:
        if self._done:
            return False
        chunk = next(self._gen, None)
        if chunk is None:
            self._done = True
            return False
        self._loaded.append(chunk)
        return True

    def _settle(self) -> None:
        """Pass the ends of the files the head has left (their structural checks), set ``head``."""
        while True:
            if not self._loaded and not self._load():
                self.head = None
                return
            chunk = self._loaded[0]
            if self._i < len(chunk):
                self.head = chunk.entry(self._i)
                return
            self._loaded.popleft()
            self._i = 0
            if chunk.end:
                self.check.structure(chunk.meta, *chunk.meta.state)

    def skip(self, n: int) -> None:
        while n > 0 and self.head is not None:
            chunk = self._loaded[0]
            step = min(n, len(chunk) - self._i)
            self._i += step
            self.passed += step
            n -= step
            self._settle()

    def skip_below(self, limit: int) -> None:
        """Move the head past the leading entries that point below ``limit``."""
        while self.head is not None and self.head[3] < limit:
            chunk = self._loaded[0]
            at_or_above = np.flatnonzero(chunk.phy[self._i :] >= limit)
            self.skip(int(at_or_above[0]) if len(at_or_above) else len(chunk) - self._i)

    def peek_until(self, limit: int) -> tuple[list[tuple[_Chunk, int, int]], bool]:
        """The entries from the head up to the first one pointing past ``limit`` (not included),
        as (chunk, lo, hi) slices; False when more than ``MAX_LOOKAHEAD`` are that far."""
        slices, seen, c = [], 0, 0
        while True:
            if c >= len(self._loaded) and not self._load():
                return slices, True
            chunk = self._loaded[c]
            lo = self._i if c == 0 else 0
            phy = chunk.phy[lo:]
            beyond = np.flatnonzero(phy > limit)
            hi = lo + int(beyond[0]) if len(beyond) else len(chunk)
            if hi > lo:
                slices.append((chunk, lo, hi))
                seen += hi - lo
            if len(beyond):
                return slices, True
            if seen > MAX_LOOKAHEAD:
                return slices, False
            c += 1


class ColumnarIndexCheck(IndexCheck):
    """``IndexCheck`` with a batch join (``on_columns``); the record path stays for the batches
    the join declines."""

    joined = declined = 0  # batches the join took / handed to the record engine

    def _start_entries(self) -> None:
        self._cursor = IndexEntryCursor(self)
        self.head = self._cursor.head

    def _advance(self) -> None:
        self._cursor.skip(1)
        self.head = self._cursor.head

    @property
    def entries(self) -> int:
        return self._cursor.passed + (self.head is not None) if hasattr(self, "_cursor") else 0

    @entries.setter
    def entries(self, value: int) -> None:
        pass  # counted by the cursor

    def on_columns(self, columns: RecordColumns) -> bool:
        """Check one batch; False (nothing done) when the record engine must take it."""
        offsets = columns.offsets
        # entries below the checked range lead (expired, or before --from-offset): the record
        # engine passes them over without a finding, so they are skipped in bulk
        self._cursor.skip_below(self.lower)
        self.head = self._cursor.head
        slices, complete = self._cursor.peek_until(int(offsets[-1]))
        if not complete:
            return False
        counts = columns.key_counts
        if not slices:
            if not self.enabled:
                return True
            with_keys = np.flatnonzero(counts)
            if len(with_keys):
                first, last = int(offsets[with_keys[0]]), int(offsets[with_keys[-1]])
                records, keys = len(with_keys), int(counts.sum())
                if self.missing is None:
                    self.missing = [first, last, records, keys]
                else:
                    self.missing[1], self.missing[2], self.missing[3] = last, self.missing[2] + records, self.missing[3] + keys
            return True
        if not self.enabled or self.missing is not None:
            return False
        phy = np.concatenate([c.phy[lo:hi] for c, lo, hi in slices]) if len(slices) > 1 else slices[0][0].phy[slices[0][1] : slices[0][2]]
        hashes = np.concatenate([c.hash[lo:hi] for c, lo, hi in slices]) if len(slices) > 1 else slices[0][0].hash[slices[0][1] : slices[0][2]]
        diffs = np.concatenate([c.diff[lo:hi] for c, lo, hi in slices]) if len(slices) > 1 else slices[0][0].diff[slices[0][1] : slices[0][2]]
        begins = np.asarray([c.meta.header.begin_timestamp for c, _, _ in slices], dtype=np.int64)
        ends = np.cumsum([hi - lo for _, lo, hi in slices])
        match, skipped = entries_match(phy, hashes, diffs, begins, ends, offsets, counts, columns.keys, columns.store_ts, self.lower, np.zeros(len(offsets), dtype=np.int64))
        if match < 0:
            return False
        if match == 1:  # the keys not in put order: compare each record's keys as a multiset
            at = np.searchsorted(offsets, phy[skipped:])
            owners = np.repeat(np.arange(len(offsets)), counts)
            if not np.array_equal(np.sort(at * (1 << 32) + hashes[skipped:]), np.sort(owners * (1 << 32) + columns.keys)):
                return False
        self._cursor.skip(sum(hi - lo for _, lo, hi in slices))
        self.head = self._cursor.head
        return True
