"""The planners, in one place: ``plan_recover``, ``plan_truncate_dirty`` (``recover.py``),
``plan_rebuild_cq``, ``plan_rebuild_index`` (``rebuild.py``) and their options."""

from .pieces import PlanOptions, file_crc32, last_nonzero
from .rebuild import plan_rebuild_cq, plan_rebuild_index
from .recover import plan_recover, plan_truncate_dirty

__all__ = ["PlanOptions", "file_crc32", "last_nonzero", "plan_rebuild_cq", "plan_rebuild_index", "plan_recover", "plan_truncate_dirty"]
