"""The dispatch a plan hands to its apply in the same process (``DispatchCache``, spilled to a
temporary file) writes exactly what an apply that walks the commit log again writes.

For each crashed real-broker store and each rebuild: the files of ``consumequeue/``, ``index/``
and the checkpoint after ``recover`` / ``rebuild-cq`` / ``rebuild-index`` applied three ways:
with the whole dispatch cached, with a cache that gives up half-way (budget exceeded), and
without a cache (the apply walks again, as ``mqtool apply PLAN`` does). The third is the path
``test_recovery_broker.py`` holds equal to the broker's own recovery; the cached one is also
held to the broker's consume queue entries here.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import VERSIONS, copy_store, recovered

from mqtool.apply import apply_plan
from mqtool.dispatch.scanner import DispatchCache, phase_scanner
from mqtool.recovery.planners import PlanOptions, plan_rebuild_cq, plan_rebuild_index, plan_recover
from mqtool.store import Store
from repair_support import queue_entries

PLANNERS = {
    "recover": lambda store, cache: plan_recover(store, cache=cache),
    "rebuild-cq": lambda store, cache: plan_rebuild_cq(store, PlanOptions(), cache=cache),
    "rebuild-index": lambda store, cache: plan_rebuild_index(store, PlanOptions(), cache=cache),
}


def written(store_dir: Path) -> dict[str, bytes]:
    files = [p for d in ("consumequeue", "index") if (store_dir / d).is_dir() for p in (store_dir / d).rglob("*") if p.is_file()]
    files += [store_dir / "checkpoint"] if (store_dir / "checkpoint").exists() else []
    return {str(p.relative_to(store_dir)): p.read_bytes() for p in files}


def apply_with(tmp_path: Path, version: str, name: str, command: str, budget: int | None, label: str) -> tuple[Path, DispatchCache | None]:
    store_dir = copy_store(version, name, tmp_path / label)
    if command in ("rebuild-cq", "rebuild-index"):  # the broker's files already equal the rebuild (nothing to write): lost, so every file is written
        shutil.rmtree(store_dir / ("consumequeue" if command == "rebuild-cq" else "index"))
    cache = DispatchCache(budget) if budget is not None else None
    with Store.open(store_dir) as store:
        plan = PLANNERS[command](store, cache)
    assert not plan.is_empty
    apply_plan(plan, tmp_path / label / "backup", cache=cache)
    return store_dir, cache


@pytest.mark.parametrize("command", sorted(PLANNERS))
@pytest.mark.parametrize("version", VERSIONS)
def test_cached_dispatch_writes_what_a_second_walk_writes(tmp_path, version, command):
    walked, _ = apply_with(tmp_path, version, "crashed-small", command, None, "walk")
    cached, cache = apply_with(tmp_path, version, "crashed-small", command, 1 << 30, "cache")
    assert cache.enabled and cache.nbytes > 0  # the apply read every batch back from the spill
    expected = written(walked)
    assert expected and written(cached) == expected
    half = cache.nbytes // 2
    gave_up, partial = apply_with(tmp_path, version, "crashed-small", command, half, "partial")
    assert not partial.enabled and partial.batches(0) is None
    assert written(gave_up) == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_cached_recover_equals_the_broker_queues(tmp_path, version):
    rec = recovered(version, "crashed-small")
    store_dir, cache = apply_with(tmp_path, version, "crashed-small", "recover", 1 << 30, "cache")
    assert cache.enabled
    with Store.open(store_dir) as store:
        for q in rec["queues"]:
            expected = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"], e["cq"]["tagsCode"]) for e in q["entries"]]
            assert queue_entries(store, q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) == expected, (q["topic"], q["queueId"])


@pytest.mark.parametrize("version", VERSIONS)
def test_spilled_batches_read_back_equal(tmp_path, version):
    """Every column the writers read survives the spill (the topic byte columns are not kept), read
    from the spill's column blocks as they are or from the fields unpacked when asked for."""
    with Store.open(copy_store(version, "crashed-small", tmp_path)) as store:
        cache = DispatchCache()
        scanner = phase_scanner(
            store.commitlog, store.commitlog.min_offset, None, discipline="reput", tags="delivery-time", delay_table=store.delay_table,
            legacy_properties=False, index_enable=True, check_crc=False, topics=cache.topics,
        )
        scanner.BATCH = 64  # several batches from a small store
        originals = []
        for batch in scanner:
            originals.append(batch)
            cache.add(0, batch)
        back = list(cache.batches(0))
    assert len(back) == len(originals) > 1
    from mqtool.dispatch import fastdispatch as fd

    kept = [c for c in range(fd.N_FIELDS) if c not in (fd.F_TOPIC_FP, fd.F_TOPIC_POS, fd.F_TOPIC_LEN)]
    for a, b in zip(originals, back):
        for c in kept:  # what the plan and the writers read: the spill's own columns, nothing unpacked
            assert np.array_equal(a.column(c), b.column(c)) and b.column(c).dtype == np.int64
        assert np.array_equal(a.offsets, b.offsets) and np.array_equal(a.phys, b.phys) and np.array_equal(a.sizes, b.sizes)
        assert len(a) == len(b) and b._fields is None
        assert np.array_equal(a.fields[:, kept], b.fields[:, kept])  # every field, unpacked on demand
        assert np.array_equal(a.keys, b.keys) and np.array_equal(a.topic_ids, b.topic_ids)
        ga, gb = a.queue_groups, b.queue_groups  # the plan's grouping, and the one rebuilt from the spill
        assert np.array_equal(ga.keys, gb.keys) and np.array_equal(ga.starts, gb.starts) and np.array_equal(ga.dest, gb.dest)
        assert np.array_equal(ga.columns, gb.columns) and np.array_equal(ga.indexed, gb.indexed)
        assert (ga.multi, ga.multi_queued, ga.last_queued) == (gb.multi, gb.multi_queued, gb.last_queued)


def _row_by_row_groups(fields, topic_ids):
    from mqtool.formats.dispatch import dispatches_to_consume_queue
    from mqtool.dispatch import fastdispatch as fd

    expected: dict[tuple[int, int], list[tuple[int, ...]]] = {}
    for row, tid in zip(fields.tolist(), topic_ids.tolist()):
        if dispatches_to_consume_queue(row[fd.F_SYS_FLAG]):
            expected.setdefault((tid, row[fd.F_QUEUE_ID]), []).append((row[fd.F_QUEUE_OFFSET], row[fd.F_PHYS], row[fd.F_SIZE], row[fd.F_TAGS]))
    return expected


def _grouped(groups):
    got = {}
    for g, key in enumerate(groups.keys.tolist()):
        qid = key & 0xFFFFFFFF
        lo, hi = groups.starts[g], groups.starts[g + 1]
        got[(key >> 32, qid - (1 << 32) if qid >= 1 << 31 else qid)] = [tuple(c) for c in groups.columns[:, lo:hi].T.tolist()]
    return got


@pytest.mark.parametrize("version", VERSIONS)
def test_queue_groups_equal_a_row_by_row_grouping(tmp_path, version):
    """``queuegroups.group_queues`` against the broker's rule applied row by row: NOT_TYPE and COMMIT
    records go to ``(topic, queue id)`` in commit log order, with (queue offset, phys, size, tags)."""
    from mqtool.formats.dispatch import is_indexed
    from mqtool.dispatch import fastdispatch as fd

    with Store.open(copy_store(version, "crashed-small", tmp_path)) as store:
        scanner = phase_scanner(
            store.commitlog, store.commitlog.min_offset, None, discipline="reput", tags="delivery-time", delay_table=store.delay_table,
            legacy_properties=False, index_enable=True, check_crc=False,
        )
        scanner.BATCH = 64
        checked = 0
        for batch in scanner:
            expected = _row_by_row_groups(batch.fields, batch.topic_ids)
            groups = batch.queue_groups
            got = _grouped(groups)
            assert got == expected and list(got) == list(expected)  # first-appearance order too
            flagged = batch.fields[:, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH != 0
            assert groups.multi == int(flagged.sum())
            assert groups.indexed.tolist() == [is_indexed(f) for f in batch.fields[:, fd.F_SYS_FLAG].tolist()]
            checked += groups.queued
    assert checked > 0


def test_queue_groups_with_more_queues_than_the_first_table(tmp_path, monkeypatch):
    """A batch spread over more queues than ``group_queues``' first hash table holds (the kernel
    gives up and is given a larger one, kept for the next batches): the fixture's rows repeated,
    each copy in other queue ids (some negative), still grouped as row by row."""
    from mqtool.dispatch import fastdispatch as fd
    from mqtool.dispatch import queuegroups
    from mqtool.dispatch.queuegroups import group_queues

    monkeypatch.setattr(queuegroups, "_table_slots", [256])

    with Store.open(copy_store(VERSIONS[-1], "crashed-small", tmp_path)) as store:
        scanner = phase_scanner(
            store.commitlog, store.commitlog.min_offset, None, discipline="reput", tags="delivery-time", delay_table=store.delay_table,
            legacy_properties=False, index_enable=True, check_crc=False,
        )
        batches = list(scanner)
    fields = np.concatenate([b.fields for b in batches])
    topic_ids = np.concatenate([b.topic_ids for b in batches])
    copies = max(1, 2000 // len(fields) + 1)
    fields = np.concatenate([fields] * copies)
    topic_ids = np.concatenate([topic_ids] * copies)
    fields[:, fd.F_QUEUE_ID] = (np.arange(len(fields)) % 997) - 3
    groups = group_queues(fields, topic_ids)
    expected = _row_by_row_groups(fields, topic_ids)
    assert len(expected) > 256
    got = _grouped(groups)
    assert got == expected and list(got) == list(expected)
    assert queuegroups._table_slots[0] > 2 * len(expected)
