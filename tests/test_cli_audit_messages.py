"""What the write path says when it fails or is stopped (an audit of the messages, in a 100-column terminal): a refused write
named as the file the user cares about, pasteable paths, a SIGBUS said with its file, a Ctrl-C under a progress bar."""

from __future__ import annotations

import errno
import io
import shlex

from conftest import copy_store
from typer.testing import CliRunner

import mqtool.fileops as fileops
from mqtool.cli import app
from mqtool.fileops import shell_path
from repair_support import tree

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


def full_disk_for(monkeypatch, full) -> None:
    """``write_atomic``'s temporary files whose name ``full(name)`` accepts are on a full disk (``write`` says ENOSPC, naming none)."""

    class FullDisk(io.FileIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_open(path, mode="r", *args, **kwargs):
        if mode == "wb" and full(str(path)):
            return io.BufferedWriter(FullDisk(path, mode))
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(fileops, "open", full_disk_open, raising=False)


def test_a_plan_out_refused_by_a_full_disk_is_named_quoted_and_left_unchanged(tmp_path, monkeypatch):
    """``recover STORE --plan-out 'plans dir/p.json'`` over an earlier plan, on a full disk. Before: ``mqtool: error: /tmp/.../plans
    dir/p.json: No space left on device`` (repair's own special case; any other write_atomic said ``p.json.mqtool-tmp``), the path
    unquoted and nothing on the earlier plan. Now the path pastes and the line says the file was left as it was."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    plan = tmp_path / "plans dir" / "p.json"
    plan.parent.mkdir()
    plan.write_text('{"earlier": true}')
    full_disk_for(monkeypatch, lambda name: name.endswith(fileops.TMP_SUFFIX))
    res = run("recover", store, "--plan-out", plan)
    assert res.exit_code == 3, res.output
    assert res.stderr.splitlines()[-1] == f"mqtool: error: {shell_path(plan)}: No space left on device; left unchanged"
    assert plan.read_text() == '{"earlier": true}' and [p.name for p in plan.parent.iterdir()] == ["p.json"]
    plan.unlink()
    res = run("recover", store, "--plan-out", plan)
    assert res.stderr.splitlines()[-1] == f"mqtool: error: {shell_path(plan)}: No space left on device; not created"
    assert list(plan.parent.iterdir()) == []


def test_an_applys_refused_checkpoint_write_names_the_checkpoint_not_its_temporary_file(tmp_path, monkeypatch):
    """``recover STORE --yes``, its checkpoint's write refused (a full disk). Before: ``mqtool: error: /tmp/on
    call/.../.mqtool-staging/checkpoint.mqtool-tmp: No space left on device; the apply stopped at a safe point ...``: a file in
    mqtool's staging folder, unquoted, gone by the time it is read. Now the store's checkpoint, quoted, said left unchanged
    (it is: the bytes the store held), then how to finish or undo the apply."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    original, before = tree(store), (store / "checkpoint").read_bytes()
    full_disk_for(monkeypatch, lambda name: name.endswith("checkpoint" + fileops.TMP_SUFFIX))
    res = run("recover", store, "--yes", "--backup-dir", tmp_path / "bk")
    assert res.exit_code == 3, res.output
    line = res.stderr.splitlines()[-1]
    assert line.startswith(f"mqtool: error: {shell_path(store / 'checkpoint')}: No space left on device; left unchanged; "
                           "the apply stopped at a safe point"), line
    assert fileops.TMP_SUFFIX not in line and (store / "checkpoint").read_bytes() == before
    assert shlex.split(line.rsplit("undo it with: ", 1)[1]) == ["mqtool", "restore", str(tmp_path / "bk"), "--yes"]
    monkeypatch.undo()
    assert run("restore", tmp_path / "bk", "--yes").exit_code == 0 and tree(store) == original


def test_salvage_stopped_names_its_partial_store_quoted_to_paste(tmp_path, monkeypatch):
    """``salvage --to-store 'a b/new store'`` stopped by a full disk leaves ``new store.mqtool-partial`` and says to delete it.
    Before: ``mqtool: /tmp/.../a b/new store.mqtool-partial: the new store is incomplete (not at /tmp/.../a b/new store, ...)``,
    unquoted: pasted after ``rm -r`` it names three paths. Now both paths are quoted as a shell reads them."""
    import os

    source = copy_store("4.9.7", "crashed-small", tmp_path / "src")
    target = tmp_path / "a b" / "new store"
    target.parent.mkdir()
    real = os.pwrite

    def pwrite(fd, data, offset):  # the new store's disk is full
        if ".mqtool-partial" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    res = run("salvage", source, "--to-store", target, "-f", "jsonl", "--out", tmp_path / "rows.jsonl")
    assert res.exit_code == 3, res.output
    partial = target.with_name(target.name + ".mqtool-partial")
    note = next(line for line in res.stderr.splitlines() if "the new store is incomplete" in line)
    assert note.startswith(f"mqtool: {shell_path(partial)}: the new store is incomplete (not at {shell_path(target)}, "), note
    assert shlex.split(note.removeprefix("mqtool: ").split(": the new store")[0]) == [str(partial)] and partial.is_dir()
