"""The consume queue simulation (``recovery.queues.QueueSim``) reads queues exactly as the store
model does (``ConsumeQueue.recover`` / ``corrected_min_offset``, §5.7, §5.9), and applies the
broker's ``truncateDirtyLogicFiles`` (§5.8) to the bytes it would read."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import VERSIONS, store_path

from mqtool.recovery.queues import QueueSim
from mqtool.store import ConsumeQueue, Store
from mqtool.store.consumequeue import UNIT_DTYPE

STORES = [(v, n) for v in VERSIONS for n in ("clean-small", "crashed-small")] + [("4.9.7", "retention-small"), ("4.9.7", "rewrite-clean")]


@pytest.mark.parametrize("version,name", STORES)
def test_simulation_min_offsets_equal_the_store_model(version, name):
    with Store.open(store_path(version, name)) as store:
        for q in store.consume_queues:
            r = q.recover()
            sim = QueueSim.load(q)
            for v5 in (False, True):
                assert sim.min_offset(store.commitlog.min_offset, v5=v5) == q.corrected_min_offset(store.commitlog.min_offset, r.end, v5=v5)


def write_queue(directory, files: dict[int, list[tuple[int, int, int]]], file_size=200):
    directory.mkdir(parents=True)
    for base, units in files.items():
        data = np.zeros(file_size // 20, dtype=UNIT_DTYPE)
        for i, u in enumerate(units):
            data[i] = u
        (directory / f"{base:020d}").write_bytes(data.tobytes())
    return ConsumeQueue("T", 0, directory, file_size)


def test_recovery_starts_at_the_third_from_last_file_and_deletes_later_files(tmp_path):
    full = lambda start: [(start + i * 100, 100, 7) for i in range(10)]  # noqa: E731
    files = {0: [(5, 0, 0)] + full(1000)[1:], 200: full(2000), 400: full(3000)[:3] + [(0, 0, 0)] + full(3400)[:2], 600: full(4000)}
    queue = write_queue(tmp_path / "q", files)
    sim = QueueSim.load(queue)
    expected = queue.recover()
    assert (sim.recovered_end, sim.recovered_max_phys) == (expected.end, expected.max_phys_offset) == (460, 3300)
    assert sorted(sim.files) == [0, 200, 400] and sim.dropped_units == 2 + 10  # the file at 600 deleted
    sim.truncate(3150)  # truncateDirtyLogicFiles: units at or past 3150 go; the file at 400 keeps 2
    assert sim.max_offset == 22 and sim.cut_units == 1
    assert [(int(f.name), f.action, f.zero_from) for f in sim.fates()] == [(400, "rewrite", 40), (600, "delete", None)]


def test_truncate_brings_back_stale_units_below_the_cut(tmp_path):
    """The broker's truncateDirtyLogicFiles re-reads the last file from unit 0, past the write
    position CQ recovery set: stale valid units pointing below the cut count again (4.9.7
    rewrite-clean shows the broker serving them)."""
    units = [(i * 100, 100, 0) for i in range(4)] + [(0, 0, 0)] + [(500 + i * 100, 100, 0) for i in range(3)]
    queue = write_queue(tmp_path / "q", {0: units})
    sim = QueueSim.load(queue)
    assert sim.max_offset == 4
    sim.place(np.array([4], dtype=np.int64), np.array([400], dtype=np.int64), np.array([100], dtype=np.int64))
    sim.truncate(650)
    assert sim.max_offset == 7 and sim.resurrected_units == 2


def test_pruned_placements_give_the_same_results(tmp_path, monkeypatch):
    """Placed units are kept only for the first and last file once there are many; the results
    that read them (min offset, the truncate walk, file fates) do not change."""
    def run(prune_every):
        monkeypatch.setattr(QueueSim, "PRUNE_EVERY", prune_every)
        sim = QueueSim.new("T", 0, tmp_path / "q", 200)
        for chunk in range(12):
            qoff = np.arange(5 + chunk * 8, 5 + (chunk + 1) * 8, dtype=np.int64)
            sim.place(qoff, 1000 + qoff * 100, np.full(8, 100, dtype=np.int64))
        before = (sim.min_offset(0, v5=False), sim.min_offset(1600, v5=True), [vars(f) for f in sim.fates()])
        sim.truncate(1000 + 101 * 100)  # dispatched records always lie before the cut
        return before, sim.max_offset, [vars(f) for f in sim.fates()], sim.cut_units
    unpruned = run(1 << 30)
    assert run(20) == unpruned
    assert unpruned[1] == 101 and unpruned[0][0] == 0 and unpruned[0][1] == 6


def test_pruned_placements_across_a_truncation_and_a_reput_give_the_same_results(tmp_path, monkeypatch):
    """Recovery's order: dispatch, the truncate walk at the log's end (every placed unit lies
    before it), the reput placing more; with every placed unit spilled (first and last files alike)
    min offset, the truncate walk and file fates read the same units."""
    def run(prune_every):
        monkeypatch.setattr(QueueSim, "PRUNE_EVERY", prune_every)
        sim = QueueSim.new("T", 0, tmp_path / "q", 200)
        for chunk in range(6):
            qoff = np.arange(chunk * 8, (chunk + 1) * 8, dtype=np.int64)
            sim.place(qoff, 1000 + qoff * 100, np.full(8, 100, dtype=np.int64))
        sim.truncate(1000 + 48 * 100)
        for chunk in range(4):  # the reput
            qoff = np.arange(48 + chunk * 8, 48 + (chunk + 1) * 8, dtype=np.int64)
            sim.place(qoff, 1000 + qoff * 100, np.full(8, 100, dtype=np.int64))
        seen = (sim.min_offset(0, v5=False), sim.min_offset(1000 + 35 * 100, v5=True), [vars(f) for f in sim.fates()])
        sim.truncate(1000 + 80 * 100)
        return seen, sim.max_offset, sim.queue_state, sim.cut_units, [vars(f) for f in sim.fates()]
    unpruned = run(1 << 30)
    assert run(5) == unpruned
    assert unpruned[1] == 80 and unpruned[2].max_phys_offset == 1000 + 80 * 100
