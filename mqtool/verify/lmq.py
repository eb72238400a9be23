"""``verify``'s check of the LMQ multi-dispatch queues (``consumequeue/%LMQ%<name>/0/``, reference §3.6).

Every record dispatched to a consume queue that carries ``INNER_MULTI_DISPATCH`` and
``INNER_MULTI_QUEUE_OFFSET`` owes each target queue ``(offset, size, tags code)`` at the listed
queue offset (``formats.dispatch.multi_dispatch_targets``); each LMQ queue's units are compared
with them, with the consume queue's kinds."""

from __future__ import annotations

from itertools import groupby
from typing import Callable, Iterator

from ..formats.dispatch import LMQ_PREFIX, LmqOffsetThrows, multi_dispatch_targets
from ..store import Store
from ..store.consumequeue import queue_id_of
from .findings import Finding, error, warning
from .logstream import LogStream

_COLUMNS = ["offset", "topic", "queue_id", "size", "tags_code", "transaction_type", "properties"]


def lmq_queue_dirs(store: Store) -> list[str]:
    cq = store.path("consumequeue")
    return sorted(p.name for p in cq.iterdir() if p.name.startswith(LMQ_PREFIX)) if cq.is_dir() else []


def expected_lmq_entries(store: Store, start: int | None, stop: int | None, unread_before: Callable[[], int] | None) -> tuple[dict[tuple[str, int], dict[int, tuple[int, int, int]]], int]:
    """``(queue name, queue id) -> {queue offset: (offset, size, tags code)}`` from the records of the log the broker
    serves (``LogStream``: on past damage its recovery never reads, ``unread_before``), and the logical end."""
    import pyarrow as pa  # here: a store without LMQ never loads pyarrow

    from ..scan import compute
    from ..scan.messages import MessageScan

    rule = store.rules.lmq_rule  # the rules of the newest era left, as the planners read them
    expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
    scan = MessageScan(store, columns=_COLUMNS, walk=LogStream(store, start, stop, unread_before=unread_before))
    for batch in scan:
        flagged = compute.is_valid(compute.map_lookup(batch["properties"], options=compute.MapLookupOptions(pa.scalar("INNER_MULTI_DISPATCH"), "first")))
        dispatched = compute.is_in(batch["transaction_type"], pa.array(["NOT_TYPE", "COMMIT"], pa.string()))
        for row in compute.filter(batch, compute.and_(flagged, dispatched)).to_pylist():
            try:
                targets = multi_dispatch_targets(row["topic"], row["queue_id"], dict(row["properties"]), rule=rule)
            except LmqOffsetThrows as exc:  # the entries the broker writes before its dispatch throws
                targets = exc.written
            for name, queue_id, queue_offset in targets:
                expected.setdefault((name, queue_id), {})[queue_offset] = (row["offset"], row["size"], row["tags_code"])
    return expected, scan.end.offset


def lmq_findings(store: Store, start: int | None = None, stop: int | None = None, unread_before: Callable[[], int] | None = None) -> Iterator[Finding]:
    """The findings; the generator's return value is a one-line summary (None when the store has no LMQ queue
    and no record asks for one)."""
    expected, end = expected_lmq_entries(store, start, stop, unread_before)
    names = set(lmq_queue_dirs(store)) | {name for name, _ in expected if name.startswith(LMQ_PREFIX)}
    if not names:
        return None
    entries = 0
    for name in sorted(names):
        queue_dirs = sorted(p for p in store.path("consumequeue", name).iterdir() if p.is_dir()) if store.path("consumequeue", name).is_dir() else []
        queue_ids = {q for p in queue_dirs if (q := queue_id_of(p.name)) is not None} | {q for n, q in expected if n == name}
        for queue_id in sorted(queue_ids):
            want = expected.get((name, queue_id), {})
            queue = store.consume_queue(name, queue_id)
            have = {e.queue_offset: (e.phys_offset, e.size, e.tags_code) for e in queue.entries() if not e.is_filler}
            entries += len(have)
            rel = f"consumequeue/{name}/{queue_id}"
            for queue_offset, unit in sorted(have.items()):
                if start is not None and unit[0] < start or stop is not None and unit[0] >= stop:
                    continue
                wanted = want.get(queue_offset)
                if wanted == unit:
                    continue
                details = {"topic": name, "queue_id": queue_id, "queue_offset": queue_offset}
                if wanted is not None:
                    yield error("cq-entry-mismatch", f"{name}/{queue_id} entry {queue_offset} is (offset {unit[0]}, size {unit[1]}, tags {unit[2]}); the record that dispatched it says (offset {wanted[0]}, size {wanted[1]}, tags {wanted[2]})",
                                file=rel, offset=unit[0], expected=list(wanted), found=list(unit), details=details)
                elif unit[0] >= end:
                    yield warning("cq-entry-beyond-end", f"{name}/{queue_id} entry {queue_offset} points at {unit[0]}, past the commit log's logical end {end}",
                                  file=rel, offset=unit[0], expected=f"< {end}", found=unit[0], details=details)
                else:
                    yield error("cq-entry-dangling", f"{name}/{queue_id} entry {queue_offset} points at {unit[0]}, where no record dispatched to this LMQ queue at that offset",
                                file=rel, offset=unit[0], details=details)
            missing = sorted(q for q in want if q not in have)
            for first, last in _runs(missing):
                details = {"topic": name, "queue_id": queue_id, "first_queue_offset": first, "last_queue_offset": last, "count": last - first + 1}
                yield error("cq-entry-missing", f"{name}/{queue_id}: {last - first + 1} record(s) carrying this LMQ queue have no entry (queue offsets {first}..{last})",
                            file=rel, offset=want[first][0], details=details)
    return f"{len(names)} LMQ queue(s) checked against the records' INNER_MULTI_DISPATCH, {entries} entries"


def _runs(values: list[int]) -> Iterator[tuple[int, int]]:
    """Consecutive runs ``(first, last)`` of sorted integers."""
    for _, run in groupby(enumerate(values), key=lambda iv: iv[1] - iv[0]):
        run = list(run)
        yield run[0][1], run[-1][1]
