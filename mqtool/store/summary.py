"""``mqtool info``'s figures: what the files say, computed the way the broker computes them.

- commit log min offset: the first segment's name (``CommitLog.getMinOffset``); max offset: the
  logical end found by the normal-recovery scan from the third-from-last segment (§8.5);
- per queue: max offset = the CQ recovery end (§5.7), min offset = ``correctMinOffset`` against
  the commit log min (§5.9). A crashed store's figures are those before any recovery.
"""

from __future__ import annotations

from typing import Any

from .fastscan import FastScan
from .layout import unchecked_parts
from .store import Store
from .version import BrokerVersion

FIVE = BrokerVersion(5, 0, 0)


def commitlog_summary(store: Store) -> dict[str, Any]:
    segments = store.commitlog.segments
    start = segments[max(0, len(segments) - 3)].base_offset if segments else 0
    scan = FastScan(store.commitlog, start, check_crc=True, stop_on_crc=True)
    count = sum(len(batch.rows) for batch in scan)
    end = scan.end
    return {
        "dirs": sorted({str(s.path.parent) for s in segments}),
        "file_size": store.commitlog.file_size,
        "segments": [{"name": s.path.name, "size": s.size} for s in segments],
        "min_offset": store.commitlog.min_offset,
        "max_offset": end.offset,
        "scan_from": start,
        "messages_scanned": count,
        "end_reason": end.reason,
        "end_detail": end.detail,
    }


def queue_summaries(store: Store) -> list[dict[str, Any]]:
    v5 = store.version is not None and store.version >= FIVE
    cl_min = store.commitlog.min_offset
    rows = []
    for queue in store.consume_queues:
        recovered = queue.recover()
        min_offset = queue.corrected_min_offset(cl_min, recovered.end, v5=v5)
        rows.append(
            {
                "topic": queue.topic,
                "queue_id": queue.queue_id,
                "min_offset": min_offset,
                "max_offset": recovered.max_offset,
                "messages": max(recovered.max_offset - min_offset, 0),
                "files": len(queue.files),
                "max_phys_offset": recovered.max_phys_offset,
            }
        )
    return rows


def index_summary(store: Store) -> dict[str, Any] | None:
    geometry = store.index_geometry
    if geometry is None:
        return None
    return {
        "hash_slot_num": geometry.hash_slot_num,
        "index_num": geometry.index_num,
        "files": [
            {
                "name": f.name,
                "size": f.size,
                "begin_timestamp": f.header.begin_timestamp,
                "end_timestamp": f.header.end_timestamp,
                "begin_phy_offset": f.header.begin_phy_offset,
                "end_phy_offset": f.header.end_phy_offset,
                "hash_slot_count": f.header.hash_slot_count,
                "entries": f.header.entry_count,
            }
            for f in store.index_files
        ],
    }


def store_summary(store: Store) -> dict[str, Any]:
    guess = store.version_guess
    cp = store.checkpoint
    queues = queue_summaries(store)
    topics: dict[str, dict[str, int]] = {}
    for q in queues:
        t = topics.setdefault(q["topic"], {"queues": 0, "messages": 0})
        t["queues"] += 1
        t["messages"] += q["messages"]
    return {
        "store": str(store.root) if store.root else None,
        "version": {"version": str(guess.version) if guess.version else None, "label": str(guess), "evidence": guess.evidence},
        "abort_file": None if store.abort is None else {"present": True, "pid": store.abort.pid},
        "lock_file": store.lock_present,
        "checkpoint": None
        if cp is None
        else {**cp._asdict(), "min_timestamp": cp.min_timestamp, "used_bytes": store.checkpoint_used_bytes},
        "commitlog": commitlog_summary(store),
        "topics": topics,
        "queues": queues,
        "index": index_summary(store),
        "notes": [*store.notes, *unchecked_parts(store.root)],
    }
