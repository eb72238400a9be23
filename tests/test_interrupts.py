"""A command interrupted, or whose output is gone, ends the documented way.

SIGINT, SIGTERM and a closed stdout were sent at random times into every command (readers and
writers, on a generated 512 MiB store and on copies of it damaged). Ctrl-C landed outside the
commands' ``guarded`` edge at start-up and at exit: it is now one line, ``mqtool: error:
interrupted``, and exit 130 (each place made deterministic here by raising the KeyboardInterrupt
where the signal landed). An interrupted restore is said by ``info`` and finished only by
``restore``. A stdout or stderr closed before the command starts drops what is written there.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, store_path

CLEAN = store_path("5.3.3", "clean-small")
INTERRUPTED = "mqtool: error: interrupted\n"


def ctrl_c_at_import(module: str, args: list[str]) -> subprocess.CompletedProcess:
    """``python -m mqtool ARGS`` with a KeyboardInterrupt raised when ``module`` is first imported,
    as a Ctrl-C landing in that import does."""
    script = textwrap.dedent(f"""
        import runpy, sys

        class CtrlC:
            def find_spec(self, name, path=None, target=None):
                if name == {module!r}:
                    raise KeyboardInterrupt
                return None

        sys.meta_path.insert(0, CtrlC())
        sys.argv = ["mqtool", *sys.argv[1:]]
        runpy.run_module("mqtool", run_name="__main__", alter_sys=True)
    """)
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.mark.parametrize(
    "module",
    ["typer", "mqtool.cli.terminal", "mqtool.cli.coercion", "mqtool.cli.info", "mqtool.store"],
    ids=["loading-the-cli", "starting-the-cli", "before-the-group-runs", "loading-the-command", "loading-the-store-model"],
)
def test_ctrl_c_while_mqtool_starts_is_one_line_and_exit_130(module):
    """Before: a Ctrl-C in the first tens of milliseconds of a command, while typer and the CLI
    were imported, printed a traceback (and the process died of SIGINT); one while typer loaded or
    parsed the command (outside its ``guarded`` edge) exited 130 silently: typer's ``_main`` turns
    a KeyboardInterrupt into ``Exit(130)`` without a word."""
    done = ctrl_c_at_import(module, ["info", str(CLEAN)])
    assert (done.returncode, done.stderr) == (130, INTERRUPTED)
    assert done.stdout == ""


def test_ctrl_c_while_the_process_ends_is_no_traceback():
    """Before: a Ctrl-C while ``exit_process`` waited for a pool's threads (``threading._shutdown``)
    or ran the atexit handlers printed a traceback; now the remaining steps still run and a command
    that had succeeded exits 130."""
    script = textwrap.dedent("""
        import atexit, sys
        from mqtool.cli import shutdown

        def waiting_for_threads():
            raise KeyboardInterrupt

        atexit.register(lambda: sys.stdout.write("atexit ran\\n"))
        shutdown.exit_steps = lambda: (waiting_for_threads, atexit._run_exitfuncs)
        sys.stdout.write("output\\n")
        shutdown.exit_process(int(sys.argv[1]))
    """)
    for code, expected in ((0, 130), (1, 1)):
        done = subprocess.run([sys.executable, "-c", script, str(code)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert done.returncode == expected, done.stderr
        assert done.stdout == "output\natexit ran\n"
        assert done.stderr == (INTERRUPTED if code == 0 else "")


def test_an_interrupted_restore_is_said_by_info_and_finished_only_by_restore(tmp_path, monkeypatch):
    """Before: a restore cut short (Ctrl-C, or a kill) after the apply it undoes had completed left
    no trace in the store: ``info`` said nothing of the half-restored files. After an interrupted
    apply, ``info`` said to run the command again to finish it, and doing so "finished" the apply
    from the half-restored files (the steps the restore had undone counted as done): exit 0 on a
    store ``verify`` then found unsound. Now the restore marks the store while it runs; ``info``
    says to finish it with ``mqtool restore`` (a repair's whole backup when one of its stages was
    being restored), and the repair command refuses until then."""
    from typer.testing import CliRunner

    from conftest import copy_store
    from mqtool.apply import backup as backups
    from mqtool.apply import executor
    from mqtool.cli import app

    runner = CliRunner()

    def tree(root):
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    def cut_short(after_files: int):
        copy, copied = backups._put_back, []  # a kept file put back (a hard link or a copy)

        def ctrl_c(*args, **kwargs):
            if len(copied) == after_files:
                raise KeyboardInterrupt
            copied.append(copy(*args, **kwargs))

        monkeypatch.setattr(backups, "_put_back", ctrl_c)

    for case in ("complete", "interrupted", "repair"):
        store = copy_store("4.9.7", "rewrite-clean" if case == "repair" else "crashed-small", tmp_path / case)
        backup = tmp_path / case / "backup"
        before = tree(store)
        if case == "repair":  # a repair's stages are restored last first, as one: its directory finishes the restore
            assert runner.invoke(app, ["repair", str(store), "--yes", "--backup-dir", str(backup)]).exit_code == 0
            stages = sorted(p for p in backup.iterdir() if p.is_dir())
            assert [p.name for p in stages] == ["01-recover", "02-rebuild-cq"]
            cut_short(1)
            assert runner.invoke(app, ["restore", str(backup), "--yes"]).exit_code == 130
            monkeypatch.undo()
            said = runner.invoke(app, ["info", str(store)]).stderr
            assert f"a restore on this store was interrupted (backup {stages[-1]}): the store is partly restored; finish it with: mqtool restore {backup} --yes" in said
            assert runner.invoke(app, ["restore", str(backup), "--yes"]).exit_code == 0
            assert tree(store) == before
            continue
        if case == "interrupted":
            points = iter(range(1, 100))

            def ctrl_c_at_the_9th(label):  # the apply's 9th durability point: after several files were backed up
                if next(points) == 9:
                    raise KeyboardInterrupt

            monkeypatch.setattr(executor, "durability_point", ctrl_c_at_the_9th)
        assert runner.invoke(app, ["recover", str(store), "--yes", "--backup-dir", str(backup)]).exit_code == (130 if case == "interrupted" else 0)
        monkeypatch.undo()
        cut_short(1)
        assert runner.invoke(app, ["restore", str(backup), "--yes"]).exit_code == 130
        monkeypatch.undo()
        said = runner.invoke(app, ["info", str(store)]).stderr
        assert f"a restore on this store was interrupted (backup {backup}): the store is partly restored; finish it with: mqtool restore {backup} --yes" in said
        again = runner.invoke(app, ["recover", str(store), "--yes", "--backup-dir", str(tmp_path / case / "again")])
        assert again.exit_code == 4 and f"finish it with: mqtool restore {backup} --yes" in again.stderr
        # before: without --yes, "an earlier apply on this store was interrupted ...: run the command again with
        # --yes to finish it first", which then refused as above
        for args, code in (([], 4), (["--dry-run"], 0)):
            planned = runner.invoke(app, ["recover", str(store), *args])
            assert planned.exit_code == code and f"a restore on this store was interrupted (backup {backup})" in planned.stderr
            assert "run the command" not in planned.stderr and "apply on this store was interrupted" not in planned.stderr
        assert runner.invoke(app, ["restore", str(backup), "--yes"]).exit_code == 0
        assert tree(store) == before


# ---- output that is gone before the command starts ---------------------------------------------


@pytest.mark.parametrize("closed", ["stdout", "stderr"])
def test_a_stdout_or_stderr_closed_at_start_drops_what_is_written_there(closed, tmp_path):
    """Before: with stdout closed (``mqtool recover STORE --yes >&-``, Python's ``sys.stdout`` is then
    None) every command exited 5, "internal error: AttributeError: 'NoneType' object has no attribute
    'write'"; with stderr closed (``2>&-``) every command that notes something exited 1 without a
    word, and ``recover --yes`` changed nothing. Now what goes there is dropped, as for a closed pipe,
    and the exit code is the command's own."""
    import os

    from conftest import copy_store

    fd = {"stdout": 1, "stderr": 2}[closed]
    store = copy_store("4.9.7", "crashed-small", tmp_path)

    def mqtool(*args):
        return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                              preexec_fn=lambda: os.close(fd))

    found = mqtool("verify", store, "--only", "checkpoint")
    assert found.returncode == 1  # findings: the abort file
    done = mqtool("recover", store, "--yes")
    assert done.returncode == 0, done.stderr
    assert not (store / "abort").exists()
    assert mqtool("verify", store).returncode == 0
    assert (done.stderr if closed == "stdout" else done.stdout) != ""  # the other stream still says what it says


@pytest.mark.parametrize("command", ["recover", "repair", "apply"])
def test_a_ctrl_c_after_the_last_write_is_ignored_while_the_apply_is_reported(command, tmp_path, monkeypatch):
    """Before: a Ctrl-C landing while ``recover --yes`` (``repair``, ``apply``) said "applied; undo
    with: ..." after its last write made it exit 130 "interrupted" with the store fully changed (seen
    in the random-SIGINT runs on rebuild-cq); docs/recovery.md says a Ctrl-C once the last write is
    done is ignored and the command reports success. The report is now said while interrupts are
    still deferred."""
    import os
    import signal

    from typer.testing import CliRunner

    from conftest import copy_store
    from mqtool.cli import app
    from mqtool.cli import repair as repair_cli

    runner = CliRunner()
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    args = [command, str(store), "--yes", "--backup-dir", str(tmp_path / "backup")]
    if command == "apply":
        plan = tmp_path / "plan.json"
        assert runner.invoke(app, ["recover", str(store), "--plan-out", str(plan)]).exit_code == 0
        args = ["apply", str(plan), "--yes", "--backup-dir", str(tmp_path / "backup")]
    said = repair_cli.note

    def ctrl_c_while_reporting(message, **how):
        if " applied" in message:
            os.kill(os.getpid(), signal.SIGINT)  # the Ctrl-C lands as the success is said
        said(message, **how)

    monkeypatch.setattr(repair_cli, "note", ctrl_c_while_reporting)
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.stderr
    assert "interrupted" not in done.stderr and not (store / "abort").exists()


@pytest.mark.parametrize("args", [["dump", "-n", "3", "-f", "jsonl"], ["dump", "-n", "3"]])
def test_a_ctrl_c_that_lands_in_a_finalizer_is_no_traceback_and_ends_the_command(args):
    """Before: a Ctrl-C landing while a scan's generator was dropped (the walk's page-mapping thread joined as
    `dump -n 3` stopped early; or a second Ctrl-C pressed while the first unwound, seen on a 2 GiB store)
    printed "Exception ignored in: <generator object FastScan.__iter__> ... KeyboardInterrupt" and was lost:
    the dump went on and exited 0. Now nothing is printed for it and the command ends "interrupted", exit 130."""
    script = textwrap.dedent("""
        import sys
        import mqtool.store.fastscan as fastscan

        close = fastscan.PagesAhead.close

        def ctrl_c_as_it_closes(self):
            close(self)
            raise KeyboardInterrupt  # where the signal lands: in the walk generator's finally, run as it is dropped

        fastscan.PagesAhead.close = ctrl_c_as_it_closes
        sys.argv = ["mqtool", *sys.argv[1:]]
        from mqtool.cli import main
        main()
    """)
    done = subprocess.run([sys.executable, "-c", script, args[0], str(CLEAN), *args[1:]], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 130 and done.stderr.endswith(INTERRUPTED), done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_a_ctrl_c_once_the_backup_set_exists_but_before_the_apply_began_changed_nothing(command, tmp_path, monkeypatch):
    """Ctrl-C after the backup set's manifest was written, before the apply's first step (``Executor.run``). Before: "partly
    applied: finish with the same command again, or undo with: mqtool restore ...", though no file of the store had changed
    and the backup held nothing to undo. Now it says nothing was changed and removes that empty backup; the store is as it
    was, and the same command again applies it."""
    from conftest import copy_store
    from repair_support import tree
    from typer.testing import CliRunner

    from mqtool.apply import executor
    from mqtool.cli import app

    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    before = tree(store)
    args = [command, str(store), "--yes", "--backup-dir", str(tmp_path / "my backup")]

    def ctrl_c(self):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(executor.Executor, "run", ctrl_c)
        stopped = CliRunner().invoke(app, args)
    assert stopped.exit_code == 130 and stopped.stderr.strip().splitlines()[-1] == "mqtool: error: interrupted before anything was changed"
    assert tree(store) == before and not [p for p in store.iterdir() if p.name.startswith(".mqtool")]
    assert not (tmp_path / "my backup").exists()
    assert CliRunner().invoke(app, args).exit_code in (0, 1)


def test_a_ctrl_c_once_every_stage_is_restored_says_the_store_is_restored(tmp_path, monkeypatch):
    """A Ctrl-C landing after a repair's last stage was put back, as ``restore`` removes the ``.mqtool-repair`` mark
    (``clear_repair_mark``): before, exit 130 "interrupted while restoring: run ... again to finish", on a store already
    whole. Now the line says the store is restored and that restore again only tidies up, which it does (exit 0, the mark gone)."""
    from typer.testing import CliRunner

    from conftest import copy_store
    from mqtool.apply import backup as backups
    from mqtool.cli import app

    runner = CliRunner()
    store = copy_store("4.9.7", "rewrite-clean", tmp_path)
    backup = tmp_path / "backup"
    before = {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}
    assert runner.invoke(app, ["repair", str(store), "--yes", "--backup-dir", str(backup)]).exit_code == 0
    clear = backups.clear_repair_mark

    def ctrl_c_as_the_mark_goes(root, **kwargs):
        if backups.stopped_repair(root) is None and (root / backups.REPAIR_MARKER).exists():  # every stage put back
            raise KeyboardInterrupt
        clear(root, **kwargs)

    backups.write_pending(store, backup, backups.REPAIR_MARKER)  # as a repair stopped between its stages leaves it
    monkeypatch.setattr(backups, "clear_repair_mark", ctrl_c_as_the_mark_goes)
    cut = runner.invoke(app, ["restore", str(backup), "--yes"])
    monkeypatch.undo()
    assert cut.exit_code == 130
    assert cut.stderr.splitlines()[-1] == ("mqtool: error: interrupted as the restore ended: the store is restored; "
                                           f"`mqtool restore {backup} --yes` again only tidies up (it removes the .mqtool-repair mark)")
    after = {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}
    assert {k: v for k, v in after.items() if k != backups.REPAIR_MARKER} == before
    again = runner.invoke(app, ["restore", str(backup), "--yes"])
    assert again.exit_code == 0 and "nothing to restore" in again.stderr
    assert not (store / backups.REPAIR_MARKER).exists()
