"""Recovery planning: what the broker's load and recovery would do, as a ``plans.Plan`` (``mqtool.apply`` executes it)."""
