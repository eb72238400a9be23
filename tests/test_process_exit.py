"""The console script ends the process without the interpreter's teardown (``cli/shutdown.py``),
and nothing outside can tell: the same output, exit codes and side effects as ``sys.exit``.

Each command runs twice in fresh processes: through ``python -m mqtool`` (the console script's
``main``, which ends with ``exit_process``) and through ``app()`` alone (typer's ``sys.exit``, the
interpreter's full teardown). Stdout, stderr and the exit code must be equal, on clean and
crashed fixtures, for findings, usage errors, bad input and a reader that closes the pipe early.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from conftest import store_path

CLEAN = store_path("5.3.3", "clean-small")
CRASHED = store_path("4.9.7", "crashed-small")
TEARDOWN = "import sys; from mqtool.cli import app; sys.argv[0] = 'mqtool'; app()"
TIMING = re.compile(rb'"(elapsed_s|throughput_bytes_per_s)": [0-9.]+')  # verify's summary: the run's own timing


def untimed(out: bytes) -> bytes:
    return TIMING.sub(rb'"\1": -', out)


def both(args: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    fast = subprocess.run([sys.executable, "-m", "mqtool", *args], capture_output=True, **kwargs)
    full = subprocess.run([sys.executable, "-c", TEARDOWN, *args], capture_output=True, **kwargs)
    return fast, full


@pytest.mark.parametrize(
    "args, code",
    [
        (["verify", str(CLEAN), "--format", "json"], 0),
        (["verify", str(CRASHED), "--format", "jsonl", "--keep-going"], 1),
        (["stats", str(CLEAN), "--format", "csv"], 0),
        (["dump", str(CLEAN), "--format", "jsonl"], 0),
        (["dump", str(CLEAN), "--no-such-option"], 2),
        (["verify", str(CLEAN / "no-such-dir")], 3),
    ],
    ids=["verify-clean", "verify-crashed", "stats", "dump", "usage", "bad-input"],
)
def test_output_and_exit_code_equal_to_a_full_teardown(args, code):
    fast, full = both(args)
    assert fast.returncode == full.returncode == code, (fast.stderr, full.stderr)
    assert untimed(fast.stdout) == untimed(full.stdout)
    assert fast.stderr == full.stderr
    if code in (0, 1):
        assert fast.stdout  # what the flush at the end delivers


def test_a_reader_that_goes_away_exits_quietly():
    """``mqtool dump | head -c 100``: exit 0 and nothing on stderr, as with the full teardown."""
    args = ["dump", str(CLEAN), "--format", "jsonl"]
    for argv in ([sys.executable, "-m", "mqtool", *args], [sys.executable, "-c", TEARDOWN, *args]):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert len(proc.stdout.read(100)) == 100
        proc.stdout.close()
        assert proc.wait() == 0
        assert proc.stderr.read() == b""
        proc.stderr.close()


def test_exit_process_waits_for_threads_runs_atexit_and_flushes(tmp_path):
    """A thread pool's work finishes, atexit handlers (a temporary directory's removal among
    them) run, buffered stdout arrives, and ``sys.exit``'s rules for the code hold."""
    marker = tmp_path / "atexit-ran"
    script = textwrap.dedent(
        f"""
        import atexit, sys, tempfile, time
        from concurrent.futures import ThreadPoolExecutor
        from pathlib import Path
        from mqtool.cli.shutdown import exit_process

        held = tempfile.TemporaryDirectory(dir={str(tmp_path)!r})
        Path(held.name, "f").write_text("x")
        atexit.register(lambda: Path({str(marker)!r}).write_text("ran"))
        pool = ThreadPoolExecutor(1)
        pool.submit(lambda: (time.sleep(0.2), Path({str(tmp_path / 'pool')!r}).write_text("done")))
        sys.stdout.write("buffered " * 10000)
        exit_process(sys.argv[1] if sys.argv[1] == "text" else int(sys.argv[1]))
        """
    )
    for code, expected in (("0", 0), ("1", 1), ("4", 4), ("text", 1)):
        out = subprocess.run([sys.executable, "-c", script, code], capture_output=True, text=True)
        assert out.returncode == expected
        assert out.stdout == "buffered " * 10000
        assert out.stderr == ("text\n" if code == "text" else "")
        assert marker.read_text() == "ran" and (tmp_path / "pool").read_text() == "done"
        assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []  # the temporary directory removed
        marker.unlink()
        (tmp_path / "pool").unlink()
