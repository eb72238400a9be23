"""The plan's commit log walk kept for ``verify_after``: walked and CRC-checked once (``segments.check_rows``)."""

from __future__ import annotations

from . import fastscan as fs
from .segments import Run, check_rows


class WalkedChain:
    """Per segment base offset, the chain run prefix (``runs``) of the rows shown; one thread per segment."""

    def __init__(self) -> None:
        self.runs: dict[int, Run] = {}
        # what each plan's recovery scan dispatched (``recover._scan``): the properties rule it read them by
        # (``legacy_properties``) and ``verify.lmq.Dispatched``, for ``verify_after``'s next start (``repair.plan_dispatched``)
        self.dispatched: list[tuple[bool, tuple[int, int, int]]] = []

    def rows(self, batch: fs.SegmentBatch) -> None:
        """One call's rows of ``walk_segment`` (CRC checked), in walk order."""
        rows = batch.rows
        first = int(rows[0, fs.COL_POS])
        if first == 0:  # a walk from the segment's first byte: a prefix of verify's chain run
            run = self.runs[batch.base_offset] = Run(0)
        else:
            run = self.runs.get(batch.base_offset)
            if run is None or run.end != first:
                return  # not the continuation of a walk from the first byte
        run.records += rows.shape[0]
        check_rows(batch.array, rows, batch.base_offset, run)
        run.end = int(rows[-1, fs.COL_POS] + rows[-1, fs.COL_SIZE])
