"""What a reader of a store is told first (``info``, ``verify``, ``survivors``, ``salvage``): a
process holds the store's lock (a running broker still writes), an apply of a repair command was
interrupted (its ``.mqtool-pending`` marker, ``mqtool.apply.backup``), or an interrupted mqtool
left temporary files in the store. One line each, on stderr; ``info --format json`` carries them as fields."""

from __future__ import annotations

from pathlib import Path

from .common import note, shell_path


def store_state(root: Path) -> dict:
    """``{"lock_holder": pid | None, "interrupted_apply": backup | None, "leftover_files": [...]}``
    (leftovers relative to ``root``; named only when no apply is pending: a pending apply's own
    staging files are finished or removed with it)."""
    from ..apply.backup import leftover_temporaries, read_pending
    from ..store.liveness import lock_holder

    pending = read_pending(root)
    return {
        "lock_holder": lock_holder(root),
        "interrupted_apply": None if pending is None else str(pending),
        "leftover_files": [] if pending is not None else [str(p.relative_to(root)) + ("/" if p.is_dir() else "") for p in leftover_temporaries(root)],
    }


def restore_interrupted(backup: Path) -> bool:
    """Whether the apply ``backup`` records was being undone when it stopped (``BackupSet.restore_interrupted``)."""
    from ..apply.backup import BackupSet

    try:
        return BackupSet.open(backup).restore_interrupted
    except Exception:  # noqa: BLE001 - a backup gone or unreadable: said as an interrupted apply, as before
        return False


def state_lines(state: dict) -> list[str]:
    """The lines saying ``state``."""
    lines = []
    pending = state["interrupted_apply"]
    if pending is not None and restore_interrupted(Path(pending)):
        from ..apply.backup import restore_target

        lines.append(f"a restore on this store was interrupted (backup {pending}): the store is partly restored; "
                     f"finish it with: mqtool restore {shell_path(restore_target(Path(pending)))} --yes")
    elif pending is not None:
        lines.append(f"an apply on this store was interrupted (backup {pending}): the store is half-repaired; "
                     f"run that command again with --yes to finish it, or undo it with: mqtool restore {shell_path(pending)} --yes")
    if state["lock_holder"] is not None:
        lines.append(f"pid {state['lock_holder']} holds the store's lock (a running broker?): it may be writing while mqtool reads: "
                     "what lies near the end of the log and of the queues may change")
    if state["leftover_files"]:
        shown = ", ".join(state["leftover_files"][:3]) + (f" and {len(state['leftover_files']) - 3} more" if len(state["leftover_files"]) > 3 else "")
        lines.append(f"temporary files an interrupted mqtool left in the store: {shown}; not part of the store (the broker "
                     "ignores them): delete them, or `mqtool restore BACKUP --yes` removes them")
    return lines


def warn_store_state(root: Path | None) -> dict:
    """Note ``state_lines`` on stderr; returns the state (empty for a bare commitlog folder)."""
    if root is None:
        return {"lock_holder": None, "interrupted_apply": None, "leftover_files": []}
    state = store_state(root)
    for line in state_lines(state):
        note(line)
    return state
