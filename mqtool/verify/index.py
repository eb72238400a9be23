"""Index files against themselves and the commit log (reference §6).

Structure, per file (compiled, chunked): every entry's ``prev_index`` must be the entry that
held its hash slot before it (``IndexFile.putKey``), which also makes every chain acyclic and
in range; the slot table must end holding the newest entry of each slot; the header must agree
with the entries (count, begin/end offsets and timestamps, used-slot count from 4.7.1: rules file §5.2).

Against the commit log, in one streaming merge (entries are written in commit log order):
every entry must point at a record whose ``topic#UNIQ_KEY`` or ``topic#key`` hashes to the
entry's hash, with the entry's time difference; every record the broker indexes (all but
ROLLBACK, ``CommitLogDispatcherBuildIndex``; 3.2.6: NOT and PREPARED, KEYS only, rules file §4.2)
must have all its keys in some file. A key indexed twice for a record on a file boundary is the
broker's known quirk and is accepted.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Iterator

from ..jit import interpreted_as, numba
import numpy as np

from ..formats import index as ixfmt
from ..formats.dispatch import indexed_keys, is_indexed
from ..formats.errors import FormatError
from ..formats.hashing import java_string_hash
from ..formats.properties import PropertyKey, split_keys
from ..store import IndexFile, Store
from ..store.index import list_index_files
from ..store.textscan import index_key_hashes, java_hash_states, utf16_units_of
from ..store.words import prefetch
from .commitlog import relative
from .findings import Finding, error, info, warning
from .logstream import LogRecord

CHUNK_ENTRIES = 1 << 16
CHAIN_PREFETCH = 16  # entries: ``check_chains`` asks for a slot this far ahead of its use
ENTRY_DTYPE = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("time_diff", ">i4"), ("prev", ">i4")])


def _check_chains_python(hashes, prevs, first_number, last_seen, slot_num):
    """``check_chains`` over Python integers (interpreted kernels: numpy's scalars are slower)."""
    bad = negative = heads = 0
    first_bad = -1
    for number, (h, prev) in enumerate(zip(hashes.tolist(), prevs.tolist()), first_number):
        if h < 0:
            negative += 1
            continue
        slot = h % slot_num
        if prev != last_seen[slot]:
            bad += 1
            if first_bad < 0:
                first_bad = number
        if prev == 0:
            heads += 1
        last_seen[slot] = number
    return bad, first_bad, negative, heads


@interpreted_as(_check_chains_python)
@numba.njit(cache=True, nogil=True)
def check_chains(hashes, prevs, first_number, last_seen, slot_num):
    """Replay ``putKey``'s slot updates over a chunk of entries.

    Returns (entries whose prev is not their slot's previous entry, first such entry number,
    entries with a negative hash, entries that started a slot chain). The slots are read at
    random (tens of MB of them): each is asked for ``CHAIN_PREFETCH`` entries ahead."""
    bad = 0
    first_bad = -1
    negative = 0
    heads = 0
    n = hashes.shape[0]
    for i in range(n):
        if i + CHAIN_PREFETCH < n and hashes[i + CHAIN_PREFETCH] >= 0:
            prefetch(last_seen, np.int64(hashes[i + CHAIN_PREFETCH]) % slot_num)
        number = first_number + i
        h = np.int64(hashes[i])
        if h < 0:
            negative += 1
            continue
        slot = h % slot_num
        if np.int64(prevs[i]) != last_seen[slot]:
            bad += 1
            if first_bad < 0:
                first_bad = number
        if prevs[i] == 0:
            heads += 1
        last_seen[slot] = number
    return bad, first_bad, negative, heads


def _index_hashes_numpy(units, starts, ends, prefixes, out):
    """``index_hashes`` over every key at once (interpreted kernels)."""
    out[:] = index_key_hashes(java_hash_states(units, starts, ends, prefixes))


@interpreted_as(_index_hashes_numpy)
@numba.njit(cache=True, nogil=True)
def index_hashes(units, starts, ends, prefixes, out):
    """``IndexFile.indexKeyHashMethod`` of many keys at once: Java's ``String.hashCode`` of
    ``topic#key`` (``prefixes[i]`` = the hash of ``topic#``, continued over the key's UTF-16
    units ``units[starts[i]:ends[i]]``), then ``abs`` with MIN_VALUE mapped to 0 (§6.4)."""
    for i in range(starts.shape[0]):
        h = prefixes[i]
        for j in range(starts[i], ends[i]):
            h = (31 * h + np.int64(units[j])) & 0xFFFFFFFF
        if h >= 0x80000000:
            h = (np.int64(1) << 32) - h
        out[i] = 0 if h > 0x7FFFFFFF else h


def key_hashes(prefixed_keys: list[tuple[int, str]]) -> np.ndarray:
    """``index_key_hash(topic + "#" + key)`` for ``(java_string_hash(topic + "#"), key)`` pairs."""
    n = len(prefixed_keys)
    out = np.empty(n, dtype=np.int64)
    if not n:
        return out
    units, starts, ends = utf16_units_of([key for _, key in prefixed_keys])
    prefixes = np.fromiter((p & 0xFFFFFFFF for p, _ in prefixed_keys), dtype=np.int64, count=n)
    index_hashes(units, starts, ends, prefixes, out)
    return out


class IndexEntries:
    """One file's entries in order, ``CHUNK_ENTRIES`` at a time, with the structural checks."""

    def __init__(self, check: "IndexCheck", file: IndexFile, position: int):
        self.check, self.file, self.position = check, file, position
        self.header = file.header
        self.geometry = file.geometry
        self.count = max(min(self.header.index_count, self.geometry.index_num) - 1, 0)
        self.name = relative(check.store, file.path)

    def __iter__(self) -> Iterator[tuple[int, int, int, int, int]]:
        """(entry number, hash, phy offset, time diff, prev) for entries 1 .. index_count - 1;
        the structural findings once they are exhausted."""
        for number, chunk, _ in self.chunks():
            for i, (h, phy, diff, prev) in enumerate(chunk.tolist()):
                yield number + i, h, phy, diff, prev
        self.check.structure(self, *self.state)

    def chunks(self) -> Iterator[tuple[int, np.ndarray, tuple[np.ndarray, np.ndarray]]]:
        """(first entry number, entries, (their hashes, their prevs) as int64) ``CHUNK_ENTRIES``
        at a time, replaying the hash chains as they are read; ``state`` holds the chain results
        once they are exhausted."""
        slots = self.geometry.hash_slot_num
        last_seen = np.zeros(slots, dtype=np.int32)  # entry numbers fit: index_num <= INT32_MAX
        bad = negative = heads = 0
        first_bad = -1
        fd = os.open(self.file.path, os.O_RDONLY)
        try:
            number = 1
            while number <= self.count:
                n = min(CHUNK_ENTRIES, self.count + 1 - number)
                raw = os.pread(fd, n * ixfmt.ENTRY_SIZE, ixfmt.entry_position(slots, number))
                chunk = np.frombuffer(raw[: len(raw) - len(raw) % ixfmt.ENTRY_SIZE], dtype=ENTRY_DTYPE)
                if not len(chunk):
                    break
                hashes, prevs = chunk["hash"].astype(np.int64), chunk["prev"].astype(np.int64)
                b, fb, neg, hd = check_chains(hashes, prevs, number, last_seen, slots)
                bad, negative, heads = bad + b, negative + neg, heads + hd
                if first_bad < 0 and fb >= 0:
                    first_bad = fb
                yield number, chunk, (hashes, prevs)
                number += len(chunk)
            raw = os.pread(fd, slots * ixfmt.SLOT_SIZE, ixfmt.HEADER_SIZE).ljust(slots * ixfmt.SLOT_SIZE, b"\0")  # a truncated file reads as zeros
            table = np.frombuffer(raw, dtype=">i4")
        finally:
            os.close(fd)
        self.state = (bad, first_bad, negative, heads, last_seen, table)


class IndexCheck:
    """Feed ``on_record`` every valid record in offset order, then ``finish``."""

    def __init__(self, store: Store, *, lower: int, upper: int | None, logical_end: int, abort_present: bool, index_msg_timestamp: int | None):
        self.store = store
        self.lower, self.upper, self.logical_end = lower, upper, logical_end
        self.files = store.index_files if store.unreadable_index is None else []
        self.version = store.version
        self._out: list[Finding] = []
        self.entries = 0
        self.enabled = store.config.message_index_enable
        self.index_rule = store.rules.index_rule  # which records and keys buildIndex indexes (rules file §4.2)
        self._files_meta: list[IndexEntries] = []
        for position, f in enumerate(self.files):
            expected = f.geometry.file_size
            if f.size != expected:
                self.emit(
                    error(
                        "index-file-size",
                        f"index file {f.name} is {f.size} bytes, the geometry (maxHashSlotNum {f.geometry.hash_slot_num}, maxIndexNum "
                        f"{f.geometry.index_num}) needs {expected}: the broker maps it with its configured size",
                        file=relative(store, f.path),
                        expected=expected,
                        found=f.size,
                    )
                )
            if abort_present and index_msg_timestamp is not None and f.header.end_timestamp > index_msg_timestamp:
                self.emit(
                    warning(
                        "index-file-dropped",
                        f"index file {f.name} ends at store time {f.header.end_timestamp}, after the checkpoint's indexMsgTimestamp "
                        f"{index_msg_timestamp}: with the abort file present the broker deletes it on its next start (IndexService.load) "
                        "and rebuilds entries only for the records its abnormal recovery re-dispatches",
                        file=relative(store, f.path),
                        expected=f"<= {index_msg_timestamp}",
                        found=f.header.end_timestamp,
                    )
                )
            self._files_meta.append(IndexEntries(self, f, position))
        if store.unreadable_index is not None:
            for path in list_index_files(store.path("index")):
                size = path.stat().st_size
                self.emit(error("index-file-size", f"index file {path.name} is {size} bytes and no index file shows the geometry the broker maps it with "
                                f"(maxHashSlotNum, maxIndexNum): its entries are not checked; pass --broker-config to check them",
                                file=relative(store, path), found=size))
        self._start_entries()
        self.missing: list | None = None  # [first offset, last offset, records]
        self.dangling: dict[str, list] = {}
        self.beyond: dict[str, list] = {}
        self._prefixes: dict[str, int] = {}
        self._indexed: dict[int, bool] = {}
        self.duplicates = 0

    def emit(self, finding: Finding) -> None:
        self._out.append(finding)

    def take(self) -> list[Finding]:
        out, self._out = self._out, []
        return out

    def _start_entries(self) -> None:
        """Set ``head`` to the first entry of the first file (``_advance`` moves it on)."""
        self._entries = self._all_entries()
        self.head = next(self._entries, None)

    def _all_entries(self):
        for meta in self._files_meta:
            for number, h, phy, diff, prev in meta:
                self.entries += 1
                yield meta, number, h, phy, diff, prev

    def _advance(self) -> None:
        self.head = next(self._entries, None)

    # ---- the merge ----

    def keys_of(self, record: LogRecord) -> list[str]:
        """Keys ``buildIndex`` puts for a record, in put order: UNIQ_KEY, then KEYS (§6.5)."""
        indexed = self._indexed.get(record.sys_flag)
        if indexed is None:
            indexed = self._indexed[record.sys_flag] = is_indexed(record.sys_flag, self.index_rule)
        if not indexed:
            return []
        props = record.properties
        return indexed_keys(record.sys_flag, props.get(PropertyKey.UNIQ_KEY), split_keys(props.get(PropertyKey.KEYS)), self.index_rule)

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

    def on_record(self, record: LogRecord, expected: list[int] | None = None) -> None:
        while self.head is not None and self.head[3] < record.offset:
            self._stray(self.head)
            self._advance()
        found: list[tuple] = []
        while self.head is not None and self.head[3] == record.offset:
            found.append(self.head)
            self._advance()
        if not self.enabled:
            return
        if expected is None:
            expected = key_hashes([(java_string_hash(record.topic + "#"), k) for k in self.keys_of(record)]).tolist()
        if not expected and not found:
            return
        if len(found) == len(expected) and sorted(e[2] for e in found) == sorted(expected):
            self._check_times(record, found)
            self._close_missing()
            return
        counts = Counter(entry[2] for entry in found)
        want = Counter(expected)
        extra = [e for e in found if e[2] not in want]
        for entry in extra:
            meta, number = entry[0], entry[1]
            self.emit(
                error(
                    "index-entry-mismatch",
                    f"index file {meta.file.name} entry {number} points to the record at {record.offset} ({record.topic}) but its hash "
                    f"{entry[2]} matches none of the record's keys: key queries return the wrong message",
                    file=meta.name,
                    offset=record.offset,
                    expected=sorted(want),
                    found=entry[2],
                    details={"entry": number},
                )
            )
        self._check_times(record, [e for e in found if e[2] in want])
        lacking = sum(max(want[h] - counts[h], 0) for h in want)
        self.duplicates += sum(max(counts[h] - want[h], 0) for h in want)
        if lacking:
            if self.missing is None:
                self.missing = [record.offset, record.offset, 1, lacking]
            else:
                self.missing[1], self.missing[2], self.missing[3] = record.offset, self.missing[2] + 1, self.missing[3] + lacking
        else:
            self._close_missing()

    def _check_times(self, record: LogRecord, entries: list[tuple]) -> None:
        for meta, number, _h, _phy, diff, _prev in entries:
            begin = meta.header.begin_timestamp
            expected = ixfmt.time_diff_seconds(record.store_timestamp, begin)
            if diff == expected:
                continue
            if number == 1 and meta.position > 0:
                previous_end = self.files[meta.position - 1].header.end_timestamp
                if diff == ixfmt.time_diff_seconds(record.store_timestamp, previous_end):
                    continue  # the first entry of a file is timed against the previous file's end (§6.6)
            self.emit(
                warning(
                    "index-entry-mismatch",
                    f"index file {meta.file.name} entry {number} for the record at {record.offset} has time difference {diff} s, the "
                    f"record's store time gives {expected} s: time-bounded key queries may miss it",
                    file=meta.name,
                    offset=record.offset,
                    expected=expected,
                    found=diff,
                    details={"entry": number, "field": "time_diff"},
                )
            )

    def _stray(self, entry) -> None:
        meta, number, h, phy, diff, prev = entry
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
        self.emit(
            warning(
                "index-keys-missing",
                f"{keys} keys of {records} records in [{first}, {last}] are in no index file: queryMessage by key or UNIQ_KEY "
                "will not find them (rebuild-index restores them)",
                offset=first,
                expected=f"{keys} index entries",
                found="none",
                details={"first_offset": first, "last_offset": last, "records": records, "keys": keys},
            )
        )

    def finish(self) -> None:
        while self.head is not None:
            if self.upper is not None and self.head[3] >= self.upper:
                # drain for the structural checks without judging entries outside the range
                self._advance()
                continue
            self._stray(self.head)
            self._advance()
        self._close_missing()
        for name, (meta, first, last, phy, count) in self.dangling.items():
            self.emit(
                error(
                    "index-entry-dangling",
                    f"index file {meta.file.name}: {count} entries ({first}..{last}) point where no record starts (first: {phy}): key "
                    "queries return offsets the broker cannot read",
                    file=name,
                    offset=phy,
                    expected="the start of a record",
                    found="no record",
                    details={"first_entry": first, "last_entry": last, "entries": count},
                )
            )
        for name, (meta, first, last, phy, count) in self.beyond.items():
            self.emit(
                warning(
                    "index-entry-beyond-end",
                    f"index file {meta.file.name}: {count} entries ({first}..{last}) point at or past the commit log's logical end "
                    f"{self.logical_end}: the broker never truncates index files, so key queries return offsets it cannot read",
                    file=name,
                    offset=phy,
                    expected=f"< {self.logical_end}",
                    found=phy,
                    details={"first_entry": first, "last_entry": last, "entries": count},
                )
            )
        if self.duplicates:
            self.emit(
                info(
                    "index-entry-mismatch",
                    f"{self.duplicates} keys are indexed twice for the same record: the broker re-indexes the record that ends an index "
                    "file when it rolls over (known quirk; queries may return the offset twice)",
                    details={"duplicates": self.duplicates},
                )
            )

    # ---- per-file structure (called when a file's entries are exhausted) ----

    def structure(self, meta: IndexEntries, bad: int, first_bad: int, negative: int, heads: int, last_seen, table) -> None:
        f, header = meta.file, meta.header
        name = meta.name
        if header.index_count > f.geometry.index_num or header.index_count < 0:
            self.emit(error("index-header", f"index file {f.name}: indexCount {header.index_count} exceeds maxIndexNum {f.geometry.index_num}", file=name, expected=f"<= {f.geometry.index_num}", found=header.index_count))
        if bad or negative:
            self.emit(
                error(
                    "index-chain",
                    f"index file {f.name}: {bad} entries do not link to the previous entry of their hash slot (first: entry {first_bad}) "
                    f"and {negative} have a negative hash: key queries walking these chains stop early or return wrong offsets",
                    file=name,
                    expected=0,
                    found=bad + negative,
                    details={"first_entry": first_bad, "bad_prev": bad, "negative_hash": negative},
                )
            )
        if len(table) == len(last_seen):
            wrong = np.flatnonzero(table != last_seen)
            if len(wrong):
                slot = int(wrong[0])
                self.emit(
                    error(
                        "index-chain",
                        f"index file {f.name}: {len(wrong)} hash slots do not hold the newest entry of their chain (first: slot {slot} holds "
                        f"{int(table[slot])}, the entries say {int(last_seen[slot])}): key queries start from the wrong entry",
                        file=name,
                        expected=int(last_seen[slot]),
                        found=int(table[slot]),
                        details={"slots": len(wrong), "first_slot": slot},
                    )
                )
        if self.version is not None and meta.count:
            expected_slots = heads if self.store.rules.index_counts_used_slots else meta.count
            if header.hash_slot_count != expected_slots:
                self.emit(
                    info(
                        "index-header",
                        f"index file {f.name}: header hashSlotCount is {header.hash_slot_count}, the entries give {expected_slots} "
                        "(informational only for the broker)",
                        file=name,
                        expected=expected_slots,
                        found=header.hash_slot_count,
                    )
                )
        if meta.count:
            self._header_against_entries(meta)

    def _header_against_entries(self, meta: IndexEntries) -> None:
        f, header = meta.file, meta.header
        first, last = f.entry(1), f.entry(meta.count)
        checks = [("beginPhyOffset", first.phy_offset, header.begin_phy_offset), ("endPhyOffset", last.phy_offset, header.end_phy_offset)]
        for label, entry in (("beginTimestamp", first), ("endTimestamp", last)):
            try:
                record = self.store.commitlog.read_record(entry.phy_offset)
            except (FormatError, LookupError):
                continue
            ts = getattr(record, "store_timestamp", None)
            if ts is not None:
                checks.append((label, ts, header.begin_timestamp if label == "beginTimestamp" else header.end_timestamp))
        for label, expected, found in checks:
            if expected != found:
                self.emit(
                    warning(
                        "index-header",
                        f"index file {f.name}: header {label} is {found}, its entries say {expected} (time-bounded queries and the "
                        "broker's index clean-up use these values)",
                        file=meta.name,
                        expected=expected,
                        found=found,
                        details={"field": label},
                    )
                )
        nxt = meta.count + 1
        if nxt < f.geometry.index_num and ixfmt.entry_position(f.geometry.hash_slot_num, nxt) + ixfmt.ENTRY_SIZE <= f.size:
            if any(f.entry(nxt)[1:]):
                self.emit(
                    warning(
                        "index-header",
                        f"index file {f.name}: entry {nxt} after indexCount holds data: the header was not written back after the last "
                        "puts, so the broker does not see those entries",
                        file=meta.name,
                        expected=0,
                        found=nxt,
                        details={"field": "indexCount"},
                    )
                )
