"""``read_batches``: the recovery scan's records as Arrow batches (reference §2), the one entry of the columnar scan."""

from __future__ import annotations

from collections import deque
from typing import Callable, Iterator

import pyarrow as pa

from ..store.records import BodyEncoding
from ..store import Store
from ..store.fastscan import COL_POS, COL_SIZE, FastScan, SegmentBatch, release_pages
from . import compute
from .batches import MessageBatchBuilder
from .filter import MessageFilter


class MessageScan:
    """Iterate to get the batches; ``end`` (a ``ScanEnd``) is set once the walk is over."""

    def __init__(self, store: Store, *, start: int | None = None, stop: int | None = None, body: BodyEncoding = BodyEncoding.none, decompress: bool = False, columns=None, match: MessageFilter = MessageFilter(), check_crc: bool = True, stop_on_crc: bool = True, batch: int = 1 << 15, workers: int = 1, then: Callable[[pa.RecordBatch], object] | None = None, walk=None):
        self.store = store
        self.match = match
        decided_by = match.columns()
        wanted = None if columns is None else list(dict.fromkeys([*columns, *decided_by]))
        name = store.root.name if store.root is not None else ""  # the ``broker`` column
        self.builder = MessageBatchBuilder(name, legacy_properties=store.legacy_properties, delay_table=store.delay_table, body=body, decompress=decompress, columns=wanted)
        self.deciding = None  # builds the filter's columns alone, when the batches hold more
        if decided_by and (wanted is None or set(wanted) - set(decided_by)):
            self.deciding = MessageBatchBuilder(name, legacy_properties=store.legacy_properties, delay_table=store.delay_table, columns=decided_by)
        # ``walk``: the walk's batches given (with its ``end``), e.g. verify's walk of the log the broker serves
        self.walk = walk if walk is not None else FastScan(store.commitlog, start, stop, check_crc=check_crc, stop_on_crc=stop_on_crc, batch=batch, release_behind=True)
        self.columns = columns
        self.workers = workers
        self.then = then  # also run on each batch, in its builder thread: the items are then (batch, then(batch))

    @property
    def end(self):
        return self.walk.end

    def __iter__(self) -> Iterator:
        for item in map(self.build, self.walk) if self.workers <= 1 else self._built_in_threads():
            if item is not None:
                yield item

    def _built_in_threads(self) -> Iterator:
        from concurrent.futures import ThreadPoolExecutor

        pending: deque = deque()
        with ThreadPoolExecutor(self.workers, thread_name_prefix="mqtool-build") as pool:
            try:
                for segment_batch in self.walk:
                    detached = SegmentBatch(segment_batch.base_offset, segment_batch.array, segment_batch.rows.copy())  # the walk reuses its rows
                    pending.append(pool.submit(self._released_batch, detached))
                    while len(pending) >= self.workers or (pending and pending[0].done()):
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                for future in pending:  # closed early (a --limit reached, a closed pipe)
                    future.cancel()

    def build(self, segment_batch: SegmentBatch):
        """One walk batch filtered and projected (with ``then``'s result), None if empty; also another walk's batch."""
        if self.deciding is not None:
            mask = self.match.mask(self.deciding.build(segment_batch, segment_batch.base_offset))
            keep = compute.fill_null(mask, False).to_numpy(zero_copy_only=False)  # a null condition drops the row, as ``filter``
            if not keep.any():
                return None
            if not keep.all():
                segment_batch = SegmentBatch(segment_batch.base_offset, segment_batch.array, segment_batch.rows[keep])
        batch = self.builder.build(segment_batch, segment_batch.base_offset)
        mask = None if self.deciding is not None else self.match.mask(batch)  # with ``deciding``: filtered above
        if mask is not None:
            batch = compute.filter(batch, mask)
        if self.columns is not None:
            batch = batch.select(list(self.columns))
        if not batch.num_rows:
            return None
        return batch if self.then is None else (batch, self.then(batch))

    def _released_batch(self, segment_batch: SegmentBatch):
        """``build``, then the pages of its records dropped again (the builder faulted back what the walk released)."""
        try:
            return self.build(segment_batch)
        finally:
            rows, view = segment_batch.rows, segment_batch.array.base
            mapped = getattr(view, "obj", None)
            if len(rows) and mapped is not None:
                release_pages(mapped, int(rows[0, COL_POS]), int(rows[-1, COL_POS] + rows[-1, COL_SIZE]))


def read_batches(store: Store, **options) -> Iterator[pa.RecordBatch]:
    """The store's messages as record batches (options as ``MessageScan``)."""
    yield from MessageScan(store, **options)
