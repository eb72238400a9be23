"""The only code that writes to a store (plans applied with backups, fsync and a journal); ``executor`` loads on first use."""

from .backup import BackupSet, default_backup_dir, read_pending, restore

_EXECUTOR = ("ApplyError", "StopRequests", "apply_plan", "check_inputs", "deferred_interrupts", "interrupts_raised", "resume_pending")

__all__ = ["BackupSet", "default_backup_dir", "read_pending", "restore", *_EXECUTOR]


def __getattr__(name: str):
    if name in _EXECUTOR:
        from . import executor

        return getattr(executor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
