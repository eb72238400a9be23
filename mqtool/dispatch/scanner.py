"""Dispatch a range of the commit log a segment batch at a time (reference §3.2-§3.5, §6.5, §8.3, §8.12)."""

from __future__ import annotations

import os
import queue
import threading
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Iterator, Mapping, NamedTuple

import numpy as np

from .. import activity
from ..formats import commitlog as clfmt
from ..formats.dispatch import (INDEX_NONE, INDEX_UNIQ_AND_KEYS, UNDECIDED_MULTI_DISPATCH, DispatchThrows, LmqNotifyThrows, LmqOffsetThrows,
                                NoPropertiesThrows, dispatch_request, indexed_keys, multi_dispatch_targets, notify_throw)
from ..formats.errors import CorruptRecord
from ..formats.hashing import java_string_hash
from ..handoff import Failure, produced_in_thread
from ..scratch import scratch_file, short_write
from ..store.commitlog import CommitLog, ScanEnd, StopReason
from ..store.consumequeue import has_queue_directory
from ..store.fastscan import FastScan
from ..store.textscan import POW31, java_hash_states, utf16_units_of
from . import fastdispatch as fd, spillrows
from .queuegroups import QueueGroups, group_queues
from .topicnumbers import TopicNumbers

if TYPE_CHECKING:
    from ..store.walkedchain import WalkedChain


def _partial_keys(keys: list[str]) -> np.ndarray:
    """What ``dispatch_rows`` stores for each key: its UTF-16 length << 32 | the Java hash of the key alone."""
    units, starts, ends = utf16_units_of(keys)
    return (ends - starts) << 32 | java_hash_states(units, starts, ends, np.zeros(len(keys), dtype=np.int64))


class TopicTable:
    """Topic ids for topic bytes, one per Java string; ``state[id]``: the unsigned hash state of ``topic + "#"``."""

    def __init__(self):
        self.names: list[str] = []
        self._by_name: dict[str, int] = {}
        self._by_raw: dict[bytes, int] = {}
        self.state = np.empty(0, dtype=np.int64)
        self._lock = threading.Lock()  # segments dispatched in two threads share the table

    def id_of(self, raw: bytes) -> int:
        tid = self._by_raw.get(raw)
        if tid is not None:
            return tid
        with self._lock:
            name = raw.decode("utf-8", "replace")
            tid = self._by_name.get(name)
            if tid is None:
                state = np.append(self.state, java_string_hash(name + "#") & 0xFFFFFFFF)
                self.names.append(name)
                self.state = state  # before the id is handed out: a key hash reads state[id]
                tid = self._by_name[name] = len(self.names) - 1
            self._by_raw[raw] = tid
        return tid


STAGES = {"recovery": "recovery scan", "reput": "dispatch", "served": "rebuild scan"}  # a scan's name on its progress bar


@dataclass
class DispatchBatch:
    """Dispatch requests of consecutive records, a row each: ``F_POS`` the record's offset, ``F_KEY_START`` into ``keys``."""

    fields: np.ndarray  # (n, fd.N_FIELDS) int64
    keys: np.ndarray  # index key hashes
    topic_ids: np.ndarray  # int32, into the scanner's TopicTable
    groups: QueueGroups | None = None  # the consume queue grouping, when already known (a spilled batch)
    spilled: tuple | None = None  # (file, offset, rows, keys, groups) where it is spilled already (``_Ahead``)

    def __len__(self) -> int:
        return self.fields.shape[0]

    def column(self, col: int) -> np.ndarray:
        return self.fields[:, col]

    offsets = property(lambda self: self.column(fd.F_POS))  # where each record was found (commit log offset)
    phys = property(lambda self: self.column(fd.F_PHYS))  # its PHYSICALOFFSET field
    sizes = property(lambda self: self.column(fd.F_SIZE))

    @cached_property
    def to_consume_queue(self) -> np.ndarray:
        """NOT_TYPE and COMMIT records only (``CommitLogDispatcherBuildConsumeQueue``)."""
        tran = self.fields[:, fd.F_SYS_FLAG] & clfmt.TRANSACTION_TYPE_MASK
        return (tran == clfmt.TransactionType.NOT_TYPE) | (tran == clfmt.TransactionType.COMMIT)

    @cached_property
    def to_index(self) -> np.ndarray:
        """Everything but ROLLBACK (``IndexService.buildIndex``)."""
        if self.groups is not None:  # already computed by the queue grouping's pass
            return self.groups.indexed
        tran = self.fields[:, fd.F_SYS_FLAG] & clfmt.TRANSACTION_TYPE_MASK
        return tran != clfmt.TransactionType.ROLLBACK

    @property
    def queue_groups(self) -> QueueGroups:
        """The consume queue rows grouped by queue (``queuegroups``), computed once per batch."""
        if self.groups is None:
            self.groups = group_queues(self.fields, self.topic_ids)
        return self.groups


class SpilledBatch(DispatchBatch):
    """A batch read back from a spill (``read_spilled``) as its column blocks; ``fields`` unpacked only when read."""

    def __init__(self, columns: spillrows.Columns, spilled: tuple | None):
        self._columns = columns
        self._fields: np.ndarray | None = None
        self.keys = columns.key_in.astype(np.int64)
        self.topic_ids = columns.topic_ids
        self.groups = columns.grouped()
        self.spilled = spilled

    @property
    def fields(self) -> np.ndarray:  # type: ignore[override]
        if self._fields is None:
            self._fields = self._columns.unpack()[0]
        return self._fields

    def __len__(self) -> int:
        return self._columns.rows

    def column(self, col: int) -> np.ndarray:
        if col in spillrows.WIDE:
            return self._columns.wide[spillrows.WIDE.index(col)]  # a view of the spill
        if col in spillrows.NARROW:
            return self._columns.narrow[spillrows.NARROW.index(col)].astype(np.int64)
        if col == fd.F_KEY_START:  # the running sum of the key counts, as unpacked
            counts = self.column(fd.F_KEY_COUNT)
            return np.cumsum(counts) - counts
        if col == fd.F_FLAGS:
            return self._columns.flags.astype(np.int64)
        return self.fields[:, col]  # a topic byte column: zero, as unpacked


@dataclass
class DispatchOptions:
    """What decides a record's dispatch request besides its bytes."""

    delay_table: Mapping[int, int]
    legacy_properties: bool = False
    index_enable: int = INDEX_UNIQ_AND_KEYS  # the index rule (``formats.dispatch.INDEX_*``; INDEX_NONE: off)


class _Accumulator:
    """A walk's dispatched rows, handed out as ``DispatchBatch`` es of ``size``; ``numbers``: the walk's topic numbers."""

    def __init__(self, size: int, sub: int, topics: TopicTable):
        self.size, self.sub = size, sub
        self.numbers = TopicNumbers(topics)
        self._fresh()

    def _fresh(self) -> None:
        self.out = np.empty((self.size + self.sub, fd.N_FIELDS), dtype=np.int64)
        self.topic_ids = np.empty(self.size + self.sub, dtype=np.int32)
        self.keys = np.empty(4 * (self.size + self.sub), dtype=np.int64)
        self.n = 0
        self.key_fill = 0

    def reserve_keys(self, extra: int) -> None:
        if self.key_fill + extra > self.keys.shape[0]:
            self.keys = np.concatenate([self.keys, np.empty(max(extra, self.keys.shape[0]), dtype=np.int64)])

    def take(self) -> DispatchBatch:
        """The rows so far, handed over (not copied): the accumulator starts on new buffers."""
        batch = DispatchBatch(self.out[: self.n], self.keys[: self.key_fill], self.topic_ids[: self.n])
        self._fresh()
        return batch


@dataclass
class DispatchScanner:
    """``DispatchBatch`` es over ``[start, stop)``, then ``end``; ``last_valid_offset``: ``lastValidMsgPhyOffset``."""

    SUB_BATCH = 2048
    BATCH = 1 << 15

    commitlog: CommitLog
    start: int
    stop: int | None
    options: DispatchOptions
    discipline: str = "recovery"  # or "reput", "served"
    check_crc: bool = True
    topics: TopicTable = field(default_factory=TopicTable)
    end: ScanEnd | None = None
    last_valid_offset: int = -1
    records: int = 0
    skipped: list[ScanEnd] = field(default_factory=list)  # reput: what it skipped over

    ahead: bool = False  # dispatch the next segment in a second thread meanwhile (``_Ahead``), where ``_parallel``
    shown: "WalkedChain | None" = None  # shown every walked sub-batch before its dispatch (``walkedchain``)

    def __iter__(self) -> Iterator[DispatchBatch]:
        """The batches, walked in a background thread while the caller consumes them, progress told (``activity``)."""
        batches = produced_in_thread(self._produce_ahead() if self._parallel() else self._produce_from(self.start), "mqtool-dispatch")
        yield from activity.reached_by(batches, STAGES[self.discipline], self.start, lambda: self.commitlog.end_of_writes(self.stop))

    def _produce_from(self, pos: int) -> Iterator[DispatchBatch]:
        """The batches from ``pos`` on, segment after segment in this thread."""
        acc = _Accumulator(self.BATCH, self.SUB_BATCH, self.topics)
        while True:
            _, end = yield from self._counted(self._walk(acc, pos, self.stop))
            nxt = self._reput_resume(end)
            if nxt is None:
                if acc.n:
                    yield self._count(acc.take())
                self.end = end
                return
            self.skipped.append(end)
            yield from self._counted(self._loose(acc, end, nxt))
            pos = nxt

    def _loose(self, acc: _Accumulator, end: ScanEnd, nxt: int) -> Iterator[DispatchBatch]:
        """The served record inside a header-broken DLedger entry, walked in its file alone: the reput dispatches it."""
        from ..store.dledgerstart import record_in_broken_entry

        cl = self.commitlog
        at = record_in_broken_entry(cl, end, nxt) if self.discipline == "served" and hasattr(cl, "entry_walker") else None
        if at is not None:
            yield from self._walk(acc, at, nxt, commitlog=cl.file_alone(at))

    def _walk(self, acc: _Accumulator, pos: int, stop: int | None, base: int | None = None, halt: threading.Event | None = None,
              commitlog: CommitLog | None = None) -> Iterator[DispatchBatch]:
        """The chain from ``pos`` dispatched into ``acc``; returns ``(crossed, end)`` (``base``: within that segment)."""
        delay_ms = fd.delay_array(dict(self.options.delay_table))
        scan = FastScan(commitlog or self.commitlog, pos, stop, check_crc=self.check_crc and self.discipline == "recovery",
                        stop_on_crc=True, batch=self.SUB_BATCH, release_behind=True)
        for seg in scan:
            if base is not None and seg.base_offset != base:  # walked on past the segment's blank: its rows are the next job's
                if acc.n:
                    yield acc.take()
                return True, None
            if halt is not None and halt.is_set():
                return False, None
            if self.shown is not None:
                self.shown.rows(seg)
            bad = self._dispatch(acc, seg, delay_ms)
            if (acc.n >= acc.size or bad is not None) and acc.n:
                yield acc.take()
            if bad is not None:
                return False, bad
        return False, scan.end

    def _last_segment(self) -> int | None:
        """The range's last segment index: the last, or the one before ``stop``'s; None if ``stop`` starts none."""
        segments = self.commitlog.segments
        if self.stop is None:
            return len(segments) - 1
        index = self.commitlog.segment_index(self.stop)
        return index - 1 if index is not None and segments[index].base_offset == self.stop else None

    def _parallel(self) -> bool:
        """Whether segments may be dispatched ahead: classic ones of ``AHEAD_MIN_SEGMENT`` bytes or more, before the last."""
        if (not self.ahead or self.discipline == "recovery" and self.stop is not None or self.commitlog.file_size < AHEAD_MIN_SEGMENT
                or getattr(self.commitlog, "entry_walker", None) is not None):
            return False
        index, last = self.commitlog.segment_index(self.start), self._last_segment()
        return index is not None and last is not None and index < last

    def _produce_ahead(self) -> Iterator[DispatchBatch]:
        """The batches in order while the next segment is dispatched ahead (``_Ahead``), kept where the chain crosses."""
        pos, last = self.start, self._last_segment()
        while True:
            crossed, end = yield from self._ahead_run(pos, last)
            if crossed:
                at_stop = FastScan(self.commitlog, self.stop, self.stop)
                for _ in at_stop:
                    pass
                end = at_stop.end
            elif (resume := self._reput_resume(end)) is not None:
                self.skipped.append(end)
                index = self.commitlog.segment_index(resume)
                if index is not None and index < last and self.commitlog.segments[index].base_offset == resume:
                    pos = resume
                    continue
                yield from self._produce_from(resume)
                return
            self.end = end
            return

    def _ahead_run(self, pos: int, last: int) -> Iterator[DispatchBatch]:
        """The chain from ``pos`` to segment ``last``, each next one ahead; returns ``(crossed, end)``."""
        index = self.commitlog.segment_index(pos)
        ahead = _Ahead(self, index + 1) if index < last else None  # ``last`` is a segment's index
        job = None
        try:
            crossed, end = yield from self._counted(self._segment(index, pos))
            while crossed and index < last:
                index += 1
                job, ahead = ahead, _Ahead(self, index + 1) if index < last else None
                crossed, end = yield from self._counted(job.batches())
                job.close()
                job = None
        finally:
            for other in (job, ahead):
                if other is not None:
                    other.close()
        return crossed, end

    def _counted(self, batches) -> Iterator[DispatchBatch]:
        """``batches`` passed on, counted (``_count``); returns their generator's value."""
        while True:
            try:
                batch = next(batches)
            except StopIteration as stop:
                return stop.value
            yield self._count(batch)

    def _count(self, batch: DispatchBatch) -> DispatchBatch:
        self.records += len(batch)
        self.last_valid_offset = int(batch.offsets[-1])
        return batch

    def _segment(self, index: int, pos: int, halt: threading.Event | None = None) -> Iterator[DispatchBatch]:
        """Batches of the chain in segment ``index`` from ``pos``; returns ``_walk``'s ``(crossed, end)``."""
        acc = _Accumulator(self.BATCH, self.SUB_BATCH, self.topics)
        crossed, end = yield from self._walk(acc, pos, None, self.commitlog.segments[index].base_offset, halt)
        if end is not None and acc.n:
            yield acc.take()
        return crossed, end

    def skipped_ranges(self) -> list[tuple[int, int]]:
        """``reput``: each ``[record it could not dispatch, where doReput resumes)`` it skipped over, after iterating."""
        return [(end.offset, self._reput_resume(end)) for end in self.skipped]

    def _reput_resume(self, end: ScanEnd) -> int | None:
        """Where ``doReput`` continues past an undispatchable record (§8.12, rules §2.12), or None (``recovery``)."""
        at_stop = lambda offset: self.stop is not None and offset >= self.stop  # noqa: E731
        past, reason = at_stop(end.offset), end.reason
        ends = past or self.stop is None if reason == StopReason.ZEROS else end.is_clean or reason == StopReason.SEGMENT_END and past
        if self.discipline == "recovery" or ends:
            return None
        if self.discipline == "served":
            nxt = self.commitlog.resume_after_damage(end)
        elif end.reason == StopReason.LENGTH_MISMATCH and end.total_size:
            nxt = end.offset + end.total_size
        else:
            nxt = self.commitlog.next_segment(end.offset)
        return None if nxt is None or at_stop(nxt) else nxt

    # ---- one sub-batch -----------------------------------------------------------------------

    def _dispatch(self, acc: _Accumulator, seg, delay_ms) -> ScanEnd | None:
        rows = seg.rows
        lo = acc.n
        acc.reserve_keys(4 * rows.shape[0] + 64)
        acc.keys, acc.key_fill = fd.dispatch_all(seg.array, rows, self.options.legacy_properties, delay_ms, self.options.index_enable,
                                                 acc.out, lo, acc.keys, acc.key_fill, acc.numbers, acc.topic_ids)
        hi = lo + rows.shape[0]
        bad = None
        fallback = np.flatnonzero(acc.out[lo:hi, fd.F_FLAGS] & fd.FLAG_FALLBACK)
        if fallback.size:
            hi, bad = self._fallback(acc, seg, lo, hi, lo + fallback)
        if hi > lo:  # global topic ids (``topicnumbers``), then the rows' index key hashes (``finish_keys``)
            acc.numbers.number(seg.array, acc.out, lo, hi, acc.topic_ids)
            if self.options.index_enable:
                fd.finish_keys(acc.out, lo, hi, acc.topic_ids, self.topics.state, POW31, acc.keys)
        acc.out[lo:hi, fd.F_POS] += seg.base_offset
        acc.n = hi
        return bad

    def _fallback(self, acc: _Accumulator, seg, lo: int, hi: int, rows_idx) -> tuple[int, ScanEnd | None]:
        """Decide the flagged records with the Python decoder and splice their keys in."""
        array, base, out = seg.array, seg.base_offset, acc.out
        replaced: dict[int, list[str]] = {}
        bad = None
        view = memoryview(array)  # decoded faster than from the array (its slices are cheaper)
        for r in rows_idx.tolist():
            pos = int(out[r, fd.F_POS])
            record = clfmt.decode_record(view, pos, base, array.shape[0])
            try:
                request = dispatch_request(record, self.options.delay_table, legacy_properties=self.options.legacy_properties)
            except CorruptRecord as exc:
                bad, hi = ScanEnd(base + pos, StopReason.CORRUPT, exc.reason, record.total_size), r
                break
            replaced[r] = indexed_keys(request.sys_flag, request.uniq_key, request.keys, self.options.index_enable)
            out[r, fd.F_TAGS] = request.tags_code
            out[r, fd.F_FLAGS] &= ~fd.FLAG_FALLBACK
        key_lo = int(out[lo, fd.F_KEY_START]) if hi > lo else acc.key_fill
        key_hi = int(out[hi - 1, fd.F_KEY_START] + out[hi - 1, fd.F_KEY_COUNT]) if hi > lo else key_lo
        partial = _partial_keys([k for keys in replaced.values() for k in keys])
        pieces, cursor, at = [], key_lo, 0
        for r, keys in replaced.items():  # in row order
            start = int(out[r, fd.F_KEY_START])
            pieces += [acc.keys[cursor:start].copy(), partial[at : at + len(keys)]]
            at += len(keys)
            cursor = start + int(out[r, fd.F_KEY_COUNT])
            out[r, fd.F_KEY_COUNT] = len(keys)
        pieces.append(acc.keys[cursor:key_hi].copy())
        spliced = np.concatenate(pieces) if pieces else np.empty(0, dtype=np.int64)
        acc.key_fill = key_lo
        acc.reserve_keys(spliced.size)
        acc.keys[key_lo : key_lo + spliced.size] = spliced
        acc.key_fill = key_lo + spliced.size
        if hi > lo:
            counts = out[lo:hi, fd.F_KEY_COUNT]
            out[lo:hi, fd.F_KEY_START] = key_lo + np.cumsum(counts) - counts
        return hi, bad


AHEAD_MIN_SEGMENT = 64 << 20  # smaller segments are dispatched in turn: a thread and a spill file cost more than they save


class BatchSpill:
    """Dispatch batches packed (``spillrows``) into a working file, each named by its entry for ``read_spilled``."""

    def __init__(self) -> None:
        self.file = None
        self.nbytes = 0

    def write(self, batch: DispatchBatch) -> tuple | None:
        """The batch's entry, or None when it cannot be packed (a key hash outside int32); a failed write raises ``OSError``."""
        groups = batch.queue_groups
        data = spillrows.pack(batch.fields, batch.topic_ids, batch.keys, groups)
        if data is None:
            return None
        if self.file is None:
            self.file = scratch_file("mqtool-dispatch-")
        if os.pwrite(self.file.fileno(), data.data, self.nbytes) != data.size:
            raise short_write()
        entry = (self.file, self.nbytes, len(batch), batch.keys.size, groups.keys.size)
        self.nbytes += data.size
        return entry


def read_spilled(entry: tuple, *, adopt: bool = False) -> DispatchBatch:
    """The ``SpilledBatch`` named ``entry``; ``adopt``: a ``DispatchCache`` may keep it by that entry (``spilled``)."""
    file, offset, n, n_keys, n_groups = entry
    data = np.empty(spillrows.spill_size(n, n_keys, n_groups), dtype=np.uint8)
    if os.preadv(file.fileno(), [data], offset) != data.size:
        raise OSError("short read from the dispatch spill")
    return SpilledBatch(spillrows.Columns(data, n, n_keys, n_groups), entry if adopt else None)


class _WalkOn(NamedTuple):
    """``_Ahead``'s hand-over where its spill cannot be written: the consumer walks on from ``offset``."""

    offset: int


class _Ahead:
    """One segment dispatched in its own thread, batches spilled and read back in order (``_WalkOn`` without room)."""

    def __init__(self, scanner: DispatchScanner, index: int):
        self.scanner, self.index = scanner, index
        self.channel: queue.SimpleQueue = queue.SimpleQueue()  # ``BatchSpill`` entries (or a DispatchBatch as it is), then StopIteration or handoff.Failure
        self.halt = threading.Event()
        self.spill = BatchSpill()
        self.thread = threading.Thread(target=self._run, name="mqtool-dispatch-ahead", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            base = self.scanner.commitlog.segments[self.index].base_offset
            batches = self.scanner._segment(self.index, base, self.halt)
            while True:
                try:
                    batch = next(batches)
                except StopIteration as stop:  # its value is ``_segment``'s
                    self.channel.put(stop)
                    return
                try:
                    entry = self.spill.write(batch)
                except OSError:
                    batches.close()
                    self.channel.put(batch)
                    self.channel.put(_WalkOn(int(batch.offsets[-1] + batch.sizes[-1])))
                    return
                self.channel.put(entry or batch)
        except BaseException as exc:  # noqa: BLE001 - raised in the consumer if it gets this far
            self.channel.put(Failure(exc))

    def batches(self) -> Iterator[DispatchBatch]:
        """The segment's batches in order as they come; returns ``(crossed, end)``."""
        while True:
            entry = self.channel.get()
            if isinstance(entry, StopIteration):
                return entry.value
            if isinstance(entry, Failure):
                raise entry.exc
            if isinstance(entry, _WalkOn):
                return (yield from self.scanner._segment(self.index, entry.offset))
            yield entry if isinstance(entry, DispatchBatch) else read_spilled(entry, adopt=True)

    def close(self) -> None:
        """Stop the thread (the file stays open while a ``DispatchCache`` holds its batches)."""
        self.halt.set()
        self.thread.join()
        self.spill = None


# ---- dispatch phases (shared by planning and apply) ---------------------------------------


class DispatchCache:
    """A plan's dispatch batches spilled for its apply (one walk); past ``budget`` or without room, none."""

    def __init__(self, budget: int = 2 << 30):
        self.budget = budget
        self.topics = TopicTable()
        self.phases: dict[int, list[tuple]] = {}  # phase -> [(file, file offset, rows, keys, queue groups)]
        self.nbytes = 0
        self.enabled = budget > 0
        self._spill = BatchSpill()

    def add(self, phase: int, batch: DispatchBatch) -> None:
        if not self.enabled:
            return
        keys, groups = batch.keys, batch.queue_groups
        size = spillrows.spill_size(len(batch), keys.size, groups.keys.size)
        if self.nbytes + size > self.budget:
            self._give_up()
            return
        entry = batch.spilled  # spilled already by the thread that dispatched it: adopted as it is
        if entry is None:
            try:
                entry = self._spill.write(batch)
            except OSError:
                pass
        if entry is None:  # unwritable, or a key hash outside int32 (cannot happen for finished hashes): walk again
            self._give_up()
            return
        self.nbytes += size
        self.phases.setdefault(phase, []).append(entry)

    def batches(self, phase: int) -> Iterator[DispatchBatch] | None:
        """The batches of ``phase`` in order, read back in a background thread, or None when the cache gave up."""
        return produced_in_thread((read_spilled(e) for e in self.phases.get(phase, [])), "mqtool-dispatch-cache") if self.enabled else None

    def _give_up(self) -> None:
        self.enabled, self.phases = False, {}
        self.close()

    def close(self) -> None:
        """Close the spill (a spill adopted from ``_Ahead`` closes when its entries are dropped)."""
        if self._spill.file is not None:
            self._spill.file.close()
        self._spill = BatchSpill()


TAGS_DELIVERY_TIME = "delivery-time"
TAGS_HASH = "tags-hash"  # 4.9.2-4.9.8 abnormal recovery: the delay table is not loaded yet


def phase_scanner(commitlog: CommitLog, start: int, stop: int | None, *, discipline: str, tags: str, delay_table: Mapping[int, int],
                  legacy_properties: bool, index_enable: bool, check_crc: bool, topics: TopicTable | None = None,
                  shown: "WalkedChain | None" = None, ahead: bool = False, index_rule: int = INDEX_UNIQ_AND_KEYS) -> DispatchScanner:
    """A scan dispatching from ``start``; ``index_rule`` is the version's (``VersionRules.index_rule``, §4.2)."""
    options = DispatchOptions({} if tags == TAGS_HASH else delay_table, legacy_properties, index_rule if index_enable else INDEX_NONE)
    return DispatchScanner(commitlog, start, stop, options, discipline, check_crc, topics or TopicTable(), shown=shown, ahead=ahead)


def after_phys(batch: DispatchBatch, threshold: int | None) -> DispatchBatch:
    """Only records whose PHYSICALOFFSET is > ``threshold`` (5.3.2+ normal recovery dispatch)."""
    if threshold is None or len(batch) == 0:
        return batch
    keep = batch.phys > threshold
    if keep.all():
        return batch
    idx = np.flatnonzero(keep)
    fields = batch.fields[idx].copy()
    counts = fields[:, fd.F_KEY_COUNT]
    starts = batch.fields[idx, fd.F_KEY_START]
    keys = np.concatenate([batch.keys[s : s + c] for s, c in zip(starts.tolist(), counts.tolist())]) if idx.size else batch.keys[:0]
    fields[:, fd.F_KEY_START] = np.cumsum(counts) - counts
    return DispatchBatch(fields, keys, batch.topic_ids[idx])


class MultiDispatch(NamedTuple):
    """What the LMQ dispatch needs besides a batch: where to read the flagged records, and how."""

    commitlog: CommitLog
    legacy_properties: bool
    rule: int  # which records the release leaves out (``formats.dispatch.LMQ_SKIP_*``, ``VersionRules.lmq_rule``)
    no_properties_npe: bool | None = False  # ``Store.no_properties_npe``: 4.9.3 throws on a record without properties (None: undecided)
    known: bool = True  # multi-dispatch known on (``Store.multi_dispatch_on``), not only what the records ask for: its throws are decided


def consume_queue_entries(batch: DispatchBatch, names: list[str], multi: MultiDispatch | None = None) -> Iterator[tuple[str, int, tuple[np.ndarray, ...]]]:
    """Every consume queue entry of the batch per queue, then the LMQ ones (§3.6); ``DispatchThrows`` where it throws."""
    if len(batch) == 0:
        return
    if multi is not None and multi.no_properties_npe is not False:
        bare = np.flatnonzero((batch.fields[:, fd.F_FLAGS] & fd.FLAG_NO_PROPERTIES).astype(bool) & batch.to_consume_queue)
        if bare.size:
            raise NoPropertiesThrows(int(batch.fields[bare[0], fd.F_PHYS]), undecided=multi.no_properties_npe is None)
    groups = batch.queue_groups
    qoff, phys, size, tags = groups.columns
    starts = groups.starts.tolist()
    for g, key in enumerate(groups.keys.tolist()):
        queue_id = key & 0xFFFFFFFF
        lo, hi = starts[g], starts[g + 1]
        if has_queue_directory(names[key >> 32]):
            yield names[key >> 32], queue_id - (1 << 32) if queue_id >= 1 << 31 else queue_id, (qoff[lo:hi], phys[lo:hi], size[lo:hi], tags[lo:hi])
    if multi is None or not groups.multi_queued:
        return
    rows = np.flatnonzero((batch.fields[:, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH).astype(bool) & batch.to_consume_queue)
    grouped: dict[tuple[str, int], list[tuple[int, int, int, int]]] = {}
    for row in rows.tolist():
        f = batch.fields[row]
        record = multi.commitlog.read_record(int(f[fd.F_POS]))
        properties = record.property_map(legacy=multi.legacy_properties)
        try:
            targets = multi_dispatch_targets(names[int(batch.topic_ids[row])], int(f[fd.F_QUEUE_ID]), properties, rule=multi.rule)
        except LmqOffsetThrows as exc:
            exc.offset, exc.undecided = int(f[fd.F_PHYS]), None if multi.known else UNDECIDED_MULTI_DISPATCH
            raise
        for name, queue_id, queue_offset in targets:
            grouped.setdefault((name, queue_id), []).append((queue_offset, int(f[fd.F_PHYS]), int(f[fd.F_SIZE]), int(f[fd.F_TAGS])))
    for (name, queue_id), entries in grouped.items():
        if has_queue_directory(name):
            columns = np.array(entries, dtype=np.int64).T
            yield name, queue_id, tuple(np.ascontiguousarray(c) for c in columns)


def first_throw(batch: DispatchBatch, names: list[str], multi: MultiDispatch | None, notify: MultiDispatch | None) -> DispatchThrows | None:
    """The first record whose dispatch or reput notify throws, or None; a decided dispatch throw first."""
    thrown = None
    try:
        for _ in consume_queue_entries(batch, names, multi):
            pass
    except DispatchThrows as exc:
        thrown = exc
    notified = first_notify_throw(batch, names, notify) if notify is not None else None
    if thrown is None or notified is None:
        return thrown or notified
    if thrown.offset != notified.offset:
        return thrown if thrown.offset < notified.offset else notified
    return thrown if thrown.undecided is None else notified


def first_notify_throw(batch: DispatchBatch, names: list[str], multi: MultiDispatch) -> LmqNotifyThrows | None:
    """The first record of the batch the reput's notify throws on (``notify_throw``), its ``offset`` set; else None."""
    for row in np.flatnonzero((batch.fields[:, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH).astype(bool)).tolist():
        f = batch.fields[row]
        properties = multi.commitlog.read_record(int(f[fd.F_POS])).property_map(legacy=multi.legacy_properties)
        queued = bool(batch.to_consume_queue[row])
        thrown = notify_throw(names[int(batch.topic_ids[row])], int(f[fd.F_QUEUE_ID]), properties, queued, rule=multi.rule)
        if thrown is not None:
            thrown.offset = int(f[fd.F_PHYS])
            return thrown
    return None
