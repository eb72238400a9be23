"""DLedger stores (reference §15) against the real brokers' manifests: entry headers, index units,
the records inside (every field), the compiled walk, and the DLedger checkpoint."""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import MAIN_VERSIONS, copy_store, manifest, parse_host, store_path
from mqtool.formats import dledger as dfmt
from mqtool.formats.hashing import tags_code
from mqtool.formats.properties import split_keys
from mqtool.errors import NotAStore
from mqtool.store import Store
from mqtool.store.commitlog import StopReason
from mqtool.store.dledger import DLedgerCommitLog
from mqtool.store.fastscan import FastScan

STORES = [(v, n) for v in MAIN_VERSIONS for n in ("dledger-small", "dledger-crashed")] + [("5.3.3", "dledger-crashed-cqloss")]
HEADER_FIELDS = {"magic": "magic", "size": "size", "index": "index", "term": "term", "pos": "pos", "channel": "channel", "chain_crc": "chainCrc", "body_crc": "bodyCrc", "body_size": "bodySize"}


@pytest.mark.parametrize("version,name", STORES)
def test_entry_headers_equal_the_manifest_and_construct(version, name):
    m = manifest(version, name)
    with Store.open(store_path(version, name)) as store:
        assert store.is_dledger and isinstance(store.commitlog, DLedgerCommitLog)
        scan = store.commitlog.entries()
        headers = list(scan)
        assert len(headers) == m["dledger"]["entryCount"] == len(m["messages"])
        for header, msg in zip(headers, m["messages"]):
            e = msg["dledgerEntry"]
            assert {f: getattr(header, f) for f in HEADER_FIELDS} == {f: e[k] for f, k in HEADER_FIELDS.items()}
            assert header.offset == header.pos and header.record_offset == msg["commitLogOffset"]
            raw = store.commitlog.read_bytes(header.offset, dfmt.ENTRY_HEADER_SIZE)
            assert dict(dfmt.DLedgerEntryHeaderStruct.parse(raw), _io=None) | {"_io": None} == {f: getattr(header, f) for f in HEADER_FIELDS} | {"_io": None}
            assert dfmt.ENTRY_HEADER.pack(*(getattr(header, f) for f in HEADER_FIELDS)) == raw
        assert [b.offset for b in scan.blanks] == [b["offset"] for b in m["dledger"]["blanks"]]
        assert [b.size for b in scan.blanks] == [b["sizeField"] for b in m["dledger"]["blanks"]]
        assert scan.end.offset == m["dledger"]["endPos"]


@pytest.mark.parametrize("version,name", STORES)
def test_index_units_equal_the_manifest_and_the_entries(version, name):
    m = manifest(version, name)
    with Store.open(store_path(version, name)) as store:
        units = list(store.commitlog.index_units())
        headers = list(store.commitlog.entries())
        first = m["dledger"]["firstIndexEntries"]
        for unit, e in zip(units, first):
            assert (unit.magic, unit.pos, unit.size, unit.index, unit.term) == (e["magic"], e["pos"], e["size"], e["index"], e["term"])
            raw = bytes.fromhex(e["hex"])
            assert dfmt.encode_index_unit(unit.magic, unit.pos, unit.size, unit.index, unit.term) == raw
            parsed = dfmt.DLedgerIndexUnitStruct.parse(raw)
            assert (parsed.magic, parsed.pos, parsed.size, parsed.index, parsed.term) == unit[1:]
        assert len(units) == m["dledger"]["indexEntryCount"]
        assert [(u.pos, u.size, u.index, u.term) for u in units] == [(h.pos, h.size, h.index, h.term) for h in headers][: len(units)]


@pytest.mark.parametrize("version,name", STORES)
def test_every_message_inside_an_entry_decodes_to_the_manifest(version, name):
    m = manifest(version, name)
    with Store.open(store_path(version, name)) as store:
        scan = store.commitlog.scan(check_crc=True)
        records = list(scan)
        assert len(records) == len(m["messages"])
        for r, msg in zip(records, m["messages"]):
            props = r.property_map()
            assert r.offset == r.phys_offset == msg["commitLogOffset"] == msg["dledgerEntry"]["pos"] + 48
            assert r.total_size == msg["size"] == msg["dledgerEntry"]["bodySize"]
            assert r.topic_name == msg["topic"]
            assert (r.queue_id, r.queue_offset, r.sys_flag, r.flag) == (msg["queueId"], msg["queueOffset"], msg["sysFlag"], msg["flag"])
            assert r.body_crc == msg["bodyCRC"] and r.crc_ok()
            assert (r.born_timestamp, r.store_timestamp) == (msg["bornTimestamp"], msg["storeTimestamp"])
            assert parse_host(r.born_host) == parse_host(msg["bornHost"])
            assert parse_host(r.store_host) == parse_host(msg["storeHost"])
            assert (r.reconsume_times, r.prepared_transaction_offset) == (msg["reconsumeTimes"], msg["preparedTransactionOffset"])
            assert r.msg_id == msg["msgId"]
            assert props == msg["properties"]
            assert tags_code(props.get("TAGS")) == msg["tagsHashCode"]
            assert split_keys(props.get("KEYS")) == msg["keys"]
            assert hashlib.sha256(r.body).hexdigest() == msg["bodySha256"]
            assert store.commitlog.read_record(msg["commitLogOffset"]) == r
        assert scan.end.offset == m["dledger"]["endPos"] and scan.end.is_clean


@pytest.mark.parametrize("version,name", STORES)
def test_compiled_walk_equals_the_record_scan(version, name):
    m = manifest(version, name)
    offsets = [msg["commitLogOffset"] for msg in m["messages"]]
    sizes = [msg["size"] for msg in m["messages"]]
    with Store.open(store_path(version, name)) as store:
        for start in (None, offsets[len(offsets) // 2], m["dledger"]["blanks"][0]["offset"] + m["dledger"]["blanks"][0]["sizeField"]):
            fast = FastScan(store.commitlog, start)
            rows = [(b.base_offset + int(r[0]), int(r[1]), int(r[6])) for b in fast for r in b.rows]
            first = 0 if start is None else next(i for i, o in enumerate(offsets) if o >= start)
            assert rows == [(o, s, 1) for o, s in zip(offsets[first:], sizes[first:])]
            assert fast.end.offset == m["dledger"]["endPos"] and fast.end.is_clean
            assert fast.blanks == [b["offset"] for b in m["dledger"]["blanks"] if b["offset"] >= (start or 0)]


@pytest.mark.parametrize("version,name", STORES)
def test_dledger_checkpoint_and_term(version, name):
    d = manifest(version, name)["dledger"]
    with Store.open(store_path(version, name)) as store:
        layout = store.commitlog.layout
        assert layout.self_id == "n0"
        assert layout.checkpoint == d["checkpoint"]["parsed"]
        assert layout.currterm == d["currterm"]["parsed"]
        assert layout.committed_index == int(d["checkpoint"]["parsed"]["committedIndex"])


def test_a_checkpoint_value_dledger_cannot_read_is_no_value(tmp_path):
    """DLedger reads ``committedIndex`` with ``Long.valueOf`` of the Properties value as written: before,
    ``5 `` (a trailing space) and ``1_0`` were read as numbers by Python's ``int``."""
    from conftest import copy_store

    store_dir = copy_store("4.9.7", "dledger-small", tmp_path)
    for text, want in (("committedIndex=12\n", 12), ("committedIndex=5 \n", None), ("committedIndex=1_0\n", None), ("committedIndex:٣\n", 3)):
        (store_dir / "dledger-n0" / "checkpoint").write_text(text)
        with Store.open(store_dir) as store:
            assert store.commitlog.layout.committed_index == want, text


def test_broker_config_names_the_dledger_data_path(tmp_path):
    src = store_path("4.9.7", "dledger-small")
    conf = tmp_path / "broker.conf"
    conf.write_text(f"enableDLegerCommitLog=true\nstorePathDLedgerCommitLog={src / 'dledger-n0' / 'data'}\ndLegerSelfId=n0\n")
    from mqtool.store import load_broker_config

    config = load_broker_config(conf)
    assert config.dledger and config.dledger_self_id == "n0"
    with Store.open(src, config) as store:
        assert store.is_dledger and sum(1 for _ in store.commitlog.scan()) == manifest("4.9.7", "dledger-small")["messageCount"]
    conf.write_text("enableDLegerCommitLog=true\n")
    (tmp_path / "empty" / "consumequeue").mkdir(parents=True)
    with pytest.raises(NotAStore, match="no dledger"):
        Store.open(tmp_path / "empty", load_broker_config(conf))


def test_damaged_entry_header_ends_both_walks_at_the_entry(tmp_path):
    from conftest import copy_store

    m = manifest("4.9.7", "dledger-small")
    target = copy_store("4.9.7", "dledger-small", tmp_path)
    victim = m["messages"][200]["dledgerEntry"]
    path = target / "dledger-n0" / victim["file"]
    data = bytearray(path.read_bytes())
    data[victim["filePosition"] + 8 : victim["filePosition"] + 16] = (victim["index"] + 5).to_bytes(8, "big")
    path.write_bytes(bytes(data))
    with Store.open(target) as store:
        scan = store.commitlog.scan()
        assert sum(1 for _ in scan) == 200
        assert scan.end.offset == victim["pos"] and "index" in scan.end.detail
        fast = FastScan(store.commitlog)
        assert sum(len(b.rows) for b in fast) == 200
        assert fast.end.offset == victim["pos"] and "index" in fast.end.detail


def test_an_entry_running_past_its_file_ends_both_walks_as_cut_short(tmp_path):
    """Before: the entry walk (``EntryScan``, recovery's) said such an entry was corrupt and the
    record scan said it was cut short; both say it is cut short now, at the entry."""
    from conftest import copy_store
    from mqtool.store.dledger import EntryScan

    m = manifest("4.9.7", "dledger-small")
    target = copy_store("4.9.7", "dledger-small", tmp_path)
    victim = m["messages"][200]["dledgerEntry"]
    path = target / "dledger-n0" / victim["file"]
    data = bytearray(path.read_bytes())
    size = len(data) - victim["filePosition"] + 100  # a sound header whose entry the file cannot hold
    data[victim["filePosition"] + 4 : victim["filePosition"] + 8] = size.to_bytes(4, "big")
    data[victim["filePosition"] + 44 : victim["filePosition"] + 48] = (size - 48).to_bytes(4, "big")
    path.write_bytes(bytes(data))
    with Store.open(target) as store:
        scan, entries = store.commitlog.scan(), EntryScan(store.commitlog, 0)
        assert sum(1 for _ in scan) == sum(1 for _ in entries) == 200
        assert scan.end == entries.end and scan.end.offset == victim["pos"]
        assert scan.end.reason is StopReason.TRUNCATED and scan.end.detail == "entry runs past the end of its file"


# ---- recovery: the broker's DLedger recovery predicted exactly (recovered JSON) -----------------

CRASHED = [("4.9.7", "dledger-crashed"), ("5.3.3", "dledger-crashed"), ("5.3.3", "dledger-crashed-cqloss")]


def _recover_copy(tmp_path, version, name):
    from conftest import copy_store

    from mqtool.apply import apply_plan
    from mqtool.recovery.planners import plan_recover

    store_dir = copy_store(version, name, tmp_path)
    with Store.open(store_dir) as store:
        plan = plan_recover(store)
    apply_plan(plan, tmp_path / "backup")
    return store_dir, plan


@pytest.mark.parametrize("version,name", CRASHED)
def test_recover_equals_the_broker(tmp_path, version, name):
    from conftest import recovered
    from repair_support import broker_query, queue_entries, queue_view

    rec = recovered(version, name)
    store_dir, plan = _recover_copy(tmp_path, version, name)
    assert plan.mode == rec["recoveryMode"] == "abnormal"
    assert plan.commitlog.valid_end == rec["commitLog"]["maxOffset"] == rec["dledgerAfterStart"]["dataMaxWrotePosition"]
    names = {"physicMsgTimestamp": "physic_msg_timestamp", "logicsMsgTimestamp": "logics_msg_timestamp", "indexMsgTimestamp": "index_msg_timestamp", "masterFlushedOffset": "master_flushed_offset", "confirmPhyOffset": "confirm_phy_offset"}
    assert plan.checkpoint.after == {**plan.checkpoint.before, **{names[k]: v for k, v in rec["checkpointAfterShutdown"].items() if k in names}}
    with Store.open(store_dir) as store:
        assert not store.abort_present
        view = queue_view(store)
        broker = {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in rec["queues"] if (q["topic"], q["queueId"]) in view or q["maxOffset"]}
        assert view == broker
        assert {(q.topic, q.queue_id): (q.min_after, q.max_after) for q in plan.queues} == view
        for q in rec["queues"]:
            expected = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"], e["cq"]["tagsCode"]) for e in q["entries"]]
            assert queue_entries(store, q["topic"], q["queueId"], q["minOffset"], q["maxOffset"]) == expected, (q["topic"], q["queueId"])
        end = rec["commitLog"]["maxOffset"]
        for query in rec["queries"]:
            assert broker_query(store, query["topic"], query["key"], end) == [r["commitLogOffset"] for r in query["results"]], query["key"]


def test_recover_says_what_the_broker_loses(tmp_path):
    """5.3.3 cqloss: the 8 acknowledged messages without a consume queue entry after the broker's
    recovery are named; 4.9.7: the dropped index is never rebuilt."""
    from conftest import recovered

    from mqtool.recovery.planners import plan_recover

    rec = recovered("5.3.3", "dledger-crashed-cqloss")
    served = {e["cq"]["phyOffset"] for q in rec["queues"] for e in q["entries"]}
    m = manifest("5.3.3", "dledger-crashed-cqloss")
    lost = [msg["commitLogOffset"] for msg in m["messages"] if msg["dispatchToConsumeQueue"] and msg["commitLogOffset"] not in served]
    with Store.open(store_path("5.3.3", "dledger-crashed-cqloss")) as store:
        notes = plan_recover(store).notes
    assert any(f"loses {len(lost)} acknowledged message(s) at [{lost[0]}, {lost[-1]}]" in n for n in notes), notes
    with Store.open(store_path("4.9.7", "dledger-crashed")) as store:
        notes = plan_recover(store).notes
    rec = recovered("4.9.7", "dledger-crashed")
    assert all(not q["results"] for q in rec["queries"])
    first = manifest("4.9.7", "dledger-crashed")["messages"][0]["commitLogOffset"]
    assert any(f"never re-indexes [{first}, {rec['commitLog']['maxOffset']})" in n and "returns nothing" in n for n in notes), notes


@pytest.mark.parametrize("version", ["5.0.0", "5.1.4"])
def test_before_5_2_0_dledger_crash_recovery_dispatches_nothing(version):
    """Before: every 5.x release was planned with 5.2.0's ``dledgerRecoverAbnormally`` (re-dispatch, the end
    summed without entry headers, the queues cut there: 8 messages "lost"). 5.0.0-5.1.4's ``recoverAbnormally``
    is ``recover``, as after a clean stop: no dispatch, the queues cut only if they reach the data's end."""
    from mqtool.recovery.planners import plan_recover

    with Store.open(store_path("5.3.3", "dledger-crashed-cqloss"), version=version) as store:
        plan = plan_recover(store)
    end = plan.commitlog.valid_end
    assert plan.mode == "abnormal" and [p.name for p in plan.dispatch] == ["reput"] and plan.dispatch[0].stop == end
    assert not any("entry headers" in n or "acknowledged" in n for n in plan.notes), plan.notes
    assert all(q.max_after >= q.max_before for q in plan.queues)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_recover_of_a_clean_dledger_store_changes_nothing(version):
    from mqtool.recovery.planners import plan_recover

    with Store.open(store_path(version, "dledger-small")) as store:
        plan = plan_recover(store)
    assert plan.mode == "normal" and plan.is_empty and plan.commitlog.valid_end == manifest(version, "dledger-small")["dledger"]["endPos"]


@pytest.mark.parametrize("version,name", CRASHED)
def test_second_recover_changes_nothing(tmp_path, version, name):
    from mqtool.recovery.planners import plan_recover

    store_dir, _ = _recover_copy(tmp_path, version, name)
    with Store.open(store_dir) as store:
        again = plan_recover(store)
    assert again.mode == "normal" and again.is_empty


# ---- rebuild-cq / rebuild-index on DLedger data -------------------------------------------------


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_rebuild_cq_is_byte_identical(tmp_path, version):
    import shutil

    from conftest import copy_store

    from mqtool.apply import apply_plan
    from mqtool.recovery.planners import plan_rebuild_cq
    from repair_support import fixture_config, tree

    store_dir = copy_store(version, "dledger-small", tmp_path)
    original = {k: v for k, v in tree(store_dir).items() if k.startswith("consumequeue/")}
    shutil.rmtree(store_dir / "consumequeue")
    with Store.open(store_dir, fixture_config(manifest(version, "dledger-small"))) as store:  # the CQ file size the broker used
        plan = plan_rebuild_cq(store)
    apply_plan(plan, tmp_path / "backup")
    assert plan.dispatch[0].cq_records == sum(m["dispatchToConsumeQueue"] for m in manifest(version, "dledger-small")["messages"])
    assert {k: v for k, v in tree(store_dir).items() if k.startswith("consumequeue/")} == original


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_rebuild_cq_goes_on_past_a_damaged_record_dledger_keeps(tmp_path, version):
    """DLedger's recovery keeps an entry whose record alone is damaged, and the log after it
    (``dledgerstart.walk_resume``): every consume queue rebuilt, those without the lost message
    equal the broker's byte for byte; its own queue holds every other message in order."""
    import shutil

    from conftest import copy_store

    from mqtool.apply import apply_plan
    from mqtool.recovery.planners import plan_rebuild_cq
    from repair_support import fixture_config, tree

    m = manifest(version, "dledger-small")
    store_dir = copy_store(version, "dledger-small", tmp_path)
    victim = m["messages"][300]
    e = victim["dledgerEntry"]
    _patch(store_dir / "dledger-n0" / e["file"], e["filePosition"] + 48, (e["bodySize"] + 1).to_bytes(4, "big"))
    lost_queue = f"consumequeue/{victim['topic']}/{victim['queueId']}/"
    original = {k: v for k, v in tree(store_dir).items() if k.startswith("consumequeue/") and not k.startswith(lost_queue)}
    shutil.rmtree(store_dir / "consumequeue")
    with Store.open(store_dir, fixture_config(m)) as store:
        plan = plan_rebuild_cq(store)
    apply_plan(plan, tmp_path / "backup")
    assert plan.dispatch[0].stop == m["dledger"]["endPos"]
    assert plan.dispatch[0].cq_records == sum(x["dispatchToConsumeQueue"] for x in m["messages"]) - 1
    assert {k: v for k, v in tree(store_dir).items() if k.startswith("consumequeue/") and not k.startswith(lost_queue)} == original
    with Store.open(store_dir) as store:
        queue = store.consume_queue(victim["topic"], victim["queueId"])
        kept = [x["commitLogOffset"] for x in m["messages"] if (x["topic"], x["queueId"]) == (victim["topic"], victim["queueId"]) and x is not victim]
        assert [entry.phys_offset for entry in queue.entries()] == kept


@pytest.mark.parametrize("version,name", [("4.9.7", "dledger-crashed"), ("5.3.3", "dledger-crashed-cqloss")])
def test_rebuild_index_answers_every_key_of_the_manifest(tmp_path, version, name):
    """Where the broker's recovery loses lookups (4.9.7 drops the index; 5.3.3 is fine but the
    manifest is the ground truth), rebuild-index answers every key with the message's offset."""
    from conftest import copy_store

    from mqtool.apply import apply_plan
    from mqtool.recovery.planners import plan_rebuild_index
    from repair_support import broker_query

    m = manifest(version, name)
    store_dir = copy_store(version, name, tmp_path)
    with Store.open(store_dir) as store:
        plan = plan_rebuild_index(store)
    apply_plan(plan, tmp_path / "backup")
    end = m["dledger"]["endPos"]
    with Store.open(store_dir) as store:
        for msg in m["messages"]:
            if not msg["indexed"]:
                continue
            for key in msg["keys"] + ([msg["uniqKey"]] if msg["uniqKey"] else []):
                assert msg["commitLogOffset"] in broker_query(store, msg["topic"], key, end), (msg["seq"], key)


# ---- the CLI: dump dledger, dump, info ----------------------------------------------------------


def _cli(*args):
    from typer.testing import CliRunner

    from mqtool.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("version,name", STORES)
def test_dump_dledger_rows_equal_the_manifest(version, name):
    import json

    m = manifest(version, name)
    result = _cli("dump", "dledger", store_path(version, name), "--format", "jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    entries = [r for r in rows if r["magic"] != dfmt.BLANK_MAGIC]
    blanks = [r for r in rows if r["magic"] == dfmt.BLANK_MAGIC]
    assert [(b["offset"], b["size"]) for b in blanks] == [(b["offset"], b["sizeField"]) for b in m["dledger"]["blanks"]]
    assert len(entries) == len(m["messages"])
    for row, msg in zip(entries, m["messages"]):
        e = msg["dledgerEntry"]
        assert {f: row[f] for f in HEADER_FIELDS} == {f: e[k] for f, k in HEADER_FIELDS.items()}
        assert (row["file"], row["offset"]) == (e["file"].split("/")[-1], e["pos"])
        assert (row["record_offset"], row["topic"], row["queue_id"], row["queue_offset"], row["msg_id"]) == (msg["commitLogOffset"], msg["topic"], msg["queueId"], msg["queueOffset"], msg["msgId"])
        assert row["index_unit"] == "ok"


def test_dump_dledger_of_one_data_file_from_an_offset_and_bad_paths(tmp_path):
    import json

    m = manifest("5.3.3", "dledger-small")
    second = [msg["dledgerEntry"] for msg in m["messages"] if msg["dledgerEntry"]["file"].endswith("00000000000001048576")]
    path = store_path("5.3.3", "dledger-small") / "dledger-n0" / "data" / "00000000000001048576"
    result = _cli("dump", "dledger", path, "--format", "jsonl", "--from-offset", second[10]["pos"] - 1, "--limit", 3)
    assert [json.loads(line)["index"] for line in result.stdout.splitlines()] == [e["index"] for e in second[10:13]]
    result = _cli("dump", "dledger", store_path("5.3.3", "clean-small"))
    assert result.exit_code == 3 and result.stderr.startswith("mqtool: error: ") and "no DLedger data" in result.stderr


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_dump_and_info_read_the_messages_at_the_broker_offsets(version):
    import json

    m = manifest(version, "dledger-small")
    result = _cli("dump", store_path(version, "dledger-small"), "--format", "jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(r["offset"], r["msg_id"], r["queue_offset"]) for r in rows] == [(x["commitLogOffset"], x["msgId"], x["queueOffset"]) for x in m["messages"]]
    msg = m["messages"][123]
    result = _cli("dump", store_path(version, "dledger-small"), "--msg-id", msg["msgId"], "--format", "jsonl")
    assert json.loads(result.stdout)["offset"] == msg["commitLogOffset"]
    result = _cli("info", store_path(version, "dledger-small"), "--format", "json")
    doc = json.loads(result.stdout)
    d = m["dledger"]
    assert doc["commitlog"]["max_offset"] == d["endPos"]
    assert doc["dledger"]["entries"] == d["entryCount"] and doc["dledger"]["last_index"] == d["lastIndex"]
    assert doc["dledger"]["committed_index"] == int(d["checkpoint"]["parsed"]["committedIndex"])
    assert doc["dledger"]["index_units"] == d["indexEntryCount"]
    committed = int(d["checkpoint"]["parsed"]["committedIndex"])
    assert doc["dledger"]["committed_pos"] == m["messages"][committed]["dledgerEntry"]["pos"] + m["messages"][committed]["dledgerEntry"]["size"]


# ---- verify --------------------------------------------------------------------------------------


def _verify(path, *args):
    import json

    result = _cli("verify", path, "--format", "jsonl", "--no-progress", *args)
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert lines and "summary" in lines[-1], result.output
    return result.exit_code, lines[:-1], lines[-1]["summary"]


def _patch(path, position: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[position : position + len(data)] = data
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_verify_is_clean_on_the_small_stores(version):
    m = manifest(version, "dledger-small")
    code, findings, summary = _verify(store_path(version, "dledger-small"))
    assert code == 0 and findings == [] and summary["sound"]
    assert summary["commitlog"]["records"] == len(m["messages"]) and summary["commitlog"]["logical_end"] == m["dledger"]["endPos"]
    assert summary["consume_queues"]["entries"] == sum(x["dispatchToConsumeQueue"] for x in m["messages"])


def test_verify_names_each_damage_at_its_offset(tmp_path):
    from conftest import copy_store

    m = manifest("5.3.3", "dledger-small")
    store_dir = copy_store("5.3.3", "dledger-small", tmp_path)
    data = store_dir / "dledger-n0"
    body_victim = next(x for x in m["messages"][100:] if x["bodyLength"] > 0)
    e = body_victim["dledgerEntry"]
    with Store.open(store_dir) as store:
        body = store.commitlog.read_record(body_victim["commitLogOffset"]).body
    raw = (data / e["file"]).read_bytes()
    body_at = raw.index(body, e["filePosition"] + 48)
    _patch(data / e["file"], body_at, bytes([raw[body_at] ^ 0xFF]))
    unit_victim = m["messages"][50]["dledgerEntry"]
    _patch(data / "index" / "00000000000000000000", unit_victim["index"] * 32 + 12, (unit_victim["size"] + 1).to_bytes(4, "big"))
    head_victim = m["messages"][600]["dledgerEntry"]
    _patch(data / head_victim["file"], head_victim["filePosition"] + 16, (head_victim["term"] - 1).to_bytes(8, "big", signed=True))
    code, findings, summary = _verify(store_dir, "--only", "commitlog")
    by_kind = {}
    for f in findings:
        by_kind.setdefault(f["kind"], []).append(f)
    assert code == 1
    assert [f["offset"] for f in by_kind["crc-mismatch"]] == [body_victim["commitLogOffset"]]
    assert [f["details"]["index"] for f in by_kind["dledger-index"] if "index" in f["details"]] == [unit_victim["index"]]
    [entry] = by_kind["dledger-entry"]
    assert entry["offset"] == head_victim["pos"] and "term" in entry["message"]
    assert entry["details"]["entries_after"] == len(m["messages"]) - 601
    assert summary["commitlog"]["logical_end"] == head_victim["pos"] and summary["commitlog"]["records"] == 600


def test_verify_checkpoint_ahead_of_the_data(tmp_path):
    from conftest import copy_store

    m = manifest("4.9.7", "dledger-small")
    store_dir = copy_store("4.9.7", "dledger-small", tmp_path)
    last = m["dledger"]["lastIndex"]
    (store_dir / "dledger-n0" / "checkpoint").write_text(dfmt.encode_checkpoint_text(last + 5, last + 5))
    code, findings, _ = _verify(store_dir, "--only", "commitlog")
    kinds = [(f["kind"], f["severity"], f["expected"], f["found"]) for f in findings]
    assert ("dledger-checkpoint", "error", last, last + 5) in kinds and code == 1


@pytest.mark.parametrize("damage", ["record-size", "zeros-to-file-end"])
def test_a_damaged_record_in_a_sound_entry_is_kept_by_dledger_recovery_in_verify_and_the_plan(tmp_path, damage):
    """DLedgerMmapFileStore.recover checks entry headers only (reference §15.4): an entry whose
    record is damaged (its TOTALSIZE changed; or zeros from inside it to the file's end, damage
    seed 200380) is kept, and the data run on past it. verify names the lost message and holds
    index/ and checkpoint against DLedger's last entry; the recovery plan cuts where verify ends."""
    from conftest import copy_store

    from mqtool.recovery.planners import plan_recover

    m = manifest("5.3.3", "dledger-small")
    store_dir = copy_store("5.3.3", "dledger-small", tmp_path)
    data = store_dir / "dledger-n0"
    e = m["messages"][300 if damage == "record-size" else 311]["dledgerEntry"]
    if damage == "record-size":
        _patch(data / e["file"], e["filePosition"] + 48, (e["bodySize"] + 1).to_bytes(4, "big"))
        end, records, last = m["dledger"]["endPos"], len(m["messages"]) - 1, m["dledger"]["lastIndex"]
    else:
        _patch(data / e["file"], e["filePosition"] + 148, bytes(1048576 - e["filePosition"] - 148))
        end, records, last = e["pos"] + e["size"], 311, e["index"]
    code, findings, summary = _verify(store_dir, "--only", "commitlog")
    [lost] = [f for f in findings if f["kind"] == "dledger-record"]
    assert code == 1 and lost["offset"] == e["pos"] and lost["details"]["range_end"] == e["pos"] + e["size"]
    assert not [f for f in findings if f["kind"] == "dledger-entry"]
    assert summary["commitlog"]["records"] == records and summary["commitlog"]["logical_end"] == end
    gone = [(f["expected"], f["found"]) for f in findings if f["kind"] == "dledger-checkpoint" and f["severity"] == "error"]
    assert gone == ([] if damage == "record-size" else [(last, m["dledger"]["lastIndex"])])
    with Store.open(store_dir) as store:
        assert plan_recover(store).commitlog.valid_end == end


def test_the_cross_checks_read_on_past_a_damaged_record_dledger_keeps(tmp_path):
    """The consume queue and index checks walk the log the broker serves (``LogStream``): past a
    record DLedger's recovery keeps, the queues and index entries of the records after it are
    valid, not past the end; only those of the lost message are findings, all lost data."""
    from conftest import copy_store
    from damage_support import beyond_lost

    m = manifest("5.3.3", "dledger-small")
    store_dir = copy_store("5.3.3", "dledger-small", tmp_path)
    victim = m["messages"][300]
    e = victim["dledgerEntry"]
    _patch(store_dir / "dledger-n0" / e["file"], e["filePosition"] + 48, (e["bodySize"] + 1).to_bytes(4, "big"))
    code, findings, summary = _verify(store_dir)
    assert code == 1 and summary["consume_queues"]["entries"] == sum(x["dispatchToConsumeQueue"] for x in m["messages"])
    assert sorted((f["kind"], f["offset"]) for f in findings) == [
        ("cq-entry-dangling", victim["commitLogOffset"]), ("dledger-record", e["pos"]), ("index-entry-dangling", victim["commitLogOffset"])]
    assert beyond_lost(findings) == []  # repair's triage: all of it lost data


def test_a_dledger_store_without_data_files_recovers_as_the_broker_does(tmp_path):
    """Every data file deleted (damage seed 700060): DLedgerMmapFileStore.recover keeps nothing and
    DLedgerCommitLog recovers the classic commit log instead ("the first time to load mixed
    commitlog"), here an empty one; verify and the plan say so instead of failing."""
    from conftest import copy_store

    from mqtool.recovery.planners import plan_recover

    store_dir = copy_store("5.3.3", "dledger-small", tmp_path)
    for path in (store_dir / "dledger-n0" / "data").iterdir():
        path.unlink()
    code, findings, summary = _verify(store_dir)
    assert code == 1 and summary["commitlog"]["records"] == 0 and summary["commitlog"]["logical_end"] == 0
    assert {f["kind"] for f in findings} == {"cq-entry-beyond-end", "index-entry-beyond-end"}
    with Store.open(store_dir) as store:
        plan = plan_recover(store)
    assert plan.commitlog.valid_end == 0


def test_a_crashed_dledger_broker_without_data_files_recovers_the_classic_log_as_its_release_does(tmp_path):
    """Before: planned as the classic broker's recoverAbnormally (abort file present) for every release.
    4.5.0-5.1.4 ``DLedgerCommitLog.recover`` runs ``super.recoverNormally`` then ("No need the abnormal
    recover"): third-from-last segment, no dispatch; 5.2.0+ ``super.recoverAbnormally``."""
    from conftest import copy_store

    from mqtool.recovery.planners import plan_recover

    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    (store_dir / "dledger-n0" / "data").mkdir(parents=True)
    segments = sorted(int(p.name) for p in (store_dir / "commitlog").iterdir())
    for version, scan_from, dispatched in (("4.9.7", segments[max(0, len(segments) - 3)], False), ("5.1.4", segments[max(0, len(segments) - 3)], False), ("5.3.3", None, True)):
        with Store.open(store_dir, version=version) as store:
            assert store.is_dledger and store.abort_present
            plan = plan_recover(store)
        assert plan.mode == "abnormal" and ("recovery" in [p.name for p in plan.dispatch]) == dispatched, version
        if scan_from is not None:
            assert plan.commitlog.scan_from == scan_from, version


@pytest.mark.parametrize("version,scan_from", [("4.9.7", 2097152), ("5.3.3", 0)])
def test_a_dledger_broker_s_first_load_of_a_classic_log_has_one_next_start_in_every_command(tmp_path, version, scan_from):
    """A broker switched to DLedger whose first start crashed before it wrote an entry: the classic
    commit log, an empty DLedger data folder, the abort file. Before: `verify` crashed the process
    (a segmentation fault: it read each classic record's 48 bytes before as a DLedger entry header,
    before the file's start for the first) and `info` and `recover` ended in an internal error (the
    DLedger start file of no data file). Now all three say the same next start, as the plan does, the
    end-of-file blank DLedgerCommitLog writes after the recovery included."""
    import subprocess
    import sys

    from conftest import copy_store, recovered

    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    (store_dir / "dledger-n0" / "data").mkdir(parents=True)
    lines = []
    for command in (["verify", "--format", "jsonl", "--no-progress"], ["info", "--format", "json"], ["recover", "--format", "json"]):
        done = subprocess.run([sys.executable, "-m", "mqtool", command[0], str(store_dir), "--broker-version", version, *command[1:]],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode in (0, 1, 4) and "internal error" not in done.stderr, (command, done.returncode, done.stderr[-2000:])  # 4: a plan, not applied
        doc = json.loads(done.stdout.splitlines()[-1]) if command[0] == "verify" else json.loads(done.stdout)
        lines.append((doc.get("summary") or doc)["next_start"]["line"])
    end = recovered("4.9.7", "crashed-small")["commitLog"]["maxOffset"]  # DLedger's first load then writes its blank there
    assert len(set(lines)) == 1 and lines[0].endswith(f"recovery scanning from {scan_from}; then DLedger's first load writes an end-of-file blank at {end}"), lines


# ---- Spark splits over DLedger data ------------------------------------------------------------


@pytest.mark.parametrize("version,name", STORES)
def test_splits_cut_anywhere_read_exactly_the_records_of_the_sequential_scan(version, name):
    from mqtool.store.splits import Split, SplitResult, SplitScan, check_handoffs, plan_splits

    m = manifest(version, name)
    expected = [x["commitLogOffset"] for x in m["messages"]]
    with Store.open(store_path(version, name)) as store:
        segments = store.commitlog.segments
        assert all(s.entries for s in segments)
        cuts_by_segment = {}
        for seg in segments:
            offsets = [x for x in expected if seg.base_offset <= x < seg.end_offset]
            cuts = set()
            for o in offsets[::5]:
                p = o - seg.base_offset
                cuts.update({p - 48, p - 47, p - 44, p, p + 7, p + 100})  # on an entry, inside its header, inside the record
            cuts.update({seg.size // 2, seg.size - 300})
            cuts_by_segment[seg] = sorted(c for c in cuts if 0 < c < seg.size)
        for size in (None, 100_000):
            splits = plan_splits(segments, size) if size else [
                Split(str(seg.path), seg.base_offset, seg.size, a, b, True)
                for seg, cuts in cuts_by_segment.items()
                for a, b in zip([0, *cuts], [*cuts, seg.size])
            ]
            read, results = {}, []
            for sp in splits:
                scan = SplitScan(sp, batch=64)
                read[sp.offset] = [b.base_offset + int(r) for b in scan for r in b.rows[:, 0]]
                results.append(SplitResult(sp.base_offset, sp.base_offset, sp.offset, scan.first, scan.exit))
            assert check_handoffs(results) == []
            assert [o for sp in splits for o in read[sp.offset]] == expected


def damaged_entries(tmp_path, damage: str, file: int = 1, index: str | None = None):
    """``relaid_store`` with entries in the middle of data file ``file`` damaged: an entry whose header alone is broken
    (``header``: its pos; the broker serves the record inside), the records of two adjacent entries (``records``: TOTALSIZE),
    the first's record and the second's header (``record-header``), or none (``none``); its ``index/`` stale when ``index``
    says so: ``last-byte`` (every unit's pos on its entry's last byte: no entry starts there) or ``past`` (the units from
    the first damaged entry on placing it past the data, a cut: DLedger's recovery starts its walk from an earlier file).
    ``(root, (previous, first, following, after))``: the entry positions around the damage."""
    root, placed = relaid_store(tmp_path, "4.9.7")
    here = [p for _, p in placed if file << 18 <= p < (file + 1) << 18]
    points = here[len(here) // 2 - 1 : len(here) // 2 + 3]
    previous, first, following, after = points
    for p, field in {"header": [(first, "pos")], "records": [(first, "size"), (following, "size")], "none": [],
                     "record-header": [(first, "size"), (following, "pos")]}[damage]:
        value = (p + 1).to_bytes(8, "big") if field == "pos" else (0x7FFF).to_bytes(4, "big")  # entry pos, record TOTALSIZE
        _patch(root / "dledger-n0" / "data" / f"{file << 18:020d}", p - (file << 18) + (24 if field == "pos" else 48), value)
    path = root / "dledger-n0" / "index" / f"{0:020d}"
    units = bytearray(path.read_bytes())
    for number in range(len(units) // 32):
        unit = units[number * 32 : number * 32 + 32]
        pos, size = int.from_bytes(unit[4:12], "big"), int.from_bytes(unit[12:16], "big")
        if unit[:4] == b"\0\0\0\1" and (index == "last-byte" or (index == "past" and pos >= first)):
            units[number * 32 + 4 : number * 32 + 12] = (pos + size - 1 if index == "last-byte" else (64 << 20) + pos).to_bytes(8, "big")
    path.write_bytes(bytes(units))
    return root, tuple(points)


def _splits_read_what_dump_reads(root, cuts_at, *, with_next=None) -> None:
    """The splits of ``root``'s data files, with the data file holding ``cuts_at[0]`` cut at each of ``cuts_at`` (and also at
    ``with_next`` after it), read the records `mqtool dump` reads, each once, and report the ranges it reports, as the
    Spark job keeps them (``check_splits``: the rows of the splits it rejects dropped, a split's ranges read past only where
    it read a record, as its rows carry them)."""
    import re

    from mqtool.store.dledgerstart import ServedLog
    from mqtool.store.splits import Split, SplitResult, SplitScan, check_splits

    done = _cli("dump", root, "--format", "jsonl")
    expected = [json.loads(line)["offset"] for line in done.stdout.splitlines()]
    lines = [int(m) for m in re.findall(r"(?:skipped \[|stopped at offset )(\d+)", done.stderr)]
    with Store.open(root) as store:
        served, segments = ServedLog.of(store.commitlog), list(store.commitlog.segments)
    [seg] = [s for s in segments if s.base_offset <= cuts_at[0] < s.end_offset]
    for cut in cuts_at:
        for cuts in ([cut - seg.base_offset], [cut - seg.base_offset] + ([with_next - seg.base_offset] if with_next else [])):
            cuts = sorted(set(cuts))
            splits = [Split(str(s.path), s.base_offset, s.size, a, b, True, served=served)
                      for s in segments for a, b in zip([0, *(cuts if s is seg else [])], [*(cuts if s is seg else []), s.size])]
            read, results, skipped = {}, [], {}
            for sp in splits:
                scan = SplitScan(sp, batch=64)
                read[sp.offset] = [b.base_offset + int(r) for b in scan for r in b.rows[:, 0]]
                results.append(SplitResult(("b", sp.base_offset), sp.base_offset, sp.offset, scan.first, scan.exit))
                if scan.first is not None:  # as the job's rows carry them (``split_skipped``)
                    skipped[(("b", sp.base_offset), sp.offset)] = [(end.offset, resumed) for end, resumed in scan.skipped]
            found = []
            rejected = check_splits(results, {(("b", sp.base_offset), sp.offset): sp for sp in splits}, found, skipped)
            dropped = {r.start for r in rejected}
            assert sorted(o for start, offsets in read.items() if start not in dropped for o in offsets) == expected, cuts
            assert [d.end.offset for d in found] == lines, cuts


@pytest.mark.parametrize("damage", ["header", "records", "record-header"])
def test_splits_cut_anywhere_around_damage_a_dledger_broker_keeps_read_what_dump_reads(tmp_path, damage):
    """``damaged_entries`` in the second data file, before DLedger's recovery start file. Splits cut around them (at the
    first damaged entry, inside the entry before, inside its header, at its record, ...) read what `mqtool dump` reads,
    each record once, and report a range where dump reports one. Before, where the first damaged entry was the first of
    its split: no split read the record inside a broken header (the split's resynchronisation passes the header,
    ``find_split_start``, and the split before stops at its boundary); with ``records`` the split was dropped (its first
    record lay two ranges past where the split before ended, ``check_splits`` resumed one)."""
    root, (previous, first, following, after) = damaged_entries(tmp_path, damage)
    done = _cli("dump", root, "--format", "jsonl")
    assert done.stderr.count("skipped [") == len(damage.split("-")) + (damage == "records")
    cuts = (previous, previous + 24, first - 1, first, first + 7, first + 48, first + 100, following, following + 7, after - 1)
    _splits_read_what_dump_reads(root, cuts, with_next=first + 7)


@pytest.mark.parametrize("damage,file,index", [("none", 1, "last-byte"), ("records", 1, "last-byte"), ("record-header", 6, None),
                                               ("record-header", 1, "past")])
def test_splits_at_a_stale_index_or_a_cut_after_damage_read_what_dump_reads(tmp_path, damage, file, index):
    """A split whose resynchronisation skips bytes asks ``index/`` for its first entry (``SplitScan._damaged_first_entry``).
    Before, a stale unit (``last-byte``: its pos on the last byte of an entry) was taken for one: the split read on from
    there, found no entry and read nothing, and its records were missing from the output without a word. And where a
    damaged record ended the chain of the splits before it, followed by a broken header where DLedger's recovery cuts the log
    (``record-header`` in data file 6, which its walk reads, or in file 1 with ``past`` units, which start its walk at an
    earlier file), the split starting at the damaged entry read no record, so no row said it read past that record: the log
    was taken to go on to the next data file, the splits past the cut were kept (646 rows where dump prints 613) and one
    line said that range where dump says "skipped" and then "stopped" (``splits._read_past``)."""
    root, (previous, first, following, after) = damaged_entries(tmp_path, damage, file, index)
    _splits_read_what_dump_reads(root, (previous, previous + 24, first - 1, first, first + 3, first + 7, following + 7, after - 1),
                                 with_next=first + 7)


def test_spark_inputs_keep_dledger_segments():
    from mqtool.spark.inputs import broker_store, resolve_inputs

    m = manifest("5.3.3", "dledger-small")
    data = store_path("5.3.3", "dledger-small") / "dledger-n0" / "data"
    [b] = resolve_inputs([store_path("5.3.3", "dledger-small")])
    assert all(s.entries for s in b.segments)
    [b2] = resolve_inputs([data / "00000000000000000000", data / "00000000000001048576"], ["b"], broker_versions=["5.3.3"])
    with broker_store(b2) as store:
        assert [r.offset for r in store.commitlog.scan()] == [x["commitLogOffset"] for x in m["messages"]]


def mixed_store(tmp_path, version: str = "4.9.7", classic_store: str = "clean-small"):
    """§15.5: a broker switched to DLedger keeps commitlog/ (its last file closed by a blank,
    ``setRecoverPosition``) and DLedger data continues at the end of that file. Built from ``version``'s
    ``classic_store``'s commit log and dledger-small's entries moved to that offset: ``(root, divided, expected
    record offsets, dledger-small's manifest)``."""
    import shutil

    from mqtool.formats import commitlog as clfmt

    classic = manifest(version, classic_store)
    dl = manifest(version, "dledger-small")
    root = tmp_path / "mixed"
    shutil.copytree(store_path(version, classic_store) / "commitlog", root / "commitlog")
    files = sorted((root / "commitlog").iterdir())
    divided = int(files[-1].name) + files[-1].stat().st_size
    end = classic["commitLogMaxOffset"] - int(files[-1].name)
    _patch(files[-1], end, (files[-1].stat().st_size - end).to_bytes(4, "big") + (clfmt.BLANK_MAGIC & 0xFFFFFFFF).to_bytes(4, "big"))
    data = root / "dledger-n0" / "data"
    data.mkdir(parents=True)
    phys_at = clfmt.HEADER_LAYOUTS[(False, False)].offset_of("phys_offset")
    for src in sorted((store_path(version, "dledger-small") / "dledger-n0" / "data").iterdir()):
        raw = bytearray(src.read_bytes())
        for msg in dl["messages"]:
            e = msg["dledgerEntry"]
            if e["file"].endswith(src.name):
                p = e["filePosition"]
                raw[p + 24 : p + 32] = (e["pos"] + divided).to_bytes(8, "big")
                raw[p + 48 + phys_at : p + 48 + phys_at + 8] = (msg["commitLogOffset"] + divided).to_bytes(8, "big")
        (data / f"{int(src.name) + divided:020d}").write_bytes(bytes(raw))
    written = classic["messages"] + classic.get("timerDeliveries", [])  # a timer store's deliveries are records too
    expected = sorted(x["commitLogOffset"] for x in written) + [x["commitLogOffset"] + divided for x in dl["messages"]]
    return root, divided, expected, dl


def relaid_store(tmp_path, version: str, file_size: int = 1 << 18):
    """dledger-small with its entries laid into data files of ``file_size`` bytes, as DLedger lays them
    (``MmapFileList.preAppend``: an entry that does not fit ends its file with a blank, int -1 and the bytes
    left), each entry's pos, its record's PHYSICALOFFSET, its index unit and its consume queue unit moved
    with it, the broker's index files left out: more than 3 data files, so that some lie before the file
    DLedger's recovery starts from. ``(root, [(message, new entry pos)])``."""
    import shutil

    from mqtool.formats import commitlog as clfmt

    m = manifest(version, "dledger-small")
    root = tmp_path / "relaid"
    shutil.copytree(store_path(version, "dledger-small"), root)
    shutil.rmtree(root / "index")
    home = root / "dledger-n0"
    sources = {p.name: p.read_bytes() for p in (home / "data").iterdir()}
    for p in (home / "data").iterdir():
        p.unlink()
    phys_at = 28  # PHYSICALOFFSET in every record version (clfmt's header layouts)
    assert clfmt.HEADER_LAYOUTS[(False, False)].offset_of("phys_offset") == phys_at
    files, moved, units, pos = [bytearray(file_size)], {}, bytearray((home / "index" / f"{0:020d}").read_bytes()), 0
    placed = []
    for msg in m["messages"]:
        e = msg["dledgerEntry"]
        if pos + e["size"] > file_size:
            files[-1][pos : pos + 8] = (-1).to_bytes(4, "big", signed=True) + (file_size - pos).to_bytes(4, "big")
            files.append(bytearray(file_size))
            pos = 0
        new = (len(files) - 1) * file_size + pos
        raw = bytearray(sources[e["file"].rsplit("/", 1)[-1]][e["filePosition"] : e["filePosition"] + e["size"]])
        raw[24:32] = new.to_bytes(8, "big")
        raw[48 + phys_at : 48 + phys_at + 8] = (new + 48).to_bytes(8, "big")
        files[-1][pos : pos + e["size"]] = raw
        units[e["index"] * 32 + 4 : e["index"] * 32 + 12] = new.to_bytes(8, "big")
        moved[msg["commitLogOffset"]] = new + 48
        placed.append((msg, new))
        pos += e["size"]
    for i, data in enumerate(files):
        (home / "data" / f"{i * file_size:020d}").write_bytes(bytes(data))
    (home / "index" / f"{0:020d}").write_bytes(bytes(units))
    for path in (root / "consumequeue").glob("*/*/*"):
        cq = bytearray(path.read_bytes())
        for at in range(0, len(cq), 20):
            old = int.from_bytes(cq[at : at + 8], "big")
            if old in moved:
                cq[at : at + 8] = moved[old].to_bytes(8, "big")
        path.write_bytes(bytes(cq))
    return root, placed


def test_mixed_store_reads_the_classic_log_then_the_dledger_data(tmp_path):
    """§15.5: the classic commit log, then the DLedger data (``mixed_store``)."""
    root, divided, expected, dl = mixed_store(tmp_path)
    with Store.open(root) as store:
        assert store.is_dledger and store.commitlog.divided_offset == divided
        scan = store.commitlog.scan(check_crc=True)
        assert [r.offset for r in scan] == expected and scan.end.offset == dl["dledger"]["endPos"] + divided
        fast = FastScan(store.commitlog)
        assert [b.base_offset + int(r) for b in fast for r in b.rows[:, 0]] == expected
        assert store.commitlog.read_record(expected[-1]).phys_offset == expected[-1]


def test_after_the_brokers_recovery_verify_names_the_lost_entries_and_rebuild_cq_restores_them(tmp_path):
    """5.3.3 cqloss: ``recover`` leaves the store as the broker does; ``verify`` then reports
    exactly the acknowledged messages without a consume queue entry; ``rebuild-cq`` gives them back."""
    from conftest import recovered

    from mqtool.apply import apply_plan
    from mqtool.recovery.planners import plan_rebuild_cq

    rec = recovered("5.3.3", "dledger-crashed-cqloss")
    served = {e["cq"]["phyOffset"] for q in rec["queues"] for e in q["entries"]}
    lost = [x for x in manifest("5.3.3", "dledger-crashed-cqloss")["messages"] if x["dispatchToConsumeQueue"] and x["commitLogOffset"] not in served]
    store_dir, _ = _recover_copy(tmp_path, "5.3.3", "dledger-crashed-cqloss")
    code, findings, _ = _verify(store_dir, "--only", "cq")
    missing = [f for f in findings if f["kind"] == "cq-entry-missing"]
    assert code == 1 and sum(int(f["expected"].split()[0]) for f in missing) == len(lost)
    assert {(f["details"]["topic"], f["details"]["queue_id"]) for f in missing} == {(x["topic"], x["queueId"]) for x in lost}
    with Store.open(store_dir) as store:
        plan = plan_rebuild_cq(store)
    apply_plan(plan, tmp_path / "backup-rebuild")
    code, findings, summary = _verify(store_dir, "--only", "cq")
    assert code == 0 and findings == [] and summary["consume_queues"]["entries"] == len(served) + len(lost)


def _jsonl(*args):
    from typer.testing import CliRunner

    from mqtool.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code in (0, 1), result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_stats_survivors_and_salvage_read_the_messages_inside_the_entries(tmp_path, version):
    """The on-call commands on a DLedger store: each sees exactly the manifest's messages, at the
    broker's offsets (entry pos + 48)."""
    root, messages = store_path(version, "dledger-small"), manifest(version, "dledger-small")["messages"]
    per_queue = {}
    for m in messages:
        per_queue.setdefault((m["topic"], m["queueId"]), []).append(m)
    stats = {(r["topic"], r["queue_id"]): r for r in _jsonl("stats", root, "--format", "jsonl") if r["row"] == "queue"}
    assert set(stats) == set(per_queue)
    for key, ms in per_queue.items():
        times = [m["storeTimestamp"] for m in ms]
        assert (stats[key]["messages"], stats[key]["bytes"], stats[key]["first_store_timestamp"], stats[key]["last_store_timestamp"]) == (
            len(ms), sum(m["size"] for m in ms), min(times), max(times)), key

    salvaged = _jsonl("salvage", root, "--format", "jsonl")
    assert [(r["offset"], r["status"]) for r in salvaged] == [(m["commitLogOffset"], "live") for m in sorted(messages, key=lambda m: m["commitLogOffset"])]

    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(m["msgId"] for m in messages) + "\n")
    rows = {r["id"]: r for r in _jsonl("survivors", root, ids, "--by", "msg-id", "--format", "jsonl") if "id" in r}
    for m in messages:
        row = rows[m["msgId"]]
        assert (row["status"], row["offset"], row["consumable"]) == ("found" if m["dispatched"] else "found-not-consumable", m["commitLogOffset"], m["dispatched"]), m["seq"]


# ---- a DLedger broker's first load of a classic commit log: the end-of-file blank ----------------

SEGMENT = 1 << 20  # the fixtures' commit log file size
BLANK_MAGIC = bytes.fromhex("cbd43194")  # CommitLog.BLANK_MAGIC_CODE


def _first_load(version: str, name: str, tmp_path):
    """A classic fixture store given to a DLedger broker: its data folder, still empty."""
    from conftest import copy_store

    store_dir = copy_store(version, name, tmp_path)
    (store_dir / "dledger-n0" / "data").mkdir(parents=True)
    return store_dir


def _cli(*args):
    from typer.testing import CliRunner

    from mqtool.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def _recover_doc(store_dir, version) -> dict:
    done = _cli("recover", store_dir, "--broker-version", version, "--format", "json")
    assert done.exit_code in (0, 4), done.output[-2000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("version,name", [("4.9.7", "crashed-small"), ("5.3.3", "crashed-small"), ("4.9.7", "clean-small"), ("5.3.3", "clean-small")])
def test_a_dledger_broker_s_first_load_writes_a_blank_at_the_recovered_end_and_restore_takes_it_back(tmp_path, version, name):
    """DLedgerCommitLog, after the classic recovery of a store without DLedger data (``recover`` @4.5.1-5.1.4,
    ``setRecoverPosition`` @5.2.0-5.3.3; rules §8.4), writes at the last file's wrote position TOTALSIZE = the
    bytes left and the BLANK magic. Before: the plan stopped at the classic recovery and left that write to the
    broker. Now `recover` plans it at the end the real broker recovered, `--yes` writes those 8 bytes and
    nothing else of the file, the next plan finds the blank and plans nothing, and `restore` gives the store back.
    Then ``MmapFileList.getLastMappedFile(dividedCommitlogOffset)`` maps DLedger's first data file, all zeros, at the
    file's end; before, that too was left to the broker, and the next plan ended the log at the blank, not at that
    file, where the broker's next start (DLedger's recovery: ``getMaxOffset`` = the data's min offset) ends it."""
    from conftest import recovered
    from test_undo import snapshot

    store_dir = _first_load(version, name, tmp_path)
    end = recovered(version, name)["commitLog"]["maxOffset"] if name.startswith("crashed") else manifest(version, name)["commitLogMaxOffset"]
    base, position = end - end % SEGMENT, end % SEGMENT
    segment = store_dir / "commitlog" / f"{base:020d}"
    plan = _recover_doc(store_dir, version)
    assert [(a["op"], a["path"], a["start"], a["end"]) for a in plan["actions"] if a["path"] == f"commitlog/{base:020d}"] == [
        ("write-blank", f"commitlog/{base:020d}", position, SEGMENT)]
    assert plan["commitlog"]["valid_end"] == end and plan["next_start"]["blank_at"] == end
    assert plan["next_start"]["line"].endswith(f"then DLedger's first load writes an end-of-file blank at {end}")
    before, original = snapshot(store_dir), segment.read_bytes()
    assert original[position + 4 : position + 8] != BLANK_MAGIC

    done = _cli("recover", store_dir, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == 0, done.output[-2000:]
    written = (SEGMENT - position).to_bytes(4, "big") + BLANK_MAGIC
    assert segment.read_bytes() == original[:position] + written + original[position + 8 :]
    assert [p.name for p in (store_dir / "dledger-n0" / "data").iterdir()] == [f"{base + SEGMENT:020d}"]
    assert (store_dir / "dledger-n0" / "data" / f"{base + SEGMENT:020d}").read_bytes() == bytes(SEGMENT)
    again = _recover_doc(store_dir, version)
    assert again["actions"] == [] and again["commitlog"]["valid_end"] == base + SEGMENT and again["next_start"]["blank_at"] is None
    findings = [json.loads(line) for line in _cli("verify", store_dir, "--broker-version", version, "--format", "jsonl").stdout.splitlines()]
    assert "data-after-end" not in {f.get("kind") for f in findings}  # the blank is no data after the end

    done = _cli("restore", tmp_path / "backup", "--yes")
    assert done.exit_code == 0, done.output[-2000:]
    assert snapshot(store_dir) == before


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_a_first_load_whose_log_already_ends_with_a_blank_writes_nothing(tmp_path, version):
    """The int 4 bytes past the wrote position is the BLANK magic (a first load that wrote it and stopped
    before the first DLedger entry): ``needWriteMagicCode`` is false, so the broker writes nothing and
    neither the plan nor the next start of `info` and `verify` names a blank."""
    from mqtool.recovery.planners import plan_recover

    store_dir = _first_load(version, "clean-small", tmp_path)
    end = manifest(version, "clean-small")["commitLogMaxOffset"]
    segment = store_dir / "commitlog" / f"{end - end % SEGMENT:020d}"
    _patch(segment, end % SEGMENT, (SEGMENT - end % SEGMENT).to_bytes(4, "big") + BLANK_MAGIC)
    with Store.open(store_dir, version=version) as store:
        plan = plan_recover(store)
    assert [a for a in plan.actions if a.path.startswith("commitlog/")] == [] and plan.commitlog.valid_end == end  # 5.3.3: its checkpoint is written
    divided = end - end % SEGMENT + SEGMENT  # getLastMappedFile maps DLedger's first data file there all the same
    assert [(a.op, a.path, a.start, a.end) for a in plan.actions if a.path.startswith("dledger-n0/")] == [
        ("resize", f"dledger-n0/data/{divided:020d}", 0, SEGMENT)]
    for command in (["info", "--format", "json"], ["verify", "--format", "json"]):
        done = _cli(command[0], store_dir, "--broker-version", version, *command[1:])
        assert done.exit_code == 0, (command, done.output[-2000:])  # verify: sound, the blank is no data after the end
        doc = json.loads(done.stdout)
        ns = (doc.get("summary") or doc)["next_start"]
        assert ns["logical_end"] == end and ns["blank_at"] is None and "blank" not in ns["line"], command


@pytest.mark.parametrize("left", [0, 4])
def test_a_first_load_ending_fewer_than_8_bytes_before_the_file_s_end_is_refused(tmp_path, left):
    """A record ending ``left`` bytes before its file's end (the broker never writes one: it leaves room for
    a blank): DLedgerCommitLog reads two ints at the wrote position and throws BufferUnderflowException,
    ``DefaultMessageStore.load`` fails and the broker does not start. The plan is refused, and the next
    start of `info` says why."""
    from mqtool.errors import Refused
    from mqtool.formats import commitlog as clfmt
    from mqtool.recovery.planners import plan_recover

    store_dir = _first_load("4.9.7", "clean-small", tmp_path)
    m = manifest("4.9.7", "clean-small")
    last = max(m["messages"], key=lambda x: x["commitLogOffset"])
    end = m["commitLogMaxOffset"]
    segment = store_dir / "commitlog" / f"{end - end % SEGMENT:020d}"
    with Store.open(store_dir, version="4.9.7") as store:
        record = store.commitlog.read_record(last["commitLogOffset"])
    fixed = len(clfmt.encode_message(record._replace(body=b""), compute_crc=True))
    body = bytes(SEGMENT - left - end % SEGMENT - fixed)
    raw = clfmt.encode_message(record._replace(body=body, phys_offset=end, queue_offset=record.queue_offset + 1), compute_crc=True)
    assert end % SEGMENT + len(raw) == SEGMENT - left
    _patch(segment, end % SEGMENT, raw)
    with Store.open(store_dir, version="4.9.7") as store:
        with pytest.raises(Refused, match="BufferUnderflowException"):
            plan_recover(store)
    done = _cli("info", store_dir, "--broker-version", "4.9.7", "--format", "json")
    ns = json.loads(done.stdout)["next_start"]
    assert "BufferUnderflowException" in ns["reason"] and ns["logical_end"] == end - end % SEGMENT + SEGMENT - left and ns["blank_at"] is None


@pytest.mark.parametrize("version,name,stages", [("4.9.7", "crashed-small", ["01-recover", "02-rebuild-index"]), ("5.3.3", "crashed-small", ["01-recover"])])
def test_repair_of_a_first_load_rebuilds_the_index_from_the_classic_log_and_restore_takes_it_back(tmp_path, version, name, stages):
    """4.9.7's first load recovers the classic log normally (no re-dispatch) and drops the index file newer than
    the checkpoint (``IndexService.load`` after an abnormal exit), so `repair` rebuilds the index (the recovery's note
    said the records before its start segment lost their index entries: it re-indexes none). Before: the store
    without DLedger data opened with DLedger's 1 GiB data file size, which the rebuild's plan saved as the commit
    log's; the apply reopened the classic log with it, read no segment, wrote no index file ("index files written
    differ from the plan") and undid the repair. The broker sizes DLedger data files as ``mappedFileSizeCommitLog``."""
    from test_undo import snapshot

    from mqtool.recovery.planners import plan_rebuild_index

    store_dir = _first_load(version, name, tmp_path)
    plan = _recover_doc(store_dir, version)
    end = plan["commitlog"]["valid_end"]
    lost = [n for n in plan["notes"] if n.startswith("index entries of records")]
    assert lost == ([f"index entries of records in [0, {end}) are lost: their index file is deleted after the abnormal exit and this recovery "
                     "re-indexes none of them (messageIndexSafe or not); `mqtool rebuild-index` rebuilds them"] if version == "4.9.7" else []), lost
    before = snapshot(store_dir)
    done = _cli("repair", store_dir, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == 0 and "error" not in done.output, done.output[-2000:]
    assert sorted(p.name for p in (tmp_path / "backup").iterdir() if p.is_dir()) == stages
    done = _cli("verify", store_dir, "--broker-version", version, "--format", "json")
    doc = json.loads(done.stdout)
    assert done.exit_code == 0 and doc["summary"]["sound"] and doc["findings"] == [], doc["findings"][:3]
    assert doc["summary"]["index"]["entries"] > 0 and _recover_doc(store_dir, version)["actions"] == []  # the blank written, the index whole

    done = _cli("restore", tmp_path / "backup", "--yes")
    assert done.exit_code == 0, done.output[-2000:]
    assert snapshot(store_dir) == before
    with Store.open(store_dir, version=version) as store:  # what a saved plan is applied with
        assert store.is_dledger and store.commitlog.file_size == SEGMENT
        assert plan_rebuild_index(store).options["commitlog_file_size"] == SEGMENT


def test_a_recovery_dispatch_ended_by_a_bad_crc_is_applied_alike_from_a_saved_plan(tmp_path):
    """5.3.3 ``dledger-crashed`` with a body bit flipped in its last data file (DLedger's entry walk keeps
    it, the recovery's dispatch stops at its CRC) and three units of a queue zeroed. Before: the plan's
    recovery phase said it dispatched up to the entry walk's end, so an apply without the planning's
    batches (``apply PLAN``, or the same command again after a kill) walked past the bad record and wrote
    4 more entries than planned: "the interrupted apply cannot be finished" (exit 5). The phase now ends
    where its dispatch did: both applies write the same bytes."""
    from conftest import copy_store

    from mqtool.apply import apply_plan
    from mqtool.dispatch.scanner import DispatchCache
    from mqtool.recovery.planners import plan_recover
    from mqtool.recovery.plans import Plan
    from repair_support import tree

    stores = []
    for name in ("planned", "saved"):
        store_dir = copy_store("5.3.3", "dledger-crashed", tmp_path / name)
        data = sorted((store_dir / "dledger-n0" / "data").iterdir())[-1]
        raw = bytearray(data.read_bytes())
        raw[300000] ^= 0x10
        data.write_bytes(bytes(raw))
        queue = store_dir / "consumequeue" / "TopicTest" / "1" / "00000000000000000000"
        raw = bytearray(queue.read_bytes())
        raw[100:160] = bytes(60)
        queue.write_bytes(bytes(raw))
        stores.append(store_dir)
    cache = DispatchCache()
    with Store.open(stores[0], None, "5.3.3") as store:
        plan = plan_recover(store, cache=cache)
    apply_plan(plan, tmp_path / "b0", cache=cache)
    with Store.open(stores[1], None, "5.3.3") as store:
        saved = Plan.from_json(plan_recover(store).to_json())
    apply_plan(saved, tmp_path / "b1")
    assert tree(stores[0]) == tree(stores[1])
    recovery = plan.dispatch[0]
    assert recovery.name == "recovery" and recovery.stop < plan.commitlog.valid_end  # ended by the CRC, inside the log


# ---- a record whose dispatch throws, on DLedger stores ----------------------------------------


def _append_throwing_entry(root, committed: bool = True):
    """Append to a DLedger store one entry whose record (the last TopicTest record re-encoded at the next queue offset)
    lists ``%LMQ%a,%LMQ%b`` at ``0,1x``: with multi-dispatch on, ``Long.parseLong("1x")`` throws in its dispatch
    (``formats.dispatch.LmqOffsetThrows``). Its index unit and DLedger's checkpoint are written as DLedger writes
    them (``committed``: its index, else DLedger's checkpoint left). Returns the record as read back."""
    from mqtool.formats import commitlog as clfmt
    from mqtool.formats.properties import encode_properties

    with Store.open(root) as store:
        cl = store.commitlog
        last = list(cl.entries())[-1]
        base = [r for r in cl.scan() if r.topic_name == "TopicTest"][-1]
        data = next(s for s in reversed(cl.segments) if s.base_offset <= last.offset).path
        index_file = cl.layout.index_files()[0][1]
        checkpoint = cl.layout.home / "checkpoint"
        data_base = int(data.name)
    pos = last.offset + last.size
    props = {**base.property_map(), "INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "0,1x"}
    raw = clfmt.encode_message({**base._asdict(), "phys_offset": pos + dfmt.ENTRY_HEADER_SIZE, "queue_offset": base.queue_offset + 1,
                                "properties": encode_properties(props, trailing_separator=base.properties.endswith(b"\x02"))})
    size = dfmt.ENTRY_HEADER_SIZE + len(raw)
    _patch(data, pos - data_base, dfmt.ENTRY_HEADER.pack(dfmt.ENTRY_MAGIC, size, last.index + 1, last.term, pos, 0, 0, 0, len(raw)) + raw)
    unit = dfmt.encode_index_unit(dfmt.ENTRY_MAGIC, pos, size, last.index + 1, last.term)
    _patch(index_file, (last.index + 1) * dfmt.INDEX_UNIT_SIZE, unit)
    if committed:
        checkpoint.write_text(dfmt.encode_checkpoint_text(last.index + 1, last.index + 1))
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
    assert record.offset == pos + dfmt.ENTRY_HEADER_SIZE and record.property_map()["INNER_MULTI_QUEUE_OFFSET"] == "0,1x"
    return record


def _throwing(record) -> str:
    """``NextStart.stall``'s words for the record ``_append_throwing_entry`` appends, before its effect."""
    return f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x', which Long.parseLong refuses"


REPUT_STALL = "its start-up reput dispatches it and retries it forever: the broker's start never completes"
LOAD_STALL = "abnormal recovery dispatches it, and the load fails: the broker refuses to start"
LATER_STALL = ("DLedger commits it after the start, then the reput dispatches it and retries it forever: the broker starts "
               "but dispatches nothing after it")


@pytest.mark.parametrize("version,name,committed,effect", [
    ("4.9.7", "dledger-small", True, REPUT_STALL), ("4.9.7", "dledger-crashed", True, REPUT_STALL),
    ("5.3.3", "dledger-small", True, None), ("5.3.3", "dledger-crashed", True, LOAD_STALL),
    ("4.9.7", "dledger-small", False, LATER_STALL), ("5.3.3", "dledger-small", False, LATER_STALL),
], ids=["4.9.7-small", "4.9.7-crashed", "5.3.3-small", "5.3.3-crashed", "4.9.7-uncommitted", "5.3.3-uncommitted"])
def test_a_dispatch_that_throws_stops_the_next_start_by_dledgers_redispatch_rule(tmp_path, version, name, committed, effect):
    """A DLedger store's recovery dispatches nothing but in 5.2.0+'s abnormal one (``dledgerRecoverAbnormally``; 4.5.0-5.1.4
    ``recover`` runs after a crash too, rules §8.4), then ``DefaultMessageStore.start`` re-puts from the consume queues' max
    offset (4.5.0-4.9.8, and waits) or from DLedger's committed position (5.x: nothing before it). On copies of the real
    brokers' DLedger stores with a committed entry appended whose LMQ dispatch throws (``_append_throwing_entry``, multi-
    dispatch on): 4.9.7 crashed or not, the start-up reput retries it forever; 5.3.3 after a crash, the load fails; 5.3.3
    after a clean stop, no start dispatches it. Not committed in DLedger's checkpoint, the record is past the commit log's
    max offset after the load, where ``start()`` stops waiting for the reput and 5.x's reput starts: the reput meets it
    after the start, once DLedger commits it. Before: verify applied the classic rule (4.9.7 crashed: "abnormal recovery
    dispatches it"; 5.3.3 clean: "normal recovery dispatches it", where recover plans on) and info never said it."""
    from conftest import copy_store

    root = copy_store(version, name, tmp_path)
    record = _append_throwing_entry(root, committed)
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=true\n")
    given = ("--broker-config", conf, "--broker-version", version)
    verified = _cli("verify", root, "-f", "json", *given)
    doc = json.loads(verified.stdout)
    throws = [f for f in doc["findings"] if f["kind"] == "dispatch-throws"]
    assert [f["offset"] for f in throws] == [record.offset]
    assert throws[0]["message"].endswith(f"at its next start {effect or 'nothing dispatches it'}")
    info = _cli("info", root, "-f", "json", *given)
    assert info.exit_code == 0, info.output
    stall = None if effect is None else f"{_throwing(record)}: {effect}"
    line = doc["summary"]["next_start"]["line"]
    assert doc["summary"]["next_start"]["stall"] == json.loads(info.stdout)["next_start"]["stall"] == stall
    assert line == json.loads(info.stdout)["next_start"]["line"] and line.endswith(f"; but {stall}" if stall else "")
    assert _cli("recover", root, "--dry-run", *given).exit_code == (4 if stall else 0)  # planners refuse what the broker never gets past


@pytest.mark.parametrize("version,effect", [("4.9.7", REPUT_STALL), ("5.3.3", LOAD_STALL)], ids=["4.9.7", "5.3.3"])
def test_a_dispatch_that_throws_on_a_dledger_broker_s_first_load_stops_the_start_by_its_recovery_mode(tmp_path, version, effect):
    """A crashed classic store given to a DLedger broker (an empty DLedger data folder) with a record appended whose LMQ
    dispatch throws: 4.5.0-5.1.4 ``DLedgerCommitLog.recover`` recovers the classic log with ``super.recoverNormally``, abort
    file or not, which dispatches nothing, and the start-up reput then retries the record forever; 5.2.0+ runs
    ``super.recoverAbnormally``, whose dispatch fails the load. Before: "abnormal recovery dispatches it" for every release."""
    from conftest import copy_store
    from test_lmq import THREE, _append_multi_dispatched

    root = copy_store("4.9.7", "crashed-small", tmp_path)
    _append_multi_dispatched(root, "TopicTest", confirm=False, queue=THREE, offsets="0,1x,2")
    (root / "dledger-n0" / "data").mkdir(parents=True)
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=true\n")
    given = ("--broker-config", conf, "--broker-version", version)
    stall = f"{_throwing(record)}: {effect}"
    doc = json.loads(_cli("verify", root, "-f", "json", *given).stdout)
    info = _cli("info", root, "-f", "json", *given)
    assert doc["summary"]["next_start"]["stall"] == json.loads(info.stdout)["next_start"]["stall"] == stall
    assert _cli("recover", root, "--dry-run", *given).exit_code == 4


def test_verify_calls_queue_entries_a_crashed_4x_dledger_broker_never_re_dispatches_lost(tmp_path):
    """4.9.7 ``dledger-crashed`` without the directory of queue TopicTest/1: after a crash, 4.5.0-5.1.4 ``DLedgerCommitLog``
    recovers as after a clean stop, dispatching nothing, and the start-up reput resumes at the queues' max offset, past
    every record of that queue (rules §8.4, §2.11): as recover's plan, which rebuilds none of them. Before: a warning,
    "abnormal recovery re-dispatches every record from offset 0"."""
    import shutil

    from conftest import copy_store

    root = copy_store("4.9.7", "dledger-crashed", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicTest" / "1")
    code, findings, _ = _verify(root, "--broker-version", "4.9.7")
    missing = [f for f in findings if f["kind"] == "cq-entry-missing" and f["details"]["topic"] == "TopicTest"]
    assert [(f["severity"], f["details"]["queue_id"]) for f in missing] == [("error", 1)], missing
    assert "the reput service resumes at the consume queues' max offset" in missing[0]["message"]
    plan = _recover_doc(root, "4.9.7")
    assert not [q for q in plan["queues"] if (q["topic"], q["queue_id"]) == ("TopicTest", 1)]


def _rebuilt_entries(root) -> int:
    done = _cli("rebuild-cq", root, "--broker-version", "4.9.7", "--dry-run", "-f", "json")
    assert done.exit_code == 0, done.output[-2000:]
    return sum(q["added"] or 0 for q in json.loads(done.stdout)["queues"])


def test_damage_in_the_classic_log_of_a_mixed_store_is_kept_as_the_broker_keeps_it(tmp_path):
    """Once DLedger data exist, ``DLedgerCommitLog``'s recovery is DLedger's alone (``recover`` @4.5.1-4.9.7,
    ``dledgerRecoverNormally``/``Abnormally`` @5.3.3): the classic ``commitlog/`` of a mixed store (``mixed_store``) is
    loaded whole and never recovered, so a broken record there cuts nothing. Before: verify called it ``dledger-entry``
    ("DLedger's recovery stops here and truncates the data ..., discarding 700 well-formed entries"), stopped its walk
    there, and rebuild-cq rebuilt nothing after it. Now it is a ``damaged-range`` the broker keeps, the walk goes on to
    DLedger's end, and rebuild-cq rebuilds every entry but the broken record's. A body CRC there was "inside a DLedger entry"."""
    intact = _rebuilt_entries(mixed_store(tmp_path / "intact")[0])
    root, divided, expected, dl = mixed_store(tmp_path / "broken")
    classic = sorted(manifest("4.9.7", "clean-small")["messages"], key=lambda x: x["commitLogOffset"])
    broken = classic[len(classic) // 2]
    segment = max((p for p in (root / "commitlog").iterdir() if int(p.name) <= broken["commitLogOffset"]), key=lambda p: int(p.name))
    _patch(segment, broken["commitLogOffset"] - int(segment.name) + 4, bytes(4))  # its magic code
    flipped = classic[10]  # and a body byte of an earlier record: a CRC no recovery checks there
    with Store.open(root) as store:
        record = store.commitlog.read_record(flipped["commitLogOffset"])
    body_at = record.total_size - 2 - len(record.properties) - 1 - len(record.topic) - len(record.body)
    segment = max((p for p in (root / "commitlog").iterdir() if int(p.name) <= flipped["commitLogOffset"]), key=lambda p: int(p.name))
    _patch(segment, flipped["commitLogOffset"] - int(segment.name) + body_at, bytes([record.body[0] ^ 0xFF]))
    end = dl["dledger"]["endPos"] + divided
    code, findings, summary = _verify(root, "--broker-version", "4.9.7")
    log = [f for f in findings if f["kind"] in ("dledger-entry", "dledger-record", "damaged-range", "crc-mismatch")]
    assert [(f["kind"], f["offset"], f["details"].get("range_end")) for f in log] == [
        ("crc-mismatch", flipped["commitLogOffset"], None),
        ("damaged-range", broken["commitLogOffset"], broken["commitLogOffset"] + broken["size"])], log
    assert "in the classic commit log before the DLedger data (no recovery reads it" in log[0]["message"]
    assert "never recovers the classic commit log" in log[1]["message"]
    assert "keeps the log and serves the records around it" in log[1]["message"]
    assert (summary["commitlog"]["records"], summary["commitlog"]["logical_end"]) == (len(expected) - 1, end)
    assert summary["next_start"]["line"].startswith(f"the broker's next start keeps [0, {end}) and drops nothing")
    assert _rebuilt_entries(root) == intact - 1  # the CRC is not checked by a rebuild's dispatch either


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_the_abort_finding_of_a_dledger_store_says_the_recovery_its_release_runs(tmp_path, version):
    """The real brokers' crashed DLedger stores: 4.5.0-5.1.4 ``DLedgerCommitLog.recover`` runs after a crash as after a clean
    stop and re-dispatches nothing; 5.2.0+ ``dledgerRecoverAbnormally`` re-dispatches from the data file its checkpoint rule
    picks, where recover's plan scans from (rules §8.4). Before: "abnormal recovery ... from offset 0 (from the first
    segment), re-dispatching every record after it" for both."""
    from conftest import copy_store

    from mqtool.store.rules import BrokerVersion, VersionRules

    root = copy_store(version, "dledger-crashed", tmp_path)  # planned on a copy: a shared fixture may be another worker's
    code, findings, _ = _verify(root, "--broker-version", version)
    [abort] = [f for f in findings if f["kind"] == "abort-present"]
    plan = _recover_doc(root, version)
    scan, rule = f"from offset {plan['commitlog']['scan_from']}", plan["commitlog"]["scan_rule"]
    if VersionRules(BrokerVersion.parse(version)).dledger_abnormal_redispatch:
        assert f"runs abnormal recovery (recoverAbnormally) {scan} ({rule}), re-dispatching every" in abort["message"]
    else:
        assert f"runs DLedgerCommitLog's recovery as after a clean stop ({scan}: {rule}), re-dispatching nothing" in abort["message"]
    assert abort["details"]["recovery_start_offset"] == plan["commitlog"]["scan_from"]
    # the index files the start deletes: rebuilt for what that recovery re-dispatches (before: abnormal recovery's words for both)
    dropped = [f["message"] for f in findings if f["kind"] == "index-file-dropped"]
    rebuilt = ("rebuilds entries only for the records its abnormal recovery re-dispatches" if VersionRules(BrokerVersion.parse(version)).dledger_abnormal_redispatch
               else "rebuilds none: its recovery re-dispatches no record (DLedgerCommitLog before 5.2.0)")
    assert dropped and all(m.endswith(rebuilt) for m in dropped), dropped


def _flip_body_byte(root, offset: int) -> None:
    """A body byte of the record at ``offset`` flipped: its body CRC fails, nothing else."""
    with Store.open(root) as store:
        record = store.commitlog.read_record(offset)
        index = store.commitlog.segment_index(offset)
        segment = store.commitlog.segments[index]
    body_at = record.total_size - 2 - len(record.properties) - 1 - len(record.topic) - len(record.body)
    _patch(segment.path, offset - segment.base_offset + body_at, bytes([record.body[0] ^ 0xFF]))


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_salvage_reads_on_past_damage_dledger_s_recovery_keeps(tmp_path, version):
    """A body CRC failing inside a DLedger entry (DLedger's recovery checks entry headers only, so the broker keeps the entry
    and everything after it), and a broken record in the classic log of a mixed store (never recovered): salvage lists
    every other message as live and names the record it skips. Before: it stopped at the damage and read on with the
    classic resynchronisation, which finds no record in DLedger data: 102 of dledger-small's 700 messages, "546 message(s)
    the consume queues point into it are lost"."""
    from conftest import copy_store

    messages = manifest(version, "dledger-small")["messages"]
    root = copy_store(version, "dledger-small", tmp_path)
    flipped = messages[len(messages) // 7]
    _flip_body_byte(root, flipped["commitLogOffset"])
    done = _cli("salvage", root, "--format", "jsonl")
    assert [(json.loads(line)["offset"], json.loads(line)["status"]) for line in done.stdout.splitlines()] == [
        (m["commitLogOffset"], "live") for m in messages if m is not flipped]
    assert f"skipped the record at {flipped['commitLogOffset']} ({flipped['size']} bytes): its body CRC does not match" in done.stderr

    mixed, divided, expected, _ = mixed_store(tmp_path / "mixed")
    broken = expected[len(expected) // 4]
    with Store.open(mixed) as store:
        size = store.commitlog.read_record(broken).total_size
        segment = store.commitlog.segments[store.commitlog.segment_index(broken)]
    _patch(segment.path, broken - segment.base_offset + 4, bytes(4))  # its magic code
    done = _cli("salvage", mixed, "--broker-version", "4.9.7", "--format", "jsonl")
    assert [(json.loads(line)["offset"], json.loads(line)["status"]) for line in done.stdout.splitlines()] == [
        (o, "live") for o in expected if o != broken]
    assert f"no valid record in [{broken}, {broken + size}); valid records resume after it" in " ".join(done.stderr.split())


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_salvage_reads_the_dledger_entries_after_the_cut(tmp_path, version):
    """An entry of dledger-small with its magic broken: DLedger's recovery truncates the data there (§15.4). salvage lists
    the messages before it as live and every one after it, the broken entry's intact record included (``resume_after``
    without ``entries``), as past-damage, with a body CRC failing among them skipped. Before: past the cut it looked for
    classic records, which DLedger data hold none of (48-byte headers between them): 1 of the 600 messages after it;
    then it skipped the broken entry's record whole ("no valid record in [pos, next entry)"). A second entry header broken
    further on (its pos): its 48 bytes are the range said unreadable; before, the range began a byte after them. A third
    entry's first 56 bytes zeroed (a page zeroed there): the entries after it are listed too, the whole entry said
    unreadable; before, the walk of the data file ended at those zeros as at the end of its data, and the 199 messages after
    them were left out without a word."""
    from conftest import copy_store

    messages = manifest(version, "dledger-small")["messages"]
    root = copy_store(version, "dledger-small", tmp_path)
    broken, flipped, second, zeroed = messages[100], messages[300], messages[400]["dledgerEntry"], messages[500]
    entry = broken["dledgerEntry"]
    _patch(root / "dledger-n0" / entry["file"], entry["filePosition"], (7).to_bytes(4, "big"))
    _patch(root / "dledger-n0" / second["file"], second["filePosition"] + 24, (second["pos"] + 1).to_bytes(8, "big"))
    _patch(root / "dledger-n0" / zeroed["dledgerEntry"]["file"], zeroed["dledgerEntry"]["filePosition"], bytes(56))
    _flip_body_byte(root, flipped["commitLogOffset"])
    done = _cli("salvage", root, "--format", "jsonl")
    assert [(json.loads(line)["offset"], json.loads(line)["status"]) for line in done.stdout.splitlines()] == [
        (m["commitLogOffset"], "live" if m["commitLogOffset"] < broken["commitLogOffset"] else "past-damage")
        for m in messages if m is not flipped and m is not zeroed]
    stderr = " ".join(done.stderr.split())
    assert f"no valid record in [{entry['pos']}, {broken['commitLogOffset']}); valid records resume after it" in stderr
    assert f"no valid record in [{second['pos']}, {second['pos'] + 48}); valid records resume after it" in stderr
    end = zeroed["dledgerEntry"]["pos"] + zeroed["dledgerEntry"]["size"]
    assert f"no valid record in [{zeroed['dledgerEntry']['pos']}, {end}); valid records resume after it" in stderr
    assert f"skipped the record at {flipped['commitLogOffset']} ({flipped['size']} bytes)" in stderr


def test_verify_on_a_mixed_store_says_the_reput_skips_the_rest_of_a_broken_classic_file(tmp_path):
    """§8.12, §15.5: no recovery cuts a mixed store's classic log (``mixed_store``, no consume queues), so 4.9.7's start-up
    reput from 0 meets its broken record and goes on at the next file (``doReput``, the model ``recover`` plans with): the
    records after it in that file get no entry. Before: verify said the broker rebuilds every missing entry, and recover's
    verify_after said none would remain."""
    root, divided, expected, dl = mixed_store(tmp_path)
    classic = sorted(manifest("4.9.7", "clean-small")["messages"], key=lambda x: x["commitLogOffset"])
    broken = classic[len(classic) // 2]
    segment = max((p for p in (root / "commitlog").iterdir() if int(p.name) <= broken["commitLogOffset"]), key=lambda p: int(p.name))
    resume = min([int(p.name) for p in (root / "commitlog").iterdir() if int(p.name) > int(segment.name)] + [divided])
    _patch(segment, broken["commitLogOffset"] - int(segment.name) + 4, bytes(4))  # its magic code
    code, findings, _ = _verify(root, "--broker-version", "4.9.7", "--only", "cq")
    missing = [f for f in findings if f["kind"] == "cq-entry-missing"]
    lost = [f for f in missing if not f["details"]["rebuilt_by_broker"]]
    skipped = [x for x in classic if broken["commitLogOffset"] < x["commitLogOffset"] < resume and x["dispatchToConsumeQueue"]]
    assert code == 1 and skipped and sum(f["details"]["records"] for f in lost) == len(skipped)
    assert all(f["severity"] == "error" and broken["commitLogOffset"] < f["offset"] <= f["details"]["last_offset"] < resume for f in lost)
    assert f"meets the unreadable record at {broken['commitLogOffset']} and goes on only at {resume}" in lost[0]["message"]
    rebuilt = [f for f in missing if f["details"]["rebuilt_by_broker"]]
    dispatched = [x for x in classic + dl["messages"] if x["dispatchToConsumeQueue"] and x is not broken]
    assert sum(f["details"]["records"] for f in missing) == len(dispatched)
    assert all(f["severity"] == "warning" for f in rebuilt) and len(rebuilt) + len(lost) == len(missing)
    from mqtool.recovery.planners import plan_recover
    from mqtool.recovery.repair import verify_after

    with Store.open(root, version="4.9.7") as store:
        plan = plan_recover(store)
        after = verify_after(store, plan)
    assert any(f"reput skips an unreadable record at {broken['commitLogOffset']}" in n for n in plan.notes)
    assert sorted(e.offset for e in after if e.kind == "cq-entry-missing") == sorted(f["offset"] for f in lost)


def test_without_a_committed_index_5x_reputs_from_dledgers_first_data_file(tmp_path):
    """5.x ``DefaultMessageStore.start`` re-puts from ``DLedgerCommitLog.getConfirmOffset`` = ``getMaxOffset``: DLedger's
    committed position, else (no committedIndex in its checkpoint: ``committedPos`` stays -1) the first data file's base,
    here 0 (``dledgerstart.reput_start``). Before: verify and recover modelled no reput at all, so verify called every
    missing entry lost ("resumes at DLedger's committed position None") and recover's plan rebuilt none of them."""
    import shutil

    from conftest import copy_store

    from mqtool.recovery.planners import plan_recover

    store_dir = copy_store("5.3.3", "dledger-small", tmp_path)
    shutil.rmtree(store_dir / "consumequeue")
    (store_dir / "dledger-n0" / "checkpoint").write_text("endIndex=699\n")
    dispatched = [x for x in manifest("5.3.3", "dledger-small")["messages"] if x["dispatchToConsumeQueue"]]
    code, findings, _ = _verify(store_dir, "--only", "cq")
    missing = [f for f in findings if f["kind"] == "cq-entry-missing"]
    assert sum(f["details"]["records"] for f in missing) == len(dispatched)
    assert all(f["severity"] == "warning" and f["details"]["rebuilt_by_broker"] for f in missing)
    assert "the reput service resumes at 0: DLedger's checkpoint gives no committed position" in missing[0]["message"]
    with Store.open(store_dir) as store:
        plan = plan_recover(store)
    reput = [p for p in plan.dispatch if p.name == "reput"]
    assert [(p.start, p.cq_records) for p in reput] == [(0, len(dispatched))]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
@pytest.mark.parametrize("damage", ["header", "entry"])
def test_past_a_broken_entry_before_dledger_s_start_file_the_walk_resumes_at_the_next_entry(tmp_path, version, damage):
    """dledger-small relaid in 256 KiB data files (``relaid_store``: 8 files; DLedgerMmapFileStore.recover starts at the
    third-from-last), an entry of the second file broken: its pos field alone (``header``), or its header and its record's
    first bytes zeroed (``entry``). DLedger's recovery never reads that file; the broker serves its records by their
    consume queue entries (``DLedgerCommitLog.getMessage``, no entry header on the way). So verify and salvage go on at the
    next entry, and a record whose entry header alone is broken is served too. Before: both went on at the next file, and verify said
    "the message in [pos, 524288) is lost": 41 more messages of that file were left out, and with the header alone
    broken the whole message inside was called lost (and its queue entry said to give "the wrong message")."""
    root, placed = relaid_store(tmp_path, version)
    second = [(msg, pos) for msg, pos in placed if 1 << 18 <= pos < 2 << 18]
    (victim, pos), (_, following) = second[len(second) // 2], second[len(second) // 2 + 1]
    data = root / "dledger-n0" / "data" / f"{1 << 18:020d}"
    if damage == "header":
        _patch(data, pos - (1 << 18) + 24, (pos + 1).to_bytes(8, "big"))
    else:
        _patch(data, pos - (1 << 18), bytes(56))
    code, findings, summary = _verify(root, "--only", "commitlog", "--only", "cq")
    served = [p + 48 for _, p in placed if damage == "header" or p != pos]
    end = placed[-1][1] + placed[-1][0]["dledgerEntry"]["size"]
    assert code == 1 and summary["commitlog"]["records"] == len(served) and summary["commitlog"]["logical_end"] == end
    found = findings[0]
    lost = [("cq-entry-dangling", pos + 48)] if damage == "entry" and victim["dispatchToConsumeQueue"] else []  # its bytes zeroed
    assert [(f["kind"], f["offset"]) for f in findings[1:]] == lost
    kind = "dledger-entry" if damage == "header" else "dledger-record"
    assert (found["kind"], found["offset"], found["details"]["range_end"]) == (kind, pos, following)
    assert ("is whole and a consumer reading it by its consume queue entry gets it" in found["message"]) is (damage == "header")
    done = _cli("salvage", root, "--format", "jsonl")
    assert [(json.loads(line)["offset"], json.loads(line)["status"]) for line in done.stdout.splitlines()] == [(o, "live") for o in served]
    gap_end = pos + 48 if damage == "header" else following
    assert f"no valid record in [{pos}, {gap_end}); valid records resume after it" in " ".join(done.stderr.split())
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(msg["uniqKey"] + "\n" for msg, _ in placed if msg.get("uniqKey")))
    summary = json.loads(_cli("survivors", root, ids, "--format", "jsonl").stdout.splitlines()[-1])["summary"]
    lost = 0 if damage == "header" or not victim.get("uniqKey") else 1  # survivors: every message the broker serves is found
    assert (summary["found"] + summary["found-not-consumable"], summary["missing"]) == (summary["ids"] - lost, lost)
    if damage == "header":  # the queues rebuilt from scratch are the broker's: the reput skips the header unread
        import dataclasses
        import shutil

        from mqtool.apply import apply_plan
        from mqtool.recovery.planners import plan_rebuild_cq
        from repair_support import fixture_config, tree

        original = {k: v for k, v in tree(root).items() if k.startswith("consumequeue/")}
        shutil.rmtree(root / "consumequeue")
        config = dataclasses.replace(fixture_config(manifest(version, "dledger-small")), commitlog_file_size=1 << 18)
        with Store.open(root, config, version) as store:
            plan = plan_rebuild_cq(store)
        apply_plan(plan, tmp_path / "backup")
        assert {k: v for k, v in tree(root).items() if k.startswith("consumequeue/")} == original


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_dump_reads_on_past_a_damaged_record_dledger_s_recovery_keeps(tmp_path, version):
    """dledger-small with the TOTALSIZE of entry 300's record changed: DLedger's recovery checks entry headers only and
    keeps that entry and the data after it (§15.4), as verify says. Before: dump stopped there, "the broker would cut the
    log here; --keep-going reads past it", listing 300 of the 700 messages (stats counted as many). Now it lists every
    other message and says why it reads on."""
    from conftest import copy_store

    m = manifest(version, "dledger-small")
    root = copy_store(version, "dledger-small", tmp_path)
    victim = m["messages"][300]
    e = victim["dledgerEntry"]
    _patch(root / "dledger-n0" / e["file"], e["filePosition"] + 48, (e["bodySize"] + 1).to_bytes(4, "big"))
    done = _cli("dump", root, "--format", "jsonl")
    assert done.exit_code == 0, done.output
    expected = [x["commitLogOffset"] for x in m["messages"] if x is not victim]
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == expected
    stderr = " ".join(done.stderr.split())
    assert f"skipped [{e['pos']}, {e['pos'] + e['size']}) (length-mismatch:" in stderr and "a DLedger broker keeps it" in stderr
    assert "the broker would cut the log" not in stderr
    rows = json.loads(_cli("stats", root, "--format", "json").stdout)
    assert sum(r["messages"] for r in rows if r["row"] == "queue") == len(m["messages"]) - 1


def test_the_lines_of_the_dledger_fixtures_say_which_data_file_the_recovery_starts_at_and_what_it_commits(tmp_path):
    """Every DLedger fixture has 2 data files: DLedgerMmapFileStore.recover starts at the first (the third-from-last, the first
    of fewer; §15.4), and at an earlier file when the pre-check of that one's first entry against its index unit fails.
    Before: every plan and verify line said "the third-from-last data file"; 5.3.3 dledger-crashed-cqloss's one uncommitted
    entry was "entries 645..645 are written but not committed ... with them"; the plan's DLedger checkpoint action read
    "[645, 645) committedIndex and endIndex ...", an empty range, where it writes 645 and 645 (the recovered JSON's values)."""
    from conftest import recovered

    first = "DLedgerMmapFileStore.recover: the first data file (it starts at the third-from-last, the first of fewer than 3)"
    for version, name in [("4.9.7", "dledger-small"), ("4.9.7", "dledger-crashed"), ("5.3.3", "dledger-small")]:  # not abnormal_start
        copy = copy_store(version, name, tmp_path)  # a copy: recover refuses a store another test's process reads
        plan = json.loads(_cli("recover", copy, "--dry-run", "-f", "json", "--broker-version", version).stdout)
        assert plan["commitlog"]["scan_rule"] == first
    _, findings, _ = _verify(store_path("4.9.7", "dledger-crashed"))
    assert any(f["kind"] == "abort-present" and f"from offset 0: {first})" in f["message"] for f in findings)
    _, findings, _ = _verify(store_path("5.3.3", "dledger-crashed-cqloss"))
    [uncommitted] = [f["message"] for f in findings if f["kind"] == "dledger-checkpoint"]
    assert uncommitted.startswith("entry 645 is written but not committed") and uncommitted.endswith("does with it")
    text = " ".join(_cli("recover", copy_store("5.3.3", "dledger-crashed-cqloss", tmp_path), "--dry-run").stdout.split())
    after = recovered("5.3.3", "dledger-crashed-cqloss")["dledgerAfterShutdown"]["checkpoint"]["text"]
    assert after == "committedIndex=645\nendIndex=645\n"
    assert "write-dledger-checkpoint dledger-n0/checkpoint committedIndex 645 and endIndex 645: the last recovered entry" in text

    root, placed = relaid_store(tmp_path, "4.9.7")  # 8 data files
    plan = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", "4.9.7").stdout)
    third = "DLedgerMmapFileStore.recover: the third-from-last data file"
    assert (plan["commitlog"]["scan_from"], plan["commitlog"]["scan_rule"]) == (5 << 18, third)
    head = next(msg for msg, pos in placed if pos == 5 << 18)["dledgerEntry"]
    _patch(root / "dledger-n0" / "index" / f"{0:020d}", head["index"] * 32 + 24, (head["term"] + 1).to_bytes(8, "big"))
    plan = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", "4.9.7").stdout)
    back = f"data file {4 << 18:020d}, the newest from the third-from-last back whose first entry matches its index unit"
    assert (plan["commitlog"]["scan_from"], plan["commitlog"]["scan_rule"]) == (4 << 18, f"DLedgerMmapFileStore.recover: {back}")


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_info_says_where_dledger_s_entry_walk_ends_past_a_damaged_record_it_keeps(tmp_path, version):
    """dledger-small with entry 300's record TOTALSIZE changed: DLedger's entry walk (``DLedgerMmapFileStore.recover``,
    entry headers only) passes it and the broker keeps the 700 entries to the data's end (the next-start line says so).
    Before: info walked the records instead and said "max offset 1023341 (length-mismatch ...)", "entries 300: index
    0..299" and "entry walk end 1023341 (length-mismatch)", under a next-start line keeping [0, end of data); and recover's plan,
    scanning "from 0: DLedgerMmapFileStore.recover", said "records scanned 300"."""
    from conftest import copy_store

    m = manifest(version, "dledger-small")
    root = copy_store(version, "dledger-small", tmp_path)
    e = m["messages"][300]["dledgerEntry"]
    _patch(root / "dledger-n0" / e["file"], e["filePosition"] + 48, (e["bodySize"] + 1).to_bytes(4, "big"))
    doc = json.loads(_cli("info", root, "--format", "json").stdout)
    end = m["dledger"]["endPos"]
    assert (doc["commitlog"]["max_offset"], doc["commitlog"]["end_reason"]) == (end, "zeros")
    dl = doc["dledger"]
    assert (dl["entries"], dl["last_index"], dl["last_term"], dl["end_offset"], dl["end_reason"]) == (700, 699, 0, end, "zeros")
    assert doc["next_start"]["logical_end"] == end
    plan = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", version).stdout)
    assert (plan["commitlog"]["records_scanned"], plan["commitlog"]["valid_end"]) == (700, end)


def _broken_entry_header(tmp_path, version):
    """``relaid_store`` with the pos field of an entry in the second data file changed (before DLedger's recovery start
    file): the header alone broken, the record inside whole. ``(root, placed, pos of that entry, pos of the next)``."""
    root, placed = relaid_store(tmp_path, version)
    second = [pos for _, pos in placed if 1 << 18 <= pos < 2 << 18]
    pos, following = second[len(second) // 2], second[len(second) // 2 + 1]
    _patch(root / "dledger-n0" / "data" / f"{1 << 18:020d}", pos - (1 << 18) + 24, (pos + 1).to_bytes(8, "big"))
    return root, placed, pos, following


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_dump_and_stats_read_the_record_inside_an_entry_whose_header_alone_is_broken(tmp_path, version):
    """An entry header broken before DLedger's recovery start file, its record whole: the broker serves that record by its
    consume queue entry (``DLedgerCommitLog.getMessage``), as salvage and verify read it (``record_in_broken_entry``).
    Before: dump and stats went on at the next entry, leaving that message out, and dump said it skipped the whole entry."""
    root, placed, pos, following = _broken_entry_header(tmp_path, version)
    done = _cli("dump", root, "--format", "jsonl")
    assert done.exit_code == 0, done.output
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == [p + 48 for _, p in placed]
    stderr = " ".join(done.stderr.split())
    assert f"skipped [{pos}, {pos + 48}) (corrupt: entry pos {pos + 1} is not its own offset {pos})" in stderr
    assert f"skipped [{pos}, {following})" not in stderr
    rows = json.loads(_cli("stats", root, "--format", "json").stdout)
    assert sum(r["messages"] for r in rows if r["row"] == "queue") == len(placed)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_rebuild_cq_says_the_record_inside_an_entry_whose_header_alone_is_broken_is_dispatched(tmp_path, version):
    """The queues rebuilt past an entry header broken before DLedger's recovery start file hold the record inside it (the
    reput skips the header unread, ``record_in_broken_entry``). Before: the plan's note said "unreadable record at X skipped
    (corrupt)" of the entry whose record it dispatched."""
    import dataclasses
    import shutil

    from mqtool.recovery.planners import plan_rebuild_cq
    from repair_support import fixture_config

    root, placed, pos, _ = _broken_entry_header(tmp_path, version)
    shutil.rmtree(root / "consumequeue")
    config = dataclasses.replace(fixture_config(manifest(version, "dledger-small")), commitlog_file_size=1 << 18)
    with Store.open(root, config, version) as store:
        plan = plan_rebuild_cq(store)
    assert f"unreadable record at {pos} skipped (corrupt)" not in plan.notes
    assert (f"DLedger entry header at {pos} unreadable (corrupt: entry pos is not its own offset): the record inside it "
            f"at {pos + 48} is dispatched, as the broker's reput reads it (it skips the 48 header bytes unread)") in plan.notes


def test_recover_reads_an_index_unit_by_its_position_past_zeroed_units(tmp_path):
    """``DLedgerMmapFileStore.recover`` reads the unit of entry i at i x 32 (``indexFileList.getData(entryIndex * INDEX_UNIT_SIZE)``,
    its pre-check of a data file's first entry and its walk; ``MmapFileList.load`` sets every index file's wrote position to
    its size @0.2.7, @0.3.1.2), whatever units before it hold. ``relaid_store`` with the units of six entries in the middle
    of its second data file zeroed, and an entry header of its third broken (its pos): the third-from-last file's first
    entry matches its unit, so the recovery starts there and keeps the log; `mqtool dump` reads on past that header (the
    record inside served). Before: the units were taken up to the first all-zero one, the pre-check failed back to the
    second file, and the next start was said to cut the log at that header, dropping 478 messages (dump: 222 of 700)."""
    from mqtool.store.dledgerstart import data_recovery

    root, placed = relaid_store(tmp_path, "4.9.7")
    in_second = [(msg["dledgerEntry"]["index"], pos) for msg, pos in placed if 1 << 18 <= pos < 2 << 18]
    hole = in_second[len(in_second) // 2][0]
    _patch(root / "dledger-n0" / "index" / f"{0:020d}", (hole - 3) * 32, bytes(6 * 32))
    third = [pos for _, pos in placed if 2 << 18 <= pos < 3 << 18]
    broken = third[len(third) // 2]
    _patch(root / "dledger-n0" / "data" / f"{2 << 18:020d}", broken - (2 << 18) + 24, (broken + 1).to_bytes(8, "big"))
    with Store.open(root) as store:
        files = store.commitlog.entry_segments()
        assert store.commitlog.segments[data_recovery(store.commitlog).start_file] == files[-3]
    done = _cli("dump", root, "--format", "jsonl")
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == [pos + 48 for _, pos in placed]
    assert f"skipped [{broken}, {broken + 48})" in " ".join(done.stderr.split())


def stale_index_store(tmp_path, version: str, index: str):
    """``relaid_store`` with the pos of an entry header in the middle of its second data file broken and ``index/`` stale:
    the units of the entries before it from entry 5 on zeroed (``zeroed``), or the units of that file's entries each
    placing its entry 7 bytes past it (``shifted``). ``(root, placed, broken entry's pos, the next entry's pos)``."""
    root, placed = relaid_store(tmp_path, version)
    second = [(msg["dledgerEntry"]["index"], pos) for msg, pos in placed if 1 << 18 <= pos < 2 << 18]
    (number, broken), following = second[len(second) // 2], second[len(second) // 2 + 1][1]
    _patch(root / "dledger-n0" / "data" / f"{1 << 18:020d}", broken - (1 << 18) + 24, (broken + 1).to_bytes(8, "big"))
    path = root / "dledger-n0" / "index" / f"{0:020d}"
    if index == "zeroed":
        _patch(path, 5 * 32, bytes((number - 5) * 32))
    else:
        for i, pos in second:
            _patch(path, i * 32 + 4, (pos + 7).to_bytes(8, "big"))
    return root, placed, broken, following


@pytest.mark.parametrize("version", MAIN_VERSIONS)
@pytest.mark.parametrize("index", ["zeroed", "shifted"])
def test_past_a_broken_header_before_the_start_file_dump_reads_every_record_a_stale_index_does_not_place(tmp_path, version, index):
    """``relaid_store`` with an entry header in the middle of its second data file broken (its pos; before the file
    DLedger's recovery starts at, so the broker keeps it and serves every record of that file by its consume queue offset,
    ``DLedgerCommitLog.getMessage``), and ``index/`` stale: the units of the entries before it from entry 5 on zeroed
    (``zeroed``: ``DLedgerMmapFileStore.get`` reads unit i at i x 32 whatever units before it hold), or the units of that
    file's entries placing each 7 bytes past its entry (``shifted``: ``get`` rejects them, ``entry.getPos() == pos``).
    Before: ``zeroed`` took the first all-zero unit for the end of the units and went on at the next file, ``shifted``
    went on at each unit's pos, no entry start, through some 40 "skipped" ranges; both listed 658 of the 700 messages.
    Now dump reads all 700, saying the one broken header, and splits cut around it read what dump reads."""
    root, placed, broken, following = stale_index_store(tmp_path, version, index)
    done = _cli("dump", root, "--format", "jsonl")
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == [pos + 48 for _, pos in placed]
    stderr = " ".join(done.stderr.split())
    assert stderr.count("skipped [") == 1 and f"skipped [{broken}, {broken + 48}) (corrupt: entry pos {broken + 1}" in stderr
    _splits_read_what_dump_reads(root, (broken - 1, broken, broken + 7, broken + 48, following, following + 7), with_next=broken + 7)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_the_committed_position_reads_its_unit_by_its_position_past_zeroed_units(tmp_path, version):
    """DLedger's committed position is the end of the entry unit ``committedIndex`` places (``updateCommittedIndex``:
    ``getEntryPosAndSize`` reads byte committedIndex x 32, whatever units before it hold), and a 5.x broker's start-up reput
    begins there (``getConfirmOffset``). ``relaid_store`` with units 5..14 zeroed, in data files before the one DLedger's
    recovery starts at (it leaves them): the committed position is still the end of the data, as with the units whole, so
    the plan and the next start are those of the whole store. Before: the units were taken up to the first all-zero one,
    the committed position was none, and the 5.x plan said the reput re-dispatches all 700 records from offset 0."""
    from mqtool.store.dledgerstart import data_recovery

    root, placed = relaid_store(tmp_path, version)
    end = placed[-1][1] + placed[-1][0]["dledgerEntry"]["size"]
    whole = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", version).stdout)
    _patch(root / "dledger-n0" / "index" / f"{0:020d}", 5 * 32, bytes(10 * 32))
    with Store.open(root) as store:
        dl = data_recovery(store.commitlog)
        assert (dl.committed_index, dl.committed_pos, dl.rewrite_from) == (len(placed) - 1, end, None)
    plan = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", version).stdout)
    assert (plan["dispatch"], plan["next_start"], plan["actions"]) == (whole["dispatch"], whole["next_start"], whole["actions"])


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_info_s_committed_position_is_dledger_s_past_the_last_entry(tmp_path, version):
    """DLedger clamps a checkpoint's ``committedIndex`` past its last entry to that entry (``updateCommittedIndex``:
    "the node fall behind"), so its committed position is the end of the data. dledger-small with ``committedIndex=800``
    (700 entries): info says the checkpoint's 800 and that position, the recovery's. Before: "ends at None" (info read
    unit 800 itself, never written)."""
    from conftest import copy_store

    m = manifest(version, "dledger-small")
    root = copy_store(version, "dledger-small", tmp_path)
    (root / "dledger-n0" / "checkpoint").write_text("committedIndex=800\nendIndex=800\n")
    doc = json.loads(_cli("info", root, "--format", "json").stdout)
    last = m["messages"][-1]["dledgerEntry"]
    assert (doc["dledger"]["committed_index"], doc["dledger"]["committed_pos"]) == (800, last["pos"] + last["size"])
    assert f"committedIndex 800 (ends at {last['pos'] + last['size']}: " in " ".join(_cli("info", root).stdout.split())


def test_verify_says_the_broker_leaves_a_stale_index_unit_before_dledger_s_start_file(tmp_path):
    """``stale_index_store`` (``shifted``): the units of the second data file's entries disagree with them, but
    ``DLedgerMmapFileStore.recover`` compares and rewrites units from its start file on only (the third-from-last of 8), so
    the broker leaves them, as the plan does. Before: verify said "the broker rewrites the index from there on its next start"."""
    root, placed, _, _ = stale_index_store(tmp_path, "4.9.7", "shifted")
    first = next(msg["dledgerEntry"] for msg, pos in placed if pos >= 1 << 18)
    _, findings, _ = _verify(root)
    [found] = [f for f in findings if f["kind"] == "dledger-index"]
    assert (found["offset"], found["details"]["index"]) == (1 << 18, first["index"])
    assert found["message"] == (f"index unit {first['index']} disagrees with its entry: its entry lies before the data file DLedger's "
                                f"recovery starts at ({5 << 18}), so the broker leaves the unit as it is (0 unit(s) missing)")
    plan = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", "4.9.7").stdout)
    assert not [a for a in plan["actions"] if a["op"] == "write-dledger-index"]


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_recover_leaves_index_units_past_the_last_entry_deletes_the_files_after_and_repair_zeroes_the_units(tmp_path, version):
    """dledger-small with two stale units after its last entry's (copies of units before) and a stale index file after its
    index file. ``DLedgerMmapFileStore.recover`` ends ``index/`` at the last entry with ``MmapFileList.truncateOffset``, which
    moves the write position only and deletes the files after it (reference §15.4): the units stay, the file goes. Before:
    ``recover`` zeroed the units, which the broker never does, and left the file. Now ``recover`` deletes the file alone,
    ``repair``'s own step (``zero-dledger-units``, beyond the broker) zeroes the units, and ``restore`` gives both back."""
    from conftest import copy_store
    from test_undo import snapshot

    unit = dfmt.INDEX_UNIT_SIZE
    root = copy_store(version, "dledger-small", tmp_path)
    index = root / "dledger-n0" / "index" / "00000000000000000000"
    original = index.read_bytes()
    written = next(i for i in range(len(original) // unit) if not any(original[i * unit : (i + 1) * unit]))
    data = bytearray(original)
    data[written * unit : (written + 2) * unit] = original[(written - 2) * unit : written * unit]
    index.write_bytes(data)
    after = index.with_name(f"{len(original):020d}")
    after.write_bytes(original[:unit] + bytes(len(original) - unit))
    damaged = snapshot(root)

    plan = _recover_doc(root, version)
    assert [(a["op"], a["path"]) for a in plan["actions"] if "/index/" in a["path"]] == [("delete", f"dledger-n0/index/{after.name}")]
    assert [(e["kind"], e["fixed_by"]) for e in plan["verify_after"] if e["kind"] == "dledger-index"] == [
        ("dledger-index", "zero-dledger-units")
    ]
    done = _cli("recover", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b1")
    assert done.exit_code == 0, done.output[-2000:]
    assert index.read_bytes() == bytes(data) and not after.exists()  # the broker's truncateOffset: units kept, the file after deleted
    done = _cli("restore", tmp_path / "b1", "--yes")
    assert done.exit_code == 0 and snapshot(root) == damaged, done.output[-2000:]

    done = _cli("repair", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b2")
    assert done.exit_code == 0 and "zero-dledger-units" in done.output, done.output[-2000:]
    assert index.read_bytes() == original and not after.exists()
    done = _cli("verify", root, "--broker-version", version, "--format", "json")
    assert done.exit_code == 0 and json.loads(done.stdout)["findings"] == [], done.stdout[-2000:]
    done = _cli("restore", tmp_path / "b2", "--yes")
    assert done.exit_code == 0 and snapshot(root) == damaged, done.output[-2000:]


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_verify_counts_the_units_past_the_last_entry_from_it_past_zeroed_units_before(tmp_path, version):
    """``stale_index_store`` (``zeroed``: units before DLedger's start file zeroed, which its recovery leaves) with two stale
    units after the last entry's. Before: verify counted the units from the first one up to the first all-zero one, so it
    stopped at the zeroed units, reported none past the last entry, and ``repair`` left them. Counted from the last
    entry's on: reported, and ``repair`` zeroes them (``zero-dledger-units``) and nothing else in ``index/``."""
    root, placed, _, _ = stale_index_store(tmp_path, version, "zeroed")
    last = max(msg["dledgerEntry"]["index"] for msg, _ in placed)
    path = root / "dledger-n0" / "index" / f"{0:020d}"
    data = path.read_bytes()
    _patch(path, (last + 1) * 32, data[(last - 1) * 32 : (last + 1) * 32])
    done = _cli("verify", root, "--broker-version", version, "--format", "json")
    stale = [f for f in json.loads(done.stdout)["findings"] if f["kind"] == "dledger-index" and "past the last entry" in f["message"]]
    assert [(f["expected"], f["found"]) for f in stale] == [(last + 1, last + 3)], done.stdout[-2000:]
    done = _cli("repair", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b")
    assert done.exit_code in (0, 1) and "zero-dledger-units" in done.output, done.output[-2000:]
    assert path.read_bytes() == data


def test_a_committed_index_below_the_first_entry_is_skipped_as_dledger_skips_it(tmp_path):
    """5.3.3 dledger-small with its first data file deleted (expired: DLedger's clean-up deletes data files alone) and
    ``committedIndex=100``, below entry 312, the first one left. ``DLedgerMmapFileStore.recover`` sets ``ledgerBeginIndex`` from
    the first data file's first entry (``reviseLedgerBeginIndex``) and ``updateCommittedIndex`` skips a committed index below
    it, so ``committedPos`` stays -1 and the start-up reput begins at the first data file (``getConfirmOffset``). Before:
    mqtool took unit 100's entry, in the deleted file, for the committed position: the plan's reput began at 406769, below
    the log's min offset, and info said the commit log ends there right after load."""
    from mqtool.recovery.planners import plan_recover
    from mqtool.store.dledgerstart import data_recovery

    m = manifest("5.3.3", "dledger-small")
    root = copy_store("5.3.3", "dledger-small", tmp_path)
    (root / "dledger-n0" / "data" / f"{0:020d}").unlink()
    (root / "dledger-n0" / "checkpoint").write_text("committedIndex=100\nendIndex=699\n")
    first = min(x["dledgerEntry"]["index"] for x in m["messages"] if x["dledgerEntry"]["pos"] >= SEGMENT)
    with Store.open(root, version="5.3.3") as store:
        dl = data_recovery(store.commitlog)
        assert (dl.committed_index, dl.committed_pos) == (None, None)
        assert [(p.name, p.start) for p in plan_recover(store).dispatch] == [("reput", SEGMENT)]
    _, findings, _ = _verify(root, "--broker-version", "5.3.3")
    assert [f["message"].split(":")[0] for f in findings if f["kind"] == "dledger-checkpoint"] == [
        f"DLedger's checkpoint committedIndex 100 is below its first entry {first} (older data files deleted)"]
    assert "(DLedger takes no committed position from it" in " ".join(_cli("info", root).stdout.split())


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_recover_leaves_the_data_after_the_cut_as_dledger_does_and_repair_zeroes_it(tmp_path, version):
    """dledger-small with entry 200's index field broken: ``DLedgerMmapFileStore.recover`` stops there and ends the data with
    ``dataFileList.truncateOffset(processOffset)``, which sets the cut file's wrote, committed and flushed positions and deletes
    the files after it (``MmapFileList.truncateOffset``): the bytes after the cut stay. Before: ``recover --yes`` zeroed them
    (a ``zero-range`` the broker never makes). Now they equal the bytes before, ``restore`` gives the store back, and ``repair``
    zeroes them in a step of its own, beyond the broker (``zero-dledger-data``), after which verify finds the store sound."""
    from test_undo import snapshot

    victim = manifest(version, "dledger-small")["messages"][200]["dledgerEntry"]
    root = copy_store(version, "dledger-small", tmp_path)
    path = root / "dledger-n0" / victim["file"]
    _patch(path, victim["filePosition"] + 8, (victim["index"] + 5).to_bytes(8, "big"))
    damaged, data = snapshot(root), path.read_bytes()
    plan = _recover_doc(root, version)
    assert (plan["commitlog"]["valid_end"], plan["commitlog"]["zero_from"], plan["commitlog"]["zero_to"]) == (victim["pos"],) * 3
    assert not [a for a in plan["actions"] if a["op"] == "zero-range" and "/data/" in a["path"]]
    assert [(e["kind"], e["fixed_by"]) for e in plan["verify_after"] if e["kind"] == "dledger-entry"] == [("dledger-entry", "zero-dledger-data")]
    done = _cli("recover", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b1")
    assert done.exit_code == 0, done.output[-2000:]
    assert path.read_bytes() == data and not (root / "dledger-n0" / "data" / f"{SEGMENT:020d}").exists()
    done = _cli("restore", tmp_path / "b1", "--yes")
    assert done.exit_code == 0 and snapshot(root) == damaged, done.output[-2000:]

    done = _cli("repair", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b2")
    assert done.exit_code == 0 and "zero-dledger-data" in done.output, done.output[-2000:]
    written = len(data.rstrip(b"\0"))
    assert path.read_bytes() == data[: victim["pos"]] + bytes(len(data) - victim["pos"]) and written > victim["pos"]
    done = _cli("verify", root, "--broker-version", version, "--format", "json")
    assert done.exit_code == 0 and json.loads(done.stdout)["findings"] == [], done.stdout[-2000:]
    done = _cli("restore", tmp_path / "b2", "--yes")
    assert done.exit_code == 0 and snapshot(root) == damaged, done.output[-2000:]
    dirty = json.loads(_cli("truncate-dirty", root, "--dry-run", "-f", "json", "--broker-version", version).stdout)  # its own cut zeroes
    assert [(a["start"], a["end"]) for a in dirty["actions"] if a["op"] == "zero-range" and a["path"] == f"dledger-n0/{victim['file']}"] == [
        (victim["pos"], written)]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_past_a_broken_header_every_reader_goes_on_at_the_next_entry_whatever_index_places(tmp_path, version):
    """``relaid_store`` with an entry header in the middle of its second data file broken (its pos; before the file DLedger's
    recovery starts at, so the broker keeps it) and the units of the three entries after it zeroed: the first unit written
    after the broken one places the fourth entry after it, whose header ``DLedgerMmapFileStore.get`` accepts. The broker
    serves each record by its consume queue offset (``DLedgerCommitLog.getMessage``: the data file at that offset, no
    ``index/``), so the three entries' records are served, and the record inside the broken entry too. Before: dump, verify
    and the splits went on at the entry ``index/`` placed, skipping 4 of the 700 messages ("skipped [pos, ...)" over four
    entries), and verify called their consume queue entries mismatches and the record inside the broken entry lost."""
    root, placed = relaid_store(tmp_path, version)
    second = [(msg["dledgerEntry"]["index"], pos) for msg, pos in placed if 1 << 18 <= pos < 2 << 18]
    (number, broken), following = second[len(second) // 2], second[len(second) // 2 + 1][1]
    _patch(root / "dledger-n0" / "data" / f"{1 << 18:020d}", broken - (1 << 18) + 24, (broken + 1).to_bytes(8, "big"))
    _patch(root / "dledger-n0" / "index" / f"{0:020d}", (number + 1) * 32, bytes(3 * 32))
    done = _cli("dump", root, "--format", "jsonl")
    assert [json.loads(line)["offset"] for line in done.stdout.splitlines()] == [pos + 48 for _, pos in placed]
    assert f"skipped [{broken}, {broken + 48}) (corrupt: entry pos {broken + 1}" in " ".join(done.stderr.split())
    _, findings, summary = _verify(root, "--only", "commitlog", "--only", "cq")
    assert summary["commitlog"]["records"] == len(placed)
    assert [(f["kind"], f["offset"], f["details"].get("range_end")) for f in findings if f["kind"].startswith(("dledger-entry", "dledger-record", "cq"))] == [
        ("dledger-entry", broken, following)]
    _splits_read_what_dump_reads(root, (broken - 1, broken, broken + 48, following, following + 7))


@pytest.mark.parametrize("only", [(), ("--only", "commitlog"), ("--only", "cq")])
def test_verify_s_end_on_a_dledger_store_the_next_start_refuses_is_the_entry_walk_s(tmp_path, only):
    """5.3.3 dledger-small with its second data file deleted, so its last one ends at DLedger's end-of-file blank: the entry
    walk (``DLedgerMmapFileStore.recover``) ends at that file's end, the records at the blank. Verify's logical end is the
    entry walk's, and so it stays with ``lock`` a directory, which the broker refuses to start on. Before: there it was the
    queue checks' walk's end (the blank), or none with ``--only commitlog``."""
    root = copy_store("5.3.3", "dledger-small", tmp_path)
    (root / "dledger-n0" / "data" / f"{SEGMENT:020d}").unlink()
    ends = []
    for refused in (False, True):
        if refused:
            (root / "lock").unlink()
            (root / "lock").mkdir()
        _, _, summary = _verify(root, "--broker-version", "5.3.3", *only)
        assert summary["next_start"]["line"].startswith("the broker's next start refuses to start: lock") is refused
        ends.append((summary["commitlog"]["logical_end"], summary["commitlog"]["end_reason"]))
    assert ends == [(SEGMENT, "blank-in-last-segment")] * 2


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_recover_deletes_the_index_files_wholly_before_the_first_entry_left(tmp_path, version):
    """``relaid_store`` with ``index/`` in files of 4 KiB (128 units) and its first two data files deleted (expired: DLedger's
    clean-up deletes data files alone). ``DLedgerMmapFileStore.recover`` sets ``ledgerBeginIndex`` from the first data file's
    first entry and ``indexFileList.resetOffset(ledgerBeginIndex x 32)`` deletes the index files wholly before it
    (``MmapFileList.resetOffset``: ``destroyExpiredFiles``, ``deleteExpiredFiles``). Before: the plan left them; now it deletes
    them, a second plan is empty, and ``restore`` gives them back."""
    from test_undo import snapshot

    root, placed = relaid_store(tmp_path, version)
    index = root / "dledger-n0" / "index"
    units = (index / f"{0:020d}").read_bytes()
    units = units[: -(-len(units.rstrip(b"\0")) // 4096) * 4096]  # the files holding units (those after them: truncateOffset's)
    (index / f"{0:020d}").unlink()
    for base in range(0, len(units), 4096):
        (index / f"{base:020d}").write_bytes(units[base : base + 4096])
    for base in (0, 1 << 18):
        (root / "dledger-n0" / "data" / f"{base:020d}").unlink()
    begin = min(msg["dledgerEntry"]["index"] for msg, pos in placed if pos >= 2 << 18)
    gone = [f"dledger-n0/index/{base:020d}" for base in range(0, len(units), 4096) if base + 4096 <= begin * 32]
    assert gone
    damaged = snapshot(root)
    plan = _recover_doc(root, version)
    assert [a["path"] for a in plan["actions"] if a["op"] == "delete" and "/index/" in a["path"]] == gone
    done = _cli("recover", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b")
    assert done.exit_code == 0, done.output[-2000:]
    assert not [a for a in _recover_doc(root, version)["actions"] if "dledger-n0/" in a["path"]]
    done = _cli("restore", tmp_path / "b", "--yes")
    assert done.exit_code == 0 and snapshot(root) == damaged, done.output[-2000:]


@pytest.mark.parametrize("damage", ["stale", "zeroed"])
def test_a_stale_index_unit_of_the_committed_entry_stops_a_4_5_to_4_9_2_dledger_broker_and_recover_lifts_it(tmp_path, damage):
    """dledger-small relaid in 8 data files (``relaid_store``: DLedger's recovery walks from the third-from-last), DLedger's
    checkpoint committedIndex an entry of the second file, its index unit made stale (pos + 1: the entry header there gives
    another pos, as a unit left by an earlier recovery or copied from elsewhere) or zeroed. DLedger 0.1 and 0.2.2 (4.5.0-4.9.2)
    ``updateCommittedIndex`` read the entry through ``get``, which throws, and ``DefaultMessageStore.load`` fails; 0.2.3+
    (4.9.3+) read the unit alone and start. ``recover``'s checkpoint (committedIndex = the last entry, which the walk reads)
    lifts it. Before: every release's next-start line said the broker keeps the log, and the plan said nothing of it."""
    root, placed = relaid_store(tmp_path, "4.9.7")
    msg, pos = [(m, p) for m, p in placed if 1 << 18 <= p < 2 << 18][3]
    committed, last = msg["dledgerEntry"]["index"], placed[-1][0]["dledgerEntry"]["index"]
    (root / "dledger-n0" / "checkpoint").write_text(f"committedIndex={committed}\nendIndex={last}\n")

    def line(version):
        return json.loads(_cli("info", root, "-f", "json", "--broker-version", version).stdout)["next_start"]["line"]

    assert "refuses" not in line("4.8.0")  # the unit matches its entry: get reads it
    unit = (pos + 1).to_bytes(8, "big") if damage == "stale" else bytes(8)
    _patch(root / "dledger-n0" / "index" / f"{0:020d}", committed * 32 + 4, unit + (bytes(4) if damage == "zeroed" else b""))
    why = f"its index unit places it at [{pos + 1}, " if damage == "stale" else "its index unit places it at [0, 0), shorter than an entry header"
    for version in ("4.5.1", "4.8.0", "4.9.2"):
        text = line(version)
        assert text.startswith(f"the broker's next start refuses to start: DLedger's checkpoint: committedIndex {committed} is before entry ")
        assert why in text and "updateCommittedIndex throws, so DefaultMessageStore.load fails, which `mqtool recover` fixes" in text
    for version in ("4.9.3", "4.9.7"):
        assert "refuses" not in line(version)
    plan = json.loads(_cli("recover", root, "--dry-run", "-f", "json", "--broker-version", "4.8.0").stdout)
    assert any(n.startswith("without this plan's DLedger checkpoint the broker refuses to start") for n in plan["notes"])
    assert not plan.get("refused") and "refuses" not in plan["next_start"]["line"]
    done = _cli("recover", root, "--broker-version", "4.8.0", "--yes", "--backup-dir", tmp_path / "backup")
    assert done.exit_code == 0, done.output
    assert (root / "dledger-n0" / "checkpoint").read_text() == f"committedIndex={last}\nendIndex={last}\n"
    assert "refuses" not in line("4.8.0")
