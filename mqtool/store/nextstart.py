"""What the broker's next start does to the commit log (reference §8.3, §8.9), or why it refuses to start."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..fileops import A_DIRECTORY, A_SOCKET, A_SPECIAL, not_a_file
from ..formats import timer as tfmt
from .commitlog import CommitLog, ScanEnd, StopReason
from .eras import candidate_groups
from .mappedfile import DELETED, INDEX_SERVICE, LOAD_CONSUME_QUEUE, MAPPED_FILE_QUEUE, MMAP_FILE_LIST, REFUSED, open_read_only, unmounted_text
from .mappedfile import StrayEntry, stray_after
from .rules import ERAS, VersionRules
from .startfile import ScanStart, recovery_start
from .store import A_FIFO, EMPTY_LAST_SEGMENT, SEGMENT_SIZE, STRAY_ENTRY, Store, empty_not_last, stray_effects, stray_refused_why
from .version import eras_label

ERA_INDEX = {e.name: e.index for e in ERAS}
ZERO_CHUNK = bytes(1 << 20)  # bytes compared at a time when looking for anything after the end
ENDS = {  # how the line words each end
    StopReason.ZEROS: "end of data",
    StopReason.BLANK_LAST: "end of the last segment",
    StopReason.CRC: "crc mismatch",
    StopReason.CORRUPT: "corrupt record",
    StopReason.LENGTH_MISMATCH: "half message",
    StopReason.TRUNCATED: "record cut short",
    StopReason.SEGMENT_END: "segment end without a blank",
    StopReason.NO_SEGMENTS: "no segment",
}


@dataclass(frozen=True)
class NextStart:
    """The next start: ``mode`` recovery from ``scan_from`` keeps ``[min_offset, logical_end)``, drops ``dropped_messages``."""

    mode: str
    scan_from: int
    rule: str
    min_offset: int
    logical_end: int | None
    end_reason: str
    dropped_messages: int | None
    refused: str | None = None  # why the broker does not start (``log_refusal``; ``later_refusal``, ``wheel_refusal``: figures once fixed)
    blank_at: int | None = None  # where a DLedger broker's first load writes an end-of-file blank (``dledgerstart.FirstLoadBlank``)
    stall: str | None = None  # a record whose dispatch throws at that start, and what follows (``verify.lmq.with_stall``)
    links: str | None = None  # what its load does to dangling symlinks: deletes one (its data lost), creates a target (``link_clauses``)
    walk_end: ScanEnd | None = None  # where DLedger's entry walk ends, where the broker refuses to start on a DLedger store (``reported_end``)

    @property
    def reason(self) -> str:
        """Why the log ends there, in words, with the offset (why the broker refuses to start, if it does)."""
        return self.refused or self._end()

    def _end(self) -> str:
        if self.end_reason == StopReason.ZEROS and self.dropped_messages:
            return f"zeros at {self.logical_end}"
        return f"{ENDS.get(self.end_reason, self.end_reason)} at {self.logical_end}"

    def reported_end(self, walked: ScanEnd | None) -> tuple[int | None, str]:
        """(logical end, why) as ``verify`` and Spark report them: this start's, ``walked``'s or ``walk_end``'s."""
        walked = self.walk_end or walked
        if self.logical_end is not None or walked is None:
            return self.logical_end, self.end_reason
        return walked.offset, walked.reason

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "logical_end": self.logical_end, "dropped_messages": self.dropped_messages, "reason": self.reason,
                "scan_from": self.scan_from, "blank_at": self.blank_at, "stall": self.stall, "line": self.line()}

    def line(self) -> str:
        refuses = f"the broker's next start refuses to start: {self.refused}"
        if self.logical_end is None:
            return refuses
        drops = f"drops {self.dropped_messages} message{'s' if self.dropped_messages != 1 else ''} after it" if self.dropped_messages else "drops nothing"
        keeps = f"keeps [{self.min_offset}, {self.logical_end}) and {drops} ({self._end()}); {self.mode} recovery scanning from {self.scan_from}"
        if self.links is not None:
            keeps += f"; {self.links}"
        if self.blank_at is not None:
            keeps += f"; then DLedger's first load writes an end-of-file blank at {self.blank_at}"
        if self.stall is not None:
            keeps += f"; but {self.stall}"
        return f"{refuses}; with that file fixed, it {keeps}" if self.refused else f"the broker's next start {keeps}"

    @classmethod
    def of_plan(cls, plan) -> "NextStart | None":
        """The figures of a ``recover`` plan (``plan_recover``); None for one that is not the broker's recovery."""
        cl = plan.commitlog
        if plan.mode is None or cl is None:
            return None
        blank_at = next((int(os.path.basename(a.path)) + a.start for a in plan.actions if a.op == "write-blank"), None)
        return cls(plan.mode, cl.scan_from, cl.scan_rule, cl.min_offset, cl.valid_end, cl.end_reason, plan.lost.count if plan.lost else 0, plan.refused, blank_at)


def next_start(store: Store, walked: ScanEnd | None = None, walked_from: int | None = None) -> NextStart:
    """The broker's next start on ``store``; ``walked``: a walk with its checks from ``walked_from``. DLedger data: kept up to
    where ``DLedgerMmapFileStore.recover``'s entry walk stops (reference §15.4, ``dledgerstart``)."""
    cl, dl = store.commitlog, None
    why, wheel = log_refusals(store)  # a mixed store's commitlog/: DLedgerCommitLog.load (super.load()) runs before DLedger's load
    if store.recovers_dledger_data:
        from .dledgerstart import data_recovery, dledger_start

        dl = data_recovery(cl)
    if why is not None:
        return NextStart("refused", cl.min_offset, "", cl.min_offset, None, "", None, why, walk_end=None if dl is None else dl.end)
    blank = None
    if dl is not None:
        version = store.version if store.version is not None else list(candidate_groups(store))[0]  # the newest era left, the planners' one
        start, end, rules = dledger_start(store, dl, version), dl.end, VersionRules(version)
    else:
        from .summary import logical_end

        start, rules = start_of(store), store.rules  # a DLedger broker with no data file recovers the classic commit log
        if walked is not None and walked_from is not None and walked_from <= start.offset <= walked.offset and walked.reason != StopReason.BLANK_LAST:
            end = walked
        else:
            _, end = logical_end(store, start.offset)
        if store.is_dledger:  # no DLedger data file: the first load's blank after this recovery (a DLedger module)
            from .dledgerstart import first_load_blank

            blank = first_load_blank(store, rules, end.offset)  # rules: of the newest era left
    failure = blank.failure if blank is not None else None
    return NextStart("abnormal" if store.abort_present else "normal", start.offset, start.rule, cl.min_offset, end.offset, end.reason,
                     dropped_after(store, end.offset, rules), wheel or failure or later_refusal(store),
                     blank.offset if blank is not None and blank.writes else None, links=link_clauses(store))


class Cut(NamedTuple):
    """``end_before``'s answer: where the next start ends the log, and which eras' start does so ("": all of them)."""

    end: ScanEnd
    eras: str


def end_before(store: Store, offset: int, size: int) -> Cut | None:
    """``ends_before`` of the one span of ``size`` bytes at ``offset``."""
    return ends_before(store, [(offset, size)])[0]


def ends_before(store: Store, spans: list[tuple[int, int]]) -> list[Cut | None]:
    """For each ``(offset, size)``: the next start's end where it cuts off those bytes, else None (``getMessage`` maps nothing
    past it, §8.9); eras starting apart cut for any of them, naming them. DLedger: its entry walk's end (§15.4)."""
    if not spans:
        return []
    if store.recovers_dledger_data:
        from .dledgerstart import data_recovery

        end = data_recovery(store.commitlog).end
        return [Cut(end, "") if offset + size > end.offset else None for offset, size in spans]
    groups = {store.version: []} if store.version is not None else candidate_groups(store)
    starts = {c: recovery_start(store, VersionRules(c)).offset for c in groups}
    last, stop = max(offset for offset, _ in spans), max(offset + size for offset, size in spans)
    ends: dict[int, ScanEnd | None] = {}  # each start's walk end up to ``stop``; None: no end before it
    walked: tuple[int, ScanEnd] | None = None  # the last walk: its start and end
    for start in sorted(set(starts.values())):
        if start > last or (walked is not None and walked[1].reason == StopReason.LIMIT):
            ends[start] = None
        elif walked is not None and walked[1].offset >= start:
            ends[start] = ends[walked[0]]
        else:
            walked = (start, _walk_end(store, start, stop))
            ends[start] = None if walked[1].reason == StopReason.LIMIT else walked[1]
    cuts: list[Cut | None] = []
    for offset, size in spans:
        cutting = [c for c in groups if starts[c] <= offset and (e := ends[starts[c]]) is not None and e.offset < offset + size]
        eras = "" if len(cutting) == len(groups) else eras_label([e for c in cutting for e in groups[c]])
        cuts.append(Cut(ends[starts[cutting[0]]], eras) if cutting else None)
    return cuts


def _walk_end(store: Store, start: int, stop: int) -> ScanEnd:
    """``summary.logical_end``'s end from ``start`` up to ``stop``, each stretch walked once per Store."""
    from .summary import logical_end

    upto, end = store.walked_ends.get(start, (None, None))
    if end is not None and end.reason != StopReason.LIMIT:
        return end if end.offset < stop else ScanEnd(stop, StopReason.LIMIT)
    if upto is None or stop > upto:
        end = logical_end(store, start, stop=stop)[1]
        store.walked_ends[start] = (stop, end)
        return end
    return ScanEnd(stop, StopReason.LIMIT)


RECOVER_FIXES = ", which `mqtool recover` fixes"  # a consume queue file's way out (``queue_refusal``)


def log_refusals(store: Store) -> tuple[str | None, str | None]:
    """(``log_refusal``, None), or with a ``wheel_refusal`` what follows once the wheel is resized."""
    why = log_refusal(store)
    if why is None or why != wheel_refusal(store):
        return why, None
    then = f"{why}; then, once `repair` has resized the wheel, it refuses to start: "
    if (after := log_refusal(store, wheel=False)) is not None:
        return then + after, None
    # a queue file: `recover` refuses while the wheel is wrong, and the repair that resizes it rewrites the queue too
    return None, why if (later := later_refusal(store, ", which that `repair` fixes too")) is None else then + later


def deleted_link(store: Store) -> str | None:
    """The first dangling symlink 5.1.3+ ``MappedFileQueue.load`` deletes (rules §2.13), and how many more; or None."""
    from .timer import timer_eras

    eras = store.version_guess.eras
    queues = [(e, q.file_size, q.after(e)) for q in (*store.consume_queues, *store.batch_consume_queues) for e in q.strays]
    loads = [(eras, [(p.entry, p.expected, p.later) for p in store.problems if p.kind == STRAY_ENTRY]), (eras, queues),
             (timer_eras(eras), store.timer_log_listing.strays if store.timer_log_listing is not None else [])]
    deleted = [(entry, deleting) for loading, strays in loads for entry, size, later in strays
               if entry.unmounted and (deleting := stray_effects(loading, entry, size, later).get(DELETED))]
    if not deleted:
        return None
    entry, deleting = deleted[0]
    who = which_do(deleting, eras)
    where = entry.path.relative_to(store.root) if store.root is not None else entry.path.name
    more = f", and {len(deleted) - 1} more such link{'s' if len(deleted) > 2 else ''}" if len(deleted) > 1 else ""
    return f"its load deletes {where}, {entry.what}, whose data is then lost to it{who}{more}"


def created_link(store: Store) -> StrayEntry | None:
    """The first dangling symlink of index/ whose target ``IndexService.load`` creates, or None (``recover`` refuses)."""
    return next((e for e, _, _ in store.index_strays if e.offset is not None and e.created is not None), None)


def link_clauses(store: Store) -> str | None:
    """The clauses of the dangling symlinks the start's loads delete (``deleted_link``) or create the target of (``created_link``)."""
    entry = created_link(store)
    created = None if entry is None else (
        f"its load creates the target of {entry.path.relative_to(store.root)}, {entry.what}, as an empty index file")
    return "; ".join(c for c in (deleted_link(store), created) if c) or None


def start_of(store: Store) -> ScanStart | None:
    """Where the next start scans from (``startfile.recovery_start``; None for DLedger): the newest era's, with the others'."""
    if store.recovers_dledger_data:
        return None
    if store.version is not None:
        return recovery_start(store, VersionRules(store.version))
    candidates = list(candidate_groups(store))  # one per set of variants of the rules that can change its plan, newest first
    starts = [recovery_start(store, VersionRules(c)) for c in candidates]
    others = sorted({s.offset for s in starts[1:]} - {starts[0].offset})
    if not others:
        return starts[0]
    rule = f"{starts[0].rule}, as {candidates[0]} starts (older eras left start at {', '.join(map(str, others))}: --broker-version decides)"
    return starts[0]._replace(rule=rule)


def scan_start_offset(store: Store) -> int:
    """The offset the next start scans from (``start_of``); the first offset without a store or for DLedger."""
    start = start_of(store) if store.root is not None else None
    return store.commitlog.min_offset if start is None else start.offset


def dropped_after(store: Store, offset: int, rules: VersionRules) -> int:
    """Valid records from ``offset`` to the log's end (``pastend.records_after``), without that walk over zeros alone."""
    if only_zeros_after(store.commitlog, offset):
        return 0
    from .pastend import records_after  # compiled code: only where something lies after the end

    return records_after(store.commitlog, offset, limit=0, legacy=rules.legacy_properties, accept_v2=rules.accepts_v2_magic).records


def only_zeros_after(commitlog: CommitLog, offset: int) -> bool:
    """Whether every byte from ``offset`` to the log's end is zero, read by ``pread`` (no resident pages), holes skipped."""
    for _, seg, pos in commitlog.segments_from(offset):
        fd = open_read_only(seg.path)
        try:
            size = os.fstat(fd).st_size
            while pos < size:
                try:
                    pos = os.lseek(fd, pos, os.SEEK_DATA)
                except OSError:  # ENXIO: nothing but a hole up to the end
                    break
                chunk = os.pread(fd, min(len(ZERO_CHUNK), size - pos), pos)
                if not chunk:
                    break
                if chunk != ZERO_CHUNK[: len(chunk)]:
                    return False
                pos += len(chunk)
        finally:
            os.close(fd)
    return True


def log_refusal(store: Store, wheel: bool = True) -> str | None:
    """Why the broker refuses to start on the commit log (rules §2.13), by era, or None; ``open_refusal`` first."""
    if (why := open_refusal(store, wheel)) is not None:
        return why
    for problem in store.problems:
        if problem.kind == STRAY_ENTRY:
            if (why := stray_refusal(store, problem.entry, problem.expected, problem.later)) is not None:
                return why
            continue
        who = refused_by(store, problem.kind == EMPTY_LAST_SEGMENT and problem.entry is None)  # entry: one after it, so no last entry
        if who is not None:
            what = {
                EMPTY_LAST_SEGMENT: f"a zero-length last commit log file{empty_not_last(problem.entry, store.version_guess.eras)}",
                SEGMENT_SIZE: f"{problem.found} bytes, not {problem.expected} like the other segments",
            }.get(problem.kind, f"its name is not a multiple of the segment size ({problem.kind})")
            return f"{problem.path.name}: {what}{who}"
    return None


# the config files ``BrokerController.initialize`` loads before the store's (``ConfigManager.load``; rules §7), with the first
# era that does (4.1.0+ ``ConsumerFilterManager``); ``delayOffset.json`` (``ScheduleMessageService.load``) loads first in
# ``DefaultMessageStore.load`` up to 4.9.1, after the recovery from ``DELAY_LOADED_LATE`` (4.9.2) on (``later_refusal``)
LOADED_FIRST = (("topics.json", "E0"), ("consumerOffset.json", "E0"), ("subscriptionGroup.json", "E0"), ("consumerFilter.json", "E2"))
DELAY_LOADED_LATE = "E11"
# the single files the broker opens before it loads the commit log: the first era that does, and what opens it
OPENED_FIRST = (("lock", "E3a", "DefaultMessageStore's constructor"), ("config/timercheck", "E13", "TimerCheckpoint"),
                ("timerwheel", "E13", "TimerWheel"))
MAPPED = ("checkpoint", "config/timercheck", "timerwheel")  # the files of those (and the checkpoint) the broker maps


def unusable(path: Path, name: str) -> tuple[str, str, str] | None:
    """(what, open or map, what throws) where ``RandomAccessFile(path, "rw")`` (or a map: ``MAPPED``) fails, else None."""
    what = not_a_file(path)
    if what in (A_DIRECTORY, A_SOCKET):
        return what, "open", "new RandomAccessFile(file, \"rw\") throws" + (" ENXIO" if what == A_SOCKET else "")
    if what == A_SPECIAL and name in MAPPED:
        return what, "map", "FileChannel.map throws"
    return None


def open_refusal(store: Store, wheel: bool = True) -> str | None:
    """Why the broker refuses to start before it loads the commit log (rules 6.4, 8.1), by era, or None."""
    if store.root is None:
        return None
    eras = store.version_guess.eras
    for name, _ in LOADED_FIRST:  # BrokerController.initialize's first loads (3.2.6-5.3.3), in its order: before the store's
        if (loading := loading_eras(store, name)) and (fifo := store.load_config(name).fifo) is not None:
            return f"{fifo}: {A_FIFO}, so ConfigManager.load never returns and BrokerController.initialize hangs"
        if (why := config_refusal(store, name, loading)) is not None:
            return why
    if (opened := opened_first_refusal(store)) is not None:
        return opened[1]
    if wheel and (why := wheel_refusal(store)) is not None:
        return why
    return config_refusal(store, "delayOffset.json", [e for e in eras if e.index < ERA_INDEX[DELAY_LOADED_LATE]])


def opened_first_refusal(store: Store) -> tuple[str, str] | None:
    """(file, why) for the first file of ``OPENED_FIRST`` that a release of the store's opens and cannot use, or None."""
    eras = store.version_guess.eras
    for name, first, opener in OPENED_FIRST:
        refusing = [e for e in eras if e.index >= ERA_INDEX[first]]
        if refusing and (found := unusable(store.path(name), name)) is not None:
            who = which_do(refusing, eras)
            return name, f"{name}: {found[0]}, which {opener} cannot {found[1]} ({found[2]}), so BrokerController.initialize fails{who}"
    return None


def wheel_refusal(store: Store) -> str | None:
    """Why a 5.x broker refuses to start on a wrong-size ``timerwheel`` (reference §9; ``repair`` resizes it), or None."""
    from .timer import timer_eras

    eras, wheel = store.version_guess.eras, store.path("timerwheel")
    refusing = timer_eras(eras)
    if not refusing or not wheel.is_file() or (size := wheel.stat().st_size) in (0, tfmt.WHEEL_FILE_SIZE):
        return None
    who = which_do(refusing, eras)
    return (f"timerwheel: {size} bytes, not {tfmt.WHEEL_FILE_SIZE}, on which TimerWheel's constructor throws, "
            f"so BrokerController.initialize fails{who}")


def config_refusal(store: Store, name: str, eras) -> str | None:
    """Why the broker refuses to start on config file ``name``, which ``eras`` (of the store's) load, or None (``bak_refusal``)."""
    if (found := bak_refusal(store, name, eras)) is None:
        return None
    return (f"config/{name}.bak: {found[0]}, where ConfigManager.loadBak falls back from config/{name} "
            f"({found[2]}), so it returns false and BrokerController.initialize fails{found[1]}")


def bak_refusal(store: Store, name: str, eras, without: frozenset[str] = frozenset()) -> tuple[str, str, str] | None:
    """(why, which eras, why passed over) the broker refuses to start on config ``name`` (rules 7.4), or None."""
    if store.root is None or not eras:
        return None
    by_chars = set(store.eras_where("reads_config_by_chars"))
    refusing = [e for e in eras if store.load_config(name, e in by_chars, without).bak_unusable is not None]
    if not refusing:
        return None
    loaded = store.load_config(name, refusing[-1] in by_chars, without)
    who = which_do(refusing, store.version_guess.eras)
    return loaded.bak_unusable, who, loaded.problems[f"config/{name}"]


def loading_eras(store: Store, name: str) -> list:
    """The store's eras whose broker loads config file ``name`` (``LOADED_FIRST``; ``timermetrics``: a timer store's)."""
    from .timer import timer_eras

    eras = store.version_guess.eras
    if name == "timermetrics":
        return timer_eras(eras)
    return [e for e in eras if e.index >= ERA_INDEX[dict(LOADED_FIRST).get(name, "E0")]]


def stray_refusal(store: Store, entry, file_size: int | None, later: bool, loader: str = MAPPED_FILE_QUEUE, eras=None) -> str | None:
    """Why the broker refuses to start on a folder entry that is no file of it (``load_effect``), or None."""
    eras = store.version_guess.eras if eras is None else eras
    if (who := which_do(stray_effects(eras, entry, file_size, later, loader).get(REFUSED, []), eras)) is None:
        return None
    where = entry.path.relative_to(store.root) if store.root is not None and entry.path.is_relative_to(store.root) else entry.path.name
    unmounted = f"; {unmounted_text(entry.path)}" if entry.unmounted else ""
    why = stray_refused_why(entry, file_size, loader).removeprefix(f"{loader}: ")  # the loader named once
    return f"{where}: {entry.what}, which {loader} lists: {why}{who}{unmounted}"


def first_stray_refusal(store: Store, strays, loader: str = MAPPED_FILE_QUEUE, eras=None) -> str | None:
    """``stray_refusal`` of the first of ``strays`` (as ``Store`` lists them) refused, with the way out, or None."""
    for entry, file_size, later in strays:
        if (why := stray_refusal(store, entry, file_size, later, loader, eras)) is not None:
            return why if entry.unmounted else why + "; `mqtool repair` moves it out"
    return None


def unmounted_file(store: Store) -> str | None:
    """The first dangling symlink of the store's files, with what to do, or None: no plan without its bytes."""
    timer = store.timer_log_listing.strays if store.timer_log_listing is not None else []
    strays = [p.entry for p in store.problems if p.kind == STRAY_ENTRY] + [e for q in (*store.consume_queues, *store.batch_consume_queues)
                                                                           for e in q.strays]
    entry = next((e for e in strays + [e for e, _, _ in timer + store.dledger_strays] if e.unmounted), None)
    return None if entry is None else f"{entry.path.relative_to(store.root) if store.root is not None else entry.path}: {entry.unmounted}"


def later_refusal(store: Store, queue_fix: str = RECOVER_FIXES, committed: bool = True) -> str | None:
    """Why the broker refuses to start after loading the commit log, in the order it meets them, or None."""
    return (first_stray_refusal(store, store.dledger_strays, MMAP_FILE_LIST) or queue_refusal(store, queue_fix) or checkpoint_refusal(store)
            or (committed_refusal(store) if committed else None) or (found[1] if (found := refusal_after_recovery(store)) else None)
            or abort_refusal(store))


def committed_refusal(store: Store) -> str | None:
    """Why the broker refuses to start on DLedger's ``committedIndex`` (``committed_read_failure``; @4.5.1, 4.9.2), or None."""
    if not store.recovers_dledger_data:
        return None
    from .dledgerstart import committed_read_failure, data_recovery

    dl = data_recovery(store.commitlog)
    if (found := committed_read_failure(store.commitlog, dl)) is None:
        return None
    eras = store.version_guess.eras
    if (who := which_do([e for e in eras if found[1] or VersionRules(e.representative).dledger_commit_reads_entry], eras)) is None:
        return None
    return (f"DLedger's checkpoint: committedIndex {dl.committed_index} is before entry {dl.first_walked}, where DLedger's recovery walk starts, and {found[0]}: "
            f"updateCommittedIndex throws, so DefaultMessageStore.load fails{who}{RECOVER_FIXES}")


def refusal_after_recovery(store: Store) -> tuple[str, str, str] | None:
    """(why after, refusal, what lifts it) of a refusal met after ``DefaultMessageStore.load``'s recovery, or None."""
    from .timer import timer_eras

    if (why := first_stray_refusal(store, store.index_strays, INDEX_SERVICE)) is not None:
        return "DefaultMessageStore.load fails on index/ only after it", why, "that entry of index/ is fixed"
    if (why := timer_refusal(store)) is not None:
        return "it loads timerlog/ after it", why, "that entry of timerlog/ is fixed"
    eras = store.version_guess.eras
    late = [e for e in eras if e.index >= ERA_INDEX[DELAY_LOADED_LATE]]
    for name, loading in (("timermetrics", timer_eras(eras)), ("delayOffset.json", late)):
        if (why := config_refusal(store, name, loading)) is not None:
            return f"it loads config/{name} after it", why, f"config/{name} or its .bak is fixed (`mqtool repair` moves the .bak out)"
    return None


def abort_refusal(store: Store) -> str | None:
    """Why 5.0.0+ exits after recovery on an ``abort`` directory, or hangs on a FIFO (rules 6.3), or None."""
    if store.abort is None or not store.abort.unusable:
        return None
    eras = store.version_guess.eras
    if (who := which_do([e for e in eras if e.index >= ERA_INDEX["E13"]], eras)) is None:
        return None
    if store.abort.special:
        return ("abort: a FIFO, socket or device node, which DefaultMessageStore.start's MixAll.string2File opens to read first (a FIFO's "
                f"open waits for a writer), so the broker hangs or exits after its abnormal recovery{who}; `mqtool repair` moves it out")
    return ("abort: a directory, into which DefaultMessageStore.start cannot write its PID (MixAll.string2File throws), so the broker "
            f"exits after its abnormal recovery{who}; `mqtool repair` moves it out")


def checkpoint_refusal(store: Store, way_out: str = "; `mqtool repair` moves it out") -> str | None:
    """Why the broker refuses to start on a ``checkpoint`` directory (reference §6, rules 6.1), or None."""
    if store.root is None or (found := unusable(store.path("checkpoint"), "checkpoint")) is None:
        return None
    return f"checkpoint: {found[0]}, which StoreCheckpoint cannot {found[1]} ({found[2]}), so DefaultMessageStore.load fails{way_out}"


def timer_refusal(store: Store) -> str | None:
    """Why a 5.x broker refuses to start on ``timerlog/``, with what fixes it (``TimerLogListing.fixed_by``); or None."""
    from .timer import timer_eras

    eras, listing = timer_eras(store.version_guess.eras), store.timer_log_listing
    if not eras or listing is None:
        return None
    why = wrong_length_refusal(store, listing.wrong_lengths, listing.file_size, listing.files, listing.entries, eras)
    if why is None:
        return first_stray_refusal(store, listing.strays, eras=eras)
    return why + listing.fixed_by


def wrong_length_refusal(store: Store, wrong_lengths, file_size: int | None, files, strays, eras=None) -> str | None:
    """Why the broker refuses to start on the first of ``wrong_lengths`` some era of ``eras`` refuses, or None."""
    for _, path, size, last in wrong_lengths:
        who = refused_by(store, size == 0 and last, eras)
        if who is not None:
            after = empty_not_last(stray_after(path, files, strays), eras or store.version_guess.eras) if size == 0 else ""
            return f"{path.relative_to(store.root)}: {size} bytes, not {file_size}{after}{who}"
    return None


def queue_refusal(store: Store, fix: str = RECOVER_FIXES) -> str | None:
    """Why the broker refuses to start on a consume queue file (rules §2.13; ``cq-file-size``), or None."""
    if (why := first_stray_refusal(store, store.topic_strays, LOAD_CONSUME_QUEUE)) is not None:
        return why
    for queues, fix in ((store.consume_queues, fix), (store.batch_consume_queues, "")):
        for queue in queues:
            if (why := wrong_length_refusal(store, queue.wrong_lengths, queue.file_size, queue.files, queue.strays)) is not None:
                return why + fix
            if (why := first_stray_refusal(store, [(e, queue.file_size, queue.after(e)) for e in queue.strays])) is not None:
                return why
    return None


def refused_by(store: Store, empty_last: bool, eras=None) -> str | None:
    """Which of ``eras`` refuse a wrong-length file (``empty_last``: a zero-length last one): None, "" for all, or which."""
    eras = store.version_guess.eras if eras is None else eras
    return which_do(refusing_eras(eras, empty_last), eras)


def which_do(some, eras) -> str | None:
    """"" where ``some`` are all of ``eras``, else `` (as E8-E12 (4.7.1-4.9.8) brokers do)``; None for none."""
    return None if not some else "" if len(some) == len(eras) else f" (as {eras_label(some)} brokers do)"


def refusing_eras(eras, empty_last: bool) -> list:
    """The eras of ``eras`` whose ``MappedFileQueue.load`` refuses a wrong-length file (``empty_last``; rules §2.13)."""
    rules = [(e, VersionRules(e.representative)) for e in eras]
    return [e for e, r in rules if (r.zero_length_last_file_refused if empty_last else not r.wrong_length_file_ignored)]
