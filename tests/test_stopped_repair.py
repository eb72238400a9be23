"""A ``repair --yes`` killed between two of its stages (SIGKILL, SIGTERM, power loss) left the earlier
stages applied and said nothing: ``info`` showed a finished, partial repair. Now ``info`` names it
(the stages done, the backup, how to finish and how to undo it), the other repair commands refuse
to change the store under it, ``repair --yes`` again finishes it in the same backup directory, and
``restore`` of that directory gives every file back byte for byte; either clears the mark."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from conftest import copy_store
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.errors import EXIT_OK, EXIT_REFUSED
from repair_support import mqtool
from test_undo import snapshot

runner = CliRunner()
KILL_BETWEEN = {"MQTOOL_TEST_KILL_AT": "before stage 02-rebuild-cq"}  # rewrite-clean: 01-recover, then 02-rebuild-cq


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def stopped(tmp_path):
    """4.9.7 rewrite-clean (a real two-stage repair: the broker's recovery, then its stale consume queue
    entries rebuilt) with a real `mqtool repair --yes` SIGKILLed after stage 01, before stage 02 began;
    the store's snapshot before, and the backup directory."""
    store = copy_store("4.9.7", "rewrite-clean", tmp_path / "on call")
    before = snapshot(store)
    backup = (tmp_path / "my backup").resolve()
    killed = mqtool("repair", store, "--broker-version", "4.9.7", "--yes", "--backup-dir", backup, env=KILL_BETWEEN)
    assert killed.returncode == -9, killed.stderr
    assert sorted(p.name for p in backup.iterdir()) == ["01-recover"] and snapshot(store) != before
    return store, backup, before


def commands_said(line: str) -> list[list[str]]:
    """The command lines a message quotes between backticks, as a shell splits them."""
    return [shlex.split(c) for c in re.findall(r"`([^`]*)`", line)]


def test_info_names_a_repair_killed_between_stages_and_repair_again_finishes_it(stopped, tmp_path):
    store, backup, before = stopped
    shown = run("info", store)
    assert shown.exit_code == EXIT_OK and "Traceback" not in shown.output
    line = shown.stderr.splitlines()[0]
    assert line.startswith(f"mqtool: a repair on this store stopped before its last stage (backup {shlex.quote(str(backup))}: stage(s) 01-recover done)"), line
    finish, undo = commands_said(line)  # the repair again as it was run (its --broker-version too), and the undo
    assert (finish, undo) == (["mqtool", "repair", str(store), "--broker-version", "4.9.7", "--yes"], ["mqtool", "restore", str(backup), "--yes"])
    wide = runner.invoke(app, ["info", str(store)], env={"COLUMNS": "400"})  # the row on one line, however long the temporary path
    assert f"interrupted repair  backup {shlex.quote(str(backup))} (see the note on stderr)" in wide.stdout.splitlines()
    as_json = json.loads(run("info", store, "-f", "json").stdout)
    assert as_json["interrupted_repair"] == {"backup": str(backup), "done": ["01-recover"], "stopped_in": None, "broker_version": "4.9.7", "broker_config": None}
    assert as_json["interrupted_apply"] is None  # no stage was cut short inside

    # another repair command would change the store between the repair's stages: refused, nothing changed
    left = snapshot(store)
    refused = run("rebuild-cq", store, "--yes")
    assert refused.exit_code == EXIT_REFUSED and "a repair on this store stopped before its last stage" in refused.stderr
    assert snapshot(store) == left

    elsewhere = run("repair", store, "--yes", "--backup-dir", tmp_path / "another backup")  # one repair, one backup directory
    assert elsewhere.exit_code == EXIT_REFUSED and f"the stopped repair's stages are in {backup}" in elsewhere.stderr
    assert snapshot(store) == left and not (tmp_path / "another backup").exists()

    reference = copy_store("4.9.7", "rewrite-clean", tmp_path / "reference")
    assert run("repair", reference, "--broker-version", "4.9.7", "--yes", "--backup-dir", tmp_path / "reference-backup").exit_code == EXIT_OK
    again = run(*finish[1:])  # as the line says it
    assert again.exit_code == EXIT_OK, again.stderr
    assert "repair applied in 1 stage(s) (after the 1 the stopped run applied)" in again.stderr
    assert sorted(p.name for p in backup.iterdir()) == ["01-recover", "02-rebuild-cq"]  # one backup directory: one restore undoes all
    assert snapshot(store) == snapshot(reference)  # as an uninterrupted repair left it, the mark gone
    after = run("info", store)
    assert after.exit_code == EXIT_OK and "repair on this store" not in after.stderr
    assert json.loads(run("info", store, "-f", "json").stdout)["interrupted_repair"] is None

    assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


def test_the_line_that_finishes_a_stopped_repair_gives_its_broker_config_again(tmp_path):
    """A repair run with ``--broker-config`` and killed between stages: the finish command ``info``
    says carries the same file (its path quoted: it has a space), and finishes the repair as run."""
    store = copy_store("4.9.7", "rewrite-clean", tmp_path / "s")
    config = tmp_path / "broker a.conf"
    config.write_text(f"storePathRootDir={store}\nbrokerName=broker-a\n")
    killed = mqtool("repair", store, "--broker-config", config, "--broker-version", "4.9.7", "--yes", "--backup-dir", tmp_path / "bk", env=KILL_BETWEEN)
    assert killed.returncode == -9, killed.stderr
    line = run("info", store).stderr.splitlines()[0]
    finish, _undo = commands_said(line)
    assert finish == ["mqtool", "repair", str(store), "--broker-config", str(config.resolve()), "--broker-version", "4.9.7", "--yes"], line
    again = run(*finish[1:])
    assert again.exit_code == EXIT_OK and "after the 1 the stopped run applied" in again.stderr, again.stderr


def test_restore_of_a_repair_killed_between_stages_gives_every_file_back(stopped):
    store, backup, before = stopped
    restored = run("restore", backup, "--yes")
    assert restored.exit_code == EXIT_OK, restored.stderr
    assert snapshot(store) == before  # every file byte for byte, and the mark gone
    shown = run("info", store)
    assert shown.exit_code == EXIT_OK and "repair on this store" not in shown.stderr


KILLED_AS_A_STAGE_BEGINS = """
import os, signal, sys
import mqtool.apply.backup as backup
create = backup.BackupSet.create
write_atomic = backup.write_atomic
def killed_writing(path, *args):
    if path.name == "manifest.json":  # its directory made, the manifest not yet there
        os.kill(os.getpid(), signal.SIGKILL)
    return write_atomic(path, *args)
if {where!r} == "making":
    backup.write_atomic = killed_writing
def killed(cls, directory, *args):
    if {where!r} == "before" or directory.name.startswith("02-"):
        os.kill(os.getpid(), signal.SIGKILL)
    made = create.__func__(cls, directory, *args)
    if {where!r} == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return made
backup.BackupSet.create = classmethod(killed)
sys.argv = ["mqtool", *sys.argv[1:]]
from mqtool.__main__ import main
main()
"""


@pytest.mark.parametrize("where", ["before", "making", "after"])
def test_a_repair_killed_before_its_first_stage_changed_anything_leaves_no_mark_restore_cannot_remove(tmp_path, where):
    """SIGKILL as the first stage's backup set is made (``before``), while it is (``making``: its
    directory made, not its manifest), or once it is (``after``: nothing backed up yet). Before:
    ``.mqtool-repair`` was written first, naming a backup directory with no stage in it; the store kept
    the mark and ``restore`` of that directory exited 3 ("not an mqtool backup"). The mark is written
    once the stage's backup set exists: the store is as it was (``restore`` says there is nothing to
    restore), or ``restore`` gives it back."""
    import subprocess
    import sys

    from repair_support import ROOT

    store = copy_store("4.9.7", "rewrite-clean", tmp_path / "s")
    before = snapshot(store)
    backup = tmp_path / "bk"
    killed = subprocess.run([sys.executable, "-c", KILLED_AS_A_STAGE_BEGINS.format(where=where), "repair", str(store), "--broker-version", "4.9.7",
                             "--yes", "--backup-dir", str(backup)], capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -9, killed.stderr
    if where == "before":
        assert snapshot(store) == before
    elif where == "making":
        assert snapshot(store) == before
        said = run("restore", backup, "--yes")
        assert said.exit_code == EXIT_OK and "nothing to restore" in said.stderr, said.stderr
        assert snapshot(store) == before
    else:
        restored = run("restore", backup, "--yes")
        assert restored.exit_code == EXIT_OK, restored.stderr
        assert snapshot(store) == before


@pytest.mark.parametrize("fails", ["backup set", "journal"])
def test_a_write_refused_in_a_later_stage_names_the_undo_of_the_whole_repair(tmp_path, monkeypatch, fails):
    """A full backup disk in stage 02, after stage 01 changed the store. Before: the error said "cannot
    create the backup: ...; nothing was changed" with no undo line, or named the undo of stage 02 alone,
    which left stage 01 applied. Now: the whole repair's restore, which gives every file back."""
    import errno

    from mqtool.apply.backup import BackupSet, Journal
    from mqtool.errors import EXIT_BAD_INPUT

    store = copy_store("4.9.7", "rewrite-clean", tmp_path / "s")
    before = snapshot(store)
    backup = tmp_path / "bk"
    full = OSError(errno.ENOSPC, "No space left on device", str(backup / "02-rebuild-cq" / "manifest.json"))
    if fails == "backup set":
        create = BackupSet.create.__func__

        def refused(cls, directory, *args):
            if directory.name.startswith("02-"):
                raise full
            return create(cls, directory, *args)

        monkeypatch.setattr(BackupSet, "create", classmethod(refused))
    else:
        append = Journal.append

        def refused(self, *events):
            if self.path.parent.name.startswith("02-"):
                raise full
            append(self, *events)

        monkeypatch.setattr(Journal, "append", refused)
    stopped = run("repair", store, "--broker-version", "4.9.7", "--yes", "--backup-dir", backup)
    assert stopped.exit_code == EXIT_BAD_INPUT, stopped.stderr
    line = stopped.stderr.strip().splitlines()[-1]
    assert "No space left on device" in line and "nothing was changed" not in line, line
    assert line.endswith(f"or undo every stage with: mqtool restore {backup} --yes"), line
    assert snapshot(store) != before
    monkeypatch.undo()
    assert run("restore", backup, "--yes").exit_code == EXIT_OK
    assert snapshot(store) == before


KILLED_AS_THE_MARK_GOES = """
import os, signal, sys
import mqtool.apply.backup as backup
remove = backup.remove
def killed(path):
    if path.name == ".mqtool-repair":
        os.kill(os.getpid(), signal.SIGKILL)
    return remove(path)
backup.remove = killed
sys.argv = ["mqtool", *sys.argv[1:]]
from mqtool.__main__ import main
main()
"""


def test_a_restore_killed_as_it_removes_the_repair_mark_removes_it_when_run_again(stopped):
    """``restore`` of a repair stopped between stages, SIGKILLed once its stage was put back, as it removed
    ``.mqtool-repair``. Before: run again, it said "nothing to restore: ... already restored" and the mark
    stayed in the store for good. Now the run again removes it: the store is as before the repair."""
    import subprocess
    import sys

    from repair_support import ROOT

    store, backup, before = stopped
    killed = subprocess.run([sys.executable, "-c", KILLED_AS_THE_MARK_GOES, "restore", str(backup), "--yes"], capture_output=True, text=True, cwd=ROOT)
    assert killed.returncode == -9, killed.stderr
    assert (store / ".mqtool-repair").exists()
    again = run("restore", backup, "--yes")
    assert again.exit_code == EXIT_OK, again.stderr
    assert snapshot(store) == before


def test_a_repair_stopped_inside_a_stage_names_the_repair_that_finishes_it(tmp_path, monkeypatch):
    """The store's disk full while stage 02-rebuild-cq stages its files (after 01-recover is applied), on a store whose path
    has a space, run with --broker-version. Before: "fix this and run the same repair again (with --yes) to finish it", and
    `repair STORE --yes` alone could not be pasted (the path unquoted nowhere; the version left out). Now the line names
    the repair as run, pasteable; it finishes the repair, and `info` names the same command before that."""
    import errno
    import os

    from mqtool.apply.backup import STAGING_DIR

    store, backup = copy_store("4.9.7", "rewrite-clean", tmp_path / "on call"), tmp_path / "bk"
    real = os.pwrite

    def pwrite(fd, data, offset):
        if (backup / "02-rebuild-cq").exists() and STAGING_DIR in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", pwrite)
        stopped = run("repair", store, "--broker-version", "4.9.7", "--yes", "--backup-dir", backup)
    line = stopped.stderr.splitlines()[-1]
    assert stopped.exit_code == 3 and "the repair stopped in stage 02-rebuild-cq" in line, stopped.stderr
    repair = ["mqtool", "repair", str(store), "--broker-version", "4.9.7", "--yes"]
    assert commands_said(line) == [repair] and commands_said(run("info", store).stderr.splitlines()[0])[0] == repair
    again = run(*repair[1:])
    assert again.exit_code == EXIT_OK and "after the 1 the stopped run applied" in again.stderr, again.stderr
