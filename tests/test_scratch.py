"""mqtool's working files (``mqtool/scratch.py``) in a temporary directory with no room: the command
stops with one line naming the directory and what to do (exit 3), not with a bare "cannot write" the
user would take for the store's own disk."""

from __future__ import annotations

import errno
import shutil
import tempfile

import pytest
from conftest import copy_store
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.errors import BadInput
from mqtool.recovery import queues
from mqtool.scratch import working_file_error, short_write
from mqtool.verify import sharedwalk

FULL = OSError(errno.ENOSPC, "No space left on device")


def said_full(result) -> None:
    assert result.exit_code == 3, result.output
    assert result.stderr.strip() == (f"mqtool: error: cannot write mqtool's working files in {tempfile.gettempdir()} (No space left on device): "
                                     "free space there, or set TMPDIR to a directory with room")


def test_a_full_tmpdir_stops_a_plan_saying_where_and_what_to_do(tmp_path, monkeypatch):
    """The units a plan places are spilled (``UnitSpill``) once a queue holds ``PRUNE_EVERY``."""
    root = copy_store("5.3.3", "clean-small", tmp_path)
    shutil.rmtree(root / "consumequeue")  # every unit placed again
    monkeypatch.setattr(queues.QueueSim, "PRUNE_EVERY", 1)

    def full(*args):
        raise FULL

    monkeypatch.setattr(queues.os, "pwritev", full)
    said_full(CliRunner().invoke(app, ["rebuild-cq", str(root), "--dry-run"]))


def test_a_full_tmpdir_stops_verify_saying_where_and_what_to_do(tmp_path, monkeypatch):
    """verify spills its findings (``SharedWalk._spill``) past ``CHUNK`` of them."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    (root / "abort").unlink(missing_ok=True)
    for segment in sorted((root / "commitlog").iterdir())[:1]:  # every record's CRC wrong: a finding each
        data = bytearray(segment.read_bytes())
        data[:: 97] = bytes(len(data[:: 97]))
        segment.write_bytes(data)
    monkeypatch.setattr(sharedwalk, "CHUNK", 1)

    class Full:
        def write(self, data):
            raise FULL

        def flush(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(sharedwalk, "scratch_file", lambda prefix: Full())
    said_full(CliRunner().invoke(app, ["verify", str(root), "--keep-going"]))


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES])
def test_what_the_machine_refuses_is_said_as_bad_input(code):
    said = working_file_error(OSError(code, "refused"))
    assert isinstance(said, BadInput) and tempfile.gettempdir() in str(said) and "TMPDIR" in str(said)


def test_anything_else_stays_what_it_was():
    other = OSError(errno.EBADF, "Bad file descriptor")
    assert working_file_error(other) is other
    assert working_file_error(short_write()).exit_code == 3  # a short write to a regular file: its file system is full
