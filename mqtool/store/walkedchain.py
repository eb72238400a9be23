"""The plan's commit log walk kept for ``verify_after``: the records are walked and CRC-checked once.

The recovery scan (``dispatch.DispatchScanner``, discipline ``recovery`` with the CRC checked)
walks each segment's chain from its first byte with ``fastscan.walk_segment``, as ``verify``'s
commit log check does (``verify.segments.analyze_segment``); the two walks differ only at a CRC
failure, which ends the recovery (``CommitLog.checkMessageAndReturnSize`` with
``checkCRCOnRecover``) and not verify's chain. ``WalkedChain`` is shown every sub-batch of rows
the scan walks, while they are in cache, and applies verify's own per-record checks to them
(``segments.check_rows``: CRC verdict, PHYSICALOFFSET, ``__CRC32#`` property), building per
segment the prefix of the chain run verify would build. ``verify_after``'s commit log check then
continues each segment's walk from where the plan's stopped (``analyze_segment(walked=...)``)
instead of walking it again; its findings are those of a walk of its own.
"""

from __future__ import annotations

from . import fastscan as fs
from .segments import Run, check_rows


class WalkedChain:
    """Per segment base offset, the chain run prefix (``runs``) of the rows shown. Segments may
    be walked in two threads at once (``dispatch._Ahead``), each segment by one."""

    def __init__(self) -> None:
        self.runs: dict[int, Run] = {}

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
        last = rows.shape[0] - 1
        run.end = int(rows[last, fs.COL_POS] + rows[last, fs.COL_SIZE])
