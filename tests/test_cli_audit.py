"""What the on-call engineer met using mqtool at 3 a.m. (issue #11 audit): a full disk, the wrong
kind of path, Ctrl-C in the middle of a repair, a store a process still holds, tables that fit a
100-column terminal, --help with an example. Each test failed before its fix."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, store_path
from mqtool.apply import executor
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_REFUSED

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def run(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def error_line(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr.strip()
    assert "\n" not in err.splitlines()[-1] and err.splitlines()[-1].startswith("mqtool: error: "), err
    assert "Traceback" not in result.output
    return err.splitlines()[-1]


def mqtool(*args, stdout=subprocess.PIPE, env=None):
    return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "100", **(env or {})})


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


# ---- a full disk, the wrong kind of path ------------------------------------------------------------


@pytest.mark.parametrize("args", [("dump", "-f", "jsonl"), ("info",), ("verify", "--only", "checkpoint"), ("salvage", "-f", "csv")])
def test_a_full_disk_under_stdout_is_one_line_and_exit_3(args):
    """Before: `mqtool dump STORE > file` on a full disk said "internal error: OSError ... (run with
    --debug)" and exited 5, the code of a bug."""
    command, *options = args
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC
        result = mqtool(command, store_path("5.3.3", "clean-small"), *options, stdout=full)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.splitlines()[-1] == "mqtool: error: cannot write: No space left on device"
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_an_output_path_that_cannot_be_written_is_bad_input(tmp_path):
    """Before: `salvage --out DIR`, `salvage --out missing/x.jsonl` and `recover --plan-out DIR`
    were internal errors (exit 5)."""
    store = store_path("5.3.3", "crashed-small")
    assert error_line(run("salvage", store, "--out", tmp_path), EXIT_BAD_INPUT) == f"mqtool: error: {tmp_path}: Is a directory"
    missing = tmp_path / "no such dir" / "rows.jsonl"
    assert error_line(run("salvage", store, "-f", "jsonl", "--out", missing), EXIT_BAD_INPUT) == f"mqtool: error: {missing}: No such file or directory"
    err = error_line(run("recover", store, "--plan-out", tmp_path), EXIT_BAD_INPUT)
    assert "Is a directory" in err and "internal error" not in err


def test_apply_and_restore_given_the_wrong_kind_of_path(tmp_path):
    """Before: `apply DIR` and `restore FILE` were internal errors (exit 5)."""
    assert "a directory; give the plan file saved with --plan-out" in error_line(run("apply", tmp_path), EXIT_BAD_INPUT)
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    assert "not an mqtool backup" in error_line(run("restore", plan, "--yes"), EXIT_BAD_INPUT)


# ---- Ctrl-C while a repair writes ---------------------------------------------------------------------


def test_ctrl_c_while_applying_says_how_to_finish_or_undo(tmp_path, monkeypatch):
    """Before: Ctrl-C in the middle of `recover --yes` printed only "interrupted": nothing said that
    the store was half-changed, nor how to finish or undo it; `verify` then reported the half-applied
    store's findings without a word about it."""
    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")  # a path with a space
    before = tree(store)
    calls = {"n": 0}

    def ctrl_c(label):
        calls["n"] += 1
        if calls["n"] == 3:  # after the first file operation
            raise KeyboardInterrupt

    monkeypatch.setattr(executor, "durability_point", ctrl_c)
    err = error_line(run("recover", store, "--yes"), 130)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    assert "partly changed" in err and "run the same command again with --yes to finish" in err
    assert tree(store) != before
    undo = shlex.split(err.split("undo with: ", 1)[1])  # the printed command pastes as it is
    assert undo[:2] == ["mqtool", "restore"] and undo[3] == "--yes"

    checked = run("verify", store, "--only", "checkpoint")
    assert "an apply on this store was interrupted" in checked.stderr and shlex.quote(undo[2]) in checked.stderr
    planned = run("recover", store, "--dry-run")
    assert planned.exit_code == 0 and "an earlier apply on this store was interrupted" in planned.stderr

    assert run(*undo[1:]).exit_code == 0
    assert tree(store) == before  # byte for byte, as before the interrupted apply


def test_ctrl_c_before_the_apply_starts_says_nothing_changed(tmp_path, monkeypatch):
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    before = tree(store)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("mqtool.cli.repair.apply_plan", ctrl_c)
    assert error_line(run("recover", store, "--yes", "--backup-dir", tmp_path / "bk"), 130) == "mqtool: error: interrupted before anything was changed"
    assert tree(store) == before


# ---- a store a process still holds --------------------------------------------------------------------


def test_a_live_lock_is_named_once_and_verify_warns(tmp_path):
    """Before: the refusal named the lock holder twice (lock, open file), and `verify` on a store a
    running broker holds said nothing about it."""
    store = copy_store("5.3.3", "clean-small", tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)", str(store / "lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        err = error_line(run("rebuild-index", store, "--yes"), EXIT_REFUSED)
        assert err.count(f"pid {holder.pid} ") == 1 and "holds the POSIX lock on" in err and "has open" in err
        checked = run("verify", store, "--only", "checkpoint")
        assert f"pid {holder.pid} holds the store's lock" in checked.stderr
    finally:
        holder.kill()
        holder.wait()


# ---- pipes and Ctrl-C in scans ------------------------------------------------------------------------


def stderr_on_a_terminal(args, columns=100) -> tuple[str, str]:
    """Run mqtool with stderr on a pseudo-terminal and stdout into a pipe (`mqtool ... | head`):
    (what the terminal shows from stderr, stdout)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    proc = subprocess.Popen([sys.executable, "-m", "mqtool", *map(str, args)], stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=ROOT, close_fds=True)
    os.close(slave)
    out = proc.stdout.read().decode()
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    return b"".join(chunks).decode("utf-8", "replace"), out


def test_no_progress_bar_when_stdout_is_a_pipe():
    """Before: `mqtool verify STORE -f jsonl | head -1` drew the bar on the terminal and head's line
    landed after it (`commitlog:   0%|...| 0.00/5.24M [00:00<?, ?B/s]{"kind": ...`)."""
    args = ["verify", store_path("5.3.3", "crashed-small"), "-f", "jsonl", "--only", "commitlog"]
    shown, out = stderr_on_a_terminal(args)
    assert out.splitlines()[-1].startswith('{"summary"') and "B/s" not in shown and "%|" not in shown
    forced, _ = stderr_on_a_terminal([*args, "--progress"])
    assert "commitlog" in forced and "B/s" in forced  # --progress still draws it


def test_ctrl_c_inside_compiled_code_is_an_interrupt():
    """Before: Ctrl-C during `dump STORE -f jsonl > file` on a big store said "internal error:
    SystemError: CPUDispatcher(<function _json_strings ...>) returned a result with an exception
    set" with exit 5: numba turns the KeyboardInterrupt into a SystemError caused by it."""
    import typer

    from mqtool.cli.common import guarded

    @guarded
    def scan():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function _json_strings>) returned a result with an exception set") from exc

    with pytest.raises(typer.Exit) as stopped:
        scan()
    assert stopped.value.exit_code == 130
