"""``SalvageStoreWriter``: a new store of salvaged messages (``mqtool salvage --to-store``). A record landing at its own offsets
is copied byte for byte (reference §2.6), any other re-encoded with new offsets and ``__CRC32#`` (§2.10); then the queues, index,
checkpoint (§7) and ``config/*.json``, and no ``abort`` file."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Refused
from ..fileops import fsync_dir, fsync_path
from ..formats import checkpoint as cpfmt, commitlog as clfmt
from ..formats.dispatch import DispatchRequest, dispatches_to_consume_queue
from ..store import Store
from ..recovery.planparts import geometry
from .synth import CommitLogWriter
from ..store.segments import PROP_CRC_KEY, PROP_CRC_LEN, property_crc
from .writers import ConsumeQueueWriter, IndexWriterService, parallel


def check_target(source: Store, target: Path) -> Path:
    """``target`` resolved; refused inside (or holding) the source store, or if not a new or empty directory."""
    target = target.expanduser().resolve()
    root = source.root.resolve() if source.root is not None else source.commitlog.segments[0].path.parent.resolve()
    if target == root or root in target.parents or target in root.parents:
        raise Refused(f"{target}: the salvaged store must be outside the store it is salvaged from ({root})")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise Refused(f"{target}: not an empty directory; --to-store needs a new or empty directory")
    return target


@dataclass
class Placed:
    """Where one record went in the new store."""

    offset: int
    queue_offset: int


@dataclass
class NewStoreSummary:
    path: str
    min_offset: int
    end_offset: int = 0
    records: int = 0
    kept: int = 0  # records copied at their original offsets
    moved: int = 0  # re-appended
    queues: int = 0
    consume_queue_entries: int = 0
    index_files: int = 0
    notes: list[str] = field(default_factory=list)


PARTIAL_SUFFIX = ".mqtool-partial"


class SalvageStoreWriter:
    """Write records into a new store for ``target`` (``check_target`` first); ``close`` finishes it. Built in
    ``<target>.mqtool-partial`` and renamed once whole and synced, so no half store is left at ``target``; a mount point is
    built in place."""

    def __init__(self, source: Store, target: Path):
        self.source = source
        self.target = target
        self.v5 = source.rules.v5
        min_offset = source.commitlog.min_offset
        self.building = target if os.path.ismount(target) else target.with_name(target.name + PARTIAL_SUFFIX)
        if self.building != target and self.building.exists():
            shutil.rmtree(self.building)
        self.building.mkdir(parents=True, exist_ok=True)
        target = self.building
        self.log = CommitLogWriter(target / "commitlog", source.commitlog.file_size, source.rules.stale_blank_fill, base=min_offset)
        self.cq = ConsumeQueueWriter(target / "consumequeue", source.consume_queue_file_size)
        self.index = IndexWriterService(target / "index", *geometry(source))  # the broker's default geometry where the source has none
        self.next_queue_offset: dict[tuple[str, int], int] = {}
        self.last_store_timestamp = 0
        self.summary = NewStoreSummary(str(self.target), min_offset)

    def add(self, raw: bytes, *, offset: int, topic: str, queue_id: int, queue_offset: int, sys_flag: int, store_timestamp: int,
            tags_code: int, keys, uniq_key: str | None, prepared_transaction_offset: int) -> Placed:
        """Append one record (its stored bytes and the decoded fields dispatch needs)."""
        new_offset = self.log.offset_for(len(raw), offset)
        dispatched = dispatches_to_consume_queue(sys_flag)
        queue = (topic, queue_id)
        new_qoff = queue_offset
        if dispatched:  # the queue's next offset
            new_qoff = self.next_queue_offset.get(queue, queue_offset)
            self.next_queue_offset[queue] = new_qoff + 1
        if new_offset != offset or new_qoff != queue_offset:  # re-appended at a new position: re-encoded
            record = clfmt.decode_record(raw)._replace(phys_offset=new_offset, queue_offset=new_qoff)
            raw = _reseal_property_crc(clfmt.encode_message(record))
            self.summary.moved += 1
        else:
            self.summary.kept += 1
        self.log.write(raw)
        request = DispatchRequest(topic, queue_id, new_offset, len(raw), tags_code, store_timestamp, new_qoff, tuple(keys or ()), uniq_key, sys_flag, prepared_transaction_offset)
        if dispatched:
            self.cq.put_request(request)
        self.index.put_request(request)
        self.summary.records += 1
        self.last_store_timestamp = max(self.last_store_timestamp, store_timestamp)
        return Placed(new_offset, new_qoff)

    def close(self) -> NewStoreSummary:
        s = self.summary
        s.end_offset = self.log.close()
        written = self.cq.close()
        s.queues = len(self.cq.queues)
        s.consume_queue_entries = sum(q.placed for q in self.cq.queues.values())
        s.index_files = len(self.index.close())
        for path in sorted((self.building / "commitlog").iterdir()):
            fsync_path(path)
        ts = self.last_store_timestamp
        wide = self.v5 and (self.source.checkpoint_used_bytes or 0) > 32
        checkpoint = cpfmt.StoreCheckpoint(ts, ts, self.index.full_end_timestamp, 0, s.end_offset if wide else 0)
        (self.building / "checkpoint").write_bytes(cpfmt.encode_checkpoint(checkpoint))
        fsync_path(self.building / "checkpoint")
        self._copy_config()
        if not written and s.records:
            s.notes.append("no record is dispatched to a consume queue")
        if self.source.root is not None and (self.source.root / "timerlog").exists():
            s.notes.append("the timer store (timerlog, timerwheel) is not carried over: timer messages not yet due stay in rmq_sys_wheel_timer")
        # every directory of the new store, deepest first, then the store's own entry: the names of what was written
        parallel(fsync_dir, sorted((p for p in self.building.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True))
        fsync_dir(self.building)
        if self.building != self.target:
            os.rename(self.building, self.target)  # over a new or empty directory (``check_target``): the store appears whole
        fsync_dir(self.target.parent)
        return s

    def _copy_config(self) -> None:
        """The topic, subscription and offset tables (``config/*.json`` and their ``.bak``)."""
        if self.source.root is None or not (self.source.root / "config").is_dir():
            return
        config = self.building / "config"
        config.mkdir(exist_ok=True)
        for path in sorted((self.source.root / "config").iterdir()):
            if path.is_file() and path.name.endswith((".json", ".json.bak")):
                shutil.copyfile(path, config / path.name)
                fsync_path(config / path.name)  # and config/ with the store's other directories (``close``)


def _reseal_property_crc(raw: bytes) -> bytes:
    """Recompute a trailing ``__CRC32#`` property (``MessageDecoder.createCrc32``) after the bytes changed."""
    tail = raw[-PROP_CRC_LEN:]
    if len(raw) <= PROP_CRC_LEN or not tail.startswith(PROP_CRC_KEY) or tail[-1:] != b"\x02":
        return raw
    crc, _ = property_crc(raw)
    digits = "".join(str(crc // 10**i % 10) for i in range(10)).encode()
    return raw[:-PROP_CRC_LEN] + PROP_CRC_KEY + digits + b"\x02"
