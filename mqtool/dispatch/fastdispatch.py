"""The compiled half of dispatch (``_fastdispatch.pyx``, §2.8, §3.4, §6.4); ``FLAG_FALLBACK`` rows in Python."""

from __future__ import annotations

import numpy as np

from ..formats.dispatch import SCHEDULE_TOPIC
from ._fastdispatch import (  # noqa: F401 (the row layout, re-exported for the dispatch's readers)
    F_FLAGS, F_KEY_COUNT, F_KEY_START, F_PHYS, F_POS, F_QUEUE_ID, F_QUEUE_OFFSET, F_SIZE, F_STORE_TS, F_SYS_FLAG, F_TAGS, F_TOPIC_FP,
    F_TOPIC_LEN, F_TOPIC_POS, FLAG_FALLBACK, FLAG_MULTI_DISPATCH, FLAG_NO_PROPERTIES, N_FIELDS, dispatch_rows, finish_keys,
)

SCHEDULE_TOPIC_BYTES = np.frombuffer(SCHEDULE_TOPIC.encode(), dtype=np.uint8)


def dispatch_all(buf, rows, legacy, delay_ms, index_enable, out, out_base, keys, key_fill, numbers, topic_ids):
    """``dispatch_rows`` over all rows, the key buffer doubled as needed; returns ``(keys, key_fill)``."""
    done = 0
    while True:
        done, key_fill = dispatch_rows(buf, rows, done, legacy, SCHEDULE_TOPIC_BYTES, delay_ms, index_enable, out, out_base, keys, key_fill,
                                       numbers.known, topic_ids)
        if done == rows.shape[0]:
            return keys, key_fill
        keys = np.concatenate((keys[:key_fill], np.empty(max(2 * keys.shape[0], 64) - key_fill, dtype=np.int64)))


def delay_array(delay_table: dict[int, int]) -> np.ndarray:
    """``delay_ms[level]`` for levels 1..max; a gapped table's missing levels get 1000 ms (``computeDeliverTimestamp``)."""
    arr = np.full(max(delay_table, default=0) + 1, 1000, dtype=np.int64)
    arr[list(delay_table)] = list(delay_table.values())
    arr[0] = 0
    return arr
