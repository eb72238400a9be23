"""``recover`` equals what the real broker did on start-up (the fixtures' recovered JSON).

For each crashed store: the cut offset, every queue's min/max, every consume queue entry
(queue offset, commit log offset, size, tags code) and the message it leads to, every key and
UNIQ_KEY query, and the checkpoint the broker persisted. Plus the extra ground truth of 4.9.7:
``rewrite-clean`` (stale records and CQ entries beyond the logical end) and ``retention-small``.
"""

from __future__ import annotations

import pytest
from conftest import ALL_VERSIONS, FIXTURES, VERSIONS, copy_store, recovered

from mqtool.apply import apply_plan
from mqtool.recovery.plans import Plan
from mqtool.recovery.planners import plan_recover
from mqtool.store import Store
from repair_support import broker_query, queue_entries, queue_view


def recover_copy(tmp_path, version, name, *, given: bool = False):
    store_dir = copy_store(version, name, tmp_path)
    with Store.open(store_dir, version=version if given else None) as store:
        plan = plan_recover(store)
    apply_plan(plan, tmp_path / "backup")
    return store_dir, plan


def broker_queues(rec: dict, known: set) -> dict:
    """The broker's queue table; queues it lists without any file on disk read as (0, 0)."""
    return {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in rec["queues"] if (q["topic"], q["queueId"]) in known or q["maxOffset"]}


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_recover_crashed_equals_the_broker(tmp_path, version):
    rec = recovered(version, "crashed-small")
    store_dir, plan = recover_copy(tmp_path, version, "crashed-small", given=True)
    assert plan.mode == rec["recoveryMode"] == "abnormal"
    assert plan.commitlog.valid_end == rec["commitLog"]["maxOffset"]
    assert plan.checkpoint.after == {**plan.checkpoint.before, **{k: v for k, v in _checkpoint(rec["checkpointAfterShutdown"]).items()}}
    with Store.open(store_dir) as store:
        assert not store.abort_present
        assert store.commitlog.end_of_files > rec["commitLog"]["maxOffset"]  # the segment holding the end stays
        scan = store.commitlog.scan(store.commitlog.min_offset, check_crc=True)
        assert sum(1 for _ in scan) == rec["readableMessageCount"] + _not_in_queues(rec, version)
        assert scan.end.offset == rec["commitLog"]["maxOffset"] and scan.end.is_clean
        view = queue_view(store)
        assert view == broker_queues(rec, set(view))
        plan_view = {(q.topic, q.queue_id): (q.min_after, q.max_after) for q in plan.queues}
        assert plan_view == view
        for q in rec["queues"]:
            expected = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"], e["cq"]["tagsCode"]) for e in q["entries"]]
            assert queue_entries(store, q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) == expected, (q["topic"], q["queueId"])
            for e in q["entries"]:
                m = e["messages"][0]
                record = store.commitlog.read_record(m["commitLogOffset"])
                assert (record.total_size, record.queue_offset, record.topic_name, record.msg_id) == (m["size"], m["queueOffset"], m["topic"], m["msgId"])
        end = rec["commitLog"]["maxOffset"]
        for query in rec["queries"]:
            assert broker_query(store, query["topic"], query["key"], end) == [r["commitLogOffset"] for r in query["results"]], query["key"]


def _checkpoint(doc: dict) -> dict:
    names = {
        "physicMsgTimestamp": "physic_msg_timestamp",
        "logicsMsgTimestamp": "logics_msg_timestamp",
        "indexMsgTimestamp": "index_msg_timestamp",
        "masterFlushedOffset": "master_flushed_offset",
        "confirmPhyOffset": "confirm_phy_offset",
    }
    return {names[k]: v for k, v in doc.items() if k in names}


def _not_in_queues(rec: dict, version: str) -> int:
    """Records the commit log holds but no consume queue serves (PREPARED / ROLLBACK)."""
    from conftest import manifest

    return sum(1 for m in manifest(version, "crashed-small")["messages"] if not m["dispatchToConsumeQueue"] and m["commitLogOffset"] < rec["commitLog"]["maxOffset"])


@pytest.mark.parametrize("version", VERSIONS)
def test_second_recover_changes_nothing(tmp_path, version):
    store_dir, _ = recover_copy(tmp_path, version, "crashed-small")
    with Store.open(store_dir) as store:
        again = plan_recover(store)
    assert again.mode == "normal" and again.is_empty


@pytest.mark.parametrize("version", VERSIONS)
def test_plan_json_round_trips(version, tmp_path):
    store_dir = copy_store(version, "crashed-small", tmp_path)
    with Store.open(store_dir) as store:
        plan = plan_recover(store, with_crc=True)
    assert Plan.from_json(plan.to_json()) == plan
    assert all(fp.crc32 is not None for fp in plan.inputs if fp.path.startswith(("index/", "abort", "checkpoint")))


def test_rewrite_clean_keeps_exactly_the_stale_entries_the_broker_serves(tmp_path):
    """Normal recovery of 4.9.7 ``rewrite-clean``: truncateDirtyLogicFiles keeps stale entries
    that start below the end, cuts the others; the 56 intact stale records are reported lost."""
    from conftest import manifest

    rec = recovered("4.9.7", "rewrite-clean")
    man = manifest("4.9.7", "rewrite-clean")
    store_dir, plan = recover_copy(tmp_path, "4.9.7", "rewrite-clean")
    assert plan.mode == rec["recoveryMode"] == "normal"
    assert plan.commitlog.valid_end == rec["commitLog"]["maxOffset"] == man["expectedLogicalEnd"]
    assert plan.lost.count == man["stalePhase1Records"]["counts"]["beyondLogicalEnd"]
    assert plan.commitlog.zero_to > plan.commitlog.zero_from == rec["commitLog"]["maxOffset"]
    with Store.open(store_dir) as store:
        view = queue_view(store)
        assert view == broker_queues(rec, set(view))
        for q in rec["queues"]:
            expected = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"], e["cq"]["tagsCode"]) for e in q["entries"]]
            assert queue_entries(store, q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) == expected
        scan = store.commitlog.scan(rec["commitLog"]["maxOffset"], check_crc=True)
        assert list(scan) == [] and scan.end.reason == "zeros"  # the stale records cannot come back


RETENTION_VERSIONS = [v for v in ALL_VERSIONS if (FIXTURES / f"rocketmq-{v}" / "retention-small.recovered.json").is_file()]


@pytest.mark.parametrize("version", RETENTION_VERSIONS)
def test_retention_store_needs_nothing_and_reports_the_broker_min_offsets(tmp_path, version):
    rec = recovered(version, "retention-small")
    store_dir = copy_store(version, "retention-small", tmp_path)
    with Store.open(store_dir, version=version) as store:
        plan = plan_recover(store)
        assert plan.is_empty
        view = {(q.topic, q.queue_id): (q.min_after, q.max_after) for q in plan.queues}
        assert view == broker_queues(rec, set(view))
