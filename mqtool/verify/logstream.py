"""The valid records of the commit log, as the broker's dispatch sees them, streamed.

``LogStream`` walks the broker's chain (first segment to the logical end, blank records jumping
to the next segment, CRC not checked: dispatch does not check it either, reference §8.12) on
the compiled walk, gathers the fixed fields with numpy and decodes only the topic and the
properties per record. Memory stays flat: pages are released behind the walk.
"""

from __future__ import annotations

from typing import Callable, Iterator, NamedTuple

import numpy as np

from ..formats import commitlog as clfmt
from ..formats.properties import parse_properties
from ..store import Store
from ..store import fastscan as fs
from ..store.commitlog import STORE_TS_POSITION, ScanEnd

_V4 = clfmt.HEADER_LAYOUTS[(False, False)]
_POS_QUEUE_ID = _V4.offset_of("queue_id")
_POS_QUEUE_OFFSET = _V4.offset_of("queue_offset")
BATCH = 1 << 14  # records per walk batch at most (2048 in the first): the unit in which cross-check findings are drained
BATCH_BYTES = 8 << 20  # and about this many bytes of records per batch after the first (8192 of 1 KiB)


class LogRecord(NamedTuple):
    """What dispatch needs from one valid record (reference §3.2)."""

    offset: int
    size: int
    topic: str
    queue_id: int
    queue_offset: int
    sys_flag: int
    store_timestamp: int
    properties: dict[str, str]


class LogStream:
    """The compiled walk's batches from ``start`` to the logical end (or ``stop``; ``walk``); then ``end``."""

    def __init__(self, store: Store, start: int | None = None, stop: int | None = None, progress: Callable[[int], None] | None = None,
                 unread_before: Callable[[], int] | None = None):
        self.store = store
        self.unread_before = unread_before  # where the broker's recovery starts (asked only at damage)
        self.start = store.commitlog.min_offset if start is None else start
        self.stop = stop
        self.progress = progress
        self.end: ScanEnd | None = None
        self.records = 0

    def walk(self) -> Iterator[fs.SegmentBatch]:
        """The compiled walk's batches (``BATCH`` rows each at most), counting records and
        reporting progress; ``end`` is set when it is exhausted. Damage the broker's recovery
        keeps the log past does not end the log it serves: the walk resumes (``_resume``)."""
        start = shown = self.start
        while True:
            scan = fs.FastScan(self.store.commitlog, start, self.stop, check_crc=False, stop_on_crc=False, batch=BATCH, batch_bytes=BATCH_BYTES, release_behind=True)
            for batch in scan:
                yield batch
                self.records += len(batch.rows)
                if self.progress is not None:
                    done = batch.base_offset + int(batch.rows[-1, fs.COL_POS])
                    self.progress(done - shown)
                    shown = done
            end = scan.end
            resume = self._resume(end)
            if resume is not None and resume > end.offset and (self.stop is None or resume < self.stop):
                yield from self._loose(end, resume)
                start = resume
                continue
            self.end = end
            return

    __iter__ = walk  # a walk to build on (``scan.messages.MessageScan(walk=...)``)

    def _resume(self, end: ScanEnd) -> int | None:
        """Where the log the broker serves goes on after damage the walk stopped at
        (``CommitLog.resume_after_damage``): past damage its recovery never reads
        (``unread_before``); in DLedger data, past damage DLedger's recovery keeps."""
        if self.store.is_dledger or (self.unread_before is not None and end.unread_by_broker(self.unread_before())):
            return self.store.commitlog.resume_after_damage(end)
        return None


    def _loose(self, end: ScanEnd, resume: int) -> Iterator[fs.SegmentBatch]:
        """The whole record inside a DLedger entry whose header alone is broken, which the broker serves
        (``dledgerstart.loose_walk``), walked as a classic record in a view of its file alone."""
        from ..store.dledgerstart import loose_walk

        for batch in loose_walk(self.store.commitlog, end, resume, check_crc=False, stop_on_crc=False) or ():
            self.records += len(batch.rows)
            yield batch


def records_of(batch: fs.SegmentBatch, legacy: bool, topics: dict[bytes, str]) -> list[LogRecord]:
    """``LogRecord``s of one walk batch (``topics`` memoises decoded topic names)."""
    array, rows, base = batch.array, batch.rows, batch.base_offset
    positions = rows[:, fs.COL_POS]
    queue_ids = fs.gather_be(array, positions, _POS_QUEUE_ID, 4, True)
    queue_offsets = fs.gather_be(array, positions, _POS_QUEUE_OFFSET, 8, True)
    sys_flags = fs.gather_be(array, positions, fs.POS_SYS_FLAG, 4, True)
    ts4 = fs.gather_be(array, positions, STORE_TS_POSITION[False], 8, True)
    ts6 = fs.gather_be(array, positions, STORE_TS_POSITION[True], 8, True)
    store_ts = np.where(sys_flags & fs.BORN_V6, ts6, ts4)
    out: list[LogRecord] = []
    columns = rows[:, [fs.COL_POS, fs.COL_SIZE, fs.COL_TOPIC, fs.COL_PROPS]].tolist()
    for (pos, size, topic_at, props_at), queue_id, queue_offset, sys_flag, ts in zip(columns, queue_ids.tolist(), queue_offsets.tolist(),
                                                                                     sys_flags.tolist(), store_ts.tolist()):
        raw_topic = array[topic_at : props_at - clfmt.PROPERTIES_LENGTH.size].tobytes()
        topic = topics.get(raw_topic)
        if topic is None:
            topic = topics[raw_topic] = raw_topic.decode("utf-8", "replace")
        props_end = pos + size
        properties = parse_properties(array[props_at:props_end].tobytes(), legacy=legacy) if props_end > props_at else {}
        out.append(LogRecord(base + pos, size, topic, queue_id, queue_offset, sys_flag, ts, properties))
    return out
