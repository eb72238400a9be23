"""The planners, in one place: ``plan_recover``, ``plan_truncate_dirty`` (``recover.py``),
``plan_rebuild_cq``, ``plan_rebuild_index`` (``rebuild.py``) and their options. Each plans under
every candidate version when the store does not tell which one wrote it (``candidates.py``)."""

import functools

from . import rebuild, recover
from .candidates import plan_under_candidates
from .plan import PlanOptions
from .plansteps import file_crc32, last_nonzero


def _under_candidates(planner):
    @functools.wraps(planner)
    def plan(store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache=None, **shown):
        # ``shown`` (plan_recover's ``walked``) sees every candidate's scan: each walk is of the same bytes
        return plan_under_candidates(store, lambda s, c: planner(s, options, with_crc=with_crc, cache=c, **shown), cache)

    return plan


plan_recover = _under_candidates(recover.plan_recover)
plan_truncate_dirty = _under_candidates(recover.plan_truncate_dirty)
plan_rebuild_cq = _under_candidates(rebuild.plan_rebuild_cq)
plan_rebuild_index = _under_candidates(rebuild.plan_rebuild_index)

__all__ = ["PlanOptions", "file_crc32", "last_nonzero", "plan_rebuild_cq", "plan_rebuild_index", "plan_recover", "plan_truncate_dirty"]
