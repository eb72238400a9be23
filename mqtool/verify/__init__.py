"""``mqtool verify``'s checks: CRC and cross-file consistency of a whole store, read-only.

Imports ``formats``, the store model (``mqtool.store``) and the broker's dispatch
(``mqtool.dispatch``), never recovery, apply or the CLI. ``Verification(store, options)`` yields
``Finding``s and fills ``summary``: ``commitlog`` (``commitlog.py``; ``dledger.py`` for a DLedger
store), ``cq`` and ``index`` (``consumequeue.py``, ``index.py``: on the commit log check's walk,
``sharedwalk.py``, else on a walk of their own), ``checkpoint`` (``state.py``) and ``timer``
(``timer.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..activity import Listener
from .findings import FINDING_FIELDS, KINDS, Finding, Severity, Summary

CHECKS = ("commitlog", "cq", "index", "checkpoint", "timer")
CROSS_CHECKS = ("cq", "index")  # the checks that join the records with the consume queues and the index

Progress = Listener  # progress(stage, bytes walked since the last report, the stage's total)

__all__ = ["CHECKS", "CROSS_CHECKS", "FINDING_FIELDS", "KINDS", "Finding", "Severity", "Summary", "Verification", "VerifyOptions"]


@dataclass(frozen=True)
class VerifyOptions:
    checks: tuple[str, ...] = CHECKS
    from_offset: int | None = None
    to_offset: int | None = None
    jobs: int = 1
    keep_going: bool = False
    index_files: tuple | None = None  # the index files the index check reads (None: the store's); a planner's, without those a recovery deletes

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
