"""The cq and index cross-checks fed walk batch by walk batch, whoever walks.

``CrossChecks`` builds the checks (``consumequeue``, ``index``), takes one
``fastscan.SegmentBatch`` of valid records at a time (``feed``: joined on its record columns,
``columns.py``) and finishes them at the stream's end (``finish``). The batches
come from ``LogStream`` (a walk of its own) or from the commit log check's walk
(``sharedwalk.py``); given the same batches, the findings are the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator, Iterator

from ..store import Store
from ..store import fastscan as fs
from ..dispatch.scanner import TopicTable
from ..dispatch.fastdispatch import delay_array
from ..dispatch.topicnumbers import TopicNumbers
from ..formats.dispatch import INDEX_NONE
from .columns import ColumnBuilder
from .consumequeue import ConsumeQueueCheck
from .findings import Finding
from .index import IndexCheck
from .logstream import records_of
from ..store.redispatch import redispatch_start


@dataclass
class CrossCheckOutcome:
    """What the cq and index checks tell the summary (their findings are yielded as they go)."""

    records: int = 0
    end: object = None  # the stream's ``ScanEnd``
    last_timestamp: int | None = None
    consume_queues: int | None = None
    consume_queue_entries: int | None = None
    index_files: int | None = None
    index_entries: int | None = None
    notes: list[str] = field(default_factory=list)


class CrossChecks:
    """The checks of ``cross`` (``"cq"``, ``"index"``) over records in ``[lower, upper)``;
    ``logical_end``: the commit log's (or a stand-in no lower than the stream's end); ``index_files``: those the index check
    reads (``VerifyOptions.index_files``)."""

    def __init__(self, store: Store, cross: list[str], lower: int, upper: int | None, logical_end: int, index_files: tuple | None = None):
        self.store = store
        self.cross = cross
        self.index_files = index_files
        self.bounds = lower, upper, logical_end
        self.checks: list = []  # made by ``begin`` (they read every queue file's ends: ``sharedwalk`` makes them beside the walk)
        self.last_timestamp: int | None = None
        self.names: dict[bytes, str] = {}
        self.topics, self.delay_ms = TopicTable(), delay_array(dict(store.delay_table))
        self.numbers = TopicNumbers(self.topics)  # raw topics to ids, for every batch of the walk
        # the store's rules read once, not a batch at a time (``Store.rules`` makes them anew on every read);
        # without the index check no dispatch hashes an index key (``INDEX_NONE``): only that check reads them
        self.legacy = store.legacy_properties
        self.index_rule = store.rules.index_rule if "index" in cross else INDEX_NONE
        self.dispatched = None  # what the walk feeding the checks dispatched, once it stands (``SharedWalk``; ``lmq.stall_throw``)
        self.settled = None  # the next start's stall, once settled (``Verification.settled_stall``; ``ConsumeQueueCheck.stall``)

    def column_builder(self, capacity: int) -> ColumnBuilder:
        """A ``columns.ColumnBuilder`` for the next batch."""
        return ColumnBuilder(self.numbers, self.delay_ms, self.legacy, capacity, self.index_rule)

    def begin(self) -> Iterator[Finding]:
        """The checks made (into ``checks``, the same list); their findings before any record
        (e.g. of the queue files alone). Before ``feed``."""
        store, cross, (lower, upper, logical_end) = self.store, self.cross, self.bounds
        if "cq" in cross:
            redispatch_from, why = redispatch_start(store)
            self.checks.append(ConsumeQueueCheck(store, lower=lower, upper=upper, logical_end=logical_end, redispatch_from=redispatch_from, redispatch_why=why,
                                                 dispatched=self.dispatched, settled=self.settled))
        if "index" in cross:
            cp = store.checkpoint
            self.checks.append(IndexCheck(store, lower=lower, upper=upper, logical_end=logical_end, abort_present=store.abort_present, index_msg_timestamp=cp.index_msg_timestamp if cp else None,
                                          files=self.index_files))
        for check in self.checks:
            yield from check.take()

    def feed(self, batch: fs.SegmentBatch, columns=None) -> Iterator[Finding]:
        """One batch of valid records; its findings. Each check joins the batch's record columns
        (``columns.py``; ``columns`` when already built) with its files; a batch a join declines
        (or whose columns the compiled dispatch could not decide) is reported record by record."""
        legacy = self.legacy
        if columns is None:
            builder = self.column_builder(batch.rows.shape[0])
            builder.add(batch.array, batch.rows)
            columns = builder.build(batch.base_offset)
        records = None
        for check in self.checks:
            if not columns.fallback and check.on_columns(columns):
                check.joined += 1
            else:
                if records is None:
                    records = records_of(batch, legacy, self.names)
                check.on_batch(records)
                check.declined += 1
            yield from check.take()
        self.last_timestamp = int(columns.store_ts[-1])

    def finish(self, end: int, outcome: CrossCheckOutcome) -> Generator[Finding, None, CrossCheckOutcome]:
        """The stream ended at ``end``: the checks' last findings; ``outcome`` filled."""
        outcome.last_timestamp = self.last_timestamp
        for check in self.checks:
            check.logical_end = end
            check.finish()
            yield from check.take()
            if isinstance(check, ConsumeQueueCheck):
                outcome.consume_queues, outcome.consume_queue_entries = len(check.cursors), check.entries
                if check.ext_addresses:
                    outcome.notes.append(f"{check.ext_addresses} consume queue tags codes are ConsumeQueueExt addresses (not compared)")
            else:
                outcome.index_files, outcome.index_entries = len(check.files), check.entries
        return outcome
