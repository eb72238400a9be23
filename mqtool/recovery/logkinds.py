"""The two commit logs ``plan_recover_one_version`` recovers (reference §8.4/§8.5, §15.4): the shared ``RecoveryRun`` and what
differs between ``CommitLog`` and ``DLedgerCommitLog`` recovery (``LogKind``)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..errors import Refused
from ..formats.checkpoint import StoreCheckpoint
from ..store import Store
from ..store.commitlog import StopReason
from ..store.rules import BrokerVersion, VersionRules
from ..store.startfile import log_recovery_mode, max_queue_phys_offset, recovery_start
from .lost import record_at
from .plans import Action, CommitLogPlan, DispatchPhase, IndexPlan, LostMessages, PlanOptions, QueuePlan, QueueRef
from .planparts import PhaseCounts, ScanResult, rel
from .queues import QueueSim

if TYPE_CHECKING:
    from ..dispatch.scanner import DispatchCache
    from ..store.walkedchain import WalkedChain
    from .sharedscans import SharedScans


@dataclass
class RecoveryRun:
    """What the steps of ``plan_recover_one_version`` share: the settings, then each step's results."""

    store: Store
    options: PlanOptions
    command: str
    cache: DispatchCache | None
    walked: WalkedChain | None
    scans: SharedScans | None
    version: BrokerVersion
    source: str
    rules: VersionRules
    mode: str
    cp_exists: bool
    cp: StoreCheckpoint
    index_safe: bool
    notes: list[str] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    # 1. consume queue recovery
    sims: dict[tuple[str, int], QueueSim] = field(default_factory=dict)
    before: dict = field(default_factory=dict)
    max_cq: int = -1
    seeds_a: dict = field(default_factory=dict)
    # 2. index load
    kept: list = field(default_factory=list)
    dropped: list = field(default_factory=list)
    # 3. the scan
    start: int = 0
    dispatch_a: bool = False
    topics: object = None
    index_writer: object = None
    scan: ScanResult | None = None
    phases: list[DispatchPhase] = field(default_factory=list)
    phase_counts: list[PhaseCounts] = field(default_factory=list)
    # 4. the cut
    cq_cut: int = 0
    cl_plan: CommitLogPlan | None = None
    lost: LostMessages | None = None
    seeds_b: dict = field(default_factory=dict)
    # 5. the reput, then the results
    reput_from: int | None = None
    unqueued: list[QueueRef] = field(default_factory=list)  # records kept without a consume queue entry (``LogKind.unqueued``)
    queue_plans: list[QueuePlan] = field(default_factory=list)
    index_plan: IndexPlan | None = None

    @property
    def dispatching(self) -> bool:
        return self.command == "recover"

    @property
    def abnormal(self) -> bool:
        return self.mode == "abnormal"

    @property
    def index_enable(self) -> bool:
        return self.store.config.message_index_enable

    @property
    def legacy(self) -> bool:
        return self.rules.legacy_properties

    @property
    def end(self) -> int:
        return self.scan.end.offset

    @property
    def indexed_from(self) -> int | None:
        return min((p.start for p in self.phases if p.index), default=None)


class LogKind:
    """What one kind of commit log's recovery decides, asked by the steps of ``recover.py``."""

    shows_walked = False  # the scan shows ``walked`` the rows where it checks the CRC
    zeroes_after_cut = True  # the plan zeroes the bytes after the cut in its segment (``planparts.commitlog_plan``)

    def reput_from(self, run: RecoveryRun) -> int | None:
        """The start-up reput's start where the version does not reput from the max CQ offset."""
        return None

    def unqueued(self, run: RecoveryRun) -> list[QueueRef]:
        """The records the recovery keeps in the log whose consume queue entries it cuts and no later dispatch writes again."""
        return []

    def log_actions(self, run: RecoveryRun) -> list[Action]:
        """Writes to the commit log after its cut (``MixedFirstLoad``'s end-of-file blank)."""
        return []

    def actions(self, run: RecoveryRun) -> list[Action]:
        """Changes to files of this log kind beside the commit log, queues and index."""
        return []

    def checkpoint_actions(self, run: RecoveryRun) -> list[Action]:
        """Writes of this log kind's own checkpoint."""
        return []


class ClassicLog(LogKind):
    """``CommitLog.recoverNormally`` / ``recoverAbnormally`` (§8.4/§8.5, ``VersionRules``)."""

    shows_walked = True

    def start(self, run: RecoveryRun) -> tuple[int, str]:
        if run.options.full_scan:
            return run.store.commitlog.min_offset, "every segment from the first (--full-scan)"
        s = recovery_start(run.store, run.rules, mode=run.mode, index_safe=run.index_safe, max_cq_phys_offset=run.max_cq)
        return s.offset, s.rule

    def dispatches(self, run: RecoveryRun) -> bool:
        return run.dispatching and (run.abnormal or run.rules.normal_dispatches)

    def queue_cut(self, run: RecoveryRun) -> int:
        end = run.scan.end
        stops = run.rules.abnormal_stops_at_length_mismatch if run.abnormal else run.rules.normal_stops_at_length_mismatch
        if end.reason == StopReason.LENGTH_MISMATCH and not stops:
            how = ("never compares TOTALSIZE with the fields: it advances by TOTALSIZE (rules §2.2, 3.2.6's checkMessageAndReturnSize)"
                   if not run.rules.checks_record_length else
                   "does not stop there but advances by TOTALSIZE, dispatching a bogus entry to consume queue ''/0, and reads on out of "
                   "step (rules §2.7, recoverAbnormally up to 4.3.1)")
            raise Refused(f"the record at {end.offset} has a TOTALSIZE that disagrees with its fields: {run.version}'s {run.mode} recovery "
                          f"{how}; mqtool does not plan that recovery (`mqtool dump --keep-going` reads past the record)")
        return end.offset

    def truncates_queues(self, run: RecoveryRun) -> bool:
        always = run.abnormal and run.rules.abnormal_truncates_cq_always
        return bool(always or ((run.abnormal or run.rules.normal_truncates_cq) and run.max_cq >= run.end))

    def notes(self, run: RecoveryRun) -> list[str]:
        if not run.dispatching:
            return []
        store, phases, end, legacy = run.store, run.phases, run.end, run.legacy
        max_cq = max_queue_phys_offset(store)  # where the last entry's record ends, in every version
        notes = []
        covered_from = min((p.start for p in phases if p.consume_queues), default=end)
        if 0 <= max_cq < end and covered_from > max_cq and _record_starts_at(store, max_cq, False):  # a record lies past the queues' end
            notes.append(f"records in [{max_cq}, {min(covered_from, end)}) lie past the consume queues' end and {run.rules.version}'s {run.mode} recovery does not "
                         "re-dispatch them (they stay unreadable by consumers): run `mqtool rebuild-cq`, or `mqtool recover --abnormal`")
        notes += [f"5.3.2+ normal recovery re-dispatches only records strictly after the consume queues' max offset {p.after_phys}: "
                  "the record that starts exactly there is not re-dispatched (reference §8.5), as the broker does"
                  for p in phases if p.after_phys is not None and p.after_phys >= 0 and _record_starts_at(store, p.after_phys, legacy)]
        if run.kept and any(p.index for p in phases):
            last = run.kept[-1].header.end_phy_offset
            dispatched = any(p.start <= last < p.stop and (p.after_phys is None or last > p.after_phys) for p in phases if p.index)
            if dispatched and _record_starts_at(store, last, legacy):
                notes.append(f"the record at {last} (the last one already indexed) is indexed again by the re-dispatch (buildIndex skips only offsets below "
                             "the index's end offset): its keys get duplicate index entries and queries return it twice, as on the broker")
        return notes

    def checkpoint(self, run: RecoveryRun, after: StoreCheckpoint) -> StoreCheckpoint:
        if run.rules.writes_confirm_offset and run.scan.last_valid >= 0:
            return after._replace(confirm_phy_offset=run.scan.last_valid)
        return after


class MixedFirstLoad(ClassicLog):
    """A DLedger broker's classic commit log without DLedger data files: 4.5.0-5.1.4 run ``recoverNormally`` even after a crash;
    5.2.0+ ``recoverAbnormally``. The index load still follows the abort file."""

    @staticmethod
    def _log_run(run: RecoveryRun) -> RecoveryRun:
        mode = log_recovery_mode(run.store, run.rules, run.mode)
        return run if mode == run.mode else replace(run, mode=mode)

    def dispatches(self, run: RecoveryRun) -> bool:  # ``start``: ``recovery_start`` asks ``log_recovery_mode`` itself
        return super().dispatches(self._log_run(run))

    def queue_cut(self, run: RecoveryRun) -> int:
        return super().queue_cut(self._log_run(run))

    def truncates_queues(self, run: RecoveryRun) -> bool:
        return super().truncates_queues(self._log_run(run))

    def log_actions(self, run: RecoveryRun) -> list[Action]:
        """The 8-byte end-of-file blank DLedgerCommitLog writes at the recovered end unless one is there (rules §8.4, reference
        §15.5), and the zero-filled first DLedger data file it maps; refused where that load fails."""
        from ..store.dledgerstart import first_load_blank  # a DLedger module: loaded for DLedger stores only

        blank = first_load_blank(run.store, run.rules, run.end) if run.dispatching else None
        if blank is not None and blank.failure is not None:
            raise Refused(f"{blank.failure}; mqtool does not plan that recovery")
        if blank is None:
            return []
        cl = run.store.commitlog
        data = cl.layout.data_dir / f"{blank.divided_offset - blank.divided_offset % cl.file_size:020d}"  # MmapFileList's createOffset
        writes = [Action("write-blank", rel(run.store, blank.path), blank.position, blank.file_size,
                         f"DLedger's first load of the classic commit log: an end-of-file blank at {blank.offset}, "
                         f"its data start at {blank.divided_offset} (dividedCommitlogOffset)")] if blank.writes else []
        return writes + [Action("resize", rel(run.store, data), 0, cl.file_size, "DLedger's first load of the classic commit log: "
                                f"its first data file, zero-filled, at {blank.divided_offset} (MmapFileList.getLastMappedFile)")]

    def notes(self, run: RecoveryRun) -> list[str]:
        notes = super().notes(self._log_run(run))
        if run.dispatching and self._log_run(run) is not run:
            notes.insert(0, f"no DLedger data file: {run.version}'s DLedgerCommitLog recovers the classic commit log as after a clean stop, "
                            "abort file or not (super.recoverNormally, 4.5.0-5.1.4)")
            # IndexService.load(lastExitOK) still drops the files newer than indexMsgTimestamp, and recoverNormally re-indexes nothing
            upto = run.end if run.indexed_from is None else min(run.indexed_from, run.end)
            first = min((f.header.begin_phy_offset for f in run.dropped), default=upto)
            if run.index_enable and first < upto:
                notes.append(f"index entries of records in [{first}, {upto}) are lost: their index file is deleted after the abnormal exit and this "
                             + ("recovery re-indexes none of them" if upto == run.end else f"recovery re-indexes only from the start-up reput at {upto}")
                             + " (messageIndexSafe or not); `mqtool rebuild-index` rebuilds them")
        return notes


def log_kind(store: Store) -> LogKind:
    """The store's commit log kind (without DLedger data files, the classic log: ``MixedFirstLoad``)."""
    if store.recovers_dledger_data:
        from .dledger import DLedgerLog
        from ..store.dledgerstart import data_recovery

        return DLedgerLog(data_recovery(store.commitlog))
    return MixedFirstLoad() if store.is_dledger else ClassicLog()


def _record_starts_at(store: Store, offset: int, legacy: bool) -> bool:
    found = record_at(store.commitlog, offset, legacy)
    return found is not None and found.topic is not None
