"""Recovery planning: what the broker's load and recovery would do to a store, as a ``plans.Plan``
(data; ``mqtool.apply`` executes it). ``planners`` is the public entry; ``repair`` adds the fixes the
broker never makes.
"""
