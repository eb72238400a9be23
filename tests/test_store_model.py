"""The store model against the real brokers: consume queues, index files, checkpoint, info."""

from __future__ import annotations

import shutil

from collections import defaultdict

import pytest

from conftest import MAIN_VERSIONS, VERSIONS, copy_store, manifest, recovered, store_path
from mqtool.formats import consumequeue as cqfmt
from mqtool.formats.hashing import index_key_hash
from mqtool.formats.index import index_key
from mqtool.store import Store, StoreConfig
from mqtool.store.summary import store_summary


def dispatched_by_queue(m: dict) -> dict[tuple[str, int], list[dict]]:
    queues = defaultdict(list)
    for msg in m["messages"]:
        if msg.get("dispatched", msg["dispatchToConsumeQueue"]):
            queues[(msg["topic"], msg["queueId"])].append(msg)
    for msgs in queues.values():
        msgs.sort(key=lambda x: x["queueOffset"])
    return queues


@pytest.mark.parametrize("version", VERSIONS)
def test_every_consume_queue_entry_matches_the_manifest(version):
    m = manifest(version, "clean-small")
    expected = dispatched_by_queue(m)
    with Store.open(store_path(version, "clean-small")) as store:
        seen = set()
        for queue in store.consume_queues:
            entries = list(queue.entries())
            msgs = expected[(queue.topic, queue.queue_id)]
            assert [(e.queue_offset, e.phys_offset, e.size, e.tags_code) for e in entries] == [
                (x["queueOffset"], x["commitLogOffset"], x["size"], x["cqTagsCode"]) for x in msgs
            ]
            seen.add((queue.topic, queue.queue_id))
        assert seen == set(expected)


@pytest.mark.parametrize("version", VERSIONS)
def test_index_files_match_the_manifest(version):
    m = manifest(version, "clean-small")
    by_offset = {msg["commitLogOffset"]: msg for msg in m["messages"]}
    with Store.open(store_path(version, "clean-small")) as store:
        assert store.index_geometry.hash_slot_num == m["storeConfig"]["maxHashSlotNum"]
        assert store.index_geometry.index_num == m["storeConfig"]["maxIndexNum"]
        headers = [
            {
                "file": f.name,
                "size": f.size,
                "beginTimestamp": f.header.begin_timestamp,
                "endTimestamp": f.header.end_timestamp,
                "beginPhyOffset": f.header.begin_phy_offset,
                "endPhyOffset": f.header.end_phy_offset,
                "hashSlotCount": f.header.hash_slot_count,
                "indexCount": f.header.index_count,
            }
            for f in store.index_files
        ]
        assert headers == m["rawState"]["indexFiles"]
        total = 0
        for f in store.index_files:
            for entry in f.entries():
                msg = by_offset[entry.phy_offset]
                keys = ([msg["uniqKey"]] if msg["uniqKey"] else []) + msg["keys"]
                hashes = {index_key_hash(index_key(msg["topic"], k)) for k in keys}
                assert entry.key_hash in hashes
                assert 0 <= entry.prev_index < entry.position
                total += 1
            for slot in range(f.geometry.hash_slot_num):
                if number := f.slot(slot):
                    assert f.entry(number).key_hash % f.geometry.hash_slot_num == slot
        indexed_keys = sum((1 if x["uniqKey"] else 0) + len(x["keys"]) for x in m["messages"] if x["indexed"])
        assert total == indexed_keys


@pytest.mark.parametrize("version", VERSIONS)
def test_checkpoint_matches_the_manifest(version):
    for name in ("clean-small", "crashed-small"):
        cp = manifest(version, name)["checkpoint"]
        with Store.open(store_path(version, name)) as store:
            assert store.checkpoint.physic_msg_timestamp == cp["physicMsgTimestamp"]
            assert store.checkpoint.logics_msg_timestamp == cp["logicsMsgTimestamp"]
            assert store.checkpoint.index_msg_timestamp == cp["indexMsgTimestamp"]
            assert store.abort_present == (name == "crashed-small")


@pytest.mark.parametrize("version,name", [(v, "clean-small") for v in VERSIONS] + [("4.9.7", "retention-small")])
def test_info_equals_the_broker_queue_table(version, name):
    m = manifest(version, name)
    with Store.open(store_path(version, name)) as store:
        doc = store_summary(store)
    assert doc["commitlog"]["min_offset"] == m["commitLogMinOffset"]
    assert doc["commitlog"]["max_offset"] == m["commitLogMaxOffset"]
    got = {(q["topic"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in doc["queues"]}
    assert got == {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in m["queues"]}


def test_retention_min_offsets_equal_the_recovered_broker():
    rec = recovered("4.9.7", "retention-small")
    with Store.open(store_path("4.9.7", "retention-small")) as store:
        queues = {(q["topic"], q["queue_id"]): q for q in store_summary(store)["queues"]}
    for q in rec["afterLoad"]["queues"]:
        assert queues[(q["topic"], q["queueId"])]["min_offset"] == q["minOffset"]


@pytest.mark.parametrize("version", VERSIONS)
def test_crashed_store_iterates_to_its_logical_end(version):
    m = manifest(version, "crashed-small")
    with Store.open(store_path(version, "crashed-small")) as store:
        scan = store.commitlog.scan(check_crc=True)
        offsets = [r.offset for r in scan]
    acked = [msg["commitLogOffset"] for msg in m["messages"]]
    assert offsets[: len(acked)] == acked  # every acknowledged message is there, in order
    assert len(offsets) - len(acked) in (0, 1)  # plus possibly the in-flight one
    assert scan.end.offset >= m["acknowledgedEndOffset"] and scan.end.is_clean


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_crashed_logical_end_equals_the_broker(version):
    with Store.open(store_path(version, "crashed-small")) as store:
        scan = store.commitlog.scan(check_crc=True)
        for _ in scan:
            pass
    assert scan.end.offset == recovered(version, "crashed-small")["commitLog"]["maxOffset"]


def test_stale_records_after_the_logical_end_are_not_read():
    m = manifest("4.9.7", "rewrite-clean")
    with Store.open(store_path("4.9.7", "rewrite-clean")) as store:
        scan = store.commitlog.scan(check_crc=True)
        offsets = {r.offset for r in scan}
    assert scan.end.offset == m["expectedLogicalEnd"]
    stale = [r["commitLogOffset"] for r in m["stalePhase1Records"]["records"] if r["where"] == "beyondLogicalEnd"]
    assert stale and not offsets.intersection(stale)


@pytest.mark.parametrize("version", VERSIONS)
def test_version_is_detected(version):
    expected = {"4.8.0": "E8-E9 (4.7.1-4.9.0)", "4.9.7": "E10-E12 (4.9.1-4.9.8)", "5.3.3": "E17-E18 (5.2.0-5.3.3)"}[version]  # the eras its marks leave
    for name in ("clean-small", "crashed-small"):
        with Store.open(store_path(version, name)) as store:
            assert store.version_guess.label == expected, store.version_guess.evidence


@pytest.mark.parametrize("version,confirm,label", [
    ("3.2.6", 1 << 47, "E0 (3.2.6)"),  # a bit flipped into the field: past the log's end, damage, not a 5.1.1+ mark
    ("3.2.6", 1024, "E0 (3.2.6)"),  # within the log but inside a record (damage seed 3000240): damage too
    ("5.1.4", "record", "E15a-E16 (5.1.1-5.1.4)"),  # a record's start, as CommitLog.setConfirmOffset writes: the 5.1.1+ mark
    ("5.1.4", "end", "E15a-E16 (5.1.1-5.1.4)"),  # the end of the data (the recovery's processOffset): the mark too
])
def test_a_checkpoint_confirm_offset_is_a_version_mark_only_at_a_record_boundary(tmp_path, version, confirm, label):
    """The checkpoint's confirmPhyOffset (bytes 32..39, written from 5.1.1) is a record boundary of the commit log
    and no CRC covers it: any other value is damage (before: a 3.2.6 store with bits flipped there read as
    5.2.0-5.3.3, and repair without --broker-version planned under 5.x rules), a boundary is the mark."""
    root = copy_store(version, "clean-small", tmp_path)
    m = manifest(version, "clean-small")
    confirm = {"record": sorted(x["commitLogOffset"] for x in m["messages"])[7], "end": m.get("commitLogMaxOffset")}.get(confirm, confirm)
    checkpoint = bytearray((root / "checkpoint").read_bytes())
    checkpoint[32:40] = confirm.to_bytes(8, "big")
    (root / "checkpoint").write_bytes(checkpoint)
    with Store.open(root) as store:
        assert store.version_guess.label == label, store.version_guess.evidence
        assert any("confirmPhyOffset" in e for e in store.version_guess.evidence)


@pytest.mark.parametrize("version,label", [("5.3.3", "E17-E18 (5.2.0-5.3.3)"), ("4.9.7", "E10-E12 (4.9.1-4.9.8)")])
def test_an_abort_file_that_holds_no_pid_is_damage_not_a_mark(tmp_path, version, label):
    """A 4.x abort file is empty, a 5.x one holds the broker's PID (reference §6.3): bits flipped in
    a 5.3.3 one ("18259" -> "1y\\"59", damage seed 2) were read as "the abort file is empty", the first
    mark, which set aside abort.bak and the V2 records and made the store 4.7.1-4.9.0."""
    root = copy_store(version, "crashed-small", tmp_path)
    (root / "abort").write_bytes(b'1y"59')
    with Store.open(root) as store:
        assert store.version_guess.label == label, store.version_guess.evidence
        assert "the abort file holds 5 bytes that are no PID: damaged, not a mark: E0-E18 (3.2.6-5.3.3)" in store.version_guess.evidence
        assert not any("set aside" in e for e in store.version_guess.evidence), store.version_guess.evidence


@pytest.mark.parametrize("version,label", [("5.3.3", "E17-E18 (5.2.0-5.3.3)"), ("4.9.7", "E10-E12 (4.9.1-4.9.8)")])
def test_an_emptied_abort_file_weighs_no_more_than_a_missing_file(tmp_path, version, label):
    """A 5.x abort file cut to 0 bytes (damage seed 19 on 5.3.3 crashed-small) reads as 4.x's empty
    file. As the first mark it set aside abort.bak and the V2 records and made the store 4.6.0-4.9.0,
    whose rules the planners then followed; an empty file now counts after every file that holds
    something, as a missing file does: the 5.3.3 store stays 5.x, a 4.9.7 one (empty anyway) 4.x."""
    root = copy_store(version, "crashed-small", tmp_path)
    (root / "abort").write_bytes(b"")
    with Store.open(root) as store:
        guess = store.version_guess
    assert guess.label == label, guess.evidence
    empty = [e for e in guess.evidence if e.startswith("the abort file is empty")]
    assert empty == (["the abort file is empty: set aside, it contradicts the marks before it"] if version == "5.3.3" else ["the abort file is empty: E0-E12 (3.2.6-4.9.8)"])


def test_queue_directories_are_read_as_integer_parse_int_reads_them(tmp_path):
    """``DefaultMessageStore.loadConsumeQueue`` takes a directory whose name ``Integer.parseInt`` reads,
    a sign included (a record whose QUEUEID is damaged negative gets such a queue), and skips the rest."""
    root = copy_store("5.3.3", "clean-small", tmp_path)
    topic = root / "consumequeue" / "TopicTest"
    for name in ("-3", "x1", "2147483648", "--1", "+٧"):  # and Unicode decimal digits, which parseInt reads
        shutil.copytree(topic / "0", topic / name)
    with Store.open(root) as store:
        ids = sorted(q.queue_id for q in store.consume_queues if q.topic == "TopicTest")
    assert ids == [-3, 0, 1, 2, 3, 7]


def test_broker_config_overrides_inference(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=1048576\nmapedFileSizeConsumeQueue=19990\nmaxHashSlotNum=1000\nmaxIndexNum=4000\n")
    from mqtool.store import load_broker_config

    cfg = load_broker_config(conf)
    assert cfg.consume_queue_file_size == 20000  # rounded up to whole units, as the broker does
    with Store.open(store_path("4.9.7", "clean-small"), cfg) as store:
        assert store.commitlog.file_size == 1 << 20
        assert len(list(store.consume_queues[0].entries())) > 0



def test_broker_config_values_keep_their_trailing_whitespace_as_properties_load(tmp_path):
    """Before: values were stripped, so ``messageIndexEnable=true `` read as true (the broker's
    ``Boolean.parseBoolean("true ")`` is false) and ``mappedFileSizeCommitLog=1048576 `` as 1 MiB
    (``Integer.parseInt`` throws and the broker ignores it); ``1_048_576`` passed Python's int."""
    from mqtool.errors import BadInput
    from mqtool.store import load_broker_config

    conf = tmp_path / "broker.conf"
    conf.write_text("  messageIndexEnable=true \r\ncheckCRCOnRecover = false\t\nenableDLegerCommitLog\fTRUE\n", encoding="utf-8")
    cfg = load_broker_config(conf)
    assert (cfg.message_index_enable, cfg.check_crc_on_recover, cfg.dledger) == (False, False, True)
    for bad in ("mappedFileSizeCommitLog=1048576 \n", "mappedFileSizeCommitLog=1_048_576\n"):
        conf.write_text(bad, encoding="utf-8")
        with pytest.raises(BadInput):
            load_broker_config(conf)


def test_consume_queue_recovery_equals_entries_end():
    with Store.open(store_path("5.3.3", "clean-small")) as store:
        for queue in store.consume_queues:
            rec = queue.recover()
            entries = list(queue.entries())
            assert rec.max_offset == len(entries)
            assert rec.max_phys_offset == entries[-1].phys_offset + entries[-1].size
            assert cqfmt.ENTRY.size == cqfmt.ConsumeQueueEntryStruct.sizeof() == 20


def test_store_config_defaults():
    assert StoreConfig().message_index_safe is False


def test_index_geometry_is_inferred_from_content_for_any_ratio(tmp_path):
    from mqtool.formats import index as ix
    from mqtool.store.index import infer_index_geometry

    for slots, entries in ((777, 1234), (1000, 4000), (5, 3)):
        buf = bytearray(ix.index_file_size(slots, entries))
        for number in range(1, entries):  # IndexFile.putKey's slot chains, one key per entry
            key_hash = index_key_hash(f"T#key-{number}")
            slot = ix.slot_position(key_hash % slots)
            (prev,) = ix.SLOT.unpack_from(buf, slot)
            ix.ENTRY.pack_into(buf, ix.entry_position(slots, number), key_hash, number * 100, 0, prev)
            ix.SLOT.pack_into(buf, slot, number)
        ix.HEADER.pack_into(buf, 0, 1_700_000_000_000, 1_700_000_000_000, 100, (entries - 1) * 100, 0, entries)
        path = tmp_path / f"{slots}-{entries}"
        path.write_bytes(bytes(buf))
        geometry = infer_index_geometry(path)
        assert (geometry.hash_slot_num, geometry.index_num) == (slots, entries)


def test_repair_names_a_queue_file_in_the_directory_the_broker_loads_the_queue_from(tmp_path):
    """A queue directory ``01`` gives queue 1 (``Integer.parseInt``, ``queue_id_of``), whose ``ConsumeQueue`` reads and writes
    ``TopicTest/1``, never ``01`` (``discover_queues``). Repair's ``queue_file`` (the rows it expects after a recovery) and verify
    both ask the queue (``ConsumeQueue.unit_file``): the file the broker reads, there or not. Before, both named ``01``'s file."""
    from mqtool.recovery.repair import queue_file

    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "consumequeue" / "TopicTest" / "1").rename(root / "consumequeue" / "TopicTest" / "01")
    with Store.open(root) as store:
        queue = next(q for q in store.consume_queues if (q.topic, q.queue_id) == ("TopicTest", 1))
        assert queue.files == []
        assert queue_file(store, "TopicTest", 1, 0) == str(queue.unit_file(0).relative_to(root)) == "consumequeue/TopicTest/1/00000000000000000000"
