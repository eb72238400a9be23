"""Version rules of recovery beyond the crashed fixtures: a clean shutdown whose consume queues
lag behind the commit log (4.5.1-4.9.x start-up reput, 5.3.2+ normal-recovery dispatch, versions
that do not re-dispatch), a store without a checkpoint, the index disabled."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import copy_store, fixture_version, manifest, store_path

from mqtool.apply import apply_plan
from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, SCHEDULE_TOPIC
from mqtool.recovery.planners import plan_recover
from mqtool.store import Store, StoreConfig
from mqtool.store.consumequeue import UNIT_DTYPE
from repair_support import broker_query, tree


def lagging_queues(tmp_path, version, cut_index):
    """clean-small whose consume queues lost every entry from message ``cut_index`` on (as if the
    CQ pages were not flushed while the commit log was), no abort file."""
    store_dir = copy_store(version, "clean-small", tmp_path)
    msgs = sorted(manifest(version, "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    cut = msgs[cut_index]["commitLogOffset"]
    for f in (p for p in (store_dir / "consumequeue").rglob("*") if p.is_file()):
        units = np.frombuffer(f.read_bytes(), dtype=UNIT_DTYPE).copy()
        units[units["phys_offset"] >= cut] = np.zeros(1, dtype=UNIT_DTYPE)
        f.write_bytes(units.tobytes())
    return store_dir, msgs, cut


def recover(tmp_path, store_dir, config=None, version=None):
    with Store.open(store_dir, config, version or fixture_version(store_dir)) as store:
        plan = plan_recover(store)
    apply_plan(plan, tmp_path / f"backup-{len(list(tmp_path.iterdir()))}")
    return plan


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7"])
def test_start_up_reput_rebuilds_lagging_queues_byte_for_byte(tmp_path, version):
    store_dir, msgs, cut = lagging_queues(tmp_path, version, 1600)
    plan = recover(tmp_path, store_dir)
    assert plan.mode == "normal" and [p.name for p in plan.dispatch] == ["reput"]
    assert plan.dispatch[0].start <= cut and plan.dispatch[0].tags == "delivery-time"
    original = tree(store_path(version, "clean-small"))
    repaired = tree(store_dir)
    assert {k: v for k, v in repaired.items() if k.startswith("consumequeue/")} == {k: v for k, v in original.items() if k.startswith("consumequeue/")}
    # the reput indexes the last indexed record again (offset == the index's end offset)
    last = max(m["commitLogOffset"] for m in msgs if m["indexed"])
    assert any(str(last) in n and "twice" in n for n in plan.notes)
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        end = store.commitlog.end_of_files
        for m in (m for m in msgs if m["indexed"]):
            for key in ([m["uniqKey"]] if m["uniqKey"] else []) + m["keys"]:
                got = broker_query(store, m["topic"], key, end)
                assert m["commitLogOffset"] in got
                if m["commitLogOffset"] == last:
                    assert got.count(last) == 2


def test_5_3_2_normal_recovery_dispatches_strictly_after_the_queues_end(tmp_path):
    """5.3.2+ recoverNormally dispatches ``commitLogOffset > maxPhyOffsetOfConsumeQueue``; the CQ max
    is the end of the last entry, so the first missing record is not re-dispatched (§8.5)."""
    msgs = sorted(manifest("5.3.3", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    k = next(i for i in range(1600, 1900) if msgs[i]["dispatchToConsumeQueue"] and msgs[i - 1]["dispatchToConsumeQueue"])
    store_dir, _, cut = lagging_queues(tmp_path, "5.3.3", k)
    plan = recover(tmp_path, store_dir)
    assert [(p.name, p.after_phys) for p in plan.dispatch] == [("recovery", cut)]
    assert any("strictly after" in n for n in plan.notes)
    missing = msgs[k]
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        queue = store.consume_queue(missing["topic"], missing["queueId"])
        offsets = [e.phys_offset for e in queue.entries()]
    assert missing["commitLogOffset"] not in offsets
    later = [m for m in msgs[k + 1 :] if m["dispatchToConsumeQueue"] and (m["topic"], m["queueId"]) == (missing["topic"], missing["queueId"])]
    assert [m["commitLogOffset"] for m in later] == offsets[missing["queueOffset"] :]


@pytest.mark.parametrize("version", ["5.1.0", "4.4.0"])
def test_versions_that_do_not_re_dispatch_after_a_clean_stop_say_so(tmp_path, version):
    store_dir, msgs, cut = lagging_queues(tmp_path, "4.9.7", 1600)
    with Store.open(store_dir, version=version) as store:
        plan = plan_recover(store)
    assert plan.dispatch == () and plan.is_empty
    assert any("does not re-dispatch" in n and "rebuild-cq" in n for n in plan.notes)


def test_missing_checkpoint_is_created(tmp_path):
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    (store_dir / "checkpoint").unlink()
    plan = recover(tmp_path, store_dir)
    assert plan.checkpoint.exists is False and plan.commitlog.scan_from == 0
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        assert store.checkpoint.logics_msg_timestamp == plan.checkpoint.after["logics_msg_timestamp"] > 0
        assert (store_dir / "checkpoint").stat().st_size == 4096


def test_index_disabled_drops_but_does_not_rebuild(tmp_path):
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    config = StoreConfig(message_index_enable=False)
    plan = recover(tmp_path, store_dir, config)
    assert [f.action for f in plan.index.files] == ["delete"]  # IndexService.load still runs
    assert not plan.dispatch[0].index and not list((store_dir / "index").iterdir())


def test_delayed_messages_dispatched_by_4_9_7_recovery_get_the_tags_hash(tmp_path):
    """4.9.2-4.9.8 recover before loading the delay levels (§3.5): a delayed message whose consume
    queue entry is rebuilt by abnormal recovery gets its TAGS hash, not its delivery time."""
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    queue_dir = store_dir / "consumequeue" / SCHEDULE_TOPIC
    for f in (p for p in queue_dir.rglob("*") if p.is_file()):
        f.write_bytes(bytes(f.stat().st_size))
    plan = recover(tmp_path, store_dir)
    delayed = [m for m in manifest("4.9.7", "crashed-small")["messages"] if m["topic"] == SCHEDULE_TOPIC]
    assert plan.dispatch[0].tags == "tags-hash" and plan.dispatch[0].scheduled_with_tags_hash == len(delayed)
    assert any("delivers them at once" in n for n in plan.notes)
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        for m in delayed:
            entry = store.consume_queue(SCHEDULE_TOPIC, m["queueId"]).read_entry(m["queueOffset"])
            assert entry.phys_offset == m["commitLogOffset"] and entry.tags_code == m["tagsHashCode"]
            assert entry.tags_code != m["storeTimestamp"] + DEFAULT_DELAY_TABLE[m["delayLevel"]]


def test_5_3_3_recovery_gives_delayed_messages_their_delivery_time(tmp_path):
    store_dir = copy_store("5.3.3", "crashed-small", tmp_path)
    for f in (p for p in (store_dir / "consumequeue" / SCHEDULE_TOPIC).rglob("*") if p.is_file()):
        f.write_bytes(bytes(f.stat().st_size))
    plan = recover(tmp_path, store_dir)
    assert plan.dispatch[0].tags == "delivery-time"
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        for m in manifest("5.3.3", "crashed-small")["messages"]:
            if m["topic"] == SCHEDULE_TOPIC:
                entry = store.consume_queue(SCHEDULE_TOPIC, m["queueId"]).read_entry(m["queueOffset"])
                assert entry.tags_code == m["storeTimestamp"] + DEFAULT_DELAY_TABLE[m["delayLevel"]]


def test_recovery_that_fills_index_files_rolls_and_moves_the_index_checkpoint(tmp_path):
    """Small index files (40 entries): the re-dispatch fills several; the broker keeps full files
    (end <= indexMsgTimestamp), rolls to new ones seeded from the last, and records the last full
    file's end time as indexMsgTimestamp."""
    from mqtool.formats.dispatch import dispatch_request
    from mqtool.apply.synth import SynthSpec, build_store

    from mqtool.formats import checkpoint as cpfmt

    store_dir = tmp_path / "s"
    build_store(SynthSpec(store_dir, profile="4.9", seed=3, messages=400, hash_slot_num=16, index_num=40, crashed=True))
    with Store.open(store_dir, version="4.9.7") as store:
        cp = store.checkpoint
        full_files = [f.name for f in store.index_files if f.header.index_count >= 40]
        second_end = store.index_files[1].header.end_timestamp
    # the index checkpoint as if it last moved when the second file filled: later files are dropped
    (store_dir / "checkpoint").write_bytes(cpfmt.encode_checkpoint(cp._replace(index_msg_timestamp=second_end)).ljust(4096, b"\0"))
    with Store.open(store_dir, version="4.9.7") as store:
        plan = plan_recover(store)
    created = [f for f in plan.index.files if f.action == "create"]
    assert [f.name for f in plan.index.files if f.action == "keep"] == full_files[:2]
    assert len(created) > 2 and all(f.action in ("keep", "delete", "create") for f in plan.index.files)
    apply_plan(plan, tmp_path / "backup")
    with Store.open(store_dir, version="4.9.7") as store:
        names = [f.name for f in store.index_files]
        assert names == sorted(names) and set(f.name for f in created) <= set(names)
        full = [f for f in store.index_files if f.header.index_count >= 40]
        assert store.checkpoint.index_msg_timestamp == full[-1].header.end_timestamp == plan.index.index_msg_timestamp_after
        end = store.commitlog.end_of_files
        for r in store.commitlog.scan():
            req = dispatch_request(r, store.delay_table)
            if req.to_index:
                for key in ([req.uniq_key] if req.uniq_key else []) + list(req.keys):
                    assert r.offset in broker_query(store, req.topic, key, end)


def test_truncate_dirty_cuts_only(tmp_path):
    from mqtool.formats.commitlog import header_size
    from mqtool.recovery.planners import plan_truncate_dirty

    store_dir = copy_store("5.3.3", "crashed-small", tmp_path)
    msgs = sorted(manifest("5.3.3", "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    victim = next(m for m in msgs[len(msgs) // 2 :] if m["bodyLength"] > 0)
    at = victim["commitLogOffset"] + header_size(victim["sysFlag"])
    segment = store_dir / "commitlog" / f"{at - at % (1 << 20):020d}"
    data = bytearray(segment.read_bytes())
    data[at % (1 << 20)] ^= 0x55
    segment.write_bytes(bytes(data))
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        plan = plan_truncate_dirty(store)
    assert plan.dispatch == () and plan.index is None and plan.checkpoint is None and not plan.remove_abort
    assert plan.commitlog.valid_end == victim["commitLogOffset"]
    assert {a.op for a in plan.actions} == {"zero-range", "delete", "write-dispatch"}
    apply_plan(plan, tmp_path / "backup")
    assert (store_dir / "abort").exists()
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        for q in store.consume_queues:
            assert all(e.phys_offset < victim["commitLogOffset"] for e in q.entries())
        again = plan_recover(store)  # the broker's own recovery afterwards cuts nothing more
    assert again.commitlog.valid_end == victim["commitLogOffset"] and again.lost.count == 0


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7", "5.3.3"])
def test_clean_store_needs_nothing_but_the_5x_confirm_offset(version):
    """A cleanly stopped store: nothing is cut or re-dispatched. 5.1.1+ recovery sets the
    checkpoint's confirmPhyOffset to the last record's start, which the fixture's first broker
    run (on an empty store) never did, so only that value changes."""
    with Store.open(store_path(version, "clean-small"), version=version) as store:
        plan = plan_recover(store)
    assert plan.mode == "normal" and not plan.notes and plan.lost.count == 0
    assert all(p.records == 0 for p in plan.dispatch)
    if version == "5.3.3":
        last = max(m["commitLogOffset"] for m in manifest(version, "clean-small")["messages"])
        assert [a.op for a in plan.actions] == ["write-checkpoint"]
        changed = {k: v for k, v in plan.checkpoint.after.items() if plan.checkpoint.before[k] != v}
        assert changed == {"confirm_phy_offset": last}
    else:
        assert plan.is_empty
