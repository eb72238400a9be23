"""The audit of this stop's new lines, read as a person reads them: a refusal's cause named twice in one line, a preview
that says "re-run with --yes" of a restore --yes refuses, a repair's backup of a moved store called changed by others.
Each test failed before its fix."""

from __future__ import annotations

import json
import os

from conftest import copy_store
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.errors import EXIT_FINDINGS

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