"""``mqtool offsets`` against the real broker's config files (fastjson, unquoted integer keys) and the
relations the fixtures' manifests list for every committed offset and delay level."""

from __future__ import annotations

import json

import pytest
from conftest import CONFIG_VERSIONS, manifest, store_path
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.formats import fastjson
from mqtool.store import Store
from mqtool.store.offsets import consumer_offsets, delay_offsets, timer_progress

RELATIONS = {"atMin": "at_min", "inRange": "in_range", "atMax": "at_max", "beyondMax": "beyond_max", "belowMin": "below_min"}


@pytest.mark.parametrize("version", CONFIG_VERSIONS)
def test_fastjson_files_parse_with_their_integer_keys(version):
    text = (store_path(version, "config-real") / "config" / "consumerOffset.json").read_text(encoding="utf-8")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    doc = fastjson.loads(text)
    committed = manifest(version, "config-real")["brokerConfigs"]["committedOffsets"]
    for c in committed:
        assert doc["offsetTable"][f"{c['topic']}@{c['group']}"][c["queueId"]] == c["committedOffset"]
    assert fastjson.loads('{"a,{1:b": {0:1, 12 :2}}') == {"a,{1:b": {0: 1, 12: 2}}


@pytest.mark.parametrize("version", CONFIG_VERSIONS)
def test_committed_offsets_relations_equal_the_manifest(version):
    committed = manifest(version, "config-real")["brokerConfigs"]["committedOffsets"]
    with Store.open(store_path(version, "config-real")) as store:
        loaded, rows = consumer_offsets(store)
    assert loaded.source == "config/consumerOffset.json"
    got = {(r["group"], r["topic"], r["queue_id"]): r for r in rows}
    assert set(got) == {(c["group"], c["topic"], c["queueId"]) for c in committed}
    for c in committed:
        r = got[c["group"], c["topic"], c["queueId"]]
        assert (r["offset"], r["queue_min_offset"], r["queue_max_offset"]) == (c["committedOffset"], c["queueMinOffset"], c["queueMaxOffset"])
        assert r["relation"] == RELATIONS[c["relation"]], c
        resume = min(max(c["committedOffset"], c["queueMinOffset"]), c["queueMaxOffset"])
        assert r["lag_messages"] == c["queueMaxOffset"] - resume
        assert (r["lag_bytes"] > 0) == (r["lag_messages"] > 0)


def test_lag_bytes_and_next_store_time_come_from_the_queue():
    doc = json.loads((store_path("4.9.7", "config-real").parent / "config-real.recovered.json").read_text(encoding="utf-8"))
    queues = {(q["topic"], q["queueId"]): q for q in doc["queues"]}
    with Store.open(store_path("4.9.7", "config-real")) as store:
        _, rows = consumer_offsets(store)
    checked = 0
    for r in rows:
        q = queues[r["topic"], r["queue_id"]]
        start = min(max(r["offset"], q["minOffset"]), q["maxOffset"])
        entries = [e for e in q["entries"] if start <= e["queueOffset"] < q["maxOffset"]]
        assert r["lag_bytes"] == sum(e["cq"]["size"] for e in entries)
        if entries and entries[0]["getStatus"] == "FOUND":
            assert r["next_store_timestamp"] == entries[0]["messages"][0]["storeTimestamp"]
            checked += 1
    assert checked > 3


@pytest.mark.parametrize("version", CONFIG_VERSIONS)
def test_delay_offsets_equal_the_manifest(version):
    delays = manifest(version, "config-real")["brokerConfigs"]["delayOffsets"]
    with Store.open(store_path(version, "config-real")) as store:
        _, rows = delay_offsets(store)
    got = {r["delay_level"]: r for r in rows}
    assert set(got) == {d["delayLevel"] for d in delays}
    for d in delays:
        r = got[d["delayLevel"]]
        assert (r["queue_id"], r["offset"], r["queue_min_offset"], r["queue_max_offset"]) == (d["queueId"], d["offset"], d["queueMinOffset"], d["queueMaxOffset"])
        assert r["relation"] == RELATIONS[d["relation"]], d
        assert d["queueMinOffset"] <= r["loaded_offset"] <= d["queueMaxOffset"]  # 4.9+ correctDelayOffset


def test_timercheck_progress_on_5x():
    timer = manifest("5.3.3", "timer-small")["timer"]["timercheck"]
    with Store.open(store_path("5.3.3", "timer-small")) as store:
        (row,) = timer_progress(store)
    assert row["offset"] == timer["lastTimerQueueOffset"] and row["topic"] == "rmq_sys_wheel_timer"
    assert row["timercheck"]["last_timer_log_flush_pos"] == timer["lastTimerLogFlushPos"]
    with Store.open(store_path("4.9.7", "config-real")) as store:
        assert timer_progress(store) == []


def test_cli_offsets_group_filter_exit_codes_and_bak_fallback(store_copy):
    path = store_path("4.9.7", "config-real")
    committed = manifest("4.9.7", "config-real")["brokerConfigs"]["committedOffsets"]
    res = CliRunner().invoke(app, ["offsets", str(path), "--group", "orders_consumer_group", "-f", "json"])
    rows = json.loads(res.stdout)
    want = [c for c in committed if c["group"] == "orders_consumer_group"]
    assert len(rows) == len(want) and {r["group"] for r in rows} == {"orders_consumer_group"}
    assert res.exit_code == (1 if any(c["relation"] in ("beyondMax", "belowMin") for c in want) else 0)
    assert "below the queue's min offset" in res.stderr or "beyond" in res.stderr
    copy = store_copy("4.9.7", "config-real")
    (copy / "config" / "consumerOffset.json").write_text("{garbage", encoding="utf-8")
    res = CliRunner().invoke(app, ["offsets", str(copy), "-f", "jsonl"])
    assert "read config/consumerOffset.json.bak instead" in res.stderr
    assert any(json.loads(line)["kind"] == "consumer" for line in res.stdout.splitlines())


def test_an_offset_fastjson_cannot_convert_sends_the_broker_to_the_bak(store_copy):
    """Before: a bare queue id past the int range was taken as a queue (fastjson's ``intValue``
    throws, so the broker loads the ``.bak``), verify saw no unreadable file, and a null offset
    (``ConcurrentHashMap.put`` throws) ended ``offsets`` as an internal error (exit 5)."""
    from mqtool.verify.state import config_findings

    copy = store_copy("4.9.7", "config-real")
    bak = fastjson.loads((copy / "config" / "consumerOffset.json.bak").read_text(encoding="utf-8"))
    for bad in ('{"offsetTable":{"T@G":{4294967296:33}}}', '{"offsetTable":{"T@G":{0:null}}}', '{"offsetTable":{"T@G":{0:9223372036854775808}}}',
                '{"offsetTable":{"T@G":{"1_0":3}}}'):
        (copy / "config" / "consumerOffset.json").write_text(bad, encoding="utf-8")
        res = CliRunner().invoke(app, ["offsets", str(copy), "-f", "jsonl"])
        assert res.exit_code in (0, 1), (bad, res.output)
        assert "read config/consumerOffset.json.bak instead" in res.stderr, bad
        groups = {json.loads(line)["group"] for line in res.stdout.splitlines() if json.loads(line)["kind"] == "consumer"}
        assert groups == {k.rpartition("@")[2] for k in bak["offsetTable"]}, bad
        with Store.open(copy) as store:
            assert [f.severity.value for f in config_findings(store) if f.kind == "config-unreadable"] == ["warning"], bad
    (copy / "config" / "delayOffset.json").write_text('{"offsetTable":{2147483648:1}}', encoding="utf-8")
    with Store.open(copy) as store:
        loaded, _ = delay_offsets(store)
    assert loaded.source == "config/delayOffset.json.bak"


def test_every_reader_of_a_config_file_passes_an_unreadable_one_over_for_its_bak(store_copy, monkeypatch):
    """``ConfigManager.load`` reads the ``.bak`` when the file cannot be read. Before: three copies of
    that fallback disagreed: ``offsets`` ended on a read error instead, while verify and the version
    detection went to the ``.bak``; now one loader (``Store.load_config``) serves them all."""
    from pathlib import Path

    from mqtool.verify.state import config_findings

    copy = store_copy("4.9.7", "config-real")
    bak = fastjson.loads((copy / "config" / "consumerOffset.json.bak").read_text(encoding="utf-8"))
    read_bytes = Path.read_bytes

    def unreadable(path):
        if path.name == "consumerOffset.json":
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", unreadable)
    with Store.open(copy) as store:
        loaded, rows = consumer_offsets(store)
        findings = [f for f in config_findings(store) if f.kind == "config-unreadable"]
    assert loaded.source == "config/consumerOffset.json.bak"
    assert loaded.notes == ["config/consumerOffset.json: Permission denied"]
    assert {r["group"] for r in rows} == {k.rpartition("@")[2] for k in bak["offsetTable"]}
    assert [(f.severity.value, f.found) for f in findings] == [("warning", "Permission denied")]


def test_offsets_table_folds_a_group_name_longer_than_a_line_instead_of_turning_vertical():
    """Before: one 173-character group name of 5.3.3 ``config-real`` turned the whole table at 100
    columns into vertical records; the group column now breaks that name across lines (every
    character shown) and the other rows stay one line each."""
    path = store_path("5.3.3", "config-real")
    rows = json.loads(CliRunner().invoke(app, ["offsets", str(path), "-f", "json"]).stdout)
    result = CliRunner().invoke(app, ["offsets", str(path)], env={"COLUMNS": "100"})
    assert result.exit_code == 1  # some offsets are out of range
    lines = result.stdout.splitlines()
    assert "RECORD" not in result.stdout and lines[0].split()[:2] == ["group", "queue"]
    width = lines[1].index(" ")  # the group column's dashes
    groups, shown = [], []
    for line in lines[2:]:
        piece = line[:width].rstrip()
        if line[width:].strip():  # a row's first line
            groups.append(piece)
            shown.append(line.split()[-1])  # the topic, last
        else:
            groups[-1] += piece
    consumer = [r for r in rows if r["kind"] == "consumer"]
    long = max((r["group"] for r in consumer), key=len)
    assert len(long) > 100 and long in groups
    assert groups[: len(consumer)] == [r["group"] for r in consumer]
    assert shown == [r["topic"] for r in rows]
