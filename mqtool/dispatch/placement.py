"""The broker's placement rules, pure: where a consume queue unit goes (``putMessagePositionInfo``:
the write position, the repeat guard, fillers; reference §5.10) and which index slot and entry a
key takes (``IndexFile.putKey``, §6.5-§6.6), on arrays of state, compiled (``_placement.pyx``).
The recovery planner simulates queues with them; ``mqtool/apply/writers.py`` (the only writer of those
files) writes what they place."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._placement import (  # noqa: F401 - the state layouts and kernels, re-exported
    BATCH_DONE,
    BUFFER_FULL,
    H_BEGIN_PHY,
    H_BEGIN_TS,
    H_END_PHY,
    H_END_TS,
    H_INDEX_COUNT,
    H_PUT,
    H_SLOT_COUNT,
    ROLL_NEEDED,
    S_FILL_FROM,
    S_FILL_TO,
    S_MAX_PHYS,
    S_WRITE,
    index_records,
    place_units,
)


@dataclass
class QueueState:
    """Where a queue continues: next write position (None: no file yet) and max phys offset."""

    write_pos: int | None = None
    max_phys_offset: int = -1

    def as_array(self) -> np.ndarray:
        return np.array([-1 if self.write_pos is None else self.write_pos, self.max_phys_offset, -1, -1], dtype=np.int64)
