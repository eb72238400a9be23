"""The repair commands end to end: plan first, ``--yes`` to act, ``--dry-run``, ``--plan-out`` +
``apply``, ``restore``, refusal (exit 4) on a store a live process holds, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import pytest
from conftest import copy_store, manifest, recovered
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_REFUSED
from mqtool.store import Store
from mqtool.store.liveness import lock_holder, store_users
from repair_support import damage_index_entry, tree

runner = CliRunner()
MODIFYING = ("truncate-dirty", "recover", "repair", "rebuild-cq", "rebuild-index")


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def error_line(result, code):
    assert result.exit_code == code, (result.stdout, result.stderr)
    err = result.stderr.strip().splitlines()[-1]
    assert err.startswith("mqtool: error: ") and "Traceback" not in result.stderr
    return err


@pytest.fixture
def crashed(tmp_path):
    return copy_store("5.3.3", "crashed-small", tmp_path)


def test_plan_only_without_yes(crashed):
    before = tree(crashed)
    assert "re-run with --yes" in error_line(run("recover", crashed), EXIT_REFUSED)
    dry = run("recover", crashed, "--dry-run", "-f", "json")
    assert dry.exit_code == 0
    plan = json.loads(dry.stdout)
    assert plan["format"] == "mqtool-plan/1" and plan["mode"] == "abnormal" and plan["remove_abort"]
    assert [a["op"] for a in plan["actions"]][-1] == "delete"
    table = run("recover", crashed, "--dry-run")
    assert "Actions" in table.stdout and "valid end" in table.stdout
    assert tree(crashed) == before


def test_an_index_rebuild_plan_shows_only_what_applies(crashed):
    """rebuild-index writes no consume queue entry and has no recovery mode: its table shows neither a
    queue nor a tags code column nor a mode row (before: "0", "delivery-time" and "-"); the JSON keeps every field."""
    doc = json.loads(run("rebuild-index", crashed, "--dry-run", "-f", "json").stdout)
    assert doc["mode"] is None
    assert [(p["consume_queues"], p["cq_records"], p["tags"]) for p in doc["dispatch"]] == [(False, 0, "delivery-time")]
    lines = run("rebuild-index", crashed, "--dry-run").stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("phase")))
    assert lines[header].split() == ["phase", "from", "to", "records", "index"] and not any(line.startswith("mode") for line in lines)
    end = recovered("5.3.3", "crashed-small")["commitLog"]["maxOffset"]
    assert lines[header + 2].split() == ["rebuild", "0", str(end), str(len(manifest("5.3.3", "crashed-small")["messages"])), "yes"]
    queues = run("rebuild-cq", crashed, "--dry-run").stdout.splitlines()
    assert next(line for line in queues if line.startswith("phase")).split()[4:] == ["to", "consume", "queues", "tags", "code", "index"]


def test_yes_applies_then_restore_undoes(crashed, tmp_path):
    before = tree(crashed)
    done = run("recover", crashed, "--yes", "--backup-dir", tmp_path / "bk")
    assert done.exit_code == 0, done.stderr
    assert "mqtool restore" in done.stderr and not (crashed / "abort").exists()
    assert run("recover", crashed).exit_code == 0  # nothing left to do
    shown = run("restore", tmp_path / "bk", "-f", "json")
    assert shown.exit_code == EXIT_REFUSED and json.loads(shown.stdout)["complete"] is True
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0
    assert tree(crashed) == before


def test_default_backup_dir_is_beside_the_store(crashed):
    assert run("recover", crashed, "--yes").exit_code == 0
    backups = list((crashed.parent / ".mqtool-backups").iterdir())
    assert len(backups) == 1 and backups[0].name.startswith(crashed.name) and backups[0].name.endswith("-recover")
    assert (backups[0] / "manifest.json").exists() and (backups[0] / "journal.jsonl").exists()


def test_default_backup_names_sort_as_the_applies_ran_across_a_second(monkeypatch):
    """Before: the name's second and its milliseconds were two clock readings, so an apply named at .999 whose
    milliseconds were read at the next .000 sorted before the apply at .722 of the same second (restore's newest-first
    order and `ls` both said the wrong one was later)."""
    import time as real_time

    from mqtool.apply import backup

    readings = iter([1000.722, 1000.723, 1000.999, 1001.000])  # each clock reading the naming takes, in turn

    class Clock:
        @staticmethod
        def time():
            return next(readings)

        @staticmethod
        def gmtime(seconds=None):
            return real_time.gmtime(next(readings) if seconds is None else seconds)

        strftime = staticmethod(real_time.strftime)

    monkeypatch.setattr(backup, "time", Clock)
    first, second = (backup.default_backup_dir(Path("/data/store"), "recover").name for _ in range(2))
    assert first < second, (first, second)


def test_saved_plan_applies_exactly_and_refuses_once_stale(crashed, tmp_path):
    plan_file = tmp_path / "plan.json"
    saved = run("recover", crashed, "--plan-out", plan_file)
    assert saved.exit_code == 0 and plan_file.exists() and (crashed / "abort").exists()
    text = plan_file.read_text(encoding="utf-8")
    doc, lines = json.loads(text), {line.strip().removesuffix(",") for line in text.splitlines()}
    items = [*doc["queues"], *doc["actions"], *doc["inputs"]]  # read in `less`: a queue, an action, a file a line
    assert len(doc["inputs"]) > 40 and all(json.dumps(item, ensure_ascii=False) in lines for item in items)
    assert error_line(run("apply", plan_file), EXIT_REFUSED)
    applied = run("apply", plan_file, "--yes", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == 0, applied.stderr
    assert not (crashed / "abort").exists()
    assert "changed since the plan" in error_line(run("apply", plan_file, "--yes"), EXIT_REFUSED)  # already applied
    # a plan saved, then a file it reads changes: refused
    other = copy_store("4.9.7", "crashed-small", tmp_path / "other")
    assert run("recover", other, "--plan-out", tmp_path / "p2.json").exit_code == 0
    cq = next((other / "consumequeue").rglob("00000000000000000000"))
    data = bytearray(cq.read_bytes())
    data[5] ^= 1
    cq.write_bytes(bytes(data))
    assert "changed since the plan" in error_line(run("apply", tmp_path / "p2.json", "--yes"), EXIT_REFUSED)


@pytest.mark.parametrize("edit", ["action", "queue"])
def test_an_edited_plan_that_writes_outside_the_store_is_refused(tmp_path, edit):
    """A saved plan whose action path, or the topic of a queue whose files it writes, leads out of
    the store (``../``) and is no file the plan read: refused before anything is written (found by
    using an edited plan: ``apply --yes`` deleted a file beside the store)."""
    crashed = copy_store("5.3.3" if edit == "action" else "3.2.6", "crashed-small", tmp_path)
    plan_file = tmp_path / "plan.json"
    assert run("recover" if edit == "action" else "rebuild-cq", crashed, "--plan-out", plan_file).exit_code == 0
    doc = json.loads(plan_file.read_text())
    victim = crashed.parent / "outside.txt"
    victim.write_text("not the store's")
    if edit == "action":
        action = next(a for a in doc["actions"] if a["op"] == "delete")
        action["path"] = "../outside.txt"
    else:
        next(q for q in doc["queues"] if q["files"])["topic"] = "../../escape"
    plan_file.write_text(json.dumps(doc))
    before = tree(crashed)
    err = error_line(run("apply", plan_file, "--yes", "--backup-dir", tmp_path / "bk"), EXIT_REFUSED)
    assert "outside the store" in err
    assert victim.read_text() == "not the store's" and tree(crashed) == before and not (tmp_path / "bk").exists()


def test_a_commit_log_outside_the_store_directory_is_recovered_and_restored(tmp_path):
    """``storePathCommitLog`` naming a directory beside the store: the plan's paths to it leave
    the store (``../``), and are the files it read, so the apply goes on; restore gives them back."""
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    outside = tmp_path / "disk2" / "commitlog"
    outside.parent.mkdir()
    (store_dir / "commitlog").rename(outside)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store_dir}\nstorePathCommitLog={outside}\n")
    before = {**tree(store_dir), **{f"../disk2/{k}": v for k, v in tree(outside.parent).items()}}
    done = run("recover", store_dir, "--broker-config", conf, "--yes", "--backup-dir", tmp_path / "bk")
    assert done.exit_code == 0, done.stderr
    assert not (store_dir / "abort").exists()
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0
    assert {**tree(store_dir), **{f"../disk2/{k}": v for k, v in tree(outside.parent).items()}} == before


def test_a_store_without_its_commit_log_folder_is_not_planned(tmp_path):
    """The commit log in another folder (storePathCommitLog), no --broker-config. Before: the repair commands
    planned on an empty log, so recover and rebuild-cq deleted every consume queue file with --yes; now each says
    which folder is missing and how to name it (exit 3) and changes nothing, and info notes it."""
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    (store_dir / "commitlog").rename(tmp_path / "commitlog")
    before = tree(store_dir)
    for command in ("recover", "repair", "truncate-dirty", "rebuild-cq", "rebuild-index"):
        err = error_line(run(command, store_dir, "--yes", "--backup-dir", tmp_path / "bk"), EXIT_BAD_INPUT)
        assert err.startswith(f"mqtool: error: {store_dir / 'commitlog'}: no such folder") and "--broker-config" in err, command
    assert tree(store_dir) == before and not (tmp_path / "bk").exists()
    notes = json.loads(run("info", store_dir, "--format", "json").stdout)["notes"]
    assert any(n.startswith("no commitlog/ folder") for n in notes)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathCommitLog={tmp_path / 'commitlog'}\n")
    assert run("recover", store_dir, "--broker-config", conf, "--yes", "--backup-dir", tmp_path / "bk").exit_code == 0


@pytest.mark.parametrize("name,moved,setting", [("clean-small", "commitlog", "storePathCommitLog={}"),
                                                  ("dledger-small", "dledger-n0", "enableDLegerCommitLog=true\nstorePathDLedgerCommitLog={}/data\ndLegerSelfId=n0")])
def test_a_log_in_another_folder_is_the_log_the_apply_reads(tmp_path, name, moved, setting):
    """The commit log (``storePathCommitLog``) or DLedger data (``storePathDLedgerCommitLog``) outside the store,
    an index file lost. Before: the plan saved only the sizes of the broker config, so the apply reopened the store
    without the log's folder, read no record, wrote no index file ("index files written differ from the plan") and
    `repair` undid itself; a saved rebuild-index plan failed in `apply` the same way."""
    store_dir = copy_store("4.9.7", name, tmp_path / "s")
    outside = tmp_path / "disk2" / moved
    outside.parent.mkdir()
    (store_dir / moved).rename(outside)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store_dir}\n" + setting.format(outside) + "\n")
    for index_file in (store_dir / "index").iterdir():
        index_file.unlink()

    def state():
        return {**tree(store_dir), **{f"../disk2/{k}": v for k, v in tree(outside.parent).items()}}

    before = state()
    done = run("repair", store_dir, "--broker-config", conf, "--yes", "--backup-dir", tmp_path / "bk")
    assert done.exit_code == 0 and "rebuild-index" in done.stderr, done.stderr[-2000:]
    verified = run("verify", store_dir, "--broker-config", conf, "--format", "json")
    assert verified.exit_code == 0 and json.loads(verified.stdout)["summary"]["index"]["entries"] > 0
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0
    assert state() == before
    plan_file = tmp_path / "plan.json"
    assert run("rebuild-index", store_dir, "--broker-config", conf, "--plan-out", plan_file).exit_code == 0
    done = run("apply", plan_file, "--yes", "--backup-dir", tmp_path / "bk2")
    assert done.exit_code == 0, done.stderr[-2000:]
    assert run("verify", store_dir, "--broker-config", conf).exit_code == 0


@pytest.fixture
def lock_holder_process(crashed):
    """Another process holding the store's lock the way the broker does (fcntl, byte 0)."""
    code = "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('locked', flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, str(crashed / "lock")], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    yield proc
    proc.kill()
    proc.wait()


def test_every_modifying_command_refuses_a_locked_store(crashed, tmp_path, lock_holder_process):
    pid = lock_holder_process.pid
    assert lock_holder(crashed) == pid
    assert any(u.pid == pid and u.how == "lock" for u in store_users(crashed))
    before = tree(crashed)
    for command in MODIFYING:
        err = error_line(run(command, crashed, "--yes"), EXIT_REFUSED)
        assert "in use" in err and str(pid) in err, command
    plan_file = tmp_path / "plan.json"
    assert run("recover", crashed, "--plan-out", plan_file).exit_code == 0  # planning alone is read-only
    assert str(pid) in error_line(run("apply", plan_file, "--yes"), EXIT_REFUSED)
    assert tree(crashed) == before


def test_restore_refuses_a_locked_store(tmp_path):
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    assert run("recover", store_dir, "--yes", "--backup-dir", tmp_path / "bk").exit_code == 0
    code = "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX, 1, 0); print('locked', flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, str(store_dir / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        assert "in use" in error_line(run("restore", tmp_path / "bk", "--yes"), EXIT_REFUSED)
    finally:
        proc.kill()
        proc.wait()


def test_force_overrides_with_a_warning(crashed, lock_holder_process):
    done = run("truncate-dirty", crashed, "--yes", "--force")
    assert done.exit_code == 0, done.stderr
    assert "warning: --force" in done.stderr


def test_a_process_with_a_store_file_open_is_detected(crashed):
    """Before it takes the lock, a recovering broker already has the files open and mapped."""
    target = next((crashed / "commitlog").iterdir())
    code = "import mmap,sys,time; f=open(sys.argv[1],'rb'); m=mmap.mmap(f.fileno(),0,access=mmap.ACCESS_READ); print('open', flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        users = [u for u in store_users(crashed) if u.pid == proc.pid]
        assert {u.how for u in users} == {"open", "mapped"} and lock_holder(crashed) is None
        assert str(proc.pid) in error_line(run("recover", crashed, "--yes"), EXIT_REFUSED)
    finally:
        proc.kill()
        proc.wait()


def test_apply_and_restore_refuse_a_process_mapping_a_commit_log_on_another_disk(tmp_path, second_disk):
    """``commitlog`` a link to another disk (``storePathCommitLog``), a broker mapping a segment there before it takes the
    lock: ``apply`` of a saved plan and ``restore`` refuse, as ``recover --yes`` does. Before, both looked for users under
    the store's own folder only."""
    import shutil

    store_dir = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    shutil.move(store_dir / "commitlog", second_disk / "commitlog")
    (store_dir / "commitlog").symlink_to(second_disk / "commitlog")
    assert run("recover", store_dir, "--plan-out", tmp_path / "plan.json").exit_code == 0
    assert run("recover", store_dir, "--yes", "--backup-dir", tmp_path / "bk").exit_code == 0  # a backup to restore
    target = second_disk / "commitlog" / "00000000000000000000"
    code = "import mmap,sys,time; f=open(sys.argv[1],'rb'); m=mmap.mmap(f.fileno(),0,access=mmap.ACCESS_READ); print('open', flush=True); time.sleep(120)"
    proc = subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
        before = {**tree(store_dir), **tree(second_disk)}
        for args in (("apply", tmp_path / "plan.json", "--yes"), ("restore", tmp_path / "bk", "--yes"), ("restore", tmp_path / "bk")):
            assert str(proc.pid) in error_line(run(*args), EXIT_REFUSED), args
        assert {**tree(store_dir), **tree(second_disk)} == before
    finally:
        proc.kill()
        proc.wait()


def test_bad_inputs_are_one_line_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "not a RocketMQ store" in error_line(run("recover", tmp_path / "empty"), EXIT_BAD_INPUT)
    assert error_line(run("recover", tmp_path / "missing"), EXIT_BAD_INPUT)
    (tmp_path / "plan.json").write_text("{not json")
    assert "not a valid mqtool plan" in error_line(run("apply", tmp_path / "plan.json", "--yes"), EXIT_BAD_INPUT)
    (tmp_path / "other.json").write_text(json.dumps({"format": "something-else"}))
    assert error_line(run("apply", tmp_path / "other.json", "--yes"), EXIT_BAD_INPUT)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    assert "not an mqtool backup" in error_line(run("restore", tmp_path / "other", "--yes"), EXIT_BAD_INPUT)
    # an empty directory is no backup (before: exit 0, "nothing to restore"); an apply killed writing its manifest leaves its temporary file
    assert "not an mqtool backup" in error_line(run("restore", tmp_path / "empty", "--yes"), EXIT_BAD_INPUT)
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / "manifest.json.mqtool-tmp").write_bytes(b"")
    killed = run("restore", tmp_path / "killed", "--yes")
    assert killed.exit_code == 0 and "nothing to restore" in killed.stderr and "store was never changed" in " ".join(killed.stderr.split())
    zeros = tmp_path / "zeros"
    (zeros / "commitlog").mkdir(parents=True)
    (zeros / "commitlog" / f"{0:020d}").write_bytes(bytes(1 << 16))
    result = run("recover", zeros, "--dry-run", "--format", "json")  # no record: every era plans the same
    assert result.exit_code == 0 and "the plans are equal" in json.loads(result.stdout)["version_source"], result.stderr
    with Store.open(zeros, version="4.9.7") as store:
        assert store.version is not None
    assert run("recover", zeros, "--broker-version", "4.9.7", "--dry-run").exit_code == 0


def test_interrupted_apply_is_finished_by_the_next_command(crashed, tmp_path, monkeypatch):
    import mqtool.apply.executor as executor

    class Killed(BaseException):
        pass

    calls = {"n": 0}

    def die(label):
        calls["n"] += 1
        if calls["n"] == 3:
            raise Killed(label)

    monkeypatch.setattr(executor, "durability_point", die)
    with pytest.raises(Killed):
        runner.invoke(app, ["recover", str(crashed), "--yes", "--backup-dir", str(tmp_path / "bk")], catch_exceptions=False)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    assert "interrupted" in error_line(run("rebuild-index", crashed), EXIT_REFUSED)
    done = run("recover", crashed, "--yes")
    assert done.exit_code == 0 and "finishing the interrupted apply" in done.stderr
    assert not (crashed / ".mqtool-pending").exists() and not (crashed / "abort").exists()


def test_an_unwritable_backup_dir_changes_nothing(crashed, tmp_path):
    before = tree(crashed)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    err = error_line(run("recover", crashed, "--yes", "--backup-dir", blocker / "backup"), EXIT_BAD_INPUT)
    assert "nothing was changed" in err
    assert tree(crashed) == before


def test_unsupported_queue_stores_are_refused(tmp_path):
    rocks = copy_store("5.3.3", "clean-small", tmp_path / "rocks")
    (rocks / "consumequeue" / "CURRENT").write_text("MANIFEST-000001\n")
    assert "RocksDB" in error_line(run("recover", rocks, "--dry-run"), EXIT_BAD_INPUT)
    batch = copy_store("5.3.3", "clean-small", tmp_path / "batch")
    (batch / "batchconsumequeue" / "BatchTopic" / "0").mkdir(parents=True)
    assert "BatchConsumeQueue" in error_line(run("rebuild-cq", batch, "--dry-run"), EXIT_BAD_INPUT)


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_an_interrupted_apply_is_finished_holding_the_store_lock(crashed, tmp_path, monkeypatch, command):
    """The next command finishes an interrupted apply before its own; before, it did so without the
    store's lock, so a broker (or another mqtool) starting meanwhile was not kept out."""
    import mqtool.apply.executor as executor

    class Killed(BaseException):
        pass

    def die(label):
        raise Killed(label)

    monkeypatch.setattr(executor, "durability_point", die)
    with pytest.raises(Killed):
        runner.invoke(app, ["recover", str(crashed), "--yes", "--backup-dir", str(tmp_path / "bk")], catch_exceptions=False)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    probe = "import fcntl,os,sys; fd=os.open(sys.argv[1], os.O_RDWR); fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)"
    taken, run_executor = [], executor.Executor.run

    def finishing(self):
        taken.append(subprocess.run([sys.executable, "-c", probe, str(crashed / "lock")], capture_output=True).returncode == 0)
        run_executor(self)

    monkeypatch.setattr(executor.Executor, "run", finishing)
    done = run(command, crashed, "--yes")
    assert "finishing the interrupted apply" in done.stderr, done.stderr
    assert taken and not taken[0]  # the first run is the finishing one: nobody else could take the lock


@pytest.mark.parametrize("command", [*MODIFYING, "apply"])
def test_an_apply_says_where_its_backup_is_even_quiet_and_in_its_json(crashed, tmp_path, command):
    """Before: with -q an apply printed nothing of where its backup went, and its JSON had no ``backup``: a user of a
    write learnt nowhere how to undo it. Now the two lines (what it did, where, and the undo command) are said even
    with -q, and the document has ``backup``, from which ``restore`` undoes it byte for byte."""
    if command == "rebuild-cq":  # a queue file lost: the one thing the crashed store leaves it to do
        sorted((crashed / "consumequeue").glob("*/*/0*"))[0].unlink()
    if command == "rebuild-index":  # an index entry damaged: else the crashed store's index already equals the rebuild
        damage_index_entry(crashed)
    before, backup = tree(crashed), tmp_path / "bk"
    args, applied = [command, crashed], command
    if command == "apply":
        assert run("recover", crashed, "--plan-out", tmp_path / "plan.json").exit_code == 0
        args, applied = ["apply", tmp_path / "plan.json"], "recover"
    done = run("-q", *args, "--yes", "--backup-dir", backup, "-f", "json")
    assert done.exit_code == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["backup"] == str(backup)
    said = done.stderr.splitlines()
    assert len(said) == 2 and said[0].startswith(f"mqtool: {applied} applied") and said[0].endswith(f"in {backup}"), said
    assert said[1] == f"mqtool: undo with: mqtool restore {backup} --yes"
    shown = run("restore", doc["backup"], "-f", "json")  # restore's document names the backup it shows
    assert shown.exit_code == EXIT_REFUSED and json.loads(shown.stdout)["backup"] == str(backup)
    restored = run("-q", "restore", doc["backup"], "--yes")  # a write too: what it did said under -q
    assert restored.exit_code == 0 and restored.stderr.splitlines()[-1].split(": ")[-1].startswith("restored "), restored.stderr  # a repair's: "stage 01-...: restored"
    assert tree(crashed) == before
    plan_only = run(*args, "--dry-run", "-f", "json") if command != "apply" else run(*args, "-f", "json")
    assert "backup" not in json.loads(plan_only.stdout)  # no apply, no backup


def backup_dir_commands() -> list[str]:
    """Every command that takes --backup-dir."""
    import typer

    group = typer.main.get_command(app)
    ctx = group.make_context("mqtool", ["info", "--help"], resilient_parsing=True)
    commands = {name: group.get_command(ctx, name) for name in group.list_commands(ctx)}
    return sorted(name for name, cmd in commands.items() if any("--backup-dir" in p.opts for p in cmd.params))


def test_every_command_taking_backup_dir_refuses_an_empty_one(crashed, tmp_path, monkeypatch):
    """Before: `--backup-dir ""` was the current directory (``Path("")`` is ``.``): an apply backed up into wherever
    it was run from, or, run from the store, was refused as a backup inside the store. Now a usage error (exit 2)."""
    commands = backup_dir_commands()
    assert set(commands) == {*MODIFYING, "apply"}
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    before = tree(crashed)
    assert run("recover", crashed, "--plan-out", tmp_path / "plan.json").exit_code == 0
    for command in commands:
        given = tmp_path / "plan.json" if command == "apply" else crashed
        err = error_line(run(command, given, "--yes", "--backup-dir", ""), 2)
        assert "--backup-dir" in err and "empty" in err, err
    assert tree(crashed) == before and not any(here.iterdir())


@pytest.mark.parametrize("command", ["recover", "repair"])
@pytest.mark.parametrize("inside", ["", "bk", "commitlog/bk"])
def test_a_backup_dir_in_the_store_is_refused_by_the_name_given(crashed, command, inside):
    """Before: `repair --backup-dir STORE` was refused as a backup directory that is not empty (exit 3), and
    `repair --backup-dir STORE/bk` named its first stage's directory, `STORE/bk/01-files`, which the user never gave."""
    before = tree(crashed)
    given = crashed / inside if inside else crashed
    err = error_line(run(command, crashed, "--yes", "--backup-dir", given), EXIT_REFUSED)
    assert err.startswith(f"mqtool: error: {given}: the backup directory is inside the store"), err
    assert tree(crashed) == before and not (crashed / "bk").exists() and not (crashed / "commitlog" / "bk").exists()
