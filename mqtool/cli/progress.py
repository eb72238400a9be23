"""Progress bars for long scans: tqdm on stderr, in bytes; by default only when stderr is a terminal
and stdout is not a pipe (a bar would land among the lines of ``| less``); never with ``--quiet``."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from typing import Iterator

from .. import activity
from . import terminal
from .terminal import State


class ByteProgress:
    """Track a scan from ``start`` to ``stop`` (commit log offsets); cheap to call per record."""

    STEP = 1 << 22  # refresh at most every 4 MiB

    def __init__(self, start: int, stop: int, *, enabled: bool | None = None, desc: str = "scan"):
        self.bar = None  # not shown
        self.shown = start
        if drawn(enabled):
            from tqdm import tqdm

            terminal.drawing_bar()
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
            terminal.erase_line()  # a Ctrl-C's echoed ``^C`` too, when the bar is closed on the way out

    def __enter__(self) -> "ByteProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StageProgress:
    """One byte progress bar at a time (an ``activity.Listener``), new when the stage changes or its scan begins again."""

    def __init__(self, enabled: bool | None = None):
        self.enabled = enabled
        self.stage: str | None = None
        self.bar: ByteProgress | None = None
        self.done = 0

    def __call__(self, stage: str, delta: int, total: int) -> None:
        if self.bar is None or stage != self.stage or not delta:
            self.close()
            self.stage, self.done = stage, 0
            self.bar = ByteProgress(0, total, enabled=self.enabled, desc=stage)
        self.done += delta
        self.bar.advance(self.done)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def drawn(enabled: bool | None) -> bool:
    """Whether bars are drawn: ``--progress``, else when stderr is a terminal and stdout not a pipe; never ``--quiet``."""
    if enabled is None:
        try:
            piped = stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
        except (OSError, ValueError, AttributeError):
            piped = False
        enabled = not piped and sys.stderr.isatty()
    return enabled and not State.quiet


@contextlib.contextmanager
def scans_shown() -> Iterator[None]:
    """The block's long scans (``activity``) as progress bars, gone when it ends."""
    if not drawn(None):
        yield
        return
    bars = StageProgress()
    try:
        with activity.listening(bars):
            yield
    finally:
        bars.close()


def bar_width() -> int | None:
    """Two columns short of stderr's terminal: at full width an echoed ``^C`` wraps and the bar cannot be erased."""
    try:
        return max(os.get_terminal_size(sys.stderr.fileno()).columns - 2, 20)
    except (OSError, ValueError, AttributeError):
        return None
