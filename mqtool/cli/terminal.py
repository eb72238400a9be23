"""What the command line knows about the terminal: global flags, the width tables are laid out
to, colour, messages on stderr, and the progress bars that must be cleared before anything else
is written.

Width: ``COLUMNS`` when set, else the terminal width of stdout, stderr or stdin (the first that is
a terminal), else 80 -- so a piped table is laid out like the terminal it is read in.
Colour: only on a terminal, never with ``NO_COLOR`` set (https://no-color.org) or ``TERM=dumb``.
"""

from __future__ import annotations

import os
import sys

from rich.console import Console

from .state import State

DEFAULT_WIDTH = 80


stderr = Console(stderr=True, highlight=False, soft_wrap=True)

_bars: list = []  # progress bars on screen (objects with ``clear()``), see progress.py


def width() -> int:
    """The width to lay out tables to."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    for stream in (sys.__stdout__, sys.__stderr__, sys.__stdin__):
        try:
            return os.get_terminal_size(stream.fileno()).columns or DEFAULT_WIDTH
        except (AttributeError, ValueError, OSError):
            continue
    return DEFAULT_WIDTH


def color(out) -> bool:
    """Whether to style text written to ``out``."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    try:
        return out.isatty()
    except (AttributeError, ValueError):
        return False


def show_bar(bar) -> None:
    _bars.append(bar)


def hide_bar(bar) -> None:
    if bar in _bars:
        _bars.remove(bar)


def clear_bars() -> None:
    """Erase the progress bars from the screen (they redraw on their next update) so that a line
    written now starts at the left edge instead of after a bar."""
    for bar in _bars:
        bar.clear()


def note(message: str) -> None:
    """``mqtool: message`` on stderr, unless ``--quiet``."""
    if not State.quiet:
        clear_bars()
        stderr.print(f"mqtool: {message}", markup=False)


class DataConsole(Console):
    """A rich console for data on stdout: a closed pipe raises ``BrokenPipeError`` for the
    command's edge to handle (rich's default exits with status 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


class DataStream:
    """stdout for data: clears the progress bars before each write while one is on screen."""

    def __init__(self, out):
        self.out = out

    def write(self, text: str) -> int:
        if _bars:
            clear_bars()
        return self.out.write(text)

    def __getattr__(self, name):
        return getattr(self.out, name)


def data_stream(out=None):
    out = out or sys.stdout
    return out if isinstance(out, DataStream) else DataStream(out)
