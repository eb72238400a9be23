"""Recovery planning: what the broker's load and recovery would do to a store, computed from the
read-only store model and returned as a ``plan.Plan`` (data, never writes).

- ``planner``: ``plan_recover``, ``plan_truncate_dirty``, ``plan_rebuild_cq``, ``plan_rebuild_index``;
- ``rules``: which algorithm a broker version follows; ``startfile``: where its scan starts;
- ``dispatch`` / ``fastdispatch``: the records the dispatchers receive (compiled);
- ``queues``: one consume queue through recovery, simulated on its bytes;
- ``lost``: the records a cut discards; ``plan``: the plan records and their JSON.

``mqtool.apply`` executes plans; nothing here writes to a store.
"""
