"""What the command line knows about the terminal: global flags, the width tables are laid out
to, colour, messages on stderr, and the progress bars that must be cleared before anything else
is written.

Width: ``COLUMNS`` when set, else the terminal width of stdout, stderr or stdin (the first that is
a terminal), else 80 -- so a piped table is laid out like the terminal it is read in.
Colour: only on a terminal, never with ``NO_COLOR`` set (https://no-color.org) or ``TERM=dumb``.
Messages are plain writes: rich is imported only by what draws with it (``output.Screen`` text).
"""

from __future__ import annotations

import os
import sys

from .state import State

DEFAULT_WIDTH = 80
# what rich's ``Text`` strips from a message (BEL, BS, VT, FF, CR): nothing can overwrite the line
_CONTROL = dict.fromkeys((7, 8, 11, 12, 13))


def write_stderr(line: str) -> None:
    """``line`` on stderr as written, less the control codes that move the cursor, tabs expanded
    (as the rich console these lines were once printed through did; no emoji codes replaced).
    Once an apply is confirmed (``State.output_may_close``) a closed stderr drops the line."""
    try:
        sys.stderr.write(line.translate(_CONTROL).expandtabs(8) + "\n")
        sys.stderr.flush()
    except BrokenPipeError:
        if not State.output_may_close:
            raise
        to_devnull(sys.stderr)


def open_closed_streams() -> None:
    """Stdin, stdout or stderr closed when mqtool started (``>&-``, ``2>&-``; Python then makes it
    None): /dev/null on its descriptor and a stream over it, so what is written there is dropped,
    as to a closed pipe, and the command's exit code is its own; nor can a file mqtool opens (a
    store file under repair) take descriptor 1 or 2."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is not None:
            continue
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", closefd=False))


def to_devnull(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null, so that what is buffered and written
    later (the final flush at exit too) cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass

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
    return isatty(out)


def isatty(stream) -> bool:
    """Whether ``stream`` is a terminal (False for a closed stream, or None)."""
    try:
        return stream.isatty()
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
    """``mqtool: message`` on stderr, unless ``--quiet``; on a terminal wrapped to its width at spaces
    (an offset, a path or an id is never split), in a pipe or a file one line."""
    if not State.quiet:
        clear_bars()
        text = f"mqtool: {message}"
        if isatty(sys.__stderr__):
            from ..table import wrap

            text = "\n".join(wrap(text, width()))
        write_stderr(text)


def data_console(**kwargs):
    """A rich console for data on stdout (rich imported now): a closed pipe raises
    ``BrokenPipeError`` for the command's edge to handle (rich's default exits with status 1)."""
    from rich.console import Console

    class DataConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return DataConsole(**kwargs)


class DataStream:
    """A stream for data: when it writes to the terminal the progress bars are on, it clears
    them before each write (written to a file or a pipe, the data leaves the bars alone)."""

    def __init__(self, out):
        self.out = out
        self.on_screen = isatty(out)

    def clear_bars(self) -> None:
        if _bars and self.on_screen:
            clear_bars()

    def write(self, text: str) -> int:
        self.clear_bars()
        return self.out.write(text)

    def __getattr__(self, name):
        return getattr(self.out, name)


def data_stream(out=None):
    out = out or sys.stdout
    return out if isinstance(out, DataStream) else DataStream(out)
