"""One candidate version per set of the planning rules that matter here, for ``nextstart`` and ``recovery.candidates``."""

from __future__ import annotations

from typing import Any

from .rules import PLANNING_RULES, planning_key
from .store import Store

# Planning rules that only one recovery mode consults (rules file §2): the other mode's never change a plan
NORMAL_ONLY = {"normal_start_from_cq_max", "normal_stops_at_length_mismatch", "normal_dispatches", "normal_truncates_cq", "empty_log_destroys_queues"}
ABNORMAL_ONLY = {"abnormal_stops_at_length_mismatch", "abnormal_truncates_cq_always", "delay_table_missing_in_recovery", "accepts_v2_magic", "dledger_abnormal_redispatch"}
# planning rules whose differences ``recovery.candidates._effect`` leaves out (checkpoint fields no candidate broker reads back)
NO_EFFECT = {"writes_confirm_offset"}


def relevant_rules(store: Store) -> list[str]:
    """The planning rules that can change this store's plan (rules §2.5, §2.13, §3.12, the recovery mode's own)."""
    skip = NO_EFFECT | (NORMAL_ONLY if store.abort_present else ABNORMAL_ONLY)  # a new set: the tables stay as they are
    if not store.multi_dispatch:
        skip |= {"lmq_rule"}
    if not store.problems:  # files of the wrong length or name, a zero-length last file (``Store.problems``)
        skip |= {"wrong_length_file_ignored", "zero_length_last_file_deleted"}
    if store.commitlog.segments:
        skip.add("empty_log_destroys_queues")
    return [name for name in PLANNING_RULES if name not in skip]


def candidate_groups(store: Store) -> dict[Any, list]:
    """``{candidate: eras}``: the newest candidate per set of variants of the rules that matter (``relevant_rules``)."""
    relevant = relevant_rules(store)
    by_key: dict[tuple, Any] = {}
    for candidate in sorted(store.version_guess.candidates, reverse=True):
        by_key.setdefault(planning_key(candidate, relevant), candidate)
    groups: dict[Any, list] = {c: [] for c in by_key.values()}
    for era in store.version_guess.eras:
        groups[by_key[planning_key(era.representative, relevant)]].append(era)
    return groups
