"""``apply``: carry out a plan's actions in order, with backups and a journal. Each action is idempotent given the backup set, so
an apply killed anywhere and resumed converges to the same bytes. ``MQTOOL_TEST_KILL_AT=N`` (or ``=LABEL``) kills the process at
its N-th durability point (or the first of that label), for tests."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import json
import os
import shutil
import signal
import stat
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .. import activity
from ..errors import BadInput, MqtoolError, Refused, StoreInUse
from ..handoff import Stage
from ..formats import checkpoint as cpfmt, commitlog as clfmt, consumequeue as cqfmt, dledger as dlfmt, timer as tfmt, index as ixfmt
from ..dispatch.scanner import DispatchCache, TopicTable, after_phys, consume_queue_entries, phase_scanner
from ..recovery.planparts import file_crc32, multi_dispatch, put_index
from ..recovery.plans import Plan
from ..store.mappedfile import sigbus_says
from ..store.rules import VersionRules
from ..store import Store, StoreConfig
from ..store.version import BrokerVersion
from .writers import ConsumeQueueWriter, IndexWriterService, QueueState
from .backup import (RESTORE_ROOM, STAGING_DIR, WIDEST, BackupSet, clear_pending, final_manifest_size, finish_command, interrupted_apply_ways,
                     manifest_bytes, new_manifest, read_pending, refuse_backup_inside, restore, staging_path, undo_command, unfinished_restore_line,
                     work_path, write_pending)
from .heap import release_free_heap
from ..fileops import (copy_sparse, deleted_on_failure, fsync_dir, fsync_path, install, left_unchanged, makedirs, naming, owner_for, remove,
                       shell_path, write_atomic, write_range, zero_range)


class ApplyError(MqtoolError):
    """The files do not match what the plan expects (a bug or a concurrent change)."""


class PlanMismatch(ApplyError):
    """What the apply computed differs from what the plan says (found before the first destructive step)."""


class ApplyIOError(BadInput):
    """The file system refused a write: the apply stopped at a safe point; ``cause``: path and reason alone."""

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause or message


STAGED = "staged"  # under the staging directory: the dispatch's files, laid out as in the store

_kill_counter = 0


def durability_point(label: str) -> None:
    """A place where a kill -9 must leave a recoverable store (``MQTOOL_TEST_KILL_SIGNAL=INT``: a Ctrl-C)."""
    global _kill_counter
    target = os.environ.get("MQTOOL_TEST_KILL_AT")
    if not target:
        return
    _kill_counter += 1
    if (str(_kill_counter) if target.isdigit() else label) == target:
        os.kill(os.getpid(), signal.SIGINT if os.environ.get("MQTOOL_TEST_KILL_SIGNAL") == "INT" else signal.SIGKILL)


class StopRequests:
    """SIGINT during an apply is recorded and raised at the next ``check``, before the next write."""

    requested = False
    active = False
    outside = None  # the SIGINT handler deferred_interrupts replaced (``interrupts_raised`` puts it back)

    @classmethod
    def check(cls) -> None:
        if cls.requested:
            cls.requested = False
            raise KeyboardInterrupt

    @classmethod
    def _record(cls, signum, frame) -> None:
        cls.requested = True


@contextlib.contextmanager
def deferred_interrupts():
    """SIGINT recorded for ``StopRequests.check`` while the block runs (nested: the outer one counts)."""
    if StopRequests.active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, StopRequests._record)
    StopRequests.active, StopRequests.requested, StopRequests.outside = True, False, previous
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        StopRequests.active = StopRequests.requested = False


@contextlib.contextmanager
def interrupts_raised():
    """Inside ``deferred_interrupts``, a block that writes nothing: Ctrl-C is raised at once."""
    if not StopRequests.active or threading.current_thread() is not threading.main_thread():
        yield
        return
    StopRequests.check()
    signal.signal(signal.SIGINT, signal.default_int_handler if StopRequests.outside is None else StopRequests.outside)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, StopRequests._record)


_CONFIG_OPTIONS = ("commitlog_file_size", "consume_queue_file_size", "hash_slot_num", "index_num", "message_index_enable",
                   "message_index_safe", "check_crc_on_recover", "delay_levels", "timer_log_file_size")


def store_config(plan: Plan) -> StoreConfig:
    """The store settings the plan was made with (``planparts.config_options``), so it reopens the same log."""
    given = {name: plan.options[name] for name in _CONFIG_OPTIONS if name in plan.options}
    where = {"commitlog_dirs": tuple(Path(d) for d in plan.options.get("commitlog_dirs") or ()) or None, "dledger": plan.options.get("dledger"),
             "dledger_data_path": Path(plan.options["dledger_data_path"]) if plan.options.get("dledger_data_path") else None,
             "dledger_self_id": plan.options.get("dledger_self_id")}
    return StoreConfig(**given, **where, enable_multi_dispatch=plan.options.get("multi_dispatch", False))


def check_inputs(root: Path, plan: Plan) -> None:
    """Refuse a saved plan once any file it read or changes differs from when it was made, or an op in it is none ``KEEPS`` knows."""
    unknown = sorted({a.op for a in plan.actions} - KEEPS.keys())
    if unknown:
        raise BadInput(f"the plan's action {unknown[0]!r} is no operation mqtool applies: not a valid mqtool plan")
    for fp in plan.inputs:
        path = root / fp.path
        if not path.exists():
            raise Refused(f"{fp.path} no longer exists: the store changed since the plan was made; plan again")
        st = path.stat()
        if st.st_size != fp.size or st.st_mtime_ns != fp.mtime_ns:
            raise Refused(f"{fp.path} changed since the plan was made (size or mtime differ); plan again")
        if fp.crc32 is not None and file_crc32(path) != fp.crc32:
            raise Refused(f"{fp.path} changed since the plan was made (content differs); plan again")
    known = {fp.path for fp in plan.inputs}
    for rel in planned_queue_files(plan, ("create",)) + planned_index_files(plan, ("create",)):
        if rel not in known and (root / rel).exists():
            raise Refused(f"{rel} appeared since the plan was made; plan again")
    for rel in [a.path for a in plan.actions if a.path] + planned_queue_files(plan, None) + planned_index_files(plan, None):
        if rel not in known and _outside(rel):  # an edited plan: a commit log outside the store is read, so fingerprinted
            raise Refused(f"the plan writes {rel}, outside the store and not a file it read: it was not made for this store; plan again")


# What each op keeps before it writes (``Executor._back_up`` keeps it, ``refuse_no_room`` counts it): "range" (``kept_range``),
# "entry" (``moves_entry``), "file" the whole file, "dispatch" the files it installs. Any other op is refused (``check_inputs``).
KEEPS = {**dict.fromkeys(("zero-range", "write-blank", "write-int64", "fill-units", "write-dledger-index"), "range"),
         **dict.fromkeys(("delete", "quarantine", "restore-config"), "entry"),
         **dict.fromkeys(("resize", "pad-blank", "write-checkpoint", "write-dledger-checkpoint"), "file"), "write-dispatch": "dispatch"}


def kept_range(action) -> tuple[int, int]:
    """The bytes a "range" op overwrites: ``write-blank`` its 8-byte blank header, the others ``start``..``end``."""
    return action.start, action.start + clfmt.BLANK_HEADER_SIZE if action.op == "write-blank" else action.end


def changed_files(plan: Plan, action) -> list[str]:
    """The store files ``action`` changes."""
    if action.op == "write-dispatch":
        return planned_queue_files(plan) + planned_index_files(plan)
    return [action.path] if action.path else []


def moves_entry(path: Path, op: str) -> bool:
    """Whether ``delete``/``quarantine`` renames the entry into the backup: a symlink, or a directory quarantined."""
    return op in ("delete", "quarantine") and (path.is_symlink() or op == "quarantine" and path.is_dir())


def journal_room(plan: Plan) -> int:
    """The most bytes the journal of an apply of ``plan`` can hold, every number at its widest (``WIDEST``)."""
    w = WIDEST
    events = [{"ev": "lock", "state": [w, w]}, {"ev": "complete"}, {"ev": "restore-started"}, {"ev": "restored", "ms": w}]
    for index, action in enumerate(plan.actions):
        files = changed_files(plan, action)
        events.append({"ev": "step-done", "index": index, "op": action.op, "path": action.path, "after": dict.fromkeys(files, [w, w])})
        if KEEPS[action.op] == "range":
            events.append({"ev": "backup-range", "path": action.path, "start": w, "end": w, "size": w, "mtime_ns": w})
        for rel in files:
            events.append({"ev": "backup-file", "path": rel, "size": w, "mtime_ns": w, "how": "copy", "uid": w, "gid": w, "mode": w})
            events.append({"ev": "create", "path": rel})
            events.append({"ev": "move-entry", "path": rel, "how": "copy"})
            events.append({"ev": "move-entry", "path": rel})
            events.extend({"ev": "create-dir", "path": str(folder)} for folder in Path(rel).parents[:-1])
    return sum(len(json.dumps(e, ensure_ascii=False).encode()) + 1 for e in events)


def bookkeeping_room(root: Path, plan: Plan, step: str | None = None, plan_file: Path | None = None) -> tuple[int, int]:
    """The bytes of the manifest ``BackupSet.create`` writes, and of the records written once the store changes (journal, final
    manifest, ``RESTORE_ROOM``), which ``create`` reserves first (``RESERVE``) so the bookkeeping finishes on a full disk."""
    manifest = new_manifest(root, plan.to_dict(), step, plan_file)
    paths = list(dict.fromkeys(rel for a in plan.actions for rel in changed_files(plan, a)))
    return len(manifest_bytes(manifest)), journal_room(plan) + final_manifest_size(manifest, paths) + RESTORE_ROOM


def backup_room(root: Path, plan: Plan, backup_dir: Path, step: str | None = None, plan_file: Path | None = None) -> tuple[int, int]:
    """The bytes the backup of ``plan`` takes on ``backup_dir``'s file system, and of them the ``RESERVE``: ranges and records,
    then whole files no hard link keeps (``moves_entry``, ``link_or_copy``) and the manifest, each rounded up to a block."""
    where = next(p for p in (backup_dir.absolute(), *backup_dir.absolute().parents) if p.exists())
    device, block = os.stat(where).st_dev, os.statvfs(where).f_frsize or 4096
    ranges = [end - start for start, end in (kept_range(a) for a in plan.actions if KEEPS[a.op] == "range")]
    whole = [rel for a in plan.actions if KEEPS[a.op] != "range" for rel in changed_files(plan, a) if not moves_entry(root / rel, a.op)]
    sizes = []
    for rel in dict.fromkeys(whole):
        with contextlib.suppress(OSError):
            st = os.stat(root / rel)  # the file a symlink names, as ``link_or_copy`` keeps it
            if stat.S_ISREG(st.st_mode) and st.st_dev != device:
                sizes.append(min(st.st_size, st.st_blocks * 512))
    manifest, records = bookkeeping_room(root, plan, step, plan_file)
    reserve = sum(-(-n // block) * block for n in (*ranges, records))  # the ranges too: kept on the store's disk, if it is the same
    return sum(-(-n // block) * block for n in (*sizes, manifest)) + reserve, reserve


def refuse_no_room(root: Path, plan: Plan, backup_dir: Path, step: str | None = None, later: tuple = (), plan_file: Path | None = None) -> int:
    """Refuse, before the first change, an apply whose backup (with the ``later`` stages') cannot fit on ``backup_dir``'s file
    system (``backup_room``); returns the ``RESERVE`` to take."""
    needed, reserve = backup_room(root, plan, backup_dir, step, plan_file)
    needed += sum(backup_room(root, then, backup_dir, name)[0] for name, then in later)
    where = next(p for p in (backup_dir.absolute(), *backup_dir.absolute().parents) if p.exists())
    free = shutil.disk_usage(where).free
    if needed > free:
        stages = f" (this stage and the {len(later)} planned after it)" if later else ""
        raise Refused(f"{shell_path(backup_dir)}: the backup needs {needed} bytes{stages} and its file system has {free} free; nothing changed: "
                      "free space there or give a --backup-dir with room")
    return reserve


def _outside(rel: str) -> bool:
    """Whether a store-relative path leaves the store lexically (absolute, or up through ``..``)."""
    parts = Path(os.path.normpath(rel)).parts
    return not parts or Path(rel).is_absolute() or parts[0] == ".."


def planned_queue_files(plan: Plan, actions=("create", "rewrite")) -> list[str]:
    """The plan's consume queue files (store-relative) whose action is one of ``actions`` (None: any)."""
    return [f"consumequeue/{q.topic}/{q.queue_id}/{f.name}" for q in plan.queues for f in q.files if actions is None or f.action in actions]


def planned_index_files(plan: Plan, actions=("append", "create", "rewrite")) -> list[str]:
    """The plan's index files whose action is in ``actions`` (None: any but ``unchanged``)."""
    wanted = (lambda action: action != "unchanged") if actions is None else (lambda action: action in actions)
    return [f"index/{f.name}" for f in plan.index.files if wanted(f.action)] if plan.index else []


@dataclass
class Executor:
    root: Path
    plan: Plan
    backup: BackupSet
    progress: Callable[[str], None] | None = None
    cache: DispatchCache | None = None  # the plan's dispatch batches, when planned in this process
    changing: bool = False  # an action has begun: the store may differ from before the apply

    @property
    def staging(self) -> Path:
        return self.root / STAGING_DIR

    def run(self) -> None:
        """``_run``; a bug puts the store back from the backup, so an exit 5 never leaves it half-written."""
        fresh = not self.backup.journal.events()
        try:
            self._run()
        except KeyboardInterrupt:
            if fresh and not self.changing:  # stopped before its first action: nothing changed
                clear_pending(self.root)
                self.backup.discard()
            raise
        except PlanMismatch as exc:
            if not fresh:  # an interrupted apply finished here: its first steps were done before
                raise ApplyError(f"{exc}; the interrupted apply cannot be finished: undo it with: {undo_command(self.backup.dir)}; please report this") from None
            clear_pending(self.root)  # nothing was changed: the marker and the staged files go
            self.backup.discard()
            raise PlanMismatch(f"{exc}: the apply stopped before changing anything; please report this") from None
        except MqtoolError:
            raise
        except OSError as exc:
            cause = (f"{shell_path(exc.filename)}: " if exc.filename else "") + f"{exc.strerror or exc}"
            if fresh and not self.changing:  # refused before its first action (staging the dispatch): as for a Ctrl-C there
                with contextlib.suppress(OSError):  # left, the next run finishes an apply with nothing done
                    clear_pending(self.root)
                    self.backup.discard()
                raise ApplyIOError(f"{cause}; the apply stopped before it changed the store: fix this (a full disk: free space) "
                                   f"and run `{finish_command(self.root, self.backup.manifest)}` to apply it", cause) from None
            raise ApplyIOError(f"{cause}; the apply stopped at a safe point: fix this and run `{finish_command(self.root, self.backup.manifest)}` "
                               f"to finish it, or undo it with: {undo_command(self.backup.dir)}", cause) from None
        except Exception as exc:  # noqa: BLE001 - a bug: undone, then reported
            raise ApplyError(f"internal error while applying ({type(exc).__name__}: {exc}); {roll_back([self.backup])}; please report this") from exc

    def _run(self) -> None:
        write_pending(self.root, self.backup.dir)
        self.backup.note_lock_state()
        durability_point("pending")
        if any(a.op == "write-dispatch" and not self.backup.step_done(i) for i, a in enumerate(self.plan.actions)):
            with naming(self.staging):  # a full disk said as the store's: a bare "No space left on device" names none
                self._stage_dispatch()  # before the first destructive step: a file set unlike the plan's changes nothing
        last = {rel: index for index, action in enumerate(self.plan.actions) for rel in changed_files(self.plan, action)}
        for index, action in enumerate(self.plan.actions):
            if self.backup.step_done(index):
                continue
            StopRequests.check()
            self.changing = True
            if self.progress:
                self.progress(f"{action.op} {action.path}".rstrip())  # write-dispatch has no one path
            self._back_up(action)
            getattr(self, "_" + action.op.replace("-", "_"))(action)
            self.backup.mark_step(index, action.op, action.path, [rel for rel in changed_files(self.plan, action) if last[rel] == index])
            durability_point(f"step {index}")
        self.backup.finish()
        clear_pending(self.root)

    def _back_up(self, action) -> None:
        """Keep what ``action`` overwrites (``KEEPS``), durably, before it writes; a symlink or directory it removes is renamed
        into the backup as it is (``BackupSet.move_entry``), as ``File.delete`` removes the link, not its file."""
        kind, path = KEEPS[action.op], self.root / action.path
        if kind == "range":
            self.backup.backup_range(action.path, *kept_range(action))
            durability_point("range backed up")
        elif kind == "entry" and moves_entry(path, action.op):
            self.backup.move_entry(action.path)
            durability_point("entry moved")
        elif kind != "dispatch":
            self.backup.backup_file(action.path)
            if kind == "file" and not path.exists():
                self.backup.note_creates([action.path])
            durability_point("file backed up")

    # ---- actions: each writes once ``_back_up`` kept what it overwrites -------------------------

    def _zero_range(self, action) -> None:
        zero_range(self.root / action.path, action.start, action.end)

    def _delete(self, action) -> None:
        """The file deleted (``quarantine``: a stray file, which ``restore`` puts back); an entry moved is gone already."""
        remove(self.root / action.path)

    _quarantine = _delete

    def _resize(self, action) -> None:
        """The file padded with zeros or trimmed to ``action.end`` bytes, written aside and renamed over it (a hard-linked backup
        keeps the original); ``pad-blank``: an end-of-file blank from ``action.start``, then zeros."""
        path = self.root / action.path
        blank_at = action.start if action.op == "pad-blank" else None
        makedirs(path.parent, like_parent=True)
        tmp = work_path(self.root, path)
        with deleted_on_failure(tmp), left_unchanged(path):  # beside the file on another disk: the broker would list it
            if path.exists():
                copy_sparse(path, tmp)
            else:  # a file the plan creates (a missing DLedger index file): all zeros
                tmp.write_bytes(b"")
            if blank_at is not None:
                os.truncate(tmp, blank_at)  # the partial record's bytes go: zeros after the blank
            os.truncate(tmp, action.end)
            if blank_at is not None:
                encode = tfmt.encode_blank if Path(action.path).parts[0] == "timerlog" else clfmt.encode_blank
                write_range(tmp, blank_at, encode(action.end - blank_at))
            fsync_path(tmp)
            install(tmp, path, owner_for(path))
        fsync_dir(path.parent)

    _pad_blank = _resize

    def _write_at(self, action, data: bytes) -> None:
        write_range(self.root / action.path, action.start, data)

    def _write_blank(self, action) -> None:
        """An 8-byte end-of-file blank at ``start`` of a segment ``end`` bytes long (``logkinds.MixedFirstLoad``)."""
        self._write_at(action, clfmt.encode_blank(action.end - action.start))

    def _write_int64(self, action) -> None:
        """The big-endian int64 ``action.unit[0]`` at ``start`` (``repair._relinked_slots``)."""
        self._write_at(action, action.unit[0].to_bytes(8, "big", signed=True))

    def _fill_units(self, action) -> None:
        """Consume queue units ``start``..``end`` each become ``action.unit`` (a filler, or ``unit_fixes``)."""
        unit = cqfmt.ENTRY.pack(*(cqfmt.FILLER if action.unit is None else action.unit))  # None: a plan saved before units were planned, which promised (0, ...)
        self._write_at(action, unit * ((action.end - action.start) // cqfmt.ENTRY_SIZE))

    def _restore_config(self, action) -> None:
        """``config/X.json`` gets the bytes of its ``X.json.bak`` (ConfigManager.loadBak's source)."""
        self._write_whole(action, (self.root / (action.path + ".bak")).read_bytes())

    def _write_whole(self, action, data: bytes) -> None:
        write_atomic(self.root / action.path, data, self.staging, owner_for(self.root / action.path))

    def _write_checkpoint(self, action) -> None:
        fields = cpfmt.StoreCheckpoint(**self.plan.checkpoint.after)
        self._write_whole(action, cpfmt.encode_checkpoint(fields).ljust(cpfmt.CHECKPOINT_FILE_SIZE, b"\0"))

    def _write_dledger_checkpoint(self, action) -> None:
        """DLedger's ``checkpoint`` (committedIndex ``start``, endIndex ``end``), as a clean stop leaves it."""
        self._write_whole(action, dlfmt.encode_checkpoint_text(action.start, action.end).encode())

    def _write_dledger_index(self, action) -> None:
        """DLedger index units rewritten from their entries, as ``DLedgerMmapFileStore.recover`` does."""
        base = int(Path(action.path).name) + action.start
        with Store.open(self.root, store_config(self.plan), self.plan.broker_version) as store:
            units = store.commitlog.unit_bytes(base // dlfmt.INDEX_UNIT_SIZE, (base + action.end - action.start) // dlfmt.INDEX_UNIT_SIZE)
        self._write_at(action, units)

    def _write_dispatch(self, action) -> None:
        """The files ``_stage_dispatch`` wrote, installed whole with the owner and mode they replace."""
        staged = self.staging / STAGED
        parents = set()
        for rel in sorted(changed_files(self.plan, action)):
            StopRequests.check()
            final = self.root / rel
            makedirs(final.parent, like_parent=True)
            with left_unchanged(final):  # a copy across file systems refused: said as the store's file, not its temporary copy
                install(staged / rel, final, owner_for(final))
            parents.add(final.parent)
            durability_point("dispatched file moved")
        for d in sorted(parents):
            fsync_dir(d)

    # ---- consume queue and index files from the dispatch phases --------------------------------

    def _stage_dispatch(self) -> None:
        """Write and fsync the dispatch phases' files under ``STAGED`` and check them; the store is unchanged."""
        if self.staging.exists():
            shutil.rmtree(self.staging)  # an interrupted run's: written again from the same inputs
        plan, staged = self.plan, self.staging / STAGED
        makedirs(staged)
        queue_files, index_files = set(planned_queue_files(plan)), set(planned_index_files(plan))
        store = Store.open(self.root, store_config(plan), plan.broker_version)
        try:
            rules = VersionRules(BrokerVersion.parse(plan.broker_version))
            cq = self._queue_writer(store, rules) if queue_files else None
            ix = self._index_writer(store, rules) if index_files else None
            durability_point("dispatch prepared")
            wanted = {(q.topic, q.queue_id) for q in plan.queues if any(f.action != "delete" for f in q.files)}
            multi = multi_dispatch(store, rules)
            for number, phase in enumerate(plan.dispatch):
                if cq is not None:
                    for q in plan.queues:
                        seed = q.seeds[number] if number < len(q.seeds) else None
                        if seed is not None:
                            cq.seed_queue(q.topic, q.queue_id, QueueState(seed.write_pos, seed.max_phys_offset))
                if (cq is None or not phase.consume_queues) and (ix is None or not phase.index):
                    continue
                cached = self.cache.batches(number) if self.cache is not None else None
                if cached is not None:
                    # the plan's own batches: no scan says how far they reach
                    batches = activity.reached_by(cached, "writing queues and index", phase.start, lambda: store.commitlog.end_of_writes(phase.stop))
                    topics = self.cache.topics
                else:
                    topics = TopicTable()
                    batches = (after_phys(batch, phase.after_phys) for batch in phase_scanner(
                        store.commitlog, phase.start, phase.stop, discipline=phase.discipline, tags=phase.tags, delay_table=store.delay_table,
                        legacy_properties=rules.legacy_properties, index_enable=bool(plan.index and plan.index.enabled), index_rule=rules.index_rule,
                        check_crc=False, topics=topics))
                # the index (random slot access, the heavier half) is built in a second thread
                with in_thread(functools.partial(put_index, ix) if ix is not None and phase.index else None) as submit_index:
                    for batch in batches:
                        StopRequests.check()  # only the staging directory is written here
                        if cq is not None and phase.consume_queues:
                            for topic, qid, columns in consume_queue_entries(batch, topics.names, multi):
                                if (topic, qid) not in wanted:
                                    continue  # not planned to change (another queue, or all deduplicated)
                                cq.put_batch(topic, qid, *columns)
                        submit_index(batch)
            durability_point("dispatch written")
            with in_thread(lambda writer: writer.close()) as submit_close:
                if ix is not None:
                    submit_close(ix)  # fsync the index while the consume queues are fsynced here
                if cq is not None:
                    self._check_written(cq.close(), queue_files, "consume queue")
            if ix is not None:
                self._check_written(ix.written, index_files, "index")
            self._check_counts(cq, ix)
            fsync_dir(staged)
            durability_point("dispatch staged")
        finally:
            store.close()

    def _check_written(self, paths: list[Path], planned: set[str], what: str) -> None:
        written = {os.path.relpath(p, self.staging / STAGED) for p in paths}
        if written != planned:
            extra, missing = sorted(written - planned), sorted(planned - written)
            raise PlanMismatch(f"{what} files written differ from the plan (extra {extra[:3]}, missing {missing[:3]})")

    def _check_counts(self, cq: ConsumeQueueWriter | None, ix: IndexWriterService | None) -> None:
        """Entries and fillers written against what the plan counted."""
        if cq is not None:
            for q in self.plan.queues:
                written = cq.queues.get((q.topic, q.queue_id))
                if written is not None and (written.placed, written.fillers) != (q.added, q.fillers):
                    raise PlanMismatch(f"consume queue {q.topic}/{q.queue_id}: {written.placed} entries and {written.fillers} fillers written, the plan counted {q.added} and {q.fillers}")
        if ix is not None:
            planned = {f.name: f for f in self.plan.index.files if f.action in ("append", "create", "rewrite")}
            for r in ix.results:
                f = planned.get(r.name)
                if f is not None and (r.end.entry_count, r.end.end_phy_offset) != (f.entries_after, f.end_phy_offset):
                    raise PlanMismatch(f"index/{r.name}: {r.end.entry_count} entries to {r.end.end_phy_offset} written, the plan counted {f.entries_after} to {f.end_phy_offset}")

    def _queue_writer(self, store: Store, rules: VersionRules) -> ConsumeQueueWriter:
        writer = ConsumeQueueWriter(self.staging / STAGED / "consumequeue", store.consume_queue_file_size,
                                    dedup_by_end=rules.cq_dedup_by_end, repeat_guard=rules.cq_repeat_guard,
                                    tmp_path=functools.partial(staging_path, self.root))
        files = [(q, f, f"consumequeue/{q.topic}/{q.queue_id}/{f.name}") for q in self.plan.queues for f in q.files if f.action != "delete"]
        sources = self.backup.backup_files([rel for _, f, rel in files if f.action == "rewrite"])
        self.backup.note_creates([rel for _, f, rel in files if f.action == "create"])
        for q, f, rel in files:
            if f.action == "rewrite" and sources[rel] is None:
                raise ApplyError(f"{rel}: the file to rewrite is missing and was never backed up")
            writer.adopt_file(q.topic, q.queue_id, int(f.name), sources.get(rel), f.zero_from)
        return writer

    def _index_writer(self, store: Store, rules: VersionRules) -> IndexWriterService:
        ip = self.plan.index
        append, previous = None, None
        for f in ip.files:
            rel = f"index/{f.name}"
            if f.action == "append":
                source = self.backup.backup_file(rel)
                if source is None:
                    raise ApplyError(f"{rel}: the index file to append to is missing and was never backed up")
                append = (f.name, source)
                previous = read_index_header(source)
            elif f.action == "keep":
                previous = read_index_header(self.root / rel)
            elif f.action in ("create", "rewrite"):  # a rewritten file is backed up (``note_creates``)
                self.backup.note_creates([rel])
        # a rebuild's files take the names of the files it replaces, in order: those that hold its bytes placed, not written
        names = tuple(f.name for f in ip.files if f.action in ("unchanged", "rewrite"))
        return IndexWriterService(self.staging / STAGED / "index", ip.hash_slot_num, ip.index_num, previous=previous,
                                  taken_names={f.name for f in ip.files if f.action != "create"}, append_to=append, after_name=ip.after_name,
                                  counts_used_slots=rules.index_counts_used_slots, tmp_path=functools.partial(staging_path, self.root),
                                  names=names, unwritten=frozenset(f.name for f in ip.files if f.action == "unchanged"))


def roll_back(backups: list[BackupSet]) -> str:
    """Undo applies (given in the order applied) after an internal error; says what state that left."""
    try:
        for backup in reversed(backups):
            restore(backup, force=True)
    except Exception as exc:  # noqa: BLE001 - the error being reported comes first
        return f"undoing the changes failed too ({exc}): undo them with: {undo_command(backups[-1].dir)}"
    return "the changes were undone: the store is as it was"


@contextlib.contextmanager
def hold_store_lock(store_root: Path, force: bool = False):
    """Hold the POSIX lock on ``<root>/lock`` (byte 0, as ``FileChannel.tryLock(0, 1, false)``) while changing the store; a
    directory or socket there is ``repair``'s to move, a device node is never opened (``nextstart.open_refusal``)."""
    path = Path(store_root) / "lock"
    fd = None
    if path.exists() and (path.is_file() or stat.S_ISFIFO(path.stat().st_mode)):  # a FIFO opened O_RDWR does not wait
        try:
            fd = os.open(path, os.O_RDWR)
        except PermissionError:
            raise BadInput(f"{path}: permission denied (run as the broker's user)") from None
        except OSError as exc:
            if exc.errno != errno.EROFS:
                raise
            raise BadInput(f"{shell_path(store_root)}: on a read-only filesystem, nothing changed: remount it read-write, or copy the store and work on the copy") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            os.close(fd)
            fd = None
            if not force:
                raise StoreInUse(f"{path}: another process holds the store's lock (a broker started since?); nothing was changed: "
                                 "stop the broker first, or pass --force") from None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


@contextlib.contextmanager
def in_thread(work: Callable[[object], None] | None):
    """``submit(item)`` running ``work(item)`` in order in a second thread, errors raised at the block's end."""
    if work is None:
        yield lambda item: None
        return
    stage = Stage(work, 2, "mqtool-apply")
    try:
        yield stage.put
        stage.drain()
    finally:
        stage.close()


def read_index_header(path: Path) -> ixfmt.IndexHeader:
    with open(path, "rb") as f:
        return ixfmt.read_header(f.read(ixfmt.HEADER_SIZE).ljust(ixfmt.HEADER_SIZE, b"\0"))


# ---- entry points ---------------------------------------------------------------------------------


def apply_plan(plan: Plan, backup_dir: Path, *, progress=None, cache: DispatchCache | None = None, backed=None, step: str | None = None,
               later: tuple = (), plan_file: Path | None = None) -> BackupSet:
    """Apply ``plan`` backing up into ``backup_dir``; ``cache``: the planning's batches; ``backed()`` runs once the backup set
    exists; ``step``: the ``repair`` stage; ``later``: the stages after it whose room is checked too (``refuse_no_room``);
    ``plan_file``: the saved plan ``mqtool apply`` read it from."""
    root = Path(plan.store)
    if not root.is_dir():
        raise BadInput(f"{root}: the plan's store does not exist (moved or renamed since the plan was saved?): plan again on the store where it is")
    pending = read_pending(root)
    if pending is not None:
        raise Refused(f"{root}: an earlier apply was interrupted (backup {shell_path(pending)}); {interrupted_apply_ways(root, pending)}")
    with sigbus_says("the apply had not begun, so it changed nothing: check the disk and run the command again"):  # a saved plan's inputs
        check_inputs(root, plan)
    refuse_backup_inside(root, backup_dir)
    reserve = refuse_no_room(root, plan, backup_dir, step, later, plan_file)
    release_free_heap()  # what planning freed, before the writers' working set
    try:
        backup = BackupSet.create(backup_dir, root, plan.to_dict(), step, reserve, plan_file)
    except OSError as exc:
        cause = f"{shell_path(exc.filename or backup_dir)}: cannot create the backup: {exc.strerror or exc}"
        raise ApplyIOError(f"{cause}; nothing was changed: give a --backup-dir where it can be written (or free space there)", cause) from None
    if backed is not None:
        try:
            backed()
        except OSError as exc:
            backup.discard()
            cause = f"{shell_path(exc.filename or root)}: {exc.strerror or exc}"
            raise ApplyIOError(f"{cause}; nothing was changed", cause) from None
    Executor(root, plan, backup, progress, cache).run()
    return backup


def resume_pending(store_root: Path, progress=None) -> BackupSet | None:
    """Finish an apply that was interrupted on this store (None if there is none)."""
    pending = read_pending(store_root)
    if pending is None:
        return None
    backup = BackupSet.open(pending)
    if backup.restore_interrupted:  # finishing the apply now would keep the files the restore put back as done steps
        raise Refused(unfinished_restore_line(pending))
    plan = Plan.from_dict(backup.manifest["plan"])
    if backup.complete:
        clear_pending(store_root)
    else:
        Executor(Path(store_root).resolve(), plan, backup, progress).run()
    return backup

