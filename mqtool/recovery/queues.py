"""One consume queue through the broker's recovery, simulated without writing, in broker order: ``recover`` (§5.7, §8.9),
``place`` (``putMessagePositionInfo``, §5.10), ``truncate`` (``truncateDirtyLogicFiles``, §5.8: stale units below the cut come
back), ``min_offset`` (``correctMinOffset``, §5.9). The plan writes files holding exactly the broker's bytes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..errors import Refused
from ..formats import consumequeue as cqfmt
from ..scratch import scratch_file, short_write, working_file_error
from ..store.consumequeue import UNIT_DTYPE, ConsumeQueue, read_units, units_are
from ..store.mappedfile import offset_file_name
from ..store.originals import OriginalFiles
from ..store.rules import VersionRules
from ..dispatch.placement import S_FILL_FROM, S_FILL_TO, S_MAX_PHYS, S_WRITE, QueueState, place_units
from .plans import MisplacedEntry, QueueFile

if TYPE_CHECKING:
    from ..store import Store

ENTRY = cqfmt.ENTRY_SIZE


@dataclass
class QueueSim:
    PRUNE_EVERY: ClassVar[int] = 1 << 16  # placed units added between two prunes to the first and last file
    topic: str
    queue_id: int
    directory: Path
    file_size: int
    dedup_by_end: bool = True  # maxPhysicOffset is offset + size (4.5.0+), else the offset (rules §3.1-§3.5)
    repeat_guard: bool = True  # "Build consume queue repeatedly" skips (4.2.0+, §3.3)
    exists: bool = False  # the queue's directory exists (the broker loads it)
    original: dict[int, Path] = field(default_factory=dict)
    files: dict[int, str] = field(default_factory=dict)  # base -> "original" | "new"; an original file not in it is deleted
    state: np.ndarray = field(default_factory=lambda: QueueState().as_array())
    recovered_end: int = 0
    recovered_max_phys: int = -1
    dropped_units: int = 0  # non-zero units after the recovered end that the broker ignores
    added: int = 0
    fillers: int = 0
    first_added: tuple[int, int] | None = None  # (queue offset, phys offset)
    last_added: tuple[int, int] | None = None
    cut_units: int = 0  # units removed by truncateDirtyLogicFiles
    resurrected_units: int = 0  # stale units past the write position it brings back
    _chunks: list[tuple[int, np.ndarray, np.ndarray]] = field(default_factory=list)  # placed runs (first pos, phys, size): consecutive units
    _overlay: set[int] = field(default_factory=set)  # bases with dispatched units or fillers
    _kept: int = 0  # placed units held in _chunks
    _spilled: list[tuple[int, int, int]] = field(default_factory=list)  # runs moved to SPILL, in placing order: (first pos, where, units)
    differs: bool = False  # a unit placed with its tags code (``place(..., tags)``) is not the original file's unit there
    _originals: OriginalFiles = field(default_factory=OriginalFiles, repr=False, compare=False)  # the original files ``_compare`` reads
    keep_placed: bool = False  # prune to SPILL every file's placed units, not only the first and last's (``units_in`` reads them all)
    misplaced: list[MisplacedEntry] = field(default_factory=list)  # units placed away from their QUEUEOFFSET (``QueuePlan.misplaced``)

    # ---- 1. recovery ------------------------------------------------------------------------

    @classmethod
    def load(cls, queue: ConsumeQueue, *, rules: VersionRules | None = None) -> "QueueSim":
        """The queue after ``ConsumeQueue.recover`` under ``rules`` (default: the newest broker's)."""
        sim = cls.new(queue.topic, queue.queue_id, queue.directory, queue.file_size, rules=rules)
        sim.exists = True
        sim.original = dict(queue.files)
        recovered = queue.recover()  # ConsumeQueue.recover (§5.7)
        sim.recovered_end, sim.recovered_max_phys = recovered.end, recovered.max_physic_offset(sim.dedup_by_end)
        for base in sim.original:
            if base <= sim.recovered_end:  # truncateDirtyFiles: files wholly after the end are deleted
                sim.files[base] = "original"
        sim.dropped_units = sim._nonzero_units_from(sim.recovered_end)
        if sim.files:
            sim.state[S_WRITE] = sim.recovered_end
        sim.state[S_MAX_PHYS] = sim.recovered_max_phys
        return sim

    @classmethod
    def new(cls, topic: str, queue_id: int, directory: Path, file_size: int, *, rules: VersionRules | None = None) -> "QueueSim":
        """A queue placing as ``putMessagePositionInfo`` under ``rules`` (default: the newest broker's; §3.1-§3.3)."""
        put_rules = (True, True) if rules is None else (rules.cq_dedup_by_end, rules.cq_repeat_guard)
        return cls(topic, queue_id, directory, file_size, *put_rules)

    @classmethod
    def of_store(cls, store: "Store", topic: str, queue_id: int, *, rules: VersionRules) -> "QueueSim":
        """A queue the dispatch creates in ``consumequeue/<topic>/<id>``; refused unless one directory (rules §3.12)."""
        if not topic or "/" in topic or "\0" in topic or topic in (".", ".."):
            raise Refused(f"the broker would write queue {topic!r} {queue_id} at consumequeue/{topic}/{queue_id}, which is not a queue "
                          f"directory of its own (the name is empty, a dot directory or holds '/'); mqtool does not write there")
        return cls.new(topic, queue_id, store.path("consumequeue", topic, str(queue_id)), store.consume_queue_file_size, rules=rules)

    def _view(self, base: int) -> np.ndarray:
        """The units of original file ``base``, a short file read as zeros to the configured size."""
        units = read_units(self.original[base], self.file_size)
        if units.shape[0] < self.file_size // ENTRY:
            units = np.concatenate([units, np.zeros(self.file_size // ENTRY - units.shape[0], dtype=UNIT_DTYPE)])
        return units

    def _nonzero_units_from(self, logical: int) -> int:
        return sum(self._nonzero_units(base, max(0, logical - base)) for base in self.original if base + self.file_size > logical)

    def _nonzero_units(self, base: int, pos: int) -> int:
        """Non-zero units of original file ``base`` from position ``pos`` in it on."""
        tail = self._view(base)[pos // ENTRY :]
        return int(np.count_nonzero((tail["phys_offset"] != 0) | (tail["size"] != 0) | (tail["tags_code"] != 0)))

    def entries_from(self, phys_offset: int) -> list[tuple[int, int, int]]:
        """``(queue offset, phys offset, size)`` of the recovered entries (no fillers) at or past ``phys_offset``."""
        out = []
        for base in sorted((b for b in self.original if b < self.recovered_end), reverse=True):
            units = self._view(base)[: (min(self.recovered_end, base + self.file_size) - base) // ENTRY]
            real = (units["phys_offset"] >= 0) & (units["size"] > 0) & ~cqfmt.is_filler(units["phys_offset"], units["size"], units["tags_code"])
            for i in np.flatnonzero(real & (units["phys_offset"] >= phys_offset))[::-1].tolist():
                out.append(((base // ENTRY) + i, int(units["phys_offset"][i]), int(units["size"][i])))
            if units.shape[0] and real[0] and units["phys_offset"][0] < phys_offset:
                break
        return out[::-1]

    # ---- 2. dispatch ------------------------------------------------------------------------

    @property
    def queue_state(self) -> QueueState:
        return QueueState(None if self.state[S_WRITE] < 0 else int(self.state[S_WRITE]), int(self.state[S_MAX_PHYS]))

    def place(self, qoff: np.ndarray, phys: np.ndarray, size: np.ndarray, tags: np.ndarray | None = None) -> int:
        """``putMessagePositionInfo`` of one queue's records; returns units placed (with ``tags``: compared, ``differs``)."""
        pos = np.empty(qoff.shape[0], dtype=np.int64)
        self.state[S_FILL_FROM] = -1
        placed = place_units(qoff, phys, size, self.state, self.file_size, self.dedup_by_end, self.repeat_guard, pos)
        if self.state[S_FILL_FROM] >= 0:
            start, count = int(self.state[S_FILL_FROM]), int(self.state[S_FILL_TO] - self.state[S_FILL_FROM]) // ENTRY
            self.fillers += count
            self._new_file(start - start % self.file_size)
            self._chunks.append((start, np.zeros(count, dtype=np.int64), np.full(count, cqfmt.FILLER[1], dtype=np.int32)))
            if tags is not None:
                self._compare(start, self._chunks[-1][1], self._chunks[-1][2], np.full(count, cqfmt.FILLER[2], dtype=np.int64))
        if not placed:
            return 0
        keep = slice(None) if placed == qoff.shape[0] else pos >= 0  # the usual case: every unit placed, no mask to apply
        kp, kq, kphys, ksize = pos[keep], qoff[keep], phys[keep].astype(np.int64), size[keep].astype(np.int32)  # copies: the batch is not kept
        ktags = tags[keep] if tags is not None else None
        if ktags is not None:
            self._compare(int(kp[0]), kphys, ksize, ktags)
        away = np.flatnonzero(kp != kq * ENTRY)  # written at the write position, not at the record's QUEUEOFFSET
        self.misplaced += [MisplacedEntry(int(kp[i]) // ENTRY, int(kphys[i]), int(kq[i])) for i in away.tolist()]
        if self.first_added is None:
            self.first_added = (int(kq[0]), int(kphys[0]))
        self.last_added = (int(kq[-1]), int(kphys[-1]))
        self.added += placed
        for base in range(int(kp[0] - kp[0] % self.file_size), int(kp[-1]) + 1, self.file_size):  # positions are consecutive
            self._new_file(base)
        self._chunks.append((int(kp[0]), kphys, ksize))  # placed positions are consecutive
        self._kept += placed
        if self._kept > self.PRUNE_EVERY:  # memory: at most PRUNE_EVERY units
            self._prune()
        return placed

    def _compare(self, start: int, phys: np.ndarray, size: np.ndarray, tags: np.ndarray) -> None:
        """``differs`` once a unit placed from ``start`` on is not the original file's unit there."""
        at, end = start, start + len(phys) * ENTRY
        phys, size, tags = (np.ascontiguousarray(a, dtype=t) for a, t in ((phys, np.int64), (size, np.int32), (tags, np.int64)))
        while not self.differs and at < end:
            base = at - at % self.file_size
            if base not in self.original:
                self.differs = True
                break
            j = (at - start) // ENTRY
            k = max((min(end, base + self.file_size) - start) // ENTRY, j + 1)  # (a unit never crosses a file: sizes are whole units)
            self.differs = not units_are(self._originals.file(self.original[base]), at - base, phys[j:k], size[j:k], tags[j:k])
            at = start + k * ENTRY
        if self.differs:
            self._originals.close()  # nothing more to compare

    def equals_original(self) -> bool:
        """Whether the rebuilt files hold the original files' bytes: same files and sizes, only the placed units."""
        return (bool(self.original) and not self.differs and set(self.files) == set(self.original)
                and all(p.stat().st_size == self.file_size for p in self.original.values()) and self._nonzero_units_from(0) == self.added + self.fillers)

    def _prune(self) -> None:
        """Keep placed units only where later steps read them, spilled, at most ``PRUNE_EVERY`` in memory."""
        keep = sorted(self.files) if self.keep_placed else sorted({min(self.files), max(self.files)})
        kept = [part for chunk in self._chunks for base in keep for part in [_clip(chunk, base, base + self.file_size)] if part is not None]
        self._spilled += [(start, SPILL.put(phys, size), len(phys)) for start, phys, size in kept]  # in placing order
        self._chunks = []
        self._kept = 0

    def _new_file(self, base: int) -> None:
        self._overlay.add(base)
        if base not in self.files:
            self.files[base] = "new"

    # ---- 3. truncateDirtyLogicFiles ---------------------------------------------------------

    def _file_units(self, base: int, count: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(phys, size) of the first ``count`` units of file ``base`` as the broker's buffer holds them."""
        count = self.file_size // ENTRY if count is None else count
        if self.files.get(base) == "original":
            units = self._view(base)[:count]
            phys, size = units["phys_offset"].astype(np.int64), units["size"].astype(np.int64)
        else:
            phys = np.zeros(count, dtype=np.int64)
            size = np.zeros(count, dtype=np.int64)
        spilled = [(start, *SPILL.get(where, n)) for start, where, n in self._spilled if base <= start < base + count * ENTRY]
        for chunk in spilled + self._chunks:
            part = _clip(chunk, base, base + count * ENTRY)
            if part is not None:
                at = (part[0] - base) // ENTRY
                phys[at : at + len(part[1])], size[at : at + len(part[1])] = part[1], part[2]
        return phys, size

    def truncate(self, phy_offset: int) -> None:
        """``truncateDirtyLogicFiles(phyOffset)``: from 4.5.0 maxPhysicOffset follows offset + size from ``phyOffset``; up to
        4.4.0 offset alone from ``phyOffset - 1`` (rules §3.5)."""
        before = self.state[S_WRITE]
        self.state[S_MAX_PHYS] = phy_offset if self.dedup_by_end else phy_offset - 1
        while self.files:
            base = max(self.files)
            phys, size = self._file_units(base)
            if phys[0] >= phy_offset:
                self._delete(base)
                continue
            bad = (phys[1:] < 0) | (size[1:] <= 0) | (phys[1:] >= phy_offset)
            stop = int(np.argmax(bad)) + 1 if bad.any() else phys.shape[0]
            self.state[S_WRITE] = base + stop * ENTRY
            self.state[S_MAX_PHYS] = phys[stop - 1] + (size[stop - 1] if self.dedup_by_end else 0)
            break
        else:
            self.state[S_WRITE] = -1
        after = self.state[S_WRITE]
        if before >= 0 and after >= 0:
            if after < before:
                self.cut_units += int(before - after) // ENTRY
            else:
                self.resurrected_units += int(after - before) // ENTRY

    def destroy(self) -> None:
        """``destroyLogics`` (§8.10): every file of the queue deleted, nothing written."""
        for base in list(self.files):
            self._delete(base)
        self.state[S_WRITE] = -1

    def _delete(self, base: int) -> None:
        kind = self.files.pop(base)
        self._overlay.discard(base)
        self._chunks = [part for chunk in self._chunks for lo, hi in ((-1, base), (base + self.file_size, 1 << 62)) for part in [_clip(chunk, lo, hi)] if part is not None]
        self._spilled = [run for run in self._spilled if not base <= run[0] < base + self.file_size]
        if kind == "original":
            self.cut_units += int(np.count_nonzero(self._view(base)["size"] != 0))

    # ---- results ----------------------------------------------------------------------------

    @property
    def end(self) -> int:
        """Logical byte offset after the last unit the broker's queue holds (0 if no file)."""
        return max(int(self.state[S_WRITE]), 0)

    @property
    def max_offset(self) -> int:
        return self.end // ENTRY

    def fates(self) -> list[QueueFile]:
        """The file operations that leave exactly the broker's queue on disk: ``delete``, or the file's
        own bytes (``rewrite``) or zeros (``create``) cleared from ``zero_from``, the placed units over it."""
        out = []
        end = self.end
        for base in sorted(set(self.original) | set(self.files)):
            kind = self.files.get(base)
            zero_from = min(max(end - base, 0), self.file_size)
            if kind is None:
                out.append(QueueFile(offset_file_name(base), "delete"))
            elif kind == "new":
                out.append(QueueFile(offset_file_name(base), "create", zero_from))
            elif (base in self._overlay or self.original[base].stat().st_size != self.file_size
                  or (zero_from < self.file_size and self._nonzero_units(base, zero_from) > 0)):  # placed units, stale ones, or its length
                out.append(QueueFile(offset_file_name(base), "rewrite", zero_from))
        return out

    @property
    def placed_from(self) -> int | None:
        """Logical byte offset of the first placed unit (filler or dispatched) the queue still holds, None if none."""
        starts = [start for start, _, _ in self._chunks] + [start for start, _, _ in self._spilled]
        return min(starts) if starts else None

    def units_in(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        """(phys, size) of the units served at ``[lo, hi)`` after every step (complete only with ``keep_placed``)."""
        lo, hi = max(lo - lo % ENTRY, 0), min(hi, self.end)
        phys, size = np.zeros(max(hi - lo, 0) // ENTRY, dtype=np.int64), np.zeros(max(hi - lo, 0) // ENTRY, dtype=np.int64)
        for base in range(lo - lo % self.file_size, hi, self.file_size):
            if base not in self.files:
                continue
            a, b = max(lo, base), min(hi, base + self.file_size)
            file_phys, file_size = self._file_units(base, (b - base) // ENTRY)
            phys[(a - lo) // ENTRY : (b - lo) // ENTRY] = file_phys[(a - base) // ENTRY :]
            size[(a - lo) // ENTRY : (b - lo) // ENTRY] = file_size[(a - base) // ENTRY :]
        return phys, size

    def min_offset(self, commitlog_min_offset: int, *, v5: bool) -> int:
        """``correctMinOffset(commitLog.minOffset)`` as the next load computes it (§5.9): the first unit
        of the first file at or above the log's min, else 0; 5.x: empty if its last unit is below it."""
        end = self.end
        if not self.files or end <= 0:
            return 0
        if v5:
            last = end - ENTRY
            base = last - last % self.file_size
            phys, _ = self._file_units(base, (last - base) // ENTRY + 1)
            if phys[-1] < commitlog_min_offset:
                return end // ENTRY
        first = min(self.files)
        phys, _ = self._file_units(first, min(end - first, self.file_size) // ENTRY)
        hits = phys >= commitlog_min_offset
        return first // ENTRY + int(np.argmax(hits)) if hits.any() else 0


class UnitSpill:
    """Placed units of the first and last files, out of memory: one unnamed temporary file of the process."""

    def __init__(self):
        self._file = None
        self._end = 0

    def put(self, phys: np.ndarray, size: np.ndarray) -> int:
        where = self._end
        blocks = [np.ascontiguousarray(phys, dtype="<i8"), np.ascontiguousarray(size, dtype="<i4")]  # copies only if needed
        try:
            if self._file is None:
                self._file = scratch_file("mqtool-queue-units-")
            written = os.pwritev(self._file.fileno(), blocks, where)
            if written != 12 * len(phys):
                raise short_write()
        except OSError as exc:
            raise working_file_error(exc) from exc
        self._end += written
        return where

    def get(self, where: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        data = os.pread(self._file.fileno(), 12 * n, where)
        return np.frombuffer(data, "<i8", n).astype(np.int64), np.frombuffer(data, "<i4", n, 8 * n).astype(np.int32)


SPILL = UnitSpill()


def _clip(chunk: tuple[int, np.ndarray, np.ndarray], lo: int, hi: int) -> tuple[int, np.ndarray, np.ndarray] | None:
    """The units of a run of consecutive placed units that lie in logical positions ``[lo, hi)`` (None if none)."""
    start, phys, size = chunk
    a = min(max(-(-(lo - start) // ENTRY), 0), len(phys))
    b = min(max(-(-(hi - start) // ENTRY), 0), len(phys))
    if b <= a:
        return None
    if b - a == len(phys):
        return chunk
    return start + a * ENTRY, phys[a:b].copy(), size[a:b].copy()  # copies: a pruned run frees the rest
