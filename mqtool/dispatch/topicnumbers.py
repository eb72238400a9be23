"""Topic ids of dispatched records over a whole walk (reference §3.2, §6.4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import fastdispatch as fd
from ._topicnumbers import number_topics

if TYPE_CHECKING:
    from .scanner import TopicTable

TABLE_SLOTS = 64  # initial hash table slots (doubled to stay at most a quarter full)


class TopicNumbers:
    """The raw topics seen so far by one walk, for ``number_topics``; ids from ``topics``."""

    def __init__(self, topics: TopicTable):
        self.topics = topics
        self.table = np.full(TABLE_SLOTS, -1, dtype=np.int64)
        self.fps, self.starts, self.lens, self.ids = (np.empty(8, dtype=np.int64) for _ in range(4))  # per raw topic, grown by ``_learn``
        self.pool = np.zeros(256, dtype=np.uint8)
        self.count = self.pool_fill = 0
        self._publish()

    def _tables(self) -> tuple:
        return self.table, self.fps, self.starts, self.lens, self.ids, self.pool

    def _publish(self) -> None:
        """``known``: copies, so that ``dispatch_rows`` (in any thread) never reads what ``_learn`` writes."""
        self.known = tuple(a.copy() for a in self._tables())

    def number(self, buf: np.ndarray, out: np.ndarray, lo: int, hi: int, topic_ids: np.ndarray) -> None:
        """``topic_ids[lo:hi]`` of the rows ``out[lo:hi]`` that ``dispatch_rows`` left at -1, in walk order."""
        r, learned = lo, self.count
        while True:
            r = number_topics(buf, out, r, hi, *self._tables(), topic_ids)
            if r >= hi:
                break
            self._learn(buf, int(out[r, fd.F_TOPIC_POS]), int(out[r, fd.F_TOPIC_LEN]), int(out[r, fd.F_TOPIC_FP]))
        if self.count != learned:
            self._publish()

    def _learn(self, buf: np.ndarray, p: int, n: int, fp: int) -> None:
        """A new raw topic: its id from the ``TopicTable``, its bytes into the pool and the table."""
        k = self.count
        if k == self.fps.shape[0]:
            self.fps, self.starts, self.lens, self.ids = (np.concatenate((a, np.empty(k, dtype=np.int64))) for a in (self.fps, self.starts, self.lens, self.ids))
        if self.pool_fill + n + 8 > self.pool.shape[0]:  # 8 bytes to spare after the last topic (``number_topics`` compares a short topic as one word)
            self.pool = np.concatenate((self.pool, np.zeros(max(n + 8, self.pool.shape[0]), dtype=np.uint8)))
        self.pool[self.pool_fill : self.pool_fill + n] = buf[p : p + n]
        self.fps[k], self.starts[k], self.lens[k] = fp, self.pool_fill, n
        self.ids[k] = self.topics.id_of(buf[p : p + n].tobytes())
        self.pool_fill += n
        self.count = k + 1
        if 4 * self.count > self.table.shape[0]:
            self.table = np.full(2 * self.table.shape[0], -1, dtype=np.int64)
            for j in range(self.count):
                self._insert(j)
        else:
            self._insert(k)

    def _insert(self, k: int) -> None:
        mask = self.table.shape[0] - 1
        fp = int(self.fps[k])
        slot = (fp ^ (fp >> 31)) & mask
        while self.table[slot] >= 0:
            slot = (slot + 1) & mask
        self.table[slot] = k
