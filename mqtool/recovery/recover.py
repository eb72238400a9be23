"""Plans for ``recover``, ``truncate-dirty``, ``rebuild-cq`` and ``rebuild-index``: what the broker's
load and recovery would do to a store, computed from the read-only store model.

``plan_recover`` follows ``DefaultMessageStore.load`` + ``recover`` + ``start``'s reput, per version
(reference §8.2-§8.12, ``store.rules.VersionRules``):

1. consume queue recovery of every queue (§5.7) -> the max CQ physical offset;
2. index load: after an abnormal exit, files newer than ``indexMsgTimestamp`` are deleted (§6.9);
3. the commit log scan from the version's start segment (§8.4/§8.5), dispatching where the
   broker dispatches (abnormal recovery; 5.3.2+ normal recovery past the CQ max), with the
   4.9.2-4.9.8 delay quirk (§3.5);
4. the commit log cut (``truncateDirtyFiles``, §8.9) and, if the CQs reach the cut,
   ``truncateDirtyLogicFiles`` (§5.8);
5. 4.5.0-4.9.8: the reput from the max CQ physical offset at start-up (§8.12, rules §2.11);
6. the checkpoint the broker persists, and the abort file a clean stop removes.

Unlike the broker, the plan zeroes the bytes it cuts (the dirty tail of the last segment, CQ
units past each queue's end) so the next scan cannot read them back.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ..errors import Refused
from ..formats import checkpoint as cpfmt
from ..formats import markers
from ..formats.dispatch import SCHEDULE_TOPIC
from ..store import Store
from ..store.commitlog import StopReason
from ..writers import S_WRITE
from .dispatch import (
    TAGS_DELIVERY_TIME,
    TAGS_HASH,
    DispatchCache,
    TopicTable,
    after_phys,
    phase_scanner,
)
from .lost import record_at
from .plansteps import (
    commitlog_plan,
    config_options,
    dry_index_writer,
    feed,
    index_gaps,
    index_plan_of,
    PhaseCounts,
    plan_inputs,
    queue_actions,
    queue_plan,
    rel,
    ScanResult,
    seed_of,
    store_version,
    unreadable_from_queues,
    write_action,
)
from .plan import Action, CheckpointPlan, DispatchPhase, Plan, PlanOptions, QueueSeed
from .queues import QueueSim
from ..store.rules import VersionRules
from .startfile import recovery_start

if TYPE_CHECKING:
    from .walkedchain import WalkedChain

# ---- recover --------------------------------------------------------------------------------


def plan_recover(store: Store, options: PlanOptions = PlanOptions(), *, command: str = "recover", with_crc: bool = False, cache: DispatchCache | None = None,
                 walked: WalkedChain | None = None) -> Plan:
    """Everything the broker's load + recovery + start-up reput would do (module docstring).
    ``cache`` keeps the dispatched batches for an apply in the same process; ``walked`` is shown
    the recovery scan's rows where it checks the CRC, for ``verify_after`` (``walkedchain``)."""
    root = store.path()
    version, source = store_version(store)
    rules = VersionRules(version)
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
    sims = {(q.topic, q.queue_id): QueueSim.load(q, rules=rules) for q in store.consume_queues}
    before = {key: (sim.min_offset(clmin, v5=rules.cq_min_offset_v5), sim.max_offset) for key, sim in sims.items()}
    max_cq = max((s.recovered_max_phys for s in sims.values()), default=-1)
    seeds_a = {key: QueueSeed(*seed_of(sim)) for key, sim in sims.items()}

    # 2. index load (§6.9)
    index_files = store.index_files
    kept, dropped = [], []
    for f in index_files:
        if mode == "abnormal" and dispatching and f.header.end_timestamp > cp.index_msg_timestamp:
            dropped.append(f)
        else:
            kept.append(f)

    # 3. the scan, dispatching where the broker does
    dl = None
    if store.is_dledger:  # DLedgerCommitLog (§15.4): see recovery/dledger.py, loaded for such a store only
        from . import dledger

        dl = dledger.data_recovery(store)
    if dl is not None:
        if mode == "abnormal" and dledger.dispatches_on_abnormal(version) and not options.full_scan:
            bound = cp.min_timestamp_index if (index_safe and index_enable) else cp.min_timestamp
            s = dledger.abnormal_start(cl, bound, "min(physic, logics) timestamps - 3 s" if not (index_safe and index_enable) else "min(physic, logics, index) timestamps - 3 s")
            start, rule = s.offset, s.rule
        else:
            start = cl.segments[dl.start_file].base_offset if cl.segments else 0
            rule = "DLedgerMmapFileStore.recover: the third-from-last data file"
    elif options.full_scan:
        start, rule = cl.min_offset, "every segment from the first (--full-scan)"
    else:
        s = recovery_start(store, rules, mode=mode, index_safe=index_safe, max_cq_phys_offset=max_cq)
        start, rule = s.offset, s.rule
    dispatch_a = dispatching and (mode == "abnormal" or rules.normal_dispatches)
    if dl is not None:
        dispatch_a = dispatching and mode == "abnormal" and dledger.dispatches_on_abnormal(version)
    threshold_a = max_cq if (dispatching and mode == "normal" and rules.normal_dispatches) else None
    tags_a = TAGS_HASH if (mode == "abnormal" and rules.delay_table_missing_in_recovery) else TAGS_DELIVERY_TIME
    topics = cache.topics if cache is not None else TopicTable()
    index_writer = dry_index_writer(store, rules, kept, dropped) if dispatching and index_enable else None
    scan = ScanResult(start, rule)
    phases: list[DispatchPhase] = []
    scanner = phase_scanner(
        cl, start, None, discipline="recovery", tags=tags_a, delay_table=store.delay_table, legacy_properties=legacy,
        index_enable=index_enable, index_rule=rules.index_rule, check_crc=config.check_crc_on_recover, topics=topics,
        shown=walked if dl is None and config.check_crc_on_recover else None, ahead=True,
    )
    counts = PhaseCounts()
    phase_counts = [counts]
    for batch in scanner:
        if dispatch_a:
            batch = after_phys(batch, threshold_a)
            feed(batch, topics, sims, store, rules, index_writer, counts)
            if cache is not None:
                cache.add(0, batch)
    scan.end, scan.records, scan.last_valid = scanner.end, scanner.records, scanner.last_valid_offset
    if mode == "abnormal" and dl is None and scan.end.reason == StopReason.LENGTH_MISMATCH and not rules.abnormal_stops_at_length_mismatch:
        raise Refused(
            f"the record at {scan.end.offset} has a TOTALSIZE that disagrees with its fields: {version}'s abnormal recovery does not stop "
            "there but advances by TOTALSIZE, dispatching a bogus entry to consume queue ''/0, and reads on out of step (rules §2.7, "
            "recoverAbnormally up to 4.3.1); mqtool does not plan that recovery (`mqtool dump --keep-going` reads past the record)"
        )
    cq_cut = scan.end.offset
    if dl is not None:
        cq_cut = dledger.headerless_end(cl, scan.end) if dispatch_a else dl.end.offset
        if cq_cut < dl.end.offset:
            notes.append(
                f"{version}'s abnormal DLedger recovery adds up record sizes without their 48-byte entry headers: it takes {cq_cut} "
                f"for the end of the log (really {dl.end.offset}) and truncates the consume queues there"
            )
        scan.end = dl.end  # DLedgerMmapFileStore.recover truncates the data where its entry walk stops
    end = scan.end.offset
    if dispatch_a:
        phases.append(DispatchPhase("recovery", start, end, "recovery", tags_a, True, index_enable, counts.records, counts.cq, counts.sched if tags_a == TAGS_HASH else 0, threshold_a))
        if tags_a == TAGS_HASH and counts.sched:
            notes.append(
                f"{counts.sched} delayed message(s) of {SCHEDULE_TOPIC} get their TAGS hash as consume queue tags code, "
                f"not the delivery time: {version} recovers before it loads the delay levels (reference §3.5); the broker delivers them at once"
            )

    # 4. commit log cut, CQ truncation
    cl_plan, lost, actions = commitlog_plan(store, scan, options.lost_limit, legacy, rules.accepts_v2_magic)
    actions += _empty_last_segment(store, rules, notes)
    lost = unreadable_from_queues(lost, sims, end, cl_plan.first_invalid)
    stale = (f"{lost.stale} stale record(s) ({lost.stale_bytes} bytes) after {end}: stale records the broker overwrote (not lost now); "
             "stored before the records it keeps, they are history it cut back and wrote over, and dropped then") if lost is not None and lost.stale else None
    if cl_plan.end_is_damage and lost is not None and lost.lost_now:
        notes.insert(0, (
            f"DAMAGE: the broker's recovery cuts the commit log at {end} ({cl_plan.end_reason}: {cl_plan.end_detail}), not at the end "
            f"of the written data, and throws away the {lost.lost_now} valid message(s) ({lost.bytes - lost.stale_bytes} bytes) after it; "
            "`mqtool verify --keep-going` shows the damaged range and `mqtool dump --keep-going` reads past it: save what you need before --yes"
            + (f" ({stale})" if stale else "")
        ))
    elif stale:
        notes.insert(0, stale)
    walk = rules.abnormal_truncates_cq_always if mode == "abnormal" else False
    if dl is not None:
        walk = max_cq >= cq_cut
    elif mode == "abnormal" or rules.normal_truncates_cq:
        walk = walk or max_cq >= end
    if not cl.segments and (mode == "abnormal" or rules.empty_log_destroys_queues):  # destroyLogics (§8.10; normal recovery from 4.5.0, rules §2.5)
        for sim in sims.values():
            for base in list(sim.files):
                sim._delete(base)
            sim.state[S_WRITE] = -1
        notes.append("no commit log segment: every consume queue file is deleted (destroyLogics)")
    elif cl.segments and walk:  # recoverNormally does nothing without a segment up to 4.4.0
        for sim in sims.values():
            sim.truncate(cq_cut)
    seeds_b = {key: QueueSeed(*seed_of(sim)) for key, sim in sims.items()}  # where the reput starts

    # 5. 4.5.0-4.9.8 start(): reput from the max CQ physical offset
    reput_from = None
    if dispatching and rules.reput_from_cq_max and cl.segments:
        reput_from = max([clmin, 0] + [int(s.state[1]) for s in sims.values()])
    elif dispatching and dl is not None and dl.committed_pos is not None:  # 5.x: from the confirm offset = DLedger's committed position
        reput_from = dl.committed_pos
    if reput_from is not None:
        if reput_from < end:
            counts = PhaseCounts()
            phase_counts.append(counts)
            reput = phase_scanner(
                cl, reput_from, end, discipline="reput", tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table,
                legacy_properties=legacy, index_enable=index_enable, index_rule=rules.index_rule, check_crc=False, topics=topics,
            )
            for batch in reput:
                feed(batch, topics, sims, store, rules, index_writer, counts)
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
        queue_plans.append(queue_plan(sim, mn, mx, clmin, rules.cq_min_offset_v5, seeds))
    queue_deletes, queue_writes = queue_actions(store, queue_plans, sims)
    actions += queue_deletes

    # index
    index_plan = None
    if dispatching:
        indexed_from = min((p.start for p in phases if p.index), default=None)
        index_plan, index_actions = index_plan_of(store, kept, dropped, index_writer, index_enable, indexed_from)
        actions += index_actions
        if dropped and not index_safe and index_enable:
            first_dropped = dropped[0].header.begin_phy_offset
            if first_dropped < start:
                notes.append(
                    f"index entries of records in [{first_dropped}, {start}) are lost: their index file is deleted after the abnormal exit "
                    "and recovery re-indexes only from its start segment (broker behaviour with messageIndexSafe=false; --index-safe avoids it)"
                )
    actions += write_action(queue_writes, index_plan is not None and any(f.action in ("append", "create") for f in index_plan.files))
    if index_plan is not None and index_enable and cl.segments:
        for a, b in index_gaps(store, index_plan, end, legacy):
            notes.append(f"no index file covers the keyed records in [{a}, {b}) (an index file is missing; the broker does not rebuild it): run `mqtool rebuild-index`")
    for sim in sims.values():
        for base, path in sim.original.items():
            size = path.stat().st_size
            if size != sim.file_size and base in sim.files:
                notes.append(f"{rel(store, path)} is {size} bytes, not {sim.file_size}: the broker refuses to load it; it is rewritten at full size")
    if dispatching and dl is None:
        queues_end = max((q.recover().max_phys_offset for q in store.consume_queues), default=-1)  # where the last entry's record ends, in every version
        notes += _dispatch_notes(store, rules, mode, phases, queues_end, end, kept, legacy)
    if dl is not None:
        actions += dledger.index_actions(store, dl)
        if dispatching:
            indexed_from = min((p.start for p in phases if p.index), default=None)
            notes += dledger.loss_notes(store, version, dl, cq_cut, reput_from, dropped if index_enable else [], indexed_from)

    # checkpoint, abort
    cp_plan = None
    remove_abort = False
    if dispatching:
        multi = sum(c.multi for c in phase_counts)
        if multi:
            notes.append(
                f"{multi} re-dispatched record(s) carry INNER_MULTI_DISPATCH (LMQ): a broker with enableMultiDispatch/enableLmq also "
                "writes their entries into the listed queues; mqtool does not (reference §3.6)"
            )
        last_cq = [c.last_cq_ts for c in phase_counts if c.last_cq_ts is not None]
        after = cp._replace(logics_msg_timestamp=last_cq[-1] if last_cq else cp.logics_msg_timestamp)
        if index_plan is not None and index_plan.index_msg_timestamp_after is not None:
            after = after._replace(index_msg_timestamp=index_plan.index_msg_timestamp_after)
        if rules.writes_confirm_offset and scan.last_valid >= 0 and dl is None:
            after = after._replace(confirm_phy_offset=scan.last_valid)
        if dl is not None and rules.v5 and len(phase_counts) > 1 and phase_counts[-1].last_cq_ts is not None:
            after = after._replace(physic_msg_timestamp=phase_counts[-1].last_cq_ts)  # 5.x reput on DLedger (observed)
        cp_plan = CheckpointPlan(cp_exists, cp._asdict(), after._asdict())
        if cp_plan.changed:
            actions.append(Action("write-checkpoint", "checkpoint", note="values the broker persists after this recovery"))
        if dl is not None:
            actions += dledger.checkpoint_actions(store, dl)
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
    return plan.with_inputs(plan_inputs(store, plan, sims, with_crc=with_crc))


def plan_truncate_dirty(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None) -> Plan:
    """Cut the commit log after its last valid record (zeroing the dirty bytes, deleting later
    segments) and the consume queue entries at or past the cut, as the broker's
    ``truncateDirtyFiles`` / ``truncateDirtyLogicFiles`` do. No dispatch, no index, no checkpoint."""
    return plan_recover(store, options, command="truncate-dirty", with_crc=with_crc)


def _empty_last_segment(store: Store, rules: VersionRules, notes: list[str]) -> list[Action]:
    """A zero-length last commit log file at load (rules §2.13, ``MappedFileQueue.doLoad``): 5.1.3+
    delete it; 3.2.6-4.4.0 and 4.9.2 leave it out and start (where the others refuse to start,
    ``unloadable_files`` refused the plan already)."""
    path = store.empty_last_segment
    if path is None:
        return []
    if rules.zero_length_last_file_deleted:
        return [Action("delete", rel(store, path), note="a zero-length last file: MappedFileQueue.doLoad deletes it (5.1.3+)")]
    notes.append(f"{rel(store, path)} is a zero-length last file: {rules.version} leaves it out at load and starts (MappedFileQueue.load); it stays")
    return []


def _dispatch_notes(store: Store, rules: VersionRules, mode: str, phases: list, max_cq: int, end: int, kept: list, legacy: bool) -> list[str]:
    """What the broker's re-dispatch leaves imperfect, so the operator is not surprised."""
    notes = []
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
