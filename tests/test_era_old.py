"""The rules of eras E0 (3.2.6), E1 (4.0.0) and E2 (4.1.0), each shown on both sides of its boundary
(rocketmq-rules-by-version.md; row numbers as § there), on the real 3.2.6 and 4.0.0 stores and on
synthetic queues where no fixture shows the other side."""

from __future__ import annotations

import shutil

import pytest
from conftest import copy_store, manifest, store_path

from mqtool.apply import apply_plan
from mqtool.formats import consumequeue as cqfmt
from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, SCHEDULE_TOPIC
from mqtool.recovery.planners import PlanOptions, plan_rebuild_index
from mqtool.store import Store
from mqtool.store.rules import BrokerVersion, VersionRules
from mqtool.apply.writers import ConsumeQueueWriter
from repair_support import fixture_config
from test_verify import verify


def rules(version: str) -> VersionRules:
    return VersionRules(BrokerVersion.parse(version))


def kinds(findings) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in findings:
        out[f["kind"]] = out.get(f["kind"], 0) + 1
    return out


# ---- §4.2 which records and keys the index holds ------------------------------------------------


def test_3_2_6_indexes_keys_of_not_and_prepared_records_only():
    """§4.2: the 3.2.6 broker's index holds KEYS of NOT and PREPARED records, no UNIQ_KEY and no COMMIT
    record; 4.0.0's holds UNIQ_KEY and KEYS of all but ROLLBACK. Each store is sound under its own
    rule and not under the other's."""
    old, new = store_path("3.2.6", "clean-small"), store_path("4.0.0", "clean-small")
    code, findings, _ = verify(old, "--broker-version", "3.2.6", "--only", "index")
    assert code == 0 and not kinds(findings)
    code, findings, _ = verify(old, "--broker-version", "4.0.0", "--only", "index")
    assert code == 1 and set(kinds(findings)) == {"index-keys-missing"}
    code, findings, _ = verify(new, "--broker-version", "4.0.0", "--only", "index")
    assert code == 0 and not kinds(findings)
    code, findings, _ = verify(new, "--broker-version", "3.2.6", "--only", "index")
    assert code == 1 and "index-entry-mismatch" in kinds(findings)


@pytest.mark.parametrize("version", ["3.2.6", "4.0.0"])
def test_rebuild_index_puts_the_brokers_entries(tmp_path, version):
    """rebuild-index under the store's own rule puts as many entries as the broker's index holds
    (the keys of every indexed manifest message); under the other era's rule it does not."""
    m = manifest(version, "clean-small")
    with Store.open(store_path(version, "clean-small"), fixture_config(m), version) as store:
        broker_entries = sum(f.header.index_count - 1 for f in store.index_files)
    own = rules(version)
    expected = sum(
        (1 if x["uniqKey"] and own.indexes_uniq_key_and_commit else 0) + len(x["keys"])
        for x in m["messages"] if x["indexed"]
    )
    assert broker_entries == expected
    for given, same in ((version, True), ("4.0.0" if version == "3.2.6" else "3.2.6", False)):
        store_dir = copy_store(version, "clean-small", tmp_path / given)
        shutil.rmtree(store_dir / "index")
        (store_dir / "index").mkdir()
        with Store.open(store_dir, fixture_config(m), given) as store:
            plan = plan_rebuild_index(store, PlanOptions())
        apply_plan(plan, tmp_path / f"backup-{given}")
        with Store.open(store_dir, fixture_config(m), given) as store:
            rebuilt = sum(f.header.index_count - 1 for f in store.index_files)
        assert (rebuilt == broker_entries) is same


# ---- §2.15 delay-queue tags code -------------------------------------------------------------------


def test_3_2_6_delay_entries_carry_the_pre_lock_delivery_time():
    """§2.15: the 3.2.6 master computes a delay entry's tags code before the put lock, so some are a few
    ms after STORETIMESTAMP + delay (the manifest says which); 4.0.0 computes it from the record.
    verify accepts the 3.2.6 entries under 3.2.6 and reports exactly those under 4.0.0's rule."""
    for version in ("3.2.6", "4.0.0"):
        off = [
            x for x in manifest(version, "clean-small")["messages"]
            if x.get("dispatched") and x["topic"] == SCHEDULE_TOPIC
            and x["cqTagsCode"] != x["storeTimestamp"] + DEFAULT_DELAY_TABLE[int(x["properties"]["DELAY"])]
        ]
        assert bool(off) == rules(version).delay_tags_from_pre_lock_time
        assert all(0 < x["cqTagsCode"] - x["storeTimestamp"] - DEFAULT_DELAY_TABLE[int(x["properties"]["DELAY"])] <= 1000 for x in off)
        code, findings, _ = verify(store_path(version, "clean-small"), "--broker-version", version, "--only", "cq")
        assert code == 0 and not kinds(findings)
        if version == "3.2.6":
            code, findings, _ = verify(store_path(version, "clean-small"), "--broker-version", "4.0.0", "--only", "cq")
            assert code == 1 and kinds(findings) == {"cq-entry-mismatch": len(off)}


@pytest.mark.parametrize("version", ["3.2.6", "5.3.3"])
def test_the_pre_lock_slack_is_taken_only_where_the_store_may_be_from_3_2_6(tmp_path, version):
    """Without --broker-version, verify accepts what any era the store's marks leave writes, and
    nothing more: a delay entry's tags code 64 ms off the record's delivery time (damage seed 400407:
    a bit flipped in a 5.3.3 queue file) is 3.2.6's pre-lock slack on a 3.2.6 store and a wrong
    entry on a 5.3.3 store (it used to pass there: the slack was taken whenever the version was undecided)."""
    root = copy_store(version, "clean-small", tmp_path)
    target = next(x for x in manifest(version, "clean-small")["messages"] if x.get("dispatched") and x["topic"] == SCHEDULE_TOPIC)
    unit = root / "consumequeue" / SCHEDULE_TOPIC / str(target["queueId"]) / f"{0:020d}"
    data = bytearray(unit.read_bytes())
    at = target["queueOffset"] * cqfmt.ENTRY_SIZE + cqfmt.ENTRY_LAYOUT.offset_of("tags_code")
    data[at : at + 8] = (int.from_bytes(data[at : at + 8], "big") + 64).to_bytes(8, "big")
    unit.write_bytes(data)
    code, findings, summary = verify(root, "--only", "cq")
    assert "given" not in summary["version"]
    if rules(version).delay_tags_from_pre_lock_time:
        assert code == 0 and not kinds(findings)
    else:
        assert code == 1 and [(f["kind"], f["offset"]) for f in findings] == [("cq-entry-mismatch", target["commitLogOffset"])]


# ---- §3.1-§3.4 the queue's maxPhysicOffset; §3.3 the repeat-write guard ------------------------------


def placed(version: str, requests: list[tuple[int, int, int]], tmp_path) -> list[tuple[int, int]]:
    """(queue position, phys offset) of the units ``putMessagePositionInfo`` writes for
    ``(queue offset, phys offset, size)`` requests under ``version``'s rules (a synthetic queue,
    written by the consume queue writer that rebuild, recover and repair use)."""
    r = rules(version)
    writer = ConsumeQueueWriter(tmp_path, 20 * 1000, dedup_by_end=r.cq_dedup_by_end, repeat_guard=r.cq_repeat_guard)
    for qoff, phys, size in requests:
        writer.put("T", 0, qoff, phys, size, 0)
    writer.close(fsync=False)
    data = (tmp_path / "T" / "0" / f"{0:020d}").read_bytes()
    return [(i, unit[0]) for i, unit in enumerate(cqfmt.ENTRY.iter_unpack(data)) if any(unit)]


def test_up_to_4_4_0_the_queue_dedups_by_start_offset(tmp_path):
    """§3.1/§3.2: up to 4.4.0 ``maxPhysicOffset`` is the last entry's start offset and a request is
    skipped when its offset is not above it; from 4.5.0 offset+size, skipped when its end is not
    above. A request starting inside the previous record is placed by 4.0.0, skipped by 4.5.1; a
    record dispatched again is skipped by both; consecutive records are placed by both."""
    requests = [(0, 100, 50), (1, 120, 10), (2, 120, 10), (3, 150, 10), (4, 160, 10)]
    assert placed("4.0.0", requests, tmp_path / "a") == [(0, 100), (1, 120), (2, 150), (3, 160)]
    assert placed("4.5.1", requests, tmp_path / "b") == [(0, 100), (1, 150), (2, 160)]


@pytest.mark.parametrize("version", ["3.2.6", "4.0.0"])
def test_queue_recovery_keeps_the_last_start_offset(version):
    """§3.4: ``ConsumeQueue.recover`` leaves ``maxPhysicOffset`` at the last unit's offset up to 4.4.0
    (offset + size from 4.5.0), for every queue of the real store."""
    m = manifest(version, "clean-small")
    last: dict[tuple[str, int], dict] = {}
    for x in m["messages"]:
        if x["dispatchToConsumeQueue"]:
            key = (x["topic"], x["queueId"])
            if key not in last or x["commitLogOffset"] > last[key]["commitLogOffset"]:
                last[key] = x
    with Store.open(store_path(version, "clean-small"), fixture_config(m), version) as store:
        by_end = rules(version).cq_dedup_by_end
        assert not by_end
        for q in store.consume_queues:
            x = last[(q.topic, q.queue_id)]
            assert q.recover().max_physic_offset(by_end) == x["commitLogOffset"]
            assert q.recover().max_physic_offset(True) == x["commitLogOffset"] + x["size"]


def test_up_to_4_1_0_an_already_written_queue_offset_is_appended(tmp_path):
    """§3.3: from 4.2.0 a request whose queue offset is below the write position is skipped ("build
    consume queue repeatedly"); up to 4.1.0 it is appended at the write position anyway."""
    requests = [(0, 100, 10), (1, 200, 10), (1, 300, 10), (2, 400, 10)]
    assert placed("4.1.0", requests, tmp_path / "a") == [(0, 100), (1, 200), (2, 300), (3, 400)]
    assert placed("4.2.0", requests, tmp_path / "b") == [(0, 100), (1, 200), (2, 400)]


# ---- detection: §4.2 UNIQ_KEY in the index, §6.4 lock file, §7.1 dataVersion.timestatmp ---------------


def eras_of(path) -> list[str]:
    with Store.open(path) as store:
        return [e.name for e in store.version_guess.eras]


def test_the_index_tells_3_2_6_from_4_x():
    """§4.2: an index holding a record's KEYS but not its UNIQ_KEY is 3.2.6's; one holding both is
    4.0.0+'s. With the other marks a 3.2.6 store is detected as 3.2.6, and no 4.x store as 3.2.6."""
    for name in ("clean-small", "crashed-small"):
        assert eras_of(store_path("3.2.6", name)) == ["E0"]
        with Store.open(store_path("3.2.6", name)) as store:
            assert str(store.version_guess.version) == "3.2.6"
        for version in ("4.0.0", "4.4.0"):
            assert "E0" not in eras_of(store_path(version, name))


def test_one_uniq_key_lost_to_a_damaged_index_is_no_3_2_6_mark(tmp_path):
    """A 4.0.0 index zeroed from byte 47642 on (damage seed 900992) keeps the KEYS entry of one record
    but not its UNIQ_KEY's, and no other record's KEYS: that one record used to make the store 3.2.6
    (E0 alone), whose index rules repair then rebuilt by. Now one record is no mark: the eras the
    other marks leave stay (3.2.6 among them), and repair plans under each or asks for the version."""
    root = copy_store("4.0.0", "clean-small", tmp_path)
    index = min((root / "index").iterdir())  # the first of the two files
    data = bytearray(index.read_bytes())
    data[47642:] = bytes(len(data) - 47642)
    index.write_bytes(data)
    eras = eras_of(root)
    assert "E0" in eras and "E1" in eras


def test_lock_file_and_data_version_spelling(tmp_path):
    """§6.4: ``lock`` exists from 4.2.0 (not in 3.2.6-4.1.0); §7.1: ``dataVersion.timestatmp`` in
    3.2.6 and 4.0.0, ``timestamp`` from 4.1.0. On copies of the 4.0.0 store (none of these files)."""
    base = copy_store("4.0.0", "clean-small", tmp_path)
    assert not (base / "lock").exists() and eras_of(base)[0] == "E1"
    config = base / "config"
    config.mkdir()
    topics = '{"dataVersion":{"counter":1,"%s":1795891216516},"topicConfigTable":{}}'
    (config / "topics.json").write_text(topics % "timestatmp")
    assert eras_of(base) == ["E1"]
    (config / "topics.json").write_text(topics % "timestamp")
    assert "E1" not in eras_of(base) and "E2" in eras_of(base)
    (base / "lock").write_bytes(b"lock")
    assert eras_of(base)[0] == "E3a"
