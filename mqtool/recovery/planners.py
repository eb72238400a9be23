"""The public planners: each plans under every candidate version (``candidates.py``) over the ``*_one_version`` planners of
``recover.py`` / ``rebuild.py`` (imported nowhere else: tests/test_plan_imports.py)."""

import dataclasses
import functools

from ..errors import BadInput, BadStoreFile, Refused

from . import rebuild, recover
from .candidates import plan_under_candidates, plans_per_candidate
from .plans import PlanOptions


def _under_candidates(one_version, name: str):
    @functools.wraps(one_version)
    def plan(store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache=None, **shown):
        # ``shown`` (plan_recover's ``walked``) sees every candidate's scan: each walk is of the same bytes
        made = plan_under_candidates(store, lambda s, c, scans: one_version(s, options, with_crc=with_crc, cache=c, scans=scans, **shown), cache)
        refuse_ext_entries(store, made)
        return made

    plan.__name__ = plan.__qualname__ = name
    plan.__doc__ = f"``{one_version.__name__}`` under every candidate version (module docstring)."
    return plan


def refuse_ext_entries(store, plan) -> None:
    """Refuse adding entries to a store with ``consumequeue_ext/`` (rules §3.9): mqtool writes no ext unit."""
    ext = store.root / "consumequeue_ext" if store.root is not None else None
    if ext is None or not ext.is_dir() or not any(p.is_file() for p in ext.rglob("*")):
        return
    added = sum(q.added for q in plan.queues)
    if added:
        raise BadInput(f"{ext}: consume queue ext units (enableConsumeQueueExt) are not written by mqtool, and this "
                       f"{plan.command} would add {added} consume queue entries without them")


def recovered_queues(store, options: PlanOptions = PlanOptions()) -> list[tuple[str, object, dict]]:
    """The broker's next start as ``recover --dry-run`` plans it, per candidate: (eras, plan, queue sims)."""
    options = dataclasses.replace(options, keep_placed=True)
    made: list[dict] = []

    def one(s, cache, scans):
        made.append({})
        return recover.plan_recover_one_version(s, options, cache=cache, scans=scans, sims_out=made[-1])

    _, labels, plans = plans_per_candidate(store, one)
    return list(zip(labels, plans, made))


def queues_after_start(store, next_start=None):
    """What ``survivors`` judges against (``scan.survivors.QueuesAfter``): the queues after the broker's next start
    (``recovered_queues``, reference §8.2-§8.12, §15.4) where it changes a queue or an abort file is there; else, or where no
    recovery can be planned, the queues on disk. Skipped when the queues end at the log end: nothing to dispatch or cut."""
    from ..scan.survivors import ON_DISK, QueuesAfter
    from ..store.startfile import max_queue_phys_offset

    if store.root is None:  # commit log segments alone: no queue either way
        return ON_DISK
    if not store.abort_present and next_start is not None and next_start.logical_end is not None and next_start.logical_end == max_queue_phys_offset(store):
        return QueuesAfter(f"as on disk (the broker's next start, {next_start.mode} recovery from {next_start.scan_from}, changes no consume queue)")
    try:
        made = recovered_queues(store)
    except (Refused, BadStoreFile) as exc:  # BadStoreFile: a file the broker refuses to start on (``planparts.unloadable_files``)
        return QueuesAfter(f"as on disk: the broker's next start cannot be planned ({exc})")
    plan = made[0][1]
    how = f"{plan.mode} recovery from {plan.commitlog.scan_from}"
    changed = [q for _, p, _ in made for q in p.queues if q.added or q.cut or q.fillers or q.resurrected or q.max_after != q.max_before]
    if not store.abort_present and not changed:
        return QueuesAfter(f"as on disk (the broker's next start, {how}, changes no consume queue)")
    if len(made) > 1:
        how += f"; the broker version undecided: alike for these ids under each of {', '.join(label for label, _, _ in made)}"
    if plan.refused:
        how += f"; until then the broker refuses to start: {plan.refused}"
    return QueuesAfter(f"as after the broker's next start ({how})", [(label, sims) for label, _, sims in made])


plan_recover = _under_candidates(recover.plan_recover_one_version, "plan_recover")
plan_truncate_dirty = _under_candidates(recover.plan_truncate_dirty_one_version, "plan_truncate_dirty")
plan_rebuild_cq = _under_candidates(rebuild.plan_rebuild_cq_one_version, "plan_rebuild_cq")
plan_rebuild_index = _under_candidates(rebuild.plan_rebuild_index_one_version, "plan_rebuild_index")

__all__ = ["PlanOptions", "plan_rebuild_cq", "plan_rebuild_index", "plan_recover", "plan_truncate_dirty", "recovered_queues"]
