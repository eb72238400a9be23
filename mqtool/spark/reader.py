"""What one scan task does, without Spark: plan the tasks, read one split into Arrow batches.

``plan_tasks`` turns resolved inputs into ``ScanTask`` s (one per split, picklable, absolute
paths); ``read_messages`` yields the ``messages`` record batches of one task, marking the first
and last row (``split_edge``) for the driver's handoff check. The Spark data source
(``mqtool.spark.source``), the benchmark's process pool and the tests all call these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import pyarrow as pa

from ..formats.dispatch import parse_delay_levels
from ..records import BodyEncoding
from ..store.splits import Split, SplitResult, SplitScan, plan_splits
from .batches import MessageBatchBuilder, with_edges
from .inputs import BrokerInput

@dataclass(frozen=True)
class ScanTask:
    """One split of one broker's segment, with what its records need to decode."""

    broker: str
    split: Split
    legacy_properties: bool
    delay_levels: str

    def result(self, first: int | None, exit: int | None) -> SplitResult:
        return SplitResult((self.broker, self.split.base_offset), self.split.base_offset, self.split.offset, first, exit)


def plan_tasks(inputs: Sequence[BrokerInput], split_size: int | None = None) -> list[ScanTask]:
    """Every broker's splits in offset order (the data source's partitions, in this order)."""
    return [
        ScanTask(b.broker, split, b.legacy_properties, b.delay_levels)
        for b in inputs
        for split in plan_splits(b.segments, split_size)
    ]


def read_messages(task: ScanTask, body: BodyEncoding = BodyEncoding.none, *, columns=None, check_crc: bool = True) -> Iterator[pa.RecordBatch]:
    """The ``messages`` batches of one split (only ``columns`` when given); the first and last
    row carry ``split_edge``."""
    builder = MessageBatchBuilder(
        task.broker, legacy_properties=task.legacy_properties, delay_table=parse_delay_levels(task.delay_levels), body=body, columns=columns
    )
    pending, first = None, True
    for batch in SplitScan(task.split, check_crc=check_crc):
        built = builder.build(batch, task.split.offset)
        if pending is not None:
            yield with_edges(pending, first, False)
            first = False
        pending = built
    if pending is not None:
        yield with_edges(pending, first, True)


