"""``mqtool verify``'s checks: CRC and cross-file consistency of a whole store, read-only.

Imports ``formats``, the store model (``mqtool.store``: the broker's next start too, ``store.nextstart``)
and the broker's dispatch (``mqtool.dispatch``), never recovery, apply or the CLI. ``Verification(store, options)``
yields ``Finding``s as it goes and fills ``summary``:

1. ``commitlog``: every record of every segment on the compiled walk (``commitlog.py``), in
   parallel over segments with ``jobs > 1``; on a DLedger store every entry and the record inside
   it, the entry index and DLedger's checkpoint (``dledger.py``);
2. ``cq`` and ``index``: one streaming pass over the valid records, merged against every
   consume queue (``consumequeue.py``) and the index files (``index.py``); the records of the
   commit log check's own walk where it can, checked in a thread beside it on two CPUs
   (``sharedwalk.py``), else a walk of their own (forked beside it with ``jobs > 1``: ``forked.py``);
3. ``checkpoint``: the checkpoint, the abort marker and ``config/*.json`` (``state.py``);
4. ``timer``: the 5.x timer store, where there is one (``timer.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .findings import FINDING_FIELDS, KINDS, Finding, Severity, Summary

CHECKS = ("commitlog", "cq", "index", "checkpoint", "timer")
CROSS_CHECKS = ("cq", "index")  # the checks that join the records with the consume queues and the index

Progress = Callable[[str, int, int], None]
"""``progress(stage, bytes_done_delta, stage_total_bytes)``"""

__all__ = ["CHECKS", "CROSS_CHECKS", "FINDING_FIELDS", "KINDS", "Finding", "Severity", "Summary", "Verification", "VerifyOptions"]


@dataclass(frozen=True)
class VerifyOptions:
    checks: tuple[str, ...] = CHECKS
    from_offset: int | None = None
    to_offset: int | None = None
    jobs: int = 1
    keep_going: bool = False

    def __post_init__(self):
        unknown = set(self.checks) - set(CHECKS)
        if unknown:
            raise ValueError(f"unknown checks {sorted(unknown)}; choose from {', '.join(CHECKS)}")


def __getattr__(name: str):
    """``Verification`` (``verification.py``), imported when asked for: it loads the compiled
    kernels and numpy, which only the commands that verify need."""
    if name == "Verification":
        from .verification import Verification

        return Verification
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
