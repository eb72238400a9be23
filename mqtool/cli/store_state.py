"""What a reader of a store is told first, one line each on stderr: its lock is held, an apply was
interrupted (``.mqtool-pending``), a ``repair`` stopped between stages (``.mqtool-repair``), temporaries were left."""

from __future__ import annotations

from pathlib import Path

from .common import note, shell_path


def store_state(root: Path) -> dict:
    """``lock_holder``, ``interrupted_apply``, ``interrupted_repair`` and ``leftover_files`` (relative to
    ``root``, only when no apply is pending: its own staging files are finished or removed with it)."""
    from ..apply.backup import leftover_temporaries, read_pending
    from ..store.liveness import lock_holder

    pending = read_pending(root)
    return {
        "lock_holder": lock_holder(root), "interrupted_apply": None if pending is None else str(pending),
        "interrupted_repair": stopped_repair_state(root),
        "leftover_files": [] if pending is not None else [str(p.relative_to(root)) + ("/" if p.is_dir() else "") for p in leftover_temporaries(root)],
    }


def restore_interrupted(backup: Path) -> bool:
    """Whether the apply ``backup`` records was being undone when it stopped (``BackupSet.restore_interrupted``)."""
    from ..apply.backup import BackupSet

    try:
        return BackupSet.open(backup).restore_interrupted
    except Exception:  # noqa: BLE001 - a backup gone or unreadable: said as an interrupted apply, as before
        return False


def stopped_repair_state(root: Path) -> dict | None:
    """``store_state``'s ``interrupted_repair`` (``apply.backup.stopped_repair``)."""
    from ..apply.backup import stopped_repair

    stopped = stopped_repair(root)
    return None if stopped is None else {"backup": str(stopped.backup), "done": list(stopped.done), "stopped_in": stopped.stopped_in,
                                         "broker_version": stopped.broker_version, "broker_config": stopped.broker_config}


def stopped_repair_line(root: Path, stopped: dict) -> str:
    """What a ``repair`` stopped before its last stage left, and the repair that finishes or restore that undoes it."""
    done = f"stage(s) {', '.join(stopped['done'])} done" if stopped["done"] else "no stage done"
    cut = f", stage {stopped['stopped_in']} cut short" if stopped["stopped_in"] else ""
    from ..apply.backup import moved_from, moved_line, rerun_command

    was = moved_from(root, Path(stopped["backup"]))  # a store moved since: its stages are finished or undone where it was
    first, at = ("", root) if was is None else (f"{moved_line(was, 'repair')}, then ", was)
    return (f"a repair on this store stopped before its last stage (backup {shell_path(stopped['backup'])}: {done}{cut}): "
            f"{first}run `{rerun_command('repair', at, broker_config=stopped.get('broker_config'), broker_version=stopped.get('broker_version'))}` "
            "again to finish it, "
            f"or `mqtool restore {shell_path(stopped['backup'])} --yes` to undo it")


def unfinished_lines(root: Path, state: dict) -> list[str]:
    """What an interrupted restore, ``repair`` or apply left at ``root``, each line with its ways on."""
    pending, stopped = state["interrupted_apply"], state["interrupted_repair"]
    restoring = pending is not None and restore_interrupted(Path(pending))
    lines = []
    if restoring:
        from ..apply.backup import unfinished_restore_line

        lines.append(unfinished_restore_line(Path(pending)))
    elif stopped is not None:
        lines.append(stopped_repair_line(root, stopped))
    a_stage = stopped is not None and pending is not None and Path(pending).parent == Path(stopped["backup"])
    if pending is not None and not restoring and not a_stage:  # a stage cut short is finished or undone with its repair
        from ..apply.backup import interrupted_apply_ways

        lines.append(f"an apply on this store was interrupted (backup {shell_path(pending)}): the store is half-repaired; {interrupted_apply_ways(root, Path(pending))}")
    return lines


def warn_store_state(root: Path | None) -> tuple[dict, list[str]]:
    """Note on stderr what a reader of the store at ``root`` is told first; returns the state and its lines."""
    if root is None:
        return {"lock_holder": None, "interrupted_apply": None, "interrupted_repair": None, "leftover_files": []}, []
    state = store_state(root)
    unfinished = unfinished_lines(root, state)
    for line in unfinished:
        note(line)
    if state["lock_holder"] is not None:
        note(f"pid {state['lock_holder']} holds the store's lock (a running broker?): it may be writing while mqtool reads: "
             "what lies near the end of the log and of the queues may change")
    if state["leftover_files"]:
        shown = ", ".join(state["leftover_files"][:3]) + (f" and {len(state['leftover_files']) - 3} more" if len(state["leftover_files"]) > 3 else "")
        note(f"temporary files an interrupted mqtool left in the store: {shown}; not part of the store (the broker "
             "ignores them): delete them, or `mqtool restore BACKUP --yes` removes them")
    return state, unfinished
