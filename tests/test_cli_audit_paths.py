"""The paths the earlier audits did not take: an output file on a full disk, an apply cut short, restores of stores
moved or backed up twice, output cut by ``| head``, ``--format json`` on every exit path, a store a live broker holds.
Each test failed before its fix."""

from __future__ import annotations

import errno
import io

from typer.testing import CliRunner

from conftest import store_path

from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT

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
    assert done.stderr.splitlines()[-1] == "mqtool: error: cannot write: No space left on device"
    assert not out.exists(), out.stat().st_size
    assert f"mqtool: {out}: removed: the Parquet file was cut short before its footer" in done.stderr
    assert "holds only the rows" not in done.stderr
