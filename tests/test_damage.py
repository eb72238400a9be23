"""Damage at the worst places is a finding, never a lock-out (issue #11, section 1).

Every store is a copy of a real-broker fixture damaged here, in ``tmp_path``; every expectation
comes from the fixture's manifest, its recovered JSON or the fixture's own files.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import MAIN_VERSIONS, ROOT, copy_store, manifest, recovered, store_path
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_REFUSED
from mqtool.store import Store
from mqtool.store.rules import BrokerVersion


SEGMENT = 1 << 20
FAMILY = {"4.8.0": "E8-E9 (4.7.1-4.9.0)", "4.9.7": "E10-E12 (4.9.1-4.9.8)", "5.3.3": "E17-E18 (5.2.0-5.3.3)"}  # the eras their marks leave


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def verify(path: Path, *args):
    code, out, err = cli("verify", path, "--format", "jsonl", "--no-progress", *args)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines and "summary" in lines[-1], (code, out, err)
    return code, lines[:-1], lines[-1]["summary"]


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def offsets(version: str, name: str) -> list[int]:
    return sorted(m["commitLogOffset"] for m in manifest(version, name)["messages"])


def zero_first_magic(root: Path) -> None:
    """The issue's damage: 4 zero bytes at offset 4 (the MAGICCODE) of the first segment."""
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.seek(4)
        f.write(bytes(4))


def broker_conf(tmp_path: Path, version: str, name: str) -> Path:
    conf = manifest(version, name)["storeConfig"]
    path = tmp_path / "broker.conf"
    path.write_text("".join(f"{k}={conf[k]}\n" for k in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum")))
    return path


# ---- a damaged first record --------------------------------------------------------------------


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_damaged_first_record_is_a_damaged_range(tmp_path, version):
    """Clean store (no abort file): the broker's normal recovery scans from the third-from-last
    segment and never reads the damage, so the log it serves still ends where the manifest says;
    the damaged record's consume queue entry and index keys point at nothing readable."""
    root = copy_store(version, "clean-small", tmp_path)
    zero_first_magic(root)
    msgs = offsets(version, "clean-small")
    code, out, err = cli("info", root, "-f", "json")
    assert code == 0, err
    assert json.loads(out)["version"]["label"] == FAMILY[version]
    for args in ((), ("--keep-going",)):  # the damage the broker never reads does not end the check: the records after it are counted
        counted = len(msgs) - 1
        code, findings, summary = verify(root, *args)
        assert code == EXIT_FINDINGS
        damaged = [f for f in findings if f["kind"] == "damaged-range"]
        assert [(f["offset"], f["file"], f["details"]["range_end"], f["details"]["valid_records_after"], f["details"]["read_by_broker_recovery"]) for f in damaged] == [
            (0, f"commitlog/{0:020d}", msgs[1], counted, False)
        ]
        assert "never reads it" in damaged[0]["message"]
        assert sorted({(f["kind"], f["offset"]) for f in findings}) == [("cq-entry-dangling", 0), ("damaged-range", 0), ("index-entry-dangling", 0)]
        assert summary["commitlog"]["logical_end"] == manifest(version, "clean-small")["commitLogMaxOffset"]
        assert summary["commitlog"]["records"] == len(msgs) - 1


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_damaged_first_record_read_by_abnormal_recovery_ends_the_log(tmp_path, version):
    """Crashed store: abnormal recovery scans from the first segment and cuts at the damage."""
    root = copy_store(version, "crashed-small", tmp_path)
    zero_first_magic(root)
    code, findings, summary = verify(root)
    assert code == EXIT_FINDINGS
    [damaged] = [f for f in findings if f["kind"] == "damaged-range"]
    assert (damaged["offset"], damaged["details"]["read_by_broker_recovery"]) == (0, True)
    assert "truncates the log at 0" in damaged["message"]
    assert summary["commitlog"]["logical_end"] == 0


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_dump_reads_past_a_damaged_first_record_the_next_start_never_reads(tmp_path, version):
    """A clean store's normal recovery never reads segment 0: the broker keeps and serves every record
    after the damage, so dump reads on past it, with or without --keep-going, saying why."""
    root = copy_store(version, "clean-small", tmp_path)
    zero_first_magic(root)
    for extra in ((), ("--keep-going",)):
        code, out, err = cli("dump", root, "-f", "jsonl", *extra)
        assert code == 0
        assert [json.loads(line)["offset"] for line in out.splitlines()] == offsets(version, "clean-small")[1:]
        assert f"skipped [0, {offsets(version, 'clean-small')[1]})" in err and "never reads it" in err


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_recover_cut_at_a_damaged_first_record_says_what_it_throws_away(tmp_path, version):
    """Abnormal recovery scans from the first segment and cuts at 0 (the broker's rule): the
    plan says so, and how many valid messages that discards, loudly."""
    root = copy_store(version, "crashed-small", tmp_path)
    zero_first_magic(root)
    end = recovered(version, "crashed-small")["commitLog"]["maxOffset"]
    thrown = [o for o in offsets(version, "crashed-small") if 0 < o < end]
    code, out, err = cli("recover", root, "--dry-run", "-f", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert (plan["commitlog"]["valid_end"], plan["commitlog"]["end_is_damage"]) == (0, True)
    assert plan["lost"]["count"] == len(thrown) and [m["offset"] for m in plan["lost"]["messages"]] == thrown[:1000]
    assert plan["notes"][0].startswith("DAMAGE: the broker's recovery cuts the commit log at 0") and f"{len(thrown)} valid message(s)" in plan["notes"][0]
    code, out, err = cli("recover", root)
    assert code == EXIT_REFUSED
    assert "mqtool: DAMAGE: the broker's recovery cuts the commit log at 0" in err and f"throws away the {len(thrown)} valid message(s)" in err


def test_a_commit_log_without_any_record_is_still_refused(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    for seg in (root / "commitlog").iterdir():
        seg.write_bytes(b"\x5a" * seg.stat().st_size)
    code, out, err = cli("info", root)
    assert code == EXIT_BAD_INPUT and "no valid record follows" in one_line(err)


# ---- ambiguous version marks --------------------------------------------------------------------


def killed_at_first_roll(tmp_path: Path) -> tuple[Path, int]:
    """4.8.0 ``crashed-small`` as a broker killed at its first segment roll leaves it: segment 0
    without its end-of-file blank (and the stale bytes after it, 4.0-4.9.0's version mark), a
    pre-allocated all-zero segment 1, nothing after. Returns the store and segment 0's data end."""
    root = copy_store("4.8.0", "crashed-small", tmp_path)
    first = [m for m in manifest("4.8.0", "crashed-small")["messages"] if m["commitLogOffset"] < SEGMENT]
    end = max(m["commitLogOffset"] + m["size"] for m in first)
    segments = sorted((root / "commitlog").iterdir())
    with open(segments[0], "r+b") as f:
        f.seek(end)
        f.write(bytes(SEGMENT - end))
    segments[1].write_bytes(bytes(SEGMENT))
    for seg in segments[2:]:
        seg.unlink()
    return root, end


def test_ambiguous_version_plans_under_each_candidate():
    """A cleanly stopped 4.4.0 store's marks leave E3a-E5 and E7 (no CLUSTER, stale blank fill, the old
    hashSlotCount): three sets of planning rules, whose recoveries of this store agree, so it goes ahead."""
    root = store_path("4.4.0", "clean-small")
    with Store.open(root) as store:
        guess = store.version_guess
        assert store.version is None and guess.label == "E3a-E5, E7 (4.2.0-4.5.2, 4.7.0)"
        assert guess.candidates == (BrokerVersion(4, 7, 0), BrokerVersion(4, 4, 0), BrokerVersion(4, 3, 0))
    code, out, err = cli("recover", root, "--dry-run", "-f", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert "considered E5, E7 (4.5.0-4.5.2, 4.7.0), E4 (4.3.2-4.4.0), E3a-E3b (4.2.0-4.3.1): the plans are equal" in plan["version_source"]
    assert plan["notes"][-1].startswith("the broker version could not be told from the store")
    for given in ("4.2.0", "4.4.0", "4.5.1"):
        code, out, err = cli("recover", root, "--dry-run", "-f", "json", "--broker-version", given)
        assert code == 0, err
        alone = json.loads(out)
        for section in ("commitlog", "lost", "dispatch", "queues", "index", "actions", "remove_abort"):
            assert alone[section] == plan[section], section


def test_candidates_whose_plans_differ_are_refused_naming_the_versions(tmp_path):
    """A cleanly stopped 4.4.0 store without its consume queues: 4.5.0-4.9.8 brokers re-dispatch the whole
    log at start (the reput resumes at the queues' max, rules §2.11), 4.2.0-4.4.0 brokers do not. The store's
    marks leave both, so recover refuses (exit 4), one line, with the rule and the versions that decide."""
    root = copy_store("4.4.0", "clean-small", tmp_path)
    shutil.rmtree(root / "consumequeue")
    code, out, err = cli("recover", root, "--dry-run")
    message = one_line(err)
    assert code == EXIT_REFUSED and out == ""
    assert "E5, E7 (4.5.0-4.5.2, 4.7.0)" in message and "reput_from_cq_max" in message
    assert "pass --broker-version" in message and "4.7.0, 4.4.0, 4.3.0" in message
    for given, rebuilt in (("4.4.0", False), ("4.5.1", True)):
        code, out, err = cli("recover", root, "--dry-run", "-f", "json", "--broker-version", given)
        assert code == 0, err
        assert bool(json.loads(out)["dispatch"]) == rebuilt


# ---- files of the wrong length, stray, misnamed or missing -------------------------------------


def _stray(root: Path, name: str, size: int) -> Path:
    path = root / "commitlog" / name
    path.write_bytes(bytes(size))
    return path


COMMITLOG_DAMAGE = {
    # name: (damage, finding kind, file it names, in the segment list after opening)
    "wrong-length": (lambda r: os.truncate(r / "commitlog" / f"{SEGMENT:020d}", SEGMENT - 4096), "segment-size", f"{SEGMENT:020d}"),
    "zero-length-stray": (lambda r: _stray(r, f"{1234:020d}", 0), "segment-size", f"{1234:020d}"),
    "short-stray": (lambda r: _stray(r, f"{9 * SEGMENT:020d}", 100), "segment-size", f"{9 * SEGMENT:020d}"),
    "misnamed": (lambda r: shutil.copy(r / "commitlog" / f"{0:020d}", r / "commitlog" / f"{4096:020d}"), "segment-name", f"{4096:020d}"),
    "missing-middle": (lambda r: (r / "commitlog" / f"{2 * SEGMENT:020d}").unlink(), "segment-gap", f"{3 * SEGMENT:020d}"),
}


@pytest.mark.parametrize("damage", COMMITLOG_DAMAGE)
def test_commit_log_file_problems_are_findings_and_the_rest_is_checked(tmp_path, damage):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    make, kind, name = COMMITLOG_DAMAGE[damage]
    make(root)
    code, findings, summary = verify(root)
    assert code == EXIT_FINDINGS
    assert [f["file"] for f in findings if f["kind"] == kind] == [f"commitlog/{name}"]
    assert all(f["severity"] == "error" for f in findings if f["kind"] == kind)
    skipped = {"wrong-length": 1, "missing-middle": 2}.get(damage)
    expected = [o for o in offsets("4.9.7", "clean-small") if skipped is None or o // SEGMENT != skipped]
    assert summary["commitlog"]["records"] == len(expected)  # every other segment was checked
    assert summary["consume_queues"]["queues"] == len(list((root / "consumequeue").glob("*/*")))
    code, out, err = cli("info", root)
    assert code == 0, err
    if kind != "segment-gap":
        assert f"{name}:" in out  # a note naming the file
    code, out, err = cli("dump", root, "-f", "jsonl", "--keep-going")
    assert code == 0 and [json.loads(line)["offset"] for line in out.splitlines()] == expected


# ---- a truncated index file ----------------------------------------------------------------------


@pytest.mark.parametrize("with_config", [False, True], ids=["inferred", "broker-config"])
def test_truncated_index_file_is_a_finding(tmp_path, with_config):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    conf = manifest("4.9.7", "clean-small")["storeConfig"]
    newest = sorted((root / "index").iterdir())[-1]
    cut = 40 + 4 * conf["maxHashSlotNum"] + 20 * 100  # header, slots and 99 entries left
    os.truncate(newest, cut)
    extra = ("--broker-config", broker_conf(tmp_path, "4.9.7", "clean-small")) if with_config else ()
    code, out, err = cli("info", root, "-f", "json", *extra)
    assert code == 0, err
    index = json.loads(out)["index"]
    assert (index["hash_slot_num"], index["index_num"]) == (conf["maxHashSlotNum"], conf["maxIndexNum"])
    code, findings, _ = verify(root, *extra)
    assert code == EXIT_FINDINGS
    sized = [(f["file"], f["expected"], f["found"]) for f in findings if f["kind"] == "index-file-size"]
    assert sized == [(f"index/{newest.name}", 40 + 4 * conf["maxHashSlotNum"] + 20 * conf["maxIndexNum"], cut)]
    code, out, err = cli("recover", root, "--dry-run", "-f", "json", *extra)
    assert code == 0, err


# ---- a mapped file that shrinks, a full filesystem ------------------------------------------------

SHRINK = """
import os, sys
from mqtool.store import mappedfile
victim = sys.argv[1]
original = mappedfile.MappedFile.__init__
def shrinking(self, path, *args, **kwargs):
    original(self, path, *args, **kwargs)
    if str(path) == victim and self.size > 8192:
        os.truncate(victim, 4096)  # the file shrinks after it was mapped
mappedfile.MappedFile.__init__ = shrinking
from mqtool.cli import main
sys.argv = ["mqtool", *sys.argv[2:]]
main()
"""


@pytest.mark.parametrize("checks", [["--only", "commitlog", "--jobs", "1"], ["--only", "commitlog", "--jobs", "2"], []], ids=["jobs-1", "jobs-2", "cross-checks-in-a-thread"])
def test_a_file_that_shrinks_while_mapped_is_one_line_and_exit_3(tmp_path, checks):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    victim = root / "commitlog" / f"{SEGMENT:020d}"
    proc = subprocess.run(
        [sys.executable, "-c", SHRINK, str(victim), "verify", str(root), "--no-progress", *checks],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert one_line(proc.stderr).startswith("mqtool: error: ") and "SIGBUS" in proc.stderr


GIL_HELD = """
import ctypes, os, threading
from mqtool.store.mappedfile import exit_on_sigbus
exit_on_sigbus()
pause = ctypes.PyDLL(None).pause  # a PyDLL call keeps the GIL while it blocks
def hold():
    os.write(1, b"held\\n")
    pause()
threading.Thread(target=hold, daemon=True).start()
pause()
"""


def test_sigbus_on_a_thread_without_the_gil_still_exits_3():
    """The handler runs no Python: a thread that takes the signal while another holds the GIL (the
    pool's result thread, a nogil loop) still prints the line and exits; a Python callback would
    wait for the GIL forever."""
    proc = subprocess.Popen([sys.executable, "-c", GIL_HELD], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline() == b"held\n"
        time.sleep(0.2)  # the holder is in pause() with the GIL; the main thread waits for it
        os.kill(proc.pid, signal.SIGBUS)
        assert proc.wait(timeout=60) == EXIT_BAD_INPUT
        assert one_line(proc.stderr.read().decode()).startswith("mqtool: error: ")
    finally:
        proc.kill()
        proc.wait()


def test_a_full_tmpfs_is_one_line_and_exit_3(tmp_path):
    mount = tmp_path / "full tmpfs"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)], capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs CAP_SYS_ADMIN); the shrinking-file test covers the handler")
    try:
        store = mount / "store"
        subprocess.run(["cp", "-r", "--sparse=always", str(ROOT / "fixtures" / "rocketmq-4.9.7" / "clean-small"), str(store)], check=True)
        subprocess.run(["dd", "if=/dev/zero", f"of={mount / 'fill'}", "bs=64k"], capture_output=True)  # fills it: ENOSPC
        proc = subprocess.run([sys.executable, "-m", "mqtool", "verify", str(store), "--no-progress"], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
        assert one_line(proc.stderr).startswith("mqtool: error: ") and "SIGBUS" in proc.stderr
    finally:
        subprocess.run(["umount", str(mount)], check=True)


# ---- --from-offset inside a record -----------------------------------------------------------------


def test_from_offset_inside_a_record_begins_at_the_next_record(tmp_path):
    msgs = manifest("4.9.7", "clean-small")["messages"]
    root = copy_store("4.9.7", "clean-small", tmp_path)
    code, findings, summary = verify(root, "--from-offset", 5)
    assert (code, findings) == (0, [])
    assert f"--from-offset 5 is not a record start; checked from the next record at {msgs[1]['commitLogOffset']}" in summary["notes"]
    code, out, err = cli("dump", root, "-f", "jsonl", "--from-offset", 5, "--limit", 3)
    assert code == 0 and [json.loads(line)["offset"] for line in out.splitlines()] == [m["commitLogOffset"] for m in msgs[1:4]]
    assert f"reading from the next record at {msgs[1]['commitLogOffset']}" in err
    # a real missing entry is still found: the last unit of the queue of the last dispatched message
    last = [m for m in msgs if m["dispatchToConsumeQueue"]][-1]
    cq = root / "consumequeue" / last["topic"] / str(last["queueId"])
    units = manifest("4.9.7", "clean-small")["storeConfig"]["mappedFileSizeConsumeQueue"] // 20
    path = cq / f"{last['queueOffset'] // units * units * 20:020d}"
    with open(path, "r+b") as f:
        f.seek(last["queueOffset"] % units * 20)
        f.write(bytes(20))
    code, findings, _ = verify(root, "--from-offset", 5, "--only", "cq")
    assert code == EXIT_FINDINGS
    assert [(f["kind"], f["offset"]) for f in findings] == [("cq-entry-missing", last["commitLogOffset"])]
