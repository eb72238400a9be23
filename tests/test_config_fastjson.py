"""``config/*.json`` as the real brokers' fastjson writes them (``config-real`` of 4.9.7 and 5.3.3):
read field by field against the manifests' ``brokerConfigs``, checked by ``verify`` without a
false ``config-unreadable``, and rewritten one value at a time with every other byte kept."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from conftest import CONFIG_VERSIONS, manifest, store_path
from mqtool.cli import app
from mqtool.formats import config as cfg
from mqtool.formats import fastjson
from mqtool.store import Store


def config_text(version: str, name: str) -> str:
    return (store_path(version, "config-real") / "config" / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("version", CONFIG_VERSIONS)
def test_real_config_files_decode_as_the_manifest_says(version):
    configs = manifest(version, "config-real")["brokerConfigs"]
    for rel, meta in configs["files"].items():
        text = (store_path(version, "config-real") / rel).read_text(encoding="utf-8")
        assert text == meta["text"]
        name = rel.split("/")[-1].removesuffix(".bak")
        cfg.decode_config(name, text)  # every file and .bak the broker wrote is readable
    assert "{0:" in config_text(version, "consumerOffset.json")  # the bare keys this is about
    with pytest.raises(json.JSONDecodeError):
        json.loads(config_text(version, "consumerOffset.json"))

    offsets = cfg.decode_config("consumerOffset.json", config_text(version, "consumerOffset.json"))[1]
    expected = {(c["topic"], c["group"], c["queueId"]): c["committedOffset"] for c in configs["committedOffsets"]}
    assert {k: v for k, v in offsets.items() if k in expected} == expected
    bak = cfg.decode_config("consumerOffset.json", config_text(version, "consumerOffset.json.bak"))[1]
    assert {k: bak[k] for k in expected} == {(c["topic"], c["group"], c["queueId"]): c["firstCommittedOffset"] for c in configs["committedOffsets"]}

    delay = cfg.decode_config("delayOffset.json", config_text(version, "delayOffset.json"))[0]["offsetTable"]
    assert all(isinstance(level, int) for level in delay)  # written bare, read as the integers they are
    assert {d["delayLevel"]: d["offset"] for d in configs["delayOffsets"]} == {d["delayLevel"]: delay[d["delayLevel"]] for d in configs["delayOffsets"]}

    topics = cfg.decode_config("topics.json", config_text(version, "topics.json"))[0]
    for t in configs["topicsUpdated"]:
        got = topics["topicConfigTable"][t["topic"]]
        assert (got["readQueueNums"], got["writeQueueNums"], got["perm"]) == (t["readQueueNums"], t["writeQueueNums"], t["perm"])
    groups = cfg.decode_config("subscriptionGroup.json", config_text(version, "subscriptionGroup.json"))[0]["subscriptionGroupTable"]
    for g in configs["groupsUpdated"]:
        assert (groups[g["groupName"]]["retryMaxTimes"], groups[g["groupName"]]["consumeBroadcastEnable"]) == (g["retryMaxTimes"], g["consumeBroadcastEnable"])


def test_timer_metrics_decode():
    text = (store_path("5.3.3", "timer-small") / "config" / "timermetrics").read_text(encoding="utf-8")
    doc, _ = cfg.decode_config("timermetrics", text)
    assert doc == json.loads(text)  # strict JSON with \u00F3 escapes: the same values either way


@pytest.mark.parametrize("version", CONFIG_VERSIONS)
def test_verify_reads_real_config_files(version):
    """No ``config-unreadable``; every committed offset outside its queue is judged by the
    manifest's relation (beyondMax: warning, belowMin: info), the others give no finding."""
    result = CliRunner().invoke(app, ["verify", str(store_path(version, "config-real")), "--only", "checkpoint", "-f", "jsonl", "--no-progress"])
    findings = [json.loads(line) for line in result.stdout.splitlines()][:-1]
    assert not [f for f in findings if f["kind"] == "config-unreadable"]
    got = {(f["details"]["topic"], f["details"]["group"], f["details"]["queue_id"]): (f["severity"], f["found"]) for f in findings if f["kind"] == "consumer-offset-range"}
    relation = {"beyondMax": "warning", "belowMin": "info"}
    expected = {
        (c["topic"], c["group"], c["queueId"]): (relation[c["relation"]], c["committedOffset"])
        for c in manifest(version, "config-real")["brokerConfigs"]["committedOffsets"]
        if c["relation"] in relation
    }
    assert got == expected


def test_store_config_file_reads_bare_keys_and_falls_back_to_bak(tmp_path):
    root = tmp_path / "store"
    (root / "config").mkdir(parents=True)
    (root / "commitlog").mkdir()
    (root / "config" / "consumerOffset.json").write_text(config_text("4.9.7", "consumerOffset.json"), encoding="utf-8")
    with Store.open(root) as store:
        assert store.config_file("consumerOffset.json")["offsetTable"]["TopicTest@oracle_consumer_group"][1] == 86
    (root / "config" / "consumerOffset.json").write_text('{"offsetTable":{"a@b":{0:1}}} trailing', encoding="utf-8")
    (root / "config" / "consumerOffset.json.bak").write_text(config_text("4.9.7", "consumerOffset.json.bak"), encoding="utf-8")
    with Store.open(root) as store:
        assert store.config_file("consumerOffset.json")["offsetTable"]["TopicTest@oracle_consumer_group"][1] == 43


def test_a_config_file_is_parsed_once_for_as_long_as_its_bytes_stay(store_copy, monkeypatch):
    """Before: ``verify`` parsed consumerOffset.json three times (the read-ahead, the checkpoint check,
    the offsets it places), each tens of seconds on a big broker's. Now once per Store, and a rewrite
    is read anew even one of the same inode, size and mtime (what a stat-keyed cache would serve stale)."""
    copy = store_copy("4.9.7", "config-real")
    parses = []
    decode = cfg.decode_config
    monkeypatch.setattr(cfg, "decode_config", lambda name, text: parses.append(name) or decode(name, text))
    result = CliRunner().invoke(app, ["verify", str(copy), "--no-progress"])
    assert result.exit_code == 1 and "consumer-offset-range" in result.stdout
    assert parses.count("consumerOffset.json") == 1

    path = copy / "config" / "consumerOffset.json"
    with Store.open(copy) as store:
        assert store.load_config("consumerOffset.json").offsets[("TopicTest", "oracle_consumer_group", 1)] == 86
        before = path.stat()
        path.write_bytes(path.read_bytes().replace(b"{0:41,1:86,", b"{0:41,1:87,"))  # in place, the same length
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        after = path.stat()
        assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
        assert store.load_config("consumerOffset.json").offsets[("TopicTest", "oracle_consumer_group", 1)] == 87
        assert store.config_file("consumerOffset.json")["offsetTable"]["TopicTest@oracle_consumer_group"][1] == 87
    assert parses.count("consumerOffset.json") == 3  # verify's one, then the file as it was and as rewritten


def test_what_fastjson_reads_and_rejects():
    assert fastjson.loads("\ufeff{'a':'x\\'y',b:[1,,2,],/* c */ 3:4L, // d\n\"e\":-1.5e2,}") == {"a": "x'y", "b": [1, 2], 3: 4, "e": -150.0}
    assert fastjson.loads('{"0":1,0:2}') == {"0": 1, 0: 2}  # a quoted key stays a string
    for bad in ('{"a":1} x', '{"a":1', '{"a" 1}', '{"a":tru}', '["x]', '{"a":"\\q"}'):
        with pytest.raises(fastjson.FastjsonError):
            fastjson.loads(bad)
        with pytest.raises(cfg.ConfigError):
            cfg.decode_config("consumerOffset.json", bad)


def test_a_number_of_unicode_digits_is_no_fastjson_number():
    """Before: the lenient parser's number pattern took any Unicode decimal digit (``{0:٣}`` read
    as 3, ``1٣`` as 13); fastjson's lexer reads ASCII 0-9 only and rejects the text."""
    for bad in ("{0:٣}", '{"a":[1,٣]}', '{"a":1٣}', "{0:1.٣}", "{0:1e٣}"):
        with pytest.raises(fastjson.FastjsonError):
            fastjson.loads(bad)
    assert fastjson.loads("{0:13,1:-1.5e3}") == {0: 13, 1: -1500.0}

