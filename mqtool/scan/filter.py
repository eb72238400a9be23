"""``MessageFilter``: the one implementation of ``mqtool dump``'s filters, applied to Arrow batches of
``MESSAGE_SCHEMA`` columns (``mqtool/scan/schema.py``) by every reader of the columnar scan."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass(frozen=True)
class MessageFilter:
    """``mqtool dump``'s filters, applied in the reader (all given must match)."""

    topics: tuple[str, ...] = ()
    queue: int | None = None
    since: int | None = None
    until: int | None = None
    tag: str | None = None
    key: str | None = None
    uniq_key: str | None = None

    def columns(self) -> list[str]:
        """The message columns the given filters read."""
        wanted = {"topic": self.topics, "queue_id": self.queue is not None, "store_timestamp": self.since is not None or self.until is not None,
                  "tags": self.tag is not None, "keys": self.key is not None, "uniq_key": self.uniq_key is not None}
        return [name for name, used in wanted.items() if used]

    def apply(self, t: pa.Table) -> pa.Table:
        from . import compute

        mask = self.mask(t)
        return t if mask is None else compute.filter(t, mask)

    def mask(self, t: pa.Table | pa.RecordBatch) -> pa.ChunkedArray | pa.Array | None:
        """The rows that pass every filter given; None when none is."""
        import pyarrow as pa  # here, not at import: a command may build the filter without reading batches

        from . import compute

        conditions = []
        if self.topics:
            conditions.append(compute.is_in(t["topic"], pa.array(list(self.topics), pa.string())))
        if self.queue is not None:
            conditions.append(compute.equal(t["queue_id"], self.queue))
        if self.since is not None:
            conditions.append(compute.greater_equal(t["store_timestamp"], self.since))
        if self.until is not None:
            conditions.append(compute.less_equal(t["store_timestamp"], self.until))
        if self.tag is not None:
            conditions.append(compute.fill_null(compute.equal(t["tags"], self.tag), False))
        if self.key is not None:  # per row, how many of its KEYS equal the key
            import numpy as np

            keys = t["keys"].combine_chunks() if isinstance(t["keys"], pa.ChunkedArray) else t["keys"]
            hits = compute.cast(compute.equal(keys.values, self.key), pa.int64())
            counts = np.zeros(len(keys), dtype=np.int64)
            np.add.at(counts, compute.list_parent_indices(keys).to_numpy(), hits.to_numpy(zero_copy_only=False))
            conditions.append(compute.greater(compute.numbers(counts, pa.int64()), 0))
        if self.uniq_key is not None:
            conditions.append(compute.fill_null(compute.equal(t["uniq_key"], self.uniq_key), False))
        return functools.reduce(compute.and_, conditions) if conditions else None

