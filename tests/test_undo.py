"""Undo (issue #28): ``restore`` of any apply, one stage or several, puts the store back byte for
byte (directories too) without --force; a file something else changed is refused by name; a
restore cut short finishes when run again. An apply is never decided by its output (a closed
stdout or stderr) and a Ctrl-C stops it before a write or not at all. A plan the apply cannot
carry out stops before the first destructive step, with the store unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import FIXTURES, copy_store
from typer.testing import CliRunner

import mqtool.apply.backup as backup_module
from mqtool.apply import BackupSet, read_pending, restore
from mqtool.apply.backup import STAGING_DIR, repair_stages
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_INTERNAL, EXIT_OK, EXIT_REFUSED
from mqtool.fileops import shell_path
from repair_support import ROOT, cli, damage_index_entry, index_rebuild_rewrites_every_file, mqtool

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def snapshot(root: Path) -> dict[str, str | None]:
    """``diff -r``'s view of a tree: every directory and every file's bytes."""
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else None for p in sorted(Path(root).rglob("*"))}


def fixture_stores() -> list[tuple[str, str]]:
    """Every fixture store (a directory with a manifest beside it), every version."""
    out = []
    for version_dir in sorted(FIXTURES.glob("rocketmq-*")):
        for manifest_file in sorted(version_dir.glob("*.manifest.json")):
            name = manifest_file.name[: -len(".manifest.json")]
            if (version_dir / name).is_dir():
                out.append((version_dir.name[len("rocketmq-"):], name))
    return out


def data_file(root: Path) -> Path:
    """The first commit log segment, or DLedger data file."""
    files = sorted((root / "commitlog").glob("0*")) or sorted(root.glob("dledger-*/data/0*"))
    return files[0]


def damage(root: Path, kind: str) -> None:
    """Deterministic damage to the first data file: ``zeroed`` 4 KiB in its middle, ``flipped``
    bits of one byte two thirds in, ``cut`` to five eighths of its size."""
    path = data_file(root)
    size = path.stat().st_size
    if kind == "zeroed":
        with open(path, "r+b") as f:
            f.seek(size // 2)
            f.write(bytes(4096))
    elif kind == "flipped":
        data = bytearray(path.read_bytes())
        data[2 * size // 3] ^= 0x5A
        path.write_bytes(bytes(data))
    elif kind == "cut":
        os.truncate(path, 5 * size // 8)


DAMAGES = ("none", "zeroed", "flipped", "cut")
CASES = [(v, n, d) for i, (v, n) in enumerate(fixture_stores()) for d in ("none", DAMAGES[1 + i % 3])]


@pytest.mark.parametrize("command", ["repair", "recover"])
@pytest.mark.parametrize("version,name,kind", CASES, ids=[f"{v}-{n}-{d}" for v, n, d in CASES])
def test_restore_of_every_apply_gives_back_the_store_byte_for_byte(command, version, name, kind, tmp_path):
    store = copy_store(version, name, tmp_path)
    damage(store, kind)
    before = snapshot(store)
    applied = run(command, store, "--yes", "--backup-dir", tmp_path / "backup", "--broker-version", version)
    # exit 3: a store the command refuses (recover on a cut segment: repair fixes that first; a cut DLedger data file);
    # exit 4: a recovery mqtool does not plan (a length mismatch under <= 4.3.1's abnormal recovery, rules §2.7)
    assert "Traceback" not in applied.stderr and applied.exit_code in (EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_REFUSED), applied.stderr
    assert read_pending(store) is None and not (store / STAGING_DIR).exists()
    if not (tmp_path / "backup").exists():  # nothing to do, or refused
        assert snapshot(store) == before
        return
    restored = run("restore", tmp_path / "backup", "--yes")
    assert restored.exit_code == EXIT_OK, restored.stderr
    assert "temporary files" not in restored.stderr  # no earlier run left any
    assert snapshot(store) == before


@pytest.fixture
def repaired(tmp_path):
    """rewrite-clean after a two-stage repair (recover, rebuild-cq), with its snapshot before."""
    store = copy_store("4.9.7", "rewrite-clean", tmp_path)
    before = snapshot(store)
    result = run("repair", store, "--yes", "--backup-dir", tmp_path / "backup")
    assert result.exit_code == EXIT_OK, result.stderr
    stages = sorted(p.name for p in (tmp_path / "backup").iterdir())
    assert stages == ["01-recover", "02-rebuild-cq"]
    return store, tmp_path / "backup", before


def test_a_file_changed_by_someone_else_is_refused_by_name_before_any_stage_is_restored(repaired):
    store, backup, _ = repaired
    first, second = (BackupSet.open(backup / s) for s in ("01-recover", "02-rebuild-cq"))
    only_first = sorted(set(first.touched()) - set(second.touched()))[0]
    after = snapshot(store)
    os.utime(store / only_first, ns=(0, 10**18))  # a broker wrote to it
    result = run("restore", backup, "--yes")
    assert result.exit_code == EXIT_REFUSED and only_first in result.stderr, result.stderr
    assert snapshot(store) == after  # not even the last stage was restored


def test_every_message_on_a_stage_cut_short_names_the_whole_repair_to_undo(repaired):
    """An apply cut short in a repair's second stage (the marker names ``02-rebuild-cq``). Before: the
    commands that refuse to go on said "undo it with: mqtool restore BACKUP/02-rebuild-cq", which undoes
    that stage alone, while ``info`` said the whole repair; every message now names ``restore BACKUP``."""
    from mqtool.apply.backup import undo_command, write_pending

    store, backup, _ = repaired
    assert undo_command(backup / "02-rebuild-cq") == undo_command(backup) == f"mqtool restore {backup} --yes"
    for alone in (backup.parent / "not-made-yet", backup / "02-rebuild-cq" / "x"):  # no stage: itself, made or not
        assert undo_command(alone) == f"mqtool restore {alone} --yes"
    write_pending(store, backup / "02-rebuild-cq")
    for args in (("recover", store), ("rebuild-index", store, "--dry-run")):
        result = run(*args)
        said = " ".join(result.stderr.split())
        assert f"undo it with: mqtool restore {backup} --yes" in said and "02-rebuild-cq --yes" not in said, result.stderr


def test_one_stage_restored_alone_before_the_later_one_is_refused_naming_it(repaired):
    """``restore BACKUP/01-recover`` while stage 02 (which rewrote files stage 01 had changed) stands: refused,
    naming the later stage and the whole-repair restore; the store is untouched. Then the stages in reverse
    order, each alone, give the store back. (Before: the refusal blamed "something other than mqtool".)"""
    store, backup, before = repaired
    after = snapshot(store)
    result = run("restore", backup / "01-recover", "--yes")
    assert result.exit_code == EXIT_REFUSED, result.stderr
    assert "02-rebuild-cq" in result.stderr and f"mqtool restore {backup} --yes" in result.stderr, result.stderr
    assert snapshot(store) == after
    for stage in ("02-rebuild-cq", "01-recover"):
        assert run("restore", backup / stage, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_restore_before_a_later_apply_backed_up_elsewhere_is_refused(tmp_path, monkeypatch):
    """``recover --yes`` (backup in the default folder), then ``rebuild-index --yes --backup-dir`` elsewhere, which
    rewrites the index file the recover created (``index_rebuild_rewrites_every_file``; it once deleted it and wrote another).
    Before: ``restore`` of the recover backup took
    the created file, now absent, for "as the apply found it", exit 0, and left the rebuild's index file beside the
    restored one (the store not given back). Now refused (exit 4) naming that file and the way on, the store
    untouched; restored newest first, the store comes back byte for byte."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = snapshot(store)
    assert run("recover", store, "--yes").exit_code == EXIT_OK
    (recovered,) = (tmp_path / ".mqtool-backups").iterdir()
    (created,) = BackupSet.open(recovered).summary()["created"]
    index_rebuild_rewrites_every_file(monkeypatch)
    assert run("rebuild-index", store, "--yes", "--backup-dir", tmp_path / "elsewhere").exit_code == EXIT_OK
    assert BackupSet.open(tmp_path / "elsewhere").summary()["files"] == [created]
    after = snapshot(store)
    result = run("restore", recovered, "--yes")
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_REFUSED and f"({created})" in said and "restore that backup first" in said, result.stderr
    assert snapshot(store) == after
    for backup in (tmp_path / "elsewhere", recovered):
        assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_a_backup_that_lost_a_kept_file_is_refused_before_any_stage_is_restored(repaired):
    """A copy in the first stage's backup deleted since (a clean-up of the backups folder). Before: the restore put back
    the last stage, then stopped at the missing copy with "fix this and run the restore again", which no run could do:
    the store left half restored. Now refused (exit 3) naming the file, nothing restored; with the copy back, restored."""
    store, backup, before = repaired
    first = BackupSet.open(backup / "01-recover")
    kept = first.summary()["files"][0]
    copy = first.file_copy(kept)
    saved = copy.read_bytes()
    copy.unlink()
    after = snapshot(store)
    result = run("restore", backup, "--yes")
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_BAD_INPUT and f"no longer holds what it kept of 1 file(s) ({kept})" in said, result.stderr
    assert snapshot(store) == after and read_pending(store) is None
    assert run("restore", backup).exit_code == EXIT_BAD_INPUT  # the preview says so too, not "re-run with --yes"
    copy.write_bytes(saved[:-1])  # cut: refused as well
    assert run("restore", backup, "--yes").exit_code == EXIT_BAD_INPUT and snapshot(store) == after
    copy.write_bytes(saved)
    assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_a_backup_that_lost_its_journal_is_refused_not_called_restored(tmp_path):
    """A recover backup whose journal.jsonl was lost (a partial copy of the backups folder). Before: restore said
    "restored 0 file(s)/range(s)", exit 0, the store still recovered, and marked the backup restored, so a run with the
    journal back said "nothing to restore". Now refused (exit 3) naming the files, nothing changed; with it back, restored."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = snapshot(store)
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    journal = tmp_path / "backup" / "journal.jsonl"
    saved = journal.read_bytes()
    journal.unlink()
    after = snapshot(store)
    result = run("restore", tmp_path / "backup", "--yes")
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_BAD_INPUT and "no longer holds what it kept of 5 file(s) (abort, checkpoint," in said, result.stderr
    assert snapshot(store) == after and not journal.exists()
    journal.write_bytes(saved)
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_a_repairs_backup_is_shown_whole_and_as_one_json_document(repaired):
    """Before: ``restore REPAIR`` without --yes showed the last stage's summary only, then refused, so the preview never
    listed what the earlier stages would put back; and ``-f json`` wrote one JSON document per stage, which no JSON
    reader takes. Now one document: the repair's directory and every stage's summary, in the order restored."""
    store, backup, before = repaired
    shown = run("restore", backup)
    assert shown.exit_code == EXIT_REFUSED and shown.stdout.count("Backup\n") == 2, shown.stdout
    assert f"{backup / '01-recover'}" in shown.stdout and f"{backup / '02-rebuild-cq'}" in shown.stdout
    done = run("restore", backup, "--yes", "-f", "json")
    assert done.exit_code == EXIT_OK, done.stderr
    doc = json.loads(done.stdout)
    assert doc["backup"] == str(backup) and [Path(s["backup"]).name for s in doc["stages"]] == ["02-rebuild-cq", "01-recover"]
    assert all(s["complete"] and s["restored_ms"] is None for s in doc["stages"]) and snapshot(store) == before


def test_repair_into_an_earlier_repairs_backup_dir_is_refused(repaired):
    """``repair --yes --backup-dir B`` where B holds an earlier, finished repair's stages (restored here, so there is
    again something to repair). Before: applied, its stages numbered after the earlier ones, and said "(after the 2
    the stopped run applied)" though no run had stopped. Now refused as every command's non-empty --backup-dir is
    (exit 3), nothing changed; a new directory works."""
    store, backup, before = repaired
    assert run("restore", backup, "--yes").exit_code == EXIT_OK
    result = run("repair", store, "--yes", "--backup-dir", backup)
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_BAD_INPUT and "backup directory exists and is not empty; nothing was changed" in said, result.stderr
    assert snapshot(store) == before and sorted(p.name for p in backup.iterdir()) == ["01-recover", "02-rebuild-cq"]
    again = run("repair", store, "--yes", "--backup-dir", backup.parent / "new")
    assert again.exit_code == EXIT_OK and "stopped run" not in again.stderr, again.stderr


def test_a_store_moved_since_says_what_to_do_to_restore_or_apply(tmp_path):
    """The store renamed after its plan was saved and its recover applied. Before: "the store this backup belongs to
    does not exist" and "the plan's store does not exist", with no way on. Now each says what to do (exit 3)."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    assert run("recover", store, "--plan-out", tmp_path / "plan.json").exit_code == EXIT_OK
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    store.rename(store.with_name("moved"))
    restored = run("restore", tmp_path / "backup", "--yes")
    assert restored.exit_code == EXIT_BAD_INPUT and "move the store back there, then restore" in restored.stderr, restored.stderr
    applied = run("apply", tmp_path / "plan.json", "--yes")
    assert applied.exit_code == EXIT_BAD_INPUT and "plan again on the store where it is" in applied.stderr, applied.stderr
    assert not (tmp_path / "backup" / "journal.jsonl").read_text().count("restore-started")


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_a_backup_folder_that_cannot_be_made_says_to_give_another(command, tmp_path):
    """The default backups folder cannot be made (here a file has its name; a read-only parent, a full disk alike). Before:
    "cannot create the backup: Not a directory; nothing was changed", and no way on. Now it says to give a --backup-dir."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    (tmp_path / ".mqtool-backups").write_text("not a folder")
    before = snapshot(store)
    result = run(command, store, "--yes")
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_BAD_INPUT and "nothing was changed: give a --backup-dir where it can be written" in said, result.stderr
    assert ".mqtool-tmp" not in said, result.stderr  # the folder it would make, not the temporary name it builds it under
    assert snapshot(store) == before and read_pending(store) is None


def test_restore_while_another_apply_is_interrupted_is_refused(tmp_path, monkeypatch):
    """``recover --yes``, then ``rebuild-index --yes --backup-dir OTHER`` (rewriting the recover's index file) killed part-way.
    Before: ``restore`` of the recover
    backup went ahead (exit 0) under the other apply's ``.mqtool-pending`` mark and staging folder, which the next command
    then "finished" over the restored files. Now refused (exit 4), naming that apply's ways on, the store untouched;
    undone newest first, the store comes back byte for byte."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = snapshot(store)
    assert run("recover", store, "--yes").exit_code == EXIT_OK
    (recovered,) = (tmp_path / ".mqtool-backups").iterdir()
    import mqtool.apply.executor as executor

    index_rebuild_rewrites_every_file(monkeypatch)  # it rewrites the index file the recover wrote
    points = []

    def dies(label):  # as MQTOOL_TEST_KILL_AT=2 kills a process, in this one (where the rewrite is planned)
        points.append(label)
        if len(points) == 2:
            raise Killed(label)

    monkeypatch.setattr(executor, "durability_point", dies)
    with pytest.raises(Killed):
        CliRunner().invoke(app, ["rebuild-index", str(store), "--yes", "--backup-dir", str(tmp_path / "other")], catch_exceptions=False)
    monkeypatch.undo()
    assert read_pending(store) is not None
    after = snapshot(store)
    result = run("restore", recovered, "--yes")
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_REFUSED and f"undo it with: mqtool restore {tmp_path / 'other'} --yes" in said, result.stderr
    assert snapshot(store) == after
    for backup in (tmp_path / "other", recovered):
        assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_a_lock_taken_after_the_check_says_what_to_do(tmp_path, monkeypatch):
    """A broker that takes the store's lock after mqtool looked for users (here the look finds none) and before the apply
    holds the lock. Before: "lock: another process holds the store's lock" and no way on. Now it says nothing was changed
    and to stop the broker (exit 4)."""
    import mqtool.cli.repair as repair_cli

    store = copy_store("4.9.7", "crashed-small", tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, sys, time; f = open(sys.argv[1], 'r+'); "
                               "fcntl.lockf(f, fcntl.LOCK_EX, 1, 0); print('held', flush=True); time.sleep(60)", str(store / "lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(repair_cli, "store_users", lambda *args: [])
        before = snapshot(store)
        result = run("recover", store, "--yes", "--backup-dir", tmp_path / "backup")
    finally:
        holder.kill()
        holder.wait()
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_REFUSED and "nothing was changed: stop the broker first, or pass --force" in said, result.stderr
    assert snapshot(store) == before


class Killed(BaseException):
    pass


def test_a_restore_cut_short_finishes_when_run_again(repaired, monkeypatch):
    store, backup, before = repaired
    calls = {"n": 0}
    real = backup_module._put_back  # a kept file put back (a hard link or a copy)

    def dies(*args):
        calls["n"] += 1
        if calls["n"] == 3:
            raise Killed  # as kill -9 would: between two files
        return real(*args)

    restore(BackupSet.open(backup / "02-rebuild-cq"))
    monkeypatch.setattr(backup_module, "_put_back", dies)
    with pytest.raises(Killed):
        restore(BackupSet.open(backup / "01-recover"))
    monkeypatch.undo()
    (store / STAGING_DIR).mkdir(exist_ok=True)  # a temporary file the killed run left
    (store / STAGING_DIR / "x-00000000000000000000").write_bytes(b"partial")
    again = run("restore", backup, "--yes")
    assert again.exit_code == EXIT_OK, again.stderr
    assert "removed the temporary files an interrupted mqtool had left: .mqtool-staging" in again.stderr
    assert snapshot(store) == before


def zeroed_first_segment(tmp_path) -> Path:
    store = copy_store("4.9.7", "clean-small", tmp_path)
    with open(store / "commitlog" / "00000000000000000000", "r+b") as f:
        f.write(bytes(1 << 20))
    return store


def test_repair_of_a_zeroed_first_segment_changes_nothing_and_lists_the_loss(tmp_path):
    """The broker's next start never reads segment 0 (normal recovery starts at the third-from-last
    segment): there is nothing a repair can give back, so it changes nothing, writes no backup and
    exits 1 listing the lost range and the queue entries that point into it."""
    store = zeroed_first_segment(tmp_path)
    before = snapshot(store)
    result = run("repair", store, "--yes", "--backup-dir", tmp_path / "backup", "--format", "json")
    assert result.exit_code == EXIT_FINDINGS and "Traceback" not in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["steps"] == [] and ("damaged-range", 0) in {(f["kind"], f["offset"]) for f in doc["remaining"]}
    assert "nothing can be repaired" in result.stderr
    assert snapshot(store) == before and read_pending(store) is None and not (tmp_path / "backup").exists()


def test_a_plan_the_apply_cannot_carry_out_changes_nothing(tmp_path):
    """A saved rebuild-index plan whose counts the apply's own walk does not give (one entry more
    in the damaged file it rewrites): the apply stops (exit 5) before replacing it."""
    store = copy_store("4.9.7", "clean-small", tmp_path)
    damage_index_entry(store)
    before = snapshot(store)
    assert run("rebuild-index", store, "--plan-out", tmp_path / "plan.json").exit_code == EXIT_OK
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert [a["op"] for a in doc["actions"]] == ["write-dispatch"]
    rewritten = next(f for f in doc["index"]["files"] if f["action"] == "rewrite")
    rewritten["entries_after"] += 1
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    result = run("apply", tmp_path / "plan.json", "--yes", "--backup-dir", tmp_path / "backup")
    assert result.exit_code == EXIT_INTERNAL and "stopped before changing anything" in result.stderr, result.stderr
    assert snapshot(store) == before
    assert read_pending(store) is None and not (tmp_path / "backup").exists()


def closed_pipe_run(args, closed: str) -> subprocess.CompletedProcess:
    """``mqtool args`` with its stdout or stderr a pipe whose reader has gone (``| head -1``)."""
    r, w = os.pipe()
    os.close(r)
    other = subprocess.PIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], stdout=w if closed == "stdout" else other,
                              stderr=w if closed == "stderr" else other, cwd=ROOT, timeout=300)
    finally:
        os.close(w)
    return proc


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_closed_output_pipe_does_not_decide_the_apply(closed, tmp_path):
    store = copy_store("4.9.7", "rewrite-clean", tmp_path)
    before = snapshot(store)
    proc = closed_pipe_run(("repair", store, "--yes", "--backup-dir", tmp_path / "backup"), closed)
    assert proc.returncode == EXIT_OK
    assert read_pending(store) is None and sorted(p.name for p in (tmp_path / "backup").iterdir()) == ["01-recover", "02-rebuild-cq"]
    assert run("verify", store).exit_code == EXIT_OK  # both stages applied
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_ctrl_c_during_an_apply_stops_before_a_write_or_not_at_all(tmp_path):
    """SIGINT at each durability point of ``recover --yes``: exit 130 with "partly applied" and
    the same command finishes it, or (after the last write) exit 0 and no mention of it."""
    reference = copy_store("4.9.7", "crashed-small", tmp_path / "reference")
    assert run("recover", reference, "--yes", "--backup-dir", tmp_path / "reference-backup").exit_code == EXIT_OK
    final = snapshot(reference)
    point = 0
    while True:
        point += 1
        store = copy_store("4.9.7", "crashed-small", tmp_path / f"p{point}")
        args = ("recover", store, "--yes", "--backup-dir", tmp_path / f"b{point}")
        proc = mqtool(*args, env={"MQTOOL_TEST_KILL_AT": str(point), "MQTOOL_TEST_KILL_SIGNAL": "INT"})
        if proc.returncode == EXIT_OK:
            assert "interrupted" not in proc.stderr and "applied" in proc.stderr
            assert snapshot(store) == final
            break
        assert proc.returncode == 128 + signal.SIGINT, proc.stderr
        assert "applied;" not in proc.stderr and proc.stderr.count("error:") == 1
        assert "partly applied: finish with" in proc.stderr or "before anything was changed" in proc.stderr, proc.stderr
        again = cli(*args)  # in this process: the journal on disk, not the process, tells it what to finish
        assert again.returncode == EXIT_OK, again.stderr
        assert snapshot(store) == final
    assert point > 4, point


def test_a_copy_the_disk_refuses_names_the_file_it_wrote(tmp_path):
    """Before: a backup copied to a full disk stopped the apply with "No space left on device; the apply
    stopped at a safe point: fix this ...", naming no file, read by an on-call engineer as the store's disk."""
    import errno

    from mqtool.fileops import copy_sparse

    src = tmp_path / "segment"
    src.write_bytes(b"\1" * (5 << 20))
    full = tmp_path / "full"
    os.mknod(full, 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's own: every write ENOSPC
    with pytest.raises(OSError) as refused:
        copy_sparse(src, full)
    assert (refused.value.errno, refused.value.filename) == (errno.ENOSPC, str(full))
    assert stat.S_ISCHR(os.stat(full).st_mode)  # a refused copy deletes its partial file, never the device it wrote to


def test_only_a_refused_write_without_a_file_gets_the_one_being_written():
    import errno

    from mqtool.fileops import naming

    for error, named in ((OSError(errno.ENOSPC, "No space left on device"), "/backup/x"), (OSError(errno.EDQUOT, "Disk quota exceeded"), "/backup/x"),
                         (OSError(errno.ENOSPC, "No space left on device", "/other"), "/other"), (OSError(errno.EIO, "Input/output error"), None)):
        with pytest.raises(OSError) as raised, naming(Path("/backup/x")):
            raise error
        assert (raised.value.errno, raised.value.filename) == (error.errno, named)


def test_the_journal_created_by_its_first_event_is_in_its_directory_durably(tmp_path, monkeypatch):
    """The first event creates ``journal.jsonl``, and the store changes right after it: before, only the
    file was fsynced, not the directory entry naming it, so a power cut could lose the whole journal
    (and restore with it). Later events, appended to the same file, need no directory fsync."""
    from mqtool.apply.backup import Journal

    synced = []
    monkeypatch.setattr(backup_module, "fsync_dir", lambda path: synced.append(Path(path)))
    journal = Journal(tmp_path / "journal.jsonl")
    journal.append({"ev": "create", "path": "abort"})
    assert synced == [tmp_path]
    journal.append({"ev": "step-done", "index": 0})
    assert synced == [tmp_path]


def test_a_commit_log_linked_to_another_file_system_is_restored(tmp_path, second_disk):
    """``commitlog`` a symbolic link to a directory on another disk: the segments ``recover`` deleted
    are put back there. Before, each was written in the staging directory and renamed across file
    systems (EXDEV): the restore stopped half-done, every time it was run again."""
    import shutil

    from repair_support import tree

    store_dir = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    shutil.move(store_dir / "commitlog", second_disk / "commitlog")
    (store_dir / "commitlog").symlink_to(second_disk / "commitlog")
    segment = second_disk / "commitlog" / "00000000000001048576"
    segment.write_bytes(segment.read_bytes()[:4096].ljust(1 << 20, b"\1"))  # a dirty tail: recover deletes the segments after it
    before = {**tree(store_dir), **tree(second_disk)}
    done = CliRunner().invoke(app, ["recover", str(store_dir), "--yes", "--backup-dir", str(tmp_path / "bk")])
    assert done.exit_code == 0, done.stderr
    assert {**tree(store_dir), **tree(second_disk)} != before
    undone = CliRunner().invoke(app, ["restore", str(tmp_path / "bk"), "--yes"])
    assert undone.exit_code == 0, undone.stderr
    assert {**tree(store_dir), **tree(second_disk)} == before and not read_pending(store_dir)


def sparse_heavy(root: Path) -> None:
    """Every file of ``root`` rewritten as the broker's preallocated files lie on disk: its 4 KiB blocks of zeros holes."""
    for path in (p for p in sorted(root.rglob("*")) if p.is_file()):
        data = path.read_bytes()
        with open(path, "wb") as f:
            for at in range(0, len(data), 4096):
                if data[at : at + 4096].count(0) < len(data[at : at + 4096]):
                    f.seek(at)
                    f.write(data[at : at + 4096])
            f.truncate(len(data))


def blocks(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_blocks for p in sorted(root.rglob("*")) if p.is_file()}


def keeps_holes_when_read(folder: Path) -> bool:
    """Whether a file's holes stay holes when mapped and read, as on a disk (tmpfs gives each page read a block)."""
    import mmap

    probe = folder / "probe"
    with open(probe, "w+b") as f:
        f.truncate(1 << 20)
        with mmap.mmap(f.fileno(), 1 << 20, prot=mmap.PROT_READ) as m:
            sum(m[at] for at in range(0, 1 << 20, 4096))
        held = os.fstat(f.fileno()).st_blocks
    probe.unlink()
    return held == 0


@pytest.mark.parametrize("where", ["same disk", "other disk"])
def test_a_restore_keeps_the_holes_of_the_files_it_puts_back(where, tmp_path, request):
    """Commit log and queue files are preallocated and mostly holes. A recover of a segment with bytes after its valid end
    backs up that range, zeroes it and deletes the later segment (whole, as the index file it rewrites): the restore gives
    every file back byte for byte and no larger on disk. Before, a range was written back as zeros, taking blocks the original
    never had, and a file kept by a copy (the backup on another disk) was put back without its holes smaller than 4 MiB."""
    disk = tmp_path if keeps_holes_when_read(tmp_path) else request.getfixturevalue("second_disk")  # the scan maps every file
    if not keeps_holes_when_read(disk):
        pytest.skip("no file system here keeps a mapped file's holes")
    other = (request.getfixturevalue("second_disk") if disk == tmp_path else tmp_path) if where == "other disk" else disk
    store = copy_store("4.9.7", "crashed-small", disk / "s")
    segment = store / "commitlog" / "00000000000003145728"
    with open(segment, "r+b") as f:  # a dirty tail after the valid end (3611046), in the hole before the segment's end
        f.seek(600000)
        f.write(b"\1" * 20000)
    sparse_heavy(store)
    backup = other / "backup"
    before, on_disk = snapshot(store), blocks(store)
    assert 0 < on_disk["commitlog/00000000000003145728"] * 512 < segment.stat().st_size // 2  # the file system keeps holes
    assert run("recover", store, "--yes", "--backup-dir", backup, "--broker-version", "4.9.7").exit_code == EXIT_OK
    journal = [json.loads(line) for line in (backup / "journal.jsonl").read_text().splitlines()]
    assert {(e["ev"], e["path"]) for e in journal if e["ev"] in ("backup-range", "backup-file")} >= {
        ("backup-range", "commitlog/00000000000003145728"), ("backup-file", "index/20261121045514696")}
    assert (where == "other disk") == any(e.get("how") == "copy" for e in journal)
    assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before
    restored = blocks(store)
    assert {rel: (n, restored[rel]) for rel, n in on_disk.items() if restored[rel] > n} == {}


def test_a_kept_range_written_back_is_byte_exact_at_any_offset(tmp_path, monkeypatch):
    """``copy_range_sparse`` then ``put_range`` over other bytes, as a backup and its restore: ranges starting and ending
    inside blocks, runs of zeros shorter and longer than a block, holes, chunks smaller than a block's multiple."""
    import random

    from mqtool import fileops

    monkeypatch.setattr(fileops, "CHUNK", 3 * 4096 + 100)  # chunks not aligned to the blocks: ``_copy_blocks`` aligns them
    rng = random.Random(7)
    size = 64 * 4096
    original = bytearray(size)
    for _ in range(40):  # data runs, some short (zero bytes inside a block), some over several blocks
        at, n = rng.randrange(size), rng.choice((1, 100, 4095, 4096, 9000, 20000))
        original[at : at + n] = rng.randbytes(len(original[at : at + n]))
    source, copy, target = tmp_path / "source", tmp_path / "copy", tmp_path / "target"
    source.write_bytes(b"")
    with open(source, "r+b") as f:  # zero blocks as holes
        f.truncate(size)
        for at in range(0, size, 4096):
            if any(original[at : at + 4096]):
                f.seek(at)
                f.write(original[at : at + 4096])
    for _ in range(30):
        start = rng.randrange(size)
        end = min(size, start + rng.choice((1, 4000, 4096, 5000, 50000, size)))
        fileops.copy_range_sparse(source, start, end, copy)
        assert copy.read_bytes() == original[start:end]
        other = rng.randbytes(size)
        target.write_bytes(other)
        fileops.put_range(copy, target, start)
        assert target.read_bytes() == other[:start] + original[start:end] + other[end:]


def recovered_over_a_dirty_tail(where: Path, backup: Path) -> tuple[Path, Path, dict]:
    """4.9.7 ``crashed-small`` with bytes after its valid end in its last segment, ``recover --yes``'d (that range backed up
    and zeroed): the store, the segment, the store's snapshot before."""
    store = copy_store("4.9.7", "crashed-small", where)
    segment = store / "commitlog" / "00000000000003145728"
    with open(segment, "r+b") as f:
        f.seek(600000)
        f.write(b"\1" * 20000)
    before = snapshot(store)
    assert run("recover", store, "--yes", "--backup-dir", backup, "--broker-version", "4.9.7").exit_code == EXIT_OK
    return store, segment, before


@pytest.mark.parametrize("punch", ["no fallocate", "refused"])
def test_where_no_hole_can_be_punched_the_cut_and_its_restore_write_the_zeros(punch, tmp_path, monkeypatch):
    """A file system that punches no hole (``fallocate`` absent, or EOPNOTSUPP as some give): the cut and the restore of
    its range write the zeros instead, byte for byte as with holes."""
    import ctypes
    import errno

    from mqtool import fileops

    def refused(*args):
        ctypes.set_errno(errno.EOPNOTSUPP)
        return -1

    monkeypatch.setattr(fileops, "_fallocate", (lambda: None) if punch == "no fallocate" else (lambda: refused))
    store, segment, before = recovered_over_a_dirty_tail(tmp_path / "s", tmp_path / "bk")
    assert fileops.read_range(segment, 600000, 620000) == bytes(20000)  # cut
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_a_restore_stopped_inside_a_range_it_writes_back_finishes_when_run_again(tmp_path, monkeypatch):
    """Ctrl-C (or a kill) while ``restore`` writes a kept range back: half of it written, the file neither as the apply left it
    nor as found. Before, the restore it said to run again refused ("changed after the recover by something other than
    mqtool"); only --force finished it. Now the restore journals the range it begins (``restore-range``) and run again finishes."""
    store, segment, before = recovered_over_a_dirty_tail(tmp_path / "s", tmp_path / "bk")
    real = backup_module.put_range

    def stopped_half_way(src, dst, at):
        data = src.read_bytes()
        with open(dst, "r+b") as f:
            f.seek(at)
            f.write(data[: len(data) // 2])
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(backup_module, "put_range", stopped_half_way)
        assert run("restore", tmp_path / "bk", "--yes").exit_code == 128 + signal.SIGINT
    assert snapshot(store) != before and backup_module.put_range is real
    again = run("restore", tmp_path / "bk", "--yes")
    assert again.exit_code == EXIT_OK, again.stderr
    assert snapshot(store) == before


def test_restore_lists_for_deletion_only_the_created_files_that_are_there(tmp_path):
    """An apply stopped after it logged a file it creates (``note_creates``) and before it made it: the restore deletes
    nothing there. Before, its listing said ``delete  index/...`` and "files it created 1", then "deleted 0 file(s)"."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "bk").exit_code == EXIT_OK
    created = BackupSet.open(tmp_path / "bk").summary()["created"]
    assert created and all((store / rel).exists() for rel in created)
    shown = run("restore", tmp_path / "bk")
    assert [f"delete  {rel}" for rel in created] == [line.strip() for line in shown.stdout.splitlines() if line.strip().startswith("delete ")]
    (store / created[0]).unlink()  # as never made
    shown = run("restore", tmp_path / "bk")
    assert f"delete  {created[0]}" not in shown.stdout and f"{len(created) - 1} (deleted on restore)" in shown.stdout, shown.stdout


def test_a_range_the_store_refuses_to_take_back_is_said_left_unchanged(tmp_path, monkeypatch):
    """``restore`` writing a kept range back into a file it may not write (``chattr +i``: EPERM on open): the line names the
    file, quoted, and says it was left unchanged, as the apply's refused writes do; fixed, the restore run again finishes."""
    import errno

    store, segment, before = recovered_over_a_dirty_tail(tmp_path / "on call", tmp_path / "bk")
    real = os.open

    def immutable(path, flags, *args, **kwargs):
        if str(path) == str(segment) and flags & (os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EPERM, "Operation not permitted", str(path))
        return real(path, flags, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(os, "open", immutable)
        refused = run("restore", tmp_path / "bk", "--yes")
    assert refused.exit_code == EXIT_BAD_INPUT, refused.stderr
    assert f"error: {shell_path(segment)}: Operation not permitted; left unchanged; fix this" in refused.stderr, refused.stderr
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK and snapshot(store) == before


def test_a_file_a_writer_continues_keeps_its_holes(tmp_path):
    """A queue or index file an apply rewrites is continued from a copy of its backup (``writers.open_copy``): the copy holds
    the same bytes and no more blocks. Before, ``shutil.copyfile`` wrote every hole of a preallocated file as zeros (a
    400 MB index file written whole to continue a few entries)."""
    from mqtool.apply.writers import open_copy

    source, tmp = tmp_path / "source", tmp_path / "continued"
    with open(source, "wb") as f:
        f.truncate(8 << 20)  # preallocated as the broker's files, data in its first and a middle block only
        f.write(b"\1" * 100)
        f.seek(3 << 20)
        f.write(b"\2" * 5000)
    os.close(open_copy(tmp, source))
    assert tmp.read_bytes() == source.read_bytes()
    assert 0 < tmp.stat().st_blocks <= source.stat().st_blocks < 64


def test_an_interrupted_apply_whose_backup_is_gone_says_the_way_on(tmp_path):
    """The backup of an apply killed half-way deleted (space was needed). Before: every repair command
    refused the store ("finishing the interrupted apply first", then "not an mqtool backup", exit 3) and
    info, recover and restore all named the restore of a directory that no longer exists: no way on.
    Now every message says the backup is gone and how to plan again on the store as it is; doing so
    works, and restore of the gone path says it does not exist."""
    import shutil

    from mqtool.apply.backup import PENDING_MARKER

    store = copy_store("4.9.7", "crashed-small", tmp_path)
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    backup_module.write_pending(store, tmp_path / "backup")  # as a kill during that apply leaves it
    shutil.rmtree(tmp_path / "backup")
    way_on = f"to plan again on the store as it is, remove {store / PENDING_MARKER}"
    for args, code in ((("recover", store, "--yes"), EXIT_REFUSED), (("recover", store), EXIT_REFUSED), (("info", store), EXIT_OK)):
        result = run(*args)
        said = " ".join(result.stderr.split())
        assert result.exit_code == code and "is gone" in said and way_on in said and "undo it with" not in said, (args, result.stderr)
    gone = run("restore", tmp_path / "backup", "--yes")
    assert gone.exit_code == EXIT_BAD_INPUT and "no such backup directory" in gone.stderr, gone.stderr
    elsewhere = tmp_path / "an old backup"  # named as a shell reads it (before: unquoted)
    assert run("restore", elsewhere, "--yes").stderr == f"mqtool: error: {shell_path(elsewhere)}: no such backup directory (deleted or moved?)\n"
    (store / PENDING_MARKER).unlink()
    again = run("recover", store, "--yes", "--backup-dir", tmp_path / "backup2")
    assert again.exit_code == EXIT_OK and "is gone" not in again.stderr, again.stderr


def test_a_plan_the_apply_cannot_carry_out_leaves_the_empty_backup_dir_it_was_given(tmp_path):
    """``--backup-dir`` an empty directory the operator made (a mount point, its permissions): an apply
    that stops before changing anything removes what it put there, not the directory. Before, the
    whole directory went (``rmtree``), though the interrupt path already kept one that existed."""
    store = copy_store("4.9.7", "clean-small", tmp_path)
    damage_index_entry(store)
    assert run("rebuild-index", store, "--plan-out", tmp_path / "plan.json").exit_code == EXIT_OK
    doc = json.loads((tmp_path / "plan.json").read_text())
    next(f for f in doc["index"]["files"] if f["action"] == "rewrite")["entries_after"] += 1
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    given = tmp_path / "backups"
    given.mkdir()
    result = run("apply", tmp_path / "plan.json", "--yes", "--backup-dir", given)
    assert result.exit_code == EXIT_INTERNAL and "stopped before changing anything" in result.stderr, result.stderr
    assert given.is_dir() and not any(given.iterdir()) and read_pending(store) is None


def stores_side_by_side(parent: Path, *names: str) -> list[Path]:
    """Copies of crashed-small named ``names`` in ``parent``: their default backups share one folder."""
    out = []
    for name in names:
        (parent / name).parent.mkdir(parents=True, exist_ok=True)
        out.append(copy_store("4.9.7", "crashed-small", parent / "copies").rename(parent / name))
    return out


def default_backups(store: Path) -> list[Path]:
    return sorted((store.resolve().parent / ".mqtool-backups").iterdir())


@pytest.mark.parametrize("second", ["recover", "repair"])
def test_a_backup_of_another_store_in_the_shared_folder_does_not_stop_a_restore(second, tmp_path):
    """Stores ``a`` and ``b`` side by side (``a`` named with a trailing slash, ``b`` through a symlink): each
    restore of its own backup gives its store back byte for byte, in either order. Before, ``restore`` of
    ``a``'s backup was refused as a stage of a repair whose later stage was ``b``'s backup."""
    a, b = stores_side_by_side(tmp_path, "a", "b")
    before_a, before_b = snapshot(a), snapshot(b)
    (tmp_path / "link-b").symlink_to(b)
    assert run("recover", f"{a}/", "--yes").exit_code == EXIT_OK
    assert run(second, tmp_path / "link-b", "--yes").exit_code == EXIT_OK
    backup_a, backup_b = default_backups(a)
    assert backup_a.name.startswith("a-") and backup_b.name.startswith("b-") and backup_b.name.endswith(f"-{second}")
    (tmp_path / "backups").symlink_to(backup_a.parent)
    result = run("restore", f"{tmp_path / 'backups' / backup_a.name}/", "--yes")
    assert result.exit_code == EXIT_OK, result.stderr
    assert snapshot(a) == before_a and snapshot(b) != before_b
    assert run("restore", backup_b, "--yes").exit_code == EXIT_OK
    assert snapshot(b) == before_b


def test_stores_of_one_name_backed_up_into_one_folder_are_restored_each_alone(tmp_path):
    """``p1/store`` and ``p2/store`` with ``--backup-dir`` in one folder: restoring the first one's backup is
    not refused for the second's (before: refused, the folder taken for a repair and ``two`` for its later stage)."""
    one, two = stores_side_by_side(tmp_path, "p1/store", "p2/store")
    before_one, before_two = snapshot(one), snapshot(two)
    for store, name in ((one, "one"), (two, "two")):
        assert run("recover", store, "--yes", "--backup-dir", tmp_path / "bk" / name).exit_code == EXIT_OK
    result = run("restore", tmp_path / "bk" / "one", "--yes")
    assert result.exit_code == EXIT_OK, result.stderr
    assert snapshot(one) == before_one
    assert run("restore", tmp_path / "bk" / "two", "--yes").exit_code == EXIT_OK
    assert snapshot(two) == before_two


def test_the_older_of_two_backups_of_one_store_is_refused_naming_the_newer(tmp_path, monkeypatch):
    """``recover`` then ``rebuild-index`` (both rewrite an index file): restoring the recover's backup first
    is refused, naming the rebuild-index backup to restore first, and changes nothing; in that order both
    give the store back. ``b``'s backup in the same folder is not named. (Before: refused as "a stage of a
    repair", telling to restore the whole ``.mqtool-backups`` folder.)"""
    index_rebuild_rewrites_every_file(monkeypatch)  # rebuild-index: a later apply rewriting the recover's index file
    a, b = stores_side_by_side(tmp_path, "a", "b")
    before = snapshot(a)
    for args in (("recover", a), ("recover", b), ("rebuild-index", a)):
        assert run(*args, "--yes").exit_code == EXIT_OK
    folder = tmp_path / ".mqtool-backups"
    (recovered,), (rebuilt,), (of_b,) = folder.glob("a-*-recover"), folder.glob("a-*-rebuild-index"), folder.glob("b-*")
    after = snapshot(a)
    result = run("restore", recovered, "--yes")
    assert result.exit_code == EXIT_REFUSED, result.stderr
    assert f"mqtool restore {rebuilt} --yes" in result.stderr and of_b.name not in result.stderr and "stage" not in result.stderr, result.stderr
    assert snapshot(a) == after
    for backup in (rebuilt, recovered):
        assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(a) == before


class ClockStepsBack:
    """The module ``time`` as seen by ``apply.backup`` once the wall clock stepped back an hour (NTP, a VM
    resumed); its monotonic clock goes on."""

    def __init__(self):
        import time

        self.real = time

    def __getattr__(self, name):
        return getattr(self.real, name)

    def time(self):
        return self.real.time() - 3600

    def gmtime(self, secs=None):
        return self.real.gmtime(self.time() if secs is None else secs)


def test_a_backup_made_after_the_wall_clock_stepped_back_is_still_the_later_one(tmp_path, monkeypatch):
    """``recover``, then the wall clock steps back an hour, then ``rebuild-index``: its backup is named and dated
    before the recover's. Before: ``restore`` of the recover's backup went ahead, putting back an index file
    over the rebuild's, so restoring both left the store changed; and ``restore STORE`` listed the recover's
    as the newest. Now both know the rebuild is later (the monotonic clock within one boot)."""
    index_rebuild_rewrites_every_file(monkeypatch)  # rebuild-index: a later apply rewriting the recover's index file
    (a,) = stores_side_by_side(tmp_path, "a")
    before = snapshot(a)
    assert run("recover", a, "--yes").exit_code == EXIT_OK
    monkeypatch.setattr(backup_module, "time", ClockStepsBack())
    assert run("rebuild-index", a, "--yes").exit_code == EXIT_OK
    monkeypatch.undo()
    folder = tmp_path / ".mqtool-backups"
    (recovered,), (rebuilt,) = folder.glob("a-*-recover"), folder.glob("a-*-rebuild-index")
    assert rebuilt.name < recovered.name  # named by the wall clock
    listed = run("restore", a)
    assert f"newest first: {rebuilt.name}, {recovered.name}" in " ".join(listed.stderr.split()), listed.stderr
    after = snapshot(a)
    result = run("restore", recovered, "--yes")
    assert result.exit_code == EXIT_REFUSED and f"mqtool restore {rebuilt} --yes" in " ".join(result.stderr.split()), result.stderr
    assert snapshot(a) == after
    for backup in (rebuilt, recovered):
        assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(a) == before


def test_a_whole_repair_with_a_later_backup_of_its_store_is_refused_naming_it(tmp_path, monkeypatch):
    """``repair`` then ``rebuild-index``: ``restore`` of the repair's directory is refused naming the later
    backup (before: blamed "something other than mqtool"); after it, the repair's restore gives the store back."""
    index_rebuild_rewrites_every_file(monkeypatch)  # rebuild-index: a later apply rewriting the recover's index file
    (a,) = stores_side_by_side(tmp_path, "a")
    before = snapshot(a)
    assert run("repair", a, "--yes").exit_code == EXIT_OK
    (repaired,) = default_backups(a)
    assert repair_stages(repaired) and run("rebuild-index", a, "--yes").exit_code == EXIT_OK
    (rebuilt,) = set(default_backups(a)) - {repaired}
    after = snapshot(a)
    result = run("restore", repaired, "--yes")
    assert result.exit_code == EXIT_REFUSED and f"mqtool restore {rebuilt} --yes" in result.stderr, result.stderr
    assert snapshot(a) == after
    for backup in (rebuilt, repaired):
        assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(a) == before


def test_restore_of_the_folder_of_backups_is_refused_and_changes_nothing(tmp_path):
    """``restore .mqtool-backups``: a folder of two stores' backups, not a repair; before, it restored every
    backup in it (of both stores), in the order of their names."""
    a, b = stores_side_by_side(tmp_path, "a", "b")
    for store in (a, b):
        assert run("recover", store, "--yes").exit_code == EXIT_OK
    after = snapshot(tmp_path)
    result = run("restore", tmp_path / ".mqtool-backups", "--yes")
    assert result.exit_code == EXIT_BAD_INPUT and "a folder of backups" in result.stderr, result.stderr
    assert snapshot(tmp_path) == after


def test_an_apply_in_the_default_backups_folder_is_no_stage_of_a_repair(tmp_path, monkeypatch):
    """Two stores side by side, each recovered, one then re-indexed: their backups are siblings in
    ``.mqtool-backups``. Before: restoring the first store's recover called it "a stage of a repair" whose
    later stages were the other applies of the folder (the other store's too) and said to run
    ``mqtool restore .../.mqtool-backups --yes``, which undid every backup there, the other store's
    included. Now that folder is no repair: the refusal names the later apply on the same store, and
    undoing in that order gives the store back, the other store untouched."""
    index_rebuild_rewrites_every_file(monkeypatch)  # rebuild-index: a later apply rewriting the recover's index file
    import shutil

    one = copy_store("4.9.7", "crashed-small", tmp_path)
    two = shutil.copytree(one, tmp_path / "two")
    before = snapshot(one)
    for store in (one, two):
        assert run("recover", store, "--broker-version", "4.9.7", "--yes").exit_code == EXIT_OK
    assert run("rebuild-index", one, "--broker-version", "4.9.7", "--yes").exit_code == EXIT_OK
    folder = tmp_path / ".mqtool-backups"
    recover, = folder.glob(f"{one.name}-*-recover")
    reindex, = folder.glob(f"{one.name}-*-rebuild-index")
    two_after = snapshot(two)

    refused = run("restore", recover, "--yes")
    assert refused.exit_code == EXIT_REFUSED
    said = " ".join(refused.stderr.split())
    assert f"restore them first, newest first: mqtool restore {reindex} --yes" in said and "stage of a repair" not in said, refused.stderr
    assert run("restore", folder, "--yes").exit_code == EXIT_BAD_INPUT  # a folder of backups is no backup
    assert snapshot(two) == two_after
    assert run("restore", reindex, "--yes").exit_code == EXIT_OK
    assert run("restore", recover, "--yes").exit_code == EXIT_OK
    assert snapshot(one) == before and snapshot(two) == two_after


@pytest.mark.parametrize("inside", ["commitlog/backup", "backup"])
def test_a_backup_directory_inside_the_store_is_refused_before_any_change(tmp_path, inside):
    """``--backup-dir`` inside the store. Before: the apply went on and left its backup there, hard links of
    deleted segments and all; in ``commitlog/`` a directory the broker's ``MappedFileQueue.load`` finds of
    the wrong length, so the broker refused to start, while ``verify`` said the store was sound. Now refused
    (exit 4), nothing changed."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = snapshot(store)
    for command in (["recover"], ["repair", "--broker-version", "4.9.7"]):
        refused = run(command[0], store, *command[1:], "--yes", "--backup-dir", store / inside)
        assert refused.exit_code == EXIT_REFUSED, refused.stderr
        assert "inside the store" in refused.stderr
        assert snapshot(store) == before


def test_the_stages_of_a_repair_are_listed_as_its_steps(repaired):
    """Before: ``restore`` listed a repair's stage 02-rebuild-cq as "command repair" and 01-recover as "command recover",
    each manifest naming the command its plan was made as: neither said which step of the repair wrote it. Now each
    stage's manifest says ``repair`` and its ``step``, and restore shows both (JSON ``command``, ``step``); a stage
    written before manifests named their step is shown with the step its directory is named for."""
    store, backup, before = repaired
    stages = ("01-recover", "02-rebuild-cq")
    manifests = {s: json.loads((backup / s / "manifest.json").read_text()) for s in stages}
    assert {s: (m["command"], m["step"]) for s, m in manifests.items()} == {"01-recover": ("repair", "recover"), "02-rebuild-cq": ("repair", "rebuild-cq")}
    shown = json.loads(run("restore", backup, "-f", "json").stdout)["stages"]
    assert [(s["backup"], s["command"], s["step"]) for s in shown] == [(str(backup / "02-rebuild-cq"), "repair", "rebuild-cq"), (str(backup / "01-recover"), "repair", "recover")]
    rows = [line.split() for line in run("restore", backup).stdout.splitlines() if line.startswith(("command ", "step "))]
    assert rows == [["command", "repair"], ["step", "rebuild-cq"], ["command", "repair"], ["step", "recover"]]
    for s, m in manifests.items():  # as the release before wrote them
        m.pop("step")
        (backup / s / "manifest.json").write_text(json.dumps({**m, "command": "recover" if s == "01-recover" else "repair"}))
    assert json.loads(run("restore", backup, "-f", "json").stdout)["stages"] == shown
    assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_restore_reads_of_the_other_backups_only_what_tells_whether_they_came_later(tmp_path, monkeypatch):
    """Three applies on one store and one on another, their backups in one default folder, and a manifest there that is
    JSON but no backup's. Before: restore of the newest opened every backup set in the folder whole, twice (the
    backup's folder and the store's default one are the same): every manifest and every journal (which can be long)
    parsed, and that manifest stopped it with an internal error (exit 5). Now each other manifest is read once and no
    other journal at all (none came later); restore of the oldest still names the later two, newest first."""
    index_rebuild_rewrites_every_file(monkeypatch)  # rebuild-index: a later apply rewriting the recover's index file
    import pathlib

    a, b = stores_side_by_side(tmp_path, "a", "b")
    for store, command in ((a, "recover"), (b, "recover"), (a, "rebuild-index"), (a, "rebuild-index")):
        assert run(command, store, "--yes").exit_code == EXIT_OK
    folder = tmp_path / ".mqtool-backups"
    (oldest,), later = folder.glob("a-*-recover"), sorted(folder.glob("a-*-rebuild-index"))
    (folder / "a-00000000T000000000-recover").mkdir()
    (folder / "a-00000000T000000000-recover" / "manifest.json").write_text("[]")
    manifests, journals, read_text, events = Counter(), Counter(), pathlib.Path.read_text, backup_module.Journal.events

    def counted_text(self, *args, **kwargs):
        if self.name == "manifest.json":
            manifests[self.parent.name] += 1
        return read_text(self, *args, **kwargs)

    def counted_events(self):
        journals[self.path.parent.name] += 1
        return events(self)

    monkeypatch.setattr(pathlib.Path, "read_text", counted_text)
    monkeypatch.setattr(backup_module.Journal, "events", counted_events)
    newest = run("restore", later[-1])
    assert newest.exit_code == EXIT_REFUSED and "re-run with --yes" in newest.stderr, newest.stderr
    assert set(journals) == {later[-1].name}, journals
    assert max(n for name, n in manifests.items() if name != later[-1].name) == 1 and len(manifests) == 5, manifests
    journals.clear()
    result = run("restore", oldest, "--yes")
    said = " ".join(result.stderr.split())
    assert result.exit_code == EXIT_REFUSED and "; ".join(f"mqtool restore {p} --yes" for p in reversed(later)) in said, result.stderr
    assert not any(name.startswith("b-") for name in journals), journals  # the other store's: never its journal


def test_a_restore_parses_each_line_of_its_journal_once(tmp_path, monkeypatch):
    """``restore`` asks its backup's journal for its events many times (the summary, ``missing_copies``,
    ``changed_since_apply``, its own walk) while it appends to it. Before, every time read and parsed the whole
    journal again (a repair of many files: a long one); now each line is parsed once, and what was appended
    since is all that is read. The store is still put back byte for byte."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "store")
    original = snapshot(store)
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    parsed, loads = Counter(), json.loads

    def counted(text, *args, **kwargs):
        if isinstance(text, bytes):  # the journal is read as bytes, manifests as text
            parsed[text] += 1
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(backup_module.json, "loads", counted)
    result = run("restore", tmp_path / "backup", "--yes")
    assert result.exit_code == EXIT_OK, result.stderr
    lines = (tmp_path / "backup" / "journal.jsonl").read_bytes().splitlines()
    assert b'"restored"' in lines[-1]  # written as it ends, read by no one
    assert len(lines) > 3 and {line: parsed[line] for line in lines[:-1]} == {line: 1 for line in lines[:-1]}, parsed
    assert snapshot(store) == original


def test_verify_of_a_store_with_an_interrupted_apply_works_out_its_way_on_once(tmp_path, monkeypatch):
    """``verify`` says what an interrupted apply left on stderr first and again below its summary. Before, the lines were
    worked out twice (``warn_store_state``'s, then its own ``unfinished_lines``: the backup read twice); now once, one text."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "store")
    assert run("recover", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    backup_module.write_pending(store, tmp_path / "backup")  # as a kill during that apply leaves it
    ways, calls = backup_module.interrupted_apply_ways, []
    monkeypatch.setattr(backup_module, "interrupted_apply_ways", lambda *args: calls.append(args) or ways(*args))
    result = run("verify", store)
    said = f"an apply on this store was interrupted (backup {tmp_path / 'backup'})"
    assert len(calls) == 1 and said in " ".join(result.stderr.split()) and said in " ".join(result.stdout.split()), (calls, result.stdout, result.stderr)


def test_the_plan_shown_saved_and_backed_up_is_one_plan_naming_its_broker_config(tmp_path):
    """``recover --broker-config FILE``: the plan shown (``-f json``) and saved (``--plan-out``) left the broker.conf out, while
    the backup of the plan applied named it. An ``apply`` of the saved plan interrupted, its file gone since, was then finished by
    ``mqtool recover STORE --yes``, planning without the broker.conf's index geometry. Now one plan: shown, saved, backed up."""
    import shlex

    from mqtool.apply.backup import finish_command

    conf = tmp_path / "broker a.conf"
    conf.write_text("maxHashSlotNum=1000\nmaxIndexNum=4000\n")
    store = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    shown = run("recover", store, "--broker-config", conf, "--plan-out", tmp_path / "plan.json", "-f", "json")
    assert shown.exit_code == EXIT_OK, shown.stderr
    saved = json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    assert {k: v for k, v in json.loads(shown.stdout).items() if k != "next_start"} == saved
    assert saved["options"]["broker_config"] == str(conf.resolve())
    assert run("apply", tmp_path / "plan.json", "--yes", "--backup-dir", tmp_path / "bk").exit_code == EXIT_OK
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["plan"] == saved
    (tmp_path / "plan.json").unlink()  # the apply's plan file gone: the command that made it finishes it, with its broker.conf
    assert shlex.split(finish_command(store, manifest)) == ["mqtool", "recover", str(store), "--broker-config", str(conf.resolve()), "--yes"]

    other = copy_store("4.9.7", "crashed-small", tmp_path / "t")
    applied = run("recover", other, "--broker-config", conf, "--yes", "-f", "json", "--backup-dir", tmp_path / "bk2")
    assert applied.exit_code == EXIT_OK, applied.stderr
    backed_up = json.loads((tmp_path / "bk2" / "manifest.json").read_text(encoding="utf-8"))["plan"]
    assert {k: v for k, v in json.loads(applied.stdout).items() if k not in ("next_start", "backup")} == backed_up
