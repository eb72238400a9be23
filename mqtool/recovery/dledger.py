"""DLedger recovery (reference §15.4): what a DLedger broker's load does, as plan inputs (the entry
walk of 1. and the scan start of 2.: ``store.dledgerstart``).

1. ``DLedgerMmapFileStore.recover``: from the third-from-last data file (stepping back while a
   file's first entry disagrees with its index unit), walk entries (magic, pos = own offset,
   size = body + 48, index contiguous, term never decreasing; no CRC, no record check); data
   and index are truncated where the walk stops (index at ``(last index + 1) x 32``).
2. ``DLedgerCommitLog`` on top, per version:

   - 4.x and 5.x normal (``recover`` / ``dledgerRecoverNormally``): no dispatch; the consume
     queues are truncated at the data end if their max physical offset reaches it. 4.5.0-4.9.8
     ``start()`` then re-puts from the max consume queue physical offset (§8.12), so a 4.9.x
     abnormal exit re-indexes only that tail: the index files the abnormal load deleted
     (§6.9) are never rebuilt;
   - 5.x abnormal (``dledgerRecoverAbnormally``): from the newest data file whose first record
     is V1 and stored at or before the checkpoint bound (``isMmapFileMatchedRecover``), every
     record is dispatched; the recovered end it compares the consume queues with adds up
     record sizes *without* the 48-byte entry headers (``mmapFileOffset += size``), so it lies
     48 x (entries walked in the last file) before the real end, and queues are truncated
     there. ``start()`` then re-puts from the commit log's confirm offset, which is DLedger's
     committed position as the ``checkpoint`` file's ``committedIndex`` leaves it: records
     between the early truncation and that position lose their consume queue entry, and later
     records land at shifted queue offsets (observed on 5.3.3, ``dledger-crashed-cqloss``).
"""

from __future__ import annotations

from ..formats import dledger as dfmt
from ..formats.checkpoint import StoreCheckpoint
from ..store import Store
from ..store.commitlog import ScanEnd
from ..store.dledger import DLedgerCommitLog
from ..store.dledgerstart import DataRecovery, data_recovery, dispatches_on_abnormal, dledger_start
from ..store.fastscan import COL_SIZE, FastScan
from ..store.mappedfile import inferred_file_size
from ..store.rules import BrokerVersion
from .logkinds import LogKind, RecoveryRun
from .plans import Action
from .planparts import rel


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


def index_actions(store: Store, dl: DataRecovery) -> list:
    """``recover``'s changes to ``index/``: from the first walked entry its unit disagrees with,
    every unit rewritten from the entries (``write-dledger-index``), in an index file created
    first where none holds them (``indexFileList.append``); the units past the last valid entry
    zeroed (``indexFileList.truncateOffset``)."""
    actions = []
    if dl.rewrite_from is not None:
        start = dl.rewrite_from * dfmt.INDEX_UNIT_SIZE
        actions += _missing_index_files(store, start, dl.index_cut)
        actions += _index_ranges(store, "write-dledger-index", start, dl.index_cut,
                                 f"DLedger index units from entry {dl.rewrite_from} on disagree with their entries: rewritten from them")
    if dl.index_units_on_disk > dl.last_index + 1:
        actions += _index_ranges(store, "zero-range", dl.index_cut, dl.index_units_on_disk * dfmt.INDEX_UNIT_SIZE, "DLedger index units past the last valid entry (truncateOffset)")
    return actions


def _index_ranges(store: Store, op: str, start: int, stop: int, note: str) -> list:
    """One ``op`` action per index file over the bytes [``start``, ``stop``) of the index file list
    (for a rewrite, the files ``_missing_index_files`` creates included)."""
    actions = []
    layout = store.commitlog.layout
    size = index_file_size(store)
    files = dict(layout.index_files())
    created = set(_missing_slots(store, start, stop)) if op == "write-dledger-index" else set()
    for base in sorted(files.keys() | created):
        path = files.get(base, layout.index_dir / f"{base:020d}")
        lo, hi = max(start, base), min(stop, base + (path.stat().st_size if base in files else size))
        if lo < hi:
            actions.append(Action(op, rel(store, path), lo - base, hi - base, note))
    return actions


def index_file_size(store: Store) -> int:
    """The length of the DLedger index files: that of the files there (an empty one tells none), else DLedger's
    default (``DLedgerConfig.mappedFileSizeForEntryIndex``, 5 Mi units: ``DLedgerCommitLog`` does not set it)."""
    sizes = [size for size in (p.stat().st_size for _, p in store.commitlog.layout.index_files()) if size]
    return inferred_file_size(sizes) if sizes else DLEDGER_INDEX_FILE_SIZE


DLEDGER_INDEX_FILE_SIZE = dfmt.INDEX_UNIT_SIZE * 5 * 1024 * 1024


def _missing_slots(store: Store, start: int, stop: int) -> list[int]:
    """The base of each index file the bytes [``start``, ``stop``) of the index file list fall in
    that is not on disk (deleted, or never written)."""
    size = index_file_size(store)
    have = {b for b, _ in store.commitlog.layout.index_files()}
    return [b for b in range(start - start % size, stop, size) if b not in have]


def _missing_index_files(store: Store, start: int, stop: int) -> list:
    """An index file the recovery's rewrite writes into that is not on disk: ``MmapFileList.append``
    (``rebuildWithPos`` when the first unit is not at 0) maps a new, zero-filled one of the index
    file size, created here (``resize`` of an absent file)."""
    index_dir, size = store.commitlog.layout.index_dir, index_file_size(store)
    return [Action("resize", rel(store, index_dir / f"{base:020d}"), 0, size,
                   f"DLedger index file missing: the broker's recovery creates it ({size} bytes) and writes the units from the entries")
            for base in _missing_slots(store, start, stop)]


def checkpoint_actions(store: Store, dl: DataRecovery) -> list:
    """DLedger's ``checkpoint`` as the broker leaves it after a run: every recovered entry
    committed (``committedIndex = endIndex`` = the last entry), so the next start re-puts nothing."""
    layout = store.commitlog.layout
    if dl.last_index < 0 or (layout.committed_index, layout.end_index) == (dl.last_index, dl.last_index):
        return []
    return [Action("write-dledger-checkpoint", rel(store, layout.home / "checkpoint"), dl.last_index, dl.last_index, "committedIndex and endIndex of the last recovered entry, as the broker persists them")]


def loss_notes(store: Store, version: BrokerVersion, dl: DataRecovery, cq_cut: int, reput_from: int | None, dropped: list, indexed_from: int | None) -> list[str]:
    """What the broker's DLedger recovery loses, in words an operator can act on."""
    from ..formats.dispatch import dispatches_to_consume_queue

    notes = []
    end = dl.end.offset
    if reput_from is not None and cq_cut < reput_from:
        cl = store.commitlog
        lost = [r for r in cl.scan(cl.segments[cl.segment_index(cq_cut)].base_offset, reput_from) if cq_cut <= r.offset < reput_from and dispatches_to_consume_queue(r.sys_flag)]
        if lost:
            queues = {(r.topic_name, r.queue_id) for r in lost}
            shifted = sum(1 for r in cl.scan(reput_from, end) if (r.topic_name, r.queue_id) in queues and dispatches_to_consume_queue(r.sys_flag))
            notes.append(
                f"{version}'s abnormal DLedger recovery loses {len(lost)} acknowledged message(s) at [{lost[0].offset}, {lost[-1].offset}]: their consume "
                f"queue entries are truncated and the start-up reput resumes only at the committed position {reput_from} (checkpoint committedIndex "
                f"{dl.committed_index})" + (f"; {shifted} later message(s) of the same {len(queues)} queue(s) land at shifted queue offsets" if shifted else "")
                + ". `mqtool rebuild-cq` keeps them all"
            )
    if dropped:
        first = min(f.header.begin_phy_offset for f in dropped)
        upto = end if indexed_from is None else min(indexed_from, end)
        if first < upto:
            notes.append(
                f"{version}'s DLedger recovery deletes {len(dropped)} index file(s) (abnormal exit, indexMsgTimestamp "
                f"{store.checkpoint.index_msg_timestamp if store.checkpoint else 0}) and never re-indexes [{first}, {upto}): "
                "every key or UNIQ_KEY lookup of those messages returns nothing afterwards. `mqtool rebuild-index` rebuilds them"
            )
    return notes


class DLedgerLog(LogKind):
    """``DLedgerCommitLog``'s recovery over ``DLedgerMmapFileStore.recover`` (module docstring)."""

    def __init__(self, dl: DataRecovery):
        self.dl = dl

    @classmethod
    def of(cls, store: Store) -> "DLedgerLog":
        return cls(data_recovery(store.commitlog))

    def start(self, run: RecoveryRun) -> tuple[int, str]:
        s = dledger_start(run.store, self.dl, run.version, mode=run.mode, index_safe=run.index_safe, full_scan=run.options.full_scan)
        return s.offset, s.rule

    def dispatches(self, run: RecoveryRun) -> bool:
        return run.dispatching and run.abnormal and dispatches_on_abnormal(run.version)

    def queue_cut(self, run: RecoveryRun) -> int:
        dl = self.dl
        cq_cut = headerless_end(run.store.commitlog, run.scan.end) if run.dispatch_a else dl.end.offset
        if cq_cut < dl.end.offset:
            run.notes.append(
                f"{run.version}'s abnormal DLedger recovery adds up record sizes without their 48-byte entry headers: it takes {cq_cut} "
                f"for the end of the log (really {dl.end.offset}) and truncates the consume queues there"
            )
        run.scan.end = dl.end  # DLedgerMmapFileStore.recover truncates the data where its entry walk stops
        return cq_cut

    def truncates_queues(self, run: RecoveryRun) -> bool:
        return run.max_cq >= run.cq_cut

    def reput_from(self, run: RecoveryRun) -> int | None:
        return self.dl.committed_pos  # 5.x: from the confirm offset = DLedger's committed position

    def actions(self, run: RecoveryRun) -> list:
        return index_actions(run.store, self.dl)

    def notes(self, run: RecoveryRun) -> list[str]:
        if not run.dispatching:
            return []
        return loss_notes(run.store, run.version, self.dl, run.cq_cut, run.reput_from, run.dropped if run.index_enable else [], run.indexed_from)

    def checkpoint(self, run: RecoveryRun, after: StoreCheckpoint) -> StoreCheckpoint:
        last = run.phase_counts[-1].last_cq_ts
        if run.rules.v5 and len(run.phase_counts) > 1 and last is not None:
            return after._replace(physic_msg_timestamp=last)  # 5.x reput on DLedger (observed)
        return after

    def checkpoint_actions(self, run: RecoveryRun) -> list:
        return checkpoint_actions(run.store, self.dl)
