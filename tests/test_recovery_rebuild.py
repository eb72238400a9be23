"""``rebuild-cq`` gives back the broker's own consume queue files byte for byte, and
``rebuild-index`` an index that answers every key and UNIQ_KEY lookup as the broker's."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ALL_VERSIONS, VERSIONS, copy_store, manifest, recovered, store_path

from mqtool.apply import apply_plan
from mqtool.errors import BadInput
from mqtool.recovery.planners import PlanOptions, plan_rebuild_cq, plan_rebuild_index
from mqtool.store import Store
from mqtool.formats import consumequeue as cqfmt
from mqtool.formats.dispatch import SCHEDULE_TOPIC
from repair_support import (assert_tags_code, broker_query, cli, damage_index_entry, fixture_config, put_time_delay_tags, queue_entries, queue_view,
                            tree)


def rebuild(tmp_path, store_dir, planner, version, name, options=PlanOptions()):
    with Store.open(store_dir, fixture_config(manifest(version, name)), version) as store:
        plan = planner(store, options)
    apply_plan(plan, tmp_path / f"backup-{len(list(tmp_path.iterdir()))}")
    return plan


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_rebuild_cq_is_byte_identical(tmp_path, version):
    store_dir = copy_store(version, "clean-small", tmp_path)
    original = {k: v for k, v in tree(store_dir).items() if k.startswith("consumequeue/")}
    shutil.rmtree(store_dir / "consumequeue")
    plan = rebuild(tmp_path, store_dir, plan_rebuild_cq, version, "clean-small")
    assert plan.dispatch[0].cq_records == sum(m["dispatchToConsumeQueue"] for m in manifest(version, "clean-small")["messages"])
    rebuilt = {k: v for k, v in tree(store_dir).items() if k.startswith("consumequeue/")}
    if put_time_delay_tags(version, SCHEDULE_TOPIC):  # §2.15: 3.2.6 delay entries differ in their tags code only
        for name in [k for k in original if k.startswith(f"consumequeue/{SCHEDULE_TOPIC}/")]:
            broker, ours = (unpack_units((root / name).read_bytes()) for root in (store_path(version, "clean-small"), store_dir))
            assert [u[:2] for u in ours] == [u[:2] for u in broker]
            for a, b in zip(ours, broker):
                assert_tags_code(version, SCHEDULE_TOPIC, a[2], b[2])
            original.pop(name), rebuilt.pop(name)
    assert rebuilt == original


def unpack_units(data: bytes) -> list[tuple[int, int, int]]:
    return [unit for unit in cqfmt.ENTRY.iter_unpack(data) if any(unit)]


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_rebuild_of_an_intact_store_rewrites_the_same_bytes(tmp_path, version):
    store_dir = copy_store(version, "clean-small", tmp_path)
    before = tree(store_dir)
    rebuild(tmp_path, store_dir, plan_rebuild_cq, version, "clean-small")
    rebuild(tmp_path, store_dir, plan_rebuild_index, version, "clean-small")
    after = tree(store_dir)
    assert {k: v for k, v in after.items() if not k.startswith("index/")} == {k: v for k, v in before.items() if not k.startswith("index/")}
    assert sorted(v for k, v in after.items() if k.startswith("index/")) == sorted(v for k, v in before.items() if k.startswith("index/"))


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_rebuild_cq_plans_only_the_queues_it_would_change(tmp_path, version):
    """On a store whose consume queues already hold the rebuild's bytes, ``rebuild-cq --yes`` says
    so and exits 0, writing nothing and keeping no backup; with one entry's bit flipped, that queue
    is the only one planned."""
    root = copy_store(version, "clean-small", tmp_path / "s")
    stamps = lambda: {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}  # noqa: E731
    before = stamps()
    result = cli("rebuild-cq", str(root), "--yes", "--backup-dir", str(tmp_path / "b"))
    assert result.returncode == 0 and "nothing to rebuild: every consume queue already equals the rebuild" in result.stdout
    assert not (tmp_path / "b").exists() and stamps() == before
    path = root / "consumequeue" / "TopicTest" / "1" / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[2 * cqfmt.ENTRY_SIZE + 9] ^= 0x01  # entry 2's size
    path.write_bytes(data)
    with Store.open(root, fixture_config(manifest(version, "clean-small")), version) as store:
        plan = plan_rebuild_cq(store)
    assert [(q.topic, q.queue_id) for q in plan.queues if q.files] == [("TopicTest", 1)]


def test_rebuild_one_queue_touches_only_it(tmp_path):
    store_dir = copy_store("4.9.7", "clean-small", tmp_path)
    before = tree(store_dir)
    queue_dir = store_dir / "consumequeue" / "TopicTest" / "2"
    shutil.rmtree(queue_dir)
    plan = rebuild(tmp_path, store_dir, plan_rebuild_cq, "4.9.7", "clean-small", PlanOptions(topic="TopicTest", queue_id=2))
    assert [(q.topic, q.queue_id) for q in plan.queues] == [("TopicTest", 2)]
    assert tree(store_dir) == before


def test_respect_topic_config_keeps_deleted_topics_deleted(tmp_path):
    store_dir = copy_store("5.3.3", "clean-small", tmp_path)
    topics = {m["topic"] for m in manifest("5.3.3", "clean-small")["messages"]}
    gone = "orders_eu-west-1"
    with pytest.raises(BadInput):
        with Store.open(store_dir) as store:
            plan_rebuild_cq(store, PlanOptions(respect_topic_config=True))
    (store_dir / "config").mkdir()
    (store_dir / "config" / "topics.json").write_text(json.dumps({"topicConfigTable": {t: {"topicName": t} for t in topics - {gone}}}))
    shutil.rmtree(store_dir / "consumequeue")
    plan = rebuild(tmp_path, store_dir, plan_rebuild_cq, "5.3.3", "clean-small", PlanOptions(respect_topic_config=True))
    assert any(gone in n for n in plan.notes)
    assert not (store_dir / "consumequeue" / gone).exists()
    with Store.open(store_dir) as store:
        assert {q.topic for q in store.consume_queues} == topics - {gone}


def test_rebuild_after_retention_writes_filler_units_and_the_broker_min_offsets(tmp_path):
    """The first records left have queue offsets > 0: the broker's reput writes filler units
    before them (fillPreBlank), and each queue's min offset is its first real entry."""
    rec = recovered("4.9.7", "retention-small")
    store_dir = copy_store("4.9.7", "retention-small", tmp_path)
    shutil.rmtree(store_dir / "consumequeue")
    plan = rebuild(tmp_path, store_dir, plan_rebuild_cq, "4.9.7", "retention-small")
    assert sum(q.fillers for q in plan.queues) > 0
    with Store.open(store_dir) as store:
        view = queue_view(store)
        clmin = rec["commitLog"]["minOffset"]
        for q in rec["queues"]:
            key = (q["topic"], q["queueId"])
            kept = [e for e in q["entries"] if e["cq"]["phyOffset"] >= clmin]
            if not kept:  # fully expired: the broker keeps min 0 in memory; rebuilt, the queue is gone
                assert key not in view
                continue
            assert view[key] == (q["minOffset"], q["maxOffset"]) == (kept[0]["queueOffset"], q["maxOffset"])
            expected = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"], e["cq"]["tagsCode"]) for e in kept]
            assert queue_entries(store, *key, q["minOffset"], q["maxOffset"]) == expected
            fillers = queue_entries(store, *key, 0, q["minOffset"])
            assert fillers == [(i, 0, 0x7FFFFFFF, 0) for i in range(q["minOffset"])]


@pytest.mark.parametrize("version", VERSIONS)
def test_rebuild_index_answers_like_the_broker(tmp_path, version):
    original = copy_store(version, "clean-small", tmp_path / "orig")
    store_dir = copy_store(version, "clean-small", tmp_path)
    shutil.rmtree(store_dir / "index")
    plan = rebuild(tmp_path, store_dir, plan_rebuild_index, version, "clean-small")
    assert plan.checkpoint is None  # indexMsgTimestamp already equals the rebuilt full file's end
    assert [f.read_bytes() for f in sorted((store_dir / "index").iterdir())] == [f.read_bytes() for f in sorted((original / "index").iterdir())]
    with Store.open(store_dir) as store, Store.open(original) as broker:
        end = broker.commitlog.end_of_files
        for m in manifest(version, "clean-small")["messages"]:
            for key in ([m["uniqKey"]] if m["uniqKey"] else []) + m["keys"]:
                got = broker_query(store, m["topic"], key, end)
                assert got == broker_query(broker, m["topic"], key, end)
                assert (m["commitLogOffset"] in got) == m["indexed"]


def test_rebuild_index_says_it_replaces_the_files_it_deletes(tmp_path):
    """Before: the plan's actions said every index file it deletes was "newer than indexMsgTimestamp",
    the abnormal exit's reason, also on a clean store whose first file ends at that very timestamp
    (here: a third file past the two the rebuild gives, a copy of the last)."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    last = sorted((root / "index").iterdir())[-1]
    shutil.copyfile(last, last.with_name(str(int(last.name) + 1000)))
    with Store.open(root) as store:
        first_end, index_ts = store.index_files[0].header.end_timestamp, store.checkpoint.index_msg_timestamp
        plan = plan_rebuild_index(store)
    assert first_end <= index_ts
    deleted = [(a.path, a.note) for a in plan.actions if a.op == "delete"]
    assert deleted == [(f"index/{f.name}", "replaced by the rebuild") for f in plan.index.files if f.action == "delete"] and deleted
    assert {f.reason for f in plan.index.files if f.action == "delete"} == {"replaced by the rebuild"}


@pytest.mark.parametrize("version", ["3.2.6", "4.9.7", "5.3.3"])
def test_rebuild_index_leaves_files_holding_its_bytes_alone(tmp_path, version):
    """Before: ``rebuild-index --yes`` on a sound store rewrote every index file and kept a backup of all of them (its plan
    was never empty). Now it says "nothing to rebuild", writes nothing and keeps no backup; with one entry of the first
    file damaged, that file alone is rewritten (under its name) and backed up, and ``restore`` gives the damage back."""
    root = copy_store(version, "clean-small", tmp_path / "s")
    stamps = lambda: {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}  # noqa: E731
    before, original = stamps(), tree(root)
    result = cli("rebuild-index", str(root), "--yes", "--backup-dir", str(tmp_path / "b"))
    assert result.returncode == 0 and "nothing to rebuild: every index file already equals the rebuild" in result.stdout, result.stderr
    assert not (tmp_path / "b").exists() and stamps() == before
    first = damage_index_entry(root)
    damaged, data = tree(root), first.read_bytes()
    result = cli("rebuild-index", str(root), "--yes", "--backup-dir", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    assert tree(root) == original
    kept, = (tmp_path / "b" / "files").iterdir()  # the damaged file, alone
    assert kept.name.endswith(f"-{first.name}") and kept.read_bytes() == data
    assert cli("restore", str(tmp_path / "b"), "--yes").returncode == 0
    assert tree(root) == damaged


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_rebuild_index_in_tiny_writes_is_the_broker_index(tmp_path, version, monkeypatch):
    """The index writer appends entries a buffer at a time (``BUFFER_FULL`` resumes inside a record's
    keys): with a 3-entry buffer, every resume point of a real index, its files still equal the broker's,
    and the plan's comparison (``ComparedIndex``, the same buffer) finds the broker's files hold its bytes."""
    import mqtool.apply.writers as writers
    import mqtool.recovery.rebuild as planner

    monkeypatch.setattr(writers, "ENTRY_BUFFER", 3)
    monkeypatch.setattr(planner, "ENTRY_BUFFER", 3)
    original = copy_store(version, "clean-small", tmp_path / "orig")
    store_dir = copy_store(version, "clean-small", tmp_path)
    with Store.open(store_dir) as store:
        assert plan_rebuild_index(store).is_empty
    shutil.rmtree(store_dir / "index")
    rebuild(tmp_path, store_dir, plan_rebuild_index, version, "clean-small")
    names = sorted(p.name for p in (original / "index").iterdir())
    assert len(names) > 1  # a full file rolls over: the roll is resumed too
    assert [f.read_bytes() for f in sorted((store_dir / "index").iterdir())] == [(original / "index" / n).read_bytes() for n in names]
