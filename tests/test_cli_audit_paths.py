"""The paths the earlier audits did not take: an output file on a full disk, an apply cut short, restores of stores
moved or backed up twice, output cut by ``| head``, ``--format json`` on every exit path, a store a live broker holds.
Each test failed before its fix."""

from __future__ import annotations

import errno
import io
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import copy_store, store_path
from repair_support import tree

from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_REFUSED

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


class FullDisk(io.FileIO):
    """A file on a disk with ``room`` bytes free: past them every write fails with ENOSPC, as a full tmpfs's does."""

    room = 256 << 10

    def write(self, data):
        left = self.room - self.tell()
        if left <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(bytes(data)[:left])


def test_a_parquet_salvage_a_full_disk_cuts_short_leaves_no_unreadable_file(tmp_path, monkeypatch):
    """``salvage -f parquet --out FILE`` on a disk with 256 KiB free (the rows need 3 MiB). Before: the file stayed, cut
    before its footer (no ``PAR1`` at its end: every Parquet reader refuses it), and stderr said "FILE: holds only the rows
    written before salvage stopped". Now it is removed and said so; exit 3 and the error line as before."""
    import mqtool.cli.salvage as salvage_cli

    def full_disk_open(path, mode="r", *args, **kwargs):
        return io.BufferedWriter(FullDisk(path, mode)) if mode == "wb" else open(path, mode, *args, **kwargs)

    monkeypatch.setattr(salvage_cli, "open", full_disk_open, raising=False)
    out = tmp_path / "rows.parquet"
    done = run("salvage", store_path("4.9.7", "crashed-small"), "-f", "parquet", "--body", "base64", "--out", out)
    assert done.exit_code == EXIT_BAD_INPUT, done.stderr
    assert done.stderr.splitlines()[-1] == f"mqtool: error: {out}: No space left on device"  # before: "cannot write: ..."
    assert not out.exists(), out.stat().st_size
    assert f"mqtool: {out}: removed: the Parquet file was cut short before its footer" in done.stderr
    assert "holds only the rows" not in done.stderr


class CtrlCInWrite(io.FileIO):
    """A file whose write past ``room`` bytes gets a Ctrl-C (KeyboardInterrupt), as one that lands while pyarrow's writer
    is in a write to the Python file it was given."""

    room = 256 << 10

    def write(self, data):
        if self.tell() + len(data) > self.room:
            raise KeyboardInterrupt
        return super().write(data)


def test_a_parquet_salvage_a_ctrl_c_cuts_inside_a_write_leaves_no_unreadable_file(tmp_path, monkeypatch):
    """A Ctrl-C that lands inside one of the writer's writes (1 in 3 of the Ctrl-Cs a person gave ``salvage -f parquet --out
    FILE`` on the 2 GiB bench store): before, the file was left without its footer, unreadable, after "FILE: holds only the
    rows written before salvage stopped". It is removed and said so; exit 130 as ever."""
    import mqtool.cli.salvage as salvage_cli

    def interrupted_open(path, mode="r", *args, **kwargs):
        return io.BufferedWriter(CtrlCInWrite(path, mode)) if mode == "wb" else open(path, mode, *args, **kwargs)

    monkeypatch.setattr(salvage_cli, "open", interrupted_open, raising=False)
    out = tmp_path / "rows.parquet"
    done = run("salvage", store_path("4.9.7", "crashed-small"), "-f", "parquet", "--body", "base64", "--out", out)
    assert done.exit_code == 130, done.stderr
    assert not out.exists(), out.stat().st_size
    assert f"mqtool: {out}: removed: the Parquet file was cut short before its footer" in done.stderr


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_restores_preview_of_a_store_a_broker_holds_meets_the_refusal_yes_meets(tmp_path, command):
    """A broker holding the store's lock (a process with the POSIX lock on ``lock``, as a running broker): before,
    `restore BACKUP` without --yes said "nothing changed: re-run with --yes to restore", and the --yes it asked for was
    refused ("... is in use ..."). The preview now meets the same refusal (same line, exit 4), for one apply's backup and
    a repair's; the store unchanged, the backup still restorable once the lock is gone."""
    store = copy_store("5.3.3", "crashed-small", tmp_path / "s")
    before = tree(store)
    assert run(command, store, "--yes", "--backup-dir", tmp_path / "bk").exit_code == 0
    after = tree(store)
    locker = "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", locker, str(store / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        shown, done = run("restore", tmp_path / "bk"), run("restore", tmp_path / "bk", "--yes")
    finally:
        holder.kill()
        holder.wait()
    assert shown.exit_code == done.exit_code == EXIT_REFUSED, shown.stderr
    refusal = done.stderr.strip().splitlines()[-1]
    assert refusal.startswith(f"mqtool: error: {store} is in use (pid {holder.pid} ") and refusal.endswith("stop the broker first, or pass --force")
    assert shown.stderr.strip().splitlines()[-1] == refusal and "re-run with --yes" not in shown.stderr
    assert tree(store) == after
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0 and tree(store) == before


def test_apply_again_after_its_apply_was_killed_gives_its_json_document(tmp_path, monkeypatch):
    """`apply PLAN --yes -f json` again after its apply was killed finishes it ("that was this plan: it is now applied").
    Before: stdout was empty (exit 0), where every other apply, and `recover --yes -f json` finishing its own, writes the
    plan's document with ``backup``. Now the plan it applied, with the backup its undo line names."""
    import json

    from mqtool.recovery.plans import Plan
    from test_cli_audit_write import killed_at

    store = copy_store("5.3.3", "crashed-small", tmp_path / "s")
    assert run("recover", store, "--plan-out", tmp_path / "plan.json").exit_code == 0
    killed_at(monkeypatch, ["apply", tmp_path / "plan.json", "--yes", "--backup-dir", tmp_path / "a"], 3)
    again = run("apply", tmp_path / "plan.json", "--yes", "-f", "json")
    assert again.exit_code == 0, again.stderr
    assert "that was this plan: it is now applied" in again.stderr
    doc = json.loads(again.stdout)
    assert doc["backup"] == str(tmp_path / "a")
    assert Plan.from_dict(doc).to_dict() == Plan.from_json((tmp_path / "plan.json").read_text()).to_dict()


@pytest.mark.parametrize("point", [10, 28])  # durability points: inside stage 01-recover's apply, inside 02-rebuild-cq's
def test_a_repair_killed_inside_a_stage_and_finished_names_only_the_whole_repairs_undo(tmp_path, monkeypatch, point):
    """5.3.3 ``dledger-crashed-cqloss`` (a repair of two stages) killed inside a stage's apply, then ``repair --yes`` again.
    Before, killed in stage 02: "the stopped repair ... is finished; undo it with: mqtool restore BK --yes", then "undo with:
    mqtool restore BK/02-rebuild-cq --yes", which undoes that stage alone (the last line, the one pasted, left stage 01
    applied); killed in stage 01: "undo with: mqtool restore BK --yes, then ...: mqtool restore BK/01-recover --yes", a
    second step with nothing left to undo. Each stage is undone with its repair: every restore named is BK's."""
    import re

    from test_cli_audit_write import killed_at

    store = copy_store("5.3.3", "dledger-crashed-cqloss", tmp_path / "s")
    original = tree(store)
    killed_at(monkeypatch, ["repair", store, "--yes", "--backup-dir", tmp_path / "bk"], point)
    again = run("repair", store, "--yes")
    assert again.exit_code == 0, again.stderr
    assert set(re.findall(r"mqtool restore (\S+) --yes", again.stderr)) == {str(tmp_path / "bk")}, again.stderr
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0 and tree(store) == original


def test_an_apply_interrupted_on_a_store_moved_since_is_finished_or_undone_where_it_was(tmp_path, monkeypatch):
    """A recover --yes killed mid-apply, then the store renamed (``my store`` to ``moved store``). Before: `info` said "run
    `mqtool recover 'moved store' --yes` to finish it, or undo it with: mqtool restore BK --yes", and that recover finished it
    on the moved store, ending "undo with: mqtool restore BK --yes": a restore refused (exit 3, the store the backup belongs
    to does not exist). Now every command says where the store was and to move it back first, the repair commands refuse
    (exit 4, the store unchanged), and moved back, the finish it names works and its undo gives the original store back."""
    import shlex

    from test_cli_audit_write import killed_at

    store = copy_store("4.9.7", "crashed-small", tmp_path / "my store")
    moved = store.parent / "moved store"
    original = tree(store)
    killed_at(monkeypatch, ["recover", store, "--yes", "--backup-dir", tmp_path / "bk"], 3)
    store.rename(moved)
    half = tree(moved)
    ways = f"the store was at {shlex.quote(str(store))} when that apply began (moved or renamed since): move it back there, then run"
    assert ways in run("info", moved).stderr.splitlines()[0]
    for command in ("recover", "repair", "rebuild-index"):
        refused = run(command, moved, "--yes")
        assert refused.exit_code == EXIT_REFUSED and ways in refused.stderr.splitlines()[-1], (command, refused.stderr)
    assert tree(moved) == half
    moved.rename(store)
    assert "moved or renamed" not in run("info", store).stderr
    finished = run("recover", store, "--yes")
    assert finished.exit_code == 0 and "the interrupted recover apply is finished" in finished.stderr
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0 and tree(store) == original


def test_a_repair_stopped_on_a_store_moved_since_is_finished_where_it_was(tmp_path, monkeypatch):
    """A repair (two stages) killed between its stages, then the store renamed. Before: `repair 'moved store' --yes` applied
    the second stage into the stopped repair's backup and ended "undo with: mqtool restore BK --yes", refused as the backup's
    store had moved. Now it refuses (exit 4, nothing changed), saying where the store was; `info` says the same."""
    import shlex

    from test_cli_audit_write import killed_at

    store = copy_store("5.3.3", "dledger-crashed-cqloss", tmp_path / "my store")
    moved = store.parent / "moved store"
    killed_at(monkeypatch, ["repair", store, "--yes", "--backup-dir", tmp_path / "bk"], 22)  # "before stage 02-rebuild-cq"
    store.rename(moved)
    half = tree(moved)
    ways = (f"the store was at {shlex.quote(str(store))} when that repair began (moved or renamed since): move it back there, "
            f"then run `mqtool repair {shlex.quote(str(store))} --yes` again to finish it")
    assert ways in run("info", moved).stderr.splitlines()[0]
    refused = run("repair", moved, "--yes")
    assert refused.exit_code == EXIT_REFUSED and ways in refused.stderr.splitlines()[-1], refused.stderr
    assert tree(moved) == half


def test_a_salvage_a_full_disk_cuts_short_leaves_only_whole_rows(tmp_path, monkeypatch):
    """``salvage -f jsonl --out FILE`` on a disk with 256 KiB free. Before: the file ended with the part of a row the disk
    took (no JSON Lines reader takes the file), after "FILE: holds only the rows written before salvage stopped". It is
    cut back to its last whole row now: every line a row, as after a Ctrl-C; exit 3 and the error line as before."""
    import json

    import mqtool.cli.salvage as salvage_cli

    def full_disk_open(path, mode="r", *args, encoding=None, newline=None, **kwargs):
        if mode != "w":
            return open(path, mode, *args, encoding=encoding, newline=newline, **kwargs)
        return io.TextIOWrapper(io.BufferedWriter(FullDisk(path, "wb")), encoding=encoding, newline=newline)

    monkeypatch.setattr(salvage_cli, "open", full_disk_open, raising=False)
    out = tmp_path / "rows.jsonl"
    done = run("salvage", store_path("4.9.7", "crashed-small"), "-f", "jsonl", "--body", "base64", "--out", out)
    assert done.exit_code == EXIT_BAD_INPUT, done.stderr
    assert done.stderr.splitlines()[-1] == f"mqtool: error: {out}: No space left on device"  # before: "cannot write: ..."
    assert f"mqtool: {out}: holds only the rows written before salvage stopped" in done.stderr
    text = out.read_text(encoding="utf-8")
    assert 0 < len(text) <= FullDisk.room and text.endswith("\n")
    assert all(json.loads(line)["status"] == "live" for line in text.splitlines())
