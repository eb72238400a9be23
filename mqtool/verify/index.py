"""Index files against themselves and the commit log (reference §6).

Structure, per file (compiled, chunked): every ``prev_index`` is the entry that held its slot
before (``IndexFile.putKey``), the slot table holds each slot's newest entry, the header agrees
with the entries (used slots from 4.7.1: rules file §5.2). Against the commit log, in one
streaming merge: every entry points at a record with a matching key hash and time difference,
and every record the broker indexes (``CommitLogDispatcherBuildIndex``; 3.2.6: rules file §4.2)
has all its keys in some file (a key indexed twice on a file boundary is the broker's quirk).

A walk batch is first matched compiled (``on_columns``: ``entries_match``, §6.4-§6.6); anything
else returns False before any state changed and is reported record by record (``on_batch``)."""

from __future__ import annotations

import os
from collections import Counter, deque
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator

import numpy as np

from ..formats import index as ixfmt
from ..formats.dispatch import indexed_keys, is_indexed
from ..formats.errors import FormatError
from ..formats.hashing import java_string_hash
from ..formats.properties import PropertyKey, split_keys
from ..store import IndexFile, Store
from ..store.index import list_index_files
from ..store.mappedfile import INDEX_SERVICE, MappedFile, open_read_only
from ..store.textscan import index_key_hashes, java_hash_states, utf16_units_of
from ._index import entries_match, first_beyond, read_entries, slots_differ
from ..store.redispatch import dispatching_recovery
from .commitlog import relative, stray_finding
from .findings import Finding, FindingSink, error, info, warning
from .logstream import LogRecord

if TYPE_CHECKING:
    from .columns import RecordColumns

_indexed = lru_cache(256)(is_indexed)  # by SYSFLAG and rule, for the records reported one by one
CHUNK_ENTRIES = 1 << 16
MAX_LOOKAHEAD = 1 << 18  # entries peeked for one batch (about 8 MB) before it is reported record by record
_EMPTY = np.empty(0, dtype=np.int64)


def key_hashes(prefixed_keys: list[tuple[int, str]]) -> np.ndarray:
    """``index_key_hash(topic + "#" + key)`` for ``(java_string_hash(topic + "#"), key)`` pairs."""
    n = len(prefixed_keys)
    if not n:
        return np.empty(0, dtype=np.int64)
    units, starts, ends = utf16_units_of([key for _, key in prefixed_keys])
    prefixes = np.fromiter((p & 0xFFFFFFFF for p, _ in prefixed_keys), dtype=np.int64, count=n)
    return index_key_hashes(java_hash_states(units, starts, ends, prefixes))


class IndexEntries:
    """One file's entries in order, ``CHUNK_ENTRIES`` at a time, with the structural checks."""

    def __init__(self, check: "IndexCheck", file: IndexFile, position: int):
        self.check, self.file, self.position = check, file, position
        self.header = file.header
        self.geometry = file.geometry
        self.count = max(min(self.header.index_count, self.geometry.index_num) - 1, 0)
        self.name = relative(check.store, file.path)

    def chunks(self) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray, np.ndarray]]]:
        """(first entry number, (hashes, offsets, time diffs) as int64) ``CHUNK_ENTRIES`` at a
        time (``read_entries``, which replays the hash chains as it reads); ``state`` holds the
        chain results once they are exhausted."""
        slots = self.geometry.hash_slot_num
        # entry numbers fit: index_num <= INT32_MAX. Zeroed in order (``full``, not ``zeros``): pages left to be
        # faulted in by the replay's random writes cost several times more, and more again beside the walk's faults
        last_seen = np.full(slots, 0, dtype=np.int32)
        bad = negative = heads = 0
        first_bad = -1
        fd = open_read_only(self.file.path)
        try:
            number = 1
            while number <= self.count:
                n = min(CHUNK_ENTRIES, self.count + 1 - number)
                raw = os.pread(fd, n * ixfmt.ENTRY_SIZE, ixfmt.entry_position(slots, number))
                n = len(raw) // ixfmt.ENTRY_SIZE
                if not n:
                    break
                columns = tuple(np.empty(n, dtype=np.int64) for _ in range(3))
                b, fb, neg, hd = read_entries(np.frombuffer(raw, dtype=np.uint8), number, last_seen, slots, *columns)
                bad, negative, heads = bad + b, negative + neg, heads + hd
                if first_bad < 0 and fb >= 0:
                    first_bad = fb
                yield number, columns
                number += n
        finally:
            os.close(fd)
        with MappedFile(self.file.path) as mf, memoryview(mf.buf)[ixfmt.HEADER_SIZE : ixfmt.HEADER_SIZE + slots * ixfmt.SLOT_SIZE] as table:
            wrong = slots_differ(table, last_seen)  # the view released before the map closes
        self.state = (bad, first_bad, negative, heads, last_seen, wrong)


class _Chunk:
    """Entries ``number .. number + len - 1`` of one file, or the end of a file (``end``: no
    entries; passing it runs the file's structural checks)."""

    __slots__ = ("meta", "number", "hash", "phy", "diff", "end")

    def __init__(self, meta: IndexEntries, number: int, columns: tuple | None):
        self.meta, self.number = meta, number
        self.end = columns is None
        self.hash, self.phy, self.diff = (_EMPTY,) * 3 if columns is None else columns

    def __len__(self) -> int:
        return self.phy.shape[0]

    def entry(self, i: int) -> tuple:
        return (self.meta, self.number + i, int(self.hash[i]), int(self.phy[i]), int(self.diff[i]))


class IndexEntryCursor:
    """The entries of every file in order (``head``: (meta, number, hash, phy, time diff)),
    read as arrays; ``passed``: entries the head has moved past."""

    def __init__(self, check: "IndexCheck"):
        self.check = check
        self._gen = self._chunks()
        self._loaded: deque[_Chunk] = deque()
        self._i = 0
        self.passed = 0
        self.head: tuple | None = None
        self._settle()

    def _chunks(self):
        for meta in self.check._files_meta:
            for number, columns in meta.chunks():
                yield _Chunk(meta, number, columns)
            yield _Chunk(meta, 0, None)

    def _load(self) -> bool:
        chunk = next(self._gen, None)
        if chunk is not None:
            self._loaded.append(chunk)
        return chunk is not None

    def _settle(self) -> None:
        """Pass the ends of the files the head has left (their structural checks), set ``head``."""
        while True:
            if not self._loaded and not self._load():
                self.head = None
                return
            chunk = self._loaded[0]
            if self._i < len(chunk):
                self.head = chunk.entry(self._i)
                return
            self._loaded.popleft()
            self._i = 0
            if chunk.end:
                self.check.structure(chunk.meta, *chunk.meta.state)

    def skip(self, n: int) -> None:
        while n > 0 and self.head is not None:
            chunk = self._loaded[0]
            step = min(n, len(chunk) - self._i)
            self._i += step
            self.passed += step
            n -= step
            self._settle()

    def skip_below(self, limit: int) -> None:
        """Move the head past the leading entries that point below ``limit``."""
        while self.head is not None and self.head[3] < limit:
            chunk = self._loaded[0]
            self.skip(first_beyond(chunk.phy, self._i, limit, True) - self._i)

    def peek_until(self, limit: int) -> tuple[list[tuple[_Chunk, int, int]], bool]:
        """The entries from the head up to the first one pointing past ``limit`` (not included),
        as (chunk, lo, hi) slices; False when more than ``MAX_LOOKAHEAD`` are that far."""
        slices, seen, c = [], 0, 0
        while True:
            if c >= len(self._loaded) and not self._load():
                return slices, True
            chunk = self._loaded[c]
            lo = self._i if c == 0 else 0
            hi = first_beyond(chunk.phy, lo, limit, False)
            if hi > lo:
                slices.append((chunk, lo, hi))
                seen += hi - lo
            if hi < len(chunk):
                return slices, True
            if seen > MAX_LOOKAHEAD:
                return slices, False
            c += 1


class IndexCheck(FindingSink):
    """Feed every batch of valid records in offset order (``on_columns``, or ``on_batch`` when
    the join declines it), then ``finish``. ``files``: the index files it reads (None: the store's)."""

    def __init__(self, store: Store, *, lower: int, upper: int | None, logical_end: int, abort_present: bool, index_msg_timestamp: int | None,
                 files=None):
        self.store = store
        self.lower, self.upper, self.logical_end = lower, upper, logical_end
        self.files = (store.index_files if files is None else list(files)) if store.unreadable_index is None else []
        self.version = store.version
        self._out: list[Finding] = []
        self.enabled = store.config.message_index_enable
        self.index_rule = store.rules.index_rule  # which records and keys buildIndex indexes (rules file §4.2)
        self._files_meta: list[IndexEntries] = []
        rebuilt = ("rebuilds entries only for the records its abnormal recovery re-dispatches" if dispatching_recovery(store) == "abnormal"
                   else "rebuilds none: its recovery re-dispatches no record (DLedgerCommitLog before 5.2.0)") if abort_present else ""
        for position, f in enumerate(self.files):
            expected = f.geometry.file_size
            if f.size != expected:
                self.emit(error(
                    "index-file-size",
                    f"index file {f.name} is {f.size} bytes, the geometry (maxHashSlotNum {f.geometry.hash_slot_num}, maxIndexNum "
                    f"{f.geometry.index_num}) needs {expected}: the broker maps it with its configured size", file=relative(store, f.path),
                    expected=expected, found=f.size))
            if abort_present and index_msg_timestamp is not None and f.header.end_timestamp > index_msg_timestamp:
                self.emit(warning(
                    "index-file-dropped",
                    f"index file {f.name} ends at store time {f.header.end_timestamp}, after the checkpoint's indexMsgTimestamp "
                    f"{index_msg_timestamp}: with the abort file present the broker deletes it on its next start (IndexService.load) "
                    f"and {rebuilt}", file=relative(store, f.path), expected=f"<= {index_msg_timestamp}", found=f.header.end_timestamp))
            self._files_meta.append(IndexEntries(self, f, position))
        for entry, file_size, later in store.index_strays:  # IndexService.load lists every entry (mappedfile.load_effect)
            self.emit(stray_finding(store, "index-stray-entry", entry, file_size, later, "index file", "index/", loader=INDEX_SERVICE))
        if store.unreadable_index is not None:
            for path in list_index_files(store.path("index")):
                size = path.stat().st_size
                self.emit(error("index-file-size", f"index file {path.name} is {size} bytes and no index file shows the geometry the broker maps it with "
                                f"(maxHashSlotNum, maxIndexNum): its entries are not checked; pass --broker-config to check them",
                                file=relative(store, path), found=size))
        self._cursor = IndexEntryCursor(self)
        self.missing: list | None = None  # [first offset, last offset, records, keys] of records lacking keys (``_keys_missing``)
        self.dangling: dict[str, list] = {}
        self.beyond: dict[str, list] = {}
        self._prefixes: dict[str, int] = {}
        self.duplicates = 0

    @property
    def head(self) -> tuple | None:
        return self._cursor.head

    @property
    def entries(self) -> int:
        """Entries read so far: those passed and the head."""
        return self._cursor.passed + (self.head is not None)

    # ---- the merge ----

    def keys_of(self, record: LogRecord) -> list[str]:
        """Keys ``buildIndex`` puts for a record, in put order: UNIQ_KEY, then KEYS (§6.5)."""
        if not _indexed(record.sys_flag, self.index_rule):
            return []
        props = record.properties
        return indexed_keys(record.sys_flag, props.get(PropertyKey.UNIQ_KEY), split_keys(props.get(PropertyKey.KEYS)), self.index_rule)

    def on_columns(self, columns: "RecordColumns") -> bool:
        """Check one batch; False (nothing done) when it must be reported record by record."""
        offsets = columns.offsets
        # entries below the checked range lead (expired, or before --from-offset): ``_stray``
        # passes them over without a finding, so they are skipped in bulk
        self._cursor.skip_below(self.lower)
        slices, complete = self._cursor.peek_until(int(offsets[-1]))
        if not complete:
            return False
        counts = columns.key_counts
        if not slices:
            if not self.enabled:
                return True
            with_keys = np.flatnonzero(counts)
            if len(with_keys):
                self._keys_missing(int(offsets[with_keys[0]]), int(offsets[with_keys[-1]]), len(with_keys), int(counts.sum()))
            return True
        if not self.enabled or self.missing is not None:
            return False
        if len(slices) == 1:  # the usual case: views of one chunk
            chunk, lo, hi = slices[0]
            phy, hashes, diffs = chunk.phy[lo:hi], chunk.hash[lo:hi], chunk.diff[lo:hi]
        else:
            phy, hashes, diffs = (np.concatenate([getattr(c, column)[lo:hi] for c, lo, hi in slices]) for column in ("phy", "hash", "diff"))
        begins = np.asarray([c.meta.header.begin_timestamp for c, _, _ in slices], dtype=np.int64)
        ends = np.cumsum([hi - lo for _, lo, hi in slices])
        match, skipped = entries_match(phy, hashes, diffs, begins, ends, offsets, counts, columns.keys, columns.store_ts, self.lower)
        if match < 0:
            return False
        if match == 1:  # the keys not in put order: compare each record's keys as a multiset
            at = np.searchsorted(offsets, phy[skipped:])
            owners = np.repeat(np.arange(len(offsets)), counts)
            if not np.array_equal(np.sort(at * (1 << 32) + hashes[skipped:]), np.sort(owners * (1 << 32) + columns.keys)):
                return False
        self._cursor.skip(sum(hi - lo for _, lo, hi in slices))
        return True

    def on_batch(self, records: list[LogRecord]) -> None:
        """``on_record`` for a batch, hashing all its keys in one compiled call."""
        per_record = [self.keys_of(r) for r in records]
        pairs = []
        for record, keys in zip(records, per_record):
            if keys:
                prefix = self._prefixes.get(record.topic)
                if prefix is None:
                    prefix = self._prefixes[record.topic] = java_string_hash(record.topic + "#")
                pairs.extend((prefix, k) for k in keys)
        hashes = key_hashes(pairs).tolist()
        at = 0
        for record, keys in zip(records, per_record):
            self.on_record(record, hashes[at : at + len(keys)])
            at += len(keys)

    def on_record(self, record: LogRecord, expected: list[int]) -> None:
        """One record against the entries pointing at it; ``expected``: its keys' hashes."""
        while self.head is not None and self.head[3] < record.offset:
            self._stray(self.head)
            self._cursor.skip(1)
        found: list[tuple] = []
        while self.head is not None and self.head[3] == record.offset:
            found.append(self.head)
            self._cursor.skip(1)
        if not self.enabled or not expected and not found:
            return
        if len(found) == len(expected) and sorted(e[2] for e in found) == sorted(expected):
            self._check_times(record, found)
            self._close_missing()
            return
        counts, want = Counter(entry[2] for entry in found), Counter(expected)
        for meta, number, h, *_ in (e for e in found if e[2] not in want):
            self.emit(error(
                "index-entry-mismatch",
                f"index file {meta.file.name} entry {number} points to the record at {record.offset} ({record.topic}) but its hash "
                f"{h} matches none of the record's keys: key queries return the wrong message", file=meta.name, offset=record.offset,
                expected=sorted(want), found=h, details={"entry": number}))
        self._check_times(record, [e for e in found if e[2] in want])
        lacking = sum(max(want[h] - counts[h], 0) for h in want)
        self.duplicates += sum(max(counts[h] - want[h], 0) for h in want)
        if lacking:
            self._keys_missing(record.offset, record.offset, 1, lacking)
        else:
            self._close_missing()

    def _keys_missing(self, first: int, last: int, records: int, keys: int) -> None:
        """Records ``[first, last]`` lack ``keys`` keys: the run ``_close_missing`` reports is opened or extended."""
        run = self.missing
        self.missing = [first, last, records, keys] if run is None else [run[0], last, run[2] + records, run[3] + keys]

    def _check_times(self, record: LogRecord, entries: list[tuple]) -> None:
        for meta, number, _h, _phy, diff in entries:
            begin = meta.header.begin_timestamp
            expected = ixfmt.time_diff_seconds(record.store_timestamp, begin)
            if diff == expected:
                continue
            if number == 1 and meta.position > 0:
                previous_end = self.files[meta.position - 1].header.end_timestamp
                if diff == ixfmt.time_diff_seconds(record.store_timestamp, previous_end):
                    continue  # the first entry of a file is timed against the previous file's end (§6.6)
            self.emit(warning(
                "index-entry-mismatch",
                f"index file {meta.file.name} entry {number} for the record at {record.offset} has time difference {diff} s, the "
                f"record's store time gives {expected} s: time-bounded key queries may miss it", file=meta.name, offset=record.offset,
                expected=expected, found=diff, details={"entry": number, "field": "time_diff"}))

    def _stray(self, entry) -> None:
        meta, number, h, phy, diff = entry
        if phy < self.lower:
            return  # expired below the commit log min, or before --from-offset
        bucket = self.beyond if phy >= self.logical_end else self.dangling
        run = bucket.get(meta.name)
        if run is None:
            bucket[meta.name] = [meta, number, number, phy, 1]
        else:
            run[2], run[4] = number, run[4] + 1

    def _close_missing(self) -> None:
        if self.missing is None:
            return
        first, last, records, keys = self.missing
        self.missing = None
        self.emit(warning("index-keys-missing",
                          f"{keys} keys of {records} records in [{first}, {last}] are in no index file: queryMessage by key or UNIQ_KEY "
                          "will not find them (rebuild-index restores them)", offset=first, expected=f"{keys} index entries", found="none",
                          details={"first_offset": first, "last_offset": last, "records": records, "keys": keys}))

    def finish(self) -> None:
        while self.head is not None:  # drained for the structural checks; entries outside the range not judged
            if self.upper is None or self.head[3] < self.upper:
                self._stray(self.head)
            self._cursor.skip(1)
        self._close_missing()
        end = self.logical_end
        runs = [(run, error, "index-entry-dangling", f"point where no record starts (first: {run[3]}): key queries return offsets the "
                 "broker cannot read", "the start of a record", "no record") for run in self.dangling.values()]
        runs += [(run, warning, "index-entry-beyond-end", f"point at or past the commit log's logical end {end}: the broker never "
                  "truncates index files, so key queries return offsets it cannot read", f"< {end}", run[3])
                 for run in self.beyond.values()]
        for (meta, first, last, phy, count), make, kind, what, expected, found in runs:
            self.emit(make(kind, f"index file {meta.file.name}: {count} entries ({first}..{last}) {what}", file=meta.name, offset=phy,
                           expected=expected, found=found, details={"first_entry": first, "last_entry": last, "entries": count}))
        if self.duplicates:
            self.emit(info(
                "index-entry-mismatch",
                f"{self.duplicates} keys are indexed twice for the same record: the broker re-indexes the record that ends an index "
                "file when it rolls over (known quirk; queries may return the offset twice)", details={"duplicates": self.duplicates}))

    # ---- per-file structure (called when a file's entries are exhausted) ----

    def structure(self, meta: IndexEntries, bad: int, first_bad: int, negative: int, heads: int, last_seen, wrong: tuple[int, int, int]) -> None:
        f, header = meta.file, meta.header
        name = meta.name
        if header.index_count > f.geometry.index_num or header.index_count < 0:
            self.emit(error("index-header", f"index file {f.name}: indexCount {header.index_count} exceeds maxIndexNum {f.geometry.index_num}", file=name, expected=f"<= {f.geometry.index_num}", found=header.index_count))
        if bad or negative:
            self.emit(error(
                "index-chain",
                f"index file {f.name}: {bad} entries do not link to the previous entry of their hash slot (first: entry {first_bad}) "
                f"and {negative} have a negative hash: key queries walking these chains stop early or return wrong offsets", file=name,
                expected=0, found=bad + negative, details={"first_entry": first_bad, "bad_prev": bad, "negative_hash": negative}))
        slots, slot, held = wrong  # ``slots_differ``
        if slots:
            self.emit(error(
                "index-chain",
                f"index file {f.name}: {slots} hash slots do not hold the newest entry of their chain (first: slot {slot} holds "
                f"{held}, the entries say {int(last_seen[slot])}): key queries start from the wrong entry", file=name,
                expected=int(last_seen[slot]), found=held, details={"slots": slots, "first_slot": slot}))
        if not meta.count:
            return
        expected_slots = heads if self.store.rules.index_counts_used_slots else meta.count
        if self.version is not None and header.hash_slot_count != expected_slots:
            self.emit(info("index-header", f"index file {f.name}: header hashSlotCount is {header.hash_slot_count}, the entries give "
                           f"{expected_slots} (informational only for the broker)", file=name, expected=expected_slots, found=header.hash_slot_count))
        first, last = f.entry(1), f.entry(meta.count)
        checks = [("beginPhyOffset", first.phy_offset, header.begin_phy_offset), ("endPhyOffset", last.phy_offset, header.end_phy_offset)]
        for label, entry, stated in (("beginTimestamp", first, header.begin_timestamp), ("endTimestamp", last, header.end_timestamp)):
            try:
                record = self.store.commitlog.read_record(entry.phy_offset)
            except (FormatError, LookupError):
                continue
            ts = getattr(record, "store_timestamp", None)
            if ts is not None:
                checks.append((label, ts, stated))
        for label, expected, found in checks:
            if expected != found:
                self.emit(warning(
                    "index-header",
                    f"index file {f.name}: header {label} is {found}, its entries say {expected} (time-bounded queries and the "
                    "broker's index clean-up use these values)", file=name, expected=expected, found=found, details={"field": label}))
        nxt = meta.count + 1
        if nxt < f.geometry.index_num and ixfmt.entry_position(f.geometry.hash_slot_num, nxt) + ixfmt.ENTRY_SIZE <= f.size:
            if any(f.entry(nxt)[1:]):
                self.emit(warning(
                    "index-header",
                    f"index file {f.name}: entry {nxt} after indexCount holds data: the header was not written back after the last "
                    "puts, so the broker does not see those entries", file=name, expected=0, found=nxt,
                    details={"field": "indexCount"}))
