"""``mqtool repair`` on copies of the real-broker fixtures (issue #11 §5): the broker's recovery,
then the steps beyond it, each marked with why; afterwards ``verify`` exits 0 and what the
broker's recovered JSON keeps is all there; ``restore`` undoes it; ``recover``'s plan lists what
``verify`` will still report and points to ``repair``."""

from __future__ import annotations

import io
import json
import re
import shlex

import pytest
from conftest import ALL_VERSIONS, copy_store, manifest, recovered
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.cli.output import Screen
from mqtool.cli.repair import render_plan, render_repair
from mqtool.errors import EXIT_FINDINGS, EXIT_OK
from mqtool.formats import checkpoint as cpfmt
from mqtool.store import Store
from mqtool.recovery.planners import plan_truncate_dirty
from repair_support import cli, mqtool, queue_entries, tree

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def verify_doc(root, *args) -> dict:
    result = run("verify", root, "--format", "json", *args)
    return json.loads(result.stdout) | {"exit": result.exit_code}


def repair_plan(root, *args) -> dict:
    result = run("repair", root, "--format", "json", *args)
    assert result.exit_code == EXIT_OK, result.stderr  # a plan, and nothing changed without --yes (the normal first step)
    return json.loads(result.stdout)


def repair_yes(root, tmp_path, *args):
    result = run("repair", root, "--yes", "--backup-dir", tmp_path / "backup", "--format", "json", *args)
    assert "Traceback" not in result.stderr
    return result


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_crashed_store_is_sound_after_repair_and_keeps_what_the_broker_keeps(version, tmp_path):
    root = copy_store(version, "crashed-small", tmp_path)
    given = ("--broker-version", version)
    plan = repair_plan(root, *given)
    assert plan["steps"][0]["step"] == "recover" and plan["steps"][0]["beyond_broker"] is False
    assert plan["recover"]["commitlog"]["valid_end"] == recovered(version, "crashed-small")["commitLog"]["maxOffset"]
    assert plan["remaining"] == []
    result = repair_yes(root, tmp_path, *given)
    assert result.exit_code == EXIT_OK, result.stderr
    doc = verify_doc(root, *given)
    assert doc["exit"] == EXIT_OK and doc["summary"]["sound"], doc["findings"][:3]
    rec = recovered(version, "crashed-small")
    with Store.open(root, version=version) as store:
        assert plan_truncate_dirty(store).commitlog.valid_end == rec["commitLog"]["maxOffset"]
        for q in rec["queues"]:
            kept = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"], e["cq"]["tagsCode"]) for e in q["entries"]]
            if kept:
                assert queue_entries(store, q["topic"], q["queueId"], kept[0][0], kept[-1][0] + 1) == kept, (q["topic"], q["queueId"])


def test_a_deleted_consume_queue_file_is_rebuilt_beyond_the_broker(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    queue_dir = root / "consumequeue" / "TopicTest" / "0"
    original = (queue_dir / "00000000000000000000").read_bytes()
    (queue_dir / "00000000000000000000").unlink()
    plan = repair_plan(root)
    assert [(s["step"], s["beyond_broker"]) for s in plan["steps"]] == [("rebuild-cq", True)]
    assert plan["notes"][0] == "the steps after the recovery are planned again on the recovered store when applied"
    assert plan["steps"][0]["paths"] == ["consumequeue/TopicTest/0"] and "cq-entry-missing" in plan["steps"][0]["why"]
    result = repair_yes(root, tmp_path)
    assert result.exit_code == EXIT_OK, result.stderr
    assert (queue_dir / "00000000000000000000").read_bytes() == original  # as the broker wrote it
    assert verify_doc(root)["exit"] == EXIT_OK
    # restore puts the store back as it was before the repair (the file missing again)
    before = tree(root)
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert not (queue_dir / "00000000000000000000").exists()
    assert tree(root) != before


def _lost_tail(version: str, tmp_path, keep: int):
    """A clean store whose last records were lost by the disk (zeroed), as after a lost write."""
    root = copy_store(version, "clean-small", tmp_path)
    messages = manifest(version, "clean-small")["messages"]
    cut = messages[keep]["commitLogOffset"]
    size = manifest(version, "clean-small")["storeConfig"]["mappedFileSizeCommitLog"]
    seg = root / "commitlog" / f"{cut // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[cut % size:] = bytes(len(data) - cut % size)
    seg.write_bytes(data)
    return root, cut, messages[keep - 1]["storeTimestamp"]


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3"))
def test_index_entries_past_the_end_are_dropped_and_the_checkpoint_follows_the_log(version, tmp_path):
    root, cut, last_ts = _lost_tail(version, tmp_path, keep=1990)
    before = verify_doc(root)
    assert "index-entry-beyond-end" in before["summary"]["findings_by_kind"]
    # recover's plan says what verify will still report after it, and points to repair
    rec = run("recover", root, "--format", "json")
    after = {e["kind"]: e for e in json.loads(rec.stdout)["verify_after"]}
    assert after["index-entry-beyond-end"]["fixed_by"] == "rebuild-index" and not after["index-entry-beyond-end"]["lost_data"]
    assert after["checkpoint-ahead"]["fixed_by"] == "rewrite-checkpoint"
    table = run("recover", root)
    assert "mqtool repair" in table.stdout and "index-entry-beyond-end" in table.stdout
    plan = repair_plan(root)
    steps = {s["step"]: s for s in plan["steps"]}
    assert not steps["recover"]["beyond_broker"]
    assert steps["rebuild-index"]["beyond_broker"] and "index-entry-beyond-end" in steps["rebuild-index"]["why"]
    assert steps["rewrite-checkpoint"]["beyond_broker"] and "checkpoint-ahead" in steps["rewrite-checkpoint"]["why"]
    result = repair_yes(root, tmp_path)
    assert result.exit_code == EXIT_OK, result.stderr
    doc = verify_doc(root)
    assert doc["exit"] == EXIT_OK, doc["findings"][:3]
    assert doc["summary"]["commitlog"]["logical_end"] == cut
    cp = cpfmt.decode_checkpoint((root / "checkpoint").read_bytes())
    assert max(cp.physic_msg_timestamp, cp.logics_msg_timestamp) == last_ts  # the one that was ahead now is the last message's
    assert cp.physic_msg_timestamp <= last_ts and cp.index_msg_timestamp <= last_ts


def test_a_checkpoint_ahead_of_the_log_is_rewritten(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    cp = cpfmt.decode_checkpoint((root / "checkpoint").read_bytes())
    last = manifest("4.9.7", "clean-small")["messages"][-1]["storeTimestamp"]
    ahead = cp._replace(physic_msg_timestamp=last + 3_600_000)
    (root / "checkpoint").write_bytes(cpfmt.encode_checkpoint(ahead).ljust(cpfmt.CHECKPOINT_FILE_SIZE, b"\0"))
    assert "checkpoint-ahead" in verify_doc(root)["summary"]["findings_by_kind"]
    plan = repair_plan(root)
    assert [(s["step"], s["beyond_broker"], s["paths"]) for s in plan["steps"]] == [("rewrite-checkpoint", True, ["checkpoint"])]
    assert repair_yes(root, tmp_path).exit_code == EXIT_OK
    assert cpfmt.decode_checkpoint((root / "checkpoint").read_bytes()) == cp._replace(physic_msg_timestamp=last)
    assert verify_doc(root)["exit"] == EXIT_OK


def test_a_stray_file_in_the_commit_log_is_quarantined_into_the_backup(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    stray = root / "commitlog" / "00000000000000000000.swp"
    stray.write_bytes(b"editor swap file")
    plan = repair_plan(root)
    assert [(s["step"], s["beyond_broker"], s["paths"]) for s in plan["steps"]] == [("quarantine", True, ["commitlog/00000000000000000000.swp"])]
    assert "MappedFileQueue.load" in plan["steps"][0]["why"]
    assert repair_yes(root, tmp_path).exit_code == EXIT_OK
    assert not stray.exists()
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert stray.read_bytes() == b"editor swap file"


def test_a_cut_segment_is_padded_and_the_lost_records_are_cut(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    seg = root / "commitlog" / "00000000000004194304"
    seg.write_bytes(seg.read_bytes()[:300_000])
    verified = run("verify", root, "--format", "json")  # a wrong-length segment is a finding, the rest is checked
    assert verified.exit_code == EXIT_FINDINGS
    assert [f["file"] for f in json.loads(verified.stdout)["findings"] if f["kind"] == "segment-size"] == [f"commitlog/{seg.name}"]
    plan = repair_plan(root)
    assert plan["steps"][0]["step"] == "resize-segment"  # padded first: the broker would not load the store before
    assert plan["recover"] is None and "300000 bytes, not 1048576" in plan["recover_error"]  # its recovery is planned once padded
    result = repair_yes(root, tmp_path)
    assert result.exit_code == EXIT_OK, result.stderr
    assert seg.stat().st_size == 1048576
    assert verify_doc(root)["exit"] == EXIT_OK


def test_damage_in_the_middle_remains_as_lost_data(tmp_path):
    """A zeroed record in the first segment: normal recovery never scans it, no repair brings it
    back; the plan says so and verify's only findings afterwards are that damage."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    m = manifest("4.9.7", "clean-small")["messages"][10]
    seg = root / "commitlog" / "00000000000000000000"
    data = bytearray(seg.read_bytes())
    data[m["commitLogOffset"] : m["commitLogOffset"] + m["size"]] = bytes(m["size"])
    seg.write_bytes(data)
    plan = repair_plan(root)
    assert plan["remaining"] and all(e["lost_data"] for e in plan["remaining"])
    assert any(e["kind"] == "damaged-range" and e["offset"] == m["commitLogOffset"] for e in plan["remaining"])
    result = repair_yes(root, tmp_path)
    assert result.exit_code == EXIT_FINDINGS
    doc = verify_doc(root)
    kinds = {f["kind"] for f in doc["findings"] if f["severity"] != "info"}
    assert "damaged-range" in kinds
    assert {(e["kind"], e["offset"]) for e in plan["remaining"]} >= {(f["kind"], f["offset"]) for f in doc["findings"] if f["severity"] != "info"}


def test_sound_store_has_nothing_to_repair(tmp_path):
    root = copy_store("5.3.3", "clean-small", tmp_path)
    before = tree(root)
    shown = run("repair", root)  # the plan says nothing needs repair, not that steps are planned again
    assert shown.exit_code == EXIT_OK and "No changes: verify finds nothing to repair." in shown.stdout
    assert "planned again" not in shown.stdout and repair_plan(root)["notes"] == []
    crashed = repair_plan(copy_store("5.3.3", "crashed-small", tmp_path / "crashed"))  # the broker's recovery alone: no step after it
    assert [s["step"] for s in crashed["steps"]] == ["recover"] and not any("planned again" in n for n in crashed["notes"])
    result = run("repair", root, "--yes")
    assert result.exit_code == EXIT_OK and "nothing to do" in result.stderr
    assert tree(root) == before


def _fits(line: str, width: int, long_words: set[str]) -> bool:
    """A line fits the width, or only a long last word (a topic or a quoted path, never cut) runs past it."""
    line = line.rstrip()
    return len(line) <= width or any(line.endswith(word) and len(line) - len(word) < width for word in long_words)


def test_repair_plan_table_at_100_columns_cuts_no_number(tmp_path, monkeypatch):
    root, _cut, _ = _lost_tail("4.9.7", tmp_path / "a b", keep=1990)
    doc = repair_plan(root)
    monkeypatch.setenv("COLUMNS", "100")
    out = io.StringIO()
    render_repair(Screen(out), doc)
    text = out.getvalue()
    assert all(_fits(line, 100, {q["topic"] for q in doc["recover"]["queues"]} | {shlex.quote(doc["store"])}) for line in text.splitlines())
    flat = re.sub(r"\s+", "", text)
    for number in (doc["recover"]["commitlog"]["valid_end"], *(a["end"] for a in doc["recover"]["actions"] if a["end"])):
        assert str(number) in flat
    for step in doc["steps"]:
        assert step["step"] in text
    # recover's plan, with what verify still reports after it, at the same width
    rec = json.loads(run("recover", root, "--format", "json").stdout)
    out = io.StringIO()
    render_plan(Screen(out), rec)
    text = out.getvalue()
    assert all(_fits(line, 100, {q["topic"] for q in rec["queues"]} | {shlex.quote(rec["store"])}) for line in text.splitlines())
    flat = re.sub(r"\s+", "", text)
    for e in rec["verify_after"]:
        assert e["kind"] in flat and (e["offset"] is None or str(e["offset"]) in flat)
    assert "mqtoolrepair" in flat


@pytest.mark.parametrize("kill_at", (2, 6))
def test_a_killed_repair_is_finished_by_the_next_one(kill_at, tmp_path):
    """SIGKILL at a durability point of a multi-stage repair, then `repair --yes` again: the
    interrupted stage is finished first, the rest planned again, and the store ends sound."""
    root, cut, _ = _lost_tail("4.9.7", tmp_path, keep=1990)
    (root / "consumequeue" / "TopicTest" / "1" / "00000000000000000000").unlink()
    killed = mqtool("repair", root, "--yes", env={"MQTOOL_TEST_KILL_AT": str(kill_at)})
    assert killed.returncode == -9, killed.stderr
    again = cli("repair", root, "--yes")
    assert again.returncode == EXIT_OK, again.stderr
    assert "finishing the interrupted apply" in again.stderr
    doc = verify_doc(root)
    assert doc["exit"] == EXIT_OK and doc["summary"]["commitlog"]["logical_end"] == cut


def test_stale_entries_past_the_end_and_into_overwritten_bytes_are_dropped(tmp_path):
    """4.9.7 rewrite-clean: the broker keeps and serves consume queue entries past the logical end
    (some into overwritten bytes); repair regenerates those queues: every acknowledged message
    keeps its queue offset, no manifest-listed stale entry is left, verify passes."""
    doc = manifest("4.9.7", "rewrite-clean")
    root = copy_store("4.9.7", "rewrite-clean", tmp_path)
    plan = repair_plan(root)
    rebuild = [s for s in plan["steps"] if s["step"] == "rebuild-cq"]
    assert rebuild and rebuild[0]["beyond_broker"] and "cq-entry-dangling" in rebuild[0]["why"]
    assert repair_yes(root, tmp_path).exit_code == EXIT_OK
    assert verify_doc(root)["exit"] == EXIT_OK
    with Store.open(root) as store:
        for m in (m for m in doc["messages"] if m["dispatchToConsumeQueue"]):  # PREPARED ones have no entry
            entry = store.consume_queue(m["topic"], m["queueId"]).read_entry(m["queueOffset"])
            assert entry is not None and (entry.phys_offset, entry.size) == (m["commitLogOffset"], m["size"]), m["seq"]
        for stale in doc["consumeQueueEntriesBeyondLogicalEnd"]["entries"]:
            entry = store.consume_queue(stale["topic"], stale["queueId"]).read_entry(stale["queueOffset"])
            assert entry is None or entry.phys_offset != stale["phyOffset"], stale
