"""Plans for ``recover``, ``truncate-dirty``, ``rebuild-cq`` and ``rebuild-index``: what the broker's
load and recovery would do to a store, computed from the read-only store model.

``plan_recover`` follows ``DefaultMessageStore.load`` + ``recover`` + ``start``'s reput, per version
(reference §8.2-§8.12, ``rules.RecoveryRules``):

1. consume queue recovery of every queue (§5.7) -> the max CQ physical offset;
2. index load: after an abnormal exit, files newer than ``indexMsgTimestamp`` are deleted (§6.9);
3. the commit log scan from the version's start segment (§8.4/§8.5), dispatching where the
   broker dispatches (abnormal recovery; 5.3.2+ normal recovery past the CQ max), with the
   4.9.2-4.9.8 delay quirk (§3.5);
4. the commit log cut (``truncateDirtyFiles``, §8.9) and, if the CQs reach the cut,
   ``truncateDirtyLogicFiles`` (§5.8);
5. 4.5.1-4.9.8: the reput from the max CQ physical offset at start-up (§8.12);
6. the checkpoint the broker persists, and the abort file a clean stop removes.

Unlike the broker, the plan zeroes the bytes it cuts (the dirty tail of the last segment, CQ
units past each queue's end) so the next scan cannot read them back.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable

import numpy as np

from ..errors import BadInput, UnknownStoreVersion
from ..formats import checkpoint as cpfmt
from ..formats import markers
from ..formats.config import topic_names
from ..formats.dispatch import SCHEDULE_TOPIC
from ..store import Store
from ..store.commitlog import StopReason
from ..store.mappedfile import MappedFile
from ..store.version import BrokerVersion
from ..writers import S_WRITE, IndexWriterService, offset_file_name
from . import fastdispatch as fd
from .dispatch import TAGS_DELIVERY_TIME, TAGS_HASH, DispatchCache, TopicTable, after_phys, phase_scanner, queue_groups
from .lost import data_extents, record_at, records_after
from .plan import (
    Action,
    CheckpointPlan,
    CommitLogPlan,
    DispatchPhase,
    Fingerprint,
    IndexFilePlan,
    IndexPlan,
    LostMessages,
    Message,
    Plan,
    QueueFile,
    QueuePlan,
    QueueRef,
    QueueSeed,
)
from .queues import QueueSim
from .rules import RecoveryRules
from .startfile import abnormal_start, normal_start

DEFAULT_GEOMETRY = (5_000_000, 20_000_000)  # MessageStoreConfig maxHashSlotNum / maxIndexNum


@dataclass(frozen=True)
class PlanOptions:
    mode: str | None = None  # recover: "abnormal" | "normal" | None (from the abort file)
    index_safe: bool | None = None  # messageIndexSafe (None: broker.conf's value)
    lost_limit: int = 1000
    full_scan: bool = False  # truncate-dirty: validate every segment, not only the broker's range
    topic: str | None = None  # rebuild-cq
    queue_id: int | None = None
    respect_topic_config: bool = False


# ---- common pieces --------------------------------------------------------------------------


def store_version(store: Store) -> tuple[BrokerVersion, str]:
    guess = store.version_guess
    if guess.version is None:
        raise UnknownStoreVersion("cannot tell which broker version wrote this store; pass --broker-version (e.g. 4.9.7 or 5.3.3)")
    source = "given" if guess.given else f"detected ({guess.label}: {'; '.join(guess.evidence)})"
    return guess.version, source


def config_options(store: Store) -> dict:
    """The settings a saved plan must be applied with (``apply`` reopens the store with them)."""
    c = store.config
    geometry = store.index_geometry
    return {
        "commitlog_file_size": store.commitlog.file_size,
        "consume_queue_file_size": store.consume_queue_file_size,
        "hash_slot_num": geometry.hash_slot_num if geometry else c.hash_slot_num,
        "index_num": geometry.index_num if geometry else c.index_num,
        "message_index_enable": c.message_index_enable,
        "message_index_safe": c.message_index_safe,
        "check_crc_on_recover": c.check_crc_on_recover,
        "delay_levels": c.delay_levels,
    }


def rel(store: Store, path: Path) -> str:
    return os.path.relpath(path, store.root)


def _message(m) -> Message:
    return Message(m.offset, m.size, m.topic, m.queue_id, m.queue_offset, m.transaction_type, m.store_timestamp, m.msg_id, m.uniq_key, m.keys, m.crc_ok)


def last_nonzero(path: Path, start: int, chunk: int = 1 << 24) -> int:
    """One past the last non-zero byte of the file at or after ``start`` (``start`` if none);
    holes of a sparse file are not read."""
    extents = data_extents(path, start)
    if not extents:
        return start
    with MappedFile(path) as mf:
        array = np.frombuffer(mf.buf, dtype=np.uint8) if mf.size else np.empty(0, dtype=np.uint8)
        try:
            for lo, hi in reversed(extents):
                end = hi
                while end > lo:
                    begin = max(lo, end - chunk)
                    nz = np.flatnonzero(array[begin:end])
                    if nz.size:
                        return begin + int(nz[-1]) + 1
                    end = begin
            return start
        finally:
            del array


@dataclass
class _Scan:
    """The commit log scan of a recovery (with or without dispatch)."""

    start: int
    rule: str
    end: object = None
    records: int = 0
    last_valid: int = -1


def _commitlog_plan(store: Store, scan: _Scan, lost_limit: int, legacy: bool, accept_v2: bool) -> tuple[CommitLogPlan, LostMessages, list[Action]]:
    cl = store.commitlog
    end = scan.end
    actions: list[Action] = []
    index = cl.segment_index(end.offset)
    cut_segment, zero_from, zero_to, deleted = None, end.offset, end.offset, []
    if index is not None:
        seg = cl.segments[index]
        cut_segment = seg.path.name
        stop = seg.base_offset + last_nonzero(seg.path, end.offset - seg.base_offset)
        if stop > end.offset:
            zero_to = stop
            actions.append(Action("zero-range", rel(store, seg.path), end.offset - seg.base_offset, stop - seg.base_offset, "dirty bytes after the valid end"))
        deleted = [s for s in cl.segments[index + 1 :]]
    for seg in deleted:
        actions.append(Action("delete", rel(store, seg.path), note="segment after the valid end (truncateDirtyFiles)"))
    found = records_after(cl, end.offset, limit=lost_limit, legacy=legacy, accept_v2=accept_v2)
    lost = LostMessages(
        found.records,
        found.record_bytes,
        tuple(_message(m) for m in found.listed),
        len(found.listed) == found.records,
        found.other_bytes,
        found.first_other,
    )
    first_invalid = None
    if end.reason not in (StopReason.ZEROS, StopReason.BLANK_LAST, StopReason.LIMIT, StopReason.NO_SEGMENTS):
        found_first = record_at(cl, end.offset, legacy)
        first_invalid = _message(found_first) if found_first is not None else None
    damage = not end.is_clean or found.records > 0
    plan = CommitLogPlan(
        cl.min_offset,
        cl.end_of_files,
        scan.start,
        scan.rule,
        scan.records,
        end.offset,
        end.reason,
        end.detail,
        damage,
        first_invalid,
        scan.last_valid,
        cut_segment,
        zero_from,
        zero_to,
        tuple(s.path.name for s in deleted),
    )
    return plan, lost, actions


def index_gaps(store: Store, index_plan: IndexPlan, end: int, legacy: bool) -> list[tuple[int, int]]:
    """Commit log ranges below ``end`` with a keyed record that no index file covers (files are
    contiguous in the broker: each begins with the first keyed record after the previous one)."""
    covered = [(f.end_phy_offset, f) for f in index_plan.files if f.action != "delete" and f.entries_after > 0]
    starts = {f.name: f for f in index_plan.files}
    gaps = []
    prev_end = None  # offset of the last indexed record so far
    cl = store.commitlog
    for f in sorted(starts.values(), key=lambda f: f.name):
        if f.action == "delete" or f.entries_after <= 0:
            continue
        begin = _begin_phy(store, f)
        start_at = cl.min_offset if prev_end is None else prev_end
        if begin is not None and begin > start_at and _keyed_record_between(store, start_at, begin, skip_first=prev_end is not None, legacy=legacy):
            gaps.append((start_at, begin))
        prev_end = max(prev_end or 0, f.end_phy_offset)
    if covered and prev_end is not None and prev_end < end and _keyed_record_between(store, prev_end, end, skip_first=True, legacy=legacy):
        gaps.append((prev_end, end))
    if not covered and _keyed_record_between(store, cl.min_offset, end, skip_first=False, legacy=legacy):
        gaps.append((cl.min_offset, end))
    return gaps


def _begin_phy(store: Store, f: IndexFilePlan) -> int | None:
    if f.action == "create":
        return None  # created by this plan from the dispatch: contiguous by construction
    with MappedFile(store.path("index", f.name)) as mf:
        from ..formats import index as ixfmt

        return ixfmt.read_header(mf.buf).begin_phy_offset


def _keyed_record_between(store: Store, start: int, stop: int, *, skip_first: bool, legacy: bool, limit: int = 64) -> bool:
    """True if a record with UNIQ_KEY or KEYS lies in ``[start, stop)`` (``start`` excluded if
    ``skip_first``); reads at most ``limit`` records, then assumes yes."""
    from ..formats.errors import FormatError
    from ..formats.properties import PropertyKey

    pos, seen = start, 0
    cl = store.commitlog
    while pos < stop and seen < limit:
        try:
            record = cl.read_record(pos)
        except (FormatError, LookupError):
            return False
        if not hasattr(record, "properties"):  # a blank: next segment
            index = cl.segment_index(pos)
            if index is None or index + 1 >= len(cl.segments):
                return False
            pos = cl.segments[index + 1].base_offset
            continue
        if not (skip_first and pos == start) and record.transaction_type.name != "ROLLBACK":
            props = record.property_map(legacy=legacy)
            if props.get(PropertyKey.UNIQ_KEY) or props.get(PropertyKey.KEYS, "").strip(" "):
                return True
            seen += 1
        pos += record.total_size
    return seen >= limit


def _unreadable_from_queues(lost: LostMessages, sims: dict, end: int, first_invalid: Message | None) -> LostMessages:
    """Consume queue entries past the cut whose message is not among the decoded lost records."""
    known = {m.offset for m in lost.messages} | ({first_invalid.offset} if first_invalid else set())
    refs = []
    for (topic, qid), sim in sorted(sims.items()):
        if not sim.exists or sim.recovered_max_phys <= end:
            continue
        for qoff, phys, size in sim.entries_from(end):
            if phys not in known and (lost.complete or phys < (lost.messages[-1].offset if lost.messages else end)):
                refs.append(QueueRef(topic, qid, qoff, phys, size))
    return replace(lost, unreadable=tuple(sorted(refs, key=lambda r: (r.offset, r.topic, r.queue_id))))


def _queue_plan(sim: QueueSim, min_before: int, max_before: int, clmin: int, v5: bool, seeds: tuple) -> QueuePlan:
    files = tuple(QueueFile(offset_file_name(f.base), f.action, f.zero_from) for f in sim.fates())
    return QueuePlan(
        sim.topic,
        sim.queue_id,
        min_before,
        max_before,
        sim.max_offset,
        sim.min_offset(clmin, v5=v5),
        sim.dropped_units,
        sim.cut_units,
        sim.resurrected_units,
        sim.added,
        sim.fillers,
        sim.first_added[0] if sim.first_added else None,
        sim.last_added[0] if sim.last_added else None,
        seeds,
        files,
    )


def _queue_actions(store: Store, queues: Iterable[QueuePlan], sims: dict) -> tuple[list[Action], bool]:
    """Deletions of consume queue files, and whether any file is rewritten or created."""
    actions, writes = [], False
    for q in queues:
        for f in q.files:
            if f.action == "delete":
                path = rel(store, sims[(q.topic, q.queue_id)].directory / f.name)
                actions.append(Action("delete", path, note=f"consume queue {q.topic}/{q.queue_id}"))
            else:
                writes = True
    return actions, writes


def _write_action(queues: bool, index: bool) -> list[Action]:
    if not (queues or index):
        return []
    what = " and ".join(w for w, on in (("consume queue", queues), ("index", index)) if on)
    return [Action("write-dispatch", "", note=f"{what} files rewritten or created, from the dispatch phases")]


def fingerprints(store: Store, paths: Iterable[Path], crc_paths: set[Path] = frozenset(), *, with_crc: bool = False) -> tuple[Fingerprint, ...]:
    """Size and mtime of every path that exists; CRC32 for ``crc_paths`` when ``with_crc``."""
    from ..store.fastscan import CRC_IMPLEMENTATION  # noqa: F401  (ISA-L loaded for crc32)

    out, seen = [], set()
    for p in paths:
        if p in seen or not p.exists():
            continue
        seen.add(p)
        st = p.stat()
        crc = file_crc32(p) if with_crc and p in crc_paths else None
        out.append(Fingerprint(rel(store, p), st.st_size, st.st_mtime_ns, crc))
    return tuple(out)


def file_crc32(path: Path, chunk: int = 1 << 24) -> int:
    try:
        from isal.isal_zlib import crc32
    except ImportError:  # pragma: no cover
        from zlib import crc32
    crc = 0
    with MappedFile(path) as mf:
        buf = memoryview(mf.buf) if mf.size else memoryview(b"")
        try:
            for p in range(0, mf.size, chunk):
                crc = crc32(buf[p : p + chunk], crc)
        finally:
            buf.release()
    return crc


# ---- recover --------------------------------------------------------------------------------


def plan_recover(store: Store, options: PlanOptions = PlanOptions(), *, command: str = "recover", with_crc: bool = False, cache: DispatchCache | None = None) -> Plan:
    """Everything the broker's load + recovery + start-up reput would do (module docstring).
    ``cache`` keeps the dispatched batches for an apply in the same process."""
    root = store.path()
    version, source = store_version(store)
    rules = RecoveryRules(version)
    mode = options.mode or ("abnormal" if store.abort_present else "normal")
    config = store.config
    cp_exists = store.checkpoint is not None
    cp = store.checkpoint or cpfmt.StoreCheckpoint(0, 0, 0)
    index_safe = config.message_index_safe if options.index_safe is None else options.index_safe
    index_enable = config.message_index_enable
    legacy = rules.legacy_properties
    cl = store.commitlog
    clmin = cl.min_offset
    notes: list[str] = []
    dispatching = command == "recover"

    # 1. consume queue recovery
    sims = {(q.topic, q.queue_id): QueueSim.load(q, dedup_by_end=rules.cq_dedup_by_end) for q in store.consume_queues}
    before = {key: (sim.min_offset(clmin, v5=rules.cq_min_offset_v5), sim.max_offset) for key, sim in sims.items()}
    max_cq = max((s.recovered_max_phys for s in sims.values()), default=-1)
    seeds_a = {key: QueueSeed(*_seed(sim)) for key, sim in sims.items()}

    # 2. index load (§6.9)
    index_files = store.index_files
    kept, dropped = [], []
    for f in index_files:
        if mode == "abnormal" and dispatching and f.header.end_timestamp > cp.index_msg_timestamp:
            dropped.append(f)
        else:
            kept.append(f)

    # 3. the scan, dispatching where the broker does
    if options.full_scan:
        start_index, rule = 0, "every segment from the first (--full-scan)"
        start = cl.min_offset
    elif mode == "abnormal":
        s = abnormal_start(cl, rules, cp, index_safe=index_safe and index_enable)
        start, rule = s.offset, s.rule
    else:
        s = normal_start(cl, rules, max_cq)
        start, rule = s.offset, s.rule
    dispatch_a = dispatching and (mode == "abnormal" or rules.normal_dispatches)
    threshold_a = max_cq if (dispatching and mode == "normal" and rules.normal_dispatches) else None
    tags_a = TAGS_HASH if (mode == "abnormal" and rules.delay_table_missing_in_recovery) else TAGS_DELIVERY_TIME
    topics = cache.topics if cache is not None else TopicTable()
    index_writer = _index_writer(store, rules, kept, dropped) if dispatching and index_enable else None
    scan = _Scan(start, rule)
    phases: list[DispatchPhase] = []
    scanner = phase_scanner(
        cl, start, None, discipline="recovery", tags=tags_a, delay_table=store.delay_table, legacy_properties=legacy,
        index_enable=index_enable, check_crc=config.check_crc_on_recover, topics=topics,
    )
    counts = _Counts()
    phase_counts = [counts]
    for batch in scanner:
        if dispatch_a:
            batch = after_phys(batch, threshold_a)
            _feed(batch, topics, sims, store, rules, index_writer, counts)
            if cache is not None:
                cache.add(0, batch)
    scan.end, scan.records, scan.last_valid = scanner.end, scanner.records, scanner.last_valid_offset
    end = scan.end.offset
    if dispatch_a:
        phases.append(DispatchPhase("recovery", start, end, "recovery", tags_a, True, index_enable, counts.records, counts.cq, counts.sched if tags_a == TAGS_HASH else 0, threshold_a))
        if tags_a == TAGS_HASH and counts.sched:
            notes.append(
                f"{counts.sched} delayed message(s) of {SCHEDULE_TOPIC} get their TAGS hash as consume queue tags code, "
                f"not the delivery time: {version} recovers before it loads the delay levels (reference §3.5); the broker delivers them at once"
            )

    # 4. commit log cut, CQ truncation
    cl_plan, lost, actions = _commitlog_plan(store, scan, options.lost_limit, legacy, rules.accepts_v2_magic)
    lost = _unreadable_from_queues(lost, sims, end, cl_plan.first_invalid)
    walk = rules.abnormal_truncates_cq_always if mode == "abnormal" else False
    if mode == "abnormal" or rules.normal_truncates_cq:
        walk = walk or max_cq >= end
    if not cl.segments:  # destroyLogics (§8.10)
        for sim in sims.values():
            for base in list(sim.files):
                sim._delete(base)
            sim.state[S_WRITE] = -1
        notes.append("no commit log segment: every consume queue file is deleted (destroyLogics)")
    elif walk:
        for sim in sims.values():
            sim.truncate(end)
    seeds_b = {key: QueueSeed(*_seed(sim)) for key, sim in sims.items()}  # where the reput starts

    # 5. 4.5.1-4.9.8 start(): reput from the max CQ physical offset
    if dispatching and rules.reput_from_cq_max and cl.segments:
        reput_from = max([clmin, 0] + [int(s.state[1]) for s in sims.values()])
        if reput_from < end:
            counts = _Counts()
            phase_counts.append(counts)
            reput = phase_scanner(
                cl, reput_from, end, discipline="reput", tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table,
                legacy_properties=legacy, index_enable=index_enable, check_crc=False, topics=topics,
            )
            for batch in reput:
                _feed(batch, topics, sims, store, rules, index_writer, counts)
                if cache is not None:
                    cache.add(len(phases), batch)
            phases.append(DispatchPhase("reput", reput_from, end, "reput", TAGS_DELIVERY_TIME, True, index_enable, counts.records, counts.cq))
            for skipped in reput.skipped:
                notes.append(f"reput skips an unreadable record at {skipped.offset} ({skipped.reason}: {skipped.detail})")

    # queue results
    phase_names = [p.name for p in phases]
    queue_plans = []
    for key, sim in sorted(sims.items()):
        seeds = tuple(seeds_a.get(key) if name == "recovery" else seeds_b.get(key) for name in phase_names)
        mn, mx = before.get(key, (0, 0))
        queue_plans.append(_queue_plan(sim, mn, mx, clmin, rules.cq_min_offset_v5, seeds))
    queue_deletes, queue_writes = _queue_actions(store, queue_plans, sims)
    actions += queue_deletes

    # index
    index_plan = None
    if dispatching:
        indexed_from = min((p.start for p in phases if p.index), default=None)
        index_plan, index_actions = _index_plan(store, kept, dropped, index_writer, index_enable, indexed_from)
        actions += index_actions
        if dropped and not index_safe and index_enable:
            first_dropped = dropped[0].header.begin_phy_offset
            if first_dropped < start:
                notes.append(
                    f"index entries of records in [{first_dropped}, {start}) are lost: their index file is deleted after the abnormal exit "
                    "and recovery re-indexes only from its start segment (broker behaviour with messageIndexSafe=false; --index-safe avoids it)"
                )
    actions += _write_action(queue_writes, index_plan is not None and any(f.action in ("append", "create") for f in index_plan.files))
    if index_plan is not None and index_enable and cl.segments:
        for a, b in index_gaps(store, index_plan, end, legacy):
            notes.append(f"no index file covers the keyed records in [{a}, {b}) (an index file is missing; the broker does not rebuild it): run `mqtool rebuild-index`")
    for sim in sims.values():
        for base, path in sim.original.items():
            size = path.stat().st_size
            if size != sim.file_size and base in sim.files:
                notes.append(f"{rel(store, path)} is {size} bytes, not {sim.file_size}: the broker refuses to load it; it is rewritten at full size")
    if dispatching:
        notes += _dispatch_notes(store, rules, mode, phases, max_cq, end, kept, legacy)

    # checkpoint, abort
    cp_plan = None
    remove_abort = False
    if dispatching:
        last_cq = [c.last_cq_ts for c in phase_counts if c.last_cq_ts is not None]
        after = cp._replace(logics_msg_timestamp=last_cq[-1] if last_cq else cp.logics_msg_timestamp)
        if index_plan is not None and index_plan.index_msg_timestamp_after is not None:
            after = after._replace(index_msg_timestamp=index_plan.index_msg_timestamp_after)
        if rules.writes_confirm_offset and scan.last_valid >= 0:
            after = after._replace(confirm_phy_offset=scan.last_valid)
        cp_plan = CheckpointPlan(cp_exists, cp._asdict(), after._asdict())
        if cp_plan.changed:
            actions.append(Action("write-checkpoint", "checkpoint", note="values the broker persists after this recovery"))
        remove_abort = store.abort_present
        if remove_abort:
            actions.append(Action("delete", markers.ABORT_FILE, note="a clean shutdown removes the abort file"))

    plan = Plan(
        command,
        str(root.resolve()),
        int(time.time() * 1000),
        str(version),
        source,
        mode if dispatching else None,
        {**config_options(store), "index_safe": index_safe, "lost_limit": options.lost_limit, "full_scan": options.full_scan},
        cl_plan,
        lost,
        tuple(phases),
        tuple(queue_plans),
        index_plan,
        cp_plan,
        remove_abort,
        tuple(notes),
        tuple(actions),
        (),
    )
    return plan.with_inputs(_inputs(store, plan, sims, with_crc=with_crc))


def plan_truncate_dirty(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None) -> Plan:
    """Cut the commit log after its last valid record (zeroing the dirty bytes, deleting later
    segments) and the consume queue entries at or past the cut, as the broker's
    ``truncateDirtyFiles`` / ``truncateDirtyLogicFiles`` do. No dispatch, no index, no checkpoint."""
    return plan_recover(store, options, command="truncate-dirty", with_crc=with_crc)


def _dispatch_notes(store: Store, rules: RecoveryRules, mode: str, phases: list, max_cq: int, end: int, kept: list, legacy: bool) -> list[str]:
    """What the broker's re-dispatch leaves imperfect, so the operator is not surprised."""
    notes = []
    cl = store.commitlog
    covered_from = min((p.start for p in phases if p.consume_queues), default=end)
    if 0 <= max_cq < end and covered_from > max_cq and _keyed_or_any_record_between(store, max_cq, min(covered_from, end)):
        notes.append(
            f"records in [{max_cq}, {min(covered_from, end)}) lie past the consume queues' end and {rules.version}'s {mode} recovery does not "
            "re-dispatch them (they stay unreadable by consumers): run `mqtool rebuild-cq`, or `mqtool recover --abnormal`"
        )
    for p in phases:
        if p.after_phys is not None and p.after_phys >= 0 and _record_starts_at(store, p.after_phys, legacy):
            notes.append(
                f"5.3.2+ normal recovery re-dispatches only records strictly after the consume queues' max offset {p.after_phys}: "
                "the record that starts exactly there is not re-dispatched (reference §8.5), as the broker does"
            )
    if kept and any(p.index for p in phases):
        last = kept[-1].header.end_phy_offset
        dispatched = any(p.start <= last < p.stop and (p.after_phys is None or last > p.after_phys) for p in phases if p.index)
        if dispatched and _record_starts_at(store, last, legacy):
            notes.append(
                f"the record at {last} (the last one already indexed) is indexed again by the re-dispatch (buildIndex skips only offsets below "
                "the index's end offset): its keys get duplicate index entries and queries return it twice, as on the broker"
            )
    return notes


def _record_starts_at(store: Store, offset: int, legacy: bool) -> bool:
    found = record_at(store.commitlog, offset, legacy)
    return found is not None and found.topic is not None


def _keyed_or_any_record_between(store: Store, start: int, stop: int) -> bool:
    """True if a record starts in ``[start, stop)``."""
    return start < stop and _record_starts_at(store, start, False)


def _seed(sim: QueueSim) -> tuple[int | None, int]:
    s = sim.queue_state
    return s.write_pos, s.max_phys_offset


class _Counts:
    """What one dispatch phase sent: records, CQ-eligible records, SCHEDULE_TOPIC units placed,
    and the store time of the last CQ-eligible record (the broker's logicsMsgTimestamp)."""

    def __init__(self):
        self.records = 0
        self.cq = 0
        self.sched = 0
        self.last_cq_ts: int | None = None


def _feed(batch, topics: TopicTable, sims: dict, store: Store, rules: RecoveryRules, index_writer, counts: _Counts) -> None:
    """One dispatched batch into the queue simulations and the (dry) index writer."""
    if len(batch) == 0:
        return
    counts.records += len(batch)
    cq_mask = batch.to_consume_queue
    if cq_mask.any():
        counts.cq += int(cq_mask.sum())
        counts.last_cq_ts = int(batch.fields[np.flatnonzero(cq_mask)[-1], fd.F_STORE_TS])
    for topic, qid, rows in queue_groups(batch, topics.names):
        sim = sims.get((topic, qid))
        if sim is None:
            sim = sims[(topic, qid)] = QueueSim.new(topic, qid, store.path("consumequeue", topic, str(qid)), store.consume_queue_file_size, dedup_by_end=rules.cq_dedup_by_end)
        placed = sim.place(*batch.queue_columns(rows))
        if topic == SCHEDULE_TOPIC:
            counts.sched += placed
    if index_writer is not None:
        index_writer.put_batch(batch.phys, batch.fields[:, fd.F_STORE_TS], batch.to_index, batch.fields[:, fd.F_KEY_START], batch.fields[:, fd.F_KEY_COUNT], batch.keys)


def _geometry(store: Store) -> tuple[int, int]:
    g = store.index_geometry
    return (g.hash_slot_num, g.index_num) if g else DEFAULT_GEOMETRY


def _index_writer(store: Store, rules: RecoveryRules, kept: list, dropped: list) -> IndexWriterService:
    """A dry ``IndexWriterService`` continuing after the last kept file (``dropped`` names are
    not reused)."""
    slots, num = _geometry(store)
    last = kept[-1] if kept else None
    append = (last.name, last.path) if last is not None and last.header.index_count < num else None
    return IndexWriterService(
        store.path("index"),
        slots,
        num,
        previous=last.header if last is not None else None,
        taken_names={f.name for f in kept + dropped},
        append_to=append,
        after_name=last.name if last is not None else None,
        counts_used_slots=rules.index_counts_used_slots,
        dry=True,
    )


def _index_plan(store: Store, kept: list, dropped: list, writer: IndexWriterService | None, enabled: bool, indexed_from: int | None) -> tuple[IndexPlan, list[Action]]:
    slots, num = _geometry(store)
    files, actions = [], []
    results = {}
    if writer is not None:
        writer.close()
        results = {r.name: r for r in writer.results if r.entries_added or r.created}
    for f in dropped:
        h = f.header
        files.append(IndexFilePlan(f.name, "delete", "newer than the checkpoint's indexMsgTimestamp after an abnormal exit (IndexService.load)", h.entry_count, 0, h.begin_timestamp, h.end_timestamp, h.end_phy_offset))
        actions.append(Action("delete", rel(store, f.path), note="index file newer than indexMsgTimestamp"))
    for f in kept:
        h = f.header
        r = results.pop(f.name, None)
        if r is None:
            files.append(IndexFilePlan(f.name, "keep", "", h.entry_count, h.entry_count, h.begin_timestamp, h.end_timestamp, h.end_phy_offset))
        else:
            files.append(IndexFilePlan(f.name, "append", "re-dispatched records", h.entry_count, r.end.entry_count, r.end.begin_timestamp, r.end.end_timestamp, r.end.end_phy_offset))
    for r in results.values():
        files.append(IndexFilePlan(r.name, "create", "dispatched records", 0, r.end.entry_count, r.end.begin_timestamp, r.end.end_timestamp, r.end.end_phy_offset))
    keys = sum(p.entries_after - p.entries_before for p in files if p.action in ("append", "create"))
    full = writer.full_end_timestamp if writer is not None and writer.full_end_timestamp else None
    plan = IndexPlan(enabled, slots, num, tuple(files), indexed_from, keys, full, kept[-1].name if kept else None)
    return plan, actions


def _inputs(store: Store, plan: Plan, sims: dict, *, with_crc: bool) -> tuple[Fingerprint, ...]:
    """Every file the plan read (size, mtime) or changes (and, for saved plans, their CRC32)."""
    root = store.path()
    read: list[Path] = []
    changed: set[Path] = set()
    cl = store.commitlog
    start = plan.commitlog.scan_from if plan.commitlog else cl.min_offset
    for phase in plan.dispatch:
        start = min(start, phase.start)
    read += [seg.path for seg in cl.segments if seg.end_offset > start]
    changed.update(root / a.path for a in plan.actions if a.op in ("zero-range", "delete"))
    for q in plan.queues:
        sim = sims[(q.topic, q.queue_id)]
        read += sim.original.values()
        changed.update(sim.directory / f.name for f in q.files)
    read += [f.path for f in store.index_files]
    if plan.index is not None:
        changed.update(root / "index" / f.name for f in plan.index.files if f.action != "keep")
    if plan.checkpoint is not None and plan.checkpoint.changed:
        changed.add(root / "checkpoint")
    read += [root / "checkpoint", root / markers.ABORT_FILE]
    return fingerprints(store, read + sorted(changed), changed, with_crc=with_crc)


# ---- rebuild-cq / rebuild-index -------------------------------------------------------------


def _valid_end(store: Store, rules: RecoveryRules, topics: TopicTable) -> tuple[int, str, list[str]]:
    """The commit log's valid end as the broker's recovery would find it (no dispatch)."""
    cl = store.commitlog
    notes = []
    if store.abort_present:
        cp = store.checkpoint or cpfmt.StoreCheckpoint(0, 0, 0)
        start = abnormal_start(cl, rules, cp, index_safe=store.config.message_index_safe and store.config.message_index_enable)
        notes.append("the abort file is present (the broker did not stop cleanly): consider `mqtool recover` first; rebuilding up to the end abnormal recovery would find")
    else:
        max_cq = max((QueueSim.load(q).recovered_max_phys for q in store.consume_queues), default=-1)
        start = normal_start(cl, rules, max_cq)
    scanner = phase_scanner(
        cl, start.offset, None, discipline="recovery", tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table,
        legacy_properties=rules.legacy_properties, index_enable=False, check_crc=store.config.check_crc_on_recover, topics=topics,
    )
    for _ in scanner:
        pass
    end = scanner.end
    if not end.is_clean:
        notes.append(f"the commit log's valid end {end.offset} is damage ({end.reason}: {end.detail}); records after it are not dispatched (see `mqtool recover`)")
    return end.offset, start.rule, notes


def _rebuild_plan(store: Store, command: str, options: dict, phase: DispatchPhase, queues, index_plan, cp_plan, notes, actions) -> Plan:
    version, source = store_version(store)
    return Plan(
        command, str(store.path().resolve()), int(time.time() * 1000), str(version), source, None,
        {**config_options(store), **options}, None, None, (phase,), tuple(queues), index_plan, cp_plan, False,
        tuple(notes), tuple(actions), (),
    )


def plan_rebuild_cq(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None) -> Plan:
    """Regenerate consume queue files from the commit log, as the broker's reput service
    writes them when they are missing (``start()`` re-dispatches from the commit log min,
    §8.12): every record from the first segment to the valid end, tags code = delivery time for
    delayed messages, filler units where a queue's first record is not queue offset 0 (§5.3).
    The selected queues' files are replaced; files the rebuild does not produce are deleted."""
    store.path()
    version, _ = store_version(store)
    rules = RecoveryRules(version)
    cl = store.commitlog
    topics = cache.topics if cache is not None else TopicTable()
    end, _rule, notes = _valid_end(store, rules, TopicTable())
    allowed = None
    if options.respect_topic_config:
        doc = store.config_file("topics.json")
        if doc is None:
            raise BadInput(f"{store.path('config', 'topics.json')}: missing or unreadable, so --respect-topic-config cannot tell which topics exist")
        allowed = topic_names(doc)

    def selected(topic: str, qid: int) -> bool:
        return (options.topic is None or topic == options.topic) and (options.queue_id is None or qid == options.queue_id)

    existing = {(q.topic, q.queue_id): q for q in store.consume_queues if selected(q.topic, q.queue_id)}
    sims: dict = {}
    skipped: dict[str, int] = {}
    counts = _Counts()
    scanner = phase_scanner(
        cl, cl.min_offset, end, discipline="reput", tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table,
        legacy_properties=rules.legacy_properties, index_enable=False, check_crc=False, topics=topics,
    )
    for batch in scanner:
        counts.records += len(batch)
        if cache is not None:
            cache.add(0, batch)
        for topic, qid, rows in queue_groups(batch, topics.names):
            if not selected(topic, qid):
                continue
            if allowed is not None and topic not in allowed:
                skipped[topic] = skipped.get(topic, 0) + len(rows)
                continue
            sim = sims.get((topic, qid))
            if sim is None:
                sim = sims[(topic, qid)] = QueueSim.new(topic, qid, store.path("consumequeue", topic, str(qid)), store.consume_queue_file_size, dedup_by_end=rules.cq_dedup_by_end)
            counts.cq += sim.place(*batch.queue_columns(rows))
    for skipped_record in scanner.skipped:
        notes.append(f"unreadable record at {skipped_record.offset} skipped, as the broker's reput does ({skipped_record.reason})")
    for topic, n in sorted(skipped.items()):
        notes.append(f"topic {topic!r} is not in config/topics.json: its {n} record(s) get no consume queue entries (--respect-topic-config)")
    for key, q in existing.items():
        sim = sims.get(key) or QueueSim.new(q.topic, q.queue_id, q.directory, q.file_size, dedup_by_end=rules.cq_dedup_by_end)
        sim.original = {base: path for base, path in q.files}
        sims[key] = sim
    clmin = cl.min_offset
    queue_plans = []
    for key, sim in sorted(sims.items()):
        q = existing.get(key)
        if q is not None:
            old = QueueSim.load(q)
            before = (old.min_offset(clmin, v5=rules.cq_min_offset_v5), old.max_offset)
        else:
            before = (0, 0)
        queue_plans.append(_queue_plan(sim, before[0], before[1], clmin, rules.cq_min_offset_v5, (None,)))
    deletes, writes = _queue_actions(store, queue_plans, sims)
    phase = DispatchPhase("rebuild", clmin, end, "reput", TAGS_DELIVERY_TIME, True, False, counts.records, counts.cq)
    opts = {"topic": options.topic, "queue_id": options.queue_id, "respect_topic_config": options.respect_topic_config}
    plan = _rebuild_plan(store, "rebuild-cq", opts, phase, queue_plans, None, None, notes, deletes + _write_action(writes, False))
    return plan.with_inputs(_inputs(store, plan, sims, with_crc=with_crc))


def plan_rebuild_index(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None) -> Plan:
    """Regenerate every index file from the commit log, as ``IndexService.buildIndex`` builds them
    (every record from the first segment to the valid end; ROLLBACK records skipped). New files
    are named from the store time of their first record. The checkpoint's indexMsgTimestamp
    becomes the end time of the last file that filled (0 if none did), as the broker keeps it."""
    store.path()
    version, _ = store_version(store)
    rules = RecoveryRules(version)
    cl = store.commitlog
    topics = cache.topics if cache is not None else TopicTable()
    end, _rule, notes = _valid_end(store, rules, TopicTable())
    if store.index_geometry is None:
        notes.append(f"no index file and no --broker-config: the broker's default geometry {DEFAULT_GEOMETRY[0]} slots x {DEFAULT_GEOMETRY[1]} entries is used")
    old = store.index_files
    writer = _index_writer(store, rules, [], old)
    counts = _Counts()
    scanner = phase_scanner(
        cl, cl.min_offset, end, discipline="reput", tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table,
        legacy_properties=rules.legacy_properties, index_enable=True, check_crc=False, topics=topics,
    )
    for batch in scanner:
        _feed_index(batch, writer, counts)
        if cache is not None:
            cache.add(0, batch)
    index_plan, actions = _index_plan(store, [], old, writer, True, cl.min_offset)
    index_plan = replace(index_plan, files=tuple(replace(f, reason="replaced by the rebuild") if f.action == "delete" else f for f in index_plan.files))
    actions += _write_action(False, any(f.action == "create" for f in index_plan.files))
    cp = store.checkpoint
    cp_plan = None
    full = index_plan.index_msg_timestamp_after or 0
    if cp is not None and cp.index_msg_timestamp != full:
        cp_plan = CheckpointPlan(True, cp._asdict(), cp._replace(index_msg_timestamp=full)._asdict())
        actions.append(Action("write-checkpoint", "checkpoint", note="indexMsgTimestamp = end time of the last full index file"))
    phase = DispatchPhase("rebuild", cl.min_offset, end, "reput", TAGS_DELIVERY_TIME, False, True, counts.records, 0)
    plan = _rebuild_plan(store, "rebuild-index", {}, phase, (), index_plan, cp_plan, notes, actions)
    return plan.with_inputs(_inputs(store, plan, {}, with_crc=with_crc))


def _feed_index(batch, writer: IndexWriterService, counts: _Counts) -> None:
    if len(batch):
        counts.records += len(batch)
        writer.put_batch(batch.phys, batch.fields[:, fd.F_STORE_TS], batch.to_index, batch.fields[:, fd.F_KEY_START], batch.fields[:, fd.F_KEY_COUNT], batch.keys)
