"""``SurvivorSearch``: which of a list of message ids survived in a store, and can a consumer get them.

Ids are UNIQ_KEYs (the client's msgId), offsetMsgIds (store host + commit log offset) or KEYS
entries. One pass of ``SalvageScan`` (``read_batches`` up to the broker's cut, then ``verify
--keep-going``'s resynchronisation past it) matches every record's id column against the id set
(Arrow ``is_in``, per batch); then, per id:

- ``missing``: no valid record carries it;
- ``past-damage``: only records after the broker's cut carry it (the broker's recovery would
  truncate them: ``CommitLog.recoverNormally`` / ``recoverAbnormally``, reference §8.3), or only
  stale records (overwritten history, §8.9);
- ``duplicated`` (UNIQ_KEY only): more than one live record delivers it to a consumer (dispatched,
  NOT_TYPE or COMMIT, in a topic that is not a system or retry topic): a producer retry;
- ``found``: a live record carries it and a consume queue leads to it: the unit at the record's
  queue offset holds its offset and size, below the queue's recovered end
  (``ConsumeQueue.recover``, §5.7) — what ``getMessage`` serves;
- ``found-not-consumable``: live, but no consume queue entry leads a consumer to it (a PREPARED or
  ROLLBACK record, a missing or wrong entry, an entry past the queue's end).

Memory: the id set, the matching rows (a few columns) and one batch at a time.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError
from ..formats.consumequeue import ENTRY_SIZE
from ..formats.dispatch import SCHEDULE_TOPIC, dispatches_to_consume_queue
from ..store import Store
from .salvage import LIVE, PAST_DAMAGE, STALE, SalvageScan

FOUND, NOT_CONSUMABLE, MISSING, DUPLICATED = "found", "found-not-consumable", "missing", "duplicated"
STATUSES = (FOUND, NOT_CONSUMABLE, DUPLICATED, PAST_DAMAGE, MISSING)
ROW_FIELDS = ("id", "status", "offset", "topic", "queue_id", "queue_offset", "store_timestamp", "copies", "consumable")
_REGION = {LIVE: 0, PAST_DAMAGE: 1, STALE: 2}
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
    """The id form, where it is unambiguous: ids none of which is 32 or 56 hex characters are KEYS;
    hex ids are offsetMsgIds when every one encodes an offset inside the commit log (its last 16
    hex digits, ``MessageDecoder.createMessageId``), UNIQ_KEYs when none does (their last 8 bytes
    are a class loader hash, a time and a counter: ``MessageClientIDSetter``)."""
    hex_ids = sum(1 for i in ids if _HEX_ID.fullmatch(i))
    if hex_ids == 0:
        return IdKind.key
    if hex_ids < len(ids):
        raise UsageError(f"{hex_ids} of {len(ids)} ids are 32 or 56 hex characters (UNIQ_KEYs or offsetMsgIds), the rest are not: say which with --by uniq-key|msg-id|key")
    low, high = store.commitlog.min_offset, store.commitlog.end_of_files
    inside = sum(1 for i in ids if low <= int(i[-16:], 16) < high)
    if inside == len(ids):
        return IdKind.msg_id
    if inside == 0:
        return IdKind.uniq_key
    raise UsageError(f"{inside} of {len(ids)} hex ids look like offsetMsgIds and the rest like UNIQ_KEYs: say which with --by uniq-key|msg-id")


def is_delivery(topic: str, sys_flag: int) -> bool:
    """A record a consumer of its topic receives (not a holding, retry or system topic copy)."""
    return dispatches_to_consume_queue(sys_flag) and not topic.startswith(_SYSTEM_PREFIXES)


@dataclass
class SurvivorSummary:
    ids: int = 0
    by: str = ""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    not_consumable_duplicates: int = 0  # duplicated ids no copy of which is consumable
    commitlog_end: int | None = None
    end_reason: str | None = None
    records_past_damage: int = 0

    @property
    def all_survived(self) -> bool:
        """Every id found (or duplicated) and consumable."""
        ok = self.counts[FOUND] + self.counts[DUPLICATED] - self.not_consumable_duplicates
        return ok == self.ids

    def as_dict(self) -> dict:
        return {"ids": self.ids, "by": self.by, **self.counts, "commitlog_end": self.commitlog_end, "end_reason": self.end_reason,
                "records_past_damage": self.records_past_damage, "all_survived": self.all_survived}


class SurvivorSearch:
    """``rows()`` yields one dict per distinct id (``ROW_FIELDS``), in input order; then ``summary``."""

    def __init__(self, store: Store, ids: list[str], kind: IdKind, progress: Callable[[int], None] | None = None):
        self.store = store
        self.kind = kind
        ids = [i.upper() for i in ids] if kind is IdKind.msg_id else ids
        self.ids = list(dict.fromkeys(ids))
        self.progress = progress
        self.summary = SurvivorSummary(ids=len(self.ids), by=kind.value)

    def _hits(self) -> pa.Table:
        """Every record carrying one of the ids: ``id`` + a few columns + ``region``."""
        value_set = pa.array(self.ids, pa.string())
        column = self.kind.column
        columns = ["offset", "size", "topic", "queue_id", "queue_offset", "store_timestamp", "sys_flag", column]
        scan = SalvageScan(self.store, columns=columns, include_stale=True, progress=self.progress, batch=1 << 17)
        parts = []
        for batch in scan:
            if self.kind is IdKind.key:
                keys = batch["keys"]
                flat = pc.list_flatten(keys)
                mask = pc.is_in(flat, value_set=value_set)
                if not pc.any(mask).as_py():
                    continue
                rows = pc.list_parent_indices(keys).filter(mask)
                found, matched = flat.filter(mask), batch.take(rows)
            else:
                mask = pc.is_in(batch[column], value_set=value_set)
                if not pc.any(mask).as_py():
                    continue
                matched = batch.filter(mask)
                found = matched[column]
            parts.append(pa.table({"id": found, **{c: matched[c] for c in columns[:-1]}, "status": matched["status"]}))
        self.summary.commitlog_end = scan.summary.cut.offset if scan.summary.cut else None
        self.summary.end_reason = scan.summary.cut.reason if scan.summary.cut else None
        self.summary.records_past_damage = scan.summary.counts[PAST_DAMAGE]
        if not parts:
            return pa.table({"id": pa.array([], pa.string())})
        return pa.concat_tables(parts)

    def _consumable(self, topic: list[str], queue_id: np.ndarray, qoff: np.ndarray, offset: np.ndarray, size: np.ndarray, candidate: np.ndarray) -> np.ndarray:
        """Per hit: the consume queue unit at its queue offset holds its offset and size, below the queue's end."""
        result = np.zeros(len(offset), dtype=bool)
        groups: dict[tuple[str, int], list[int]] = {}
        for i in np.flatnonzero(candidate).tolist():
            groups.setdefault((topic[i], int(queue_id[i])), []).append(i)
        for (t, q), members in groups.items():
            try:
                queue = self.store.consume_queue(t, q)
            except (OSError, ValueError):
                continue
            if not queue.files:
                continue
            idx = np.array(members, dtype=np.int64)
            end = queue.recover().end  # logical bytes
            logical = qoff[idx] * ENTRY_SIZE
            ok = np.zeros(len(idx), dtype=bool)
            for base, path in queue.files:
                inside = (logical >= base) & (logical < base + queue.file_size) & (logical < end)
                if not inside.any():
                    continue
                units = queue.units(path)
                unit = (logical[inside] - base) // ENTRY_SIZE
                within = unit < units.shape[0]
                hold = np.zeros(len(unit), dtype=bool)
                u = units[unit[within]]
                hold[within] = (u["phys_offset"] == offset[idx[inside]][within]) & (u["size"] == size[idx[inside]][within])
                ok[np.flatnonzero(inside)] = hold
            result[idx] = ok
        return result

    def rows(self) -> Iterator[dict]:
        hits = self._hits()
        n_ids = len(self.ids)
        counts = self.summary.counts
        if hits.num_rows == 0:
            counts[MISSING] = n_ids
            for i in self.ids:
                yield {"id": i, "status": MISSING, "offset": None, "topic": None, "queue_id": None, "queue_offset": None, "store_timestamp": None, "copies": 0, "consumable": None}
            return
        value_set = pa.array(self.ids, pa.string())
        who = pc.index_in(hits["id"], value_set=value_set).to_numpy()
        offset = hits["offset"].to_numpy()
        size = hits["size"].to_numpy().astype(np.int64)
        queue_id = hits["queue_id"].to_numpy()
        qoff = hits["queue_offset"].to_numpy()
        sys_flag = hits["sys_flag"].to_numpy()
        topic = hits["topic"].to_pylist()
        region = np.array([_REGION[s] for s in hits["status"].to_pylist()], dtype=np.int64)
        live = region == 0
        tran = sys_flag & 0xC  # MessageSysFlag.TRANSACTION_*: dispatched when NOT_TYPE (0) or COMMIT (8)
        dispatched = (tran == 0) | (tran == 8)
        consumable = self._consumable(topic, queue_id, qoff, offset, size, live & dispatched)
        system = np.zeros(len(offset), dtype=bool)
        for prefix in _SYSTEM_PREFIXES:
            system |= pc.starts_with(hits["topic"], prefix).to_numpy(zero_copy_only=False)
        delivery = live & dispatched & ~system  # ``is_delivery``, column-wise

        copies = np.bincount(who, minlength=n_ids)
        live_n = np.bincount(who, weights=live, minlength=n_ids)
        delivery_n = np.bincount(who, weights=delivery, minlength=n_ids)
        consumable_n = np.bincount(who, weights=consumable, minlength=n_ids)
        delivery_consumable_n = np.bincount(who, weights=delivery & consumable, minlength=n_ids)
        rank = region * 4 + np.where(consumable, 0, np.where(delivery, 1, 2))  # the hit shown for an id
        order = np.lexsort((offset, rank, who))
        first = np.full(n_ids, -1, dtype=np.int64)
        sorted_who = who[order]
        starts = np.flatnonzero(np.r_[True, sorted_who[1:] != sorted_who[:-1]])
        first[sorted_who[starts]] = order[starts]

        store_ts = hits["store_timestamp"].to_numpy()
        for i, id_ in enumerate(self.ids):
            h = int(first[i])
            if h < 0:
                counts[MISSING] += 1
                yield {"id": id_, "status": MISSING, "offset": None, "topic": None, "queue_id": None, "queue_offset": None, "store_timestamp": None, "copies": 0, "consumable": None}
                continue
            if live_n[i] == 0:
                status, ok = PAST_DAMAGE, False
            elif self.kind is IdKind.uniq_key and delivery_n[i] >= 2:
                status, ok = DUPLICATED, bool(delivery_consumable_n[i] > 0)
                if not ok:
                    self.summary.not_consumable_duplicates += 1
            else:
                ok = bool(consumable_n[i] > 0)
                status = FOUND if ok else NOT_CONSUMABLE
            counts[status] += 1
            yield {"id": id_, "status": status, "offset": int(offset[h]), "topic": topic[h], "queue_id": int(queue_id[h]), "queue_offset": int(qoff[h]),
                   "store_timestamp": int(store_ts[h]), "copies": int(copies[i]), "consumable": ok}
