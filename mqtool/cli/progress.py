"""Progress bars for long scans: tqdm on stderr, in bytes; by default only when stderr is a
terminal and stdout is not a pipe (the reader of ``| head`` or ``| less`` writes to the same
terminal, and a bar would land in the middle of its lines); never with ``--quiet``; erased before
any finding, row or message is written (``terminal.clear_bars``). ``--progress`` forces them."""

from __future__ import annotations

import os
import stat
import sys

from tqdm import tqdm

from . import terminal
from .terminal import State


class ByteProgress:
    """Track a scan from ``start`` to ``stop`` (commit log offsets); cheap to call per record."""

    STEP = 1 << 22  # refresh at most every 4 MiB

    def __init__(self, start: int, stop: int, *, enabled: bool | None = None, desc: str = "scan"):
        disable = (None if not stdout_is_a_pipe() else True) if enabled is None else not enabled
        if State.quiet:
            disable = True
        self.bar = tqdm(total=max(stop - start, 0), unit="B", unit_scale=True, desc=desc, disable=disable, leave=False, ncols=bar_width())
        self.start = start
        self.shown = start
        if not self.bar.disable:
            terminal.show_bar(self.bar)  # cleared before data or a message is written

    def advance(self, offset: int) -> None:
        if offset - self.shown >= self.STEP:
            self.bar.update(offset - self.shown)
            self.shown = offset

    def close(self) -> None:
        terminal.hide_bar(self.bar)
        self.bar.close()

    def __enter__(self) -> "ByteProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def stdout_is_a_pipe() -> bool:
    try:
        return stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):
        return False


def bar_width() -> int | None:
    """Two columns short of stderr's terminal: a bar as wide as the terminal leaves the cursor
    past the edge, so the ``^C`` the terminal echoes wraps and the bar can no longer be erased."""
    try:
        return max(os.get_terminal_size(sys.stderr.fileno()).columns - 2, 20)
    except (OSError, ValueError, AttributeError):
        return None
