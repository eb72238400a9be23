"""The walk of DLedger data files (reference §15.2, §15.4) as ``recover`` checks them, with ``walk_segment``'s rows."""

from __future__ import annotations

import numpy as np

from . import fastscan as fs
from ._dledgerwalk import (  # noqa: F401  (the state slots and refusal codes, for this module's users)
    ENTRY_BODY_BAD, ENTRY_INDEX_BAD, ENTRY_MAGIC_BAD, ENTRY_POS_BAD, ENTRY_SIZE_BAD, ENTRY_TERM_BAD, ST_INDEX, ST_TERM, ST_WHY,
    walk_entries,
)

ENTRY_REASONS = {
    ENTRY_MAGIC_BAD: "entry magic is not 1",
    ENTRY_SIZE_BAD: "entry size is not body length + 48",
    ENTRY_POS_BAD: "entry pos is not its own offset",
    ENTRY_INDEX_BAD: "entry index is not the previous + 1",
    ENTRY_TERM_BAD: "entry term is lower than the previous",
    ENTRY_BODY_BAD: "entry body is not exactly one message record",
}


class EntryWalker:
    """``FastScan``'s walk of a DLedger log: ``walk_entries`` carrying index and term, classic segments as records (§15.5)."""

    def __init__(self, divided_offset: int = 0):
        self.divided_offset = divided_offset
        self.state = np.array([-1, -1, 0], dtype=np.int64)

    def __call__(self, array, pos, stop, check_crc, stop_on_crc, out, base):
        if base < self.divided_offset:
            return fs.walk_segment(array, pos, stop, check_crc, stop_on_crc, out)
        return walk_entries(array, pos, stop, check_crc, stop_on_crc, out, base, self.state)

    def reason(self) -> str:
        return ENTRY_REASONS.get(int(self.state[ST_WHY]), "")
