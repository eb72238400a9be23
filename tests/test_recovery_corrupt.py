"""Damaged copies of the crashed fixtures: the plan names the first bad record and exactly the
messages the cut loses (from the manifest), and after ``recover`` the store is sound up to the
cut and nothing before the damage is lost (every earlier message readable through its consume
queue and its keys)."""

from __future__ import annotations

import os

import pytest
from conftest import MAIN_VERSIONS, copy_store, manifest, recovered

from typer.testing import CliRunner

from mqtool.apply import apply_plan
from mqtool.cli import app
from mqtool.formats.commitlog import header_size
from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, SCHEDULE_TOPIC
from mqtool.recovery.planners import plan_recover, plan_rebuild_index
from mqtool.store import Store
from repair_support import broker_query, fixture_config, queue_entries, queue_view

NAME = "crashed-small"


def messages(version):
    return sorted(manifest(version, NAME)["messages"], key=lambda m: m["commitLogOffset"])


def segment_of(store_dir, offset, segment_size=1 << 20):
    base = offset - offset % segment_size
    return store_dir / "commitlog" / f"{base:020d}", offset - base


def patch(store_dir, offset, data: bytes):
    path, pos = segment_of(store_dir, offset)
    with open(path, "r+b") as f:
        f.seek(pos)
        f.write(data)


def plan_and_apply(tmp_path, store_dir):
    with Store.open(store_dir) as store:
        plan = plan_recover(store)
    apply_plan(plan, tmp_path / "backup")
    return plan


def assert_sound_up_to(store_dir, version, cut):
    """Everything before ``cut`` is intact and served; nothing after it is readable; and
    ``mqtool verify`` finds the store sound."""
    verdict = CliRunner().invoke(app, ["verify", str(store_dir), "--format", "json"])
    assert verdict.exit_code == 0, verdict.stdout[-2000:]
    msgs = [m for m in messages(version) if m["commitLogOffset"] < cut]
    with Store.open(store_dir) as store:
        scan = store.commitlog.scan(store.commitlog.min_offset, check_crc=True)
        assert [r.offset for r in scan] == [m["commitLogOffset"] for m in msgs]
        assert scan.end.offset == cut and scan.end.reason == "zeros"
        assert store.commitlog.segments[-1].base_offset <= cut
        expected = {}
        for m in msgs:
            if m["dispatchToConsumeQueue"]:
                expected.setdefault((m["topic"], m["queueId"]), []).append((m["queueOffset"], m["commitLogOffset"], m["size"], cq_tags_code(m)))
        view = queue_view(store)
        for key, entries in expected.items():
            assert view[key] == (0, len(entries)), key
            assert queue_entries(store, *key, 0, len(entries)) == entries
        assert all(mx == 0 for key, (_, mx) in view.items() if key not in expected)
        for m in msgs:
            if m["indexed"]:
                for key in ([m["uniqKey"]] if m["uniqKey"] else []) + m["keys"]:
                    assert m["commitLogOffset"] in broker_query(store, m["topic"], key, cut), (m["seq"], key)


def cq_tags_code(m) -> int:
    """The tags code the broker writes while running: the delivery time for a delayed message."""
    if m["topic"] == SCHEDULE_TOPIC and m["delayLevel"] > 0:
        return m["storeTimestamp"] + DEFAULT_DELAY_TABLE[min(m["delayLevel"], max(DEFAULT_DELAY_TABLE))]
    return m["tagsHashCode"]


def named_lost(plan) -> list[int]:
    named = {m.offset for m in plan.lost.messages} | {r.offset for r in plan.lost.unreadable}
    if plan.commitlog.first_invalid is not None:
        named.add(plan.commitlog.first_invalid.offset)
    return sorted(named)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_flipped_body_byte(tmp_path, version):
    store_dir = copy_store(version, NAME, tmp_path)
    msgs = messages(version)
    victim = next(m for m in msgs[len(msgs) // 2 :] if m["bodyLength"] > 0)
    at = victim["commitLogOffset"] + header_size(victim["sysFlag"])
    path, pos = segment_of(store_dir, at)
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0xFF]))
    plan = plan_and_apply(tmp_path, store_dir)
    cut = victim["commitLogOffset"]
    assert plan.commitlog.valid_end == cut and plan.commitlog.end_reason == "crc" and plan.commitlog.end_is_damage
    assert plan.commitlog.first_invalid.msg_id == victim["msgId"] and not plan.commitlog.first_invalid.crc_ok
    lost = [m for m in msgs if m["commitLogOffset"] >= cut]
    assert [m.offset for m in plan.lost.messages] == [m["commitLogOffset"] for m in lost]
    assert [(m.msg_id, m.uniq_key, list(m.keys), m.topic) for m in plan.lost.messages] == [(m["msgId"], m["uniqKey"], m["keys"], m["topic"]) for m in lost]
    assert plan.lost.complete and plan.lost.unreadable == ()
    assert named_lost(plan) == [m["commitLogOffset"] for m in lost]
    assert_sound_up_to(store_dir, version, cut)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_torn_last_record(tmp_path, version):
    store_dir = copy_store(version, NAME, tmp_path)
    last = messages(version)[-1]
    half = last["size"] // 2
    patch(store_dir, last["commitLogOffset"] + half, bytes(last["size"] - half))
    plan = plan_and_apply(tmp_path, store_dir)
    cut = last["commitLogOffset"]
    assert plan.commitlog.valid_end == cut and plan.commitlog.end_is_damage
    assert plan.commitlog.first_invalid.offset == cut and plan.commitlog.first_invalid.msg_id == last["msgId"]
    assert named_lost(plan) == [cut]
    assert plan.commitlog.zero_from == cut and plan.commitlog.zero_to == cut + half
    path, pos = segment_of(store_dir, cut)
    with open(path, "rb") as f:
        f.seek(pos)
        assert not any(f.read())
    assert_sound_up_to(store_dir, version, cut)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_zeroed_range(tmp_path, version):
    store_dir = copy_store(version, NAME, tmp_path)
    msgs = messages(version)
    k = len(msgs) // 3
    while msgs[k]["commitLogOffset"] // (1 << 20) != msgs[k + 4]["commitLogOffset"] // (1 << 20):
        k += 1
    start, stop = msgs[k]["commitLogOffset"], msgs[k + 3]["commitLogOffset"] + 10
    patch(store_dir, start, bytes(stop - start))
    plan = plan_and_apply(tmp_path, store_dir)
    assert plan.commitlog.valid_end == start and plan.commitlog.end_reason == "zeros" and plan.commitlog.end_is_damage
    after = [m for m in msgs if m["commitLogOffset"] >= msgs[k + 4]["commitLogOffset"]]
    assert plan.lost.count == len(after) and plan.lost.complete == (len(after) <= 1000)
    assert [m.offset for m in plan.lost.messages] == [m["commitLogOffset"] for m in after][:1000]
    zeroed = [m for m in msgs[k : k + 4] if m["dispatchToConsumeQueue"]]
    assert [(r.topic, r.queue_id, r.queue_offset, r.offset, r.size) for r in plan.lost.unreadable] == [
        (m["topic"], m["queueId"], m["queueOffset"], m["commitLogOffset"], m["size"]) for m in zeroed
    ]
    assert_sound_up_to(store_dir, version, start)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
@pytest.mark.parametrize("damage", ["short-file", "zeroed-tail"])
def test_damaged_consume_queue_is_rebuilt(tmp_path, version, damage):
    store_dir = copy_store(version, NAME, tmp_path)
    msgs = messages(version)
    counts = {}
    for m in msgs:
        if m["dispatchToConsumeQueue"]:
            counts[(m["topic"], m["queueId"])] = counts.get((m["topic"], m["queueId"]), 0) + 1
    topic, qid = max(counts, key=counts.get)
    path = store_dir / "consumequeue" / topic / str(qid) / f"{0:020d}"
    if damage == "short-file":
        os.truncate(path, 10 * 20)
    else:
        with open(path, "r+b") as f:
            f.seek(10 * 20)
            f.write(bytes(os.path.getsize(path) - 10 * 20))
    plan = plan_and_apply(tmp_path, store_dir)
    queue = next(q for q in plan.queues if (q.topic, q.queue_id) == (topic, qid))
    assert (queue.max_before, queue.added, queue.max_after) == (10, counts[(topic, qid)] - 10, counts[(topic, qid)])
    assert (damage == "short-file") == any("which no broker loads" in n for n in plan.notes) == (plan.refused is not None)
    assert path.stat().st_size == manifest(version, NAME)["storeConfig"]["mappedFileSizeConsumeQueue"]
    assert_sound_up_to(store_dir, version, recovered(version, NAME)["commitLog"]["maxOffset"])


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_missing_index_file_after_a_crash_is_rebuilt_like_the_broker(tmp_path, version):
    """Abnormal recovery from segment 0 re-indexes everything: same answers as the broker."""
    rec = recovered(version, NAME)
    store_dir = copy_store(version, NAME, tmp_path)
    for f in (store_dir / "index").iterdir():
        f.unlink()
    with Store.open(store_dir, fixture_config(manifest(version, NAME))) as store:
        plan = plan_recover(store)
    apply_plan(plan, tmp_path / "backup")
    with Store.open(store_dir) as store:
        end = rec["commitLog"]["maxOffset"]
        for query in rec["queries"]:
            assert broker_query(store, query["topic"], query["key"], end) == [r["commitLogOffset"] for r in query["results"]]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_missing_index_file_of_a_clean_store_is_reported_then_rebuilt(tmp_path, version):
    """A normal recovery does not rebuild a lost index file (the broker does not): the plan says
    so, and ``rebuild-index`` brings back the broker's answers for every key."""
    original = copy_store(version, "clean-small", tmp_path / "orig")
    store_dir = copy_store(version, "clean-small", tmp_path)
    first = sorted((store_dir / "index").iterdir())[0]
    first.unlink()
    with Store.open(store_dir) as store:
        plan = plan_recover(store)
        assert any("rebuild-index" in n for n in plan.notes)
        rebuild = plan_rebuild_index(store)
    apply_plan(rebuild, tmp_path / "backup")
    with Store.open(store_dir) as store, Store.open(original) as broker:
        end = broker.commitlog.end_of_files
        for m in manifest(version, "clean-small")["messages"]:
            for key in ([m["uniqKey"]] if m["uniqKey"] else []) + m["keys"]:
                assert broker_query(store, m["topic"], key, end) == broker_query(broker, m["topic"], key, end)


def _resparsify(path, page: int = 4096) -> None:
    """Rewrite ``path`` with every all-zero page left as a hole (as a pre-allocated segment has)."""
    data = path.read_bytes()
    path.unlink()
    with open(path, "wb") as f:
        for at in range(0, len(data), page):
            chunk = data[at : at + page]
            if chunk.count(0) != len(chunk):
                f.seek(at)
                f.write(chunk)
        f.truncate(len(data))


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_zeroed_range_over_holes_of_a_sparse_segment(tmp_path, version, monkeypatch):
    """A zeroed range that is mostly holes, longer than the lost scan's search window: the search
    for the next record start skips the holes (not reading them) and still finds every message
    after the range (the manifest's)."""
    from mqtool.store import pastend

    store_dir = copy_store(version, NAME, tmp_path)
    msgs = messages(version)
    k = 1
    while msgs[k]["commitLogOffset"] % (1 << 20) > (1 << 19):
        k += 1
    j = k
    while msgs[j]["commitLogOffset"] < msgs[k]["commitLogOffset"] + 5 * 4096 and msgs[j]["commitLogOffset"] // (1 << 20) == msgs[k]["commitLogOffset"] // (1 << 20):
        j += 1
    start, stop = msgs[k]["commitLogOffset"], msgs[j - 1]["commitLogOffset"] + 10
    assert stop - start > 3 * 4096, "the fixture's records are too large for this test"
    patch(store_dir, start, bytes(stop - start))
    path, _ = segment_of(store_dir, start)
    _resparsify(path)
    extents = pastend.data_extents(path)
    if len(extents) < 2:
        pytest.skip("this file system does not keep holes")
    monkeypatch.setattr(pastend, "WINDOW", 1024)  # the hole spans several windows
    plan = plan_and_apply(tmp_path, store_dir)
    assert plan.commitlog.valid_end == start and plan.commitlog.end_is_damage
    after = [m for m in msgs if m["commitLogOffset"] >= msgs[j]["commitLogOffset"]]
    assert plan.lost.count == len(after)
    assert [m.offset for m in plan.lost.messages] == [m["commitLogOffset"] for m in after][:1000]
