"""The only code that writes to a store: executes plans with backups, fsync and a journal.

``apply_plan`` carries out a ``mqtool.recovery.plan.Plan``; ``resume_pending`` finishes an apply
that was killed; ``restore`` puts a store back from a backup set byte for byte.
"""

from .backup import BackupSet, default_backup_dir, read_pending, restore
from .executor import ApplyError, apply_plan, check_inputs, resume_pending

__all__ = ["ApplyError", "BackupSet", "apply_plan", "check_inputs", "default_backup_dir", "read_pending", "restore", "resume_pending"]
