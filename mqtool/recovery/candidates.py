"""Planning when the store does not decide the broker version: ``plan_under_candidates`` plans under one representative of each
set of rules (``store.eras``); equal plans go ahead, differing ones are refused (exit 4)."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Callable

from ..errors import Refused
from ..store import Store
from ..store.eras import candidate_groups, relevant_rules
from ..store.rules import rules_deciding
from ..store.version import eras_label
from .sharedscans import SharedScans

if TYPE_CHECKING:  # the plan's dataclasses: not loaded where only the eras are asked for (``nextstart``)
    from .plans import Plan

# 5.x checkpoint fields no broker outside controller/duplication mode reads back (reference §7, §8.2, §8.5)
IMMATERIAL = ("master_flushed_offset", "confirm_phy_offset")
SHOWN = 60  # characters of each differing value in the error


def _effect(plan: Plan) -> dict[str, Any]:
    """What a plan does to the store, not how: equal effects leave equal bytes (``IMMATERIAL`` fields left out)."""
    doc = plan.to_dict()
    cl, index, lost = doc.get("commitlog") or {}, doc.get("index") or {}, doc.get("lost") or {}
    after = ((doc.get("checkpoint") or {}).get("after")) or {}
    dispatch = doc.get("dispatch") or []
    return {
        "mode": doc.get("mode"),
        "commitlog": {k: cl.get(k) for k in ("valid_end", "zero_from", "zero_to", "delete_segments")},
        "lost": lost.get("count"),
        "queues": {f"{q['topic']}/{q['queue_id']}": {k: q[k] for k in ("min_after", "max_after", "cut", "added", "fillers", "resurrected")} for q in doc.get("queues") or []},
        "dispatch": {k: sum(p[k] for p in dispatch) for k in ("cq_records", "scheduled_with_tags_hash")},
        "index": [(f["name"], f["action"], f["entries_after"]) for f in index.get("files") or []] + [index.get("keys_added")],
        "checkpoint": {k: v for k, v in after.items() if k not in IMMATERIAL},
        "remove_abort": doc.get("remove_abort"),
        "actions": [{k: a[k] for k in ("op", "path", "start", "end")} for a in doc.get("actions") or [] if a["op"] != "write-checkpoint"],
    }


def _differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The first differing leaves of two plan documents, as (path, value in a, value in b)."""
    if isinstance(a, dict) and isinstance(b, dict):
        pairs = [(f"{path}.{key}" if path else key, a.get(key), b.get(key)) for key in [*a, *(k for k in b if k not in a)]]
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        pairs = [(f"{path}[{i}]", x, y) for i, (x, y) in enumerate(zip(a, b))]
    else:
        return [] if a == b else [(path, a, b)]
    return [d for where, x, y in pairs for d in _differences(x, y, where)]


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN else text[: SHOWN - 1] + "…"


def plans_per_candidate(store: Store, make_plan: Callable[[Store, Any, SharedScans | None], Plan], cache: Any = None) -> tuple[list, list[str], list[Plan]]:
    """``make_plan`` under each candidate, sharing scans: (candidates, eras' labels, plans), not compared."""
    if store.version_guess.version is not None:
        return [store.version_guess.version], [str(store.version_guess.version)], [make_plan(store, cache, None)]
    groups = candidate_groups(store)
    candidates = list(groups)
    scans = SharedScans.worth_it(store, cache) if len(candidates) > 1 else None
    plans: list[Plan] = []
    for i, candidate in enumerate(candidates):
        if scans is not None and i == len(candidates) - 1:
            scans.recording = False  # no candidate is left to ask for its scans
        with store.assumed_version(candidate):
            plans.append(make_plan(store, cache if i == 0 else None, scans))
    return candidates, [eras_label(groups[c]) for c in candidates], plans


def plan_under_candidates(store: Store, make_plan: Callable[[Store, Any, SharedScans | None], Plan], cache: Any = None) -> Plan:
    """``make_plan(store, cache, scans)`` under the detected version or every candidate; ``cache`` filled by the first only."""
    guess = store.version_guess
    if guess.version is not None:
        return make_plan(store, cache, None)
    candidates, labels, plans = plans_per_candidate(store, make_plan, cache)
    first = _effect(plans[0]) if len(plans) > 1 else None
    for label, plan, candidate in zip(labels[1:], plans[1:], candidates[1:]):
        diffs = _differences(first, _effect(plan))
        if diffs:
            path, x, y = diffs[0]
            more = f", and {len(diffs) - 1} more difference(s)" if len(diffs) > 1 else ""
            relevant = set(relevant_rules(store))
            deciding = ", ".join(r for r in rules_deciding(candidates[0], candidate) if r in relevant)
            raise Refused(f"cannot tell which broker version wrote this store (its marks leave {guess.label}: `mqtool info` shows "
                          f"them), and its {plans[0].command} plan differs between {labels[0]} and {label} ({path}: {_short(x)} vs {_short(y)}{more}; "
                          f"rules: {deciding}): pass --broker-version with the release the broker ran "
                          f"(e.g. {', '.join(str(c) for c in guess.candidates)})")
    if len(plans) == 1:  # every era left follows the same rules for this store: nothing to tell the user
        return dataclasses.replace(plans[0], version_source=f"detected: {guess.label}, alike for this store (evidence: mqtool info)")
    considered = ", ".join(labels)
    source = f"not decided by the store; considered {considered}: the plans are equal (evidence: mqtool info)"
    note = f"the broker version could not be told from the store; the plan was made under each candidate ({considered}) and is the same under all"
    # broker_version stays the first candidate's: ``apply`` reopens the store with it
    return dataclasses.replace(plans[0], version_source=source, notes=plans[0].notes + (note,))

