"""``repair``: the broker's recovery, then the fixes the broker never makes (issue #11 §5; docs/recovery.md). In order: file-level
fixes the broker cannot load past (``MappedFileQueue.load``), the broker's recovery (``plan_recover``), then steps planned from
``verify``'s findings on the recovered store. Nothing here writes."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import operator
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from .. import activity
from ..formats import checkpoint as cpfmt, config as cfgfmt, consumequeue as cqfmt, timer as tfmt
from ..formats.dispatch import dispatch_request
from ..errors import BadInput, Refused
from ..fileops import A_DIRECTORY, A_SOCKET, A_SPECIAL, not_a_file
from ..formats.errors import CorruptRecord
from ..store import Store
from ..store.store import A_SOCKET_CONFIG, NOT_A_FILE, SEGMENT_NAME, SEGMENT_SIZE, STRAY_ENTRY, abort_unwritable, empty_not_last
from ..store.store import A_FIFO, MISSING, load_config, stray_differs, stray_effects
from ..store.lookup import QueueRange
from ..store.consumequeue import discover_queues, infer_queue_file_size, queue_id_of, topic_strays
from ..store.index import index_strays
from ..store.mappedfile import CREATED, INDEX_SERVICE, LOAD_CONSUME_QUEUE, OFFSET_NAME, MappedFile, folder_entries, inferred_file_size, stray_after
from ..store.commitlog import ScanEnd
from ..store.nextstart import ERA_INDEX, OPENED_FIRST, dropped_after, refused_by, unusable
from ..store.startfile import ScanStart, recovery_start
from ..store.summary import logical_end
from ..store.rules import ERAS
from ..store.version import eras_label
from ..store.timer import RecoveredWheel, TimerLog, TimerLogEnd, TimerLogListing, TimerStore, chain_break, cut_at, recovered_wheel
from ..verify import CHECKS, CROSS_CHECKS, Finding, Severity, Verification, VerifyOptions
from ..verify.consumequeue import MissingRun, entries_missing, entry_mismatch
from ..verify.lmq import Dispatched, adjacent_runs, lmq_queue_dirs
from ..verify.state import checkpoint_ahead_findings, config_file_findings, consumer_offset_findings
from .plans import Action, CheckpointPlan, Expected, Plan, PlanOptions, QueuePlan, _from_json_value, _to_json_value
from .planners import plan_rebuild_cq, plan_rebuild_index  # under every candidate version, as the commands plan
from ..store.walkedchain import WalkedChain

# Commit log findings that name bytes which are gone: no repair brings the records back.
LOST_KINDS = frozenset({"crc-mismatch", "property-crc-mismatch", "phys-offset-mismatch", "damaged-range", "segment-gap", "half-message", "blank-size",
                        "data-after-end", "dledger-record"})
CQ_KINDS = frozenset({"cq-file-gap", "cq-file-size", "cq-invalid-unit", "cq-entry-mismatch", "cq-entry-dangling", "cq-entry-beyond-end", "cq-entry-missing",
                      "cq-filler-tail"})
INDEX_KINDS = frozenset({"index-header", "index-chain", "index-entry-mismatch", "index-entry-dangling", "index-entry-beyond-end", "index-keys-missing",
                         "index-file-size", "index-file-dropped"})
CHECKPOINT_KINDS = frozenset({"checkpoint-missing", "checkpoint-size", "checkpoint-ahead", "checkpoint-empty"})
# Findings of a file or entry the file fixes change (``plan_file_fixes``): gone once they are applied.
FILE_FIX_KINDS = frozenset({SEGMENT_SIZE, SEGMENT_NAME, STRAY_ENTRY, "cq-stray-entry", "cq-topic-stray-entry", "index-stray-entry",
                            "dledger-stray-entry", "timer-stray-entry", "timer-file-size", "not-a-file", "config-unreadable"})


@dataclass(frozen=True)
class RepairStep:
    """One step of ``repair``; ``paths``: what it changes (empty: decided by its plan)."""

    step: str
    beyond_broker: bool
    why: str
    paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class RepairPlan:
    """What ``repair`` will do: ``files`` and ``recover`` exact, later steps ``predicted``; ``remaining``: lost data."""

    store: str
    created_ms: int
    steps: tuple[RepairStep, ...]
    files: Plan | None
    recover: Plan | None
    recover_error: str | None  # why the recovery cannot be planned before the file fixes
    remaining: tuple[Expected, ...]
    notes: tuple[str, ...]
    predicted: bool = True
    command: str = "repair"

    @property
    def is_empty(self) -> bool:
        return not self.steps

    def to_dict(self) -> dict[str, Any]:
        return {**_to_json_value(self), "is_empty": self.is_empty}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "RepairPlan":
        return _from_json_value(cls, doc)


# ---- 1. file-level fixes ----------------------------------------------------------------------


def config_readings(store: Store | None) -> set[bool]:
    """How the releases ``store`` is left from read a config file (``Store.load_config``'s ``by_chars``); 4.1.0+'s without one."""
    return {False} if store is None else {e in store.eras_where("reads_config_by_chars") for e in store.version_guess.eras}


def plan_file_fixes(root: Path, store: Store | None = None, timer_log_file_size: int | None = None,
                    readings: set[bool] | None = None) -> tuple[list[RepairStep], Plan | None]:
    """Stray and wrong-length files the broker refuses, from the directory listings alone (rules §2.13)."""
    root = Path(root)
    steps: list[RepairStep] = []
    actions: list[Action] = []

    def fix(step: str, why: str, *done: Action) -> None:
        steps.append(RepairStep(step, True, why, tuple(dict.fromkeys(a.path for a in done))))
        actions.extend(done)

    def quarantine(path: Path, why: str) -> None:
        fix("quarantine", why, Action("quarantine", os.path.relpath(path, root), note=why))

    def resize(rel: str, size: int, expected: int, why: str, *then: Action) -> None:
        fix("resize-segment", why, Action("resize", rel, start=size, end=expected, note=why), *then)

    def pad_blank(rel: str, size: int, blank: int, expected: int, why: str) -> None:
        fix("resize-segment", why, Action("pad-blank", rel, start=blank, end=expected, note=f"{size} bytes: an end-of-file blank at {blank}, zeros to {expected}"))

    def end_segment(rel: str, path: Path, base: int, size: int, expected: int) -> bool:
        cut = _cut_segment_end(root, path, base, size, expected)
        if cut is None:
            return False
        pad_blank(rel, size, cut.blank, expected, cut.why(rel, size, expected))
        if cut.entries:
            fix("drop-queue-entries", cut.dropped_why(rel), *(Action(op, path, start=a, end=b, note=QUEUE_CUT_NOTES[op], unit=cqfmt.filler_at(cut.base)
                                                                     if op == "fill-units" else None) for path, a, b, op in cut.unit_ranges))
        return True

    _queue_file_fixes(root, root / "commitlog", "segment", "commit log segment", store, quarantine, resize, alone=_size_from_name, cut_before_last=end_segment)

    def end_timer_file(rel: str, path: Path, base: int, size: int, expected: int) -> bool:
        blank = _timer_log_blank(path, base, expected)
        if blank is None:
            return False
        why = (f"{size} bytes, not {expected}: the broker refuses to load a short timer log file; padded, with an end-of-file blank at "
               f"{blank} (the unit the cut crosses), so the broker's timer recovery goes on into the next file as at any file's end "
               f"(padded with zeros only, it would stop there and delete every later file); lost: the units from byte {blank} of {rel}")
        pad_blank(rel, size, blank, expected, why)
        tails.append((base + blank, base + expected))
        return True

    def end_last_timer_file(rel: str, path: Path, base: int, size: int, expected: int) -> bool:
        """The last timer log file cut inside a unit (``timer.cut_at``): zeros from that unit's start, not from the cut."""
        torn = cut_at(path)
        if torn is None or torn >= size:
            return False
        resize(rel, size, expected, f"{size} bytes, not {expected}: the broker refuses to load a short timer log file; cut inside the "
               f"unit at byte {torn}: padded with zeros from there, where the broker's timer recovery then ends, and reviseQueueOffset "
               f"resumes the rmq_sys_wheel_timer queue after the last whole unit's message, enqueuing the cut units' messages again "
               f"(padded from the cut, the torn unit would read as valid, magic 0 passing isMagicOK, and name no message); lost: the "
               f"units from byte {torn} of {rel}", Action("zero-range", rel, start=torn, end=size, note="the start of the unit the cut crosses"))
        return True

    listing = TimerLogListing.of(root / "timerlog", store.config.timer_log_file_size if store is not None else timer_log_file_size)
    if listing.size_from == "default" and listing.wrong_lengths:  # a size guessed from a cut: never written without broker.conf's
        cut = listing.wrong_lengths[0]
        raise Refused(f"{cut[1].relative_to(root)}: {cut[2]} bytes, cut (its bytes show it), and no broker config gives the timer log's "
                      f"file size (mappedFileSizeTimerLog; its default {listing.file_size} holds only where broker.conf leaves it out): "
                      "pass --broker-config with the broker's broker.conf")
    tails: list[tuple[int, int]] = []  # the cut tails of timer log files before the last, ended with a blank
    _queue_file_fixes(root, root / "timerlog", "timer log file", "timer log file", store, quarantine, resize, alone=_size_from_name,
                      cut_before_last=end_timer_file, cut_last=end_last_timer_file, known_size=listing.file_size)  # MappedFileQueue.load

    def clear_slots(slots: list[int], where: str, why: str) -> None:
        if not slots:
            return
        listed = ", ".join(map(str, slots[:8])) + (" ..." if len(slots) > 8 else "")
        fix("clear-wheel-slots", f"{len(slots)} wheel slot(s) whose units were all in {where} (slots {listed}): cleared, as "
            f"TimerMessageStore.recover leaves them naming {why}", *(Action("zero-range", "timerwheel", start=a * tfmt.SLOT_SIZE,
            end=(b + 1) * tfmt.SLOT_SIZE, note="slots of cut units") for a, b in adjacent_runs(slots)))  # one range per run of adjacent slots

    if (walked := _walked_timer(root, listing)) is not None:
        cut_slots, tail_slots = _cut_wheel_slots(listing, walked), _tail_wheel_slots(tails, walked)
        damage = walked.end.offset if not walked.end.clean else None
        clear_slots(cut_slots, "the cut timer log tail" if damage is None else f"the timer log after its damage at {damage}",
                    "positions past the log's end, where the broker's next "
                    "units go, each then naming itself as the previous unit of its slot (doEnqueue), so that slot's dequeue never ends")
        clear_slots(tail_slots, "the cut tail of a timer log file before the last", "its blank or zeros, whose "
                    "prevPos 0 the slot's dequeue follows back to unit 0, delivering its message again; their own messages are lost")
        relinks = _relinked_slots(listing, set(cut_slots + tail_slots), walked)
        if relinks:
            listed = ", ".join(str(slot) for slot, _ in relinks[:8]) + (" ..." if len(relinks) > 8 else "")
            fix("relink-wheel-slots", f"{len(relinks)} wheel slot(s) whose chain of units runs through lost units (slots {listed}): relinked "
                "over them as the broker would have linked the units left had the lost ones never been written (lastPos and firstPos: the "
                "last and first unit left of the slot; the prevPos of each unit: the one of its time before it); TimerMessageStore.recover "
                "leaves them naming the blank or zeros there, whose prevPos 0 their dequeue follows back to unit 0, never reaching their "
                "earlier units", *(a for _, writes in relinks for a in writes))
    # DLedger's MmapFileList.load refuses a file of the wrong length, a zero-length last one too (store None: every era)
    for folder, alone in (("data", _size_from_name), ("index", _dledger_index_size)):
        for queue_dir in sorted(root.glob(f"dledger-*/{folder}")):
            _queue_file_fixes(root, queue_dir, f"DLedger {folder} file", f"DLedger {folder} file", None, quarantine, resize, alone=alone)
    _wheel_fix(root, resize)
    _index_strays(root, store, quarantine)
    for name, what, why in _unusable_files(root):
        quarantine(root / name, f"{what}, not the {name} file: {why}; moved into the backup as it is")
    readings = readings or config_readings(store)
    moved = (None, NOT_A_FILE, A_SOCKET_CONFIG, A_FIFO)  # a directory, socket or FIFO: ``_unusable_files``' quarantine
    for name in cfgfmt.CONFIG_FILES:  # ``nextstart.bak_refusal``: a .bak that is there, read, but undecodable (by a release left)
        unusable = (load_config(root, name, by_chars=by_chars).bak_unusable for by_chars in sorted(readings))
        if (why := next((why for why in unusable if why not in moved), None)) is not None:
            quarantine(root / "config" / f"{name}.bak", f"{why}, and config/{name} is passed over too: ConfigManager.loadBak throws on "
                       "it and returns false, so the broker refuses to start; moved into the backup as it is, the broker then reads "
                       "no .bak, loadBak returns true and it starts with an empty table")
    _topic_strays(root, store, quarantine)
    for topic in _files(root / "consumequeue", dirs=True):
        for queue in _files(Path(topic.path), dirs=True):
            if queue_id_of(queue.name) is None:  # loadConsumeQueue's Integer.parseInt throws: 4.0.0+ pass over it (``_topic_strays``)
                continue
            _stray_links_and_dirs(root, Path(queue.path), "consume queue file", store, quarantine)
            for entry in _files(Path(queue.path)):
                if not OFFSET_NAME.match(entry.name):
                    quarantine(entry, "not a consume queue file: MappedFileQueue.load parses every file name as an offset and the broker fails to start")
    return steps, Plan.new("repair", root, "unknown", "not needed for file fixes", actions) if actions else None


def _unusable_files(root: Path) -> Iterator[tuple[str, str, str]]:
    """``(name, what, broker's reaction)`` of each file the broker opens by name and cannot use (``nextstart.unusable``)."""
    if (found := unusable(root / "checkpoint", "checkpoint")) is not None:
        yield "checkpoint", found[0], f"StoreCheckpoint cannot {found[1]} it and DefaultMessageStore.load fails (every release)"
    what = not_a_file(root / "abort")
    if what == A_DIRECTORY or abort_unwritable(root / "abort", what):  # File.exists(): an abnormal recovery after (``abort_quarantined``)
        then = {A_DIRECTORY: "cannot write the PID into it and exit",
                A_SOCKET: "cannot open it to read before writing the PID (a socket's open throws ENXIO) and exit"}
        yield ("abort", what if what != A_SPECIAL else "a FIFO", "File.exists() finds it, so the broker's recovery is abnormal; "
               "5.0.0+ then " + then.get(what, "opens it to read before writing the PID, which on a FIFO waits for a writer"))
    for name, first, opener in OPENED_FIRST:
        if (found := unusable(root / name, name)) is not None:
            refusing = eras_label(e for e in ERAS if e.index >= ERA_INDEX[first])
            yield name, found[0], f"{opener} cannot {found[1]} it and BrokerController.initialize fails ({refusing} brokers)"
    for name in (n + bak for n in cfgfmt.CONFIG_FILES for bak in ("", ".bak")):
        if (what := not_a_file(root / "config" / name)) in (A_DIRECTORY, A_SOCKET):  # a socket: its open throws (ENXIO), as a directory's
            yield f"config/{name}", what, ("ConfigManager cannot read it (the broker loads the .bak instead, or refuses to "
                                           "start) nor persist the table")
        elif what == A_SPECIAL and stat.S_ISFIFO((root / "config" / name).stat().st_mode):  # ``store.A_FIFO``
            yield f"config/{name}", "a FIFO", ("the broker's FileInputStream or FileOutputStream waits in its open for a writer or a "
                                               "reader: its start hangs in ConfigManager.load, or a persist that writes the .bak")
        elif what == A_SPECIAL:  # ``store.A_DEVICE_CONFIG``
            yield f"config/{name}", "a device node", ("MixAll.file2String reads it as empty (the broker loads the .bak instead, or an "
                                                      "empty table), and a persist writes into the device (5.1.0+ in place: the table is "
                                                      "lost at the next start)")


def abort_quarantined(files: Plan | None) -> bool:
    """Whether the file fixes move out a directory named ``abort``: the recovery stays abnormal (``_unusable_files``)."""
    return files is not None and any(a.op == "quarantine" and a.path == "abort" for a in files.actions)


def _wheel_fix(root: Path, resize) -> None:
    """A ``timerwheel`` of a length ``TimerWheel`` refuses (reference §9): padded with empty slots or trimmed."""
    wheel = root / "timerwheel"
    if not wheel.is_file():
        return
    size, expected = wheel.stat().st_size, tfmt.WHEEL_FILE_SIZE
    if size == expected:
        return
    resize("timerwheel", size, expected, f"{size} bytes, not {expected}: TimerWheel refuses to start on it; "
                                         + (f"padded with empty slots (the slots after byte {size} are lost)" if size < expected else f"{size - expected} bytes after its last slot trimmed"))


def _size_from_name(path: Path, size: int) -> int:
    """A lone mapped file's size: its own, unless it does not divide the name; then the largest power of two that does."""
    base = int(path.name)
    return base & -base if base and base % size else size


def _size_dividing_names(bases: list[int], inferred: int, smallest: int) -> int:
    """``inferred``, or the largest power of two dividing every name where it does not (``_size_from_name``)."""
    named = functools.reduce(operator.or_, bases, 0)
    power = named & -named
    return power if named and any(b % inferred for b in bases) and 2 * power > smallest else inferred


def _dledger_index_size(path: Path, size: int) -> int:
    """A lone DLedger index file's size: its own if whole units, else a power of two or DLedger's default."""
    from ..formats import dledger as dfmt
    from ..store.dledger import DLEDGER_INDEX_FILE_SIZE  # only for a DLedger store

    if size % dfmt.INDEX_UNIT_SIZE == 0:
        return size
    power = 1 << (size.bit_length() - 1)
    if power < dfmt.INDEX_UNIT_SIZE:  # shorter than one unit: no unit to look at
        return DLEDGER_INDEX_FILE_SIZE
    with open(path, "rb") as f:
        f.seek(power - dfmt.INDEX_UNIT_SIZE)
        last = f.read(dfmt.INDEX_UNIT_SIZE)
    return power if not any(last) else DLEDGER_INDEX_FILE_SIZE


def _stray_links_and_dirs(root: Path, directory: Path, what: str, store: Store | None, quarantine) -> tuple[list, list]:
    """Quarantine each directory or symlink in a mapped file queue folder the broker of some era refuses or loads otherwise
    (``mappedfile.load_effect``, rules §2.13); a dangling symlink file is refused (exit 4). Returns ``folder_entries``."""
    if not directory.is_dir():
        return [], []
    files, listed = folder_entries(directory)  # one listing
    if (unmounted := next((e for e in listed if e.unmounted), None)) is not None:
        raise Refused(f"{os.path.relpath(unmounted.path, root)}: {unmounted.unmounted}")
    strays = [e for e in listed if e.is_dir or e.path.is_symlink()]
    if not strays:
        return files, listed
    sizes = [size for _, p in files if (size := p.stat().st_size)]
    size = inferred_file_size(sizes) if sizes else None
    names = [p.name for _, p in files]
    for entry in strays:
        if store is not None and not stray_differs(stray_effects(store.version_guess.eras, entry, size, any(n > entry.path.name for n in names))):
            continue
        quarantine(entry.path, f"{entry.what}, not a {what}: MappedFileQueue.load lists every entry of {directory.name}/ (before 5.1.0 a directory "
                               "too) and refuses to start on one of another length than its files, or parses its name as an offset; moved into the backup as it is")
    return files, listed


def _index_strays(root: Path, store: Store | None, quarantine) -> None:
    """Quarantine each entry of ``index/`` that ``IndexService.load`` cannot map where some era refuses to start on it or leaves
    later index files out (``mappedfile.load_effect``); a name ``Long.parseLong`` rejects is skipped by every release."""
    eras = store.version_guess.eras if store is not None else ERAS
    for entry, file_size, later in index_strays(root / "index"):
        effects = stray_effects(eras, entry, file_size, later, INDEX_SERVICE)
        creator = f" ({entry.creator})" if entry.creator is not None else ""
        if CREATED in effects:
            quarantine(entry.path, f"{entry.what}, not an index file: IndexService.load creates the file it points to{creator} and loads it as "
                                   "an empty index file (the last one takes new index entries); moved into the backup as it is")
        elif stray_differs(effects):
            quarantine(entry.path, f"{entry.what}, not an index file: IndexService.load cannot map it{creator} and stops there (5.1.0+ refuse "
                                   "to start, earlier releases leave the later index files out); moved into the backup as it is")


def _topic_strays(root: Path, store: Store | None, quarantine) -> None:
    """Quarantine topic folder entries named by no queue id where 3.2.6's ``loadConsumeQueue`` throws on them."""
    eras = store.version_guess.eras if store is not None else ERAS
    for entry in topic_strays(root / "consumequeue"):
        if stray_differs(stray_effects(eras, entry, None, False, LOAD_CONSUME_QUEUE)):
            quarantine(entry.path, f"{entry.what}, not a queue: 3.2.6's DefaultMessageStore.loadConsumeQueue parses the name of every entry of "
                                   f"{entry.path.parent.name}/ as a queue id (Integer.parseInt) and the broker fails to start; moved into the backup "
                                   "as it is")


def _queue_file_fixes(root: Path, directory: Path, noun: str, what: str, store: Store | None, quarantine, resize,
                      alone: Callable[[Path, int], int], cut_before_last: Callable[[str, Path, int, int, int], bool] | None = None,
                      cut_last: Callable[[str, Path, int, int, int], bool] | None = None, known_size: int | None = None) -> None:
    """``plan_file_fixes`` of one mapped file queue (``MappedFileQueue.load``). ``known_size``, else ``alone`` (a lone file's
    size) or the most common; ``cut_before_last``/``cut_last`` plan a short file's fix or return False for zero padding."""
    files, strays = _stray_links_and_dirs(root, directory, what, store, quarantine)
    segments = []
    for entry in _files(directory, linked_files=True):
        if OFFSET_NAME.match(entry.name):
            segments.append((int(entry.name), entry, entry.stat().st_size))
        elif not entry.is_symlink():  # a misnamed symlink: ``_stray_links_and_dirs``'
            quarantine(entry, f"not a {what}: MappedFileQueue.load parses every file name in {directory.name}/ as an offset and the broker fails to start")
    sizes = [s for _, _, s in segments if s > 0]
    expected = known_size  # None: no file tells the size, only zero-length files, each handled below without it
    if sizes and expected is None:
        lone = [Path(e.path) for _, e, size in segments if size > 0]
        expected = alone(lone[0], sizes[0]) if len(sizes) == 1 else _size_dividing_names([b for b, _, _ in segments], inferred_file_size(sizes), min(sizes))
    last = max((b for b, _, _ in segments), default=None)
    for base, path, size in sorted(segments):
        rel = os.path.relpath(path, root)
        if size == expected:
            continue
        after = stray_after(Path(path), files, strays) if size == 0 and base == last and store is not None else None  # not deleted (5.1.3+)
        if after is not None:
            if (who := refused_by(store, False)) is not None:
                why = empty_not_last(after, store.version_guess.eras)
                quarantine(path, f"a zero-length last {noun}{why}: the broker refuses to start on it{who} (MappedFileQueue.load: "
                                 "\"length not matched\"); it holds nothing")
        elif size == 0 and base == last:
            if store is None or store.eras_where("zero_length_last_file_refused"):
                which = "the broker refuses" if store is None else "4.5.0-4.9.1 and 4.9.3-5.1.2 brokers refuse"
                quarantine(path, f"a zero-length last {noun}: {which} to start on it (MappedFileQueue.load: \"length not matched\"); it holds nothing")
        elif size == 0:
            quarantine(path, f"a zero-length {noun} before the last: the broker refuses to load it (MappedFileQueue.load); it holds nothing, "
                             f"and padded with zeros it would read as the end of the written data, so the broker's recovery would drop the files after it")
        elif base % expected:
            quarantine(path, f"its name is not a multiple of the segment size {expected}: the broker cannot place it")
        elif size > expected:
            resize(rel, size, expected, f"{size} bytes, not {expected}: {size - expected} bytes appended after the {noun}'s end; trimmed (the broker refuses to load it)")
        elif (cut := cut_last if base == last else cut_before_last) is None or not cut(rel, Path(path), base, size, expected):
            resize(rel, size, expected, f"{size} bytes, not {expected}: the broker refuses to load a short {noun}; padded with zeros (the bytes after {size} are lost)")


QUEUE_CUT_NOTES = {"fill-units": "filler units for entries into the bytes the cut lost",
                   "zero-range": "the queue's last entries, into the bytes the cut lost: the queue ends before them"}  # the notes of a ``CutSegment``'s unit ranges, by op


@dataclass(frozen=True)
class CutSegment:
    """A short commit log segment before the last (``_cut_segment_end``): ``blank`` where the cut record starts, the queue
    ``entries`` into the lost bytes and their ``unit_ranges``; ``unread``: why the queues could not be read. Fillers are ``(base,
    2147483647, 0)`` so the broker's clean-up keeps the queue file and ``getMessage`` rolls on."""

    base: int
    blank: int
    segment_size: int
    entries: tuple[tuple[str, int, int, int], ...] = ()
    unit_ranges: tuple[tuple[str, int, int, str], ...] = ()  # op: ``fill-units``, or ``zero-range`` for a queue's last entries
    unread: str | None = None

    @property
    def count(self) -> int:
        return sum(end - first for _, _, first, end in self.entries)

    def why(self, rel: str, size: int, expected: int) -> str:
        where = f"cut inside the record at byte {self.blank}" if size > self.blank else f"cut at the record boundary {size}"
        partial = f"bytes {self.blank}..{size} (the start of the record the cut crosses) and " if size > self.blank else ""
        if self.unread is not None:
            told = f"the consume queues do not tell which messages ({self.unread})"
        else:
            told = f"{self.count} consume queue entr{'y' if self.count == 1 else 'ies'} pointed there" if self.entries else "no consume queue entry pointed there"
        return (f"{size} bytes, not {expected}: the broker refuses to load a short segment (3.2.6-4.4.0 and 4.9.2 leave it and every later "
                f"one out); {where}: padded, with an end-of-file blank there, so the broker's recovery and reput go on into the next segment "
                f"as at any segment's end (padded with zeros only, it would read as the end of the log, and the broker's recovery would drop "
                f"every later segment); lost: {partial}the records after byte {size} of {rel}; {told}")

    def dropped_why(self, rel: str, most: int = 8) -> str:
        listed = [f"{topic}/{qid} queue offset{f's {first}-{end - 1}' if end - first > 1 else f' {first}'} ({end - first})"
                  for topic, qid, first, end in self.entries[:most]]
        more = f" and {len(self.entries) - most} more runs" if len(self.entries) > most else ""
        return (f"{self.count} consume queue entr{'y' if self.count == 1 else 'ies'} pointed into the bytes of {rel} the cut lost "
                f"([{self.base + self.blank}, {self.base + self.segment_size})): {'; '.join(listed)}{more}; each is replaced by a filler unit "
                f"({self.base}, 2147483647, 0), which the broker's reads skip, so every later message keeps its queue offset (a rebuilt "
                f"queue would renumber them; at the segment's base, not 0, so the broker's clean-up keeps a queue file a filler ends while "
                f"its messages are in the log); a queue's last ones are cut instead, as the broker's recovery cuts a queue past the log's "
                f"end (a filler as a queue's last unit stops its dispatch from 4.5.0)")


def _cut_segment_end(root: Path, path: Path, base: int, size: int, segment_size: int) -> CutSegment | None:
    """Where an end-of-file blank goes in a short segment before the last, so recovery rolls on (rules §1.1, §1.12, §1.17)."""
    from ..formats import commitlog as clfmt
    from ..store import fastscan as fs
    from ..store.segments import SegmentTask, analyze_segment

    chain = analyze_segment(SegmentTask(0, str(path), base, 0, None)).chain
    blank = chain.end
    if segment_size - blank < clfmt.END_FILE_MIN_BLANK_LENGTH:
        return None
    if blank < size:
        if chain.code not in (fs.END_TRUNCATED, fs.END_ZEROS):
            return None
        if size - blank >= 4:  # its TOTALSIZE is whole: the record must claim to run past the cut
            with open(path, "rb") as f:
                total = int.from_bytes(os.pread(f.fileno(), 4, blank), "big", signed=True)
            if not size < blank + total <= segment_size:
                return None
    return CutSegment(base, blank, segment_size, *_entries_into(root, base + blank, base + segment_size))


def _cut_wheel_slots(listing: TimerLogListing, walked: WalkedTimer) -> list[int]:
    """The read ``timerwheel`` slots whose units all lie past ``_walked_timer``'s end (a cut or damaged last file), which
    ``recover`` never revises and ``reviseQueueOffset`` re-enqueues onto themselves (5.0.0-5.3.3); slots already read stay."""
    size = listing.files[-1][1].stat().st_size
    if walked.end.clean and not (listing.file_size and 0 < size < listing.file_size):  # a whole log, ending well
        return []
    return [s.slot for s in walked.read if walked.wheel.reads(s) and s.first_pos >= walked.end.offset]


def _tail_wheel_slots(tails: list[tuple[int, int]], walked: WalkedTimer) -> list[int]:
    """Read wheel slots wholly in the cut ``tails`` of timer log files: ``dequeue`` follows prevPos 0 to unit 0 (5.0.0-5.3.3)."""
    return [s.slot for s in walked.read if walked.wheel.reads(s) and any(a <= s.first_pos <= s.last_pos < b for a, b in tails)]


class WalkedTimer(NamedTuple):
    """The timer log's units as the file fixes leave it (position: ``(delivery time, prevPos)``), its first offset, the wheel's
    read slots and ``recovered_wheel``'s model of them after the broker's ``recover``."""

    units: dict[int, tuple[int, int]]
    start: int
    read: list[tfmt.WheelSlot]
    wheel: RecoveredWheel
    end: TimerLogEnd


def _walked_timer(root: Path, listing: TimerLogListing) -> WalkedTimer | None:
    """The timer store as ``recoverAndRevise`` (5.0.0-5.3.3) walks it once padded; None without a timer log."""
    timer = TimerStore.open(root)
    if timer is None or not listing.files:
        return None
    units: dict[int, tuple[int, int]] = {}
    for base, path in listing.files:
        log = TimerLog([(base, path)])
        units.update((u.timer_log_offset, (u.delivery_time, u.prev_pos)) for u in log.walk())
        if not log.end.clean:
            break
    bases, end = [b for b, _ in listing.files], log.end.offset
    read = [s for s in timer.wheel_slots() if s.is_read]
    return WalkedTimer(units, bases[0], read, recovered_wheel(read, units, end, bases, timer.check, listing.file_size), log.end)


def _relinked_slots(listing: TimerLogListing, cleared: set[int], walked: WalkedTimer) -> list[tuple[int, list[Action]]]:
    """The slots (but ``cleared``) whose chain stays broken past the broker's start once the timer log is padded
    (``recovered_wheel``, ``chain_break``), each with the ``write-int64`` actions relinking lastPos, firstPos and prevPos."""
    units, start, read, wheel, _ = walked
    own, last = wheel.own, wheel.last_pos

    def write(path: str, at: int, value: int, what: str) -> Action:
        return Action("write-int64", path, start=at, end=at + 8, unit=(value,), note=what)

    def prev_write(pos: int, value: int) -> Action:
        base, path = next((b, p) for b, p in reversed(listing.files) if b <= pos)
        return write(f"timerlog/{path.name}", pos - base + 4, value, f"prevPos of the unit at {pos}")  # after its int32 size

    relinks = []
    for slot in read:
        mine, at = own[slot.slot], slot.slot * tfmt.SLOT_SIZE
        if not mine or slot.slot in cleared or not wheel.reads(slot) or chain_break(last[slot.slot], units, start) is None:
            continue
        writes = [write("timerwheel", at + 16, mine[-1], f"slot {slot.slot}'s lastPos")] if last[slot.slot] != mine[-1] else []
        if slot.first_pos not in units and slot.first_pos >= start:
            writes.append(write("timerwheel", at + 8, mine[0], f"slot {slot.slot}'s firstPos"))
        writes.extend(prev_write(pos, mine[i - 1] if i else -1) for i, pos in enumerate(mine)
                      if units[pos][1] != -1 and units[pos][1] >= start and units[pos][1] not in units)
        if writes:  # else a chain broken otherwise (a prevPos naming another slot's unit): no cut to relink over
            relinks.append((slot.slot, writes))
    return relinks


def _timer_log_blank(path: Path, base: int, file_size: int) -> int | None:
    """Where an end-of-file blank goes in a short timer log file before the last (``recoverAndRevise``, 5.0.0-5.3.3)."""
    log = TimerLog([(base, path)])
    pos = sum(1 for _ in log.walk()) * tfmt.UNIT_SIZE
    with MappedFile(path) as mf:
        own_blank = tfmt.is_blank(mf.buf, pos)
    return pos if log.end.clean and not own_blank and file_size - pos >= tfmt.BLANK_SIZE else None


def _entries_into(root: Path, start: int, stop: int) -> tuple[tuple, tuple, str | None]:
    """``CutSegment``'s ``entries``, ``unit_ranges`` and ``unread`` for the log range [``start``, ``stop``)."""
    cq_dir = root / "consumequeue"
    try:
        file_size = infer_queue_file_size(cq_dir)
        found = [(q, q.runs_into(start, stop)) for q in discover_queues(cq_dir, file_size)] if file_size else []
    except BadInput as exc:
        return (), (), str(exc)
    entries, ranges = [], []
    for queue, runs in found:
        files = dict(queue.files)
        queue_end = queue.recover().max_offset if runs else None
        for first, end in runs:
            entries.append((queue.topic, queue.queue_id, first, end))
            op = "zero-range" if end == queue_end else "fill-units"  # the queue's last entries: cut (``dropped_why``)
            pos, stop_at = first * cqfmt.ENTRY_SIZE, end * cqfmt.ENTRY_SIZE
            while pos < stop_at:  # one range per file
                file_base = pos - pos % file_size
                upto = min(stop_at, file_base + file_size)
                ranges.append((os.path.relpath(files[file_base], root), pos - file_base, upto - file_base, op))
                pos = upto
    return tuple(entries), tuple(ranges), None


def _files(directory: Path, *, dirs: bool = False, linked_files: bool = False) -> list[os.DirEntry]:
    """The files (``dirs``: directories) in ``directory`` by name, as ``File.listFiles`` lists them; none if absent."""
    def wanted(e: os.DirEntry) -> bool:
        if dirs:
            return e.is_dir(follow_symlinks=False)
        return not e.is_dir(follow_symlinks=False) and (not e.is_symlink() or linked_files and e.is_file())

    try:
        return sorted(filter(wanted, os.scandir(directory)), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []


# ---- findings: lost data or fixable -------------------------------------------------------------


@dataclass
class Triage:
    """``verify``'s findings sorted into what a repair step fixes and what is lost."""

    queues: dict[tuple[str, int], list[Finding]] = dataclasses.field(default_factory=dict)
    units: list[Finding] = dataclasses.field(default_factory=list)  # fields of entries mended in place (``unit_fixes``)
    index: list[Finding] = dataclasses.field(default_factory=list)
    checkpoint: list[Finding] = dataclasses.field(default_factory=list)
    configs: list[Finding] = dataclasses.field(default_factory=list)
    abort: list[Finding] = dataclasses.field(default_factory=list)
    dledger_units: list[Finding] = dataclasses.field(default_factory=list)  # DLedger index units past the last entry
    dledger_tail: list[Finding] = dataclasses.field(default_factory=list)  # DLedger data bytes after the end of the entry walk
    lost: list[Expected] = dataclasses.field(default_factory=list)
    last_timestamp: int | None = None

    @property
    def fixable(self) -> bool:
        return bool(self.queues or self.units or self.index or self.checkpoint or self.configs or self.abort or self.dledger_units or self.dledger_tail)


def verify_findings(store: Store, checks: tuple[str, ...] = CHECKS, *, walked: dict | None = None,
                    dispatched: Dispatched | None = None) -> tuple[list[Finding], Verification]:
    """``verify``'s failing findings; ``walked``: the chain prefixes the plan's scan walked (``walkedchain``), ``dispatched``:
    what its dispatch saw (``plan_dispatched``)."""
    run = Verification(store, VerifyOptions(checks=checks), activity.listener("verify "))
    run.walked, run.dispatched = walked, dispatched
    return [f for f in run.findings() if f.severity.fails], run


def triage(findings: Iterable[Finding], last_timestamp: int | None = None) -> Triage:
    findings = list(findings)
    out = Triage(last_timestamp=last_timestamp)
    lost_ranges = []
    for f in findings:
        if (f.details or {}).get("dledger_tail"):  # left by DLedger's recovery (``DLedgerLog.zeroes_after_cut``): zeroed here
            out.dledger_tail.append(f)
        elif f.kind in LOST_KINDS:
            start = f.offset if f.offset is not None else -1
            d = f.details or {}
            end = d.get("range_end") or d.get("missing_to") or (start + int(d.get("size") or 1))
            if d.get("cut_by_next_start"):  # the broker's next start cuts the log here: it drops every record after it
                end = 1 << 63
            lost_ranges.append((start, max(int(end), start + 1)))
            if f.kind == "phys-offset-mismatch" and isinstance(f.found, int):
                # the dispatch trusts the field (reference §3.2, DispatchRequest.commitLogOffset): its entries point where it claims to be
                lost_ranges.append((f.found, f.found + 1))
            out.lost.append(expected(f, True))
    lost = _LostData(findings, lost_ranges)
    for f in findings:
        if f.kind not in LOST_KINDS and not (f.details or {}).get("dledger_tail"):
            _triage_one(out, f, lost)
    return out


class _LostData:
    """The lost records' byte ranges, the queues with an entry in one, and the entries mended in place (``mended``)."""

    def __init__(self, findings: list[Finding], ranges: list[tuple[int, int]]):
        self.ranges = ranges
        self.queues = {_queue_of(f) for f in findings if f.kind in CQ_KINDS and self.holds(f.offset)}
        self.mended = self._astray(findings)

    def holds(self, offset: int | None) -> bool:
        return offset is not None and any(a <= offset < b for a, b in self.ranges)

    def _astray(self, findings: list[Finding]) -> set[int]:
        """Of the queues with lost records, the ``cq-entry-missing`` runs whose every queue offset holds an entry pointing astray,
        with those entries (by ``id``): writing each record's own entry keeps the numbering (``unit_fixes``)."""
        dangling = {(_queue_of(f), f.details["queue_offset"]): f for f in findings
                    if (f.kind == "cq-entry-dangling" or f.kind == "cq-entry-mismatch" and (f.details or {}).get("field") == "topic/queue")
                    and _queue_of(f) in self.queues and not self.holds(f.offset) and "queue_offset" in (f.details or {})}
        mended: set[int] = set()
        for f in findings:
            d = f.details or {}
            if f.kind != "cq-entry-missing" or _queue_of(f) not in self.queues or "first_queue_offset" not in d:
                continue
            slots = range(d["first_queue_offset"], d["last_queue_offset"] + 1)
            if d.get("records") == len(slots) and all((_queue_of(f), q) in dangling for q in slots):
                mended |= {id(f), *(id(dangling[_queue_of(f), q]) for q in slots)}
        return mended


def _triage_one(out: Triage, f: Finding, lost: _LostData) -> None:
    """One finding that is not itself a lost record into the step that fixes it, or ``out.lost``."""
    if f.kind in CQ_KINDS:
        key = _queue_of(f)
        # record_damaged: the record's QUEUEOFFSET is wrong; a queue with lost data: a rebuild would renumber it
        if (f.details or {}).get("record_damaged") or key is None:
            out.lost.append(expected(f, True))
        elif key in lost.queues and (id(f) in lost.mended or f.kind == "cq-entry-mismatch" and (f.details or {}).get("field") in UNIT_FIELDS):
            out.units.append(f)  # the entry is (or goes) where its record is: mended in place, it keeps the queue's numbering
        elif key in lost.queues:
            out.lost.append(expected(f, True))
        else:
            out.queues.setdefault(key, []).append(f)
    elif f.kind in INDEX_KINDS:
        if lost.holds(f.offset):
            out.lost.append(expected(f, True))
        else:
            out.index.append(f)
    elif f.kind in CHECKPOINT_KINDS:
        out.checkpoint.append(f)
    elif f.kind == "abort-present":
        out.abort.append(f)
    elif f.kind == "dledger-index" and (f.details or {}).get("index") is None:
        out.dledger_units.append(f)
    elif f.kind in ("timer-reference", "timer-wheel"):
        d = f.details or {}
        # lost: messages past the end, units outside the log or cut off, pending slots, units naming no record (recoverAndRevise)
        gone = (d.get("past_end") or d.get("before_start") or d.get("cut_off") or d.get("pending")
                or (f.kind == "timer-reference" and f.severity == Severity.ERROR))
        out.lost.append(expected(f, lost.holds(f.offset) or bool(gone)))
    elif f.kind == "config-unreadable" and f.severity.value == "warning":  # its .bak is valid
        out.configs.append(f)
    elif f.kind in ("timer-log-damaged", "timercheck-ahead", "config-unreadable"):
        # the timer log cut there, timercheck counting what is gone, or a config whose .bak is unreadable too
        out.lost.append(expected(f, True))
    else:
        # lost data after lost messages; never a consumer offset outside its queue (OFFSET_TOO_SMALL / OFFSET_OVERFLOW)
        out.lost.append(expected(f, bool(lost.ranges) and f.kind != "consumer-offset-range"))


UNIT_FIELDS = {"size": 1, "tags code": 2}  # a ``cq-entry-mismatch`` field: its place in the unit (``cqfmt.ENTRY``)


def unit_fixes(store: Store, findings: list[Finding]) -> list[Action]:
    """``fill-units`` for ``Triage.units``: the record's size or tags code in place of the damaged one
    (``putMessagePositionInfo``), or a record's own entry where its queue offset's unit points astray (``_LostData.mended``)."""
    by_unit: dict[tuple[str, int], list[Finding]] = {}
    actions = []
    for f in findings:
        if f.kind == "cq-entry-missing":
            actions += _entries_of_records(store, f)
        elif f.kind == "cq-entry-mismatch" and f.details["field"] in UNIT_FIELDS:  # (an entry astray: its record's run writes it)
            by_unit.setdefault((f.file, f.details["queue_offset"]), []).append(f)
    for (path, queue_offset), fs in sorted(by_unit.items()):
        entry = store.consume_queue(fs[0].details["topic"], int(fs[0].details["queue_id"])).read_entry(queue_offset)
        if entry is None or entry.phys_offset != fs[0].offset:
            continue
        unit = list(entry[1:])  # (phys_offset, size, tags_code)
        for f in fs:
            unit[UNIT_FIELDS[f.details["field"]]] = f.expected
        start = queue_offset * cqfmt.ENTRY_SIZE - int(Path(path).name)
        actions.append(Action("fill-units", path, start=start, end=start + cqfmt.ENTRY_SIZE, unit=tuple(unit),
                              note=f"queue offset {queue_offset}: " + ", ".join(f"{f.details['field']} {f.found} -> {f.expected}" for f in fs) + ", the record's"))
    return actions


def _entries_of_records(store: Store, missing: Finding) -> list[Action]:
    """``fill-units`` writing each record of a ``cq-entry-missing`` run into its QUEUEOFFSET's unit (``dispatch_request``)."""
    d = missing.details
    topic, queue_id = d["topic"], int(d["queue_id"])
    queue = store.consume_queue(topic, queue_id)
    actions, wanted = [], d["first_queue_offset"]
    ext = store.root is not None and (store.root / "consumequeue_ext").is_dir()
    for record in store.commitlog.scan(missing.offset, d["last_offset"] + 1):
        # the first record of each queue offset in turn: a later duplicate the 4.2.0+ dispatch skips is not one
        if record.topic_name != topic or record.queue_id != queue_id or record.queue_offset != wanted:
            continue
        wanted += 1
        entry, base = queue.read_entry(record.queue_offset), record.queue_offset * cqfmt.ENTRY_SIZE
        path = next((p for b, p in reversed(queue.files) if b <= base), None)
        if entry is None or path is None or entry.phys_offset == record.offset:
            continue
        try:
            request = dispatch_request(record, store.delay_table, legacy_properties=store.legacy_properties)
        except CorruptRecord:  # a DELAY the dispatch cannot parse: the broker writes no entry for it either
            continue
        start = base - int(path.name)
        # with consumequeue_ext/ (rules §3.9) the dispatch wrote an ext address, which mqtool does not make: the unit's stays
        tags = entry.tags_code if ext and cqfmt.is_ext_address(entry.tags_code) else request.tags_code
        actions.append(Action("fill-units", os.path.relpath(path, store.root), start=start, end=start + cqfmt.ENTRY_SIZE,
                              unit=(request.commit_log_offset, request.msg_size, tags),
                              note=f"queue offset {record.queue_offset}: the entry pointed to {entry.phys_offset}, not its record; its record's, at {record.offset}"))
    return actions


def expected(f: Finding, lost_data: bool, fixed_by: str | None = None) -> Expected:
    return Expected(f.kind, f.severity.value, f.file, f.offset, f.message, lost_data, fixed_by)


def expected_after(t: Triage) -> list[Expected]:
    """Every triaged finding, with the repair step that removes it (or ``lost_data``)."""
    fixed = (("rebuild-cq", [f for fs in t.queues.values() for f in fs]), ("mend-units", t.units), ("rebuild-index", t.index),
             ("rewrite-checkpoint", t.checkpoint), ("restore-config", t.configs), ("remove-abort", t.abort),
             ("zero-dledger-units", t.dledger_units), ("zero-dledger-data", t.dledger_tail))
    return [expected(f, False, step) for step, found in fixed for f in found] + t.lost


def _queue_of(f: Finding) -> tuple[str, int] | None:
    d = f.details or {}
    if "topic" in d and "queue_id" in d:
        return d["topic"], int(d["queue_id"])
    parts = (f.file or "").split("/")
    if len(parts) >= 3 and parts[0] == "consumequeue" and parts[2].isdigit():
        return parts[1], int(parts[2])
    return None


def steps_of(t: Triage) -> list[RepairStep]:
    """The repair steps the triaged findings call for, in the order they are applied."""
    def kinds(found: Iterable[Finding]) -> str:
        return ", ".join(sorted({f.kind for f in found}))

    units = (len({(f.file, f.details["queue_offset"]) for f in t.units if f.kind == "cq-entry-mismatch" and f.details["field"] in UNIT_FIELDS})
             + sum(f.details["records"] for f in t.units if f.kind == "cq-entry-missing"))  # entries written
    steps = [RepairStep(step, True, why, paths) for found, step, why, paths in (
        (t.queues, "rebuild-cq", f"{len(t.queues)} consume queue(s) with {kinds(f for fs in t.queues.values() for f in fs)}: "
         "regenerated from the commit log, an entry for every record the broker serves (no broker start rebuilds a missing entry or drops "
         "a bad one)", tuple(f"consumequeue/{topic}/{qid}" for topic, qid in sorted(t.queues))),
        (t.units, "mend-units", f"{units} consume queue entr{'y' if units == 1 else 'ies'} whose size or tags code differs from the record "
         "it points at, or that points elsewhere while the record of its queue offset has none, in queues a rebuild would "
         "renumber around lost records: the record's values written in place (consumers read the message again)", tuple(sorted({f.file for f in t.units}))),
        (t.index, "rebuild-index", f"{kinds(t.index)}: every index file regenerated from the commit log (IndexService never drops entries "
         "past the end nor rebuilds a file)", ("index",)),
        (t.checkpoint, "rewrite-checkpoint", f"{kinds(t.checkpoint)}: the checkpoint is rewritten to the valid log (a broker start trusts "
         "it as it is)", ("checkpoint",)),
    ) if found]
    steps += [RepairStep("restore-config", True, f"{f.file} does not decode and its .bak does: the .bak is copied over it (the broker "
                         "reads the .bak on every start but never rewrites the file)", (f.file,)) for f in t.configs]
    if t.abort:
        steps.append(RepairStep("remove-abort", True, "the abort file is still present after the recovery", ("abort",)))
    steps += [RepairStep("zero-dledger-units", True, f"{f.found - f.expected} DLedger index unit(s) past the last entry: zeroed (the "
                         "broker's recovery only moves the index's write position before them, MmapFileList.truncateOffset)", (f.file,))
              for f in t.dledger_units]
    if t.dledger_tail:
        steps.append(RepairStep("zero-dledger-data", True, "DLedger data bytes after the end of its entry walk: zeroed to the last non-zero "
                                "one (the broker's recovery only moves the data's write position there, MmapFileList.truncateOffset)",
                                tuple(sorted({f.file for f in t.dledger_tail}))))
    return steps


# ---- 3. the plans of the steps beyond the broker ----------------------------------------------


def plan_queue_rebuild(store: Store, queues: Iterable[tuple[str, int]], scan_from: int | None = None) -> Plan:
    return dataclasses.replace(plan_rebuild_cq(store, PlanOptions(queues=frozenset(queues), scan_from=scan_from)), command="repair")


def plan_index_rebuild(store: Store) -> Plan:
    return dataclasses.replace(plan_rebuild_index(store), command="repair")


def plan_state_fixes(store: Store, t: Triage) -> Plan | None:
    """Checkpoint, config, abort and consume queue unit fixes as one plan of the current store."""
    actions: list[Action] = []
    cp_plan = None
    if t.checkpoint:
        cp = store.checkpoint or cpfmt.StoreCheckpoint(0, 0, 0)
        last = t.last_timestamp or 0
        after = cp._replace(physic_msg_timestamp=min(cp.physic_msg_timestamp, last) if cp.physic_msg_timestamp else last,
                            logics_msg_timestamp=min(cp.logics_msg_timestamp, last) if cp.logics_msg_timestamp else last,
                            index_msg_timestamp=min(cp.index_msg_timestamp, last))
        cp_plan = CheckpointPlan(store.checkpoint is not None and store.path("checkpoint").stat().st_size == cpfmt.CHECKPOINT_FILE_SIZE, cp._asdict(), after._asdict())
        actions.append(Action("write-checkpoint", "checkpoint", note=f"timestamps no later than the last valid message ({last})"))
    for f in t.configs:
        actions.append(Action("restore-config", f.file, note=f"copied from {Path(f.file).name}.bak"))
    if t.abort:
        actions.append(Action("delete", "abort", note="the abort file is still present after the recovery"))
    actions += unit_fixes(store, t.units)
    if t.dledger_units or t.dledger_tail:
        from .dledger import stale_data_actions, stale_unit_actions  # a DLedger store's only

        for f in t.dledger_units:
            actions += stale_unit_actions(store, f.expected - 1)
        actions += stale_data_actions(store) if t.dledger_tail else []
    if not actions:
        return None
    version = store.version
    return Plan.new("repair", store.path(), str(version) if version else "unknown", "detected", actions,
                    checkpoint=cp_plan, remove_abort=bool(t.abort))


# ---- what verify reports after the broker's recovery -------------------------------------------


def predict_after_recovery(findings: Iterable[Finding], recover: Plan, store: Store, last_timestamp: int | None) -> list[Finding]:
    """``verify``'s findings today that ``recover`` leaves, judged on the store as the recovery leaves it."""
    cl = recover.commitlog
    end = cl.valid_end if cl is not None else None
    dropped = {f"index/{f.name}" for f in (recover.index.files if recover.index else ()) if f.action == "delete"}
    cq_from = min((p.start for p in recover.dispatch if p.consume_queues), default=None)
    ix_from = min((p.start for p in recover.dispatch if p.index), default=None)
    changed_queues = {(q.topic, q.queue_id) for q in recover.queues if q.files}
    dledger_checkpoint = any(a.op == "write-dledger-checkpoint" for a in recover.actions)
    checkpoint = recover.checkpoint is not None and recover.checkpoint.changed

    def removes(f: Finding) -> bool:
        return (
            (f.kind in ("abort-present", "index-file-dropped") and recover.remove_abort)
            # bytes at or after the end the cut zeroes or deletes (not those DLedger's recovery leaves in its file, ``zeroes_after_cut``)
            or (f.kind in LOST_KINDS and _at_or_after(f.offset, end) and (f.offset < cl.zero_to or Path(f.file or "").name in cl.delete_segments))
            # entries past the end of a queue the recovery rewrites (at full size: its files' length too), and missing ones it re-dispatches
            or (f.kind in ("cq-entry-beyond-end", "cq-file-size") and _queue_of(f) in changed_queues)
            # (not those the reput skips: past a record it cannot read it goes on at the next file, verify's ``reput_gaps``)
            or (f.kind == "cq-entry-missing" and "reput_resumes_at" not in (f.details or {})
                and bool((f.details or {}).get("rebuilt_by_broker") or _at_or_after(f.offset, cq_from)))
            # keys it re-indexes, and findings in the index files it deletes
            or (f.kind == "index-keys-missing" and _at_or_after(f.offset, ix_from))
            or (f.kind.startswith("index-") and f.file in dropped)
            or (f.kind == "dledger-index" and _units_fixed(f, recover))
            or (f.kind == "dledger-checkpoint" and dledger_checkpoint)
            or (f.kind in ("checkpoint-missing", "checkpoint-size", "checkpoint-empty") and checkpoint)
        )

    kept = [_partly_redispatched(f, cq_from, store) for f in findings if not removes(f)] + unqueued_findings(store, recover)
    partly = {_queue_of(f) for f in kept if f.kind == "cq-entry-missing" and (f.details or {}).get("redispatched_from") is not None}
    kept += [g for q in recover.queues for g in misplaced_findings(store, q, q.first_added if (q.topic, q.queue_id) in partly else None)]
    if last_timestamp is not None and cl is not None and cl.end_is_damage and cl.last_valid_offset >= 0 and not store.is_dledger:  # it cuts
        last_timestamp = store.commitlog.read_record(cl.last_valid_offset).store_timestamp
    if last_timestamp is not None and (checkpoint or store.checkpoint is not None):  # verify's check on the checkpoint it leaves
        after = cpfmt.StoreCheckpoint(**recover.checkpoint.after) if checkpoint else store.checkpoint
        kept = _replaced(kept, "checkpoint-ahead", lambda f: True, list(checkpoint_ahead_findings(after, last_timestamp)))
    if (unindexed := _unindexed_after(store, recover, ix_from)) is not None:
        kept = _replaced(kept, "index-keys-missing", lambda f: ix_from is None or f.offset < ix_from, unindexed)
    return recovered_offset_findings(store, kept, recover)


def unqueued_findings(store: Store, recover: Plan) -> list[Finding]:
    """verify's ``cq-entry-missing`` after ``recover`` for the records it keeps whose entries it cuts and no dispatch writes again
    (``Plan.unqueued``: 5.2.0+'s abnormal DLedger recovery, ``DLedgerLog.unqueued``), a run per queue: ``rebuild-cq`` gives them back."""
    runs: dict[tuple[str, int], MissingRun] = {}
    for r in recover.unqueued:
        run = runs.get((r.topic, r.queue_id))
        if run is None:
            runs[r.topic, r.queue_id] = MissingRun(r.offset, r.offset, r.queue_offset, r.queue_offset, 1)
        else:
            run.last_offset, run.last_queue_offset, run.count = r.offset, r.queue_offset, run.count + 1
    said = ("lose their consume queue entries to this recovery: it truncates the queues before them, and the start-up reput resumes only after "
            "them; the broker will not rebuild them by itself; consumers never see these messages")
    return [entries_missing(topic, queue_id, queue_file(store, topic, queue_id, run.first_queue_offset), run, said)
            for (topic, queue_id), run in runs.items()]


def _partly_redispatched(f: Finding, cq_from: int | None, store: Store) -> Finding:
    """``f``, or for a ``cq-entry-missing`` run the recovery re-dispatches from ``cq_from``, a row that says so."""
    d = f.details or {}
    if (f.kind != "cq-entry-missing" or cq_from is None or f.offset is None or "first_queue_offset" not in d or "reput_resumes_at" in d
            or not f.offset < cq_from <= d.get("last_offset", -1)):
        return f
    file = f.file if f.file is not None else queue_file(store, d["topic"], int(d["queue_id"]), d["first_queue_offset"])
    return dataclasses.replace(f, file=file, details={**d, "redispatched_from": cq_from}, message=(
        f"records of {d['topic']}/{d['queue_id']} before {cq_from} still have no consume queue entry after this recovery, which "
        f"re-dispatches it from {cq_from} on (today {d['records']} records, "
        f"queue offsets {d['first_queue_offset']}..{d['last_queue_offset']}, commit log {f.offset}..{d['last_offset']})"))


def queue_file(store: Store, topic: str, queue_id: int, queue_offset: int) -> str:
    """The consume queue file (relative to the store) holding ``queue_offset`` of ``topic``/``queue_id``, as verify names it."""
    return str(store.consume_queue(topic, queue_id).unit_file(queue_offset).relative_to(store.root))


def misplaced_findings(store: Store, q: QueuePlan, plain_from: int | None = None) -> list[Finding]:
    """verify's ``cq-entry-mismatch`` rows of the entries queue plan ``q`` writes at its write position, not their record's
    QUEUEOFFSET (``putMessagePositionInfo``, reference §5.10): lost data, except a run shifted alike from ``plain_from``, which a
    rebuild mends (``QueueCursor.shift``)."""
    out, plain, previous = [], False, None
    for m in q.misplaced:
        shift = m.queue_offset - m.record_queue_offset
        if previous is None:
            plain = m.record_queue_offset == plain_from
        elif not (previous == (shift, m.record_queue_offset - 1) and plain):
            plain = False
        previous = (shift, m.record_queue_offset)
        out.append(entry_mismatch(q.topic, q.queue_id, queue_file(store, q.topic, q.queue_id, m.queue_offset), m.queue_offset, m.offset,
                                  "queue offset", m.record_queue_offset, m.queue_offset, record_damaged=not plain))
    return out


def _replaced(findings: list[Finding], kind: str, which: Callable[[Finding], bool], new: list[Finding]) -> list[Finding]:
    """``findings`` with those of ``kind`` that ``which`` selects replaced by ``new``, where the first of them was (else the end)."""
    gone = [id(f) for f in findings if f.kind == kind and which(f)]
    at = next((i for i, f in enumerate(findings) if id(f) in gone), len(findings))
    rest = [f for f in findings if id(f) not in gone]
    return rest[:at] + new + rest[at:]


def _unindexed_after(store: Store, recover: Plan, ix_from: int | None) -> list[Finding] | None:
    """The ``index-keys-missing`` after ``recover`` deletes index files and re-indexes from ``ix_from`` (rules §6)."""
    dropped = {f.name for f in (recover.index.files if recover.index else ()) if f.action == "delete"}
    if not dropped or store.unreadable_index is not None or (ix_from is not None and ix_from <= store.commitlog.min_offset):
        return None
    kept = tuple(f for f in store.index_files if f.path.name not in dropped)
    run = Verification(store, VerifyOptions(checks=("index",), to_offset=ix_from, index_files=kept))
    return [f for f in run.findings() if f.kind == "index-keys-missing"]


def recovered_offset_findings(store: Store, findings: list[Finding], recover: Plan, *later: Plan) -> list[Finding]:
    """``findings`` with ``consumer-offset-range`` judged on the queue ranges ``recover`` and ``later`` leave."""
    ranges, unchanged = {}, True
    for q in (q for plan in (recover, *later) for q in plan.queues):
        fates = {f.name: f.action for f in q.files}
        on_disk = {Path(path).name for _, path in store.consume_queue(q.topic, q.queue_id).files}
        left = {n for n in on_disk if fates.get(n) != "delete"} | {n for n, a in fates.items() if a != "delete"}
        ranges[q.topic, q.queue_id] = QueueRange(q.min_after, q.max_after) if left else None
        unchanged = unchanged and ranges[q.topic, q.queue_id] == QueueRange(q.min_before, q.max_before)
    if unchanged:
        return findings
    return _replaced(findings, "consumer-offset-range", lambda f: True, [f for f in consumer_offset_findings(store, ranges) if f.severity.fails])


def _at_or_after(offset: int | None, start: int | None) -> bool:
    return start is not None and offset is not None and offset >= start


def _units_fixed(f: Finding, recover: Plan) -> bool:
    """A ``dledger-index`` finding of a unit DLedger's recovery rewrites (not one past the last entry)."""
    from ..formats import dledger as dlfmt  # only for a DLedger store's finding

    number = (f.details or {}).get("index")
    return number is not None and any(a.op == "write-dledger-index" and (int(Path(a.path).name) + a.start) // dlfmt.INDEX_UNIT_SIZE <= number
                                      for a in recover.actions if a.path.startswith(f"{f.file}/"))


def settled_checks(store: Store, recover: Plan) -> frozenset[str]:
    """The cross checks whose every finding ``recover`` removes (``verify_after`` skips them); None on DLedger or LMQ."""
    if not _only_plain_queues(store):
        return frozenset()
    clmin = store.commitlog.min_offset
    full = [p for p in recover.dispatch if p.start <= clmin and p.after_phys is None]
    settled = set()
    if not store.consume_queues and any(p.consume_queues for p in full):
        settled.add("cq")
    if (recover.index is not None and all(f.action in ("delete", "create") for f in recover.index.files) and any(p.index for p in full)
            and not store.index_strays):
        settled.add("index")
    return frozenset(settled)


def cross_checks_settled(store: Store, recover: Plan) -> bool:
    """Both cross checks settled: verify's other checks can run on the plan's own walk."""
    return settled_checks(store, recover) == frozenset(CROSS_CHECKS)


def _only_plain_queues(store: Store) -> bool:
    """The store's queues are the consume queues alone: on disk, not DLedger, no LMQ queue."""
    if store.root is None or store.is_dledger:
        return False
    return not (store.multi_dispatch and (lmq_queue_dirs(store) or store.config.enable_multi_dispatch))


LOCAL_CHECKS = tuple(c for c in CHECKS if c not in CROSS_CHECKS)


def verify_after(store: Store, recover: Plan, *, every_check: bool = False) -> list[Expected]:
    """What ``verify`` still reports after ``recover``, each marked lost data or with the step that fixes it."""
    settled = frozenset() if every_check else settled_checks(store, recover)
    return _expected_after(verify_findings(store, tuple(c for c in CHECKS if c not in settled)), recover, store)


def _file_fixes_of(store: Store, findings: list[Finding]) -> tuple[list[RepairStep], Plan | None]:
    """``plan_file_fixes`` of ``store`` as ``repair`` plans them, where a finding says there is one to make (each fixes a file
    of a ``FILE_FIX_KINDS`` finding, or the timer wheel's length); none where repair refuses to plan them (it says why)."""
    if not any(f.kind in FILE_FIX_KINDS or f.kind == "timer-wheel" for f in findings):
        return [], None
    try:
        return plan_file_fixes(store.root, store)
    except Refused:
        return [], None


def _expected_after(verified: tuple[list[Finding], Verification], recover: Plan, store: Store) -> list[Expected]:
    """``recover``'s "will still report" table: ``after_recovery`` of the file fixes ``repair`` would make (``_file_fixes_of``)."""
    findings, run = verified
    return after_recovery(store, findings, *_file_fixes_of(store, findings), recover, run.last_timestamp, repairs=False)[1]


def plan_with_verify_after(store: Store, make_plan: Callable[[WalkedChain | None], Plan], *, before_verify: Callable[[], None] | None = None) -> Plan:
    """``make_plan(walked)`` with its ``verify_after``; where the cross checks may settle, verify walks on from where the plan's
    scan stopped (``walkedchain.WalkedChain``). ``before_verify`` runs before verify."""
    try:
        may_settle = not store.consume_queues and _only_plain_queues(store)
    except Exception:  # noqa: BLE001 - a part it reads cannot be read (the plan reports it)
        may_settle = False
    walked = WalkedChain() if may_settle else None
    plan = make_plan(walked)
    if before_verify is not None:
        before_verify()
    if walked is not None and cross_checks_settled(store, plan):
        verified = verify_findings(store, LOCAL_CHECKS, walked=walked.runs, dispatched=plan_dispatched(store, walked))
        return dataclasses.replace(plan, verify_after=tuple(_expected_after(verified, plan, store)))
    return dataclasses.replace(plan, verify_after=tuple(verify_after(store, plan)))


def plan_dispatched(store: Store, walked: WalkedChain) -> Dispatched | None:
    """What the plan's recovery scans dispatched (``WalkedChain.dispatched``) as ``lmq.stall_throw`` reads a walk's dispatch,
    sparing verify's next start a scan of its own (verify runs without the cross checks and their walk): the range every
    candidate's scan walked, the last record flagged in any; None where a scan read the properties by another rule than the
    store is read by after the plan (their flags are that rule's), or none was told."""
    told = walked.dispatched
    if not told or any(legacy != store.legacy_properties for legacy, _ in told):
        return None
    return Dispatched(max(d.start for _, d in told), min(d.end for _, d in told), max(d.last_flagged for _, d in told))


def file_fix_steps(findings: list[Finding], steps: list[RepairStep], files: Plan | None) -> dict[int, str]:
    """``id`` -> step of each of ``findings`` the file fixes (``steps``, ``files``) remove: of a file they change, a missing
    config whose bad .bak they move (``ConfigManager.loadBak``), the wheel's length, entries into a cut segment, wheel slots."""
    if files is None:
        return {}
    changed, resized = {a.path for a in files.actions}, {(a.path, a.start) for a in files.actions if a.op == "resize"}
    step_of = {path: st.step for st in reversed(steps) for path in st.paths}  # the first step that names a path
    blanked = [(int(Path(a.path).name), int(Path(a.path).name) + a.end) for a in files.actions
               if a.op == "pad-blank" and a.path.startswith("commitlog")]  # a timer log's blank is no commit log range
    cleared = {i for a in files.actions if a.path == "timerwheel" and a.op in ("zero-range", "write-int64")
               for i in range(a.start // tfmt.SLOT_SIZE, (a.end - 1) // tfmt.SLOT_SIZE + 1)}  # _cut_wheel_slots, _relinked_slots
    relinked = {int(Path(a.path).name) + a.start - 4 for a in files.actions if a.op == "write-int64" and a.path.startswith("timerlog")}

    def step(f: Finding) -> str | None:
        d = f.details or {}
        if f.kind in FILE_FIX_KINDS and f.file in changed:
            return step_of[f.file]
        if f.kind == "config-unreadable" and f.found == MISSING and f"{f.file}.bak" in changed:
            return step_of[f"{f.file}.bak"]
        if f.kind == "timer-wheel" and (f.file, f.found) in resized:  # its length (found: the size resized from), not a slot's
            return step_of[f.file]
        if f.kind == "timer-wheel" and (d.get("slot") in cleared or d.get("chain_broken_at") in relinked):
            return "clear-wheel-slots" if d.get("slot") in cleared else "relink-wheel-slots"
        if f.kind in CQ_KINDS and f.offset is not None and any(start <= f.offset < end for start, end in blanked):
            return step_of.get(f.file, "resize-segment")
        return None

    return {id(f): found for f in findings if (found := step(f)) is not None}


def _left_by_file_fixes(store: Store, findings: list[Finding], fixed: dict[int, str], files: Plan | None) -> list[Finding]:
    """``findings`` once the file fixes are applied: those they fix go; a moved config FIFO gives way to what verify's config
    check reports without the moved files (``ConfigManager.loadBak``). Not in ``recover``'s table."""
    moved = frozenset(a.path for a in files.actions if a.op == "quarantine") if files is not None else frozenset()

    def after(f: Finding) -> list[Finding]:
        if id(f) not in fixed:
            return [f]
        if f.kind == "config-unreadable" and f.found == A_FIFO:
            return [g for g in config_file_findings(store, Path(f.file).name.removesuffix(".bak"), without=moved) if g.severity.fails]
        return []

    return [g for f in findings for g in after(f)]


def start_after_recovery(store: Store, recover: Plan) -> ScanStart | None:
    """Where the next start after an abnormal ``recover`` of a 3.2.6-5.3.1 classic store scans from; else None."""
    cl = recover.commitlog
    if cl is None or recover.mode != "abnormal" or not recover.remove_abort or store.is_dledger or store.rules.normal_start_from_cq_max:
        return None
    left = [seg for seg in store.commitlog.segments if seg.path.name not in cl.delete_segments]
    return recovery_start(store, store.rules, mode="normal", segments=left) if left else None


def next_start_cut(store: Store, recover: Plan, findings: list[Finding], start: ScanStart | None) -> tuple[ScanStart, ScanEnd] | None:
    """(start, end) where the broker's start after ``recover`` ends the log at damage before ``recover``'s valid end
    (``summary.logical_end``); walked only where ``findings`` have damage between the two starts. Else None."""
    if start is None or not any(f.kind in LOST_KINDS and f.offset is not None and start.offset <= f.offset < recover.commitlog.scan_from
                                for f in findings):
        return None
    end = logical_end(store, start.offset, stop=recover.commitlog.valid_end)[1]
    return (start, end) if end.offset < recover.commitlog.valid_end and not end.is_clean else None


def cut_marked(findings: list[Finding], cut: tuple[ScanStart, ScanEnd] | None) -> list[Finding]:
    """``findings`` with the damage where the next start ends the log marked ``cut_by_next_start``, as verify marks it."""
    if cut is None:
        return findings
    return [dataclasses.replace(f, details={**(f.details or {}), "cut_by_next_start": True})
            if f.kind in LOST_KINDS and f.offset == cut[1].offset else f for f in findings]


def up_to_cut(store: Store, rows: list[Expected], cut: tuple[ScanStart, ScanEnd] | None) -> list[Expected]:
    """``rows`` before where the next start ends the log (``next_start_cut``), then one row for what follows."""
    if cut is None:
        return rows
    start, end = cut
    index = store.commitlog.segment_index(end.offset)
    file = None if index is None else os.path.relpath(store.commitlog.segments[index].path, store.root)
    return [e for e in rows if e.offset is None or e.offset < end.offset] + [Expected("not-predicted", "error", file, end.offset,
            f"and what verify finds from {end.offset} on, not predicted here: the broker's start after this recovery scans from "
            f"{start.offset}, its {start.rule}, before this recovery's start, ends the log at {end.offset} ({end.reason}: "
            f"{end.detail}) and drops {dropped_after(store, end.offset, store.rules)} message(s) after it", True)]


def after_recovery(store: Store, findings: list[Finding], steps: list[RepairStep], files: Plan | None, recover: Plan,
                   last_timestamp: int | None, *, repairs: bool = True) -> tuple[list[RepairStep], list[Expected]]:
    """The steps ``repair`` predicts after the file fixes and ``recover``, and verify's table after them."""
    start = start_after_recovery(store, recover)
    fixed, cut = file_fix_steps(findings, steps, files), next_start_cut(store, recover, findings, start)
    left = _left_by_file_fixes(store, findings, fixed, files) if repairs else [f for f in findings if id(f) not in fixed]
    kept = cut_marked(predict_after_recovery(left, recover, store, last_timestamp), cut)
    t = triage(kept, last_timestamp)
    if not repairs:
        return [], [expected(f, False, fixed[id(f)]) for f in findings if id(f) in fixed] + up_to_cut(store, expected_after(t), cut)
    offsets = store.config_file("consumerOffset.json") is not None
    # the predicted rebuild-cq (if it can be planned): queue ends for the offsets' rows, and its misplaced entries (lost data)
    rebuild = []
    if t.queues and (offsets or any(f.kind in LOST_KINDS for f in kept)):
        with contextlib.suppress(Refused, BadInput):
            rebuild = [plan_queue_rebuild(store, t.queues, start.offset if start is not None else None)]
    if offsets and rebuild:
        t = triage(recovered_offset_findings(store, kept, recover, *rebuild), last_timestamp)
    renumbered = [expected(g, True) for plan in rebuild for q in plan.queues for g in misplaced_findings(store, q)]
    return steps_of(t), up_to_cut(store, t.lost + renumbered, cut)


def plan_repair(store: Store | None, root: Path, recover: Plan | None, findings: list[Finding] | None, last_timestamp: int | None, *,
                recover_error: str | None = None, timer_log_file_size: int | None = None, readings: set[bool] | None = None) -> RepairPlan:
    """The whole repair as shown before ``--yes``: file fixes and recovery exact, later steps predicted."""
    steps, files = plan_file_fixes(root, store, timer_log_file_size, readings)
    notes = []
    sound = findings is not None and not findings and not steps  # before the later steps
    if recover is not None and not recover.is_empty and not sound:  # a sound store is left alone
        cl = recover.commitlog
        why = "the broker's own start-up recovery, exactly (see `mqtool recover`)"
        if cl is not None and cl.end_is_damage:
            why += f": the commit log is cut at {cl.valid_end} ({cl.end_reason})"
        steps.append(RepairStep("recover", False, why, tuple(a.path for a in recover.actions if a.path)))
    remaining: list[Expected] = []
    later: list[RepairStep] = []
    if findings is not None and recover is not None:
        later, remaining = after_recovery(store, findings, steps, files, recover, last_timestamp)
        steps += later
    elif recover_error is not None:
        notes.append(f"the broker's recovery and the steps after it are planned once the file fixes are applied ({recover_error})")
    if recover is not None and recover.lost is not None and recover.lost.lost_now:
        notes.append(f"the recovery's cut loses {recover.lost.lost_now} message(s) ({recover.lost.bytes - recover.lost.stale_bytes} bytes): see the recovery plan")
    if later:  # none (a sound store, or the recovery alone): no step after the recovery to plan again
        notes.append("the steps after the recovery are planned again on the recovered store when applied")
    guess = store.version_guess if store is not None else None
    if guess is not None and guess.version is None and any(s.beyond_broker for s in steps):
        notes.append(f"the broker version is not decided ({guess.label}): each later step is planned under every candidate, and where "
                     "they differ repair refuses and undoes the steps it applied; --broker-version avoids that")
    return RepairPlan(str(Path(root).resolve()), int(time.time() * 1000), tuple(steps), files, recover, recover_error, tuple(remaining), tuple(notes))

