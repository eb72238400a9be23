"""Consume queues: ``consumequeue/<topic>/<queueId>/`` file-queues of 20-byte units (reference §5).

Besides plain iteration this computes the broker's own view of a queue after it loads the
store: the recovered end (``ConsumeQueue.recover``, §5.7) and the corrected min offset
(``correctMinOffset``, §5.9), so that ``info`` reports what the broker would.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple

from ..errors import BadInput, BadStoreFile
from ..formats import consumequeue as fmt
from .mappedfile import MappedFile, offset_named_files

ENTRY_SIZE = fmt.ENTRY_SIZE


class QueueRecovery(NamedTuple):
    """Result of the broker's CQ recovery loop."""

    end: int  # logical byte offset of the first invalid unit (processOffset)
    max_phys_offset: int  # offset + size of the last valid unit, -1 if none
    start_file: int  # index of the file the scan started from (third from last)

    @property
    def max_offset(self) -> int:
        return self.end // ENTRY_SIZE


@dataclass
class ConsumeQueue:
    topic: str
    queue_id: int
    directory: Path
    file_size: int

    def __post_init__(self):
        self.files = offset_named_files(self.directory)
        for base, path in self.files:
            if base % self.file_size:
                raise BadStoreFile(f"{path}: name is not a multiple of the consume queue file size {self.file_size}")

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic!r}, {self.queue_id})"

    def _units(self, base: int, path: Path) -> Iterator[tuple[int, int, int, int]]:
        """``(logical offset, phys_offset, size, tags_code)`` for every unit of one file."""
        with MappedFile(path, base) as mf:
            usable = mf.size - mf.size % ENTRY_SIZE
            data = mf.buf[:usable]
        for i, unit in enumerate(fmt.ENTRY.iter_unpack(data)):
            yield (base + i * ENTRY_SIZE, *unit)

    def entries(self, start_queue_offset: int = 0, *, include_invalid: bool = False) -> Iterator[fmt.ConsumeQueueEntry]:
        """Entries from ``start_queue_offset`` until the first invalid unit (``offset < 0`` or
        ``size <= 0``), across files. Filler units are yielded (``entry.is_filler``)."""
        start = start_queue_offset * ENTRY_SIZE
        for base, path in self.files:
            if base + self.file_size <= start:
                continue
            for logical, phys, size, tags in self._units(base, path):
                if logical < start:
                    continue
                if not include_invalid and not fmt.is_valid_unit(phys, size):
                    return
                yield fmt.ConsumeQueueEntry(logical // ENTRY_SIZE, phys, size, tags)

    def read_entry(self, queue_offset: int) -> fmt.ConsumeQueueEntry | None:
        logical = queue_offset * ENTRY_SIZE
        base = logical - logical % self.file_size
        for file_base, path in self.files:
            if file_base == base:
                with MappedFile(path, base) as mf:
                    pos = logical - base
                    if pos + ENTRY_SIZE > mf.size:
                        return None
                    return fmt.ConsumeQueueEntry(queue_offset, *fmt.ENTRY.unpack_from(mf.buf, pos))
        return None

    def recover(self) -> QueueRecovery:
        """``ConsumeQueue.recover``: from the third-from-last file, the first invalid unit ends
        the queue; a file that is valid to its end continues into the next (§5.7)."""
        if not self.files:
            return QueueRecovery(0, -1, 0)
        index = max(0, len(self.files) - 3)
        max_phys = -1
        while True:
            base, path = self.files[index]
            pos = 0
            for logical, phys, size, _ in self._units(base, path):
                if not fmt.is_valid_unit(phys, size):
                    break
                pos = logical - base + ENTRY_SIZE
                max_phys = phys + size
            if pos == self.file_size and index + 1 < len(self.files):
                index += 1
                continue
            return QueueRecovery(base + pos, max_phys, max(0, len(self.files) - 3))

    def corrected_min_offset(self, commitlog_min_offset: int, end: int, *, v5: bool) -> int:
        """The queue's min offset after ``correctMinOffset(commitLog.minOffset)`` (§5.9).

        4.x: the first unit of the first file whose offset >= the commit log min, else 0.
        5.x: the same, except that a queue whose last unit is below the commit log min gets
        ``min = max`` (an empty queue).
        """
        if not self.files or end <= 0:
            return 0
        if v5:
            last = self._unit_at(end - ENTRY_SIZE)
            if last is not None and last[0] < commitlog_min_offset:
                return end // ENTRY_SIZE
        base, path = self.files[0]
        for logical, phys, _size, _tags in self._units(base, path):
            if logical >= end:
                break
            if phys >= commitlog_min_offset:
                return logical // ENTRY_SIZE
        return 0

    def _unit_at(self, logical: int) -> tuple[int, int, int] | None:
        entry = self.read_entry(logical // ENTRY_SIZE)
        return None if entry is None else entry[1:]


def infer_queue_file_size(consumequeue_dir: Path) -> int | None:
    """The configured CQ file size: the most common size of the CQ files (a multiple of 20)."""
    sizes: dict[int, int] = {}
    for topic_dir in _subdirs(consumequeue_dir):
        for queue_dir in _subdirs(topic_dir):
            for _, path in offset_named_files(queue_dir):
                size = path.stat().st_size
                sizes[size] = sizes.get(size, 0) + 1
    sizes.pop(0, None)
    if not sizes:
        return None
    size = max(sizes, key=lambda s: (sizes[s], s))
    if size % ENTRY_SIZE:
        raise BadStoreFile(f"{consumequeue_dir}: consume queue files are {size} bytes, not a multiple of {ENTRY_SIZE}")
    return size


def _subdirs(directory: Path) -> list[Path]:
    try:
        return sorted(Path(e.path) for e in os.scandir(directory) if e.is_dir())
    except FileNotFoundError:
        return []
    except PermissionError:
        raise BadInput(f"{directory}: permission denied") from None


def discover_queues(consumequeue_dir: Path, file_size: int) -> list[ConsumeQueue]:
    """Every ``<topic>/<queueId>`` directory under ``consumequeue/`` (non-numeric ids skipped)."""
    queues = []
    for topic_dir in _subdirs(consumequeue_dir):
        for queue_dir in _subdirs(topic_dir):
            if queue_dir.name.isdigit():
                queues.append(ConsumeQueue(topic_dir.name, int(queue_dir.name), queue_dir, file_size))
    queues.sort(key=lambda q: (q.topic, q.queue_id))
    return queues

