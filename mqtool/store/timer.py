"""The 5.x timer store, read-only (reference §9): ``timerlog/``, ``timerwheel``, ``config/timercheck``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..formats import timer as fmt
from .rules import ERAS, Era
from .mappedfile import MappedFile, StrayEntry, file_size, folder_entries, inferred_file_size, offset_named_files, wrong_length_files


@dataclass(frozen=True)
class TimerLogEnd:
    """Where the walk of the timer log stopped: ``offset`` (timer log offset) and why."""

    offset: int
    reason: str
    clean: bool


@dataclass
class TimerLog:
    files: list[tuple[int, Path]]
    end: TimerLogEnd | None = None

    def walk(self) -> Iterator[fmt.TimerLogUnit]:
        """Every unit to the log's end, then ``end``: where ``recoverAndRevise`` stops (a blank, a cut unit)."""
        expected = end = self.files[0][0] if self.files else 0
        for base, path in self.files:
            if base != expected:
                self.end = TimerLogEnd(expected, f"no timer log file at offset {expected} (next is {path.name})", False)
                return
            with MappedFile(path, base) as mf:
                buf, size, pos = mf.buf, mf.size, 0
                while size - pos >= fmt.UNIT_SIZE and not fmt.is_blank(buf, pos):
                    unit = fmt.decode_unit(buf, pos)
                    if not unit.is_valid:
                        zeros = not any(bytes(buf[pos : pos + fmt.UNIT_SIZE]))
                        self.end = TimerLogEnd(base + pos, "zeros" if zeros else f"invalid unit (size {unit.size}, magic {unit.magic})", zeros)
                        return
                    yield unit._replace(timer_log_offset=base + pos)
                    pos += fmt.UNIT_SIZE
            expected, end = base + size, base + pos
        self.end = TimerLogEnd(end, "end of the last file", True)


@dataclass
class TimerStore:
    """The timer files of a store; ``TimerStore.open`` returns None when the store has none."""

    root: Path
    log: TimerLog
    wheel_path: Path | None
    check: fmt.TimerCheck | None
    notes: list[str] = field(default_factory=list)

    @classmethod
    def open(cls, root: Path) -> "TimerStore | None":
        log_dir, wheel, check = root / "timerlog", root / "timerwheel", root / "config" / "timercheck"
        if not (log_dir.is_dir() or wheel.exists() or check.exists()):
            return None
        files = offset_named_files(log_dir) if log_dir.is_dir() else []
        decoded = None
        if check.is_file():  # a directory: ``nextstart.open_refusal``
            with MappedFile(check) as mf:
                decoded = fmt.decode_timer_check(mf.buf)
        return cls(root, TimerLog(files), wheel if wheel.is_file() else None, decoded)

    @property
    def wheel_size(self) -> int:
        return file_size(self.wheel_path) if self.wheel_path is not None else 0

    def wheel_slots(self) -> list[fmt.WheelSlot]:
        """The slots of ``timerwheel`` ever used (time field non-zero), in slot order."""
        if self.wheel_path is None:
            return []
        import numpy as np  # the wheel is read as an array; a lookup that never reads it does not load numpy

        with MappedFile(self.wheel_path) as mf:
            if not mf.size:
                return []
            count = mf.size // fmt.SLOT_SIZE
            times = np.frombuffer(mf.buf, dtype=">i8", count=count * 4).reshape(count, 4)[:, 0]
            used = np.flatnonzero(times)
            del times
            return [fmt.decode_slot(mf.buf, int(i)) for i in used]


def timer_eras(eras) -> list[Era]:
    """The eras of ``eras`` with a timer store (5.0.0+: ``TimerMessageStore``); an older broker never loads ``timerlog/``."""
    return [e for e in eras if e.index >= TIMER_ERA.index]


TIMER_ERA = next(e for e in ERAS if e.name == "E13")


def first_pass_start(bases: list[int], check: fmt.TimerCheck | None, file_size: int | None) -> int:
    """Where ``recover``'s first ``recoverAndRevise`` starts: the file of ``lastTimerLogFlushPos`` less a file size."""
    return _file_holding(bases, max(0, (check.last_timer_log_flush_pos if check is not None else 0) - (file_size or 0)))


def _file_holding(bases: list[int], offset: int) -> int:
    """The base of the timer log file (of those at ``bases``, ascending) that holds ``offset``, else of the first (0: none)."""
    return max((b for b in bases if b <= offset), default=bases[0] if bases else 0)


@dataclass(frozen=True)
class RecoveredWheel:
    """The read slots as ``recover`` leaves them: ``own`` units, ``last_pos``, ``read_from`` (``lastReadTimeMs``)."""

    own: dict[int, list[int]]
    last_pos: dict[int, int]
    read_from: int

    def reads(self, slot: fmt.WheelSlot) -> bool:
        """Whether ``dequeue`` is still to read ``slot`` (from ``read_from``); damage in a slot read already is never read."""
        return slot.time_slot >= self.read_from


def recovered_wheel(slots: list[fmt.WheelSlot], units: dict[int, tuple[int, int]], end: int, bases: list[int],
                    check: fmt.TimerCheck | None, file_size: int | None) -> RecoveredWheel:
    """``slots`` after ``recover`` on ``units`` ending at ``end`` (``recoverAndRevise``, then ``checkPhyPos``)."""
    first_pass = first_pass_start(bases, check, file_size)
    shown = Counter(units[s.last_pos][0] // s.time_slot for s in slots if s.last_pos in units and s.time_slot > 0)
    precision = shown.most_common(1)[0][0] if shown else fmt.DEFAULT_PRECISION_MS
    by_time: dict[int, list[int]] = {}
    for pos in sorted(units):
        by_time.setdefault(units[pos][0] // precision, []).append(pos)
    own = {s.slot: by_time.get(s.time_slot, []) for s in slots}
    read_from = (check.last_read_time_ms if check is not None else 0) // precision

    def revised(start: int) -> dict[int, int]:
        return {s.slot: next((p for p in reversed(own[s.slot]) if p >= start), s.last_pos) for s in slots}

    last = revised(first_pass)
    ahead = [s.first_pos for s in slots if last[s.slot] > end and s.time_slot >= read_from]
    if ahead and min(ahead) < end:
        last = revised(min(first_pass, _file_holding(bases, min(ahead))))
    return RecoveredWheel(own, last, read_from)


def chain_break(last_pos: int, units: dict[int, tuple[int, int]], start: int) -> tuple[int | None, int] | None:
    """Where ``dequeue``'s walk of a slot by ``prevPos`` meets no unit, as ``(unit or None, position)``, else None."""
    seen: set[int] = set()
    holder, pos = None, last_pos
    while pos != -1 and pos >= start:
        if pos not in units or pos in seen:
            return holder, pos
        seen.add(pos)
        holder, pos = pos, units[pos][1]
    return None


def cut_at(path: Path) -> int | None:
    """Where a timer log file's bytes show a cut (a unit crossed, or no room for a blank after the last), else None."""
    with MappedFile(path) as mf:
        buf, size = mf.buf, mf.size
        at = size - size % fmt.UNIT_SIZE
        if any(bytes(buf[at:])) and not fmt.is_blank(buf, at):
            return at
        whole = at >= fmt.UNIT_SIZE and fmt.decode_unit(buf, at - fmt.UNIT_SIZE).is_valid
        return size if whole and size - at < fmt.BLANK_SIZE else None


def lone_file_size(path: Path, size: int) -> int:
    """``timerlog/``'s only file's size without broker.conf: its own, or the default where it shows a cut (``cut_at``)."""
    default = fmt.DEFAULT_LOG_FILE_SIZE
    return default if size < default and int(path.name) % default == 0 and cut_at(path) is not None else size


@dataclass(frozen=True)
class TimerLogListing:
    """``timerlog/`` as ``TimerLog.load`` lists it: ``file_size``, wrong-length files and strays."""

    files: list[tuple[int, Path]]
    entries: list[StrayEntry]
    file_size: int | None
    size_from: str = "others"

    @classmethod
    def of(cls, log_dir: Path, configured: int | None = None) -> "TimerLogListing":
        files, entries = folder_entries(log_dir) if log_dir.is_dir() else ([], [])
        if configured is not None:
            return cls(files, entries, configured, "config")
        sized = [(p, n) for _, p in files if (n := file_size(p))]
        if len(sized) == 1:
            size = lone_file_size(*sized[0])
            return cls(files, entries, size, "default" if size != sized[0][1] else "others")
        return cls(files, entries, inferred_file_size([n for _, n in sized]) if sized else None)

    @property
    def fixed_by(self) -> str:
        """What fixes a wrong-length timer log file: repair, with ``--broker-config`` where only the default gives the size."""
        return "; `mqtool repair` fixes it" + (" given --broker-config" if self.size_from == "default" else "")

    @property
    def wrong_lengths(self) -> list[tuple[int, Path, int, bool]]:
        return wrong_length_files(self.files, self.entries, self.file_size)

    @property
    def strays(self) -> list[tuple[StrayEntry, int | None, bool]]:
        """``(entry, the folder's file size, whether a file sorts after it)`` of each entry that is no timer log file."""
        return [(e, self.file_size, any(p.name > e.path.name for _, p in self.files)) for e in self.entries]
