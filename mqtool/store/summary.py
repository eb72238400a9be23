"""``mqtool info``'s figures as the broker computes them (reference §5.7, §5.9, §8.5)."""

from __future__ import annotations

import os
from typing import Any

from ..fileops import A_DIRECTORY, A_SOCKET, A_SPECIAL, not_a_file
from ..formats.markers import LOCK_FILE
from .commitlog import ScanEnd
from .index import list_index_files
from .layout import unchecked_parts
from .rules import rules_deciding
from .store import Store
from .version import detect_version, given_source

SCHEMA_SCAN_RECORDS = 2048  # records the schema decoder walks before the compiled walk takes over
WALK_BATCH_BYTES = 8 << 20  # records a compiled walk hands over at a time (about), each of the two
WALK_READ_WINDOW = 4 << 20  # bytes a compiled walk reads at a time (``fastscan.ReadWindow``), each of the two
WALK_SPLIT_BYTES = 256 << 20  # the longest stretch of a segment one compiled walk takes (``walk_splits``)
INDEX_HEADER_FIELDS = ("begin_timestamp", "end_timestamp", "begin_phy_offset", "end_phy_offset", "hash_slot_count")


def logical_end(store: Store, start: int, stop: int | None = None) -> tuple[int, ScanEnd]:
    """(valid records from ``start``, where ``recoverNormally``'s scan ends, reference §8.3); ``stop``: up to it (``LIMIT``)."""
    count, resume = 0, start
    if not store.is_dledger:
        scan = store.commitlog.scan(start, stop, check_crc=store.config.check_crc_on_recover)
        for record in scan:
            count += 1
            resume = record.offset + record.total_size
            if count >= SCHEMA_SCAN_RECORDS:
                break
        else:
            if scan.end.is_clean:
                return count, scan.end
            count, resume = 0, start  # damage: the compiled walk words the end
    walked, end = compiled_end(store, resume, stop=stop)
    return count + walked, end


def compiled_end(store: Store, start: int, workers: int | None = None, stop: int | None = None) -> tuple[int, ScanEnd]:
    """``logical_end``'s compiled walk from ``start``: (valid records, end). Segments and stretches (``walk_splits``) are walked
    ``workers`` at a time (a chain leaves a segment only at a blank, §8.3); one not reaching the next's start is walked again."""
    from concurrent.futures import ThreadPoolExecutor

    from .fastscan import FastScan  # the compiled walk and numpy: only for a big commit log, or an end at damage

    commitlog = store.commitlog
    segments = commitlog.segments
    first = commitlog.segment_index(start)
    workers = workers or min(os.cpu_count() or 1, 2)

    def walk(begin: int, until: int | None) -> tuple[int, ScanEnd, bool]:
        crc = store.config.check_crc_on_recover
        scan = FastScan(commitlog, begin, until, check_crc=crc, stop_on_crc=crc, batch_bytes=WALK_BATCH_BYTES, release_behind=True,
                        read_window=WALK_READ_WINDOW)  # read, not mapped: no page tables to build and tear down; flat RSS
        return sum(len(batch.rows) for batch in scan), scan.end, bool(scan.blanks)

    bounds = [] if first is None else [start, *(seg.base_offset for seg in segments[first + 1 :] if stop is None or seg.base_offset < stop)]
    begins = []
    for begin, until in zip(bounds, [*bounds[1:], stop]) if not store.is_dledger and workers > 1 else []:
        seg_end = segments[commitlog.segment_index(begin)].end_offset
        begins += [begin, *walk_splits(commitlog, begin, seg_end if until is None else min(until, seg_end))]
    if len(begins) < 2:
        count, end, _ = walk(start, stop)
        return count, end
    cuts = set(begins) - set(bounds)
    spans = list(zip(begins, [*begins[1:], stop]))  # the last ends at ``stop`` (None: the log's end)
    pool = ThreadPoolExecutor(workers, thread_name_prefix="mqtool-info-walk")
    try:
        futures = [pool.submit(walk, begin, until) for begin, until in spans]
        count = 0
        for (begin, until), future in zip(spans, futures):
            walked, end, blank = future.result()
            if begin == begins[-1] or end.offset < until:  # the chain ends in this stretch, as a walk on from ``begin`` ends
                return count + walked, end
            if not ((blank or until in cuts) and end.offset == until):
                walked, end, _ = walk(begin, stop)
                return count + walked, end
            count += walked
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # walks of segments past the end not started
    raise AssertionError("unreachable: the last segment's walk ends the chain")


def walk_splits(commitlog, begin: int, until: int) -> list[int]:
    """Where ``compiled_end`` cuts a segment's ``[begin, until)`` into walks: the record starts found after each cut."""
    pieces = -(-(until - begin) // WALK_SPLIT_BYTES)
    if pieces < 2:
        return []
    from .fastscan import ReadWindow, find_record_start
    from .resync import RESYNC_CHAIN

    seg = commitlog.segments[commitlog.segment_index(begin)]
    window, cuts = ReadWindow(seg.path, WALK_READ_WINDOW // 4, seg.size), []  # 1 MiB: a cut needs three whole records in it
    try:
        for k in range(1, pieces):
            at = begin + (until - begin) * k // pieces
            array, _ = window.read(at - seg.base_offset)
            found = find_record_start(array, 0, array.shape[0], at, RESYNC_CHAIN, blanks=False)
            if found >= 0 and at + found < until and (not cuts or at + found > cuts[-1]):
                cuts.append(at + found)
    finally:
        window.close()
    return cuts


def commitlog_summary(store: Store, start: int | None = None) -> dict[str, Any]:
    """The commit log and its logical end from ``start`` (default: third-from-last segment; DLedger: the entry walk)."""
    segments = store.commitlog.segments
    if start is None:
        start = segments[max(0, len(segments) - 3)].base_offset if segments else 0
    if store.recovers_dledger_data:  # its recovery is DLedger's entry walk, which checks entry headers only (§15.4)
        from .dledgerstart import data_recovery

        recovery = data_recovery(store.commitlog)
        count, end = recovery.walked, recovery.end
        start = segments[recovery.start_file].base_offset
    else:
        count, end = logical_end(store, start)
    return {"dirs": sorted({str(s.path.parent) for s in segments}), "file_size": store.commitlog.file_size,
            "segments": [{"name": s.path.name, "size": s.size} for s in segments], "min_offset": store.commitlog.min_offset,
            "max_offset": end.offset, "scan_from": start, "messages_scanned": count, "end_reason": end.reason, "end_detail": end.detail}


def queue_summaries(store: Store) -> list[dict[str, Any]]:
    v5 = store.rules.cq_min_offset_v5
    cl_min = store.commitlog.min_offset
    rows = []
    for queue in store.consume_queues:
        recovered = queue.recover()
        min_offset = queue.corrected_min_offset(cl_min, recovered.end, v5=v5)
        rows.append({"topic": queue.topic, "queue_id": queue.queue_id, "min_offset": min_offset, "max_offset": recovered.max_offset,
                     "messages": max(recovered.max_offset - min_offset, 0), "files": len(queue.files),
                     "max_phys_offset": recovered.max_phys_offset})
    return rows


def index_summary(store: Store) -> dict[str, Any] | None:
    """The index geometry and each file's header; None where no index is read (``unreadable_index_notes``)."""
    geometry = store.index_geometry if store.unreadable_index is None else None
    if geometry is None:
        return None
    files = [{"name": f.name, "size": f.size, **{k: getattr(f.header, k) for k in INDEX_HEADER_FIELDS}, "entries": f.header.entry_count}
             for f in store.index_files]
    return {"hash_slot_num": geometry.hash_slot_num, "index_num": geometry.index_num, "files": files}


def batch_queue_summaries(store: Store) -> list[dict[str, Any]]:
    """Each batch consume queue as loaded (§5.5): its units to its recovery's end and their queue offset range."""
    from .batchconsumequeue import UNIT_SIZE  # not loaded by a lookup's walk (``logical_end``)

    out = []
    for q in store.batch_consume_queues:
        begin, end = (q.files[0][0] if q.files else 0), q.recover()
        units = max(end - begin, 0) // UNIT_SIZE
        first, last = (q.unit_at(begin), q.unit_at(end - UNIT_SIZE)) if units else (None, None)
        min_offset = first.msg_base_offset if first else 0
        max_offset = last.msg_base_offset + last.batch_size if last else 0
        out.append({"topic": q.topic, "queue_id": q.queue_id, "units": units, "min_offset": min_offset, "max_offset": max_offset,
                    "messages": max_offset - min_offset, "files": len(q.files)})
    return out


def store_summary(store: Store, scan_from: int | None = None) -> dict[str, Any]:
    guess = store.version_guess
    cp = store.checkpoint
    commitlog = commitlog_summary(store, scan_from)  # first: a long walk loads numpy, and the queues are then judged on its view
    queues = queue_summaries(store)
    topics: dict[str, dict[str, int]] = {}
    for q in queues:
        t = topics.setdefault(q["topic"], {"queues": 0, "messages": 0})
        t["queues"] += 1
        t["messages"] += q["messages"]
    lock_kind = not_a_file(store.path(LOCK_FILE)) if store.root is not None else None
    return {
        "store": str(store.root) if store.root else None,
        "version": version_doc(guess) if not guess.given else given_version_doc(store),
        "abort_file": None if store.abort is None else {"present": True, "pid": store.abort.pid, "directory": store.abort.directory,
                                                            "special": store.abort.special},
        "lock_file": store.file(LOCK_FILE) is not None,
        "lock_directory": lock_kind == A_DIRECTORY,  # ``nextstart.open_refusal``
        # a FIFO, socket or device node (``liveness.lock_holder`` never waits on it)
        "lock_special": lock_kind in (A_SOCKET, A_SPECIAL),
        "checkpoint": None if cp is None else {**cp._asdict(), "min_timestamp": cp.min_timestamp, "used_bytes": store.checkpoint_used_bytes},
        "checkpoint_file": None if cp is not None or store.root is None else checkpoint_absent(store),
        "commitlog": commitlog, "topics": topics, "queues": queues, "batch_queues": batch_queue_summaries(store), "index": index_summary(store),
        "dledger": dledger_summary(store) if store.is_dledger else None,
        "notes": [*store.notes, *([store.checkpoint_size_problem] if store.checkpoint_size_problem else []), *unreadable_index_notes(store),
                  *unchecked_parts(store.root), *unmounted_notes(store)],
    }


def unmounted_notes(store: Store) -> list[str]:
    """The dangling symlink ``recover`` and ``repair`` refuse (``unmounted_file``), unless a note says it."""
    from .mappedfile import UNMOUNTED
    from .nextstart import unmounted_file

    if store.root is None or any(UNMOUNTED in note for note in store.notes) or (unmounted := unmounted_file(store)) is None:
        return []
    return [unmounted]


def checkpoint_absent(store: Store) -> str:
    """What info says of an unreadable checkpoint: a directory (refused) or missing (created, timestamps 0; §6, §8.4)."""
    from .nextstart import checkpoint_refusal

    if (why := checkpoint_refusal(store, "")) is not None:
        return f"{why.removeprefix('checkpoint: ')}: the broker refuses to start"
    return "missing: the broker creates it and reads every timestamp as 0"


def unreadable_index_notes(store: Store) -> list[str]:
    """Each index file, with its size, when none can be read (``Store.unreadable_index``)."""
    if store.unreadable_index is None:
        return []
    sizes = ", ".join(f"{p.name} is {p.stat().st_size} bytes" for p in list_index_files(store.path("index")))
    return [f"index files not read ({sizes}): {store.unreadable_index}"]


def dledger_summary(store: Store) -> dict[str, Any]:
    """A DLedger store's member, entries and checkpoint (reference §15), from ``dledgerstart.data_recovery``."""
    from ..formats import dledger as dfmt
    from .dledgerstart import data_recovery

    cl = store.commitlog
    layout = cl.layout
    files = cl.entry_segments()
    held = cl.segment_index(files[0].base_offset) if files else None  # None for an empty first file: it holds no entry
    first = dfmt.decode_entry_header(cl.mapped(held).buf, 0, files[0].base_offset) if held is not None else None
    recovery = data_recovery(cl)
    last_index = recovery.last_index
    first_index = first.index if first is not None and first.magic == dfmt.ENTRY_MAGIC else None
    index_files = layout.index_files()
    units = sum(1 for _ in cl.index_units())
    currterm = layout.currterm or {}
    return {"home": str(layout.home), "self_id": layout.self_id, "data_files": len(files), "data_file_size": cl.file_size,
            "divided_offset": cl.divided_offset, "first_index": first_index, "last_index": last_index, "last_term": recovery.last_term,
            "entries": last_index - first_index + 1 if first_index is not None and last_index >= 0 else 0,
            "end_offset": recovery.end.offset, "end_reason": recovery.end.reason, "committed_index": layout.committed_index,
            "end_index": layout.end_index, "committed_pos": recovery.committed_pos,  # DLedger's, after its recovery (updateCommittedIndex)
            "current_term": currterm.get("currTerm"), "vote_leader": currterm.get("voteLeader"), "index_files": len(index_files),
            "index_file_size": index_files[0][1].stat().st_size if index_files else None, "index_units": units}


def given_version_doc(store: Store) -> dict[str, Any]:
    """``version_doc`` of a ``--broker-version``, with the store's own marks and what they say of it (``given_source``)."""
    guess, marks = store.version_guess, detect_version(store)
    source = given_source(store, marks)
    label = str(guess) if source == "given" else f"{guess.version} ({source})"
    return {**version_doc(guess), "label": label, "evidence": marks.evidence}


def version_doc(guess) -> dict[str, Any]:
    """The version, its eras (``rules.ERAS``), the evidence, and the planning rules deciding between eras left."""
    candidates = list(guess.candidates)
    deciding = sorted({r for c in candidates[1:] for r in rules_deciding(candidates[0], c)})
    return {"version": str(guess.version) if guess.version else None, "label": str(guess),
            "eras": [{"era": e.name, "releases": e.releases, "distinct": e.distinct} for e in guess.eras],
            "candidates": [str(c) for c in candidates] if guess.version is None else [],
            "deciding_rules": deciding if guess.version is None else [], "evidence": guess.evidence}
