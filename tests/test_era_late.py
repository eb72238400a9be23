"""The rules of eras E10-E17 (4.9.1-5.3.1), each on both sides of its boundary
(``rocketmq-rules-by-version.md``; row numbers are its §s).

Every store is a real-broker fixture of 4.9.2, 5.0.0, 5.1.4 or 5.3.1, read as it is or as a copy
changed here the way the rule's case arises; the version whose rule is tested is always given
(``--broker-version``), one release on each side of the boundary.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, recovered, store_path
from mqtool.apply import apply_plan
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK
from mqtool.formats.properties import parse_properties
from mqtool.recovery.planners import plan_recover
from mqtool.store import Store
from mqtool.store.offsets import delay_offsets
from mqtool.store.rules import BrokerVersion, era_of

SEGMENT = 1 << 20


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def findings(path: Path, version: str) -> list[dict]:
    code, out, err = cli("verify", path, "--broker-version", version, "--format", "jsonl", "--no-progress", "--only", "commitlog")
    return [json.loads(line) for line in out.splitlines()][:-1]


# ---- §2.13 a zero-length last commit log file -------------------------------------------------


def with_empty_last(tmp_path: Path, version: str) -> tuple[Path, Path]:
    """A copy of ``version``'s clean store with a zero-length file after its last segment (a broker
    killed while creating the next segment)."""
    root = copy_store(version, "clean-small", tmp_path)
    last = max(int(p.name) for p in (root / "commitlog").iterdir())
    empty = root / "commitlog" / f"{last + SEGMENT:020d}"
    empty.touch()
    return root, empty


@pytest.mark.parametrize("store_version,given", [("4.9.2", "4.9.2"), ("4.9.2", "4.4.0")])
def test_empty_last_file_is_left_out_by_4_9_2_and_4_4_0(tmp_path, store_version, given):
    """3.2.6-4.4.0 and 4.9.2 (``MappedFileQueue.load`` returns true at a wrong-length file): the broker
    starts, the file stays; nothing to repair."""
    root, empty = with_empty_last(tmp_path, store_version)
    (f,) = [f for f in findings(root, given) if f["kind"] == "segment-empty-last"]
    assert f["severity"] == "info" and "leaves it out" in f["message"]
    with Store.open(root, version=given) as store:
        plan = plan_recover(store)
    assert plan.is_empty and any("zero-length last file" in n for n in plan.notes)
    code, out, err = cli("repair", root, "--broker-version", given, "--dry-run", "-f", "json")
    assert code == EXIT_OK and json.loads(out)["steps"] == []


@pytest.mark.parametrize("store_version,given", [("4.9.2", "4.9.1"), ("4.9.2", "4.9.3"), ("5.0.0", "5.0.0"), ("5.1.4", "5.1.2")])
def test_empty_last_file_refuses_4_5_to_5_1_2_and_repair_removes_it(tmp_path, store_version, given):
    """4.5.0-4.9.1 and 4.9.3-5.1.2 refuse to start ("length not matched"): verify's error, recover
    refuses (exit 3), repair quarantines the file (it holds nothing) and the store is sound after."""
    root, empty = with_empty_last(tmp_path, store_version)
    (f,) = [f for f in findings(root, given) if f["kind"] == "segment-empty-last"]
    assert f["severity"] == "error" and "refuses to start" in f["message"]
    code, _, err = cli("recover", root, "--broker-version", given, "--dry-run")
    assert code == EXIT_BAD_INPUT and "zero-length last commit log file" in err and "repair" in err
    code, out, err = cli("repair", root, "--broker-version", given, "--dry-run", "-f", "json")
    steps = json.loads(out)["steps"]
    assert code == EXIT_OK and [(s["step"], s["paths"]) for s in steps] == [("quarantine", [f"commitlog/{empty.name}"])]
    code, _, err = cli("repair", root, "--broker-version", given, "--yes", "--backup-dir", tmp_path / "backup")
    assert code == EXIT_OK, err
    assert not empty.exists()
    assert cli("verify", root, "--broker-version", given, "--no-progress")[0] == EXIT_OK


@pytest.mark.parametrize("given", ["5.1.3", "5.1.4", "5.3.1"])
def test_empty_last_file_is_deleted_by_5_1_3_recovery(tmp_path, given):
    """5.1.3+ ``doLoad`` deletes it ("size is 0, auto delete"): verify's info, recover deletes it as
    the broker does, restore brings it back."""
    root, empty = with_empty_last(tmp_path, "5.1.4")
    (f,) = [f for f in findings(root, given) if f["kind"] == "segment-empty-last"]
    assert f["severity"] == "info" and "deletes it" in f["message"]
    with Store.open(root, version=given) as store:
        plan = plan_recover(store)
    assert [a.path for a in plan.actions if a.op == "delete"] == [f"commitlog/{empty.name}"]
    apply_plan(plan, tmp_path / "backup")
    assert not empty.exists()
    assert cli("restore", tmp_path / "backup", "--yes")[0] == EXIT_OK and empty.exists() and empty.stat().st_size == 0


def test_empty_last_file_of_an_undecided_5x_store_is_repaired_not_refused(tmp_path):
    """Without --broker-version a 5.0.0 store leaves E13-E16: 5.0.0-5.1.2 refuse the file, 5.1.3+
    delete it. verify warns, recover refuses, repair quarantines it and recovers (one command)."""
    root, empty = with_empty_last(tmp_path, "5.0.0")
    code, out, _ = cli("verify", root, "--format", "jsonl", "--no-progress", "--only", "commitlog")
    (f,) = [json.loads(line) for line in out.splitlines()][:-1]
    assert code == EXIT_FINDINGS and f["severity"] == "warning" and "E13-E15b (5.0.0-5.1.2)" in f["message"]
    assert cli("recover", root, "--dry-run")[0] == EXIT_BAD_INPUT
    code, _, err = cli("repair", root, "--yes", "--backup-dir", tmp_path / "backup")
    assert code == EXIT_OK, err
    assert not empty.exists()


def test_lone_empty_commit_log_file_opens(tmp_path):
    """A store whose only commit log file is empty: no segment (it divided by a segment size of 0)."""
    root = tmp_path / "store"
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / f"{0:020d}").touch()
    with Store.open(root, version="5.1.4") as store:
        assert store.commitlog.segments == [] and store.empty_last_segment is not None


# ---- §3.7 correctMinOffset, 4.9.x and 5.0.0 ---------------------------------------------------


@pytest.mark.parametrize("version", ["4.9.2", "5.0.0"])
def test_fully_expired_queue_min_offset_equals_the_broker(version):
    """The retention stores' broker: a queue whose entries all point below the commit log min keeps
    min 0 in 4.9.2 and reads min = max in 5.0.0; under the other version's rule it differs."""
    rec = recovered(version, "retention-small")
    clmin = rec["commitLog"]["minOffset"]
    expired = [q for q in rec["queues"] if q["maxOffset"] and all(e["cq"]["phyOffset"] < clmin for e in q["entries"])]
    assert expired
    other = {"4.9.2": "5.0.0", "5.0.0": "4.9.2"}[version]
    for given, same in ((version, True), (other, False)):
        with Store.open(store_path(version, "retention-small"), version=given) as store:
            plan = plan_recover(store)
        mins = {(q.topic, q.queue_id): q.min_after for q in plan.queues}
        assert all((mins[q["topic"], q["queueId"]] == q["minOffset"]) == same for q in expired), given
    assert {q["minOffset"] == (0 if version == "4.9.2" else q["maxOffset"]) for q in expired} == {True}


# ---- §2.15 delay tagsCode in abnormal recovery: 4.9.2-4.9.8 use the TAGS hash ------------------


@pytest.mark.parametrize("given,tags", [("4.9.1", "delivery-time"), ("4.9.2", "tags-hash"), ("5.0.0", "delivery-time")])
def test_abnormal_recovery_delay_tags_code(tmp_path, given, tags):
    """The crashed 4.9.2 store without its schedule queues: abnormal recovery re-dispatches every
    delayed message; 4.9.2 gives it the TAGS hash (the schedule service loads after recovery), 4.9.1
    and 5.0.0 the delivery time (as the broker's reput wrote it before the crash)."""
    root = copy_store("4.9.2", "crashed-small", tmp_path)
    shutil.rmtree(root / "consumequeue" / "SCHEDULE_TOPIC_XXXX")
    with Store.open(root, version=given) as store:
        plan = plan_recover(store)
    assert plan.dispatch[0].tags == tags
    apply_plan(plan, tmp_path / "backup")
    delayed = [m for m in manifest("4.9.2", "crashed-small")["messages"] if m["topic"] == "SCHEDULE_TOPIC_XXXX" and m["commitLogOffset"] < plan.commitlog.valid_end]
    assert delayed
    with Store.open(root, version=given) as store, Store.open(store_path("4.9.2", "crashed-small")) as broker:
        for m in delayed:
            entry = store.consume_queue("SCHEDULE_TOPIC_XXXX", m["queueId"]).read_entry(m["queueOffset"])
            written = broker.consume_queue("SCHEDULE_TOPIC_XXXX", m["queueId"]).read_entry(m["queueOffset"])  # by the reput: the delivery time
            assert entry.tags_code == (m["tagsHashCode"] if tags == "tags-hash" else written.tags_code) != (written.tags_code if tags == "tags-hash" else m["tagsHashCode"])


# ---- §2.16 delayOffset correction from 4.9.2 -----------------------------------------------------


def test_delay_offsets_are_clamped_from_4_9_2():
    """config-real 4.9.2 holds a delay offset below its queue's min: 4.9.2 loads it at the min, 4.9.1 as written."""
    below = [d for d in manifest("4.9.2", "config-real")["brokerConfigs"]["delayOffsets"] if d["relation"] == "belowMin"]
    assert below
    for given, clamped in (("4.9.1", False), ("4.9.2", True), ("5.0.0", True)):
        with Store.open(store_path("4.9.2", "config-real"), version=given) as store:
            rows = {r["delay_level"]: r for r in delay_offsets(store)[1]}
        for d in below:
            assert rows[d["delayLevel"]]["loaded_offset"] == (d["queueMinOffset"] if clamped else d["offset"])


# ---- §2.10 confirm offset in the checkpoint from 5.1.1 -----------------------------------------


@pytest.mark.parametrize("given,written", [("5.1.0", False), ("5.1.1", True), ("5.1.4", True)])
def test_confirm_offset_written_to_the_checkpoint_from_5_1_1(given, written):
    with Store.open(store_path("5.1.4", "crashed-small"), version=given) as store:
        plan = plan_recover(store)
    last_valid = max(m["commitLogOffset"] for m in manifest("5.1.4", "crashed-small")["messages"] if m["commitLogOffset"] < plan.commitlog.valid_end)
    assert plan.checkpoint.after["confirm_phy_offset"] == (last_valid if written else plan.checkpoint.before["confirm_phy_offset"])


# ---- §2.11 reput start: 4.5.0-4.9.8 from the queues' max, 5.0.0 from the commit log max ----------


@pytest.mark.parametrize("given,reput", [("4.9.2", True), ("5.0.0", False)])
def test_reput_from_the_queues_max_ends_with_4_9(tmp_path, given, reput):
    """A clean store whose queues lost their last two units (written after the last flush): 4.9.2's
    start() re-dispatches from the queues' max, 5.0.0 starts the reput at the commit log max and
    leaves the gap (a note says so)."""
    root = copy_store("5.0.0", "clean-small", tmp_path)
    for q in (root / "consumequeue").glob("*/*"):
        last = max(q.iterdir())
        data = bytearray(last.read_bytes())
        end = next(i for i in range(len(data) - 20, -20, -20) if any(data[i : i + 20])) + 20
        data[max(end - 40, 0) : end] = bytes(min(end, 40))
        last.write_bytes(bytes(data))
    with Store.open(root, version=given) as store:
        plan = plan_recover(store)
    assert any(p.name == "reput" and p.cq_records > 0 for p in plan.dispatch) == reput
    assert any("does not re-dispatch them" in n for n in plan.notes) != reput


# ---- §2.1 normal recovery start file: 5.3.1 third-from-last, 5.3.2+ from the queues' max --------


@pytest.mark.parametrize("given,start", [("5.3.1", "third-from-last"), ("5.3.3", "consume queues' max")])
def test_normal_recovery_start_file(given, start):
    with Store.open(store_path("5.3.1", "clean-small"), version=given) as store:
        plan = plan_recover(store)
    assert start in plan.commitlog.scan_rule and plan.mode == "normal"


# ---- §2.5 empty commit log: the consume queues are destroyed (destroyLogics, 5.2.0+ queueStore.destroy)


@pytest.mark.parametrize("given", ["5.1.4", "5.3.1"])
def test_empty_commit_log_destroys_the_queues(tmp_path, given):
    root = copy_store("5.1.4", "clean-small", tmp_path)
    for seg in (root / "commitlog").iterdir():
        seg.unlink()
    with Store.open(root, version=given) as store:
        plan = plan_recover(store)
    deleted = {a.path for a in plan.actions if a.op == "delete"}
    assert deleted and all(p.startswith("consumequeue/") for p in deleted)


# ---- §1.6, §1.10, §1.12, §6.1-§6.3, §7.1: the marks each era's files leave ----------------------


@pytest.mark.parametrize("version,name", [("4.9.2", n) for n in ("clean-small", "crashed-small", "retention-small", "batch-small", "config-real")]
                         + [("5.0.0", n) for n in ("clean-small", "crashed-small", "retention-small", "batch-small", "config-real")]
                         + [("5.1.4", "clean-small"), ("5.1.4", "crashed-small"), ("5.3.1", "clean-small"), ("5.3.1", "crashed-small")])
def test_detection_keeps_the_true_era(version, name):
    """Every mark these stores leave allows their own era, and only the marks of that era's side:
    no trailing \\x02 and zeros after the 8-byte blank (§1.6, §1.12) put 4.9.2-5.1.4 in E10-E16, the
    abort PID, abort.bak and stateVersion (§6.3, §7.1) put 5.x in E13+, the trailing \\x02 puts 5.3.1 in E17+."""
    with Store.open(store_path(version, name)) as store:
        guess = store.version_guess
    era = era_of(BrokerVersion.parse(version))
    assert era in guess.eras and not any("set aside" in e for e in guess.evidence), guess.evidence
    if version in ("4.9.2", "5.0.0", "5.1.4"):
        assert {e.name for e in guess.eras} <= {"E10", "E11", "E12", "E13", "E14", "E15a", "E15b", "E16"}
    else:
        assert {e.name for e in guess.eras} <= {"E17", "E18"}
    if version != "4.9.2":
        assert {e.name for e in guess.eras} >= {"E13"} or min(e.index for e in guess.eras) >= era_of(BrokerVersion.parse("5.0.0")).index


def test_abort_pid_and_state_version_marks():
    """§6.3: the 5.0.0 crashed store's abort holds the PID, 4.9.2's is empty; §7.1: 5.0.0's topics.json has stateVersion."""
    with Store.open(store_path("5.0.0", "crashed-small")) as store:
        assert store.abort.pid is not None and "abort file holds a PID" in "; ".join(store.version_guess.evidence)
    with Store.open(store_path("4.9.2", "crashed-small")) as store:
        assert store.abort.pid is None and "the abort file is empty" in "; ".join(store.version_guess.evidence)
    with Store.open(store_path("5.0.0", "config-real")) as store:
        assert "dataVersion.stateVersion" in "; ".join(store.version_guess.evidence)
    with Store.open(store_path("4.9.2", "config-real")) as store:
        assert "dataVersion without stateVersion" in "; ".join(store.version_guess.evidence)


def test_properties_parser_4_9_0_and_4_9_1():
    """§1.10: up to 4.9.0 an empty key is kept and a value holding \\x01 dropped; from 4.9.1 the reverse."""
    raw = b"\x01v\x02A\x01x\x01y\x02B\x01b\x02"
    assert parse_properties(raw, legacy=True) == {"": "v", "B": "b"}
    assert parse_properties(raw, legacy=False) == {"A": "x\x01y", "B": "b"}
