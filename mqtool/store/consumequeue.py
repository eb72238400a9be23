"""Consume queues (reference §5) and the broker's view of a queue after load (§5.7, §5.9)."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, NamedTuple

from ..errors import BadInput, BadStoreFile
from ..formats import consumequeue as fmt
from ..formats._layout import FixedLayout
from ..formats.dispatch import java_int_or_none
from ._queueunits import first_invalid_unit, units_equal
from .mappedfile import QUEUE_ID, MappedFile, StrayEntry, folder_entries, offset_file_name, offset_named_files, open_read_only, wrong_length_files

if TYPE_CHECKING:
    import numpy as np

ENTRY_SIZE = fmt.ENTRY_SIZE
_NUMPY_CODES = {"b": "i1", "h": "i2", "l": "i4", "i": "i4", "q": "i8"}


def has_queue_directory(topic: str) -> bool:
    """Whether the broker can create ``consumequeue/<topic>/``: a NUL in the topic gets no entry (reference §5.10)."""
    return "\x00" not in topic


def numpy_dtype(layout: FixedLayout) -> "np.dtype":
    """The big-endian numpy record dtype of a derived fixed layout (same names, same bytes)."""
    import numpy as np

    codes = layout.codec.format.lstrip(">")
    dtype = np.dtype([(name, ">" + _NUMPY_CODES[code]) for name, code in zip(layout.names, codes)])
    assert dtype.itemsize == layout.size
    return dtype


@cache
def unit_dtype() -> "np.dtype":
    """A consume queue unit's numpy record, made on first use: a single lookup loads no numpy."""
    return numpy_dtype(fmt.ENTRY_LAYOUT)


def __getattr__(name: str):
    if name == "UNIT_DTYPE":  # ``from .consumequeue import UNIT_DTYPE`` in the modules that use numpy anyway
        return unit_dtype()
    raise AttributeError(name)


class QueueRecovery(NamedTuple):
    """Result of the broker's CQ recovery loop."""

    end: int  # logical byte offset of the first invalid unit (processOffset)
    max_phys_offset: int  # offset + size of the last valid unit, -1 if none
    last_phys_offset: int = -1  # offset (start) of the last valid unit, -1 if none

    @property
    def max_offset(self) -> int:
        return self.end // ENTRY_SIZE

    def max_physic_offset(self, dedup_by_end: bool) -> int:
        """``maxPhysicOffset`` after recovery: the last unit's end from 4.5.0, its start before (rules §3.4)."""
        return self.max_phys_offset if dedup_by_end else self.last_phys_offset


@dataclass
class FileQueue:
    """The files of ``<topic>/<queueId>/``, named by their first byte offset (a multiple of ``file_size``)."""

    topic: str
    queue_id: int
    directory: Path
    file_size: int
    KIND = "consume queue"

    def __post_init__(self):
        # one listing: the queue's files, and what MappedFileQueue.load lists beside them (verify's ``cq-stray-entry``,
        # the next start's ``queue_refusal``)
        self.files, self.strays = folder_entries(self.directory)
        for base, path in self.files:
            if base % self.file_size:
                raise BadStoreFile(f"{path}: name is not a multiple of the {self.KIND} file size {self.file_size}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.topic!r}, {self.queue_id})"

    def after(self, entry: StrayEntry) -> bool:
        """Whether a file of the queue sorts after ``entry`` (what a load that stops at it leaves out)."""
        return any(path.name > entry.path.name for _, path in self.files)

    @cached_property
    def wrong_lengths(self) -> list[tuple[int, Path, int, bool]]:
        """``mappedfile.wrong_length_files`` of the queue's listing, once (``cq-file-size``, ``queue_refusal``)."""
        return wrong_length_files(self.files, self.strays, self.file_size)


@dataclass(repr=False)
class ConsumeQueue(FileQueue):
    _recovered: QueueRecovery | None = field(default=None, init=False, repr=False, compare=False)

    def units(self, path: Path) -> np.ndarray:
        return read_units(path, self.file_size)

    def entries(self, start_queue_offset: int = 0) -> Iterator[fmt.ConsumeQueueEntry]:
        """Entries from ``start_queue_offset`` to the first invalid unit, across files, fillers included."""
        start = start_queue_offset * ENTRY_SIZE
        for base, path in self.files:
            if base + self.file_size <= start:
                continue
            units = self.units(path)
            skip = max(start - base, 0) // ENTRY_SIZE
            stop = _first_invalid(units, skip)
            for number, (phys, size, tags) in enumerate(units[skip:stop].tolist(), base // ENTRY_SIZE + skip):
                yield fmt.ConsumeQueueEntry(number, phys, size, tags)
            if stop * ENTRY_SIZE < self.file_size:  # an invalid unit or a short file ends the queue
                return

    def runs_into(self, start: int, stop: int) -> list[tuple[int, int]]:
        """``(first, end)`` queue offsets of each run of entries pointing into the log range [``start``, ``stop``)."""
        import numpy as np

        runs: list[tuple[int, int]] = []
        for base, path in self.files:
            units = self.units(path)
            valid = _first_invalid(units)
            phys = units["phys_offset"][:valid]
            inside = np.flatnonzero((phys >= start) & (phys < stop) & ~fmt.is_filler(phys, units["size"][:valid], units["tags_code"][:valid]))
            for run in np.split(inside, np.flatnonzero(np.diff(inside) != 1) + 1) if inside.size else ():
                first, end = base // ENTRY_SIZE + int(run[0]), base // ENTRY_SIZE + int(run[-1]) + 1
                if runs and runs[-1][1] == first:  # the run goes on from the file before
                    first = runs.pop()[0]
                runs.append((first, end))
            if valid * ENTRY_SIZE < self.file_size:
                break
        return runs

    def unit_file(self, queue_offset: int) -> Path:
        """The file holding ``queue_offset``'s unit, there or not: named by its first unit's byte offset."""
        logical = queue_offset * ENTRY_SIZE
        return self.directory / offset_file_name(logical - logical % self.file_size)

    def read_entry(self, queue_offset: int) -> fmt.ConsumeQueueEntry | None:
        """The unit at ``queue_offset`` (one ``pread``), None past its file's mapped bytes."""
        logical = queue_offset * ENTRY_SIZE
        base = logical - logical % self.file_size
        for file_base, path in self.files:
            if file_base == base:
                unit = read_unit(path, logical - base)
                return None if unit is None else fmt.ConsumeQueueEntry(queue_offset, *unit)
        return None

    def recover(self) -> QueueRecovery:
        """``ConsumeQueue.recover`` from the third-from-last file to the first invalid unit (§5.7), read once."""
        if self._recovered is None:
            self._recovered = self._recover()
        return self._recovered

    def _recover(self) -> QueueRecovery:
        max_phys = last_phys = -1
        for base, path in self.files[-3:]:
            stop, last = _valid_prefix(path, self.file_size)
            if last is not None:
                last_phys, max_phys = last[0], last[0] + last[1]
            if stop * ENTRY_SIZE < self.file_size or path == self.files[-1][1]:
                return QueueRecovery(base + stop * ENTRY_SIZE, max_phys, last_phys)
        return QueueRecovery(0, -1)  # no file

    def corrected_min_offset(self, commitlog_min_offset: int, end: int, *, v5: bool) -> int:
        """The min offset after ``correctMinOffset(commitLog.minOffset)`` (§5.9; 5.x: ``max`` when all units are below it)."""
        if not self.files or end <= 0:
            return 0
        if v5:
            last = self.read_entry(end // ENTRY_SIZE - 1)
            if last is not None and last.phys_offset < commitlog_min_offset:
                return end // ENTRY_SIZE
        base, path = self.files[0]
        first = _first_unit_at_or_above(path, max(end - base, 0) // ENTRY_SIZE, commitlog_min_offset)
        return (base + first * ENTRY_SIZE) // ENTRY_SIZE if first is not None else 0


READ_BELOW = 1 << 16  # bytes: a file this small is read, not mapped (a map costs twice the copy)


def read_units(path: Path, file_size: int, dtype: "np.dtype | None" = None) -> np.ndarray:
    """A file's units (``dtype``) as a read-only view of its map, or its bytes below ``READ_BELOW``; ``file_size`` bytes."""
    import numpy as np

    dtype = unit_dtype() if dtype is None else dtype
    if file_size < READ_BELOW:
        with _open(path) as f:
            data = f.read(file_size)
        return np.frombuffer(data, dtype=dtype, count=len(data) // dtype.itemsize)
    mf = MappedFile(path)
    count = min(mf.size, file_size) // dtype.itemsize
    units = np.frombuffer(mf.buf, dtype=dtype, count=count) if count else np.zeros(0, dtype=dtype)
    mf.close()
    return units


def _first_invalid(units: np.ndarray, first: int = 0) -> int:
    """Index of the first unit from ``first`` on failing the broker's validity rule, or the count of units."""
    return first_invalid_unit(units.view("u1"), first)


_CHUNK_UNITS = 3276  # units per read (64 KiB)


def _open(path: Path):
    """A raw read-only file as a context manager (``os.pread`` on its ``fileno``)."""
    return os.fdopen(open_read_only(path), "rb", buffering=0)


def read_unit(path: Path, position: int) -> tuple[int, int, int] | None:
    """``(phys_offset, size, tags_code)`` of the unit at byte ``position`` of a file (one ``pread``), None past its end."""
    with _open(path) as f:
        data = os.pread(f.fileno(), ENTRY_SIZE, position)
    return fmt.ENTRY.unpack(data) if len(data) == ENTRY_SIZE else None


def units_are(file, position: int, phys, size, tags) -> bool:
    """Whether a file's units from ``position`` are (``phys``, ``size``, ``tags``), one ``pread``, zeros past its end."""
    count = len(phys) * ENTRY_SIZE
    return units_equal(os.pread(file.fileno(), count, position).ljust(count, b"\0"), phys, size, tags)


def _valid_prefix(path: Path, file_size: int) -> tuple[int, tuple[int, int] | None]:
    """A file's units before its first invalid one (§5.7) and the last valid ``(phys_offset, size)``."""
    if file_size < READ_BELOW:
        with _open(path) as f:
            return _valid_prefix_of(f.read(file_size))
    with MappedFile(path) as mf, memoryview(mf.buf)[: min(mf.size, file_size)] as data:  # the view released before the map closes
        return _valid_prefix_of(data)


def _valid_prefix_of(data) -> tuple[int, tuple[int, int] | None]:
    stop = first_invalid_unit(data, 0)
    return stop, fmt.ENTRY.unpack_from(data, (stop - 1) * ENTRY_SIZE)[:2] if stop else None


def _first_unit_at_or_above(path: Path, units: int, phys_offset: int) -> int | None:
    """The first of a file's ``units`` pointing at or past ``phys_offset``, read ``_CHUNK_UNITS`` at a time."""
    with _open(path) as f:
        for first in range(0, units, _CHUNK_UNITS):
            data = os.pread(f.fileno(), min(_CHUNK_UNITS, units - first) * ENTRY_SIZE, first * ENTRY_SIZE)
            for i, (phys, _size, _tags) in enumerate(fmt.ENTRY.iter_unpack(data[: len(data) - len(data) % ENTRY_SIZE])):
                if phys >= phys_offset:
                    return first + i
            if len(data) < _CHUNK_UNITS * ENTRY_SIZE:
                return None
    return None


def infer_queue_file_size(consumequeue_dir: Path, found: list[QueueDirectory] | None = None) -> int | None:
    """The configured CQ file size: the commonest CQ file size (``found``: ``queue_directories``, if listed)."""
    sizes = Counter(queue_file_sizes(consumequeue_dir, found))
    if not sizes:
        return None
    size = max(sizes, key=lambda s: (sizes[s], s))
    if size % ENTRY_SIZE:
        raise BadStoreFile(f"{consumequeue_dir}: consume queue files are {size} bytes, not a multiple of {ENTRY_SIZE}")
    return size


def queue_file_sizes(directory: Path, found: list[QueueDirectory] | None = None) -> list[int]:
    """The sizes of the non-empty files of every queue read under ``directory`` (``queue_directories``, or ``found``)."""
    found = queue_directories(directory) if found is None else found
    return [size for d in found if d.read for _, p in offset_named_files(d.path) if (size := p.stat().st_size)]


def _entries(directory: Path) -> list[os.DirEntry]:
    try:
        return sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except PermissionError:
        raise BadInput(f"{directory}: permission denied") from None


def queue_id_of(name: str) -> int | None:
    """A queue directory's id as ``Integer.parseInt`` reads it, or None (4.0.0+ skip it; 3.2.6 refuses to start)."""
    return java_int_or_none(name)


TopicListing = list[tuple[Path, list[os.DirEntry]]]


def topic_listing(directory: Path) -> TopicListing:
    """Each ``<topic>/`` folder of ``directory`` with its entries by name, as ``loadConsumeQueue`` lists them, once."""
    return [(t, _entries(t)) for t in (Path(e.path) for e in _entries(directory) if e.is_dir())]


def topic_strays(directory: Path, listing: TopicListing | None = None) -> list[StrayEntry]:
    """Each entry of a ``<topic>/`` folder named by no queue id (``LOAD_CONSUME_QUEUE``); ``listing``: ``topic_listing``."""
    listing = topic_listing(directory) if listing is None else listing
    return [replace(s, offset=None, named_by=QUEUE_ID) for t, entries in listing for s in folder_entries(t, _named_by_queue_id, entries)[1]]


def _named_by_queue_id(entry: os.DirEntry) -> bool:
    return queue_id_of(entry.name) is not None


class QueueDirectory(NamedTuple):
    """A directory under a topic's folder whose name ``loadConsumeQueue`` takes a queue id from (``queue_id_of``)."""

    topic: str
    queue_id: int
    path: Path

    @property
    def read(self) -> bool:
        """Whether the broker reads the queue here: it reads ``<topic>/<id>``, so ``01`` or ``+1`` is never read."""
        return self.path.name == str(self.queue_id)


def queue_directories(directory: Path, listing: TopicListing | None = None) -> list[QueueDirectory]:
    """Every directory under a ``<topic>/`` of ``directory`` the broker's load takes a queue id from, by path."""
    listing = topic_listing(directory) if listing is None else listing
    return [QueueDirectory(t.name, queue_id, Path(e.path)) for t, entries in listing for e in entries
            if e.is_dir() and (queue_id := queue_id_of(e.name)) is not None]


def queue_path_files(directory: Path, listing: TopicListing | None = None) -> list[Path]:
    """Each non-directory at ``<topic>/<id>``: an empty queue whose dispatch fails, then every put (@3.2.6, 4.9.7, 5.3.3)."""
    listing = topic_listing(directory) if listing is None else listing
    return [Path(e.path) for _, entries in listing for e in entries if not e.is_dir() and e.name == str(queue_id_of(e.name))]


def discover_queues(directory: Path, file_size: int, kind: type[FileQueue] = ConsumeQueue, found: list[QueueDirectory] | None = None) -> list:
    """Every queue (of ``kind``) the broker loads under ``directory``, by topic and id (``queue_directories`` or ``found``), each
    read at ``<topic>/<id>`` (``01`` never read; ``putConsumeQueue`` replaces a second), none where a file stands there."""
    found = queue_directories(directory) if found is None else found
    loaded = {(d.topic, d.queue_id) for d in found if d.read or not os.path.lexists(directory / d.topic / str(d.queue_id))}
    return [kind(topic, queue_id, directory / topic / str(queue_id), file_size) for topic, queue_id in sorted(loaded)]
