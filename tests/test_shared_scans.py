"""The candidates of a store whose broker version is not decided share their scans
(``recovery/sharedscans.py``): every plan, and every apply, equals what separate scans give.

The fixtures' commit logs are below ``SHARED_MIN_BYTES``, so each test lowers it to share them; the
segments are dispatched ahead as a large store's are (``ahead_on_small_segments``), so both kinds
of recorded batch are read back: spilled by the recording, and spilled ahead and kept by entry."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest
from conftest import ALL_VERSIONS, FIXTURES, copy_store, store_path

from mqtool.apply import apply_plan
from mqtool.dispatch import fastdispatch as fd
from mqtool.dispatch.scanner import DispatchCache, TopicTable, phase_scanner
from mqtool.errors import MqtoolError
from mqtool.recovery import sharedscans
from mqtool.recovery.planners import PlanOptions, plan_rebuild_cq, plan_rebuild_index, plan_recover, plan_truncate_dirty
from mqtool.store import Store
from mqtool.store.eras import candidate_groups

pytestmark = pytest.mark.usefixtures("ahead_on_small_segments")

PLANNERS = {
    "recover": lambda store, cache=None: plan_recover(store, cache=cache),
    "truncate-dirty": lambda store, cache=None: plan_truncate_dirty(store, cache=cache),
    "rebuild-cq": lambda store, cache=None: plan_rebuild_cq(store, PlanOptions(), cache=cache),
    "rebuild-index": lambda store, cache=None: plan_rebuild_index(store, PlanOptions(), cache=cache),
}


def undecided() -> list[tuple[str, str]]:
    """The fixture stores whose marks leave several candidates that plan them apart."""
    found = []
    for version in ALL_VERSIONS:
        for path in sorted((FIXTURES / f"rocketmq-{version}").iterdir()):
            if path.is_dir():
                with Store.open(path) as store:
                    if store.version_guess.version is None and len(candidate_groups(store)) > 1:
                        found.append((version, path.name))
    return found


UNDECIDED = undecided()


class Counted:
    """The scans recorded and read back while it is installed."""

    def __init__(self, monkeypatch):
        self.recorded, self.replayed = 0, 0
        recording, replay = sharedscans._Recording.__init__, sharedscans._Replay.__init__

        def record(this, *args):
            self.recorded += 1
            recording(this, *args)

        def read_back(this, *args):
            self.replayed += 1
            replay(this, *args)

        monkeypatch.setattr(sharedscans._Recording, "__init__", record)
        monkeypatch.setattr(sharedscans._Replay, "__init__", read_back)


def plan_doc(path: Path, command: str, shared_from: int, monkeypatch, cache: DispatchCache | None = None) -> dict:
    monkeypatch.setattr(sharedscans, "SHARED_MIN_BYTES", shared_from)
    with Store.open(path) as store:
        try:
            doc = PLANNERS[command](store, cache).to_dict()
        except MqtoolError as refused:  # e.g. a rebuild-cq of a store with ConsumeQueueExt units
            return {"refused": str(refused)}
    doc.pop("created_ms")
    return doc


@lru_cache(maxsize=None)
def shared_recover(version: str, name: str) -> tuple[dict, int]:
    """``recover``'s plan of a fixture store with its scans shared, and the scans read back for it: planned once for
    the two tests that read it (read only)."""
    with pytest.MonkeyPatch.context() as mp:
        counted = Counted(mp)
        doc = plan_doc(store_path(version, name), "recover", 0, mp)
    return doc, counted.replayed


def test_some_fixture_stores_are_undecided():
    assert len(UNDECIDED) >= 10 and ("4.4.0", "crashed-small") in UNDECIDED and ("5.3.3", "lmq-small") in UNDECIDED


@pytest.mark.parametrize("version,name", UNDECIDED)
def test_shared_scans_plan_what_separate_scans_plan(version, name, monkeypatch):
    path = store_path(version, name)
    counted = Counted(monkeypatch)
    for command in PLANNERS:
        before = counted.recorded, counted.replayed
        separate = plan_doc(path, command, 1 << 62, monkeypatch)
        assert (counted.recorded, counted.replayed) == before  # scans of their own
        shared = shared_recover(version, name)[0] if command == "recover" else plan_doc(path, command, 0, monkeypatch)
        assert shared == separate, command


def test_later_candidates_read_the_first_ones_scans_back():
    """Where the candidates scan alike, the later ones read the scans back (a 5.3.2+ normal recovery
    starts elsewhere than an earlier one, so those candidates scan apart)."""
    replayed = [(version, name) for version, name in UNDECIDED if shared_recover(version, name)[1]]
    assert {("4.4.0", "crashed-small"), ("5.0.0", "crashed-small")} <= set(replayed)
    assert len(replayed) >= len(UNDECIDED) // 2


@pytest.mark.parametrize("version,name", [(v, n) for v, n in UNDECIDED if n.startswith(("crashed", "dledger-crashed"))])
def test_shared_scans_apply_what_separate_scans_apply(version, name, tmp_path, monkeypatch):
    """The apply's cache adopts the batches the shared scans spilled: the files written are those of
    a plan and apply with scans of their own."""
    written = {}
    for label, shared_from in (("separate", 1 << 62), ("shared", 0)):
        store_dir = copy_store(version, name, tmp_path / label)
        cache = DispatchCache()
        monkeypatch.setattr(sharedscans, "SHARED_MIN_BYTES", shared_from)
        with Store.open(store_dir) as store:
            plan = plan_recover(store, cache=cache)
        assert not plan.is_empty and cache.enabled
        apply_plan(plan, tmp_path / label / "backup", cache=cache)
        written[label] = {str(p.relative_to(store_dir)): p.read_bytes() for p in sorted(store_dir.rglob("*")) if p.is_file()}
    assert written["shared"] == written["separate"]


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_a_scan_read_back_equals_the_scan(version, tmp_path):
    """Batches, end and counts of a recorded scan, read back, against a scan of its own."""
    with Store.open(copy_store(version, "crashed-small", tmp_path)) as store:
        settings = dict(discipline="reput", tags="delivery-time", delay_table=store.delay_table, legacy_properties=store.legacy_properties,
                        index_enable=True, check_crc=False)
        cl = store.commitlog
        scans = sharedscans.SharedScans(TopicTable())
        recording = scans.scanner(cl, cl.min_offset, None, topics=scans.topics, **settings)
        recording.live.BATCH = 64  # several batches from a small store
        recorded = [(b.fields.copy(), b.keys.copy(), b.topic_ids.copy()) for b in recording]
        replay = scans.scanner(cl, cl.min_offset, None, topics=scans.topics, ahead=True, **settings)
        assert isinstance(replay, sharedscans._Replay)
        back = list(replay)
        assert len(back) == len(recorded) > 1
        live = phase_scanner(cl, cl.min_offset, None, topics=scans.topics, **settings)
        live.BATCH = 64
        walked = list(live)
        assert (replay.end, replay.records, replay.last_valid_offset, replay.skipped) == (live.end, live.records, live.last_valid_offset, live.skipped)
        assert replay.records == sum(len(b) for b in back) > 0
        kept = [c for c in range(fd.N_FIELDS) if c not in (fd.F_TOPIC_FP, fd.F_TOPIC_POS, fd.F_TOPIC_LEN)]  # what a spill keeps
        for (fields, keys, topic_ids), b, w in zip(recorded, back, walked):
            assert np.array_equal(fields[:, kept], b.fields[:, kept]) and np.array_equal(w.fields[:, kept], b.fields[:, kept])
            assert np.array_equal(keys, b.keys) and np.array_equal(topic_ids, b.topic_ids) and np.array_equal(w.topic_ids, b.topic_ids)
        other = scans.scanner(cl, cl.min_offset, None, topics=scans.topics, **{**settings, "legacy_properties": not store.legacy_properties})
        assert isinstance(other, sharedscans._Recording)  # another setting: a scan of its own


def test_scans_over_budget_are_walked_again(monkeypatch):
    """Past the spill budget the recording stops: the later candidates scan again, and plan the same."""
    path = store_path("4.4.0", "crashed-small")
    counted = Counted(monkeypatch)
    separate = plan_doc(path, "recover", 1 << 62, monkeypatch)
    monkeypatch.setattr(sharedscans, "BUDGET", 1)
    assert plan_doc(path, "recover", 0, monkeypatch) == separate
    assert counted.recorded > 0 and counted.replayed == 0


def test_a_small_commit_log_is_scanned_each_time(monkeypatch):
    path = store_path("4.4.0", "crashed-small")
    counted = Counted(monkeypatch)
    plan_doc(path, "recover", sharedscans.SHARED_MIN_BYTES, monkeypatch)
    assert counted.recorded == counted.replayed == 0
    with Store.open(path) as store:
        assert sharedscans.SharedScans.worth_it(store, None) is None


def test_the_cli_plans_an_undecided_store_as_before(tmp_path, monkeypatch):
    """``recover --dry-run --format json`` in this process, shared and not: the same document."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    path = copy_store("5.0.0", "crashed-small", tmp_path / "store")  # a plan looks for a live broker: not the shared fixture
    out = {}
    counted = Counted(monkeypatch)
    for label, shared_from in (("separate", 1 << 62), ("shared", 0)):
        monkeypatch.setattr(sharedscans, "SHARED_MIN_BYTES", shared_from)
        result = CliRunner().invoke(app, ["recover", str(path), "--dry-run", "--format", "json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        doc.pop("created_ms")
        out[label] = doc
    assert out["shared"] == out["separate"] and counted.replayed > 0


@pytest.mark.parametrize("seed", range(0, 48, 4))
def test_damaged_undecided_stores_plan_the_same_shared(seed, tmp_path, monkeypatch):
    """Random damage (``damage_support``, every kind) to the crashed undecided stores: every planner
    plans, or refuses, alike with scans shared and not (``bench/damage_run.py`` runs the CLI on
    the fixtures' small logs, which share none)."""
    from damage_support import CUT_FILES, DISK_FAULTS, LOST_PAGES, damage_copy

    crashed = [k for k in UNDECIDED if k[1].startswith("crashed")]
    version, name = crashed[seed % len(crashed)]
    root, _ = damage_copy(version, name, seed, tmp_path / "store", LOST_PAGES + CUT_FILES + DISK_FAULTS)
    for command in PLANNERS:
        assert plan_doc(root, command, 0, monkeypatch) == plan_doc(root, command, 1 << 62, monkeypatch), command
