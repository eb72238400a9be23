"""Repair commands (``truncate-dirty``, ``recover``, ``repair``, ``rebuild-cq``, ``rebuild-index``, ``apply``, ``restore``): each
plans first and changes nothing without ``--yes``, through ``mqtool.apply``; a store in use is refused unless ``--force``."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from .. import apply as writer  # its executor (and the kernels it loads) on first use
from ..apply import BackupSet, default_backup_dir, read_pending, restore
from ..apply.backup import (
    BACKUPS_DIR, REPAIR_MARKER, RESERVE, STAGE_NAME, applied_backup, changed_by_others, clear_repair_mark, finish_command, interrupted_apply_ways,
    later_backups, leftover_temporaries, moved_from, newest_first, read_manifest, refuse_backup_inside, refuse_changed, refuse_incomplete,
    refuse_moved, remove_leftovers, repair_stages, stopped_repair, undo_command, unfinished_restore_line, write_pending)
from ..apply.heap import release_free_heap
from ..fileops import TMP_SUFFIX, salvage_command, write_atomic
from ..errors import EXIT_FINDINGS, BadInput, MqtoolError, Refused, StoreInUse, UsageError
from ..recovery.plans import CommitLogPlan, LostMessages, Plan, PlanOptions
from ..store.liveness import store_users
from ..store.store import STORE_PARTS
from ..store.mappedfile import sigbus_next, sigbus_says
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, broker_config_of, guarded, note, open_store, shell_path, silence_stdout, this_command_with_yes
from .state import State
from .store_state import restore_interrupted, stopped_repair_line, stopped_repair_state
from .output import OutputFormat, Screen, emit_document, iso_ms, kv_table, titled_table
from .progress import scans_shown

TABLE_LOST = 50  # lost messages shown as a table (JSON lists up to --lost-limit)

NOT_APPLIED = "refused without --yes: the plan is only shown, nothing changed; re-run with --yes to apply it"  # exit 4, as documented
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Apply the changes (without it the plan is printed and nothing changes).")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the plan only, exit 0.")]
PlanOutOpt = Annotated[Optional[Path], typer.Option("--plan-out", metavar="FILE", help="Save the plan as JSON for `mqtool apply FILE --yes`; nothing changes.")]


def _backup_dir(value: str) -> Path:
    """``--backup-dir``, made absolute; an empty one is a usage error, not the current directory."""
    if not value:
        raise typer.BadParameter("an empty path: name the directory to keep the backup in", param_hint="'--backup-dir'")
    return Path(value).absolute()  # the undo line names it as it is from any directory


BackupDirOpt = Annotated[
    Optional[Path],
    typer.Option("--backup-dir", metavar="DIR", parser=_backup_dir, help="Where to back up what changes; by default, beside the store:\n\n\b\n.mqtool-backups/<store>-<time>-<command>"),
]
ForceOpt = Annotated[bool, typer.Option("--force", help="Run even though another process uses the store (dangerous).")]
RestoreYesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Restore (without it what it would put back is printed).")]
PlanMaker = Callable[..., Plan]  # (store, with_crc=, cache=) -> the plan, as run_modifying calls it
StoreRootArg = Annotated[Path, typer.Argument(metavar="STORE", help="Store root directory.")]
# the options of run_modifying, last in each command's signature (and its --help) in this order
FLOW_OPTIONS = (("yes", YesOpt, False), ("dry_run", DryRunOpt, False), ("plan_out", PlanOutOpt, None), ("backup_dir", BackupDirOpt, None),
                ("force", ForceOpt, False), ("fmt", FormatOpt, OutputFormat.table), ("broker_config", BrokerConfigOpt, None), ("broker_version", BrokerVersionOpt, None))


# imported when a command plans or writes (the commands' ``--help`` go without them)
planners = functools.partial(importlib.import_module, "mqtool.recovery.planners")
repair_planner = functools.partial(importlib.import_module, "mqtool.recovery.repair")
planparts = functools.partial(importlib.import_module, "mqtool.recovery.planparts")
executor = functools.partial(importlib.import_module, "mqtool.apply.executor")


# ---- shared flow ------------------------------------------------------------------------------


class Interrupted(MqtoolError):
    """Ctrl-C while a repair command was changing the store (exit 130, as for any interrupt)."""

    exit_code = 130


@contextlib.contextmanager
def planning():
    """Ctrl-C while a plan is made, which writes nothing: said so (exit 130), not a bare "interrupted"."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted("interrupted while planning: the plan changed nothing") from None


NOTHING_CHANGED = "nothing was changed: check the disk and run the command again"  # a SIGBUS before a writing command's apply


def said_changing(root: Path, backup: Path) -> Callable[[], None]:
    """Once an apply has begun changing the store (its backup set made: ``apply_plan``'s ``backed``), a SIGBUS's line says
    the store may be partly changed and how to undo it; until then, that nothing was changed (``NOTHING_CHANGED``)."""
    return lambda: sigbus_next(f"the store may be partly changed: `mqtool info {shell_path(root)}` says whether an apply was interrupted "
                               f"and the command that finishes it; or undo it with: {undo_command(backup)}")


@contextlib.contextmanager
def explain_interrupt(root: Path, backup: Path):
    """Ctrl-C while applying: one line on the store's state and how to finish or undo the apply."""
    undo = undo_command(backup)
    existed = backup.exists()
    try:
        yield
    except KeyboardInterrupt:
        # what restore undoes: a backup set or a repair's stages, unless none has a journal event yet (``BackupSet.unused``)
        sets = repair_stages(backup) or ([backup] if (backup / "manifest.json").exists() else [])
        if read_pending(root) is not None or not all(BackupSet.unused(s) for s in sets):
            finish = f"`{finish_command(root, read_manifest(sets[-1]))}`" if sets else "the same command again (with --yes)"
            raise Interrupted(f"interrupted: partly applied: finish with {finish}, or undo with: {undo}") from None
        for unused in sets:
            for name in ("journal.jsonl", "manifest.json", RESERVE):
                with contextlib.suppress(OSError):
                    (unused / name).unlink()
        if not existed:  # made for the apply, which began nothing: empty directories restore would refuse
            for made in [*(backup.iterdir() if backup.is_dir() else ()), backup]:
                with contextlib.suppress(OSError):
                    made.rmdir()
        raise Interrupted("interrupted before anything was changed") from None
    finally:
        sigbus_next()  # applied, or stopped and said: a SIGBUS after it claims nothing of the store


def emit_plan(doc: dict, fmt: OutputFormat, render, backup: Path | None = None) -> None:
    """The plan (or backup) on stdout, with ``backup``: the directory ``mqtool restore`` undoes a ``--yes`` apply from. From then
    on a closed stdout or stderr drops what is written: the apply and exit code never depend on who reads the output."""
    State.output_may_close = True
    try:
        emit_document(doc if backup is None else {**doc, "backup": str(backup)}, fmt, render)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


USE = {"lock": "holds the POSIX lock on", "open": "has open", "mapped": "has mapped"}


def describe_users(users, most: int = 3) -> str:
    """``pid 7016 (java ...) holds the POSIX lock on X, has open Y``, at most ``most`` processes, shell-quoted."""
    by_pid: dict[int, list] = {}
    for u in users:
        by_pid.setdefault(u.pid, []).append(u)
    parts = []
    for pid, uses in list(by_pid.items())[:most]:
        what = list(dict.fromkeys(f"{USE.get(u.how, u.how)} {shell_path(u.path)}" for u in uses))  # quoted as every path said
        parts.append(f"pid {pid} ({uses[0].command or '?'}) " + ", ".join(what[:2]) + (f" and {len(what) - 2} more files" if len(what) > 2 else ""))
    more = len(by_pid) - most
    return "; ".join(parts) + (f"; and {more} more processes" if more > 0 else "")


def check_not_in_use(root: Path, extra_dirs, force: bool) -> None:
    """Refused (``StoreInUse``) while a process holds the store's lock or has a file open or mapped under it, its commit log
    (a link to another disk, as ``storePathCommitLog`` puts it) or ``extra_dirs``."""
    users = store_users(root, [root / "commitlog", *extra_dirs])
    if not users:
        return
    detail = describe_users(users)
    if not force:
        raise StoreInUse(f"{shell_path(root)} is in use ({detail}); stop the broker first, or pass --force")
    note(f"warning: --force: the store is in use ({detail})")


def note_interrupted(root: Path) -> None:
    """A plan printed without applying (``--dry-run``, ``--plan-out``) on a half-applied or partly restored store."""
    pending = read_pending(root)
    if restore_interrupted(pending):
        note(f"{unfinished_restore_line(pending)}; this plan is made on the partly restored store")
        return
    note(f"an earlier apply on this store was interrupted (backup {shell_path(pending)}): this plan is made on the half-applied store; "
         f"{interrupted_apply_ways(root, pending)}")


def _finish_interrupted(root: Path, yes: bool, force: bool) -> Path | None:
    """Finish the interrupted apply on ``root`` under the store's lock and return its backup (None: none)."""
    pending = read_pending(root)
    if pending is None:
        if yes and leftover_temporaries(root):
            with executor().hold_store_lock(root, force):
                _note_removed([str(p.relative_to(root)) for p in remove_leftovers(root)])
        return None
    if restore_interrupted(pending):  # finishing the apply would count what the restore put back as done: the restore first
        raise Refused(unfinished_restore_line(pending))
    if not yes or not pending.exists() or moved_from(root, pending) is not None:  # moved: its backup restores where it was only
        raise Refused(f"an earlier apply on this store was interrupted (backup {shell_path(pending)}): {interrupted_apply_ways(root, pending)}")
    note(f"finishing the interrupted apply first (backup {shell_path(pending)})")
    with executor().hold_store_lock(root, force), sigbus_says(f"the interrupted apply is still not finished: check the disk and run the "
                                                              f"command again to finish it, or undo it with: {undo_command(pending)}"):
        writer.resume_pending(root, progress=lambda m: note(f"  {m}"))
    sigbus_next(f"the interrupted apply was finished (backup {shell_path(pending)}), nothing else was changed: check the disk and run the command again")
    return pending


def finished_was_asked(done: dict, plan: Plan) -> str | None:
    """Why finishing the interrupted apply was all re-running asked for (``plan`` is empty), else None."""
    return f"the interrupted {done.get('command')} apply is finished, which leaves nothing to do" if plan.is_empty else None


def refuse_stopped_repair(root: Path) -> None:
    """Any other command's changes would land between the stages of a ``repair`` stopped in this store: refused."""
    stopped = stopped_repair_state(root)
    if stopped is not None:
        raise Refused(stopped_repair_line(root, stopped) + ", before any other change")


def refuse_contradictions(yes: bool, dry_run: bool, plan_out: Path | None = None) -> None:
    """--yes applies; --dry-run and --plan-out promise nothing changes: both at once is a usage error."""
    for given, name in ((dry_run, "--dry-run"), (plan_out is not None, "--plan-out")):
        if yes and given:
            raise UsageError(f"--yes applies the plan and {name} changes nothing: give one of them")


def run_modifying(command: str, store_path: Path, make_plan, *, yes, dry_run, plan_out, backup_dir, force, fmt, broker_config, broker_version) -> None:
    refuse_contradictions(yes, dry_run, plan_out)
    sigbus_next(NOTHING_CHANGED)  # the store read, planned: a SIGBUS until the apply (``explain_interrupt``) changed nothing
    if plan_out is not None and plan_out.is_dir():  # refused before the plan is made, naming the path given (not its temporary file)
        example = shell_path(plan_out / "plan.json")
        raise BadInput(f"{plan_out}: Is a directory: --plan-out names the plan's file, e.g. --plan-out {example}")
    store = open_store(store_path, broker_config, broker_version)
    root = store.path()
    applying = not dry_run and plan_out is None  # else the plan is only shown or saved
    finished = None  # the backup of an interrupted apply this run finished first
    if applying:
        check_not_in_use(root, [s.path.parent for s in store.commitlog.segments[:1]], force)
        refuse_stopped_repair(root)
        if read_pending(root) is not None:
            store.close()
            finished = _finish_interrupted(root, yes, force)
            store = open_store(store_path, broker_config, broker_version)
        else:
            _finish_interrupted(root, yes, force)
    elif read_pending(root) is not None:
        note_interrupted(root)
    from ..dispatch.scanner import DispatchCache

    cache = DispatchCache() if applying else None
    with store, scans_shown(), planning():
        plan = naming_broker_config(make_plan(store, with_crc=plan_out is not None, cache=cache), broker_config)
    done = None if finished is None else read_manifest(finished)["plan"]
    why = None if done is None else finished_was_asked(done, plan)
    if why is not None:  # finishing it was the job: the plan applied (not a second one) and its backup
        emit_plan(done, fmt, render_plan, finished)
        note_undo(f"{why}; backup in {shell_path(finished)}", finished)
        return
    target = (backup_dir or default_backup_dir(root, command)) if applying and yes and not plan.is_empty else None
    emit_plan(with_next_start(plan.to_dict(), plan), fmt, render_plan, target)
    _note_damage(plan)  # again on stderr, after the plan: the last thing the operator reads before --yes
    if plan_out is not None:
        write_atomic(plan_out, plan.to_json().encode())
        note(f"plan saved to {shell_path(plan_out)}; apply it with: mqtool apply {shell_path(plan_out)} --yes")
    if not applying:
        return
    if plan.is_empty:
        note_nothing_to_do(plan)
        return
    if not yes:
        raise Refused(f"{NOT_APPLIED}: {this_command_with_yes()}")
    with explain_interrupt(root, target), executor().hold_store_lock(root, force), writer.deferred_interrupts(), scans_shown():
        backup = writer.apply_plan(plan, target, progress=lambda m: note(f"  {m}"), cache=cache, backed=said_changing(root, target))
        s = backup.summary()  # said with interrupts still deferred: a Ctrl-C after the last write is ignored
        note_undo(f"{command} applied; backup of {len(s['files'])} file(s) and {len(s['ranges'])} range(s) in {shell_path(target)}", target, finished)


def naming_broker_config(plan: Plan, broker_config: Path | None) -> Plan:
    """``plan`` with the ``--broker-config`` it was made with in its options, as shown, saved (``--plan-out``) and backed up alike:
    the backup's plan is the plan shown, and the command that finishes an interrupted apply (``finish_command``; a saved plan's
    own ``apply`` once its file is gone) plans with the same broker.conf."""
    return plan if broker_config is None else dataclasses.replace(plan, options={**plan.options, "broker_config": str(Path(broker_config).resolve())})


def note_undo(done: str, target: Path, then: Path | None = None) -> None:
    """What an apply did and where its backup is, then the command that undoes it, even with ``-q`` (as pg_resetwal and etcdutl
    say what they did); ``then``: the backup of the interrupted apply finished first, undone after it."""
    note(done, always=True)
    after = "" if then is None else f", then the interrupted apply it finished first: mqtool restore {shell_path(then)} --yes"
    note(f"undo with: mqtool restore {shell_path(target)} --yes{after}", always=True)


def _note_damage(plan: Plan) -> None:
    """The plan's ``DAMAGE:`` notes (valid messages a recovery cut throws away) on stderr."""
    for n in plan.notes:
        if n.startswith("DAMAGE:"):
            note(n)


MODIFYING_EXIT_CODES = """
    \b
    Exit codes: 0 applied (--yes), nothing to do, or the
    plan shown (--dry-run) or saved (--plan-out); 3 bad
    input; 4 refused: the plan printed without --yes, a
    live broker, broker versions whose plans differ, a
    backup that would not fit."""  # \b: lines kept (no option split at a hyphen), short enough for 60 columns


def modifying(command: str):
    """A ``run_modifying`` command: the function takes its own options and returns its ``PlanMaker``."""

    def decorate(fn):
        flow = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default) for name, kind, default in FLOW_OPTIONS]
        own = list(inspect.signature(fn, eval_str=True).parameters.values())
        store = inspect.Parameter("store", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=StoreRootArg)

        @functools.wraps(fn)
        def run(store: Path, **options) -> None:
            run_modifying(command, store, fn(**{p.name: options.pop(p.name) for p in own}), **options)

        run.__signature__ = inspect.Signature([store, *own, *flow], return_annotation=None)
        run.__doc__ = fn.__doc__.replace("\n\n    \b\n    Example:", f"\n{MODIFYING_EXIT_CODES}\n\n    \b\n    Example:", 1)
        return guarded(run)

    return decorate


def note_nothing_to_do(plan: Plan) -> None:
    """An empty plan: "nothing to do", unless one of its notes already says why (rebuild-cq's)."""
    if not any(n.startswith("nothing to") for n in plan.notes):
        note("nothing to do")


def with_next_start(doc: dict, recover: Plan | None) -> dict:
    """The plan document with ``next_start``: what the broker's recovery of ``recover`` keeps and drops (``store.nextstart``)."""
    from ..store.nextstart import NextStart

    found = None if recover is None else NextStart.of_plan(recover)
    return doc if found is None else {**doc, "next_start": found.as_dict()}


# ---- commands -----------------------------------------------------------------------------------


@modifying("truncate-dirty")
def truncate_dirty(
    full_scan: Annotated[bool, typer.Option("--full-scan", help="Validate every segment from the first, not only those the broker's recovery scans.")] = False,
    lost_limit: Annotated[int, typer.Option("--lost-limit", min=0, metavar="N", help="List at most this many lost messages in the plan.")] = 1000,
) -> PlanMaker:
    """Cut the commit log after its last valid record: zero the dirty bytes of that segment, delete
    later segments, and cut consume queue entries at or past the new end.

    \b
    Example:
      mqtool truncate-dirty /data/rocketmq/store --plan-out /tmp/plan.json
    """
    opts = PlanOptions(full_scan=full_scan, lost_limit=lost_limit)
    return lambda s, with_crc, cache: planners().plan_truncate_dirty(s, opts, with_crc=with_crc, cache=cache)


@modifying("recover")
def recover(
    abnormal: Annotated[Optional[bool], typer.Option("--abnormal/--normal", help="Recovery after a crash / after a clean stop (default: --abnormal if the abort file exists).", show_default=False)] = None,
    index_safe: Annotated[Optional[bool], typer.Option("--index-safe/--no-index-safe", help="messageIndexSafe: also start abnormal recovery before the index checkpoint, so no index entry is lost (default: broker.conf, else off).", show_default=False)] = None,
    lost_limit: Annotated[int, typer.Option("--lost-limit", min=0, metavar="N", help="List at most this many lost messages in the plan.")] = 1000,
) -> PlanMaker:
    """Do offline what the broker's start-up recovery would do: cut the commit log at the first
    invalid record, re-dispatch missing consume queue and index entries, update the checkpoint
    and remove the abort file, so a broker started afterwards cuts nothing.

    \b
    Example:
      mqtool recover /data/rocketmq/store
    """
    mode = None if abnormal is None else ("abnormal" if abnormal else "normal")
    opts = PlanOptions(mode=mode, index_safe=index_safe, lost_limit=lost_limit)
    # with what ``verify`` will still report after it; release_free_heap: what the plan's dispatch freed, before verify's own working set
    return lambda s, with_crc, cache: repair_planner().plan_with_verify_after(
        s, lambda walked: planners().plan_recover(s, opts, with_crc=with_crc, cache=cache, walked=walked), before_verify=release_free_heap)


@guarded
def repair(store: StoreRootArg, yes: YesOpt = False, dry_run: DryRunOpt = False, backup_dir: BackupDirOpt = None, force: ForceOpt = False,
           fmt: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None) -> None:
    """From "crashed" to "sound": the broker's recovery, then the fixes the broker never makes.

    The fixes: stray files quarantined, missing or wrong consume queue entries and index files
    regenerated, the checkpoint rewritten to the valid log, a config restored from its .bak; each
    step is marked beyond_broker with why. Afterwards `verify` passes, or reports only the data
    that is lost.
    Exit codes: 0 sound, or the plan printed (without --yes), or only findings that are not lost
    data remain; 1 lost data remains; 3 bad input; 4 refused.

    \b
    Example:
      mqtool repair /data/rocketmq/store --yes
    """
    refuse_contradictions(yes, dry_run)
    sigbus_next(NOTHING_CHANGED)  # as ``run_modifying``
    root = store
    if not root.is_dir():
        with open_store(root, broker_config, broker_version) as given:  # the documented error for a missing store or a segment
            given.path()
    finished = None  # the backup of an interrupted apply this run finished first
    if not dry_run:
        check_not_in_use(root, [], force)
        finished = _finish_interrupted(root, yes, force)
    elif read_pending(root) is not None:
        note_interrupted(root)
    stopped = stopped_repair(root)
    if stopped is not None and moved_from(root, stopped.backup) is not None:  # its stages restore where the store was only
        raise Refused(stopped_repair_line(root, stopped_repair_state(root)))
    if stopped is not None:
        note(f"a repair on this store stopped before its last stage (backup {shell_path(stopped.backup)}): this plan finishes it, adding its stages there")
        if finished is not None and finished.resolve().parent == stopped.backup.resolve():
            finished = None  # a stage of that repair: the one restore of its backup undoes it with the others, no second step
    with scans_shown(), planning():
        plan = _plan_repair(root, broker_config, broker_version)
    target = _repair_target(root, backup_dir, stopped) if yes and not plan.is_empty else None
    emit_plan(_repair_document(root, plan, broker_config, broker_version), fmt, render_repair, target)
    if plan.recover is not None:
        _note_damage(plan.recover)  # as recover's plan: the last thing the operator reads before --yes
    if dry_run:
        return
    if plan.is_empty:
        if yes and stopped is not None:
            with executor().hold_store_lock(root, force):
                clear_repair_mark(root)
            note(f"the stopped repair needs no more stages: it is finished; undo it with: mqtool restore {shell_path(stopped.backup)} --yes", always=True)
        if finished is not None:
            note_undo(f"{finished_was_asked(read_manifest(finished)['plan'], plan)}; backup in {shell_path(finished)}", finished)
        _say_nothing_to_repair(plan, yes)
        return
    if not yes:
        note(f"nothing changed yet: this is the plan; apply it with: {this_command_with_yes()}")  # the normal first step: exit 0
        return
    stages = RepairStages(root, target, broker_config)
    with explain_interrupt(root, target), executor().hold_store_lock(root, force), writer.deferred_interrupts(), stages.marked(), stages.undone_on_failure():
        with scans_shown():
            findings = _apply_stages(stages, plan, broker_config, broker_version)
        after = f" (after the {stages.earlier} the stopped run applied)" if stages.earlier else ""
        note_undo(f"repair applied in {len(stages.done)} stage(s){after}; backup in {shell_path(target)}", target, finished)
    _report_after(findings, stages)


def _repair_target(root: Path, backup_dir: Path | None, stopped) -> Path:
    """The stages' backup directory: a stopped repair's own, else a new or empty ``--backup-dir``, or the default."""
    if stopped is None:
        if backup_dir is not None:  # the directory given, not its first stage's, named by the refusal
            refuse_backup_inside(root, backup_dir)
        if backup_dir is not None and backup_dir.is_dir() and any(backup_dir.iterdir()) and not _never_begun(backup_dir):
            raise BadInput(f"{backup_dir}: backup directory exists and is not empty; nothing was changed: give a new or empty --backup-dir")
        return backup_dir or default_backup_dir(root, "repair")
    if backup_dir is not None and backup_dir.resolve() != stopped.backup.resolve():
        raise Refused(f"the stopped repair's stages are in {stopped.backup}: its next stages go there too (give no --backup-dir), "
                      f"or undo it first with: mqtool restore {shell_path(stopped.backup)} --yes")
    return stopped.backup


def _repair_document(root: Path, plan, broker_config, broker_version) -> dict:
    """The plan's document with the broker's next start after the repair."""
    doc = with_next_start(plan.to_dict(), plan.recover)
    if "next_start" not in doc:  # no recovery plan (the broker would refuse to start): the same answer, from the store
        from ..store.nextstart import next_start
        from ..verify.lmq import with_stall

        try:
            with open_store(root, broker_config, broker_version) as opened:
                found = with_stall(opened, next_start(opened))
        except BadInput:  # not even the store model reads it (a DLedger file of the wrong length): the plan's note says why
            return doc
        doc = doc if found is None else {**doc, "next_start": found.as_dict()}
    return doc


def _say_nothing_to_repair(plan, yes: bool) -> None:
    """Why an empty plan changes nothing; with --yes, exit 1 when lost data remains."""
    lost = sum(e.lost_data for e in plan.remaining)
    if lost:
        note(f"nothing can be repaired: verify reports {lost} finding(s) of lost data (listed in the plan)")
        if yes:  # the plan alone is the normal first step (exit 0); --yes says what it leaves (exit 1: lost data)
            raise typer.Exit(EXIT_FINDINGS)
    elif plan.remaining:
        note(f"nothing to repair: verify's {len(plan.remaining)} remaining finding(s) are not lost data and no repair step changes them (listed in the plan)")
    else:
        note("nothing to do: verify finds nothing to repair")


def _report_after(findings: list, stages: "RepairStages") -> None:
    """What verify says after the repair, and how to salvage what its recovery cut; exit 1 on lost data."""
    cut = "" if not stages.cut else (f"; the repair cut {stages.cut} valid message(s) and its backup holds them: to save what is readable "
                                     f"of them, undo it with `mqtool restore {shell_path(stages.target.absolute())} --yes`, run "
                                     f"`{salvage_command(stages.root)}`, then repair again")
    if not findings:
        note(f"verify: the store is sound{cut}")
        return
    lost = sum(e.lost_data for e in repair_planner().triage(findings).lost)
    note(f"verify still reports {len(findings)} finding(s), {lost} of them lost data{cut}:")
    for f in findings[:10]:
        note(f"  {f.severity.value} {f.kind} {f.file or ''} {'' if f.offset is None else f'offset {f.offset}'}".rstrip())
    if lost:
        raise typer.Exit(EXIT_FINDINGS)


def _apply_stages(stages: "RepairStages", plan, broker_config, broker_version) -> list:
    """Apply repair's stages in order (file fixes, the broker's recovery, then the steps beyond the broker, each planned on the
    store the stage before left); returns verify's failing findings after. Only the writes defer a Ctrl-C."""
    rp, root = repair_planner(), stages.root
    stages.apply("files", plan.files, then=(("recover", plan.recover),) if plan.recover is not None and not plan.recover.is_empty else ())
    with writer.interrupts_raised(), open_store(root, broker_config, broker_version) as opened:
        from ..dispatch.scanner import DispatchCache

        cache = DispatchCache()
        mode = PlanOptions(mode="abnormal") if rp.abort_quarantined(plan.files) else PlanOptions()  # the start the abort announced
        recover_plan = planners().plan_recover(opened, mode, cache=cache)
        eras = opened.version_guess.eras
    if not recover_plan.is_empty:
        if plan.files is not None and any(n.startswith("DAMAGE:") for n in recover_plan.notes):  # planned only now, on the fixed files
            _note_damage(recover_plan)
            note("(that recovery was planned once the file fixes were applied, so the plan shown could not list what it throws away; "
                 "the undo line below gives it back)")
        stages.apply("recover", recover_plan, cache)

    def recovered(make):
        # ``make`` on the store as the stages left it, under the recovery's eras (its marks may no longer tell them apart)
        with writer.interrupts_raised(), open_store(root, broker_config, broker_version) as opened:
            opened.assume_eras(eras)
            return make(opened)

    for _ in range(2):  # a rebuild can reveal what it hid (e.g. index files past a cut queue)
        findings, run = recovered(rp.verify_findings)
        t = rp.triage(findings, run.last_timestamp)
        if not t.fixable:
            return findings  # verify's answer on the store as the repair leaves it
        for step in rp.steps_of(t):
            note(f"beyond the broker: {step.step}: {step.why}")
        if t.queues:
            stages.apply("rebuild-cq", recovered(lambda opened: rp.plan_queue_rebuild(opened, t.queues)))
        if t.index:
            stages.apply("rebuild-index", recovered(rp.plan_index_rebuild))
        stages.apply("state", recovered(lambda opened: rp.plan_state_fixes(opened, t)))
    return recovered(rp.verify_findings)[0]


class RepairStages:
    """``repair``'s plans applied in order, each backed up in a numbered subdirectory of one backup directory."""

    def __init__(self, root: Path, target: Path, broker_config: Path | None = None):
        self.root, self.target, self.done = root, target, []
        self.cut = 0  # the valid messages the stages' recovery cut (its plan's DAMAGE note)
        self.earlier = len(repair_stages(target))
        self.broker_config = broker_config  # named in each stage's plan (``naming_broker_config``): finishing a stopped repair needs it

    def apply(self, name: str, plan: Plan | None, cache=None, then: tuple = ()) -> None:
        """Apply stage ``name``; ``then``: the (step, plan) of later stages known now, whose backups' room is checked before this
        stage changes anything (the others are checked as each begins)."""
        if plan is None or plan.is_empty:
            return
        plan = naming_broker_config(plan, self.broker_config)
        directory = self.target / f"{self.earlier + len(self.done) + 1:02d}-{name}"
        writer.StopRequests.check()  # Ctrl-C since the last stage: stop before this one writes
        if self.done:
            executor().durability_point(f"before stage {directory.name}")  # killed here: the stages before done, this one not begun
        try:
            writer.apply_plan(plan, directory, progress=lambda m: note(f"  {m}"), cache=cache, backed=self._mark, step=name, later=then)
        except executor().ApplyIOError as exc:
            if self.done or self.earlier or (directory / "manifest.json").exists():  # else nothing changed, as it says
                again = finish_command(self.root, {"command": "repair", "plan": plan.to_dict()})  # the options this run was given
                raise executor().ApplyIOError(
                    f"{exc.cause}; the repair stopped in stage {directory.name}: fix this and run `{again}` to finish it, "
                    f"or undo every stage with: mqtool restore {shell_path(self.target)} --yes", exc.cause) from None
            raise
        self.done.append(directory)
        if plan.lost is not None and any(n.startswith("DAMAGE:") for n in plan.notes):
            self.cut += plan.lost.lost_now

    def _mark(self) -> None:
        """``.mqtool-repair`` written once a stage's backup set exists, never naming a directory with no stage; a SIGBUS from then
        on (the later stages planned too) says the store may be partly changed."""
        write_pending(self.root, self.target, REPAIR_MARKER)
        said_changing(self.root, self.target)()

    @contextlib.contextmanager
    def marked(self):
        """``.mqtool-repair`` names the backup directory while the stages apply, so ``info``, ``repair`` and ``restore`` know a
        repair killed between stages; cleared when all are applied, or none is left in the store."""
        try:
            yield
        except BaseException:
            clear_repair_mark(self.root, unless_applied=True)
            raise
        clear_repair_mark(self.root)

    @contextlib.contextmanager
    def undone_on_failure(self):
        """A stage refused or failed (``ApplyError``): the stages before are undone too."""
        try:
            yield
        except (Refused, writer.ApplyError) as exc:
            if self.done:
                undone = executor().roll_back([BackupSet.open(d) for d in self.done])
                raise (Refused if isinstance(exc, Refused) else writer.ApplyError)(f"{exc}; the {len(self.done)} stage(s) applied before: {undone}") from None
            raise


def _plan_repair(root: Path, broker_config, broker_version):
    rp = repair_planner()
    timer_size = broker_config_of(broker_config).timer_log_file_size if broker_config is not None else None  # before the store opens
    file_steps, _ = rp.plan_file_fixes(root, timer_log_file_size=timer_size)
    readings = None
    try:
        opened = open_store(root, broker_config, broker_version)
        readings = rp.config_readings(opened)  # a config .bak 3.2.6 and 4.0.0 alone read, its file being null to them
        file_steps = file_steps or rp.plan_file_fixes(root, timer_log_file_size=timer_size, readings=readings)[0]
        if file_steps:
            try:
                planparts().unloadable_files(opened)  # raises where the broker would not load the store before the file fixes
                planparts().unwritable_checkpoint(opened)
            except BadInput:
                opened.close()  # planned on below otherwise (a release that leaves the file out and starts)
                raise
    except BadInput as exc:
        if not file_steps:
            raise
        plan = rp.plan_repair(None, root, None, None, None, recover_error=str(exc), timer_log_file_size=timer_size, readings=readings)
        return _with_remaining_after_moves(plan, root, broker_config, broker_version)
    with opened:
        recover_plan = planners().plan_recover(opened)
        findings, run = rp.verify_findings(opened)
        return rp.plan_repair(opened, root, recover_plan, findings, run.last_timestamp)


def _with_remaining_after_moves(plan, root: Path, broker_config, broker_version):
    """A plan whose recovery waits for the file fixes, with the "will still report" table predicted on the store as once its
    config files are moved out (``Store.moved_out``); unchanged where it still refuses or the recovery is not planned."""
    rp = repair_planner()
    moved = frozenset(a.path for a in (plan.files.actions if plan.files else ()) if a.op == "quarantine" and a.path.startswith("config/"))
    if not moved:
        return plan
    try:
        with open_store(root, broker_config, broker_version) as opened:
            opened.moved_out = moved
            planparts().unloadable_files(opened)
            planparts().unwritable_checkpoint(opened)
            recover_plan = planners().plan_recover(opened)
            findings, run = rp.verify_findings(opened)
            _, remaining = rp.after_recovery(opened, findings, list(plan.steps), plan.files, recover_plan, run.last_timestamp)
    except (BadInput, Refused):  # still refused, or the recovery not planned (an undecided version): nothing predicted
        return plan
    return dataclasses.replace(plan, remaining=tuple(remaining))


@modifying("rebuild-cq")
def rebuild_cq(
    topic: Annotated[Optional[str], typer.Option("--topic", "-t", metavar="TOPIC", help="Only this topic's queues.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", min=0, metavar="ID", help="Only this queue id.")] = None,
    respect_topic_config: Annotated[bool, typer.Option("--respect-topic-config", help="Skip topics absent from config/topics.json (a deleted topic does not come back).")] = False,
) -> PlanMaker:
    """Regenerate consume queue files from the commit log, byte for byte as the broker writes them.

    \b
    Example:
      mqtool rebuild-cq /data/rocketmq/store --topic TopicTest --yes
    """
    opts = PlanOptions(topic=topic, queue_id=queue, respect_topic_config=respect_topic_config)

    def make_plan(s, with_crc, cache):
        plan = planners().plan_rebuild_cq(s, opts, with_crc=with_crc, cache=cache)
        if (topic is not None or queue is not None) and not plan.queues:
            which = " ".join(x for x in (f"topic {topic}" if topic is not None else "", f"queue {queue}" if queue is not None else "") if x)
            note(f"no record of {which} in the commit log and no such consume queue: nothing to rebuild (`mqtool info` lists the topics and queues)")
        return plan

    return make_plan


@modifying("rebuild-index")
def rebuild_index() -> PlanMaker:
    """Regenerate every index file from the commit log (key and UNIQ_KEY lookups answer as the broker's).

    \b
    Example:
      mqtool rebuild-index /data/rocketmq/store --yes
    """
    return lambda s, with_crc, cache: planners().plan_rebuild_index(s, PlanOptions(), with_crc=with_crc, cache=cache)


@guarded
def apply(plan_file: Annotated[Path, typer.Argument(help="A plan saved with --plan-out.", metavar="PLAN")], yes: YesOpt = False,
          backup_dir: BackupDirOpt = None, force: ForceOpt = False, fmt: FormatOpt = OutputFormat.table) -> None:
    """Apply a saved plan exactly, refusing if any file it read or changes differs since planning.

    \b
    Example:
      mqtool apply /tmp/plan.json --yes
    """
    sigbus_next(NOTHING_CHANGED)  # as ``run_modifying``
    if plan_file.is_dir():
        raise BadInput(f"{plan_file}: a directory; give the plan file saved with --plan-out")
    try:
        plan = Plan.from_json(plan_file.read_text(encoding="utf-8"))
        root = Path(plan.store)  # a store that is no path (edited): not a plan either
    except FileNotFoundError:
        raise BadInput(f"{plan_file}: no such file") from None
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:  # AttributeError: a value of the wrong JSON type
        raise BadInput(f"{plan_file}: not a valid mqtool plan ({exc})") from None
    if not root.is_dir():
        raise BadInput(f"{root}: the plan's store does not exist (moved or renamed since the plan was saved?): plan again on the store where it is")
    check_not_in_use(root, [], force)
    refuse_stopped_repair(root)
    pending = read_pending(root)
    finished = _finish_interrupted(root, yes, force)
    if pending is not None and BackupSet.open(pending).manifest.get("plan") == plan.to_dict():
        emit_plan(plan.to_dict(), fmt, render_plan, pending)  # the plan it applied and its backup, as an apply shows them (`-f json`: its document)
        note_undo(f"that was this plan: it is now applied; backup in {shell_path(pending)}", pending)
        return
    done = None if plan.is_empty else applied_backup(plan.to_dict(), root)
    target = (backup_dir or default_backup_dir(root, plan.command)) if yes and not plan.is_empty and done is None else None
    emit_plan(plan.to_dict(), fmt, render_plan, target)
    if plan.is_empty:
        note_nothing_to_do(plan)
        return
    if done is not None:  # its inputs changed by its own apply: "plan again" would mislead
        note(f"this plan was applied already (backup {shell_path(done)}); nothing changed: undo it with: mqtool restore {shell_path(done)} --yes")
        return
    if not yes:
        writer.check_inputs(root, plan)  # the preview meets the refusal --yes would: "re-run with --yes" would be refused
        raise Refused(f"{NOT_APPLIED}: {this_command_with_yes()}")
    with explain_interrupt(root, target), executor().hold_store_lock(root, force), writer.deferred_interrupts(), scans_shown():
        writer.apply_plan(plan, target, progress=lambda m: note(f"  {m}"), plan_file=plan_file, backed=said_changing(root, target))
        note_undo(f"{plan.command} applied; backup in {shell_path(target)}", target, finished)


@guarded
def restore_cmd(backup: Annotated[Path, typer.Argument(help="A backup directory written by a repair command.", metavar="BACKUP")], yes: RestoreYesOpt = False,
                force: Annotated[bool, typer.Option("--force", help="Restore even though the files changed since (a broker ran), or another process uses the store (dangerous).")] = False,
                fmt: FormatOpt = OutputFormat.table) -> None:
    """Put back, byte for byte, everything a repair command changed (also after an interrupted one).
    Refused if the files it left have changed since (a broker ran), unless --force.

    \b
    Example:
      mqtool restore /data/rocketmq/.mqtool-backups/store-20240501T030000000-recover --yes
    """
    if _never_begun(backup):  # one document all the same (`-f json`): nothing restored, the store never changed
        left = backup if backup.exists() else backup.with_name(backup.name + TMP_SUFFIX)
        why = (f"no backup set was made in {backup}: the command stopped before it backed up or changed anything, so the store was never "
               f"changed; {shell_path(left)}, which it left, can be removed")
        emit_plan({"backup": str(backup), "restored": [], "deleted": [], "store_changed": False, "why": why}, fmt, lambda console, doc: None)
        note(f"nothing to restore: {why}")
        return
    if not backup.exists():
        raise BadInput(f"{shell_path(backup)}: no such backup directory (deleted or moved?)")
    if not backup.is_dir():
        raise BadInput(f"{backup}: not an mqtool backup (a backup is the directory a repair command named: undo with: mqtool restore DIR --yes)")
    stages = repair_stages(backup)
    if stages:
        sets = [BackupSet.open(stage) for stage in stages]
        refuse_incomplete(sets)  # every stage first: a refusal leaves every stage applied
        refuse_moved(sets[0].store_root)  # else every file it touched reads as changed since
        if not force:  # the preview too: "re-run with --yes" would be refused
            _refuse_before_later_backups(backup, sets)
            _refuse_another_pending(sets[0].store_root, backup)
            refuse_changed(changed_by_others(sets))
        # one document, every stage's summary in the order restored: the preview shows them all, `-f json` is one JSON
        emit_plan({"backup": str(backup), "stages": [s.summary() for s in reversed(sets)]}, fmt,
                  lambda console, doc: [render_backup(console, stage) for stage in doc["stages"]])
        if not yes:  # the preview meets the refusal --yes meets (each stage's restore checks it), not "re-run with --yes"
            check_not_in_use(sets[0].store_root, [], force)
        unrestored = False
        for stage in reversed(stages):  # `repair` wrote one backup set per stage
            try:
                _restore_set(stage, yes=yes, force=force, fmt=fmt, shown=True)
            except Refused:
                if yes:
                    raise
                unrestored = True  # without --yes: every stage's preview, then one refusal
            except (Interrupted, KeyboardInterrupt):  # finished by restoring every stage again, not this one alone
                raise Interrupted(_finish_restore_line(backup)) from None
        if unrestored:
            raise Refused("nothing changed: re-run with --yes to restore")
        return
    _restore_set(backup, yes=yes, force=force, fmt=fmt)


def _restore_set(backup: Path, *, yes: bool, force: bool, fmt: OutputFormat, shown: bool = False) -> None:
    """``restore`` of one backup set (``shown``: a repair's stage, its summary emitted, its lines prefixed)."""
    stage = f"stage {backup.name}: " if shown else ""
    if not (backup / "manifest.json").exists() and any((backup / part).exists() for part in STORE_PARTS):
        raise BadInput(_a_store_given_to_restore(backup))
    if backup.is_dir() and not (backup / "manifest.json").exists() and (held := sorted(p.name for p in backup.iterdir() if _a_backup(p))):
        raise BadInput(f"{backup}: a folder of backups ({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}), not one: restore each alone, newest first")
    backup_set = BackupSet.open(backup)
    summary = backup_set.summary()
    if not shown:
        emit_plan(summary, fmt, render_backup)
    root = backup_set.store_root
    if summary["restored_ms"] is not None:  # restoring again could only discard what happened since
        note(f"{stage}nothing to restore: {shell_path(backup)} was already restored ({iso_ms(summary['restored_ms'])}); its files were put back then")
        if yes and root.is_dir() and not store_users(root, []):  # another mqtool applying owns its temporaries
            _note_removed([str(p.relative_to(root)) for p in remove_leftovers(root)])
            clear_repair_mark(root, unless_applied=True)  # a restore killed as it ended kept the mark of a repair now undone
        return
    refuse_incomplete([backup_set])  # also without --yes, as every refusal --yes meets: "re-run with --yes" would not restore it
    refuse_moved(root)
    if not force:
        if not shown:  # a stage's: checked for its whole repair, every later stage restored before it
            _refuse_before_later_backups(backup, [backup_set])
        _refuse_another_pending(root, backup)
        if not yes:  # with --yes, restore checks it under the store's lock
            refuse_changed(backup_set.changed_since_apply(), summary["command"])
    if yes or not shown:  # the preview too: "re-run with --yes" would be refused (a repair's stages: checked once for them all)
        check_not_in_use(root, [], force)
    if not yes:
        raise Refused("nothing changed: re-run with --yes to restore")
    with executor().hold_store_lock(root, force), scans_shown():
        try:
            result = restore(backup_set, force=force)
        except KeyboardInterrupt:
            raise Interrupted(_finish_restore_line(backup)) from None
        except OSError as exc:
            raise BadInput(f"{shell_path(exc.filename or root)}: {exc.strerror or exc}; fix this and run the restore again (it is idempotent)") from None
    note(f"{stage}restored {len(result['restored'])} file(s)/range(s), deleted {len(result['deleted'])} file(s) the {summary['command'] or 'apply'} had created", always=True)  # a write: said as an apply's
    _note_removed(result["temporaries_removed"])


def _refuse_another_pending(root: Path, backup: Path) -> None:
    """Refuse a restore while an apply or restore of another backup is cut short on the store."""
    pending = read_pending(root) if root.is_dir() else None
    if pending is None or backup.resolve() in (pending.resolve(), pending.resolve().parent):  # its own, or its repair's stage
        return
    if restore_interrupted(pending):
        raise Refused(f"{unfinished_restore_line(pending)}; then restore {shell_path(backup)}")
    raise Refused(f"an apply on this store was interrupted (backup {shell_path(pending)}): finish or undo it before restoring another backup: "
                  f"{interrupted_apply_ways(root, pending)}")


def _a_backup(path: Path) -> bool:
    """A backup set or a repair's stages; not a folder still being built (``.mqtool-tmp``: killed before its rename, nothing changed)."""
    return not path.name.endswith(TMP_SUFFIX) and ((path / "manifest.json").is_file() or bool(repair_stages(path)))


def _a_store_given_to_restore(store: Path) -> str:
    """``restore STORE``: a store, not a backup; its default folder's backups, newest first."""
    folder = store.resolve().parent / BACKUPS_DIR
    held = newest_first([p for p in sorted(folder.glob(f"{glob.escape(store.resolve().name)}-*")) if _a_backup(p)])
    said = f"{store}: a store, not a backup: give restore the backup directory a repair command named"
    if not held:
        return f"{said} (this store has none in {folder})"
    names = ", ".join(p.name for p in held[:3]) + (", ..." if len(held) > 3 else "")
    return (f"{said}; this store's in {shell_path(folder)}, newest first: {names} "
            f"(without --yes it shows what it would put back: mqtool restore {shell_path(held[0])})")


def _finish_restore_line(backup: Path) -> str:
    """What a restore cut short by Ctrl-C says: run it again to finish, or that it only tidies up."""
    again = f"`mqtool restore {shell_path(backup)} --yes`"
    try:
        sets = [BackupSet.open(s) for s in repair_stages(backup) or [backup]]
    except (BadInput, OSError):
        sets = []
    if sets and all(s.restored for s in sets):
        mark = f" (it removes the {REPAIR_MARKER} mark)" if (sets[0].store_root / REPAIR_MARKER).exists() else ""
        return f"interrupted as the restore ended: the store is restored; {again} again only tidies up{mark}"
    return f"interrupted while restoring: run {again} again to finish (restoring twice changes nothing)"


def _never_begun(backup: Path) -> bool:
    """A backup directory an apply was killed in before its manifest was written (``BackupSet.create``): absent with its temporary
    folder beside it, or holding only temporaries or such stage directories. An empty directory is none."""
    if not backup.exists():
        return backup.with_name(backup.name + TMP_SUFFIX).is_dir()
    entries = list(backup.iterdir()) if backup.is_dir() and not (backup / "manifest.json").exists() else []
    return bool(entries) and all(e.name.endswith(TMP_SUFFIX) or (e.is_dir() and STAGE_NAME.fullmatch(e.name) is not None and (
        not any(e.iterdir()) or _never_begun(e))) for e in entries)


def _note_removed(leftovers: list[str]) -> None:
    if leftovers:
        note(f"removed the temporary files an interrupted mqtool had left: {', '.join(leftovers)}")


def _refuse_before_later_backups(backup: Path, sets: list[BackupSet]) -> None:
    """Refuse restoring a backup while a later, unrestored one of the store (``later_backups``) stands."""
    later = later_backups(backup, sets)
    if not later:
        return
    repair = backup.resolve().parent
    stages = [s for s in later if s.parent == repair and s in repair_stages(repair)]  # its own repair's
    first = list(dict.fromkeys(s.parent if s in repair_stages(s.parent) else s for s in later if s not in stages))  # whole repairs
    then = f"the whole repair with: mqtool restore {shell_path(repair)} --yes (or those stages first)"
    if not first:
        raise Refused(f"{backup.name} is a stage of a repair whose later stage(s) {', '.join(s.name for s in stages)} changed its files since: restore {then}")
    raise Refused(f"{backup.name} was applied before {len(first)} later backup(s) of the same store that changed its files since: restore them first, "
                  "newest first: " + "; ".join(f"mqtool restore {shell_path(p)} --yes" for p in first) + (f"; then {then}" if stages else ""))


# ---- rendering --------------------------------------------------------------------------------------


def render_plan(console: Screen, doc: dict) -> None:
    """A plan document as tables, from the typed ``Plan`` it reads back; ``next_start`` is the document's own."""
    plan = Plan.from_dict(doc)
    mode = [("mode", plan.mode)] if plan.mode is not None else []  # a rebuild has no recovery mode
    version = f"{plan.broker_version} ({plan.version_source})"
    console.print(kv_table(f"Plan: {plan.command}", [("store", shell_path(plan.store)), ("broker version", version), *mode]))
    if plan.commitlog is not None:
        _render_commitlog(console, plan.commitlog, doc.get("next_start"))
    if plan.lost is not None and (plan.lost.count or plan.lost.other_bytes):
        _render_lost(console, plan.lost)
    if plan.dispatch:
        queues = any(p.consume_queues for p in plan.dispatch)  # else an index rebuild: no queue entries, no tags code written
        rows = [(p.name, p.start, p.stop, p.records, *((p.cq_records, p.tags) if queues else ()), "yes" if p.index else "no")
                for p in plan.dispatch]
        columns = ["phase", "from", "to", "records", *(("to consume queues", "tags code") if queues else ()), "index"]
        console.print(titled_table("Dispatch", columns, rows=rows))
    changed = [q for q in plan.queues if q.files or q.max_before != q.max_after or q.min_before != q.min_after]
    if changed:
        rows = [(q.queue_id, f"{q.min_before} -> {q.min_after}", f"{q.max_before} -> {q.max_after}", q.cut, q.added, q.fillers, ", ".join(f"{f.action} {f.name}" for f in q.files), q.topic) for q in changed]
        console.print(titled_table(f"Consume queues ({len(changed)} of {len(plan.queues)} change)", ["queue", "min", "max", "cut", "added", "fillers", "files", "topic"], optional=["fillers"], rows=rows))
    ix = plan.index
    if ix is not None and any(f.action != "keep" for f in ix.files):
        rows = [(f.name, f.action, f"{f.entries_before} -> {f.entries_after}", f.end_phy_offset, f.reason) for f in ix.files]
        console.print(titled_table(f"Index ({ix.hash_slot_num} slots x {ix.index_num} entries)", ["file", "action", "entries", "ends at", "why"], rows=rows))
    cp = plan.checkpoint
    if cp is not None and (cp.before != cp.after or not cp.exists):
        from .info import CHECKPOINT_NAMES, checkpoint_value

        rows = [(CHECKPOINT_NAMES.get(k, k), f"{checkpoint_value(k, cp.before[k]) if k in cp.before else '-'} -> {checkpoint_value(k, v)}")
                for k, v in cp.after.items() if cp.before.get(k) != v]
        console.print(kv_table("Checkpoint" + ("" if cp.exists else " (created)"), rows))
    if plan.remove_abort:
        console.print(kv_table("Abort file", [("abort", "removed (as a clean shutdown does)")]))
    for n in plan.notes:
        console.note(n)
    if plan.command == "recover" and plan.verify_after:
        items = plan.verify_after
        rows = [(e.kind, e.severity, e.offset, "yes" if e.lost_data else "no", e.fixed_by, e.file) for e in items]
        console.print(titled_table(f"After this, `verify` will still report {len(items)} error(s) or warning(s)", ["kind", "severity", "offset", "lost data", "fixed by", "file"], optional=["fixed by", "lost data"], rows=rows))
        fixed = [e.fixed_by for e in items if e.fixed_by]
        if fixed:  # said without the "fixed by" column, which the table drops first where it does not fit the width
            steps = ", ".join(f"{step}: {fixed.count(step)}" for step in sorted(set(fixed)))
            console.print(f"`mqtool repair` also makes the fixes the broker never makes, which remove {len(fixed)} of these rows ({steps}).")
    if not plan.actions:
        console.print("No changes.")
        return
    spans = [f"[{a.start}, {a.end})" if a.start is not None and a.op not in NOT_RANGES else "" for a in plan.actions]
    rows = [(i, a.op, a.path, " ".join(x for x in (span, a.note) if x)) for i, (a, span) in enumerate(zip(plan.actions, spans), 1)]
    # a detail naming a topic (a consume queue deleted) breaks rather than turn every action into a vertical record
    console.print(titled_table("Actions", ["#", "operation", "path", "detail"], fold=["detail"], rows=rows))


NOT_RANGES = frozenset({"write-dledger-checkpoint"})  # actions whose start and end are no byte range: their note says them


def _render_commitlog(console: Screen, cl: CommitLogPlan, next_start: dict | None) -> None:
    rows = [("segments", f"min offset {cl.min_offset}, files end at {cl.end_of_files}"), ("scan", f"from {cl.scan_from}: {cl.scan_rule}"),
            ("records scanned", cl.records_scanned), ("valid end", f"{cl.valid_end} ({cl.end_reason}: {cl.end_detail})")]
    if cl.first_invalid:
        m = cl.first_invalid
        rows.append(("first invalid record", f"{m.offset} size {m.size} topic {m.topic} queue {m.queue_id} offset {m.queue_offset} msgId {m.msg_id} (crc {'ok' if m.crc_ok else 'BAD'})"))
    if cl.zero_to > cl.zero_from:
        rows.append(("zero", f"{cl.cut_segment} bytes [{cl.zero_from}, {cl.zero_to}) ({cl.zero_to - cl.zero_from} bytes)"))
    if cl.delete_segments:
        rows.append(("delete segments", ", ".join(cl.delete_segments)))
    if next_start:
        rows.append(("next start", next_start["line"]))
    console.print(kv_table("Commit log", rows))


def _render_lost(console: Screen, lost: LostMessages) -> None:
    """The records after the cut: lost by it, or stale ones the broker overwrote before (``LostMessages.stale``)."""
    title = f"Lost by the cut: {lost.lost_now} message(s), {lost.bytes - lost.stale_bytes} bytes"
    if lost.stale:
        stale = f"{lost.stale} stale record(s), {lost.stale_bytes} bytes, the broker overwrote (not lost now)"
        title = f"{title}; after it also {stale}" if lost.stale < lost.count else f"After the cut: {stale}"
    title += "" if lost.complete else f" (first {len(lost.messages)} listed)"
    if lost.other_bytes:
        title += f"; {lost.other_bytes} other non-zero bytes from {lost.first_other_offset}"
    columns = ["offset", "size", "queue", "queue offset", "stored", "crc", "msg id", "uniq key", "keys", "topic"]
    rows = [(m.offset, m.size, m.queue_id, m.queue_offset, iso_ms(m.store_timestamp), "ok" if m.crc_ok else "BAD", m.msg_id, m.uniq_key, " ".join(m.keys), m.topic or "?") for m in lost.messages]
    _print_capped(console, titled_table(title, columns, optional=["size", "uniq key", "stored", "keys", "queue offset", "queue", "crc"]), rows)
    if lost.unreadable:
        rows = [(r.offset, r.size, r.queue_id, r.queue_offset, r.topic) for r in lost.unreadable[:TABLE_LOST]]
        console.print(titled_table(f"Consume queue entries of {len(lost.unreadable)} lost message(s) whose bytes no longer decode", ["offset", "size", "queue", "queue offset", "topic"], rows=rows))


def _print_capped(console: Screen, table, rows: list) -> None:
    """``table`` with the first ``TABLE_LOST`` of ``rows``; how many more the JSON lists."""
    for row in rows[:TABLE_LOST]:
        table.add_row(*row)
    console.print(table)
    if len(rows) > TABLE_LOST:
        console.print(f"... and {len(rows) - TABLE_LOST} more listed with --format json")


def render_repair(console: Screen, doc: dict) -> None:
    """A repair plan document as tables, from the typed ``RepairPlan`` it reads back; ``next_start`` is the document's own."""
    from ..recovery.repair import RepairPlan

    plan = RepairPlan.from_dict(doc)
    next_start = [("next start", doc["next_start"]["line"])] if doc.get("next_start") else []
    console.print(kv_table("Plan: repair", [("store", shell_path(plan.store)), ("steps", len(plan.steps)), ("beyond the broker", sum(1 for s in plan.steps if s.beyond_broker)), *next_start]))
    if plan.steps:
        shown = [", ".join(st.paths[:5]) + (f" and {len(st.paths) - 5} more" if len(st.paths) > 5 else "") for st in plan.steps]
        rows = [(i, st.step, "yes" if st.beyond_broker else "no", st.why, paths) for i, (st, paths) in enumerate(zip(plan.steps, shown), 1)]
        console.print(titled_table("Steps", ["#", "step", "beyond broker", "why", "paths"], optional=["beyond broker"], rows=rows))
    else:
        console.print("No changes: verify finds nothing to repair.")
    if plan.recover is not None and plan.recover.actions:
        render_plan(console, doc["recover"])
    if plan.remaining:
        lost = sum(e.lost_data for e in plan.remaining)  # the others: findings no repair step changes, not lost data
        title = f"After the repair `verify` will still report {len(plan.remaining)} error(s) or warning(s), {lost} of them lost data"
        table = titled_table(title, ["kind", "severity", "lost data", "offset", "message", "file"], optional=["severity", "lost data"])
        _print_capped(console, table, [(e.kind, e.severity, "yes" if e.lost_data else "no", e.offset, e.message, e.file) for e in plan.remaining])
    for n in plan.notes:
        console.note(n)


def render_backup(console: Screen, doc: dict) -> None:
    # to delete: the files the apply created that are there (one it logged and was stopped before making is not)
    created = doc["created"] if doc["restored_ms"] is not None else [p for p in doc["created"] if os.path.lexists(Path(doc["store"]) / p)]
    console.print(kv_table("Backup", [
        ("backup", shell_path(doc["backup"])), ("store", shell_path(doc["store"])),  # quoted: a path with spaces is one word, never wrapped
        *((key, doc[key]) for key in ("command", "step", "complete") if key != "step" or doc["step"]),
        ("restored", "no" if doc["restored_ms"] is None else f"yes, {iso_ms(doc['restored_ms'])}"), ("whole files", len(doc["files"])),
        ("byte ranges", len(doc["ranges"])), ("files it created", f"{len(created)} (deleted on restore)"), ("bytes kept", doc["bytes"])]))
    if doc["restored_ms"] is not None:
        return  # what it would put back was put back then
    for path in doc["files"]:  # paths as they are: no markup in them (``[/]`` in a name)
        console.print(f"  restore {path}", markup=False)
    for r in doc["ranges"]:
        console.print(f"  restore {r['path']} [{r['start']}, {r['end']})", markup=False)
    for path in created:
        console.print(f"  delete  {path}", markup=False)
