"""One scan task without Spark: ``plan_tasks``, ``read_messages``, ``write_messages`` and ``read_stats``."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..allocator import keep_freed_memory
from ..formats.dispatch import parse_delay_levels
from ..store.records import BodyEncoding
from ..store.mappedfile import exit_on_sigbus
from ..store.splits import Split, SplitResult, SplitScan, plan_splits
from ..scan import compute
from ..scan.batches import MessageBatchBuilder, projected_schema, with_edges
from ..scan.filter import MessageFilter
from ..scan.schema import MESSAGE_FILE_SCHEMA, STATS_SCHEMA, TIMESTAMP, WRITTEN_SCHEMA
from ..scan.stats import HOUR_MS, STATS_INPUT, aggregate, merge
from .inputs import BrokerInput

@dataclass(frozen=True)
class ScanTask:
    """One split of one broker's segment, with what its records need to decode."""

    broker: str
    split: Split
    legacy_properties: bool
    delay_levels: str

    def builder(self, **options) -> MessageBatchBuilder:
        """The batch builder for this task's records (``options``: ``body``, ``columns``)."""
        return MessageBatchBuilder(self.broker, legacy_properties=self.legacy_properties, delay_table=parse_delay_levels(self.delay_levels), **options)

    def scan(self, **options) -> SplitScan:
        """The compiled walk of this split; a failed read through the map is mqtool's SIGBUS line (``allocator.py``)."""
        exit_on_sigbus()
        keep_freed_memory()
        return SplitScan(self.split, **options)

    def result(self, first: int | None, exit: int | None) -> SplitResult:
        """For ``check_handoffs``: ``first`` and ``exit`` as ``SplitScan`` reports them."""
        return SplitResult((self.broker, self.split.base_offset), self.split.chain_start, self.split.offset, first, exit)

    def result_of_rows(self, first_offset: int, end_offset: int) -> SplitResult:
        """``result`` from the split's first and last rows (``split_edge``), a DLedger record from its entry."""
        return self.result(self.split.handoff_start(first_offset), end_offset)


def plan_tasks(inputs: Sequence[BrokerInput], split_size: int | None = None, keep_going: bool = False) -> list[ScanTask]:
    """Every broker's splits in offset order (the partitions); ``keep_going``: read past damage (``Split.resume``)."""
    return [ScanTask(b.broker, split, b.legacy_properties, b.delay_levels)
            for b in inputs for split in plan_splits(b.segments, split_size, b.resume_before, b.start, b.stop, keep_going, b.served)]


def read_messages(task: ScanTask, body: BodyEncoding = BodyEncoding.none, *, columns=None,
                  match: MessageFilter = MessageFilter()) -> Iterator[pa.RecordBatch]:
    """One split's ``messages`` batches, edges marked (``split_edge``, ``split_skipped``), dropped rows ``filtered_out``."""
    schema = projected_schema(columns)
    needed = None if columns is None or match == MessageFilter() else list(dict.fromkeys([*columns, *match.columns()]))
    builder = task.builder(body=body, columns=needed or columns)
    i = schema.get_field_index("filtered_out")

    def done(batch: pa.RecordBatch, first: bool, last: bool, skipped: Sequence[int] = ()) -> pa.RecordBatch:
        batch = with_edges(batch, first, last, skipped)
        mask = match.mask(batch)
        if needed:
            batch = batch.select(schema.names)
        if mask is not None:
            batch = batch.set_column(i, schema.field(i), compute.invert(mask)) if i >= 0 else batch.filter(mask)
        return batch

    pending, first = None, True
    scan = task.scan(check_crc=True)
    for batch in scan:
        built = builder.build(batch, task.split.offset)
        if pending is not None:
            yield done(pending, first, False)
            first = False
        pending = built
    if pending is not None:
        yield done(pending, first, True, skipped_offsets(scan))


def skipped_offsets(scan: SplitScan) -> list[int]:
    """``SplitScan.skipped`` as the ``skipped`` column holds it: where each range begins, where it resumes."""
    return [offset for end, resumed in scan.skipped for offset in (end.offset, resumed)]


# Parquet row groups of about 32 MiB of Arrow data, decoded 8192 records at a time: a writing
# task's memory stays well under 500 MB whatever the segment size (bench/bench_spark.py)
ROW_GROUP_BYTES = 32 << 20
WRITE_BATCH = 1 << 13


def write_messages(task: ScanTask, directory: str, body: BodyEncoding = BodyEncoding.none, match: MessageFilter = MessageFilter(), compression: str = "snappy") -> Iterator[pa.RecordBatch]:
    """Write the split's kept messages as one new Parquet file in ``directory``, yielding its ``WRITTEN_SCHEMA`` row."""
    builder = task.builder(body=body, columns=MESSAGE_FILE_SCHEMA.names)
    path = os.path.join(directory, f"{uuid.uuid4().hex}.parquet")
    scan = task.scan(check_crc=True, batch=WRITE_BATCH)
    rows_read = rows_written = pending_bytes = 0
    pending: list[pa.Table] = []
    writer = None
    try:
        for batch in scan:
            t = match.apply(pa.Table.from_batches([builder.build(batch, task.split.offset)]))
            rows_read += batch.rows.shape[0]
            rows_written += t.num_rows
            if t.num_rows:
                pending.append(t)
                pending_bytes += t.nbytes
            if pending_bytes >= ROW_GROUP_BYTES:
                writer = _write_row_group(writer, path, pending, compression)
                pending, pending_bytes = [], 0
        if pending:
            writer = _write_row_group(writer, path, pending, compression)
    finally:
        if writer is not None:
            writer.close()
    if scan.first is None:
        return
    row = (task.broker, task.split.offset, scan.first, scan.exit, skipped_offsets(scan), rows_read, rows_written,
           path if writer is not None else None)
    yield pa.RecordBatch.from_pydict({name: [value] for name, value in zip(WRITTEN_SCHEMA.names, row, strict=True)}, schema=WRITTEN_SCHEMA)


def _write_row_group(writer: pq.ParquetWriter | None, path: str, tables: list[pa.Table], compression: str) -> pq.ParquetWriter:
    """``tables`` as one row group of the file at ``path`` (opened by the first call)."""
    writer = writer or pq.ParquetWriter(path, MESSAGE_FILE_SCHEMA, compression=compression)
    group = pa.concat_tables(tables)
    writer.write_table(group, row_group_size=group.num_rows)
    return writer


def read_stats(task: ScanTask, match: MessageFilter = MessageFilter()) -> Iterator[pa.RecordBatch]:
    """The ``stats`` rows of one split, with its first record and last end for the handoff check."""
    builder = task.builder(columns=list(dict.fromkeys([*STATS_INPUT, *match.columns()])))
    scan = task.scan(check_crc=True)
    partials = []
    for batch in scan:
        t = match.apply(pa.Table.from_batches([builder.build(batch, task.split.offset)]))
        if t.num_rows:
            partials.append(aggregate(t, HOUR_MS))
    if scan.first is None:
        return
    grouped = merge(partials) if partials else None
    n = grouped.num_rows if grouped is not None else 1
    columns = {
        "broker": pa.array([task.broker] * n, pa.string()),
        **{k: pa.array(np.full(n, v, dtype=np.int64))
           for k, v in (("split_start", task.split.offset), ("first_offset", scan.first), ("exit_offset", scan.exit))},
        "skipped": pa.array([skipped_offsets(scan)] * n, STATS_SCHEMA.field("skipped").type),
    }
    if grouped is None:
        row = {"topic": None, "queue_id": None, "hour": None, **{name: 0 for name in ("messages", "dispatched", "bytes", "body_bytes", "crc_failures")}}
        rest = {k: pa.array([row.get(k)], STATS_SCHEMA.field(k).type) for k in STATS_SCHEMA.names if k not in columns}
    else:
        grouped = grouped.append_column("hour", pa.array(grouped["period"].to_numpy() * 1000, TIMESTAMP))
        rest = {k: compute.cast(grouped[k].combine_chunks(), STATS_SCHEMA.field(k).type) for k in STATS_SCHEMA.names if k not in columns}
    yield pa.RecordBatch.from_arrays([{**columns, **rest}[k] for k in STATS_SCHEMA.names], schema=STATS_SCHEMA)
