"""Plans for ``rebuild-cq`` and ``rebuild-index``: files regenerated from the commit log as the broker's reput and
``IndexService.buildIndex`` write them (reference §5.10, §6.5-§6.8, §8.12)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import BadInput
from ..formats import index as ixfmt
from ..formats.config import topic_names
from ..formats.dispatch import LMQ_PREFIX
from ..store import Store
from ..store.commitlog import CommitLog, ScanEnd
from ..dispatch.placement import ENTRY_BUFFER, H_INDEX_COUNT, H_PUT, IndexPlacement
from ..dispatch.scanner import TAGS_DELIVERY_TIME, DispatchBatch, DispatchCache, DispatchScanner, TopicTable
from .planparts import (DEFAULT_GEOMETRY, default_geometry_note, config_options, geometry, multi_dispatch, planned_entries, put_index, queue_actions, queue_plan,
                        rel, store_version, with_inputs, write_action)
from .plans import Action, CheckpointPlan, DispatchPhase, IndexFilePlan, IndexPlan, Plan, PlanOptions, QueuePlan
from .queues import QueueSim
from ..store.mappedfile import INDEX_SERVICE, LEFT_OUT
from ..store.nextstart import first_stray_refusal
from ..store.originals import CHUNK, OriginalFiles
from ..store.rules import VersionRules
from ..store.store import stray_effects, stray_text
from ..store.startfile import recovery_start
from .sharedscans import SharedScans, scan_phase, topic_table


class RebuildScan:
    """The dispatch both rebuilds write: every record the broker serves up to the valid end its recovery finds (§8.3), with the
    reput's rules (§8.12). ``end``, ``skipped`` and ``records`` are set once iterated; ``cache`` keeps batches for an apply."""

    def __init__(self, store: Store, rules: VersionRules, topics: TopicTable, *, index: bool, scans: SharedScans | None = None,
                 start: int | None = None, cache: DispatchCache | None = None):
        self.store, self.rules, self.topics, self.index, self.scans, self.cache, self.records = store, rules, topics, index, scans, cache, 0
        self.discipline = "served"  # the index and queues of the records the broker serves
        # where the broker's recovery starts scanning (a segment's first offset; ``start``: ``PlanOptions.scan_from``)
        self.start = recovery_start(store, rules).offset if start is None else start
        self.notes = []
        if store.abort_present:
            self.notes.append("the abort file is present (the broker did not stop cleanly): consider `mqtool recover` first; rebuilding up to the end abnormal recovery would find")
        self.end: ScanEnd | None = None
        self.skipped: list[ScanEnd] = []

    def _scanner(self, start: int, stop: int | None, discipline: str, *, ahead: bool = False,
                 commitlog: CommitLog | None = None) -> DispatchScanner:
        """No CRC check on DLedger data (§15.4); ``commitlog``: an unshared view for broken entry headers."""
        check_crc = discipline == "recovery" and self.store.config.check_crc_on_recover and not self.store.is_dledger
        return scan_phase(self.scans if commitlog is None else None, commitlog or self.store.commitlog, start, stop, discipline=discipline,
                          tags=TAGS_DELIVERY_TIME, delay_table=self.store.delay_table, legacy_properties=self.rules.legacy_properties,
                          index_enable=self.index, index_rule=self.rules.index_rule, check_crc=check_crc, topics=self.topics, ahead=ahead)

    def __iter__(self) -> Iterator[DispatchBatch]:
        for batch in self._walk():
            self.records += len(batch)
            if self.cache is not None:
                self.cache.add(0, batch)
            yield batch

    def _walk(self) -> Iterator[DispatchBatch]:
        cl = self.store.commitlog
        if self.start > cl.min_offset:
            head = self._scanner(cl.min_offset, self.start, self.discipline, ahead=True)
            yield from head
            self.skipped += head.skipped
        recovery = self._scanner(self.start, None, "recovery", ahead=True)
        yield from recovery
        end = recovery.end
        if self.store.is_dledger:  # DLedger's recovery keeps the log past damage after its start too
            from ..store.dledgerstart import record_in_broken_entry

            while (resume := cl.resume_after_damage(end)) is not None:
                self.skipped.append(end)
                if (loose := record_in_broken_entry(cl, end, resume)) is not None:  # the reput skips the header unread
                    yield from self._scanner(loose, resume, self.discipline, commitlog=cl.file_alone(loose))
                tail = self._scanner(resume, None, self.discipline)
                yield from tail
                self.skipped += tail.skipped
                end = tail.end
        self.end = end
        if not end.is_clean:
            self.notes.append(f"the commit log's valid end {end.offset} is damage ({end.reason}: {end.detail}); records after it are not dispatched (see `mqtool recover`)")


def _skipped_note(store: Store, end: ScanEnd) -> str:
    """The note that a record inside a DLedger entry with a broken header is dispatched (``record_in_broken_entry``)."""
    from ..store.dledgerstart import record_in_broken_entry

    resume = store.commitlog.resume_after_damage(end) if store.is_dledger else None
    inside = None if resume is None else record_in_broken_entry(store.commitlog, end, resume)
    if inside is None:
        return f"unreadable record at {end.offset} skipped ({end.reason})"
    return (f"DLedger entry header at {end.offset} unreadable ({end.reason}: {end.detail}): the record inside it at {inside} "
            "is dispatched, as the broker's reput reads it (it skips the 48 header bytes unread)")


def _rebuilt_queue(sim: QueueSim, q, clmin: int, rules: VersionRules) -> QueuePlan:
    """One queue's plan (``q``: its files on disk, if any); no file to write when they hold the rebuild's bytes."""
    old = QueueSim.load(q, rules=rules) if q is not None else None
    min_before, max_before = (old.min_offset(clmin, v5=rules.cq_min_offset_v5), old.max_offset) if old is not None else (0, 0)
    qp = queue_plan(sim, min_before, max_before, clmin, rules.cq_min_offset_v5, (None,))
    return replace(qp, files=()) if sim.equals_original() else qp


def plan_rebuild_cq_one_version(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None,
                                scans: SharedScans | None = None) -> Plan:
    """Regenerate the selected consume queues as the broker's reput writes them (§8.12, fillers §5.3)."""
    store.path()
    version, source = store_version(store)
    rules = VersionRules(version)
    topics = topic_table(scans, cache)
    scanner = RebuildScan(store, rules, topics, index=False, scans=scans, start=options.scan_from, cache=cache)
    allowed = None  # --respect-topic-config: the topics of ``config/topics.json``
    if options.respect_topic_config:
        doc = store.config_file("topics.json")
        if doc is None:
            raise BadInput(f"{store.path('config', 'topics.json')}: missing or unreadable, "
                           "so --respect-topic-config cannot tell which topics exist")
        allowed = topic_names(doc)

    def selected(topic: str, qid: int) -> bool:
        return ((options.topic is None or topic == options.topic) and (options.queue_id is None or qid == options.queue_id)
                and (options.queues is None or (topic, qid) in options.queues))

    existing = {(q.topic, q.queue_id): q for q in store.consume_queues if selected(q.topic, q.queue_id)}
    sims: dict = {}
    skipped: dict[str, int] = {}
    multi = multi_dispatch(store, rules)
    queued = 0
    for batch in scanner:
        for topic, qid, columns in planned_entries(batch, topics.names, multi):
            if not selected(topic, qid):
                continue
            if allowed is not None and topic not in allowed and not topic.startswith(LMQ_PREFIX):
                skipped[topic] = skipped.get(topic, 0) + len(columns[0])
                continue
            sim = sims.get((topic, qid))
            if sim is None:
                sim = sims[(topic, qid)] = QueueSim.of_store(store, topic, qid, rules=rules)
                if (topic, qid) in existing:
                    sim.original = dict(existing[(topic, qid)].files)
            queued += sim.place(*columns)
    end, notes = scanner.end.offset, scanner.notes
    notes += [_skipped_note(store, skipped_record) for skipped_record in scanner.skipped]
    for topic, n in sorted(skipped.items()):
        notes.append(f"topic {topic!r} is not in config/topics.json: its {n} record(s) get no consume queue entries (--respect-topic-config)")
    for key, q in existing.items():  # every selected queue knows its files, one no record reaches too (they are deleted)
        if key not in sims:
            sims[key] = QueueSim.new(q.topic, q.queue_id, q.directory, q.file_size, rules=rules)
        sims[key].original = dict(q.files)
    clmin = store.commitlog.min_offset
    queue_plans = [_rebuilt_queue(sim, existing.get(key), clmin, rules) for key, sim in sorted(sims.items())]
    deletes, writes = queue_actions(store, queue_plans, sims)
    notes += unchanged_note("consume queue", sum(not q.files for q in queue_plans), len(queue_plans), not deletes and not writes)
    phase = DispatchPhase("rebuild", clmin, end, scanner.discipline, TAGS_DELIVERY_TIME, True, False, scanner.records, queued)
    opts = {"topic": options.topic, "queue_id": options.queue_id, "respect_topic_config": options.respect_topic_config}
    return with_inputs(store, Plan.new("rebuild-cq", store.path(), str(version), source, deletes + write_action(writes, False),
                                       options={**config_options(store), **opts}, dispatch=(phase,), queues=tuple(queue_plans), notes=tuple(notes)),
                       sims, with_crc=with_crc)


def _not_rebuilt(store: Store, old: list) -> tuple[list[Action], list]:
    """The entries of ``index/`` besides the replaced files (``old``): a ``quarantine`` for each that would make the folder hold
    more than the rebuilt files for ``IndexService.load``, and the ``Store.index_strays`` it leaves (lost+found, unmounted)."""
    folder = store.path("index")
    strays = {entry.path.name: (entry, size, later) for entry, size, later in store.index_strays}
    replaced = {f.path.name for f in old}
    moved, left = [], []
    for name in sorted(os.listdir(folder)) if folder.is_dir() else []:
        if name in replaced:
            continue
        stray = strays.get(name)
        if stray is None:
            why = "an index file after an entry IndexService.load stops at"
        elif (stray[0].offset is None and stray[0].is_dir) or stray[0].unmounted:
            left.append(stray)
            continue
        elif stray[0].offset is None:
            why = f"{stray[0].what}, which IndexService.load skips (Long.parseLong rejects its name)"
        else:
            why = f"{stray[0].what}, which IndexService.load opens as an index file"
        moved.append(Action("quarantine", f"index/{name}", note=f"{why}: not the rebuild's, moved into the backup"))
    return moved, left


def _left_out(store: Store, left: list, names: list[str]) -> list[str]:
    """The note of the first left entry of index/ some era's ``IndexService.load`` stops at (3.2.6-5.0.0), or none."""
    for entry, size, _ in left:
        later = sum(name > entry.path.name for name in names)
        if (eras := stray_effects(store.version_guess.eras, entry, size, later, INDEX_SERVICE).get(LEFT_OUT)):
            text = stray_text({LEFT_OUT: eras}, entry, size, "index file", INDEX_SERVICE, later)
            return [f"index/{entry.path.name}: {entry.what}, which this rebuild leaves as it is: {text}"]
    return []


class ComparedIndex(IndexPlacement):
    """``IndexPlacement`` as ``apply.writers.IndexWriterService`` writes, comparing each file's bytes with ``originals`` instead
    of writing; ``same`` names the files that already hold them. A file with nothing to compare with, or differing, is only
    counted."""

    dry = False

    def __init__(self, originals: dict[str, Path], hash_slot_num: int, index_num: int, **options):
        self.originals, self.same, self._files, self._path = originals, set(), OriginalFiles(), None
        self.size = ixfmt.index_file_size(hash_slot_num, index_num)
        super().__init__(hash_slot_num, index_num, names=tuple(originals), **options)

    def _entry_buffer(self) -> np.ndarray:
        return np.empty(ENTRY_BUFFER * ixfmt.ENTRY_SIZE // 4, dtype=np.uint32)

    def _open(self, name: str, source, seed: ixfmt.IndexHeader | None) -> None:
        """A new file, compared with the original of its name when that is a file of the configured size (the writer's)."""
        path = self.originals.get(name)
        self._path = path if path is not None and path.is_file() and path.stat().st_size == self.size else None
        self.dry = self._path is None
        slots = np.zeros(1 if self.dry else self.hash_slot_num, dtype=np.int32)
        self._begin(name, seed if seed is not None else source, slots, seed is not None)

    def _append(self, first: int, added: int) -> None:
        at = ixfmt.entry_position(self.hash_slot_num, first)
        if not self._files.holds(self._path, at, self._ent[: added * ixfmt.ENTRY_SIZE]):
            self._path, self.dry = None, True  # it differs: nothing more to compare

    def _write_current(self) -> None:
        """The header, slots and zeros ``IndexWriterService._write_current`` leaves (without a put, the seed's header)."""
        path, self._path, files = self._path, None, self._files
        if path is None:
            return
        header = self._header() if self.hdr[H_PUT] else ixfmt.IndexHeader(*self._start[:4], 0, 0)
        first, end = (ixfmt.entry_position(self.hash_slot_num, n) for n in (1, int(self.hdr[H_INDEX_COUNT])))
        if (files.holds(path, 0, np.frombuffer(ixfmt.HEADER.pack(*header), dtype=np.uint8)) and files.zeros(path, first - ixfmt.ENTRY_SIZE, first)
                and self._slots_held(path) and files.zeros(path, end, self.size)):
            self.same.add(self.current_name)

    def _slots_held(self, path: Path) -> bool:
        """Whether the file holds the slot table, compared a chunk at a time (no big-endian copy of the whole table)."""
        step = CHUNK // 4
        return all(self._files.holds(path, ixfmt.HEADER_SIZE + 4 * i, self._slots[i:i + step].astype(">i4").view(np.uint8))
                   for i in range(0, len(self._slots), step))

    def close(self) -> list:
        super().close()
        self._files.close()
        return []


REPLACED = "replaced by the rebuild"


def _rebuilt_index(store: Store, old: list, writer: ComparedIndex, indexed_from: int) -> tuple[IndexPlan, list[Action]]:
    """The index part of a rebuild's plan: each file unchanged, rewritten, created, or deleted past the last."""
    slots, num = geometry(store)
    writer.close()
    files, actions = [], []
    for k, r in enumerate(writer.results):
        action, why = ("unchanged", "already holds the rebuild's bytes") if r.name in writer.same else ("rewrite", REPLACED)
        if k >= len(old):
            action, why = "create", "dispatched records"
        before = old[k].header.entry_count if k < len(old) else 0
        files.append(IndexFilePlan(r.name, action, why, before, r.end.entry_count, r.end.begin_timestamp, r.end.end_timestamp, r.end.end_phy_offset))
    for f in old[len(writer.results):]:
        h = f.header
        files.append(IndexFilePlan(f.name, "delete", REPLACED, h.entry_count, 0, h.begin_timestamp, h.end_timestamp, h.end_phy_offset))
        actions.append(Action("delete", rel(store, f.path), note=REPLACED))
    keys = sum(f.entries_after for f in files if f.action in ("rewrite", "create"))
    return IndexPlan(True, slots, num, tuple(files), indexed_from, keys, writer.full_end_timestamp or None, None), actions


def unchanged_note(what: str, unchanged: int, total: int, empty: bool) -> list[str]:
    """The plan's note on the ``total`` files already equal to the rebuild (``empty``: "nothing to rebuild")."""
    if total and unchanged == total and empty:
        return [f"nothing to rebuild: every {what} already equals the rebuild"]
    return [f"{unchanged} of {total} {what}s already equal the rebuild: left as they are"] if unchanged else []


def plan_rebuild_index_one_version(store: Store, options: PlanOptions = PlanOptions(), *, with_crc: bool = False, cache: DispatchCache | None = None,
                                   scans: SharedScans | None = None) -> Plan:
    """Regenerate every index file (``IndexService.buildIndex``), and indexMsgTimestamp with it."""
    store.path()
    version, source = store_version(store)
    rules = VersionRules(version)
    scanner = RebuildScan(store, rules, topic_table(scans, cache), index=True, scans=scans, cache=cache)
    cl = store.commitlog
    notes = []
    if store.index_geometry is None:
        notes.append(default_geometry_note(*DEFAULT_GEOMETRY))
    old = store.index_files
    moved, left = _not_rebuilt(store, old)
    if (refused := first_stray_refusal(store, left, INDEX_SERVICE)) is not None:
        notes.append(f"the broker's next start still refuses after this rebuild, which leaves this entry of index/ as it is: {refused}")
    originals = {f.name: f.path for f in old}
    writer = ComparedIndex(originals, *geometry(store), taken_names=set(originals), counts_used_slots=rules.index_counts_used_slots)
    for batch in scanner:
        put_index(writer, batch)
    end, notes = scanner.end.offset, scanner.notes + notes
    index_plan, actions = _rebuilt_index(store, old, writer, cl.min_offset)
    notes += _left_out(store, left, [f.name for f in index_plan.files if f.action != "delete"])
    actions += moved
    actions += write_action(False, any(f.action in ("rewrite", "create") for f in index_plan.files))
    cp = store.checkpoint
    cp_plan = None
    full = index_plan.index_msg_timestamp_after or 0
    if cp is not None and cp.index_msg_timestamp != full:
        cp_plan = CheckpointPlan(True, cp._asdict(), cp._replace(index_msg_timestamp=full)._asdict())
        actions.append(Action("write-checkpoint", "checkpoint", note="indexMsgTimestamp = end time of the last full index file"))
    unchanged = sum(f.action == "unchanged" for f in index_plan.files)
    notes += unchanged_note("index file", unchanged, len(index_plan.files), not actions)
    phase = DispatchPhase("rebuild", cl.min_offset, end, scanner.discipline, TAGS_DELIVERY_TIME, False, True, scanner.records, 0)
    return with_inputs(store, Plan.new("rebuild-index", store.path(), str(version), source, actions, options=config_options(store), dispatch=(phase,),
                                       index=index_plan, checkpoint=cp_plan, notes=tuple(notes)), {}, with_crc=with_crc)
