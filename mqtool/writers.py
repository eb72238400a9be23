"""Writers of consume queue and index files, as the broker's dispatchers write them.

Used to apply rebuild plans and by the store generator. They reproduce the broker's own write
rules so that a rebuilt file is byte-identical to the broker's:

- ``ConsumeQueueWriter`` follows ``ConsumeQueue.putMessagePositionInfo`` (reference §5.10):
  de-duplication against the queue's max physical offset, filler units before the first entry
  of a queue's first file (§5.3), full-size sparse files named by logical byte offset.
- ``IndexWriterService`` follows ``IndexService.buildIndex`` (§6.5-§6.8): skip records below the
  last file's end offset, skip ROLLBACK, put ``topic#UNIQ_KEY`` then ``topic#key``, roll to a new
  file (header seeded with the previous file's end) when one is full.

Every file is written to ``<name>.tmp`` and renamed into place by ``close``; callers choose
where (a fresh directory for rebuilds, the store for the generator).
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .formats import consumequeue as cqfmt
from .formats import index as ixfmt
from .formats.dispatch import DispatchRequest

ENTRY = cqfmt.ENTRY_SIZE


def offset_file_name(offset: int) -> str:
    return f"{offset:020d}"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class _Queue:
    directory: Path
    write_pos: int | None = None  # logical byte offset of the next unit
    max_phys_offset: int = -1
    first_file: bool = True
    pending: bytearray = field(default_factory=bytearray)
    pending_at: int = 0
    files: set[int] = field(default_factory=set)


class ConsumeQueueWriter:
    """Append units to ``<root>/<topic>/<queueId>/`` files the way the broker does."""

    def __init__(self, root: Path, file_size: int, *, flush_bytes: int = 1 << 16):
        self.root = Path(root)
        self.file_size = file_size
        self.flush_bytes = flush_bytes
        self.queues: dict[tuple[str, int], _Queue] = {}
        self._fds: OrderedDict[Path, int] = OrderedDict()

    def put(self, topic: str, queue_id: int, queue_offset: int, phys_offset: int, size: int, tags_code: int) -> bool:
        """``putMessagePositionInfo``; returns False where the broker would skip the unit."""
        q = self.queues.get((topic, queue_id))
        if q is None:
            q = self.queues[(topic, queue_id)] = _Queue(self.root / topic / str(queue_id))
        if phys_offset + size <= q.max_phys_offset:
            return False  # already built (4.5.1+ de-duplication rule)
        expect = queue_offset * ENTRY
        if q.write_pos is None:
            base = expect - expect % self.file_size
            q.write_pos = base
            if q.first_file and queue_offset != 0:
                q.pending_at = base
                q.pending += cqfmt.ENTRY.pack(*cqfmt.FILLER) * ((expect - base) // ENTRY)
                q.write_pos = expect
            q.first_file = False
        elif queue_offset != 0 and expect < q.write_pos:
            return False  # "Build consume queue repeatedly"
        if not q.pending:
            q.pending_at = q.write_pos
        q.pending += cqfmt.ENTRY.pack(phys_offset, size, tags_code)
        q.write_pos += ENTRY
        q.max_phys_offset = phys_offset + size
        if len(q.pending) >= self.flush_bytes or q.write_pos % self.file_size == 0:
            self._flush(q)
        return True

    def put_request(self, request: DispatchRequest) -> bool:
        return self.put(
            request.topic,
            request.queue_id,
            request.consume_queue_offset,
            request.commit_log_offset,
            request.msg_size,
            request.tags_code,
        )

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            os.ftruncate(fd, self.file_size)
            self._fds[path] = fd
            if len(self._fds) > 256:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(path)
        return fd

    def _flush(self, q: _Queue) -> None:
        data, at = bytes(q.pending), q.pending_at
        q.pending.clear()
        while data:
            base = at - at % self.file_size
            chunk = data[: base + self.file_size - at]
            q.files.add(base)
            os.pwrite(self._fd(q.directory / (offset_file_name(base) + ".tmp")), chunk, at - base)
            data, at = data[len(chunk) :], at + len(chunk)

    def close(self, *, fsync: bool = True) -> list[Path]:
        """Flush, rename every ``.tmp`` into place, and return the files written."""
        for q in self.queues.values():
            if q.pending:
                self._flush(q)
        while self._fds:
            path, fd = self._fds.popitem()
            if fsync:
                os.fsync(fd)
            os.close(fd)
        written = []
        for q in self.queues.values():
            for base in sorted(q.files):
                final = q.directory / offset_file_name(base)
                tmp = final.with_name(final.name + ".tmp")
                if fsync:
                    fd = os.open(tmp, os.O_RDWR)
                    os.fsync(fd)
                    os.close(fd)
                os.replace(tmp, final)
                written.append(final)
            if fsync and q.files:
                fsync_dir(q.directory)
        return written


def index_file_name(store_timestamp_ms: int) -> str:
    """yyyyMMddHHmmssSSS of a time, in UTC (the broker uses its local wall clock at creation)."""
    t = datetime.fromtimestamp(store_timestamp_ms / 1000, timezone.utc)
    return t.strftime("%Y%m%d%H%M%S") + f"{store_timestamp_ms % 1000:03d}"


class IndexWriterService:
    """``IndexService.buildIndex`` over files in ``index_dir``.

    New files are named from the store time of the first record that needs them (the broker
    uses the wall clock); ``previous`` seeds the first new file's header as the broker seeds a
    new file from the last existing one.
    """

    def __init__(
        self,
        index_dir: Path,
        hash_slot_num: int,
        index_num: int,
        previous: ixfmt.IndexHeader | None = None,
        taken_names: set[str] | None = None,
    ):
        self.index_dir = Path(index_dir)
        self.hash_slot_num, self.index_num = hash_slot_num, index_num
        self.size = ixfmt.index_file_size(hash_slot_num, index_num)
        self.previous = previous
        self.taken = set(taken_names or ())
        self.current: ixfmt.IndexWriter | None = None
        self._map: mmap.mmap | None = None
        self._path: Path | None = None
        self.written: list[Path] = []
        self.full_end_timestamp = 0  # what the broker stores as checkpoint indexMsgTimestamp

    @property
    def end_phy_offset(self) -> int:
        if self.current is not None:
            return self.current.end_phy_offset
        return self.previous.end_phy_offset if self.previous else 0

    def _roll(self, store_timestamp: int) -> None:
        prev = self.current.header if self.current is not None else self.previous
        if self.current is not None and self.current.is_full:
            self.full_end_timestamp = self.current.end_timestamp
        self._finish_current()
        name, t = index_file_name(store_timestamp), store_timestamp
        while name in self.taken:
            t += 1
            name = index_file_name(t)
        self.taken.add(name)
        self.index_dir.mkdir(parents=True, exist_ok=True)
        self._path = self.index_dir / (name + ".tmp")
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, self.size)
            self._map = mmap.mmap(fd, self.size)
        finally:
            os.close(fd)
        phy = prev.end_phy_offset if prev is not None and prev.end_phy_offset > 0 else 0
        ts = prev.end_timestamp if prev is not None and prev.end_timestamp > 0 else 0
        seed = ixfmt.IndexHeader(ts, ts, phy, phy, 0, 1)
        self.current = ixfmt.IndexWriter(self._map, self.hash_slot_num, self.index_num, seed)

    def put_request(self, request: DispatchRequest) -> None:
        if not request.to_index:
            return
        if self.current is None or self.current.is_full:
            self._roll(request.store_timestamp)
        if request.commit_log_offset < self.current.end_phy_offset:
            return
        for key in request.index_keys():
            while not self.current.put(key, request.commit_log_offset, request.store_timestamp):
                self._roll(request.store_timestamp)

    def _finish_current(self) -> None:
        if self.current is None:
            return
        self.current.flush_header()
        self._map.flush()
        self._map.close()
        final = self._path.with_name(self._path.name[: -len(".tmp")])
        os.replace(self._path, final)
        self.written.append(final)
        self.current = None

    def close(self) -> list[Path]:
        self._finish_current()
        if self.written:
            fsync_dir(self.index_dir)
        return self.written
