"""Consume queue and index writers, byte-identical to the broker's: ``ConsumeQueueWriter`` (reference §5.10, rules §3.1-§3.3,
§5.3) and ``IndexWriterService`` (§6.5-§6.8), written to ``tmp_path``, fsynced and renamed into place by ``close``."""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..fileops import copy_sparse, fsync_dir, fsync_path, pwrite_all
from ..formats import consumequeue as cqfmt, index as ixfmt
from ..formats.dispatch import DispatchRequest
from ..store.consumequeue import UNIT_DTYPE
from ..dispatch.placement import ENTRY_BUFFER, H_PUT, S_FILL_FROM, S_FILL_TO, IndexPlacement, QueueState, place_units
from ..store.mappedfile import offset_file_name

MAX_OPEN = 256  # consume queue files held open at once (the least recently written is closed)
FILLER_UNIT = np.array([cqfmt.FILLER], dtype=UNIT_DTYPE)


def default_tmp_path(final: Path) -> Path:
    return final.with_name(final.name + ".tmp")


def open_copy(tmp: Path, source: Path | None) -> int:
    """``tmp`` (a new file) opened read-write, holding ``source``'s bytes (none if None), as sparse as they are: a queue file is
    preallocated, mostly holes."""
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if source is not None:
        copy_sparse(source, tmp)
    else:
        tmp.unlink(missing_ok=True)
    return os.open(tmp, os.O_RDWR | os.O_CREAT, 0o644)


WRITEBACK_EVERY = 32 << 20  # index entry bytes appended between two early writeback starts


def start_writeback(fd: int, offset: int = 0, length: int = 0) -> None:
    """Start writing ``[offset, offset + length)`` (0: to the end) out now (``POSIX_FADV_DONTNEED``), so ``fsync`` waits less."""
    if hasattr(os, "posix_fadvise"):
        os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)


# ---- consume queues -------------------------------------------------------------------------

@dataclass
class _Queue:
    directory: Path
    state: np.ndarray
    files: set[int] = field(default_factory=set)
    placed: int = 0
    fillers: int = 0


class ConsumeQueueWriter:
    """Append units to ``<root>/<topic>/<queueId>/`` files the way the broker does (``seed_queue``, ``adopt_file``)."""

    def __init__(self, root: Path, file_size: int, *, dedup_by_end: bool = True, repeat_guard: bool = True,
                 tmp_path: Callable[[Path], Path] = default_tmp_path):
        self.root, self.file_size, self.dedup_by_end, self.repeat_guard, self.tmp_path = Path(root), file_size, dedup_by_end, repeat_guard, tmp_path
        self.queues: dict[tuple[str, int], _Queue] = {}
        self._fds: OrderedDict[Path, int] = OrderedDict()
        self._pos = np.empty(0, dtype=np.int64)
        self._adopted: set[Path] = set()

    def _queue(self, topic: str, queue_id: int) -> _Queue:
        q = self.queues.get((topic, queue_id))
        if q is None:
            q = self.queues[(topic, queue_id)] = _Queue(self.root / topic / str(queue_id), QueueState().as_array())
        return q

    def seed_queue(self, topic: str, queue_id: int, state: QueueState) -> None:
        self._queue(topic, queue_id).state[:] = state.as_array()

    def adopt_file(self, topic: str, queue_id: int, base: int, content_from: Path | None, zero_from: int | None) -> None:
        """Start file ``base`` of a queue from ``content_from``'s bytes (zeros if None), cleared from ``zero_from``."""
        q = self._queue(topic, queue_id)
        final = q.directory / offset_file_name(base)
        fd = open_copy(self.tmp_path(final), content_from)
        try:
            os.ftruncate(fd, self.file_size)
            if content_from is not None and zero_from is not None and zero_from < self.file_size:
                pwrite_all(fd, bytes(self.file_size - zero_from), zero_from)
        finally:
            os.close(fd)
        q.files.add(base)
        self._adopted.add(final)

    # -- putting --

    def put(self, topic: str, queue_id: int, queue_offset: int, phys_offset: int, size: int, tags_code: int) -> bool:
        """``putMessagePositionInfo`` of one request; False where the broker skips it."""
        columns = [np.array([value], dtype=np.int64) for value in (queue_offset, phys_offset, size, tags_code)]
        return bool(self.put_batch(topic, queue_id, *columns))

    def put_request(self, r: DispatchRequest) -> bool:
        return self.put(r.topic, r.queue_id, r.consume_queue_offset, r.commit_log_offset, r.msg_size, r.tags_code)

    def put_batch(self, topic: str, queue_id: int, qoff, phys, size, tags) -> int:
        """Requests of one queue in commit log order; returns how many units were written."""
        q = self._queue(topic, queue_id)
        n = len(qoff)
        if self._pos.shape[0] < n:
            self._pos = np.empty(max(n, 1024), dtype=np.int64)
        pos = self._pos[:n]
        q.state[S_FILL_FROM] = -1
        placed = place_units(qoff, phys, size, q.state, self.file_size, self.dedup_by_end, self.repeat_guard, pos)
        if q.state[S_FILL_FROM] >= 0:
            count = int(q.state[S_FILL_TO] - q.state[S_FILL_FROM]) // cqfmt.ENTRY_SIZE
            if count:
                self._write(q, int(q.state[S_FILL_FROM]), np.repeat(FILLER_UNIT, count))
                q.fillers += count
            else:  # fillPreBlank with nothing to fill: its file is made all the same
                base = int(q.state[S_FILL_FROM])  # a file's base (``place_units``)
                q.files.add(base)
                self._fd(q.directory / offset_file_name(base))
        if placed:
            units = np.empty(placed, dtype=UNIT_DTYPE)
            keep = slice(None) if placed == n else pos >= 0  # the usual case: every request placed, no mask to apply
            units["phys_offset"], units["size"], units["tags_code"] = phys[keep], size[keep], tags[keep]
            self._write(q, int(pos[keep][0]), units)
            q.placed += placed
        return placed

    def _write(self, q: _Queue, at: int, units: np.ndarray) -> None:
        """Units are consecutive from logical position ``at``; split them at file ends."""
        data = units.view(np.uint8)  # the units' bytes, not a copy
        while len(data):
            base = at - at % self.file_size
            chunk = data[: base + self.file_size - at]
            q.files.add(base)
            fd = self._fd(q.directory / offset_file_name(base))
            pwrite_all(fd, chunk, at - base)
            data, at = data[len(chunk) :], at + len(chunk)
            if at == base + self.file_size:  # the file is full: nothing more is written to it
                start_writeback(fd)

    def _fd(self, final: Path) -> int:
        fd = self._fds.get(final)
        if fd is None:
            tmp = self.tmp_path(final)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDWR | os.O_CREAT
            if final not in self._adopted:
                flags |= os.O_TRUNC
                self._adopted.add(final)  # later re-opens (after eviction) keep the content
            fd = os.open(tmp, flags, 0o644)
            os.ftruncate(fd, self.file_size)
            self._fds[final] = fd
            if len(self._fds) > MAX_OPEN:
                os.close(self._fds.popitem(last=False)[1])
        else:
            self._fds.move_to_end(final)
        return fd

    def close(self, *, fsync: bool = True) -> list[Path]:
        """fsync (a few at a time: the disk can merge them) and rename every written file into place."""
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)
        moves = [(self.tmp_path(q.directory / offset_file_name(base)), q.directory / offset_file_name(base)) for q in self.queues.values() for base in sorted(q.files)]
        if fsync:
            parallel(fsync_path, [tmp for tmp, _ in moves])
        for tmp, final in moves:
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, final)
        if fsync:
            parallel(fsync_dir, sorted({final.parent for _, final in moves}))
        return [final for _, final in moves]


def parallel(fn, items, workers: int = 8) -> None:
    """``fn(item)`` for every item, on a few threads (for calls that wait on I/O)."""
    items = list(items)
    if len(items) > 1:
        from concurrent.futures import ThreadPoolExecutor  # here: with logging, an import a plan need not pay

        with ThreadPoolExecutor(max_workers=min(workers, len(items))) as pool:
            list(pool.map(fn, items))
    elif items:
        fn(items[0])


# ---- index ----------------------------------------------------------------------------------


class IndexWriterService(IndexPlacement):
    """``IndexService.buildIndex`` over files in ``index_dir`` (``append_to=(name, source)``: ``source`` continued): slots written
    back when a file is finished, entries appended; files in ``unwritten`` are placed without being written."""

    dry = False

    def __init__(self, index_dir: Path, hash_slot_num: int, index_num: int, *placement, tmp_path: Callable[[Path], Path] = default_tmp_path,
                 unwritten: frozenset[str] = frozenset(), **options):
        """``IndexPlacement``'s arguments (``placement``, ``options``) after ``index_dir``."""
        self.index_dir = Path(index_dir)
        self.unwritten = unwritten
        self.size = ixfmt.index_file_size(hash_slot_num, index_num)
        self.tmp_path = tmp_path
        self._fd: int | None = None
        self.written: list[Path] = []
        super().__init__(hash_slot_num, index_num, *placement, **options)  # last: it opens ``append_to`` with the above

    def _entry_buffer(self) -> np.ndarray:
        return np.empty(ENTRY_BUFFER * ixfmt.ENTRY_SIZE // 4, dtype=np.uint32)  # written as words

    def _open(self, name: str, source: Path | None, seed: ixfmt.IndexHeader | None) -> None:
        """Start file ``name``: a copy of ``source``, or new with header ``seed``; one ``unwritten`` only counted."""
        self.dry = name in self.unwritten
        if self.dry:
            self._begin(name, seed if seed is not None else source, np.zeros(1, dtype=np.int32), seed is not None)
            return
        self.index_dir.mkdir(parents=True, exist_ok=True)
        fd = open_copy(self.tmp_path(self.index_dir / name), source)
        try:
            if os.fstat(fd).st_size != self.size:
                os.ftruncate(fd, self.size)  # the broker maps the configured size
            if seed is None:
                head = os.pread(fd, ixfmt.HEADER_SIZE + ixfmt.SLOT_SIZE * self.hash_slot_num, 0)
                header = ixfmt.read_header(head)
                slots = np.frombuffer(head, dtype=">i4", count=self.hash_slot_num, offset=ixfmt.HEADER_SIZE).astype(np.int32)
            else:  # ``new IndexFile(..., endPhyOffset, endTimestamp)`` writes the seed
                header = seed
                pwrite_all(fd, ixfmt.HEADER.pack(*ixfmt.IndexHeader(*header[:4], 0, 0)), 0)
                slots = np.zeros(self.hash_slot_num, dtype=np.int32)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._written_back = ixfmt.entry_position(self.hash_slot_num, max(int(header[5]), 1))  # entries appended from here
        self._begin(name, header, slots, seed is not None)

    def _append(self, first: int, added: int) -> None:
        at = ixfmt.entry_position(self.hash_slot_num, first)
        pwrite_all(self._fd, self._ent[: added * ixfmt.ENTRY_SIZE], at)
        at += added * ixfmt.ENTRY_SIZE
        if at - self._written_back >= WRITEBACK_EVERY:  # entries are appended once and not read again
            start_writeback(self._fd, self._written_back, at - self._written_back)
            self._written_back = at

    def _write_current(self) -> None:
        if self._fd is None:  # an unwritten file
            return
        try:
            if self.hdr[H_PUT]:  # the broker writes the header fields and slots as each put changes them
                pwrite_all(self._fd, self._slots.astype(">i4"), ixfmt.HEADER_SIZE)
                pwrite_all(self._fd, ixfmt.HEADER.pack(*self._header()), 0)
            os.fsync(self._fd)
        finally:
            os.close(self._fd)
            self._fd = None
        final = self.index_dir / self.current_name
        os.replace(self.tmp_path(final), final)
        self.written.append(final)

    def close(self) -> list[Path]:
        super().close()
        if self.written:
            fsync_dir(self.index_dir)
        return self.written
