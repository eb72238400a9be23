"""What the broker's dispatchers derive from each record for the consume queues and the index (reference §3.2-§3.5, §6.5): the
scanner, the compiled dispatch, topic numbering, queue grouping and spill. Below ``scan``, ``verify`` and ``recovery`` in the
layers."""
