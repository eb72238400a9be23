"""Defects a person hit in the write path (an audit of the repair commands): re-running a command to finish
its interrupted apply, a backup disk too small, what repair's plan and closing lines say, pasteable lines."""

from __future__ import annotations

import shlex

import pytest
from conftest import copy_store
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.recovery.plans import Plan
from repair_support import damage_index_entry, tree

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


class Killed(BaseException):
    pass


def killed_at(monkeypatch, args, point: int) -> None:
    """``mqtool ARGS`` killed at its ``point``-th durability point (as tests/test_interrupts.py's kills), the rest restored."""
    import mqtool.apply.executor as executor

    calls = {"n": 0}

    def die(label):
        calls["n"] += 1
        if calls["n"] == point:
            raise Killed(label)

    monkeypatch.setattr(executor, "durability_point", die)
    with pytest.raises(Killed):
        runner.invoke(app, [str(a) for a in args], catch_exceptions=False)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)


def undo_commands(stderr: str) -> list[list[str]]:
    """The ``mqtool restore ... --yes`` commands of the undo line, in the order given."""
    line = next(x for x in stderr.splitlines() if x.startswith("mqtool: undo with: "))
    return [shlex.split(part.rsplit(": ", 1)[-1]) for part in line.split(", then ")]


@pytest.fixture
def crashed(tmp_path):
    return copy_store("5.3.3", "crashed-small", tmp_path / "s")


def test_rerunning_an_interrupted_rebuild_index_finishes_it_and_applies_no_second_one(crashed, tmp_path, monkeypatch):
    """Before: the re-run said "finishing the interrupted apply first (backup A)", then applied a second full rebuild
    (every index file backed up again in B) and named only B to undo, `restore A` refused until B was restored. The
    rebuild (of a damaged index entry) once finished, the same rebuild plans nothing: that says the re-run was the finish."""
    damage_index_entry(crashed)
    original = tree(crashed)
    killed_at(monkeypatch, ["rebuild-index", crashed, "--yes", "--backup-dir", tmp_path / "a"], 3)
    again = run("rebuild-index", crashed, "--yes")
    assert again.exit_code == 0, again.stderr
    assert "finishing the interrupted apply" in again.stderr and "apply is finished, which leaves nothing to do" in again.stderr
    assert not (crashed.parent / ".mqtool-backups").exists()  # no second backup in the default folder
    assert undo_commands(again.stderr) == [["mqtool", "restore", str(tmp_path / "a"), "--yes"]]
    assert run("restore", tmp_path / "a", "--yes").exit_code == 0
    assert tree(crashed) == original


def test_a_second_apply_after_finishing_another_names_both_undo_steps_in_order(crashed, tmp_path, monkeypatch):
    """An interrupted truncate-dirty finished by `recover --yes`, whose plan on the finished store still has work: the undo
    line named only recover's backup; now it names it, then the finished apply's, restored in that order to the original."""
    original = tree(crashed)
    killed_at(monkeypatch, ["truncate-dirty", crashed, "--yes", "--backup-dir", tmp_path / "a"], 3)
    again = run("recover", crashed, "--yes", "--backup-dir", tmp_path / "b")
    assert again.exit_code == 0, again.stderr
    steps = undo_commands(again.stderr)
    assert steps == [["mqtool", "restore", str(tmp_path / "b"), "--yes"], ["mqtool", "restore", str(tmp_path / "a"), "--yes"]]
    for step in steps:
        assert run(*step[1:]).exit_code == 0
    assert tree(crashed) == original


def test_a_backup_that_cannot_fit_is_refused_before_the_first_change(crashed, tmp_path, monkeypatch):
    """Before: `recover --yes --backup-dir <40 KiB tmpfs>` deleted a commit log file, then stopped backing up index/...
    with "No space left on device ... stopped at a safe point". Now the room the backup needs is checked first: one
    line with both numbers, exit 4, the store and the backup folder untouched. (The free space is what
    ``shutil.disk_usage`` says: patched here, as the 40 KiB file system it stands for.)"""
    import shutil
    from collections import namedtuple

    from mqtool.errors import EXIT_REFUSED

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(40 << 10, 40 << 10, 1000))
    before = tree(crashed)
    done = run("recover", crashed, "--yes", "--backup-dir", tmp_path / "small")
    assert done.exit_code == EXIT_REFUSED, done.stderr
    line = done.stderr.splitlines()[-1]
    assert line.startswith(f"mqtool: error: {tmp_path / 'small'}: the backup needs ") and "has 1000 free; nothing changed" in line, line
    assert tree(crashed) == before and not (tmp_path / "small").exists()


def flipped(tmp_path):
    """A copy of 4.9.7 crashed-small, in a folder whose name has a space, with 64 bytes of a body flipped in its second
    segment: the broker's recovery cuts there and drops the valid messages after it (tests/test_cli_audit_incident.py's)."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "my store")
    with open(store / "commitlog" / "00000000000001048576", "r+b") as segment:
        segment.seek(300000)
        segment.write(b"\xff" * 64)
    return store


def quoted_commands(text: str) -> list[list[str]]:
    """The commands quoted in backticks in ``text``, split as a shell does."""
    return [shlex.split(part) for part in text.split("`")[1::2]]


def test_the_damage_note_names_salvage_first_and_pastes(tmp_path):
    """Before: "`mqtool verify --keep-going` shows the damaged range and `mqtool dump --keep-going` reads past it": no
    store path (not pasteable) and no word of salvage, which saves what is readable before a --yes zeroes it."""
    import json

    store = flipped(tmp_path)
    damage = json.loads(run("recover", store, "-f", "json").stdout)["notes"][0]
    assert damage.startswith("DAMAGE: ")
    assert [c[:3] for c in quoted_commands(damage)] == [["mqtool", "salvage", str(store)], ["mqtool", "verify", str(store)], ["mqtool", "dump", str(store)]]


def test_repair_says_the_damage_before_yes_and_what_it_cut_after(tmp_path):
    """Before: repair's plan printed no DAMAGE line on stderr (recover's does), its last line was "nothing changed yet",
    and `repair --yes` zeroed the messages and ended "verify: the store is sound", exit 0, with no word of them."""
    import json

    store = flipped(tmp_path)
    said = [line for line in run("recover", store).stderr.splitlines() if line.startswith("mqtool: DAMAGE: ")]
    cut = Plan.from_dict(json.loads(run("recover", store, "-f", "json").stdout)).lost.lost_now
    assert len(said) == 1 and cut > 0
    planned = run("repair", store)
    assert planned.exit_code == 0 and said[0] in planned.stderr.splitlines()
    applied = run("repair", store, "--yes", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == 0, applied.stderr
    last = applied.stderr.splitlines()[-1]
    assert last.startswith(f"mqtool: verify: the store is sound; the repair cut {cut} valid message(s)"), last
    restore, salvage = quoted_commands(last)
    assert restore == ["mqtool", "restore", str(tmp_path / "bk"), "--yes"] and salvage[:3] == ["mqtool", "salvage", str(store)]
    assert run(*restore[1:]).exit_code == 0
    assert Plan.from_dict(json.loads(run("recover", store, "-f", "json").stdout)).lost.lost_now == cut  # the restore gave them back


def test_the_live_broker_refusal_quotes_its_paths(tmp_path):
    """Before: "my store/5.3.3-clean-small is in use (pid N (python) holds the POSIX lock on my store/5.3.3-clean-small/lock
    ...)": a path with a space read as two words, where every table and command line quotes it."""
    import subprocess
    import sys

    from mqtool.errors import EXIT_REFUSED

    store = copy_store("5.3.3", "clean-small", tmp_path / "my store")
    locker = "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", locker, str(store / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        done = run("rebuild-index", store, "--yes")
        assert done.exit_code == EXIT_REFUSED
        line = done.stderr.splitlines()[-1]
        assert line.startswith(f"mqtool: error: {shlex.quote(str(store))} is in use (pid {holder.pid} "), line
        assert f"holds the POSIX lock on {shlex.quote(str(store / 'lock'))}" in line
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("command", ["recover", "truncate-dirty", "rebuild-cq", "rebuild-index", "repair"])
def test_the_write_commands_backup_dir_default_is_one_whole_line(command):
    """Before, at 100 columns: --backup-dir's default path was broken over two lines. The exit codes paragraph stays in
    lines kept as written, short enough for 60 columns (``test_help_text_fits_a_60_column_terminal``): a paragraph
    click fills breaks an option at its hyphen (``--plan-`` / ``out``)."""
    lines = runner.invoke(app, [command, "--help"], terminal_width=100).stdout.splitlines()
    at = lines.index(next(x for x in lines if x.lstrip().startswith("--backup-dir")))
    assert [".mqtool-backups/<store>-<time>-<command>"] in [x.split() for x in lines[at:at + 5]], lines[at:at + 5]  # whole, on its own line


def test_restoring_a_repair_says_each_stage_on_its_own_line_even_quiet(crashed, tmp_path):
    """Before: `restore` of a repair's backup printed a bare "mqtool: stage 01-recover:" line before each stage's
    result, also with -q; each stage's result now names its stage."""
    assert run("repair", crashed, "--yes", "--backup-dir", tmp_path / "bk").exit_code == 0
    stages = sorted(p.name for p in (tmp_path / "bk").iterdir())
    done = run("-q", "restore", tmp_path / "bk", "--yes")
    assert done.exit_code == 0, done.stderr
    said = done.stderr.splitlines()
    assert [x.split(": ", 2)[1] for x in said] == [f"stage {s}" for s in reversed(stages)]
    assert all(x.split(": ", 2)[2].startswith("restored ") for x in said), said


def test_a_relative_backup_dir_is_named_absolute_in_the_undo_line(crashed, tmp_path, monkeypatch):
    """Before: `--backup-dir bk` gave "undo with: mqtool restore bk --yes", which pastes only from where it was run."""
    monkeypatch.chdir(tmp_path)
    done = run("recover", crashed, "--yes", "--backup-dir", "bk")
    assert done.exit_code == 0, done.stderr
    assert undo_commands(done.stderr) == [["mqtool", "restore", str(tmp_path / "bk"), "--yes"]]


def test_a_salvage_to_a_store_cut_short_leaves_no_half_store_at_its_target(tmp_path, monkeypatch):
    """Before: an interrupted `salvage --to-store OUT` left a half-written store in OUT with no mark: `info` and `verify`
    (and a broker) took it for an ordinary store. It is built in OUT.mqtool-partial and renamed to OUT once whole."""
    from mqtool.apply.salvage_store import SalvageStoreWriter

    source, out = copy_store("5.3.3", "crashed-small", tmp_path / "src"), tmp_path / "out"
    add, count = SalvageStoreWriter.add, {"n": 0}

    def killed_after_100(self, raw, **fields):
        count["n"] += 1
        if count["n"] > 100:
            raise Killed("salvage")
        return add(self, raw, **fields)

    monkeypatch.setattr(SalvageStoreWriter, "add", killed_after_100)
    with pytest.raises(Killed):
        runner.invoke(app, ["salvage", str(source), "--to-store", str(out), "-f", "jsonl", "--out", str(tmp_path / "rows.jsonl")], catch_exceptions=False)
    partial = tmp_path / "out.mqtool-partial"
    assert not out.exists() and (partial / "commitlog").is_dir()
    monkeypatch.setattr(SalvageStoreWriter, "add", add)
    done = run("salvage", source, "--to-store", out, "-f", "jsonl", "--out", tmp_path / "rows.jsonl")
    assert done.exit_code == 0, done.stderr
    assert not partial.exists() and (out / "commitlog").is_dir() and (out / "checkpoint").is_file()
    assert run("verify", out).exit_code == 0


def test_applying_a_saved_plan_whose_apply_was_interrupted_names_its_undo(crashed, tmp_path, monkeypatch):
    """`apply PLAN --yes` again after its apply was killed finishes it ("that was this plan: it is now applied"); before, it
    did not say where that apply's backup is nor how to undo it, the one thing an apply must always say."""
    assert run("recover", crashed, "--plan-out", tmp_path / "plan.json").exit_code == 0
    killed_at(monkeypatch, ["apply", tmp_path / "plan.json", "--yes", "--backup-dir", tmp_path / "a"], 3)
    again = run("-q", "apply", tmp_path / "plan.json", "--yes")
    assert again.exit_code == 0, again.stderr
    assert undo_commands(again.stderr) == [["mqtool", "restore", str(tmp_path / "a"), "--yes"]]


def test_a_linked_segment_the_recovery_deletes_takes_no_room_in_the_backup(tmp_path, monkeypatch):
    """Before: the room check counted a deleted segment that is a symlink to another file system (its data on another disk)
    as a whole file copied into the backup, while the apply moves the link itself there (``Executor._back_up``): a backup
    disk with room for what the apply keeps was refused. The other file system is a patched ``st_dev``; the free space a
    patched ``shutil.disk_usage`` with room for the cut's zeroed range (under 1 MiB) and the backup's records (its manifest twice,
    its journal: ``bookkeeping_room``), but not for the 1 MiB segment too."""
    import os
    import shutil
    from collections import namedtuple

    from mqtool.apply import executor

    store = flipped(tmp_path)
    other = tmp_path / "other disk"
    other.mkdir()
    segment = store / "commitlog" / "00000000000004194304"  # after the cut: the recovery deletes it
    shutil.move(segment, other / segment.name)
    segment.symlink_to(other / segment.name)

    class OtherDisk:  # executor's os, with the files in "other disk" on a file system of their own
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def stat(path, *args, **kwargs):
            st = os.stat(path, *args, **kwargs)
            if "other disk" not in os.path.realpath(path):
                return st
            return namedtuple("st", "st_mode st_dev st_size st_blocks")(st.st_mode, st.st_dev + 1, st.st_size, st.st_blocks)

    monkeypatch.setattr(executor, "os", OtherDisk())
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(3 << 20, 3 << 20, 2 << 20))
    before = tree(store)
    done = run("recover", store, "--yes", "--backup-dir", tmp_path / "bk")
    assert done.exit_code == 0, done.stderr
    assert not segment.is_symlink() and (other / segment.name).stat().st_size == 1 << 20  # the link moved, its data where it was
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0
    assert segment.is_symlink() and tree(store) == before


def test_repairs_plan_names_the_rebuild_its_yes_makes_after_a_dledger_recovery_that_cuts_entries(tmp_path):
    """5.3.3 ``dledger-crashed-cqloss``: the broker's abnormal DLedger recovery truncates the queues short of the records
    it keeps (the recover plan's note: 8 acknowledged messages lose their entries). Before: repair's plan said 'steps 1',
    'beyond the broker 0', nothing left for verify, and recover's plan no "will still report" rows; --yes then applied a
    second stage, rebuild-cq of 6 queues, which the plan never showed. Now both plans list what verify reports after the
    recovery (6 cq-entry-missing runs, rebuild-cq fixes them) and repair's plan the rebuild-cq step --yes applies."""
    import json

    store = copy_store("5.3.3", "dledger-crashed-cqloss", tmp_path / "s")
    recover = json.loads(run("recover", store, "-f", "json").stdout)
    rows = [(r["kind"], r["lost_data"], r["fixed_by"]) for r in recover["verify_after"]]
    assert rows == [("cq-entry-missing", False, "rebuild-cq")] * 6
    assert sum(int(r["message"].split()[0]) for r in recover["verify_after"]) == len(recover["unqueued"]) == 8
    plan = json.loads(run("repair", store, "-f", "json").stdout)
    assert [(s["step"], s["beyond_broker"]) for s in plan["steps"]] == [("recover", False), ("rebuild-cq", True)]
    queues = {q.removeprefix("consumequeue/") for q in plan["steps"][1]["paths"]}
    assert queues == {f"{r['topic']}/{r['queue_id']}" for r in recover["unqueued"]}
    done = run("repair", store, "--yes", "--backup-dir", tmp_path / "b")
    assert done.exit_code == 0 and "repair applied in 2 stage(s)" in done.stderr
    assert "rebuild-cq: 6 consume queue(s) with cq-entry-missing" in done.stderr
    applied = json.loads((tmp_path / "b" / "02-rebuild-cq" / "manifest.json").read_text())["plan"]
    assert {f"{q['topic']}/{q['queue_id']}" for q in applied["queues"]} == queues


def test_apply_without_yes_of_a_stale_plan_meets_the_refusal_yes_meets(crashed, tmp_path):
    """Before: `apply PLAN` of a plan whose store changed since said 'refused without --yes: the plan is only shown, nothing
    changed; re-run with --yes to apply it', and the --yes it asked for then refused ('abort changed since the plan was made;
    plan again'). The preview now says so itself (exit 4 both ways), and a plan that still matches keeps the preview's line."""
    import os

    plan = tmp_path / "plan.json"
    assert run("recover", crashed, "--plan-out", plan).exit_code == 0
    fresh = run("apply", plan)
    assert fresh.exit_code == 4 and "re-run with --yes to apply it" in fresh.stderr
    abort = crashed / "abort"
    os.utime(abort, ns=(abort.stat().st_atime_ns, abort.stat().st_mtime_ns + 10**9))
    before = tree(crashed)
    shown = run("apply", plan)
    done = run("apply", plan, "--yes")
    assert shown.exit_code == done.exit_code == 4
    refusal = "mqtool: error: abort changed since the plan was made (size or mtime differ); plan again"
    assert shown.stderr.strip().splitlines()[-1] == done.stderr.strip().splitlines()[-1] == refusal
    assert "re-run with --yes" not in shown.stderr and tree(crashed) == before


def test_a_backup_disk_with_room_for_what_the_dispatch_keeps_is_not_refused(tmp_path, monkeypatch):
    """Before: the room check counted every index and consume queue file the plan lists for its dispatch, the index files it
    keeps as they are among them, while the apply backs up only those it rewrites (``_queue_writer``, ``_index_writer``): a
    backup disk on another file system (a patched ``st_dev``) with room for all the apply keeps there, measured from the same
    apply with room to spare, was refused (rewrite-clean: its 84 KiB kept index file counted too). Now each op's backup is
    said once (``executor.KEEPS``), for the apply and the room check both. The room measured counts the manifest once more
    (written again beside itself at the end) and the journal thrice (its bound takes every number at its widest)."""
    import os
    import shutil
    from collections import namedtuple

    from mqtool.apply import executor

    real_stat = os.stat

    class OtherDisk:  # executor's os, with tmp_path (where the backup folders go) on a file system of its own
        def __getattr__(self, name):
            return getattr(os, name)

        @staticmethod
        def stat(path, *args, **kwargs):
            st = real_stat(path, *args, **kwargs)
            if str(path) != str(tmp_path):
                return st
            return namedtuple("st", "st_mode st_dev st_size st_blocks")(st.st_mode, st.st_dev + 1, st.st_size, st.st_blocks)

    monkeypatch.setattr(executor, "os", OtherDisk())
    first = copy_store("4.9.7", "rewrite-clean", tmp_path / "a")
    assert run("recover", first, "--yes", "--backup-dir", tmp_path / "bk-a").exit_code == 0
    kept = [p for p in (tmp_path / "bk-a").rglob("*") if p.is_file()]
    assert any(p.parent.name == "files" for p in kept) and any(p.parent.name == "ranges" for p in kept)  # the dispatch's files, the cut's range
    block = os.statvfs(tmp_path).f_frsize or 4096
    again = [tmp_path / "bk-a" / "manifest.json", *[tmp_path / "bk-a" / "journal.jsonl"] * 2]
    room = sum(-(-p.stat().st_size // block) * block for p in kept + again) + block  # each file rounded up to a block, and one to spare
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(room, 0, room))
    second = copy_store("4.9.7", "rewrite-clean", tmp_path / "b")
    before = tree(second)
    done = run("recover", second, "--yes", "--backup-dir", tmp_path / "bk-b")
    assert done.exit_code == 0, done.stderr
    assert run("restore", tmp_path / "bk-b", "--yes").exit_code == 0 and tree(second) == before


def test_a_saved_plan_with_an_op_mqtool_does_not_apply_is_bad_input(crashed, tmp_path):
    """Before: a saved plan edited to hold an op no executor method writes made a backup set, then failed at that step as an
    internal error (exit 5, "please report this"). Now it is refused with the plan's other flaws, before any backup: one line,
    exit 3, the store untouched."""
    import json

    from mqtool.errors import EXIT_BAD_INPUT

    assert run("recover", crashed, "--plan-out", tmp_path / "plan.json").exit_code == 0
    doc = json.loads((tmp_path / "plan.json").read_text())
    doc["actions"][-1]["op"] = "frobnicate"
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    before = tree(crashed)
    done = run("apply", tmp_path / "plan.json", "--yes", "--backup-dir", tmp_path / "bk")
    assert done.exit_code == EXIT_BAD_INPUT, done.stderr
    assert done.stderr.splitlines()[-1] == "mqtool: error: the plan's action 'frobnicate' is no operation mqtool applies: not a valid mqtool plan"
    assert tree(crashed) == before and not (tmp_path / "bk").exists()


@pytest.mark.parametrize("command", ["recover", "repair", "rebuild-cq", "rebuild-index", "truncate-dirty"])
def test_a_queue_directory_named_otherwise_than_its_id_is_refused_before_any_plan(tmp_path, command):
    """4.9.7 ``clean-small`` with ``consumequeue/TopicTest/1`` renamed ``01``: the broker takes the id 1 from the name but reads
    and writes queue 1 in ``TopicTest/1`` (``ConsumeQueue``'s path), never in ``01``. Before, the plans read ``01`` as queue 1
    and repair wrote its rebuilt queue into a new ``1/`` beside it (verify then reading ``01`` still): now every write command
    refuses (exit 4), naming both directories, and changes nothing."""
    store = copy_store("4.9.7", "clean-small", tmp_path / "s")
    (store / "consumequeue" / "TopicTest" / "1").rename(store / "consumequeue" / "TopicTest" / "01")
    before = tree(store)
    result = run(command, store, "--yes", "--backup-dir", tmp_path / "b")
    assert result.exit_code == 4, result.output
    assert "consumequeue/TopicTest/01: a queue directory the broker reads as queue 1 of TopicTest" in result.stderr
    assert "consumequeue/TopicTest/1, never in this one" in result.stderr
    assert tree(store) == before and not (tmp_path / "b").exists()


def test_a_full_disk_in_salvage_names_the_output_that_ran_out_of_room(tmp_path, monkeypatch):
    """Before: `salvage --to-store OUT --out FILE` on a full disk said "cannot write: No space left on device", naming neither
    output. Now the line names the one whose write failed: the rows' file (/dev/full), or the new store being built."""
    import errno
    import os

    source = copy_store("5.3.3", "crashed-small", tmp_path / "src")
    rows = run("salvage", source, "-f", "jsonl", "--out", "/dev/full")
    assert rows.exit_code == 3 and rows.stderr.endswith("mqtool: error: /dev/full: No space left on device\n"), rows.stderr
    real = os.pwrite

    def pwrite(fd, data, offset):  # the new store's queue files: their disk is full
        if "out.mqtool-partial" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    full = run("salvage", source, "--to-store", tmp_path / "out", "-f", "jsonl", "--out", tmp_path / "rows.jsonl")
    assert full.exit_code == 3 and full.stderr.endswith(f"mqtool: error: {tmp_path}/out.mqtool-partial: No space left on device\n"), full.stderr


KILLED_WRITING_THE_MANIFEST = """import os, signal, sys
import mqtool.apply.backup as backup
write = backup.write_atomic
backup.write_atomic = lambda path, *a, **k: os.kill(os.getpid(), signal.SIGKILL) if path.name == "manifest.json" else write(path, *a, **k)
sys.argv[0] = "mqtool"
from mqtool.__main__ import main
main()
"""


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_a_kill_before_the_backups_manifest_leaves_no_folder_restore_takes_for_a_backup(tmp_path, command):
    """SIGKILL between making the backup folder and writing its manifest. Before: the folder the plan named stayed, empty
    (a repair's holding an empty stage), and `restore` of it said "not an mqtool backup (no manifest.json)". The folder is
    made under a temporary name and renamed into place with its manifest: `restore` says the store was never changed, with
    `-f json` too (one document, exit 0 as the text form); `info` says nothing was interrupted; the same command applies it."""
    import json
    import subprocess
    import sys

    from conftest import ROOT

    store, target = copy_store("4.9.7", "crashed-small", tmp_path / "s"), tmp_path / "bk"
    before = tree(store)
    args = [command, str(store), "--yes", "--backup-dir", str(target)]
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITING_THE_MANIFEST, *args], capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -9 and tree(store) == before and not target.exists(), killed.stderr
    for fmt in ("table", "json"):
        said = run("restore", target, "--yes", "-f", fmt)
        assert said.exit_code == 0 and "the store was never changed" in " ".join(said.stderr.split()), said.stderr
    doc = json.loads(said.stdout)
    assert (doc["backup"], doc["restored"], doc["store_changed"]) == (str(target), [], False) and "never changed" in doc["why"]
    assert "interrupted" not in run("info", store).stderr
    again = run(*args)
    assert again.exit_code in (0, 1) and (target / "manifest.json").is_file() != (command == "repair"), again.stderr
    assert not target.with_name("bk.mqtool-tmp").exists() and run("restore", target, "--yes").exit_code == 0 and tree(store) == before


def test_an_interrupted_rebuild_of_one_topic_is_finished_by_the_command_named(tmp_path, monkeypatch):
    """`rebuild-cq STORE --topic T --yes` killed once its apply began. Before: "run `mqtool rebuild-cq STORE --yes`", which
    finishes it and then rebuilds every other topic's queues too; the store unquoted. Now the line gives the options the plan
    was made with, quoted: pasted, it finishes that apply and plans nothing more."""
    import re

    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    (store / "consumequeue" / "TopicTest" / "1" / "00000000000000000000").unlink()
    killed_at(monkeypatch, ["rebuild-cq", store, "--topic", "TopicTest", "--yes", "--backup-dir", tmp_path / "bk"], 2)
    line = run("info", store).stderr.splitlines()[0]
    finish = shlex.split(re.findall(r"`([^`]*)`", line)[0])
    assert finish == ["mqtool", "rebuild-cq", str(store), "--topic", "TopicTest", "--yes"], line
    again = run(*finish[1:])
    assert again.exit_code == 0 and "the interrupted rebuild-cq apply is finished, which leaves nothing to do" in again.stderr, again.stderr
