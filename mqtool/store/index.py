"""Index files and the broker's key lookup (reference §6); without broker.conf the geometry is inferred from slot chains."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import BadStoreFile
from ..formats import hashing
from ..formats import index as fmt
from ..formats.dispatch import java_int_or_none
from .mappedfile import MappedFile, StrayEntry, created_through, folder_entries

LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class IndexGeometry:
    hash_slot_num: int
    index_num: int

    @property
    def file_size(self) -> int:
        return fmt.index_file_size(self.hash_slot_num, self.index_num)


class IndexFile:
    """One index file mapped read-only with the broker's geometry; a truncated file's missing bytes read as zeros."""

    def __init__(self, path: Path, geometry: IndexGeometry):
        self.path = Path(path)
        self.name = self.path.name
        self.geometry = geometry
        self._mf = MappedFile(self.path)
        self.header = fmt.read_header(bytes(self._mf.buf[: fmt.HEADER_SIZE]).ljust(fmt.HEADER_SIZE, b"\0"))

    @property
    def size(self) -> int:
        return self._mf.size

    def close(self) -> None:
        self._mf.close()

    def slot(self, slot: int) -> int:
        pos = fmt.slot_position(slot)
        if pos + fmt.SLOT_SIZE > self.size:
            return 0  # beyond a truncated file: zeros, as the broker's full-size map reads
        return fmt.SLOT.unpack_from(self._mf.buf, pos)[0]

    def _in_file(self, number: int) -> bool:
        return 0 < number < self.geometry.index_num and fmt.entry_position(self.geometry.hash_slot_num, number) + fmt.ENTRY_SIZE <= self.size

    def entry(self, number: int) -> fmt.IndexEntry:
        pos = fmt.entry_position(self.geometry.hash_slot_num, number)
        if pos + fmt.ENTRY_SIZE > self.size:
            return fmt.IndexEntry(number, 0, 0, 0, 0)  # beyond a truncated file: zeros
        return fmt.IndexEntry(number, *fmt.ENTRY.unpack_from(self._mf.buf, pos))

    def entries(self) -> Iterator[fmt.IndexEntry]:
        """Entries 1 .. index_count - 1, in write order."""
        for number in range(1, min(self.header.index_count, self.geometry.index_num)):
            if not self._in_file(number):
                return
            yield self.entry(number)

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.header.begin_timestamp, self.header.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def chain(self, key: str, begin: int = 0, end: int = LONG_MAX) -> Iterator[tuple[int, int, int]]:
        """``selectPhyOffset``'s walk of ``key``'s chain: ``(entry, phy offset, time)`` in ``[begin, end]``, collisions too."""
        h = hashing.index_key_hash(key)
        count = self.header.index_count
        number = self.slot(h % self.geometry.hash_slot_num)
        if number <= 0 or number > count or count <= 1:
            return
        while self._in_file(number):
            e = self.entry(number)
            if e.time_diff < 0:
                break
            t = self.header.begin_timestamp + e.time_diff * 1000
            if e.key_hash == h and begin <= t <= end:
                yield number, e.phy_offset, t
            if e.prev_index <= 0 or e.prev_index > count or e.prev_index == number or t < begin:
                break
            number = e.prev_index


def query_entries(files: Iterable[IndexFile], topic: str, key: str, max_num: int = fmt.MAX_QUERY_RESULTS, begin: int = 0, end: int = LONG_MAX) -> list[tuple[IndexFile, int, int, int]]:
    """``IndexService.queryOffset``: newest file first, at most ``min(max_num, 64)`` ``(file, entry, phy offset, time)`` hits."""
    max_num = min(max_num, fmt.MAX_QUERY_RESULTS)
    full_key = fmt.index_key(topic, key)
    out: list[tuple[IndexFile, int, int, int]] = []
    for f in reversed(list(files)):
        for number, phy_offset, t in f.chain(full_key, begin, end) if f.is_time_matched(begin, end) else ():
            if len(out) >= max_num:  # IndexFile.selectPhyOffset
                break
            out.append((f, number, phy_offset, t))
        if f.header.begin_timestamp < begin or len(out) >= max_num:
            break
    return out


def query_offsets(files: Iterable[IndexFile], topic: str, key: str, max_num: int = fmt.MAX_QUERY_RESULTS, begin: int = 0, end: int = LONG_MAX) -> list[int]:
    """``query_entries``' phy offsets."""
    return [phy_offset for _, _, phy_offset, _ in query_entries(files, topic, key, max_num, begin, end)]


def _geometry_fits(buf, slots: int, count: int, probes: int = 16) -> bool:
    """Whether the newest ``probes`` entries are sound and reachable from their slots under this geometry."""
    newest = count - 1
    for number in range(newest, max(0, newest - probes), -1):
        key_hash, _phy, diff, prev = fmt.ENTRY.unpack_from(buf, fmt.entry_position(slots, number))
        if key_hash < 0 or diff < 0 or not 0 <= prev < number:
            return False
        cursor = fmt.SLOT.unpack_from(buf, fmt.slot_position(key_hash % slots))[0]
        for _ in range(probes + 1):
            if cursor == number or not number < cursor <= newest:
                break
            cursor = fmt.ENTRY.unpack_from(buf, fmt.entry_position(slots, cursor))[3]
        if cursor != number:
            return False
    return True


def infer_index_geometry(path: Path) -> IndexGeometry:
    """The geometry fitting the file's size and slot chains (``_geometry_fits``), n = 4 s first."""
    size = os.stat(path).st_size
    if size < fmt.HEADER_SIZE:
        raise BadStoreFile(f"{path}: {size} bytes, too short for an index file")
    body = size - fmt.HEADER_SIZE
    default = [body // 84] if body % 84 == 0 else []
    # 4 s + 20 n == body: s runs over one residue class modulo 5 (10^8 of them at the default size)
    others = range((body // 4) % 5 or 5, body // fmt.SLOT_SIZE + 1, 5) if body % 4 == 0 else range(0)
    with MappedFile(path) as mf:
        count = fmt.read_header(mf.buf).index_count
        for slots in itertools.chain(default, others):
            entries = (body - fmt.SLOT_SIZE * slots) // fmt.ENTRY_SIZE
            if count <= 1 or count <= entries and _geometry_fits(mf.buf, slots, count):  # count <= 1: nothing written, any geometry fits
                return IndexGeometry(slots, entries)
    slots, entries = fmt.DEFAULT_GEOMETRY
    raise BadStoreFile(f"{path}: cannot infer maxHashSlotNum/maxIndexNum from the file (no geometry its size allows fits its entries); pass "
                       f"--broker-config with the broker.conf that sets them (the defaults, {slots} and {entries}, make files of "
                       f"{fmt.index_file_size(slots, entries)} bytes)")


def store_index_geometry(paths: list[Path]) -> IndexGeometry | None:
    """The index geometry without broker.conf, from the newest file showing it; None without files, else ``BadStoreFile``."""
    failure = None
    for path in sorted(paths, key=lambda p: (os.stat(p).st_size, p.name), reverse=True):  # full-size files first
        try:
            return infer_index_geometry(path)
        except BadStoreFile as exc:
            failure = failure or exc
    if failure is not None:
        raise BadStoreFile(f"{str(failure).removesuffix('; pass --broker-config')}, nor from the other {len(paths) - 1} index file(s); pass --broker-config" if len(paths) > 1 else str(failure))
    return None


def _index_name(entry: os.DirEntry) -> int | None:
    """The offset ``Long.parseLong`` reads from the name, or None where it throws (``IndexService.load`` catches it)."""
    return java_int_or_none(entry.name, 64)


def list_index_files(index_dir: Path) -> list[Path]:
    """Index files as ``IndexService.load`` (4.x-5.3.3) loads them, up to the first it cannot open (``index_strays``)."""
    try:
        entries = sorted(os.scandir(index_dir), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = []
    for entry in entries:
        if _index_name(entry) is None:
            continue
        if not entry.is_file():
            if created_through(Path(entry.path)) is not None:
                continue
            break
        files.append(index_dir / entry.name)
    return files


def index_strays(index_dir: Path) -> list[tuple[StrayEntry, None, int]]:
    """``(entry, None, files after it)`` of each ``index_dir`` entry ``IndexService.load`` lists but does not read."""
    if not index_dir.is_dir():
        return []
    files, strays = folder_entries(index_dir, lambda e: _index_name(e) is not None and e.is_file())
    return [(s, None, sum(p.name > s.path.name for _, p in files)) for s in strays]


def index_file_name(store_timestamp_ms: int) -> str:
    """yyyyMMddHHmmssSSS of a time in UTC (``timeMillisToHumanString``), any year, negatives as 0."""
    store_timestamp_ms = max(store_timestamp_ms, 0)
    cycles = store_timestamp_ms // _GREGORIAN_CYCLE_MS - 18  # into years 7170-7570
    ms = store_timestamp_ms - cycles * _GREGORIAN_CYCLE_MS
    t = datetime.fromtimestamp(ms / 1000, timezone.utc)
    return f"{t.year + 400 * cycles:04d}" + t.strftime("%m%d%H%M%S") + f"{ms % 1000:03d}"


_GREGORIAN_CYCLE_MS = 146097 * 86_400_000  # 400 years of the Gregorian calendar


def next_index_name(candidate: str, after: str | None) -> str:
    """``candidate``, or the first name after ``after`` where it would not sort after it (files load in name order)."""
    if after is None or candidate > after:
        return candidate
    try:
        t = datetime.strptime(after[:14], "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc) + timedelta(milliseconds=int(after[14:]) + 1)
        return t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}"
    except ValueError:
        return f"{int(after) + 1:0{len(after)}d}"
