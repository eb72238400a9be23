"""DLedger recovery (reference §15.4): ``DLedgerMmapFileStore.recover``'s entry walk, then ``DLedgerCommitLog`` per version.
Normal: no dispatch, queues cut at the data end, 4.5.0-4.9.8 re-put from their max (§8.12); 5.2.0+ abnormal: records dispatched
with the end summed without entry headers, so queues are cut short (observed on 5.3.3, ``dledger-crashed-cqloss``)."""

from __future__ import annotations

from ..formats import dledger as dfmt
from ..formats.checkpoint import StoreCheckpoint
from ..store import Store
from ..store.commitlog import ScanEnd, StopReason
from ..store.dledger import DLedgerCommitLog, index_file_size
from ..store.dledgerstart import DataRecovery, data_recovery, dledger_start, reput_start
from ..store.rules import VersionRules
from ..store.fastscan import COL_SIZE, FastScan
from ..store.mappedfile import offset_file_name
from .logkinds import LogKind, RecoveryRun
from .plans import Action, QueueRef
from .planparts import rel, written_end


def headerless_end(cl: DLedgerCommitLog, walk_end: ScanEnd) -> int:
    """``dledgerRecoverAbnormally``'s ``processOffset``: the base of the file where the record
    walk stopped plus the sizes of the records walked in it, without their entry headers."""
    index = cl.segment_index(walk_end.offset)
    if index is None:
        return walk_end.offset
    if walk_end.offset == cl.segments[index].base_offset and index > 0 and walk_end.reason != "zeros":
        index -= 1
    seg = cl.segments[index]
    scan = FastScan(cl, seg.base_offset, walk_end.offset, check_crc=False, stop_on_crc=False)
    return seg.base_offset + sum(int(batch.rows[:, COL_SIZE].sum()) for batch in scan)


def _index_ranges(store: Store, op: str, start: int, stop: int, note: str, created=()) -> list:
    """One ``op`` action per index file over [``start``, ``stop``) of the list, files ``created`` included."""
    actions, layout, size = [], store.commitlog.layout, index_file_size(store)
    files = dict(layout.index_files())
    for base in sorted(files.keys() | set(created)):
        path = files.get(base, layout.index_dir / offset_file_name(base))
        lo, hi = max(start, base), min(stop, base + (path.stat().st_size if base in files else size))
        if lo < hi:
            actions.append(Action(op, rel(store, path), lo - base, hi - base, note))
    return actions


def stale_unit_actions(store: Store, last_index: int) -> list:
    """``repair``'s ``zero-range`` of ``index/`` units past ``last_index`` (``MmapFileList.truncateOffset``, §15.4)."""
    cut = last_index + 1
    if (tail := store.commitlog.units_written_from(cut)) == cut:
        return []
    return _index_ranges(store, "zero-range", cut * dfmt.INDEX_UNIT_SIZE, tail * dfmt.INDEX_UNIT_SIZE,
                         "DLedger index units past the last entry, which the broker's recovery leaves (truncateOffset)")


def stale_data_actions(store: Store) -> list:
    """``repair``'s ``zero-range`` of the data bytes after DLedger's entry walk, which ``recover`` leaves."""
    cl, end = store.commitlog, data_recovery(store.commitlog).end
    index = cl.segment_index(end.offset)
    if index is None or not cl.is_entry_file(seg := cl.segments[index]) or end.reason == StopReason.BLANK_LAST:
        return []
    start = end.offset - seg.base_offset
    stop = written_end(seg.path, start)
    return [Action("zero-range", rel(store, seg.path), start, stop, "DLedger data after the end of its entry walk, which the broker's "
                   "recovery leaves (truncateOffset)")] if stop > start else []


class DLedgerLog(LogKind):
    """``DLedgerCommitLog``'s recovery over ``DLedgerMmapFileStore.recover`` (module docstring)."""

    # ``dataFileList.truncateOffset(processOffset)`` leaves the bytes after the cut (MmapFileList @0.1-0.3.1.2, reference §15.4)
    zeroes_after_cut = False

    def __init__(self, dl: DataRecovery):
        self.dl = dl

    def start(self, run: RecoveryRun) -> tuple[int, str]:
        s = dledger_start(run.store, self.dl, run.version, mode=run.mode, index_safe=run.index_safe, full_scan=run.options.full_scan)
        return s.offset, s.rule

    def dispatches(self, run: RecoveryRun) -> bool:
        return run.dispatching and run.abnormal and VersionRules(run.version).dledger_abnormal_redispatch

    def queue_cut(self, run: RecoveryRun) -> int:
        dl = self.dl
        cq_cut = headerless_end(run.store.commitlog, run.scan.end) if run.dispatch_a else dl.end.offset
        if cq_cut < dl.end.offset:
            run.notes.append(f"{run.version}'s abnormal DLedger recovery adds up record sizes without their 48-byte entry headers: it takes {cq_cut} "
                             f"for the end of the log (really {dl.end.offset}) and truncates the consume queues there")
        run.scan.end = dl.end  # DLedgerMmapFileStore.recover truncates the data where its entry walk stops
        if not run.dispatch_a:  # and that walk is the scan: it passes a damaged record in a sound entry
            run.scan.records = dl.walked
        return cq_cut

    def truncates_queues(self, run: RecoveryRun) -> bool:
        return run.max_cq >= run.cq_cut

    def reput_from(self, run: RecoveryRun) -> int | None:
        return reput_start(run.store.commitlog, self.dl)[0]  # 5.x: from the confirm offset (DLedger's committed position)

    def actions(self, run: RecoveryRun) -> list:
        """``recover``'s changes to ``index/``: units from the first that disagrees rewritten, ``truncateOffset`` deleting the
        files after the last valid entry (``stale_unit_actions``: the units left), ``resetOffset`` deleting files before the first
        data entry."""
        store, dl, actions = run.store, self.dl, []
        if dl.rewrite_from is not None:
            start, size, layout = dl.rewrite_from * dfmt.INDEX_UNIT_SIZE, index_file_size(store), store.commitlog.layout
            # an index file the rewrite writes into that is not on disk: ``MmapFileList.append`` maps a new one (``resize``)
            have = {b for b, _ in layout.index_files()}
            missing = [b for b in range(start - start % size, dl.index_cut, size) if b not in have]
            actions += [Action("resize", rel(store, layout.index_dir / offset_file_name(b)), 0, size,
                               f"DLedger index file missing: the broker's recovery creates it ({size} bytes) and writes the units from the entries")
                        for b in missing]
            actions += _index_ranges(store, "write-dledger-index", start, dl.index_cut,
                                     f"DLedger index units from entry {dl.rewrite_from} on disagree with their entries: rewritten from them", missing)
        # the units after the cut stay, the files after it go (truncateOffset: destroyExpiredFiles, deleteExpiredFiles)
        actions += [Action("delete", rel(store, path), note="DLedger index file after the last valid entry (truncateOffset)")
                    for base, path in store.commitlog.layout.index_files() if base > dl.index_cut]
        if dl.last_index >= 0:  # reviseLedgerBeginIndex: indexFileList.resetOffset(ledgerBeginIndex x 32) deletes the files wholly before
            begin, size = store.commitlog.ledger_begin_index, index_file_size(store)
            actions += [Action("delete", rel(store, path), note=f"DLedger index file wholly before the first entry left, {begin} (resetOffset)")
                        for base, path in store.commitlog.layout.index_files() if base + size <= begin * dfmt.INDEX_UNIT_SIZE]
        return actions

    def unqueued(self, run: RecoveryRun) -> list[QueueRef]:
        """The records between the queues' cut ``cq_cut`` (5.2.0+ abnormal: short of the log's end, ``headerless_end``) and the
        committed position the start-up reput resumes at: the cut takes their entries and no dispatch writes them again."""
        from ..formats.dispatch import dispatches_to_consume_queue

        cq_cut, reput_from, cl = run.cq_cut, run.reput_from, run.store.commitlog
        if not run.dispatching or reput_from is None or cq_cut >= reput_from:
            return []
        return [QueueRef(r.topic_name, r.queue_id, r.queue_offset, r.offset, r.total_size)
                for r in cl.scan(cl.segments[cl.segment_index(cq_cut)].base_offset, reput_from)
                if cq_cut <= r.offset < reput_from and dispatches_to_consume_queue(r.sys_flag)]

    def notes(self, run: RecoveryRun) -> list[str]:
        from ..formats.dispatch import dispatches_to_consume_queue

        if not run.dispatching:
            return []
        store, version, dl, reput_from = run.store, run.version, self.dl, run.reput_from
        dropped = run.dropped if run.index_enable else []
        notes = []
        end = dl.end.offset
        if lost := run.unqueued:
            cl = store.commitlog
            queues = {(r.topic, r.queue_id) for r in lost}
            shifted = sum(1 for r in cl.scan(reput_from, end) if (r.topic_name, r.queue_id) in queues and dispatches_to_consume_queue(r.sys_flag))
            shifted_note = f"; {shifted} later message(s) of the same {len(queues)} queue(s) land at shifted queue offsets" if shifted else ""
            notes.append(f"{version}'s abnormal DLedger recovery loses {len(lost)} acknowledged message(s) at [{lost[0].offset}, "
                         f"{lost[-1].offset}]: their consume queue entries are truncated and the start-up reput resumes only at the committed "
                         f"position {reput_from} (checkpoint committedIndex {dl.committed_index}){shifted_note}. `mqtool rebuild-cq` keeps them all")
        if dropped:
            first = min(f.header.begin_phy_offset for f in dropped)
            upto = end if run.indexed_from is None else min(run.indexed_from, end)
            if first < upto:
                notes.append(f"{version}'s DLedger recovery deletes {len(dropped)} index file(s) (abnormal exit, indexMsgTimestamp "
                             f"{store.checkpoint.index_msg_timestamp if store.checkpoint else 0}) and never re-indexes [{first}, {upto}): "
                             "every key or UNIQ_KEY lookup of those messages returns nothing afterwards. `mqtool rebuild-index` rebuilds them")
        return notes

    def checkpoint(self, run: RecoveryRun, after: StoreCheckpoint) -> StoreCheckpoint:
        last = run.phase_counts[-1].last_cq_ts
        if run.rules.v5 and len(run.phase_counts) > 1 and last is not None:
            return after._replace(physic_msg_timestamp=last)  # 5.x reput on DLedger (observed)
        return after

    def checkpoint_actions(self, run: RecoveryRun) -> list:
        """DLedger's ``checkpoint`` as the broker leaves it: ``committedIndex = endIndex`` = the last entry."""
        layout, last = run.store.commitlog.layout, self.dl.last_index
        if last < 0 or (layout.committed_index, layout.end_index) == (last, last):
            return []
        return [Action("write-dledger-checkpoint", rel(run.store, layout.home / "checkpoint"), last, last,
                       f"committedIndex {last} and endIndex {last}: the last recovered entry, as the broker persists them")]
