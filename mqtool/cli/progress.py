"""Progress bars for long scans: tqdm on stderr, in bytes; by default only when stderr is a terminal
and stdout is not a pipe (a bar would land among the lines of ``| less``); never with ``--quiet``."""

from __future__ import annotations

import os
import stat
import sys

from . import terminal
from .terminal import State


class ByteProgress:
    """Track a scan from ``start`` to ``stop`` (commit log offsets); cheap to call per record."""

    STEP = 1 << 22  # refresh at most every 4 MiB

    def __init__(self, start: int, stop: int, *, enabled: bool | None = None, desc: str = "scan"):
        if enabled is None:  # tqdm's own default (a terminal), not into a pipe
            enabled = not stdout_is_a_pipe() and sys.stderr.isatty()
        self.bar = None  # not shown
        self.shown = start
        if enabled and not State.quiet:
            from tqdm import tqdm

            self.bar = tqdm(total=max(stop - start, 0), unit="B", unit_scale=True, desc=desc, disable=False, leave=False, ncols=bar_width())
            terminal.show_bar(self.bar)  # cleared before data or a message is written

    def advance(self, offset: int) -> None:
        if self.bar is not None and offset - self.shown >= self.STEP:
            self.bar.update(offset - self.shown)
            self.shown = offset

    def close(self) -> None:
        if self.bar is not None:
            terminal.hide_bar(self.bar)
            self.bar.close()

    def __enter__(self) -> "ByteProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def written_end(commitlog, stop: int | None = None) -> int:
    """A bar's total: where the written bytes end as far as the file system knows (``stop`` bounds it).
    Not ``end_of_files``: trailing segments the broker pre-allocated (``AllocateMappedFileService``)
    start with a zero size, and in the last written one the first hole (``SEEK_HOLE``) is where writes stopped."""
    end = commitlog.end_of_files
    for seg in reversed(commitlog.segments):
        try:
            with open(seg.path, "rb") as f:
                if f.read(4) in (b"", b"\0\0\0\0"):
                    end = seg.base_offset  # never written: pre-allocated
                    continue
                hole = os.lseek(f.fileno(), 0, os.SEEK_HOLE)
        except (OSError, AttributeError):  # no SEEK_HOLE here: the whole file counts
            hole = seg.size
        end = seg.base_offset + min(hole, seg.size)
        break
    return end if stop is None else min(stop, end)


def stdout_is_a_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def bar_width() -> int | None:
    """Two columns short of stderr's terminal: at full width an echoed ``^C`` wraps and the bar cannot be erased."""
    try:
        return max(os.get_terminal_size(sys.stderr.fileno()).columns - 2, 20)
    except (OSError, ValueError, AttributeError):
        return None
