"""Plans for ``recover`` and ``truncate-dirty`` (docs/recovery.md): ``DefaultMessageStore.load`` + ``recover`` + the start's reput
per version (reference §8.2-§8.12) over a ``logkinds.RecoveryRun``. Unlike the broker, the plan zeroes the bytes it cuts from a
classic commit log (``LogKind.zeroes_after_cut``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..formats import checkpoint as cpfmt
from ..formats import markers
from ..fileops import salvage_command, shell_path
from ..formats.dispatch import SCHEDULE_TOPIC
from ..store import Store
from ..dispatch import fastdispatch as fd
from ..dispatch.scanner import TAGS_DELIVERY_TIME, TAGS_HASH, DispatchCache, after_phys, first_throw
from .logkinds import LogKind, RecoveryRun, log_kind
from .sharedscans import SharedScans, scan_phase, topic_table
from .planparts import (PhaseCounts, default_geometry_note, ScanResult, commitlog_plan, config_options, feed, index_gaps, index_placement, index_plan_of, multi_dispatch,
                        queue_actions, queue_plan, refusal, rel, reput_notify, store_version, unreadable_from_queues,
                        unwritable_checkpoint, with_inputs, write_action)
from .plans import Action, CheckpointPlan, DispatchPhase, Plan, PlanOptions, QueueSeed
from .queues import QueueSim
from ..store.nextstart import RECOVER_FIXES, committed_refusal, later_refusal, refusal_after_recovery
from ..store.rules import VersionRules
from ..verify.lmq import Dispatched, last_flagged

if TYPE_CHECKING:
    from ..store.walkedchain import WalkedChain


def plan_recover_one_version(store: Store, options: PlanOptions = PlanOptions(), *, command: str = "recover", with_crc: bool = False,
                             cache: DispatchCache | None = None, walked: WalkedChain | None = None, scans: SharedScans | None = None,
                             sims_out: dict | None = None) -> Plan:
    """The broker's load + recovery + start-up reput under the one version the store is read as. ``cache`` keeps batches for an
    apply; ``walked``, ``scans`` and ``sims_out`` (queues after recovery) serve ``walkedchain``, ``sharedscans`` and planners."""
    version, source = store_version(store)
    unwritable_checkpoint(store)
    run = RecoveryRun(store, options, command, cache, walked, scans, version, source, VersionRules(version),
                      options.mode or ("abnormal" if store.abort_present else "normal"), store.checkpoint is not None,
                      store.checkpoint or cpfmt.StoreCheckpoint(0, 0, 0), store.config.message_index_safe if options.index_safe is None else options.index_safe)
    _recover_queues(run)  # 1
    _load_index(run)  # 2
    kind = log_kind(store)
    _scan(run, kind)  # 3
    _cut(run, kind)  # 4
    _reput(run, kind)  # 5
    _queue_results(run)
    _index_results(run, kind)
    cp_plan, remove_abort = _checkpoint(run, kind)  # 6
    refused = later_refusal(store, committed=False) if run.dispatching else None
    if run.dispatching and (why := committed_refusal(store)) is not None:
        run.notes.append(f"without this plan's DLedger checkpoint the broker refuses to start: {why.removesuffix(RECOVER_FIXES)}")
    if refused is not None and (late := refusal_after_recovery(store)) is not None and late[1] == refused:
        run.notes.append(f"the broker's own next start runs this recovery too, then refuses ({late[0]}): these writes stand either way, "
                         f"and the refusal stays until {late[2]}")
    if sims_out is not None:
        sims_out.update(run.sims)
    settings = {**config_options(store), "index_safe": run.index_safe, "lost_limit": options.lost_limit, "full_scan": options.full_scan}
    return with_inputs(store, Plan.new(command, store.path(), str(run.version), run.source, run.actions, mode=run.mode if run.dispatching else None,
                                       options=settings, commitlog=run.cl_plan, lost=run.lost, dispatch=tuple(run.phases), queues=tuple(run.queue_plans),
                                       index=run.index_plan, checkpoint=cp_plan, remove_abort=remove_abort, notes=tuple(run.notes), refused=refused,
                                       unqueued=tuple(run.unqueued)),
                       run.sims, with_crc=with_crc)


def _recover_queues(run: RecoveryRun) -> None:
    """1. consume queue recovery of every queue (§5.7) -> the max CQ physical offset."""
    store, rules = run.store, run.rules
    clmin = store.commitlog.min_offset
    run.sims = {(q.topic, q.queue_id): QueueSim.load(q, rules=rules) for q in store.consume_queues}
    for sim in run.sims.values():
        sim.keep_placed = run.options.keep_placed
    run.before = {key: (sim.min_offset(clmin, v5=rules.cq_min_offset_v5), sim.max_offset) for key, sim in run.sims.items()}
    run.max_cq = max((s.recovered_max_phys for s in run.sims.values()), default=-1)
    run.seeds_a = _seeds(run)


def _seeds(run: RecoveryRun) -> dict:
    return {key: QueueSeed(sim.queue_state.write_pos, sim.queue_state.max_phys_offset) for key, sim in run.sims.items()}


def _load_index(run: RecoveryRun) -> None:
    """2. index load: after an abnormal exit, files newer than ``indexMsgTimestamp`` are deleted (§6.9)."""
    for f in run.store.index_files:
        if run.abnormal and run.dispatching and f.header.end_timestamp > run.cp.index_msg_timestamp:
            run.dropped.append(f)
        else:
            run.kept.append(f)


def _scan(run: RecoveryRun, kind: LogKind) -> None:
    """3. the commit log scan from the start the log kind gives, dispatching where the broker does,
    with the 4.9.2-4.9.8 delay quirk (§3.5); then the log kind's queue cut."""
    store, rules, cache = run.store, run.rules, run.cache
    config = store.config
    start, rule = kind.start(run)
    run.start = start
    run.dispatch_a = dispatch_a = kind.dispatches(run)
    threshold_a = run.max_cq if (run.dispatching and run.mode == "normal" and rules.normal_dispatches) else None
    tags_a = TAGS_HASH if (run.abnormal and rules.delay_table_missing_in_recovery) else TAGS_DELIVERY_TIME
    run.topics = topic_table(run.scans, cache)
    run.index_writer = index_placement(store, rules, run.kept, run.dropped) if run.dispatching and run.index_enable else None
    scanner = scan_phase(run.scans, store.commitlog, start, None, discipline="recovery", tags=tags_a, delay_table=store.delay_table, legacy_properties=run.legacy,
                         index_enable=run.index_enable, index_rule=rules.index_rule, check_crc=config.check_crc_on_recover, topics=run.topics,
                         shown=run.walked if kind.shows_walked and config.check_crc_on_recover else None, ahead=True)
    counts = PhaseCounts()
    run.phase_counts.append(counts)
    told = run.walked if kind.shows_walked else None  # a classic chain: the records ``lmq.stall_throw`` scans
    flagged = -1  # the last record dispatched with a flag to throw on (``lmq.last_flagged``)
    for batch in scanner:
        if told is not None:
            flagged = last_flagged(batch.offsets, batch.column(fd.F_FLAGS), flagged)
        if dispatch_a:
            batch = after_phys(batch, threshold_a)
            feed(batch, run.topics, run.sims, store, rules, run.index_writer, counts, keep_placed=run.options.keep_placed)
            if cache is not None:
                cache.add(0, batch)
    run.scan = ScanResult(start, rule, scanner.end, scanner.records, scanner.last_valid_offset)
    dispatched_to = scanner.end.offset  # the scan's own end: a DLedger log's queue cut moves ``run.end`` past a bad CRC to the entry walk's end
    if told is not None:  # every record of the chain the scan walked was dispatched: verify_after's next start reads it
        told.dispatched.append((run.legacy, Dispatched(start, dispatched_to, flagged)))
    run.cq_cut = kind.queue_cut(run)
    if dispatch_a:
        hashed = tags_a == TAGS_HASH
        run.phases.append(DispatchPhase("recovery", start, dispatched_to, "recovery", tags_a, True, run.index_enable, counts.records, counts.cq, counts.sched if hashed else 0, threshold_a))
        if hashed and counts.sched:
            run.notes.append(f"{counts.sched} delayed message(s) of {SCHEDULE_TOPIC} get their TAGS hash as consume queue tags code, not the delivery "
                             f"time: {run.version} recovers before it loads the delay levels (reference §3.5); the broker delivers them at once")


def _cut(run: RecoveryRun, kind: LogKind) -> None:
    """4. the commit log cut (``truncateDirtyFiles``, §8.9), then the log kind's writes after it, and, if the CQs
    reach the cut, ``truncateDirtyLogicFiles`` (§5.8); ``destroyLogics`` without a segment (§8.10)."""
    store, rules, end = run.store, run.rules, run.end
    run.cl_plan, lost, actions = commitlog_plan(store, run.scan, run.options.lost_limit, run.legacy, rules.accepts_v2_magic,
                                                  zeroes=kind.zeroes_after_cut or not run.dispatching)  # truncate-dirty: zeroed
    run.actions += actions + _empty_last_segment(store, rules, run.notes) + kind.log_actions(run)
    run.lost = unreadable_from_queues(lost, run.sims, end, run.cl_plan.first_invalid)
    _lost_notes(run)
    segments = store.commitlog.segments
    if not segments and (run.abnormal or rules.empty_log_destroys_queues):  # destroyLogics (§8.10; normal recovery from 4.5.0, rules §2.5)
        for sim in run.sims.values():
            sim.destroy()
        run.notes.append("no commit log segment: every consume queue file is deleted (destroyLogics)")
    elif segments and kind.truncates_queues(run):  # recoverNormally does nothing without a segment up to 4.4.0
        for sim in run.sims.values():
            sim.truncate(run.cq_cut)
    run.seeds_b = _seeds(run)  # where the reput starts


def _lost_notes(run: RecoveryRun) -> None:
    """What the cut throws away: valid messages after damage (naming ``salvage`` first), stale records."""
    lost, end, cl_plan = run.lost, run.end, run.cl_plan
    stale = (f"{lost.stale} stale record(s) ({lost.stale_bytes} bytes) after {end}: stale records the broker overwrote (not lost now); "
             "stored before the records it keeps, they are history it cut back and wrote over, and dropped then") if lost.stale else None
    if cl_plan.end_is_damage and lost.lost_now:
        store = shell_path(run.store.path())  # pasteable, as every command mqtool prints
        run.notes.insert(0, f"DAMAGE: the broker's recovery cuts the commit log at {end} ({cl_plan.end_reason}: {cl_plan.end_detail}), not at the "
                            f"end of the written data, and throws away the {lost.lost_now} valid message(s) ({lost.bytes - lost.stale_bytes} bytes) "
                            f"after it; save what is readable of them before --yes: `{salvage_command(run.store.path())}` "
                            f"(`mqtool verify {store} --keep-going` shows the damaged range, `mqtool dump {store} --keep-going` reads past it)"
                            + (f" ({stale})" if stale else ""))
    elif stale:
        run.notes.insert(0, stale)


def _reput(run: RecoveryRun, kind: LogKind) -> None:
    """5. ``start()``'s reput: 4.5.0-4.9.8 from the max CQ physical offset (§8.12, rules §2.11),
    else where the log kind says (DLedger 5.x: the committed position)."""
    store, rules, end = run.store, run.rules, run.end
    cl = store.commitlog
    if not run.dispatching:
        return
    run.reput_from = reput_from = (max([cl.min_offset, 0] + [int(s.state[1]) for s in run.sims.values()])
                                   if rules.reput_from_cq_max and cl.segments else kind.reput_from(run))
    if reput_from is None or reput_from >= end:
        return
    counts = PhaseCounts()
    run.phase_counts.append(counts)
    reput = scan_phase(run.scans, cl, reput_from, end, discipline="reput", tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table,
                       legacy_properties=run.legacy, index_enable=run.index_enable, index_rule=rules.index_rule, check_crc=False, topics=run.topics)
    notify = reput_notify(store, rules)
    for batch in reput:
        if notify is not None and (thrown := first_throw(batch, run.topics.names, multi_dispatch(store, rules), notify)) is not None:
            raise refusal(thrown)  # the notify throws whatever multi-dispatch: before the dispatch's own undecided throw
        feed(batch, run.topics, run.sims, store, rules, run.index_writer, counts, keep_placed=run.options.keep_placed)
        if run.cache is not None:
            run.cache.add(len(run.phases), batch)
    run.phases.append(DispatchPhase("reput", reput_from, end, "reput", TAGS_DELIVERY_TIME, True, run.index_enable, counts.records, counts.cq))
    for skipped in reput.skipped:
        run.notes.append(f"reput skips an unreadable record at {skipped.offset} ({skipped.reason}: {skipped.detail})")


def _queue_results(run: RecoveryRun) -> None:
    """Each queue's plan, seeded where each phase starts, and the queue file deletes."""
    clmin = run.store.commitlog.min_offset
    phase_names = [p.name for p in run.phases]
    for key, sim in sorted(run.sims.items()):
        seeds = tuple(run.seeds_a.get(key) if name == "recovery" else run.seeds_b.get(key) for name in phase_names)
        mn, mx = run.before.get(key, (0, 0))
        run.queue_plans.append(queue_plan(sim, mn, mx, clmin, run.rules.cq_min_offset_v5, seeds))


def _index_results(run: RecoveryRun, kind: LogKind) -> None:
    """The index plan, the write action, the log kind's actions, and the notes on what stays unindexed."""
    store, start = run.store, run.start
    queue_deletes, queue_writes = queue_actions(store, run.queue_plans, run.sims)
    run.actions += queue_deletes
    if run.dispatching:
        run.index_plan, index_actions = index_plan_of(store, run.kept, run.dropped, run.index_writer, run.index_enable, run.indexed_from)
        run.actions += index_actions
        if run.dropped and not run.index_safe and run.index_enable:
            first_dropped = run.dropped[0].header.begin_phy_offset
            if first_dropped < start and run.indexed_from == start:  # else the log kind says (``MixedFirstLoad``, ``DLedgerLog``)
                run.notes.append(f"index entries of records in [{first_dropped}, {start}) are lost: their index file is deleted after the abnormal exit "
                                 "and recovery re-indexes only from its start segment (broker behaviour with messageIndexSafe=false; --index-safe avoids it)")
    index_plan = run.index_plan
    run.actions += write_action(queue_writes, index_plan is not None and any(f.action in ("append", "create") for f in index_plan.files))
    if index_plan is not None and store.index_geometry is None and any(f.action == "create" for f in index_plan.files):
        run.notes.append(default_geometry_note(index_plan.hash_slot_num, index_plan.index_num))
    if index_plan is not None and run.index_enable and store.commitlog.segments:
        for a, b in index_gaps(store, index_plan, run.end, run.legacy):
            run.notes.append(f"no index file covers the keyed records in [{a}, {b}) (an index file is missing; the broker does not rebuild it): run `mqtool rebuild-index`")
    for sim in run.sims.values():
        for base, path in sim.original.items():
            size = path.stat().st_size
            if size != sim.file_size and base in sim.files:
                run.notes.append(f"{rel(store, path)} is {size} bytes, not {sim.file_size}, which no broker loads (rules §2.13): it is rewritten at full size")
    run.unqueued = kind.unqueued(run)
    run.notes += kind.notes(run)
    run.actions += kind.actions(run)


def _checkpoint(run: RecoveryRun, kind: LogKind) -> tuple[CheckpointPlan | None, bool]:
    """6. the checkpoint the broker persists, and the abort file a clean stop removes."""
    if not run.dispatching:
        return None, False
    multi = sum(c.multi for c in run.phase_counts)
    if multi:
        run.notes.append(f"{multi} re-dispatched record(s) carry INNER_MULTI_DISPATCH (LMQ): a broker with enableMultiDispatch/enableLmq also "
                         "writes their entries into the listed queues; mqtool does not (reference §3.6)")
    cp = run.cp
    last_cq = [c.last_cq_ts for c in run.phase_counts if c.last_cq_ts is not None]
    after = cp._replace(logics_msg_timestamp=last_cq[-1] if last_cq else cp.logics_msg_timestamp)
    if run.index_plan is not None and run.index_plan.index_msg_timestamp_after is not None:
        after = after._replace(index_msg_timestamp=run.index_plan.index_msg_timestamp_after)
    after = kind.checkpoint(run, after)
    cp_plan = CheckpointPlan(run.cp_exists, cp._asdict(), after._asdict())
    if cp_plan.changed:
        run.actions.append(Action("write-checkpoint", "checkpoint", note="values the broker persists after this recovery"))
    run.actions += kind.checkpoint_actions(run)
    remove_abort = run.store.abort_present
    if remove_abort:
        run.actions.append(Action("delete", markers.ABORT_FILE, note="a clean shutdown removes the abort file"))
    return cp_plan, remove_abort


def plan_truncate_dirty_one_version(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None,
                                    scans: SharedScans | None = None) -> Plan:
    """The log and queues cut after the last valid record (``truncateDirtyFiles``), under one version."""
    return plan_recover_one_version(store, options, command="truncate-dirty", with_crc=with_crc, scans=scans)


def _empty_last_segment(store: Store, rules: VersionRules, notes: list[str]) -> list[Action]:
    """A zero-length last commit log file at load (rules §2.13, ``MappedFileQueue.doLoad``): 5.1.3+
    delete it; 3.2.6-4.4.0 and 4.9.2 leave it out (the others refuse: ``unloadable_files``)."""
    path = store.empty_last_segment
    if path is None:
        return []
    if rules.zero_length_last_file_deleted:
        return [Action("delete", rel(store, path), note="a zero-length last file: MappedFileQueue.doLoad deletes it (5.1.3+)")]
    notes.append(f"{rel(store, path)} is a zero-length last file: {rules.version} leaves it out at load and starts (MappedFileQueue.load); it stays")
    return []
