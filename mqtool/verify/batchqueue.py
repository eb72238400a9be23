"""``verify``'s check of the batch consume queues (``batchconsumequeue/<topic>/<queueId>/``,
reference §5.5; 5.0.0+ topics whose ``queue.type`` is ``BatchCQ``).

Every record of a BatchCQ topic dispatched to a consume queue (NOT_TYPE, COMMIT) owes its queue
one unit ``(offset, size, tags code, store time, msgBaseOffset, batchSize)``
(``formats.dispatch.batch_unit_span`` for the last two); each queue's valid units are matched with
them by commit log offset and reported with the consume queue's kinds (``details.queue_kind`` is
``"batch"``)."""

from __future__ import annotations

from itertools import groupby
from typing import Iterator

from ..formats.dispatch import batch_unit_span
from ..store import Store
from ..store.batchconsumequeue import UNIT_SIZE, BatchConsumeQueue, valid_mask
from ..store.consumequeue import queue_directories, queue_path_files, topic_listing
from .consumequeue import queue_path_file_findings, unread_directory_findings, wrong_length_files
from .findings import Finding, error, warning

FIELDS = ("size", "tags_code", "store_time", "msg_base_offset", "batch_size")
_COLUMNS = ["offset", "topic", "queue_id", "queue_offset", "size", "tags_code", "store_timestamp", "transaction_type", "properties"]


class BatchUnitsExpected:
    """``(topic, queue id) -> {offset: (size, tags code, store time, msgBaseOffset, batchSize)}`` for the records of
    ``topics`` (``expected``): a rider of the cq check's walk (``Verification._riders``), so read from the log the broker
    serves as that check reads it (on past damage its recovery never reads, the walk reads on); ``add`` takes the walk's
    batches in log order."""

    def __init__(self, store: Store, topics: set[str]):
        from ..scan.filter import MessageFilter
        from ..scan.messages import MessageScan

        self.expected: dict[tuple[str, int], dict[int, tuple]] = {}
        self._builder = MessageScan(store, columns=_COLUMNS, match=MessageFilter(topics=tuple(sorted(topics))), walk=())  # another walk's batches

    def add(self, segment_batch) -> None:
        """One batch of the walk (a ``fastscan.SegmentBatch``)."""
        import pyarrow as pa

        from ..scan import compute

        batch = self._builder.build(segment_batch)
        if batch is None:
            return
        dispatched = compute.is_in(batch["transaction_type"], pa.array(["NOT_TYPE", "COMMIT"], pa.string()))
        for row in compute.filter(batch, dispatched).to_pylist():
            try:
                span = batch_unit_span(dict(row["properties"] or ()), row["queue_offset"])
            except ValueError:
                span = (None, None)  # the broker's dispatch throws on this record: compared as unknown
            unit = (row["size"], row["tags_code"], row["store_timestamp"], *span)
            self.expected.setdefault((row["topic"], row["queue_id"]), {})[row["offset"]] = unit


def batch_queue_findings(store: Store, owed: BatchUnitsExpected, end: int, start: int | None = None, stop: int | None = None) -> Iterator[Finding]:
    """The findings, ``owed`` fed the walk of the records in ``[start, stop)`` that ended at ``end`` (the logical end);
    the generator's return value is a one-line summary (None without batch queues)."""
    queues = store.batch_consume_queues
    if not queues:
        return None
    folder, listing = store.path("batchconsumequeue"), topic_listing(store.path("batchconsumequeue"))
    yield from unread_directory_findings(store, queue_directories(folder, listing), "batch consume queue", {"queue_kind": "batch"})
    yield from queue_path_file_findings(store, queue_path_files(folder, listing), "batch consume queue", {"queue_kind": "batch"})
    expected = dict(owed.expected)
    units = 0
    for queue in queues:
        want = expected.pop((queue.topic, queue.queue_id), {})
        units += yield from _queue_findings(store, queue, want, end, start, stop)
    for (topic, queue_id), want in sorted(expected.items()):  # records of a BatchCQ topic in a queue with no directory
        yield from _missing(BatchConsumeQueue(topic, queue_id, store.path("batchconsumequeue", topic, str(queue_id))), want, set())
    return f"{len(queues)} batch consume queue(s) checked against the records, {units} units"


def _queue_findings(store: Store, queue: BatchConsumeQueue, want: dict[int, tuple], end: int, start: int | None, stop: int | None) -> Iterator[Finding]:
    rel = f"batchconsumequeue/{queue.topic}/{queue.queue_id}"
    yield from wrong_length_files(store, queue, "batch consume queue", {"queue_kind": "batch"})
    have = set()
    count = 0
    for unit in queue.entries():
        count += 1
        have.add(unit.phys_offset)
        if start is not None and unit.phys_offset < start or stop is not None and unit.phys_offset >= stop:
            continue
        details = {"topic": queue.topic, "queue_id": queue.queue_id, "queue_kind": "batch", "unit_position": unit.position, "queue_offset": unit.msg_base_offset}
        wanted = want.get(unit.phys_offset)
        found = (unit.size, unit.tags_code, unit.store_time, unit.msg_base_offset, unit.batch_size)
        if wanted is not None:
            for name, expected_value, found_value in zip(FIELDS, wanted, found):
                if expected_value is not None and expected_value != found_value:
                    yield error("cq-entry-mismatch", f"{queue.topic}/{queue.queue_id} batch unit at byte {unit.position} points to the record at {unit.phys_offset} "
                                f"but its {name} is {found_value}, the record's is {expected_value}",
                                file=rel, offset=unit.phys_offset, expected=expected_value, found=found_value, details={**details, "field": name})
        elif unit.phys_offset >= end:
            yield warning("cq-entry-beyond-end", f"{queue.topic}/{queue.queue_id} batch unit at byte {unit.position} points at {unit.phys_offset}, past the commit log's logical end {end} "
                          "(the broker's recovery deletes it: truncateDirtyLogicFiles)", file=rel, offset=unit.phys_offset, expected=f"< {end}", found=unit.phys_offset, details=details)
        else:
            yield error("cq-entry-dangling", f"{queue.topic}/{queue.queue_id} batch unit at byte {unit.position} points at {unit.phys_offset}, where no record of this queue starts",
                        file=rel, offset=unit.phys_offset, details=details)
    yield from _units_after_stop(queue, rel)
    yield from _missing(queue, want, have)
    return count


def _units_after_stop(queue: BatchConsumeQueue, rel: str) -> Iterator[Finding]:
    """Valid units after the first invalid one: the broker's recovery ends the queue there."""
    stop = queue.recover()
    valid = 0
    for base, path in queue.files:
        if base + queue.file_size > stop:
            valid += int(valid_mask(queue.units(path)[max(stop + UNIT_SIZE - base, 0) // UNIT_SIZE :]).sum())
    if valid:
        yield error("cq-invalid-unit", f"{queue.topic}/{queue.queue_id}: the batch unit at byte {stop} is invalid (offset < 0, size <= 0, msgBaseOffset < 0 or batchSize <= 0) "
                    f"and {valid} valid unit(s) follow: the broker's recovery ends the queue there, their messages cannot be consumed",
                    file=rel, details={"topic": queue.topic, "queue_id": queue.queue_id, "queue_kind": "batch", "unit_position": stop, "valid_after": valid})


def _missing(queue: BatchConsumeQueue, want: dict[int, tuple], have: set[int]) -> Iterator[Finding]:
    """Each run of the wanted records (by offset) that have no unit."""
    rel = f"batchconsumequeue/{queue.topic}/{queue.queue_id}"
    for lacking, run in groupby(sorted(want), key=lambda offset: offset not in have):
        if not lacking:
            continue
        run = list(run)
        first, last = want[run[0]][3], want[run[-1]][3]
        details = {"topic": queue.topic, "queue_id": queue.queue_id, "queue_kind": "batch", "count": len(run), "first_queue_offset": first,
                   "last_queue_offset": last, "last_offset": run[-1]}
        yield error("cq-entry-missing", f"{queue.topic}/{queue.queue_id}: {len(run)} record(s) from offset {run[0]} to {run[-1]} have no "
                    "batch consume queue unit (consumers of this queue never see them)", file=rel, offset=run[0], details=details)
