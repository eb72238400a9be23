"""`mqtool info` / `mqtool dump` end to end: every output format and every bad-input case."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import ALL_VERSIONS, MAIN_VERSIONS, copy_store, manifest, store_path
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_REFUSED, EXIT_USAGE
from repair_support import assert_tags_code

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def one_line_error(result, code: int) -> str:
    assert result.exit_code == code, result.output
    err = result.stderr.strip()
    assert "\n" not in err and err.startswith("mqtool: error: ") and "Traceback" not in result.output
    return err


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_dump_json_equals_the_manifest(version):
    m = manifest(version, "clean-small")
    result = run("dump", store_path(version, "clean-small"), "--format", "json", "--body", "sha256", "--broker-version", version)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == m["messageCount"]
    for row, msg in zip(rows, sorted(m["messages"], key=lambda x: x["commitLogOffset"])):
        assert (row["offset"], row["size"], row["topic"], row["queue_id"], row["queue_offset"]) == (
            msg["commitLogOffset"], msg["size"], msg["topic"], msg["queueId"], msg["queueOffset"])
        assert (row["msg_id"], row["uniq_key"], row["keys"], row["tags"], row["body"]) == (
            msg["msgId"], msg["uniqKey"], msg["keys"], msg["tags"], msg["bodySha256"])
        assert row["properties"] == msg["properties"] and row["body_crc"] == msg["bodyCRC"]
        assert row["sys_flag"] == msg["sysFlag"] and row["transaction_type"] in ("NOT_TYPE", "PREPARED", "COMMIT", "ROLLBACK")
        if msg.get("dispatched"):
            assert_tags_code(version, msg["topic"], row["tags_code"], msg["cqTagsCode"])  # 3.2.6: §2.15


def test_jsonl_csv_and_table_carry_the_same_rows():
    path = store_path("5.3.3", "clean-small")
    jl = run("dump", path, "-f", "jsonl", "--limit", "25", "--body", "base64")
    rows = [json.loads(line) for line in jl.stdout.splitlines()]
    assert len(rows) == 25 and jl.exit_code == 0
    c = run("dump", path, "-f", "csv", "--limit", "25", "--body", "base64")
    table = list(csv.DictReader(io.StringIO(c.stdout)))
    assert [int(r["offset"]) for r in table] == [r["offset"] for r in rows]
    assert [r["body"] for r in table] == [r["body"] or "" for r in rows]
    assert json.loads(table[3]["properties"]) == rows[3]["properties"]
    t = run("dump", path, "--limit", "25")
    assert t.exit_code == 0 and rows[0]["msg_id"] in t.stdout and rows[24]["msg_id"] in t.stdout


def test_filters():
    path = store_path("4.9.7", "clean-small")
    msgs = manifest("4.9.7", "clean-small")["messages"]
    target = next(m for m in msgs if len(m["keys"]) >= 2 and m["tags"])
    by_key = json.loads(run("dump", path, "-f", "json", "--key", target["keys"][1]).stdout)
    assert target["commitLogOffset"] in [r["offset"] for r in by_key]
    assert all(target["keys"][1] in r["keys"] for r in by_key)
    by_id = json.loads(run("dump", path, "-f", "json", "--msg-id", target["msgId"]).stdout)
    assert [r["offset"] for r in by_id] == [target["commitLogOffset"]]
    by_uniq = json.loads(run("dump", path, "-f", "json", "--uniq-key", target["uniqKey"]).stdout)
    assert [r["offset"] for r in by_uniq] == [target["commitLogOffset"]]
    q = json.loads(run("dump", path, "-f", "json", "--topic", "TopicTest", "--queue", "2", "--tag", "TagA").stdout)
    assert len(q) == sum(m["topic"] == "TopicTest" and m["queueId"] == 2 and m["tags"] == "TagA" for m in msgs) > 0
    t0 = sorted(m["storeTimestamp"] for m in msgs)[100]
    since = json.loads(run("dump", path, "-f", "json", "--since", str(t0)).stdout)
    assert len(since) == sum(m["storeTimestamp"] >= t0 for m in msgs)
    window = json.loads(run("dump", path, "-f", "json", "--from-offset", msgs[5]["commitLogOffset"], "--to-offset", msgs[9]["commitLogOffset"]).stdout)
    assert len(window) == 4


def test_dump_consumequeue_follow_and_index_and_checkpoint():
    path = store_path("5.3.3", "clean-small")
    cq = run("dump", "consumequeue", path / "consumequeue" / "TopicTest" / "1", "-f", "jsonl", "--follow")
    rows = [json.loads(x) for x in cq.stdout.splitlines()]
    assert rows and all(r["message"]["offset"] == r["phys_offset"] and r["message"]["tags_code"] == r["tags_code"] for r in rows)
    assert [r["queue_offset"] for r in rows] == list(range(len(rows)))
    ix = json.loads(run("dump", "index", path, "-f", "json").stdout)
    m = manifest("5.3.3", "clean-small")
    assert len(ix) == sum(f["indexCount"] - 1 for f in m["rawState"]["indexFiles"])
    cp = json.loads(run("dump", "checkpoint", path, "-f", "json").stdout)
    assert cp["physic_msg_timestamp"] == m["checkpoint"]["physicMsgTimestamp"]


def test_dump_consumequeue_follow_closes_the_store_it_opened_when_stopped_early(monkeypatch):
    """Before: the store ``--follow`` reads messages from was never closed (its maps held until
    the process ended); ``--limit`` stops the dump early here."""
    from mqtool.store import Store

    closed, close = [], Store.close
    monkeypatch.setattr(Store, "close", lambda self: closed.append(self.root) or close(self))
    path = store_path("5.3.3", "clean-small")
    done = run("dump", "consumequeue", path / "consumequeue" / "TopicTest" / "1", "-f", "jsonl", "--follow", "--limit", "2")
    assert done.exit_code == 0 and len(done.stdout.splitlines()) == 2
    assert closed == [path]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_info_json(version):
    m = manifest(version, "clean-small")
    doc = json.loads(run("info", store_path(version, "clean-small"), "-f", "json").stdout)
    assert doc["commitlog"]["max_offset"] == m["commitLogMaxOffset"]
    assert sum(t["messages"] for t in doc["topics"].values()) == sum(q["maxOffset"] - q["minOffset"] for q in m["queues"])
    table = run("info", store_path(version, "crashed-small"))
    assert table.exit_code == 0 and "PRESENT" in table.stdout


def test_bad_inputs(tmp_path):
    one_line_error(run("info", tmp_path / "missing"), EXIT_BAD_INPUT)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "not a RocketMQ store" in one_line_error(run("info", empty), EXIT_BAD_INPUT)
    garbage = tmp_path / "garbage" / "commitlog"
    garbage.mkdir(parents=True)
    (garbage / "00000000000000000000").write_bytes(os.urandom(4096))
    assert "not a RocketMQ" in one_line_error(run("dump", garbage.parent), EXIT_BAD_INPUT)
    assert "not a RocketMQ release mqtool knows" in one_line_error(run("info", store_path("4.9.7", "clean-small"), "--broker-version", "3.5.0"), EXIT_USAGE)
    one_line_error(run("dump", "nonsense", "x", "y"), EXIT_USAGE)
    one_line_error(run("dump", store_path("4.9.7", "clean-small"), "--since", "yesterday"), EXIT_USAGE)
    one_line_error(run("dump", store_path("4.9.7", "clean-small"), "--msg-id", "XYZ"), EXIT_USAGE)


def test_dump_refuses_the_options_its_kind_does_not_use():
    """Each KIND of `dump` takes its options (commitlog: every one but --follow); any other is a usage error, never ignored."""
    store = store_path("4.9.7", "clean-small")
    assert one_line_error(run("dump", store, "--follow"), EXIT_USAGE) == "mqtool: error: --follow does not apply to `dump commitlog`"
    assert one_line_error(run("dump", "checkpoint", store, "--topic", "T", "--limit", "1"), EXIT_USAGE) == (
        "mqtool: error: --limit, --topic do not apply to `dump checkpoint`")
    every = ["--topic", "T", "--queue", "0", "--from-offset", "0", "--to-offset", "1", "--since", "0", "--until", "1", "--key", "k", "--tag", "t",
             "--uniq-key", "u", "--keep-going", "--no-index", "--limit", "1", "--body", "hex", "--decompress", "--no-progress", "--broker-version", "4.9.7"]
    result = run("dump", store, *every)
    assert result.exit_code == 0 and "no message matches the filters" in result.stderr, result.output


@pytest.mark.parametrize("before", [True, False])
def test_debug_adds_the_traceback_and_keeps_the_line_and_the_exit_code(tmp_path, before):
    """README: errors are one line, `--debug` adds the traceback. Before: with --debug a documented error
    was raised out of mqtool instead: a traceback alone and Python's exit 1 (the code of findings), so
    `recover STORE --debug` without --yes exited 1, not 4, and a missing store 1, not 3."""
    debug = ["--debug"]
    store = copy_store("4.9.7", "crashed-small", tmp_path / f"store{before}")
    for args, code, line in [(["info", tmp_path / "missing"], EXIT_BAD_INPUT, f"{tmp_path / 'missing'}: no such file or directory"),
                             (["recover", store], EXIT_REFUSED, "refused without --yes: the plan is only shown, nothing changed; re-run with --yes to apply it: "
                              + (f"mqtool --debug recover {store} --yes" if before else f"mqtool recover {store} --debug --yes"))]:  # as typed
        result = run(*debug, *args) if before else run(*args, *debug)
        assert (result.exit_code, result.stderr.splitlines()[-1]) == (code, f"mqtool: error: {line}")
        assert result.stderr.startswith("Traceback (most recent call last):")


def test_wrong_length_and_truncated_records(store_copy):
    store = store_copy("4.9.7", "clean-small")
    seg = store / "commitlog" / "00000000000001048576"
    with open(seg, "r+b") as f:
        f.truncate(1000)
    result = run("info", store)  # a finding for verify (tests/test_damage.py), a note here; never a lock-out
    assert result.exit_code == 0 and "00000000000001048576: 1000 bytes, expected 1048576" in result.output
    # a torn record: the dump stops at it and says where, exit 0
    store2 = store_copy("5.3.3", "crashed-small")
    m = manifest("5.3.3", "crashed-small")
    last = m["messages"][-1]
    seg = store2 / "commitlog" / f"{last['commitLogOffset'] // (1 << 20) * (1 << 20):020d}"
    with open(seg, "r+b") as f:
        f.seek(last["commitLogOffset"] % (1 << 20) + last["size"] // 2)
        f.write(bytes(last["size"] - last["size"] // 2))  # the second half never reached the disk
    result = run("dump", store2, "-f", "jsonl")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == len(m["messages"]) - 1
    assert f"stopped at offset {last['commitLogOffset']}" in result.stderr


def test_permission_denied(store_copy, monkeypatch):
    store = store_copy("4.9.7", "clean-small")
    denied = store / "commitlog" / "00000000000000000000"
    real_open = os.open

    def guarded_open(path, flags, *args):
        if os.fspath(path) == os.fspath(denied):  # what chmod 000 does for a non-root user
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr("mqtool.store.mappedfile.os.open", guarded_open)
    assert "permission denied" in one_line_error(run("dump", store), EXIT_BAD_INPUT)


def test_checkpoint_dump_of_a_folder_without_one(tmp_path):
    assert "no checkpoint" in one_line_error(run("dump", "checkpoint", tmp_path), EXIT_BAD_INPUT)


def test_python_dash_m_and_version():
    out = subprocess.run([sys.executable, "-m", "mqtool", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("mqtool ")


def test_dump_a_commitlog_folder_and_a_single_segment():
    m = manifest("4.9.7", "clean-small")
    folder = store_path("4.9.7", "clean-small") / "commitlog"
    rows = json.loads(run("dump", "commitlog", folder, "-f", "json").stdout)
    assert len(rows) == m["messageCount"]
    seg = folder / "00000000000001048576"
    rows = json.loads(run("dump", "commitlog", seg, "-f", "json").stdout)
    in_segment = [x for x in m["messages"] if (1 << 20) <= x["commitLogOffset"] < (2 << 20)]
    assert [r["offset"] for r in rows] == sorted(x["commitLogOffset"] for x in in_segment)


def test_decompress_inflates_compressed_bodies():
    m = manifest("4.9.7", "clean-small")
    target = next(x for x in m["messages"] if x["compressed"])
    raw = json.loads(run("dump", store_path("4.9.7", "clean-small"), "-f", "json", "--msg-id", target["msgId"], "--body", "hex").stdout)[0]
    inflated = json.loads(run("dump", store_path("4.9.7", "clean-small"), "-f", "json", "--msg-id", target["msgId"], "--body", "utf8", "--decompress").stdout)[0]
    import zlib

    assert inflated["body"] == zlib.decompress(bytes.fromhex(raw["body"])).decode("utf-8", "replace")
    assert "COMPRESSED" in raw["sys_flag_names"]
