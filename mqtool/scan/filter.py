"""``MessageFilter``, the one implementation of ``mqtool dump``'s filters, and its offset checks (shared with Spark)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import UsageError

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
    msg_id: str | None = None  # an offsetMsgId (the Spark scan's ``--msg-id``; ``dump`` reads the record it names directly)

    def columns(self) -> list[str]:
        """The message columns the given filters read."""
        wanted = {"topic": self.topics, "queue_id": self.queue is not None, "store_timestamp": self.since is not None or self.until is not None,
                  "tags": self.tag is not None, "keys": self.key is not None, "uniq_key": self.uniq_key is not None,
                  "msg_id": self.msg_id is not None}
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
        bounds = ((compute.equal, "queue_id", self.queue), (compute.greater_equal, "store_timestamp", self.since),
                  (compute.less_equal, "store_timestamp", self.until))
        conditions += [compare(t[column], value) for compare, column, value in bounds if value is not None]
        if self.key is not None:  # per row, how many of its KEYS equal the key
            import numpy as np

            keys = t["keys"].combine_chunks() if isinstance(t["keys"], pa.ChunkedArray) else t["keys"]
            hits = compute.cast(compute.equal(keys.values, self.key), pa.int64())
            counts = np.zeros(len(keys), dtype=np.int64)
            np.add.at(counts, compute.list_parent_indices(keys).to_numpy(), hits.to_numpy(zero_copy_only=False))
            conditions.append(compute.greater(compute.numbers(counts, pa.int64()), 0))
        for column, value in (("tags", self.tag), ("uniq_key", self.uniq_key), ("msg_id", self.msg_id and self.msg_id.upper())):
            if value is not None:  # a null value (no such property) is no match
                conditions.append(compute.fill_null(compute.equal(t[column], value), False))
        return functools.reduce(compute.and_, conditions) if conditions else None


def msg_id_offset(msg_id: str) -> int:
    """The commit log offset an offsetMsgId (``--msg-id``) names; a usage error when it is none."""
    from ..formats.msgid import decode_msg_id

    try:
        return decode_msg_id(msg_id).commit_log_offset
    except ValueError:
        raise UsageError(f"--msg-id {msg_id!r} is not an offsetMsgId (32 or 56 hex characters)") from None


def check_offset_range(start: int | None, stop: int | None, msg_id: str | None = None) -> None:
    """``--from-offset``, ``--to-offset`` and ``--msg-id`` as ``mqtool dump`` takes them (usage errors)."""
    if msg_id is not None and (start is not None or stop is not None):
        raise UsageError("--msg-id is a direct lookup: it does not combine with --from-offset/--to-offset")
    if start is not None and stop is not None and stop < start:
        raise UsageError(f"--to-offset {stop} is before --from-offset {start}")

