"""``mqtool query``'s fallback without an index file: the key looked up by a scan, ROLLBACK left out (never indexed)."""

from __future__ import annotations

from typing import Callable

from ..store import Store
from . import compute
from .filter import MessageFilter
from .messages import MessageScan


def scan_key_offsets(store: Store, topic: str, key: str, *, uniq: bool, begin: int | None = None, end: int | None = None, progress: Callable[[int], None] | None = None) -> tuple[list[int], int]:
    """The offsets of the records matching ``topic`` and ``key``, and where the scan ended."""
    match = MessageFilter(topics=(topic,), since=begin, until=end, key=None if uniq else key, uniq_key=key if uniq else None)
    scan = MessageScan(store, columns=["offset", "transaction_type"], match=match, check_crc=False)
    offsets: list[int] = []
    for batch in scan:
        kept = compute.filter(batch, compute.not_equal(batch["transaction_type"], "ROLLBACK"))
        offsets.extend(kept["offset"].to_pylist())
        if progress is not None:
            progress(batch["offset"][-1].as_py())
    return offsets, scan.end.offset
