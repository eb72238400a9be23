"""Recovery planning: what the broker's load and recovery would do to a store, computed from the
read-only store model and returned as a ``plans.Plan`` (data, never writes).

- ``planners``: the public ``plan_recover``, ``plan_truncate_dirty``, ``plan_rebuild_cq``,
  ``plan_rebuild_index``, each under every candidate version (``candidates``);
- ``recover`` / ``logkinds`` / ``dledger``: the broker's recovery, classic and DLedger, in steps,
  and ``rebuild``: the rebuilds, each under the one version the store is read as (``*_one_version``);
- ``planparts``: the parts of a plan the recovery and the rebuilds share;
- ``queues``: one consume queue through recovery, simulated on its bytes;
- ``lost``: the records a cut discards; ``plans``: the plan records and their JSON.

It builds on the store model (the version rules, where the scan starts: ``store.startfile``, the
next start: ``store.nextstart``) and the broker's dispatch and placement (``mqtool.dispatch``: the
index files are placed by ``dispatch.placement.IndexPlacement``, written by nothing here).
``mqtool.apply`` executes plans; nothing here writes to a store.
"""
