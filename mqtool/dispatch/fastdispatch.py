"""The compiled half of dispatch (its kernels in ``_fastdispatch.pyx``): what
``CommitLog.checkMessageAndReturnSize`` derives from a record for the consume queue and index
dispatchers, for a whole batch of records in one call.

``dispatch_rows`` takes the rows ``mqtool.store.fastscan.walk_segment`` found in a segment and,
per record, gathers the fixed fields the dispatchers use (QUEUEID, QUEUEOFFSET, PHYSICALOFFSET,
SYSFLAG, STORETIMESTAMP, TOTALSIZE), parses the properties string the way the broker's reader
does (4.9.1+ index walk, or the split-based reader before 4.9.1, reference §2.8) to find TAGS,
KEYS, UNIQ_KEY and DELAY, and computes:

- the tags code: Java ``String.hashCode`` of TAGS over UTF-16 code units (§3.4), or for
  ``SCHEDULE_TOPIC_XXXX`` the delivery time from the delay-level table (§3.5);
- the index key hashes of ``topic#UNIQ_KEY`` and ``topic#key`` for each KEYS token (§6.4-§6.5),
  in two steps: the hash of the key alone here, combined with the topic's by ``finish_keys``.

Anything the fast path cannot decide exactly (malformed UTF-8 in a topic or a used value, a
DELAY that is not a plain ASCII int32) sets ``FLAG_FALLBACK``; the caller then decodes that one
record with ``formats.dispatch.dispatch_request`` (the single Python source of truth). Tests hold
the two paths equal on every fixture record.
"""

from __future__ import annotations

import numpy as np

from ..formats.dispatch import SCHEDULE_TOPIC
from ._fastdispatch import (  # noqa: F401 (the row layout, re-exported for the dispatch's readers)
    F_FLAGS,
    F_KEY_COUNT,
    F_KEY_START,
    F_PHYS,
    F_POS,
    F_QUEUE_ID,
    F_QUEUE_OFFSET,
    F_SIZE,
    F_STORE_TS,
    F_SYS_FLAG,
    F_TAGS,
    F_TOPIC_FP,
    F_TOPIC_LEN,
    F_TOPIC_POS,
    FLAG_FALLBACK,
    FLAG_MULTI_DISPATCH,
    N_FIELDS,
    dispatch_rows,
    finish_keys,
)

SCHEDULE_TOPIC_BYTES = np.frombuffer(SCHEDULE_TOPIC.encode(), dtype=np.uint8)


def dispatch_all(buf, rows, legacy, delay_ms, index_enable, out, out_base, keys, key_fill):
    """``dispatch_rows`` over every row of ``rows``, the key buffer doubled whenever it stops
    before a record whose keys may not fit; returns ``(keys, key_fill)`` (``keys`` may be a new
    array, holding the partial hashes written so far)."""
    done = 0
    while True:
        done, key_fill = dispatch_rows(buf, rows, done, legacy, SCHEDULE_TOPIC_BYTES, delay_ms, index_enable, out, out_base, keys, key_fill)
        if done == rows.shape[0]:
            return keys, key_fill
        grown = np.empty(max(2 * keys.shape[0], 64), dtype=np.int64)
        grown[:key_fill] = keys[:key_fill]
        keys = grown


def delay_array(delay_table: dict[int, int]) -> np.ndarray:
    """``delay_ms[level]`` for levels 1..max (index 0 unused); levels missing from a gapped
    table fall back to 1000 ms like ``computeDeliverTimestamp``."""
    top = max(delay_table, default=0)
    arr = np.full(top + 1, 1000, dtype=np.int64)
    for level, ms in delay_table.items():
        arr[level] = ms
    arr[0] = 0
    return arr
