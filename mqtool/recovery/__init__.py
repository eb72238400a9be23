"""Recovery planning: what the broker's load and recovery would do to a store, computed from the
read-only store model and returned as a ``plans.Plan`` (data; ``mqtool.apply`` executes it).

``planners`` is the public entry (each plan under every candidate version: ``candidates``);
``recover``, ``logkinds``, ``dledger`` and ``rebuild`` plan under one version, from the parts
``planparts``, ``queues`` (one consume queue through recovery) and ``lost`` share; ``repair``
adds the fixes the broker never makes. Index files are placed by ``dispatch.placement``.
"""
