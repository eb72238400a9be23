"""Crash safety: an apply killed at any durability point, then run again, ends with the same bytes
as an uninterrupted run; ``restore`` gives back the original store byte for byte, after a
complete apply and after a killed one."""

from __future__ import annotations

import json

import pytest
from conftest import copy_store, manifest

from mqtool.apply import BackupSet, apply_plan, read_pending, restore
from mqtool.formats.commitlog import header_size
from mqtool.recovery.planners import plan_recover
from mqtool.store import Store
from repair_support import Killed, every_kill_point, mqtool, tree

VERSION = "4.9.7"


def damaged_store(tmp_path, name="store"):
    """crashed-small with a bad body CRC two thirds in: the plan zeroes a dirty tail, deletes
    segments and consume queue entries, drops and rebuilds the index, writes the checkpoint and
    removes the abort file."""
    store_dir = copy_store(VERSION, "crashed-small", tmp_path / name)
    msgs = sorted(manifest(VERSION, "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    victim = next(m for m in msgs[2 * len(msgs) // 3 :] if m["bodyLength"] > 0)
    at = victim["commitLogOffset"] + header_size(victim["sysFlag"])
    segment = store_dir / "commitlog" / f"{at - at % (1 << 20):020d}"
    data = bytearray(segment.read_bytes())
    data[at % (1 << 20)] ^= 0xFF
    segment.write_bytes(bytes(data))
    return store_dir


def plan_of(store_dir):
    with Store.open(store_dir) as store:
        return plan_recover(store)


def plan_given_version(store_dir):
    """``plan_of`` with the broker version given (``--broker-version``): the same plan (``reference``
    holds it) at a third of the cost, for the sweeps that plan a copy per kill point."""
    with Store.open(store_dir, version=VERSION) as store:
        return plan_recover(store)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reference")
    store_dir = damaged_store(tmp)
    original = tree(store_dir)
    plan = plan_of(store_dir)
    assert {a.op for a in plan.actions} == {"zero-range", "delete", "write-dispatch", "write-checkpoint"}
    assert plan_given_version(store_dir).actions == plan.actions
    apply_plan(plan, tmp / "backup")
    return original, tree(store_dir)


def test_every_kill_point_converges_and_restores(tmp_path, monkeypatch, reference):
    original, final = reference
    points = every_kill_point(monkeypatch, tmp_path, lambda name: damaged_store(tmp_path, name), plan_given_version, original, final)
    assert points > 8, points


def test_restore_after_a_complete_apply(tmp_path, reference):
    original, final = reference
    store_dir = damaged_store(tmp_path)
    apply_plan(plan_of(store_dir), tmp_path / "backup")
    assert tree(store_dir) == final
    backup = BackupSet.open(tmp_path / "backup")
    restore(backup)
    assert tree(store_dir) == original
    restore(backup)  # restoring twice changes nothing
    assert tree(store_dir) == original


def test_the_room_taken_for_the_final_manifest_holds_it(tmp_path, monkeypatch):
    """``final_manifest_size``, the room check's count of the manifest ``finish`` writes again (with every touched file's
    ``after`` state; taken from the backup's ``reserve`` on a full disk), is no less than the bytes it writes: counted by the
    apply itself, for a plan that deletes segments (``after`` null), zeroes a range and creates and rewrites files."""
    from mqtool.apply import executor

    counted = []
    real = executor.final_manifest_size
    monkeypatch.setattr(executor, "final_manifest_size", lambda manifest, paths: counted.append(real(manifest, paths)) or counted[-1])
    store_dir = damaged_store(tmp_path)
    backup = apply_plan(plan_of(store_dir), tmp_path / "backup")
    written = (backup.dir / "manifest.json").read_bytes()
    after = json.loads(written)["after"]
    assert None in after.values() and len(after) > 40  # the deleted segments, and every rewritten queue file
    assert len(counted) == 1 and len(written) <= counted[0], (len(written), counted)


def test_the_manifest_reads_back_as_written_a_plan_item_or_file_state_a_line(tmp_path, reference):
    """``manifest.json`` is ``json.loads``-ed back to the plan applied, and an engineer in an incident reads it in ``less``: a
    queue, an action, a lost message, an input and a file's ``after`` state each on a line of its own. A backup whose
    manifest was written as before (``indent=1``) is read and restored alike."""
    original, final = reference
    store_dir = damaged_store(tmp_path)
    plan = plan_of(store_dir)
    backup = apply_plan(plan, tmp_path / "backup")
    assert tree(store_dir) == final
    text = (backup.dir / "manifest.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    assert doc["plan"] == plan.to_dict() and doc["complete"] is True
    lines = {line.strip().removesuffix(",") for line in text.splitlines()}
    items = [*doc["plan"]["queues"], *doc["plan"]["actions"], *doc["plan"]["lost"]["messages"], *doc["plan"]["inputs"]]
    assert len(doc["plan"]["lost"]["messages"]) > 100 and all(json.dumps(item, ensure_ascii=False) in lines for item in items)
    assert all(f"{json.dumps(path, ensure_ascii=False)}: {json.dumps(state)}" in lines for path, state in doc["after"].items())
    (backup.dir / "manifest.json").write_text(json.dumps(doc, indent=1, ensure_ascii=False), encoding="utf-8")
    restore(BackupSet.open(backup.dir))
    assert tree(store_dir) == original


def test_kill_9_then_the_same_command_again(tmp_path, reference, kill_at=7):
    """A real SIGKILL of the CLI process mid-apply; running the same command again finishes it."""
    _, final = reference
    store_dir = damaged_store(tmp_path)
    args = ("recover", store_dir, "--yes", "--backup-dir", tmp_path / "backup")
    killed = mqtool(*args, env={"MQTOOL_TEST_KILL_AT": str(kill_at)})
    assert killed.returncode == -9, killed.stderr
    assert read_pending(store_dir) is not None
    plan_only = mqtool("recover", store_dir)
    assert plan_only.returncode == 4 and "interrupted" in plan_only.stderr
    again = mqtool(*args)
    assert again.returncode == 0, again.stderr
    assert tree(store_dir) == final


def test_restore_refuses_once_the_store_changed_after_the_repair(tmp_path, reference):
    """A broker started after the repair writes to the files it left: restoring would destroy
    that, so restore refuses unless forced."""
    from mqtool.errors import Refused

    original, _ = reference
    store_dir = damaged_store(tmp_path)
    backup = apply_plan(plan_of(store_dir), tmp_path / "backup")
    checkpoint = store_dir / "checkpoint"
    checkpoint.write_bytes(checkpoint.read_bytes())  # a broker flushed its checkpoint
    with pytest.raises(Refused):
        restore(BackupSet.open(backup.dir))
    restore(BackupSet.open(backup.dir), force=True)
    assert tree(store_dir) == original


# the line a kill cut short: in ASCII, or inside a character of a path (a queue of a topic named in any script)
TORN = {"ascii": '{"ev": "backup-file", "pa'.encode(), "character": '{"ev": "backup-file", "path": "consumequeue/主'.encode()[:-1]}


@pytest.mark.parametrize("torn_line", TORN.values(), ids=TORN.keys())
@pytest.mark.parametrize("kill_at", [2, 4])
def test_a_line_torn_by_the_kill_does_not_hide_what_the_finished_apply_did_from_restore(tmp_path, monkeypatch, reference, kill_at, torn_line):
    """An apply killed while it wrote a journal line, then finished (the same command again), then
    undone. Before: the finishing apply's events went after the torn line, where ``events`` stops
    reading, so ``restore`` knew nothing of what it changed and left the store half-restored. The
    torn line, whose change was never made (an event is fsynced first), is cut before appending.
    Before too: a line torn inside a character stopped ``events`` with a UnicodeDecodeError (exit 5
    for every command that reads the journal): it read the journal as text, not line by line."""
    from mqtool.apply import resume_pending
    from mqtool.apply.backup import Journal

    original, final = reference
    store_dir = damaged_store(tmp_path)
    plan = plan_of(store_dir)
    calls, append = {"n": 0}, Journal.append

    def torn(self, *events):
        calls["n"] += 1
        if calls["n"] == kill_at:
            with open(self.path, "ab") as f:
                f.write(torn_line)  # killed mid-write
            raise Killed("journal")
        append(self, *events)

    monkeypatch.setattr(Journal, "append", torn)
    with pytest.raises(Killed):
        apply_plan(plan, tmp_path / "backup")
    monkeypatch.setattr(Journal, "append", append)
    assert read_pending(store_dir) is not None
    resume_pending(store_dir)
    assert tree(store_dir) == final
    restore(BackupSet.open(tmp_path / "backup"))
    assert tree(store_dir) == original


def test_a_kill_as_the_apply_completes_keeps_restore_refusing_what_a_broker_changed_since(tmp_path, monkeypatch, reference):
    """Killed after the journal said "complete" but before the manifest kept the state of every file
    the apply left. Before: the run again found the apply complete and wrote no state, so a restore
    after a broker wrote to those files silently destroyed that. The states are kept first."""
    import mqtool.apply.backup as backup_module
    from mqtool.apply import resume_pending
    from mqtool.errors import Refused

    store_dir = damaged_store(tmp_path)
    plan = plan_of(store_dir)
    write_atomic = backup_module.write_atomic

    def killed_at_the_manifest(path, data, *args):
        if path.name == "manifest.json" and json.loads(data).get("after") is not None:
            raise Killed("manifest")
        write_atomic(path, data, *args)

    monkeypatch.setattr(backup_module, "write_atomic", killed_at_the_manifest)
    with pytest.raises(Killed):
        apply_plan(plan, tmp_path / "backup")
    monkeypatch.setattr(backup_module, "write_atomic", write_atomic)
    resume_pending(store_dir)  # the same command again
    checkpoint = store_dir / "checkpoint"
    checkpoint.write_bytes(checkpoint.read_bytes())  # a broker flushed its checkpoint
    with pytest.raises(Refused):
        restore(BackupSet.open(tmp_path / "backup"))


@pytest.mark.parametrize("broker_writes", ["the cut segment", "the lock file"])
def test_restore_of_a_killed_apply_refuses_once_a_broker_ran_on_the_store(tmp_path, monkeypatch, reference, broker_writes):
    """An apply killed mid-way, then a broker started on the store anyway. Before: only a complete apply
    kept the state it left each file in, so ``restore`` of a killed one checked nothing and threw away what
    the broker wrote since. Now each step keeps the state of the files it leaves for good, and the apply
    the state of the ``lock`` file, which every broker start writes: restore refuses without --force."""
    import os

    import mqtool.apply.executor as executor
    from mqtool.errors import Refused

    original, _ = reference
    store_dir = damaged_store(tmp_path)
    plan = plan_of(store_dir)

    def die(label):
        if label == "dispatched file moved":  # the cut and the deletions done, the dispatch half moved
            raise Killed(label)

    monkeypatch.setattr(executor, "durability_point", die)
    with pytest.raises(Killed):
        apply_plan(plan, tmp_path / "backup")
    monkeypatch.undo()
    cut = next(a for a in plan.actions if a.op == "zero-range" and a.path.startswith("commitlog/"))
    if broker_writes == "the cut segment":  # the broker's first messages go where the cut was
        fd = os.open(store_dir / cut.path, os.O_WRONLY)
        os.pwrite(fd, b"a new message", cut.start)
        os.close(fd)
    else:
        (store_dir / "lock").write_bytes(b"lock")
    with pytest.raises(Refused, match="lock .written by every broker start" if broker_writes == "the lock file" else cut.path):
        restore(BackupSet.open(tmp_path / "backup"))
    restore(BackupSet.open(tmp_path / "backup"), force=True)
    assert tree(store_dir) == original


KILLED_AS_THE_APPLY_ENDS = """
import os, signal, sys
import mqtool.apply.executor as executor
from mqtool.apply.backup import PENDING_MARKER
def killed(root):
    (root / PENDING_MARKER).unlink()  # clear_pending: the mark goes first, then the staging folder
    os.kill(os.getpid(), signal.SIGKILL)
executor.clear_pending = killed
sys.argv = ["mqtool", *sys.argv[1:]]
from mqtool.__main__ import main
main()
"""


def test_an_apply_killed_as_it_removes_its_staging_folder_leaves_none_once_run_again(tmp_path, reference):
    """SIGKILL after the apply's last step, its mark removed, its staging folder not yet. Before: the same
    command again found nothing to do and left ``.mqtool-staging`` in the store (``info`` then named it
    as left by an interrupted mqtool). Now a command run with --yes removes it first: the store is as an
    uninterrupted run leaves it."""
    import subprocess
    import sys

    from repair_support import ROOT

    _, final = reference
    store_dir = damaged_store(tmp_path)
    args = ["recover", str(store_dir), "--yes", "--backup-dir", str(tmp_path / "backup")]
    killed = subprocess.run([sys.executable, "-c", KILLED_AS_THE_APPLY_ENDS, *args], capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -9, killed.stderr
    assert read_pending(store_dir) is None and (store_dir / ".mqtool-staging").is_dir()
    again = mqtool(*args)
    assert again.returncode == 0, again.stderr
    assert "removed the temporary files an interrupted mqtool had left: .mqtool-staging" in again.stderr
    assert tree(store_dir) == final and not (store_dir / ".mqtool-staging").exists()
