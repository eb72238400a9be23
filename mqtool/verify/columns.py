"""Per-record columns of one walk batch, for the columnar cross-checks (reference §3.2-§3.5, §6.5).

``ColumnBuilder`` runs the recovery's compiled dispatch (``dispatch/fastdispatch.py``, topics
numbered by ``topicnumbers``) over the rows ``fastscan.walk_segment`` found: per record the fixed
fields, the consume queue tags code (``checkMessageAndReturnSize``) and the index key hashes
(``IndexService.buildIndex``). ``FLAG_FALLBACK`` records make ``fallback`` true: the checks then
take the batch record by record."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dispatch import fastdispatch as fd
from ..dispatch.scanner import TopicTable
from ..store.textscan import POW31
from ..dispatch.topicnumbers import TopicNumbers
from ._columns import finish_columns


KEYS_PER_RECORD = 4  # index keys a batch has room for at first, per record (UNIQ_KEY and a few KEYS; more grows it)


@dataclass
class RecordColumns:
    offsets: np.ndarray  # commit log offset of each record
    sizes: np.ndarray
    topic_ids: np.ndarray  # into ``topics.names``
    queue_ids: np.ndarray
    queue_offsets: np.ndarray
    sys_flags: np.ndarray
    store_ts: np.ndarray
    tags: np.ndarray  # consume queue tags code
    key_counts: np.ndarray  # index keys per record (0 for ROLLBACK)
    flags: np.ndarray  # ``fastdispatch.FLAG_*`` of each record
    keys: np.ndarray  # index key hashes, record after record in put order
    topics: TopicTable
    fallback: bool  # some record needs the Python decoder


class ColumnBuilder:
    """``RecordColumns`` of one batch built as its rows come (``add``, in order, from one segment's
    array, while in cache), then ``build`` once the batch is whole. Topics are numbered in walk order
    through one table: known ones by the dispatch itself (so ``add`` may run in any thread,
    ``sharedwalk.py``), new ones by ``build``, called batch after batch in walk order. Results do
    not depend on how the rows were cut into ``add`` calls."""

    def __init__(self, numbers: TopicNumbers, delay_ms: np.ndarray, legacy: bool, capacity: int, index_rule: int):
        self.numbers, self.topics, self.delay_ms, self.legacy = numbers, numbers.topics, delay_ms, legacy
        self.index_rule = index_rule  # the version's buildIndex rule (rules file §4.2)
        self.out = np.empty((capacity, fd.N_FIELDS), dtype=np.int64)
        self.topic_ids = np.empty(capacity, dtype=np.int64)
        self.keys = np.empty(KEYS_PER_RECORD * capacity + 2, dtype=np.int64)
        self.n = self.key_fill = 0
        self.array: np.ndarray | None = None

    def add(self, array: np.ndarray, rows: np.ndarray) -> None:
        n = rows.shape[0]
        if not n:
            return
        self.keys, self.key_fill = fd.dispatch_all(array, rows, self.legacy, self.delay_ms, self.index_rule, self.out, self.n, self.keys, self.key_fill,
                                                   self.numbers, self.topic_ids)
        self.array = array
        self.n += n

    def build(self, base_offset: int) -> RecordColumns:
        n, out = self.n, self.out[: self.n]
        topic_ids = self.topic_ids[:n]
        if n:
            self.numbers.number(self.array, self.out, 0, n, self.topic_ids)  # the topics new to the dispatch
        offsets = np.empty(n, dtype=np.int64)
        fallback = finish_columns(out, n, base_offset, topic_ids, self.topics.state, POW31, self.keys, offsets)
        return RecordColumns(offsets=offsets, sizes=out[:, fd.F_SIZE], topic_ids=topic_ids, queue_ids=out[:, fd.F_QUEUE_ID],
                             queue_offsets=out[:, fd.F_QUEUE_OFFSET], sys_flags=out[:, fd.F_SYS_FLAG], store_ts=out[:, fd.F_STORE_TS], flags=out[:, fd.F_FLAGS],
                             tags=out[:, fd.F_TAGS], key_counts=out[:, fd.F_KEY_COUNT], keys=self.keys[: self.key_fill], topics=self.topics,
                             fallback=bool(fallback))
