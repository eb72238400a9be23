"""The audit of this stop's new lines, read as a person reads them: a refusal's cause named twice in one line, a preview
that says "re-run with --yes" of a restore --yes refuses, a repair's backup of a moved store called changed by others.
Each test failed before its fix."""

from __future__ import annotations

import json
import os
import signal

from conftest import copy_store
from repair_support import damage_index_entry, mqtool
from typer.testing import CliRunner

from mqtool.apply import read_pending
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_REFUSED

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


def test_a_fifo_named_as_a_segment_names_its_loader_once(tmp_path):
    """4.9.7's next start on a FIFO where the last segment was. Before: "..., which MappedFileQueue.load lists:
    MappedFileQueue.load: 0 bytes, not 1048576", the loader said twice in a row."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    last = sorted((root / "commitlog").iterdir())[-1]
    size = last.stat().st_size
    last.unlink()
    os.mkfifo(last)
    res = run("verify", root, "--broker-version", "4.9.7")
    first = " ".join(res.stdout.split("\nERROR")[0].split())
    assert res.exit_code == EXIT_FINDINGS and first == (
        f"the broker's next start refuses to start: commitlog/{last.name}: a FIFO, socket or device node, which "
        f'MappedFileQueue.load lists: 0 bytes, not {size} ("length not matched")'), res.stdout


def test_timercheck_behind_says_where_the_enqueue_resumes_once(tmp_path):
    """5.3.3 timer-crashed (the real broker resumed at 126). Before: "... masterTimerQueueOffset 126 on: the broker's timer
    recovery resumes rmq_sys_wheel_timer at timercheck's masterTimerQueueOffset 126, before ...", the offset said twice."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    res = run("verify", root, "--keep-going", "-f", "json")
    (found,) = [f for f in json.loads(res.stdout)["findings"] if f["kind"] == "timercheck-behind"]
    assert found["found"] == 126 and found["message"].count("126") == 1, found["message"]
    assert found["message"].startswith("the timer log holds units of messages from timercheck's masterTimerQueueOffset 126 on: "
                                       "the broker's timer recovery resumes rmq_sys_wheel_timer there, before the message of the "
                                       "log's last unit"), found["message"]


def test_restores_preview_meets_the_refusal_yes_meets(tmp_path):
    """``recover --yes``, then ``rebuild-index --yes --backup-dir`` elsewhere. Before: ``restore RECOVERED`` (the preview) said
    "nothing changed: re-run with --yes to restore", and --yes then refused, saying "changed after the repair" of a recover.
    Now the preview refuses as --yes does, naming the recover."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    assert run("recover", store, "--yes").exit_code == EXIT_OK
    (recovered,) = (tmp_path / ".mqtool-backups").iterdir()
    damage_index_entry(store)  # an index file rebuild-index rewrites: the recover's, which it would otherwise leave as it is
    assert run("rebuild-index", store, "--yes", "--backup-dir", tmp_path / "elsewhere").exit_code == EXIT_OK
    preview, done = run("restore", recovered), run("restore", recovered, "--yes")
    said = " ".join(preview.stderr.split())
    assert preview.exit_code == done.exit_code == EXIT_REFUSED and preview.stderr == done.stderr, preview.stderr
    assert "changed after the recover by something other than mqtool" in said and "restore that backup first" in said, said


def test_a_repairs_backup_of_a_moved_store_is_refused_as_moved(tmp_path):
    """A repair's backup (stages), its store renamed since. Before: "4 file(s) changed after the repair by something other
    than mqtool ...: pass --force to restore anyway" (exit 4), every file it touched taken as changed; one apply's backup
    said to move the store back. Now so does a repair's (exit 3), the preview too."""
    store = copy_store("4.9.7", "rewrite-clean", tmp_path)
    assert run("repair", store, "--yes", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    store.rename(store.with_name("moved"))
    for args in ((), ("--yes",)):
        res = run("restore", tmp_path / "backup", *args)
        said = " ".join(res.stderr.split())
        assert res.exit_code == EXIT_BAD_INPUT and f"{store}: the store this backup belongs to does not exist" in said, said
        assert "move the store back there, then restore" in said and "--force" not in said, said


def test_a_wrong_wheel_before_a_short_queue_file_names_the_command_that_fixes_both(tmp_path):
    """5.3.3 timer-crashed, its timerwheel cut to 1000000 bytes and a consume queue file to 1000. Before: the next start's line
    said the queue file is one "which `mqtool recover` fixes", and `mqtool recover` then refused ("`mqtool repair` fixes the file
    first"). The repair that resizes the wheel rewrites the queue file too: the line says so."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    os.truncate(root / "consumequeue/TopicTest/1/00000000000000000000", 1000)
    os.truncate(root / "timerwheel", 1000000)
    line = json.loads(run("verify", root, "-f", "json").stdout)["summary"]["next_start"]["line"]
    assert ("once `repair` has resized the wheel, it refuses to start: consumequeue/TopicTest/1/00000000000000000000: 1000 bytes, "
            "not 20000, which that `repair` fixes too; with that file fixed, it keeps [0, 1262364)") in line, line
    refused = run("recover", root)
    assert refused.exit_code == EXIT_BAD_INPUT and "`mqtool repair` fixes the file first" in refused.stderr, refused.stderr


def test_an_interrupted_apply_named_from_restore_says_which_command_finishes_it(tmp_path):
    """``recover --yes``, then ``rebuild-index --yes --backup-dir OTHER`` killed part-way; ``restore`` of the recover backup.
    Before: "... finish or undo it before restoring another backup: run the command again with --yes to finish it", where
    the command run was ``restore`` (and info's note said the same). Now it names the command that finishes it, which does."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    assert run("recover", store, "--yes").exit_code == EXIT_OK
    (recovered,) = (tmp_path / ".mqtool-backups").iterdir()
    damage_index_entry(store)  # an index file rebuild-index rewrites: the recover's, which it would otherwise leave as it is
    killed = mqtool("rebuild-index", store, "--yes", "--backup-dir", tmp_path / "other", env={"MQTOOL_TEST_KILL_AT": "2"})
    assert killed.returncode == -signal.SIGKILL and read_pending(store) is not None, killed.stderr
    finish = f"run `mqtool rebuild-index {store} --yes` to finish it, or undo it with: mqtool restore {tmp_path / 'other'} --yes"
    for args in ((), ("--yes",)):
        res = run("restore", recovered, *args)
        assert res.exit_code == EXIT_REFUSED and finish in " ".join(res.stderr.split()), res.stderr
    assert finish in " ".join(run("info", store).stderr.split())
    assert run("rebuild-index", store, "--yes").exit_code == EXIT_OK and read_pending(store) is None
