"""Defects a person hit in the write path (an audit of the repair commands): re-running a command to finish
its interrupted apply, a backup disk too small, what repair's plan and closing lines say, pasteable lines."""

from __future__ import annotations

import shlex

import pytest
from conftest import copy_store
from typer.testing import CliRunner

from mqtool.cli import app
from repair_support import tree

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
    (every index file backed up again in B) and named only B to undo, `restore A` refused until B was restored."""
    original = tree(crashed)
    killed_at(monkeypatch, ["rebuild-index", crashed, "--yes", "--backup-dir", tmp_path / "a"], 3)
    again = run("rebuild-index", crashed, "--yes")
    assert again.exit_code == 0, again.stderr
    assert "finishing the interrupted apply" in again.stderr and "same options" in again.stderr
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
