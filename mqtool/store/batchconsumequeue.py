"""Batch consume queues (5.0.0+, reference §5.5): 46-byte units, each one record's queue offset range."""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..errors import BadStoreFile
from ..formats import consumequeue as fmt
from .consumequeue import FileQueue, discover_queues, numpy_dtype, queue_file_sizes, read_units

if TYPE_CHECKING:
    import numpy as np

UNIT_SIZE = fmt.BATCH_UNIT_SIZE
DEFAULT_FILE_SIZE = 300_000 * UNIT_SIZE  # ``mapperFileSizeBatchConsumeQueue``


@cache
def unit_dtype() -> "np.dtype":
    """A unit as a numpy record, from the written layout of ``BatchConsumeQueueUnitStruct`` (same names, same bytes)."""
    return numpy_dtype(fmt.BATCH_UNIT_LAYOUT)


class BatchUnit(namedtuple("BatchUnit", ("position", *fmt.BATCH_UNIT_LAYOUT.names))):
    """One unit and where it lies: ``position`` is its byte offset in the queue (file name + position in the file)."""

    __slots__ = ()

    @property
    def is_valid(self) -> bool:
        """``BatchConsumeQueue``'s recovery rule: ``offset >= 0 && size > 0 && msgBaseOffset >= 0 && batchSize > 0``."""
        return self.phys_offset >= 0 and self.size > 0 and self.msg_base_offset >= 0 and self.batch_size > 0


@dataclass(repr=False)
class BatchConsumeQueue(FileQueue):
    file_size: int = DEFAULT_FILE_SIZE
    KIND = "batch consume queue"

    def units(self, path: Path) -> "np.ndarray":
        return read_units(path, self.file_size, unit_dtype())

    def entries(self, *, include_invalid: bool = False) -> Iterator[BatchUnit]:
        """Units up to the first invalid one; ``include_invalid``: up to each file's last non-zero unit."""
        for base, path in self.files:
            units = self.units(path)
            stop = data_end(units) if include_invalid else first_invalid(units)
            for i, fields in enumerate(units[:stop].tolist()):
                yield BatchUnit(base + i * UNIT_SIZE, *fields)
            if not include_invalid and stop * UNIT_SIZE < self.file_size:
                return

    def unit_at(self, position: int) -> BatchUnit | None:
        """The unit at byte ``position`` of the queue, None where no file holds it."""
        for base, path in self.files:
            if base <= position < base + self.file_size:
                units = self.units(path)
                i = (position - base) // UNIT_SIZE
                return BatchUnit(position, *units[i].tolist()) if i < units.shape[0] else None
        return None

    def recover(self) -> int:
        """``BatchConsumeQueue.recover`` (§5.7, the four-part rule): the byte offset of the first invalid unit."""
        for base, path in self.files[-3:]:
            stop = first_invalid(self.units(path))
            if stop * UNIT_SIZE < self.file_size or path == self.files[-1][1]:
                return base + stop * UNIT_SIZE
        return 0  # no file


def valid_mask(units: "np.ndarray") -> "np.ndarray":
    """Which units pass the four-part rule."""
    return (units["phys_offset"] >= 0) & (units["size"] > 0) & (units["msg_base_offset"] >= 0) & (units["batch_size"] > 0)


def data_end(units: "np.ndarray") -> int:
    """One past the last unit holding a non-zero byte."""
    import numpy as np

    nonzero = np.flatnonzero(units.view(np.uint8).reshape(-1, UNIT_SIZE).any(axis=1)) if units.shape[0] else units
    return int(nonzero[-1]) + 1 if nonzero.shape[0] else 0


def first_invalid(units: "np.ndarray") -> int:
    """Index of the first unit failing the four-part rule, or the count of units."""
    import numpy as np

    bad = ~valid_mask(units)
    return int(np.argmax(bad)) if bad.any() else units.shape[0]


def infer_batch_queue_file_size(directory: Path) -> int:
    """The configured file size: the largest unit-multiple file size under ``batchconsumequeue/``, else the default."""
    size = max(queue_file_sizes(directory), default=DEFAULT_FILE_SIZE)
    if size % UNIT_SIZE:
        raise BadStoreFile(f"{directory}: batch consume queue files are {size} bytes, not a multiple of {UNIT_SIZE}")
    return size


def discover_batch_queues(directory: Path) -> list[BatchConsumeQueue]:
    """Every queue directory under ``batchconsumequeue/`` the broker loads (``consumequeue.discover_queues``)."""
    if not directory.is_dir():
        return []
    return discover_queues(directory, infer_batch_queue_file_size(directory), BatchConsumeQueue)
