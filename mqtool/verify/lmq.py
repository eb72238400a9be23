"""``verify``'s check of the LMQ multi-dispatch queues (``consumequeue/%LMQ%<name>/0/``, reference §3.6).

Every record dispatched to a consume queue that carries ``INNER_MULTI_DISPATCH`` and
``INNER_MULTI_QUEUE_OFFSET`` owes each target queue ``(offset, size, tags code)`` at the listed
queue offset (``formats.dispatch.multi_dispatch_targets``); each LMQ queue's units are compared
with them, with the consume queue's kinds. A record whose dispatch throws (``formats.dispatch.DispatchThrows``)
stops the broker's dispatch there, and so does one its reput's long-polling notify throws on (``LmqNotifyThrows``):
``next_start_stall`` says what that does to its next start, ``with_stall`` adds it to that start's line."""

from __future__ import annotations

from dataclasses import replace
from itertools import groupby
from typing import Callable, Generator, Iterator, NamedTuple

from ..dispatch import fastdispatch as fd
from ..formats.dispatch import (LMQ_PREFIX, NO_MULTI_DISPATCH, DispatchThrows, LmqNotifyThrows, LmqOffsetThrows, NoPropertiesThrows,
                                multi_dispatch_targets)
from ..store import Store
from ..store.nextstart import NextStart
from .findings import Finding, error, warning

_COLUMNS = ["offset", "topic", "queue_id", "size", "tags_code", "transaction_type", "properties"]


def lmq_queue_dirs(store: Store) -> list[str]:
    cq = store.path("consumequeue")
    return sorted(p.name for p in cq.iterdir() if p.name.startswith(LMQ_PREFIX)) if cq.is_dir() else []


class LmqExpected:
    """What each LMQ queue is owed: ``(queue name, queue id) -> {queue offset: (offset, size, tags code)}`` from the records
    of the log the broker serves, and the records whose dispatch throws, in log order (``DispatchThrows``, their offsets set;
    a property-less one where the release may be 4.9.3, ``Store.no_properties_npe``). A rider of the cq check's walk
    (``Verification._riders``: on past damage the broker's recovery never reads, that walk reads on): ``add`` takes its
    batches in log order, in whatever thread checks them; ``throws`` after the walk."""

    def __init__(self, store: Store):
        from ..scan.messages import MessageScan  # here: a store without LMQ never loads pyarrow

        self.store = store
        # the rules of the newest era left, as the planners read them; read here, before the walk: the checks thread must not
        # read them while another thread assumes a release (``each_candidate``)
        self.rule, self.npe = store.rules.lmq_rule, store.no_properties_npe
        self.expected: dict[tuple[str, int], dict[int, tuple[int, int, int]]] = {}
        self._throws: list[DispatchThrows | int] = []  # an int: a record read as property-less, read whole in ``throws``
        self._builder = MessageScan(store, columns=_COLUMNS, walk=())  # builds the columns of another walk's batches

    def add(self, segment_batch) -> None:
        """One batch of the walk (a ``fastscan.SegmentBatch``)."""
        import numpy as np
        import pyarrow as pa

        from ..scan import compute

        batch = self._builder.build(segment_batch)
        if batch is None:
            return
        npe = self.npe
        flagged = compute.is_valid(compute.map_lookup(batch["properties"], options=compute.MapLookupOptions(pa.scalar("INNER_MULTI_DISPATCH"), "first")))
        if npe is not False:
            flagged = compute.or_(flagged, pa.array(np.diff(np.asarray(batch["properties"].offsets)) == 0))  # no property
        dispatched = compute.is_in(batch["transaction_type"], pa.array(["NOT_TYPE", "COMMIT"], pa.string()))
        for row in compute.filter(batch, compute.and_(flagged, dispatched)).to_pylist():
            if not row["properties"]:  # no property read: the NPE is for a zero propertiesLength alone (a null map)
                self._throws.append(row["offset"])
                continue
            try:
                targets = multi_dispatch_targets(row["topic"], row["queue_id"], dict(row["properties"]), rule=self.rule)
            except LmqOffsetThrows as exc:  # the entries the broker writes before its dispatch throws
                exc.offset, targets = row["offset"], exc.written
                self._throws.append(exc)
            for name, queue_id, queue_offset in targets:
                self.expected.setdefault((name, queue_id), {})[queue_offset] = (row["offset"], row["size"], row["tags_code"])

    def throws(self) -> list[DispatchThrows]:
        """The records whose dispatch throws; the property-less ones read here, in the caller's thread, after the walk."""
        npe, out = self.npe, []
        for throw in self._throws:
            if not isinstance(throw, int):
                out.append(throw)
            elif not self.store.commitlog.read_record(throw).properties:
                out.append(NoPropertiesThrows(throw, undecided=npe is None))
        return out


def each_candidate(store: Store, answer: Callable[[Store], object]) -> list:
    """``answer(store)``, under each candidate release while the release is undecided after a clean stop (where the eras'
    starts differ: ``redispatch.redispatch_start`` wants the release), else once."""
    if store.version is not None or store.abort_present:
        return [answer(store)]
    answers = []
    for candidate in store.version_guess.candidates:
        with store.assumed_version(candidate):
            answers.append(answer(store))
    return answers


def next_start_stall(store: Store, throw: DispatchThrows) -> str | None:
    """How the broker's next start meets a record whose dispatch throws, or None when that start dispatches no record
    from there (``redispatch.redispatch_start``; while the release is undecided, the candidates' answer when they agree):
    a recovery that dispatches (``redispatch.dispatching_recovery``: abnormal recovery, 5.3.2+'s normal one; with DLedger data,
    5.2.0+'s abnormal one alone) dispatches it inside ``DefaultMessageStore.load``, which catches the exception and fails
    (the broker refuses to start); 4.5.0-4.9.8's start-up reput (``ReputMessageService.doReput``) retries it forever, and
    ``start()`` waits for it (rules §2.11, §3.12, §8.4; ``CommitLog.recoverAbnormally``, ``ReputMessageService.run``
    @4.9.7, 5.1.4, 5.3.3), up to DLedger's committed position on a DLedger store: past it, after the start. A recovery
    notifies nothing: a throw of the reput's notify alone (``LmqNotifyThrows``) stops 4.9.3-4.9.8's start-up reput
    (``reput_notifies``)."""
    from ..store.redispatch import dispatching_recovery, redispatch_start

    def how(s: Store) -> str | None:
        first, _ = redispatch_start(s)
        if first is None or throw.offset < first:
            return None
        reput = "its start-up reput dispatches it and retries it forever: the broker's start never completes"
        if s.recovers_dledger_data:  # ``start()`` waits for the reput up to DLedger's committed position alone
            from ..store.dledgerstart import data_recovery  # a DLedger module: DLedger stores alone

            if throw.offset >= (data_recovery(s.commitlog).committed_pos or 0):
                reput = ("DLedger commits it after the start, then the reput dispatches it and retries it forever: the broker "
                         "starts but dispatches nothing after it")
        if isinstance(throw, LmqNotifyThrows):
            return reput if s.rules.reput_from_cq_max else None
        if (mode := dispatching_recovery(s)) is not None:
            return f"{mode} recovery dispatches it, and the load fails: the broker refuses to start"
        return reput

    hows = set(each_candidate(store, how))
    return hows.pop() if len(hows) == 1 else None


def stall_of(throw: DispatchThrows, how: str) -> str:
    """``NextStart.stall``: the record, why its dispatch throws, and ``next_start_stall``'s ``how``."""
    maybe = " (if {}: {} decides)".format(*throw.undecided) if throw.undecided else ""
    return f"the record at {throw.offset} {throw.why}{maybe}: {how}"


def reput_notifies(store: Store) -> bool:
    """Whether the next start's reput reads records through its long-polling notify (``LmqNotifyThrows``): 4.9.3-4.9.8's
    start-up reput from the consume queues' max (after abnormal recovery, which notifies nothing: past the last record it
    queued), on a master with long polling (``StoreConfig.reput_notifies``; ``doReput``, ``start()`` @4.9.3, 4.9.7); 5.x's
    starts at the log's end (``start()`` @5.3.3)."""
    notifying = each_candidate(store, lambda s: s.rules.reput_from_cq_max and s.rules.lmq_rule != NO_MULTI_DISPATCH)
    return store.config.reput_notifies and any(notifying)


class Dispatched(NamedTuple):
    """What a walk that dispatched every record of the chain ``[start, end)`` saw (``SharedWalk.dispatched``; ``recover``'s
    scan: ``recovery.repair.plan_dispatched``): the offset of the last record whose dispatch flags (``THROW_FLAGS``) let a
    dispatch or notify throw, -1 for none."""

    start: int
    end: int
    last_flagged: int


# a record only throws with multi-dispatch properties (``consume_queue_entries``, ``first_notify_throw``) or none at all
# (``NoPropertiesThrows``); one the compiled dispatch leaves to Python is not known not to
THROW_FLAGS = fd.FLAG_MULTI_DISPATCH | fd.FLAG_NO_PROPERTIES | fd.FLAG_FALLBACK


def last_flagged(offsets, flags, last: int) -> int:
    """``Dispatched.last_flagged`` on past a batch of records dispatched in order (their ``offsets`` and dispatch ``flags``):
    the offset of its last record with a ``THROW_FLAGS`` flag, else ``last`` (that of an earlier batch, or -1)."""
    flagged = (flags & THROW_FLAGS).nonzero()[0]
    return int(offsets[flagged[-1]]) if flagged.size else last


def stall_throw(store: Store, stop: int, dispatched: Callable[[], Dispatched | None] | None = None) -> tuple[DispatchThrows, str] | None:
    """The first record the next start dispatches (``redispatch.redispatch_start``, up to ``stop``, its end) whose dispatch,
    or reput notify (``reput_notifies``), throws, with ``next_start_stall``'s how, found as the planners find it
    (``dispatch.scanner.first_throw``, compiled); None where there is none, and unread where none can be: multi-dispatch
    off (``Store.multi_dispatch``: what the records ask for where nothing says, the throw then undecided) and no notify,
    or ``dispatched()`` saw every record of that range with no flag to throw on (verify's one walk: no second)."""
    from ..store.redispatch import dispatching_recovery, redispatch_start

    rules, notify = store.rules, reput_notifies(store)
    if not (store.multi_dispatch or notify) or rules.lmq_rule == NO_MULTI_DISPATCH:
        return None
    first = min((s for s in each_candidate(store, lambda s: redispatch_start(s)[0]) if s is not None), default=None)
    first_read = None if first is None else max(first, store.commitlog.min_offset)
    if first_read is None or first_read >= stop:
        return None
    seen = dispatched() if dispatched is not None else None
    if seen is not None and seen.start <= first_read and stop <= seen.end and seen.last_flagged < first_read:
        return None
    from ..dispatch.scanner import TAGS_DELIVERY_TIME, MultiDispatch, after_phys, first_notify_throw, first_throw, phase_scanner  # compiled
    from ..store.resync import record_start

    multi = MultiDispatch(store.commitlog, rules.legacy_properties, rules.lmq_rule, store.no_properties_npe, store.multi_dispatch_on)
    dispatch, notified = multi if store.multi_dispatch else None, multi._replace(known=True) if notify else None
    scan = phase_scanner(store.commitlog, record_start(store.commitlog, first), stop, discipline="recovery", tags=TAGS_DELIVERY_TIME,
                         delay_table=store.delay_table, legacy_properties=rules.legacy_properties, index_enable=False, check_crc=False)
    after_recovery = dispatching_recovery(store) == "abnormal" and notified is not None  # the reput after it: past the last record
    # recovery queued (a DLedger broker before 5.2.0 recovers as after a clean stop)
    pending = None  # a notify throw of that reput, unless a later record is queued
    for batch in scan:  # from the record at ``first`` or the next (5.3.2+: records after the queues' max end)
        batch = after_phys(batch, first - 1)
        thrown = first_throw(batch, scan.topics.names, dispatch, None if after_recovery else notified)
        if thrown is not None and (how := next_start_stall(store, thrown)) is not None:
            return thrown, how
        queued = batch.phys[batch.to_consume_queue]
        if after_recovery and (pending is None or queued.size and queued[-1] > pending.offset):
            pending = first_notify_throw(after_phys(batch, int(queued[-1]) if queued.size else first - 1), scan.topics.names, notified)
    how = None if pending is None else next_start_stall(store, pending)
    return None if how is None else (pending, how)


def with_stall(store: Store, found: NextStart | None) -> NextStart | None:
    """``found`` (``store.nextstart.next_start``) with where a start that ends the log at its end stops (``stall_of`` the
    ``stall_throw``, or None): every command that says where the next start ends (``info``, ``verify``, ``salvage``) says this one."""
    return stalled_start(store, found)[0]


def stalled_start(store: Store, found: NextStart | None, dispatched: Callable[[], Dispatched | None] | None = None
                  ) -> tuple[NextStart | None, tuple[DispatchThrows, str] | None]:
    """``with_stall``'s start and the ``stall_throw`` it says (None: none), for ``verify``'s finding of that record too."""
    if found is None or found.logical_end is None:
        return found, None
    throw = stall_throw(store, found.logical_end, dispatched)
    return replace(found, stall=None if throw is None else stall_of(*throw)), throw


def throw_finding(throw: DispatchThrows, how: str | None) -> Finding:
    """verify's ``dispatch-throws`` finding of a record whose dispatch throws, and ``how`` its next start meets it."""
    maybe = "if {} ({} decides), ".format(*throw.undecided) if throw.undecided else ""
    what = "reput's notify" if isinstance(throw, LmqNotifyThrows) else "dispatch"
    return (warning if throw.undecided else error)(
        "dispatch-throws", f"{maybe}the record at {throw.offset} {throw.why}: the broker's {what} writes {throw.wrote}, then throws; "
        f"at its next start {how or 'nothing dispatches it'}", offset=throw.offset, details={"writes": throw.wrote})


def lmq_findings(store: Store, owed: LmqExpected, end: int, start: int | None = None, stop: int | None = None
                 ) -> Generator[Finding, None, str | None]:
    """The findings, ``owed`` fed the walk of the records in ``[start, stop)`` that ended at ``end`` (the logical end); the
    generator's return value is a one-line summary (None when the store has no LMQ queue and no record asks for one)."""
    expected = owed.expected
    for throw in owed.throws():
        yield throw_finding(throw, next_start_stall(store, throw))
    names = set(lmq_queue_dirs(store)) | {name for name, _ in expected if name.startswith(LMQ_PREFIX)}
    if not names:
        return None
    entries = 0
    loaded: dict[str, set[int]] = {}  # the queue ids the broker loads by LMQ name: the one listing of consumequeue/ (discover_queues)
    for directory in store.queue_directories:
        if directory.topic in names:
            loaded.setdefault(directory.topic, set()).add(directory.queue_id)
    for name in sorted(names):
        queue_ids = loaded.get(name, set()) | {q for n, q in expected if n == name}
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
            for first, last in adjacent_runs(missing):
                details = {"topic": name, "queue_id": queue_id, "first_queue_offset": first, "last_queue_offset": last, "count": last - first + 1}
                yield error("cq-entry-missing", f"{name}/{queue_id}: {last - first + 1} record(s) carrying this LMQ queue have no entry (queue offsets {first}..{last})",
                            file=rel, offset=want[first][0], details=details)
    return f"{len(names)} LMQ queue(s) checked against the records' INNER_MULTI_DISPATCH, {entries} entries"


def adjacent_runs(values: list[int]) -> Iterator[tuple[int, int]]:
    """Consecutive runs ``(first, last)`` of sorted integers."""
    for _, run in groupby(enumerate(values), key=lambda iv: iv[1] - iv[0]):
        run = list(run)
        yield run[0][1], run[-1][1]
