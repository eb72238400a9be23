"""``SurvivorSearch``: which ids survived and whether a consumer can get them (docs/reading.md), in one ``SalvageScan`` pass."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator, Protocol

import numpy as np
import pyarrow as pa

from ..errors import Refused, UsageError
from ..formats.consumequeue import ENTRY_SIZE
from ..formats.dispatch import SCHEDULE_TOPIC
from ..store import Store
from ..store.nextstart import NextStart
from . import compute
from ._stats import string_keys
from .salvage import LIVE, PAST_DAMAGE, STATUSES as REGIONS, SalvageScan

FOUND, NOT_CONSUMABLE, MISSING, DUPLICATED = "found", "found-not-consumable", "missing", "duplicated"
STATUSES = (FOUND, NOT_CONSUMABLE, DUPLICATED, PAST_DAMAGE, MISSING)
_CODE = {status: i for i, status in enumerate(STATUSES)}
ROW_FIELDS = ("id", "status", "offset", "topic", "queue_id", "queue_offset", "store_timestamp", "copies", "consumable")
_HEX_ID = re.compile(r"[0-9A-Fa-f]{32}(?:[0-9A-Fa-f]{24})?")
_SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_", SCHEDULE_TOPIC)


class IdKind(str, enum.Enum):
    uniq_key = "uniq-key"
    msg_id = "msg-id"
    key = "key"

    @property
    def column(self) -> str:
        return {"uniq-key": "uniq_key", "msg-id": "msg_id", "key": "keys"}[self.value]


def detect_kind(ids: list[str], store: Store) -> IdKind:
    """The id form where unambiguous: KEYS, offsetMsgIds (offsets below the log's end) or UNIQ_KEYs."""
    hex_ids = sum(1 for i in ids if _HEX_ID.fullmatch(i))
    if hex_ids == 0:
        return IdKind.key
    if hex_ids < len(ids):
        raise UsageError(f"{hex_ids} of {len(ids)} ids are 32 or 56 hex characters (UNIQ_KEYs or offsetMsgIds), the rest are not: say which with --by uniq-key|msg-id|key")
    inside = sum(1 for i in ids if int(i[-16:], 16) < store.commitlog.end_of_files)
    if inside == len(ids):
        return IdKind.msg_id
    if inside == 0:
        return IdKind.uniq_key
    raise UsageError(f"{inside} of {len(ids)} hex ids look like offsetMsgIds and the rest like UNIQ_KEYs: say which with --by uniq-key|msg-id")


def before_the_log(ids: list[str], store: Store) -> int:
    """How many offsetMsgIds point below the log's min offset: their segments are gone, so they are missing."""
    return sum(1 for i in ids if _HEX_ID.fullmatch(i) and int(i[-16:], 16) < store.commitlog.min_offset)


def string_hashes(arr: pa.Array) -> np.ndarray:
    """``_stats.string_keys`` (the statistics' topic key) of every value of a string array (nulls hash as empty strings)."""
    if len(arr) == 0:
        return np.empty(0, dtype=np.int64)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[arr.offset : arr.offset + len(arr) + 1]
    first = int(offsets[0])
    data = np.frombuffer(data_buf, dtype=np.uint8)[first:] if data_buf is not None else np.zeros(0, dtype=np.uint8)
    return string_keys(offsets, data, first)


def _hex_upper(values: pa.Array) -> pa.Array:
    """``values`` with hex ids upper-cased (a hex id's case says nothing; clients write upper case), others as they are."""
    hexes = compute.match_substring_regex(values, options=compute.MatchSubstringOptions(f"^(?:{_HEX_ID.pattern})$"))
    return compute.if_else(hexes, compute.ascii_upper(values), values)


class IdMatcher:
    """Which values of a string column are ids: sorted hashes probed per batch, confirmed by string (no rehash)."""

    def __init__(self, ids: list[str]):
        self.ids = pa.array(ids, pa.string())
        hashes = string_hashes(self.ids)
        self.order = np.argsort(hashes, kind="stable")
        self.sorted = hashes[self.order]
        self.exact = len(ids) < 2 or not (self.sorted[1:] == self.sorted[:-1]).any()  # no two ids share a hash

    def match(self, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(positions in ``values``, index of the id each equals)."""
        if not self.exact:  # a 64-bit hash collision between two ids: let Arrow decide
            index = compute.index_in(values, self.ids).to_numpy(zero_copy_only=False)
            rows = np.flatnonzero(~np.isnan(index.astype(float)))
            return rows, index[rows].astype(np.int64)
        hashes = string_hashes(values)
        probe = np.argsort(hashes)  # increasing keys: numpy's binary search resumes where the last one ended
        pos = np.empty(len(hashes), dtype=np.int64)
        pos[probe] = np.searchsorted(self.sorted, hashes[probe])
        pos[pos == len(self.sorted)] = 0
        rows = np.flatnonzero((self.sorted[pos] == hashes) & compute.is_valid(values).to_numpy(zero_copy_only=False))
        if len(rows) == 0:
            return rows, rows
        who = self.order[pos[rows]]
        same = compute.equal(compute.take(values, rows), compute.take(self.ids, who)).to_numpy(zero_copy_only=False)
        return rows[same], who[same]


def _held(queue: QueueAfter, logical: np.ndarray, offset: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Per record: whether a unit of ``queue`` below its end holds it, at ``logical`` or placed from ``placed_from``."""
    ok = np.zeros(len(logical), dtype=bool)
    end, file_size = queue.end, queue.file_size
    inside = np.flatnonzero((logical >= 0) & (logical < end))
    bases = logical[inside] - logical[inside] % file_size
    for base in np.unique(bases).tolist():
        at = inside[bases == base]
        phys, sizes = queue.units_in(base, base + file_size)
        unit = (logical[at] - base) // ENTRY_SIZE
        within = unit < len(phys)
        ok[at[within]] = (phys[unit[within]] == offset[at[within]]) & (sizes[unit[within]] == size[at[within]])
    placed = queue.placed_from
    rest = np.flatnonzero(~ok)
    if placed is not None and len(rest) and placed < end:
        phys, sizes = queue.units_in(placed, end)
        near = np.isin(phys, offset[rest])
        units = set(zip(phys[near].tolist(), sizes[near].tolist()))
        ok[rest] = [pair in units for pair in zip(offset[rest].tolist(), size[rest].tolist())]
    return ok


@dataclass
class SurvivorChunk:
    """Consecutive ids' rows as columns (``code`` into ``STATUSES``); location columns meaningless where not found."""

    ids: list[str]
    id_array: pa.Array
    code: np.ndarray
    found: np.ndarray
    copies: np.ndarray
    consumable: np.ndarray
    offset: np.ndarray
    topic: np.ndarray
    queue_id: np.ndarray
    queue_offset: np.ndarray
    store_timestamp: np.ndarray


class QueueAfter(Protocol):
    """A consume queue after the broker's next start (``recovery.queues.QueueSim``)."""

    file_size: int

    @property
    def end(self) -> int: ...

    @property
    def placed_from(self) -> int | None: ...

    def units_in(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]: ...


class _OnDisk:
    """A consume queue as on disk as a ``QueueAfter``: its units below its recovered end (§5.7), none placed elsewhere."""

    placed_from = None

    def __init__(self, queue):
        self.queue, self.file_size, self.end = queue, queue.file_size, queue.recover().end

    def units_in(self, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
        units = next((self.queue.units(path) for base, path in self.queue.files if base == lo), None)
        return (units["phys_offset"], units["size"]) if units is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass
class QueuesAfter:
    """What consumability is judged on: ``view`` in words, per candidate the queues after the next start."""

    view: str
    candidates: list[tuple[str, dict[tuple[str, int], QueueAfter]]] = field(default_factory=list)


ON_DISK = QueuesAfter("as on disk")


@dataclass
class SurvivorSummary:
    ids: int = 0
    by: str = ""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    not_consumable_duplicates: int = 0  # duplicated ids no copy of which is consumable
    commitlog_end: int | None = None
    end_reason: str | None = None
    records_past_damage: int = 0
    queue_view: str = ON_DISK.view

    @property
    def all_survived(self) -> bool:
        """Every id found (or duplicated) and consumable."""
        return self.counts[FOUND] + self.counts[DUPLICATED] - self.not_consumable_duplicates == self.ids

    def as_dict(self) -> dict:
        return {"ids": self.ids, "by": self.by, **self.counts, "commitlog_end": self.commitlog_end, "end_reason": self.end_reason,
                "records_past_damage": self.records_past_damage, "queue_view": self.queue_view, "all_survived": self.all_survived}


class SurvivorSearch:
    """``rows()`` / ``chunks()``: one row per distinct id, in input order; then ``summary``."""

    def __init__(self, store: Store, ids: list[str], kind: IdKind, progress: Callable[[int], None] | None = None,
                 queues: QueuesAfter | Callable[[NextStart | None], QueuesAfter] = ON_DISK):
        """``queues``: what consumability is judged on, or a function of the scan's next start giving it."""
        self.store = store
        self.kind = kind
        ids = [i.upper() if kind is IdKind.msg_id or (kind is IdKind.uniq_key and _HEX_ID.fullmatch(i)) else i for i in ids]
        self.ids = list(dict.fromkeys(ids))
        self.progress = progress
        self.queues = queues
        self.summary = SurvivorSummary(ids=len(self.ids), by=kind.value, queue_view=queues.view if isinstance(queues, QueuesAfter) else "")
        self.topics: list[str] = []
        self.id_array: pa.Array | None = None

    def _hits(self) -> dict[str, np.ndarray]:
        """Every record carrying an id, as arrays: ``who``, ``topic``, ``region`` (``REGIONS``) and a few fields."""
        matcher = IdMatcher(self.ids)
        self.id_array = matcher.ids
        column = self.kind.column
        fields = ["offset", "size", "queue_id", "queue_offset", "store_timestamp", "sys_flag"]
        scan = SalvageScan(self.store, columns=[*fields, "topic", column], include_stale=True, progress=self.progress)
        topic_codes: dict[str, int] = {}
        parts: dict[str, list[np.ndarray]] = {name: [] for name in ("who", "topic", "region", *fields)}
        for batch in scan:
            if self.kind is IdKind.key:
                keys = batch["keys"]
                at, who = matcher.match(compute.list_flatten(keys))
                pairs = np.unique(np.stack([compute.list_parent_indices(keys).to_numpy()[at], who], axis=1), axis=0)  # a key repeated in one record counts once
                rows, who = pairs[:, 0], pairs[:, 1]
            else:
                values = batch[column]  # mqtool's offsetMsgIds are upper case already: only a UNIQ_KEY may come in lower case
                rows, who = matcher.match(_hex_upper(values) if self.kind is IdKind.uniq_key else values)
            if len(rows) == 0:
                continue
            matched = compute.take(batch, rows)
            topics = compute.dictionary_encode(matched["topic"])
            codes = np.array([topic_codes.setdefault(t, len(topic_codes)) for t in topics.dictionary.to_pylist()], dtype=np.int32)
            parts["who"].append(np.asarray(who, dtype=np.int64))
            parts["topic"].append(codes[topics.indices.to_numpy()])
            parts["region"].append(np.full(len(rows), REGIONS.index(matched["status"][0].as_py()), dtype=np.int8))
            for name in fields:
                parts[name].append(matched[name].to_numpy())
        if not isinstance(self.queues, QueuesAfter):
            self.queues = self.queues(scan.next_start)
            self.summary.queue_view = self.queues.view
        cut = scan.summary.cut
        self.summary.commitlog_end = cut.offset if cut else None
        self.summary.end_reason = cut.reason if cut else None
        self.summary.records_past_damage = scan.summary.counts[PAST_DAMAGE]
        self.topics = list(topic_codes)
        return {name: np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int64) for name, arrays in parts.items()}

    def _queue_groups(self, hits: dict[str, np.ndarray], candidate: np.ndarray) -> Iterator[tuple[tuple[str, int], np.ndarray]]:
        """((topic, queue id), indexes of its hits) of each queue the ``candidate`` hits are in."""
        members = np.flatnonzero(candidate)
        queue_key = hits["topic"][members].astype(np.int64) << 32 | (hits["queue_id"][members].astype(np.int64) & 0xFFFFFFFF)
        order = np.argsort(queue_key, kind="stable")
        members, queue_key = members[order], queue_key[order]
        bounds = np.flatnonzero(np.r_[True, queue_key[1:] != queue_key[:-1], True]) if len(members) else np.zeros(0, dtype=np.int64)
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            idx = members[lo:hi]
            yield (self.topics[int(hits["topic"][idx[0]])], int(hits["queue_id"][idx[0]])), idx

    def _consumable(self, hits: dict[str, np.ndarray], candidate: np.ndarray) -> np.ndarray:
        """Per hit: whether a unit of its queue holds it (§5.10, §15.4); refused where candidate versions' queues differ."""
        if self.store.root is None:  # commit log segments alone: no consume queue leads anywhere
            return np.zeros(len(candidate), dtype=bool)
        answers: list[np.ndarray] = []
        ends: list[dict] = []
        on_disk = ((key, self.store.consume_queue(*key)) for key, _ in self._queue_groups(hits, candidate))
        candidates = self.queues.candidates or [("", {key: _OnDisk(queue) for key, queue in on_disk if queue.files})]
        for _, queues in candidates:
            result, end_of = np.zeros(len(candidate), dtype=bool), {}
            for key, idx in self._queue_groups(hits, candidate):
                queue = queues.get(key)
                end_of[key] = queue.end if queue is not None else 0
                if queue is not None:
                    result[idx] = _held(queue, hits["queue_offset"][idx] * ENTRY_SIZE, hits["offset"][idx], hits["size"][idx])
            answers.append(result)
            ends.append(end_of)
        (first_label, _), first, first_ends = candidates[0], answers[0], ends[0]
        for (label, _), answer, end_of in zip(candidates[1:], answers[1:], ends[1:]):
            differ = [key for key in first_ends if first_ends[key] != end_of[key]]
            if differ or (answer != first).any():
                what = (f"queue {differ[0][0]} {differ[0][1]} ends at offset {first_ends[differ[0]] // ENTRY_SIZE} vs {end_of[differ[0]] // ENTRY_SIZE}" if differ
                        else f"{int((answer != first).sum())} of the records found are consumable under one and not the other")
                raise Refused(f"cannot tell which broker version wrote this store, and the consume queues of these ids after its next start "
                              f"differ between {first_label} and {label} ({what}): pass --broker-version with the release the broker ran")
        return first

    def rows(self) -> Iterator[dict]:
        """Search, then a dict per distinct id (``ROW_FIELDS``), in input order (``summary`` complete from the first)."""
        missing = (MISSING, None, None, None, None, None, 0, None)
        for c in self.chunks():
            found = c.found.tolist()  # false: missing (no hit, so no topic to look up)
            topic = [self.topics[t] if f else None for t, f in zip(c.topic.tolist(), found)]
            columns = zip([STATUSES[k] for k in c.code.tolist()], c.offset.tolist(), topic,
                          *(c.__dict__[k].tolist() for k in ("queue_id", "queue_offset", "store_timestamp", "copies", "consumable")))
            for id_, f, row in zip(c.ids, found, columns):
                yield dict(zip(ROW_FIELDS, (id_, *(row if f else missing))))

    def chunks(self, chunk: int = 65536) -> Iterator[SurvivorChunk]:
        """Search, then the rows as columns, ``chunk`` ids at a time, in input order (``summary`` complete on return)."""
        hits = self._hits()
        n_ids = len(self.ids)
        who = hits["who"]
        code = np.full(n_ids, _CODE[MISSING], dtype=np.int8)
        first = np.full(n_ids, -1, dtype=np.int64)
        consumable_id = np.zeros(n_ids, dtype=bool)
        copies = np.bincount(who, minlength=n_ids)
        if len(who):
            region = hits["region"]
            live = region == REGIONS.index(LIVE)
            tran = hits["sys_flag"] & 0xC  # MessageSysFlag.TRANSACTION_*: dispatched when NOT_TYPE (0) or COMMIT (8)
            dispatched = (tran == 0) | (tran == 8)
            consumable = self._consumable(hits, live & dispatched)
            system_topic = np.array([t.startswith(_SYSTEM_PREFIXES) for t in self.topics], dtype=bool)
            delivery = live & dispatched & ~system_topic[hits["topic"]]  # what a consumer of the topic receives

            per_id = (np.bincount(who, weights=w, minlength=n_ids) for w in (live, delivery, consumable, delivery & consumable))
            live_n, delivery_n, consumable_n, delivery_consumable_n = per_id
            rank = region * 4 + np.where(consumable, 0, np.where(delivery, 1, 2))  # the hit shown for an id
            order = np.lexsort((hits["offset"], rank, who))
            sorted_who = who[order]
            starts = np.flatnonzero(np.r_[True, sorted_who[1:] != sorted_who[:-1]])
            first[sorted_who[starts]] = order[starts]

            seen = first >= 0
            duplicated = seen & (live_n > 0) & (delivery_n >= 2) if self.kind is IdKind.uniq_key else np.zeros(n_ids, dtype=bool)
            code[seen] = np.where(live_n[seen] == 0, _CODE[PAST_DAMAGE], np.where(consumable_n[seen] > 0, _CODE[FOUND], _CODE[NOT_CONSUMABLE]))
            code[duplicated] = _CODE[DUPLICATED]
            consumable_id = np.where(duplicated, delivery_consumable_n > 0, code == _CODE[FOUND])
            self.summary.not_consumable_duplicates = int((duplicated & ~consumable_id).sum())
        for status, n in zip(STATUSES, np.bincount(code, minlength=len(STATUSES)).tolist()):
            self.summary.counts[status] = n
        return self._chunks(hits, code, first, copies, consumable_id, chunk)

    def _chunks(self, hits: dict[str, np.ndarray], code: np.ndarray, first: np.ndarray, copies: np.ndarray, consumable: np.ndarray, chunk: int) -> Iterator[SurvivorChunk]:
        for lo in range(0, len(self.ids), chunk):
            hi = min(lo + chunk, len(self.ids))
            at = first[lo:hi]
            found = at >= 0
            pick = np.where(found, at, 0)
            empty = not len(hits["who"])
            located = {k: np.zeros(hi - lo, dtype=np.int64) if empty else hits[k][pick] for k in ("offset", "topic", "queue_id", "queue_offset", "store_timestamp")}
            yield SurvivorChunk(self.ids[lo:hi], self.id_array.slice(lo, hi - lo), code[lo:hi], found, copies[lo:hi], consumable[lo:hi], **located)
