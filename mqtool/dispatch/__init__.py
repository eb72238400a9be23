"""What the broker's dispatchers derive from each record, for the consume queues and the index
(reference §3.2-§3.5, §6.5): the scanner that walks a range and hands out batches
(``scanner``), the compiled per-record dispatch (``fastdispatch``), the topic numbering, the
queue grouping and the spill of batches. Read by ``verify``'s cross-checks, the recovery
planner and the rebuilds; below ``scan``, ``verify`` and ``recovery`` in the layers."""
