"""The parts of a plan the one-version planners (``recover``, ``rebuild``) share: what a store says,
dispatched batches fed to the queue simulations and the index placement, and the plan records."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import BadInput, BadStoreFile, Refused
from ..formats import markers
from ..formats.dispatch import (NO_MULTI_DISPATCH, SCHEDULE_TOPIC, UNDECIDED_MULTI_DISPATCH, UNDECIDED_RELEASE, DispatchThrows,
                                LmqNotifyThrows)
from ..formats.index import DEFAULT_GEOMETRY, index_file_size
from ..store import Store
from ..store.store import SEGMENT_SIZE
from ..store.commitlog import StopReason
from ..store.mappedfile import MappedFile, open_read_only
from ..store.fastscan import as_array, last_nonzero, release_pages
from ..store.version import BrokerVersion, given_source
from ..dispatch import fastdispatch as fd
from ..dispatch.placement import IndexPlacement
from ..dispatch.scanner import MultiDispatch, TopicTable, consume_queue_entries
from ..store.pastend import records_after
from .lost import describe, record_at
from .plans import Action, CommitLogPlan, Fingerprint, IndexFilePlan, IndexPlan, LostMessages, Message, Plan, QueuePlan, QueueRef
from .queues import QueueSim
from ..store.rules import VersionRules


def store_version(store: Store) -> tuple[BrokerVersion, str]:
    """The version to plan under; refused for RocksDB or batch consume queues (reference §5.5, §5.6)."""
    if store.root is not None:
        if (store.path("consumequeue", "CURRENT")).exists():
            raise BadInput(f"{store.path('consumequeue')}: a RocksDB consume queue store (storeType=defaultRocksDB) is not supported")
        bcq = store.path("batchconsumequeue")
        if bcq.is_dir() and any(p.is_dir() for p in bcq.iterdir()):
            raise BadInput(f"{bcq}: BatchConsumeQueue topics (queue.type=BatchCQ) are not supported: "
                           "their records would be put in plain consume queues")
        if (missing := store.log_folder_missing) is not None:  # an empty log: the plan would cut every queue
            raise BadInput(f"{missing}: no such folder: nothing is planned on a commit log that is elsewhere or lost (if the broker's "
                           "storePathCommitLog names another folder, pass its broker.conf with --broker-config)")
        odd_queue_directory(store)
    unloadable_files(store)
    guess = store.version_guess  # decided: ``candidates.plan_under_candidates`` plans under each candidate
    return guess.version, given_source(store) if guess.given else f"detected: {guess.label} (evidence: mqtool info)"


def odd_queue_directory(store: Store) -> None:
    """Refuse a queue directory not named by its id's decimal (``01``), or a file at a queue's path."""
    if (blocked := next(iter(store.queue_path_files), None)) is not None:  # a plan's writes there fail as the broker's do
        raise Refused(f"{blocked.relative_to(store.root)}: no directory, where the broker reads and writes queue {blocked.name} of "
                      f"{blocked.parent.name}: it cannot write that queue, nor can a plan; no plan is made on such a store: move it aside "
                      "and plan again")
    odd = next((d for d in store.queue_directories if not d.read), None)
    if odd is not None:
        rel = odd.path.relative_to(store.root)
        raise Refused(f"{rel}: a queue directory the broker reads as queue {odd.queue_id} of {odd.topic}, yet it reads and writes that "
                      f"queue in {rel.parent / str(odd.queue_id)}, never in this one; no plan is made on such a store: move the directory "
                      "aside (or, if it holds that queue, rename it) and plan again")


def unloadable_files(store: Store) -> None:
    """Refuse a store the broker refuses to start on for its commit log or index/ (rules §2.13)."""
    from ..store.nextstart import created_link, log_refusal, unmounted_file

    if (unmounted := unmounted_file(store)) is not None:
        raise Refused(unmounted)
    if (created := created_link(store)) is not None:
        raise BadStoreFile(f"{created.path.relative_to(store.root)}: {created.what}, whose target the broker's start creates as an empty "
                           f"index file ({created.creator}) and loads (its last index file then takes the recovery's index entries), so no "
                           "recovery of its is planned here; `mqtool repair` moves the link out first (or mount the disk it points into)")
    why = log_refusal(store)
    configured = store.config.commitlog_file_size
    found = sorted({p.found for p in store.problems if p.kind == SEGMENT_SIZE})
    if why is not None and configured is not None and found and not store.commitlog.segments:
        # no file has the size the broker config sets: the config, not the files, is what differs
        raise BadInput(f"every commit log file is {' or '.join(map(str, found))} bytes, but the broker config sets "
                       f"mappedFileSizeCommitLog={configured}: is it this broker's? Without --broker-config the size is read from the files")
    if why is not None:
        raise BadStoreFile(f"the broker refuses to start on this store, so it recovers nothing: {why}; `mqtool repair` fixes the file first")


def unwritable_checkpoint(store: Store) -> None:
    """Refuse a recovery whose checkpoint or abort is a directory (``nextstart.checkpoint_refusal``)."""
    from ..store.nextstart import checkpoint_refusal

    if (why := checkpoint_refusal(store, "")) is not None:
        raise BadStoreFile(f"the broker refuses to start on this store and the recovery cannot write its checkpoint: {why}; "
                           "`mqtool repair` moves it out first")
    if store.abort is not None and store.abort.unusable:
        raise BadStoreFile(f"abort: {store.abort.unusable}, which the recovery cannot remove as a clean shutdown does (the broker's "
                           "next start runs an abnormal recovery); `mqtool repair` moves it out first")


def config_options(store: Store) -> dict:
    """The broker config settings a saved plan is applied with, so the apply reads the log the plan read."""
    c = store.config
    geometry = store.index_geometry
    where = {"commitlog_dirs": [str(Path(d).resolve()) for d in c.commitlog_dirs] if c.commitlog_dirs else None, "dledger": c.dledger,
             "dledger_data_path": str(Path(c.dledger_data_path).resolve()) if c.dledger_data_path else None,
             "dledger_self_id": c.dledger_self_id, "timer_log_file_size": c.timer_log_file_size}
    return {**{k: v for k, v in where.items() if v is not None}, "commitlog_file_size": store.commitlog.file_size,
            "consume_queue_file_size": store.consume_queue_file_size, "hash_slot_num": geometry.hash_slot_num if geometry else c.hash_slot_num,
            "index_num": geometry.index_num if geometry else c.index_num, "message_index_enable": c.message_index_enable,
            "message_index_safe": c.message_index_safe, "check_crc_on_recover": c.check_crc_on_recover, "delay_levels": c.delay_levels,
            "multi_dispatch": store.multi_dispatch}


def rel(store: Store, path: Path) -> str:
    return os.path.relpath(path, store.root)


def written_end(path: Path, start: int) -> int:
    """One past the last non-zero byte of the file at or after ``start`` (``start`` if none)."""
    with MappedFile(path) as mf:
        if mf.size <= start:
            return start
        array = as_array(mf.buf)
        fd = open_read_only(path)
        try:
            return max(last_nonzero(array, start, mf.size, fd, mf.buf) + 1, start)
        finally:
            os.close(fd)
            del array


@dataclass
class ScanResult:
    """The commit log scan of a recovery (with or without dispatch)."""

    start: int
    rule: str
    end: object = None
    records: int = 0
    last_valid: int = -1


def commitlog_plan(store: Store, scan: ScanResult, lost_limit: int, legacy: bool, accept_v2: bool, *,
                   zeroes: bool = True) -> tuple[CommitLogPlan, LostMessages, list[Action]]:
    """The cut where ``scan`` ended: later segments deleted (``truncateDirtyFiles``), with ``zeroes`` the rest zeroed."""
    cl = store.commitlog
    end = scan.end
    actions: list[Action] = []
    index = cl.segment_index(end.offset)
    cut_segment, zero_from, zero_to, deleted = None, end.offset, end.offset, []
    if index is not None:
        seg = cl.segments[index]
        cut_segment = seg.path.name
        stop = seg.base_offset + written_end(seg.path, end.offset - seg.base_offset)
        # a blank ending the log runs to the segment's end and recovery stops in front of it (rules §1.12)
        if zeroes and stop > end.offset and end.reason != StopReason.BLANK_LAST:
            zero_to = stop
            actions.append(Action("zero-range", rel(store, seg.path), end.offset - seg.base_offset, stop - seg.base_offset, "dirty bytes after the valid end"))
        deleted = cl.segments[index + 1 :]
    actions += [Action("delete", rel(store, seg.path), note="segment after the valid end (truncateDirtyFiles)") for seg in deleted]
    kept = record_at(cl, scan.last_valid, legacy) if scan.last_valid >= 0 else None
    found = records_after(cl, end.offset, limit=lost_limit, legacy=legacy, accept_v2=accept_v2, newest_kept=None if kept is None else kept.store_timestamp, describe=describe)
    lost = LostMessages(found.records, found.record_bytes, tuple(found.listed), len(found.listed) == found.records, found.other_bytes,
                        found.first_other, stale=found.stale, stale_bytes=found.stale_bytes)
    first_invalid = None
    if end.reason not in (StopReason.ZEROS, StopReason.BLANK_LAST, StopReason.LIMIT, StopReason.NO_SEGMENTS):
        first_invalid = record_at(cl, end.offset, legacy)
    end_is_damage = not end.is_clean or found.records > 0
    plan = CommitLogPlan(cl.min_offset, cl.end_of_files, scan.start, scan.rule, scan.records, end.offset, end.reason, end.detail, end_is_damage,
                         first_invalid, scan.last_valid, cut_segment, zero_from, zero_to, tuple(s.path.name for s in deleted))
    return plan, lost, actions


def index_gaps(store: Store, index_plan: IndexPlan, end: int, legacy: bool) -> list[tuple[int, int]]:
    """Commit log ranges below ``end`` with a keyed record that no index file covers."""
    gaps = []
    prev_end = None  # offset of the last indexed record so far (None: no file indexes any)
    begins = {f.name: f.header.begin_phy_offset for f in store.index_files}  # a file this plan creates is contiguous by construction
    files = sorted((f for f in index_plan.files if f.action != "delete" and f.entries_after > 0), key=lambda f: f.name)
    for f in [*files, None]:  # None: the gap before ``end``
        begin = end if f is None else begins.get(f.name) if f.action != "create" else None
        start_at = store.commitlog.min_offset if prev_end is None else prev_end
        if begin is not None and begin > start_at and _keyed_record_between(store, start_at, begin, skip_first=prev_end is not None, legacy=legacy):
            gaps.append((start_at, begin))
        if f is not None:
            prev_end = max(prev_end or 0, f.end_phy_offset)
    return gaps


def _keyed_record_between(store: Store, start: int, stop: int, *, skip_first: bool, legacy: bool, limit: int = 64) -> bool:
    """A record with UNIQ_KEY or KEYS in ``[start, stop)`` (``skip_first``: not at ``start``); assumed past ``limit``."""
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
            if (pos := cl.next_segment(pos)) is None:
                return False
            continue
        if not (skip_first and pos == start) and record.transaction_type.name != "ROLLBACK":
            props = record.property_map(legacy=legacy)
            if props.get(PropertyKey.UNIQ_KEY) or props.get(PropertyKey.KEYS, "").strip(" "):
                return True
            seen += 1
        pos += record.total_size
    return seen >= limit


def unreadable_from_queues(lost: LostMessages, sims: dict, end: int, first_invalid: Message | None) -> LostMessages:
    """Consume queue entries past the cut whose message is not among the decoded lost records."""
    known = {m.offset for m in lost.messages} | ({first_invalid.offset} if first_invalid else set())
    listed_to = lost.messages[-1].offset if lost.messages else end  # a cut list does not tell the records past its last
    refs = [QueueRef(topic, qid, qoff, phys, size)
            for (topic, qid), sim in sorted(sims.items()) if sim.exists and sim.recovered_max_phys > end
            for qoff, phys, size in sim.entries_from(end) if phys not in known and (lost.complete or phys < listed_to)]
    return replace(lost, unreadable=tuple(sorted(refs, key=lambda r: (r.offset, r.topic, r.queue_id))))


def queue_plan(sim: QueueSim, min_before: int, max_before: int, clmin: int, v5: bool, seeds: tuple) -> QueuePlan:
    return QueuePlan(sim.topic, sim.queue_id, min_before, max_before, sim.max_offset, sim.min_offset(clmin, v5=v5), sim.dropped_units, sim.cut_units,
                     sim.resurrected_units, sim.added, sim.fillers, sim.first_added[0] if sim.first_added else None,
                     sim.last_added[0] if sim.last_added else None, seeds, tuple(sim.fates()), tuple(sim.misplaced))


def queue_actions(store: Store, queues: list[QueuePlan], sims: dict) -> tuple[list[Action], bool]:
    """Deletions of consume queue files, and whether any file is rewritten or created."""
    files = [(q, f) for q in queues for f in q.files]
    actions = [Action("delete", rel(store, sims[(q.topic, q.queue_id)].directory / f.name), note=f"consume queue {q.topic}/{q.queue_id}")
               for q, f in files if f.action == "delete"]
    return actions, any(f.action != "delete" for _, f in files)


def write_action(queues: bool, index: bool) -> list[Action]:
    if not (queues or index):
        return []
    what = " and ".join(w for w, on in (("consume queue", queues), ("index", index)) if on)
    return [Action("write-dispatch", "", note=f"{what} files rewritten or created, from the dispatch phases")]


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
                release_pages(mf.buf, p, p + chunk)
        finally:
            buf.release()
    return crc


@dataclass
class PhaseCounts:
    """What one dispatch phase sent; ``last_cq_ts``: the broker's logicsMsgTimestamp."""

    records: int = 0
    cq: int = 0
    sched: int = 0
    multi: int = 0
    last_cq_ts: int | None = None


def multi_dispatch(store: Store, rules: VersionRules) -> MultiDispatch | None:
    """The store's LMQ dispatch where its broker writes one (from 4.9.3: rules §3.12)."""
    if not store.multi_dispatch or rules.lmq_rule == NO_MULTI_DISPATCH:
        return None
    return MultiDispatch(store.commitlog, rules.legacy_properties, rules.lmq_rule, store.no_properties_npe, store.multi_dispatch_on)


def reput_notify(store: Store, rules: VersionRules) -> MultiDispatch | None:
    """What 4.9.3-4.9.8's reput reads for its long-polling notify (``LmqNotifyThrows``), or None."""
    if not (store.config.reput_notifies and rules.reput_from_cq_max and rules.lmq_rule != NO_MULTI_DISPATCH):
        return None
    return MultiDispatch(store.commitlog, rules.legacy_properties, rules.lmq_rule)


def refusal(exc: DispatchThrows) -> Refused:
    """Why no plan can pass a record whose dispatch or reput notify throws (``DispatchThrows``)."""
    if exc.undecided == UNDECIDED_RELEASE:
        return Refused(f"cannot tell which broker version wrote this store (its marks leave E12, 4.9.3-4.9.8, which `mqtool info` "
                       f"shows), and the record at {exc.offset} {exc.why}, where 4.9.4-4.9.8 dispatch it: pass --broker-version with "
                       "the release the broker ran (e.g. 4.9.3, 4.9.7)")
    if exc.undecided == UNDECIDED_MULTI_DISPATCH:
        return Refused(f"cannot tell whether the broker has enableMultiDispatch on (no --broker-config is given and the store has no "
                       f"%LMQ% queue), and the record at {exc.offset} {exc.why}: with it on, the broker's dispatch writes {exc.wrote}, "
                       "then throws, and the broker never gets past it; with it off, the record gets its own entry alone: pass "
                       "--broker-config with the broker's broker.conf, enableMultiDispatch=true or false in it")
    if isinstance(exc, LmqNotifyThrows):
        return Refused(f"the record at {exc.offset} {exc.why}: the broker's start-up reput writes {exc.wrote}, then the notify throws, "
                       "and the reput retries it forever, dispatching nothing after it (its start never completes); mqtool does not "
                       f"plan what the broker never reaches; {way_out('longPollingEnable=false', 'reputs without the notify')}")
    return Refused(f"the record at {exc.offset} {exc.why}: the broker's dispatch writes {exc.wrote}, then throws, so a recovery that "
                   "dispatches it fails the broker's load (it refuses to start) and its reput retries it forever, dispatching nothing "
                   f"after it; mqtool does not plan what the broker never reaches; "
                   f"{way_out('enableMultiDispatch=false', 'gives it its own entry alone, and no record its LMQ entries')}")


def way_out(setting: str, then: str) -> str:
    """``refusal``'s next step: the broker setting under which it does not throw, or ``salvage``."""
    return (f"to get past it, set {setting} in broker.conf (the broker then {then}) and pass it as --broker-config, "
            "or copy the messages out with `mqtool salvage`")


def planned_entries(batch, names: list[str], multi: MultiDispatch | None):
    """``consume_queue_entries`` for a plan, refused (exit 4) at a record whose dispatch throws (``refusal``)."""
    try:
        yield from consume_queue_entries(batch, names, multi)
    except DispatchThrows as exc:
        raise refusal(exc) from None


def feed(batch, topics: TopicTable, sims: dict, store: Store, rules: VersionRules, index_writer, counts: PhaseCounts, *, keep_placed: bool = False) -> None:
    """One dispatched batch into the queue simulations and the index placement."""
    if len(batch) == 0:
        return
    counts.records += len(batch)
    groups = batch.queue_groups
    counts.multi += groups.multi
    if groups.queued:
        counts.cq += groups.queued
        counts.last_cq_ts = int(batch.column(fd.F_STORE_TS)[groups.last_queued])
    for topic, qid, columns in planned_entries(batch, topics.names, multi_dispatch(store, rules)):
        sim = sims.get((topic, qid))
        if sim is None:
            sim = sims[(topic, qid)] = QueueSim.of_store(store, topic, qid, rules=rules)
            sim.keep_placed = keep_placed
        placed = sim.place(*columns[:3])
        if topic == SCHEDULE_TOPIC:
            counts.sched += placed
    if index_writer is not None:
        put_index(index_writer, batch)


def put_index(writer: IndexPlacement, batch) -> None:
    """One dispatched batch's keyed records into an index placement (or ``apply``'s index writer)."""
    if len(batch):
        writer.put_batch(batch.phys, batch.column(fd.F_STORE_TS), batch.to_index, batch.column(fd.F_KEY_START), batch.column(fd.F_KEY_COUNT), batch.keys)


def geometry(store: Store) -> tuple[int, int]:
    g = store.index_geometry
    return (g.hash_slot_num, g.index_num) if g else DEFAULT_GEOMETRY


def index_placement(store: Store, rules: VersionRules, kept: list, dropped: list) -> IndexPlacement:
    """The index placement continuing after the last kept file (``dropped`` names are not reused)."""
    slots, num = geometry(store)
    last = kept[-1] if kept else None
    append = (last.name, last.header) if last is not None and last.header.index_count < num else None
    return IndexPlacement(slots, num, previous=last.header if last is not None else None, taken_names={f.name for f in kept + dropped}, append_to=append,
                          after_name=last.name if last is not None else None, counts_used_slots=rules.index_counts_used_slots)


def index_plan_of(store: Store, kept: list, dropped: list, writer: IndexPlacement | None, enabled: bool,
                  indexed_from: int | None) -> tuple[IndexPlan, list[Action]]:
    """The index part of a recovery's plan: files ``dropped``, ``kept`` or appended to, and those ``writer`` made."""
    slots, num = geometry(store)
    files, actions = [], []
    results = {}
    if writer is not None:
        writer.close()
        results = {r.name: r for r in writer.results if r.entries_added or r.created}
    why, note = "newer than the checkpoint's indexMsgTimestamp after an abnormal exit (IndexService.load)", "index file newer than indexMsgTimestamp"
    for f in dropped:
        h = f.header
        files.append(IndexFilePlan(f.name, "delete", why, h.entry_count, 0, h.begin_timestamp, h.end_timestamp, h.end_phy_offset))
        actions.append(Action("delete", rel(store, f.path), note=note))
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
    return IndexPlan(enabled, slots, num, tuple(files), indexed_from, keys, full, kept[-1].name if kept else None), actions


def with_inputs(store: Store, plan: Plan, sims: dict, *, with_crc: bool) -> Plan:
    """``plan`` with its ``inputs``: every file it read (size, mtime) or changes (and, for saved plans, their CRC32)."""
    root, cl = store.path(), store.commitlog
    start = min([plan.commitlog.scan_from if plan.commitlog else cl.min_offset] + [phase.start for phase in plan.dispatch])
    read = [seg.path for seg in cl.segments if seg.end_offset > start]
    changed = {root / a.path for a in plan.actions if a.op in ("zero-range", "delete", "write-blank")}
    for q in plan.queues:
        sim = sims[(q.topic, q.queue_id)]
        read += sim.original.values()
        changed.update(sim.directory / f.name for f in q.files)
    read += [f.path for f in store.index_files]
    if plan.index is not None:
        changed.update(root / "index" / f.name for f in plan.index.files if f.action not in ("keep", "unchanged"))
    if plan.checkpoint is not None and plan.checkpoint.changed:
        changed.add(root / "checkpoint")
    read += [root / "checkpoint", root / markers.ABORT_FILE]
    return replace(plan, inputs=tuple(Fingerprint(rel(store, p), st.st_size, st.st_mtime_ns, file_crc32(p) if with_crc and p in changed else None)
                                      for p in dict.fromkeys(read + sorted(changed)) if p.exists() for st in [p.stat()]))  # each once, in order


def default_geometry_note(slots: int, entries: int) -> str:
    """Index files made where no file shows the geometry and no broker.conf gives it (``rebuild-index``, a recovery that
    creates them): the broker's defaults, 420 MB a file, which a broker configured otherwise does not read as it wrote them."""
    return (f"no index file and no --broker-config: the index files are made with the broker's default geometry ({slots} slots "
            f"x {entries} entries, {index_file_size(slots, entries)} bytes a file); pass --broker-config where broker.conf sets "
            "maxHashSlotNum or maxIndexNum")

