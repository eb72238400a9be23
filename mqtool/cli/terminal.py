"""What the command line knows of the terminal: width, colour, stderr messages and progress bars cleared before output."""

from __future__ import annotations

import io
import os
import sys

from .state import State

DEFAULT_WIDTH = 80
# what rich's ``Text`` strips from a message (BEL, BS, VT, FF, CR): nothing can overwrite the line
_CONTROL = dict.fromkeys((7, 8, 11, 12, 13))


def debug_traceback() -> None:
    """``--debug``: the handled exception's traceback on stderr, before its one error line."""
    if State.debug:
        import traceback

        clear_bars()
        traceback.print_exc()


def error_line(message: str, code: int) -> None:
    """The one ``mqtool: error:`` line, on a line of its own: the bars erased, and after a Ctrl-C (``code`` 130) the ``^C`` the
    terminal echoed where no bar was (not a line of stdout's output left open: ``write_stderr`` ends it)."""
    clear_bars()
    if code == 130 and not WholeWrites.line_open:
        erase_line()
    write_stderr(f"mqtool: error: {message}")


def write_stderr(line: str) -> None:
    """``line`` on stderr without cursor-moving control codes (``table.visible``), after ending stdout's open line; once an apply
    is confirmed (``State.output_may_close``) a closed stderr drops it."""
    if WholeWrites.line_open and isatty(sys.stdout) and isatty(sys.stderr):
        WholeWrites.line_open = False
        line = "\n" + line
    from ..table import visible

    try:
        sys.stderr.write(visible(line.translate(_CONTROL).expandtabs(8)) + "\n")
        sys.stderr.flush()
    except BrokenPipeError:
        if not State.output_may_close:
            raise
        to_devnull(sys.stderr)


def open_closed_streams() -> None:
    """Stdin, stdout or stderr closed at start (``>&-``): /dev/null on its descriptor, so no store file takes it."""
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


class WholeWrites(io.FileIO):
    """A descriptor written to its last byte: a short write (a disk filling up) goes on so the rest fails with the disk's error,
    where CPython's buffered stdout would cut the file and exit 0."""

    line_open = False  # the last line written may lack its newline (``write_stderr``)

    def write(self, data) -> int | None:
        view, done = memoryview(data).cast("B"), 0
        if not view:
            return 0
        WholeWrites.line_open = True  # until every byte is written: a Ctrl-C lands between any two statements
        while done < len(view):
            n = super().write(view[done:])
            if not n:  # non-blocking and full (None), or nothing taken: as the plain descriptor says
                return done or n
            done += n
        WholeWrites.line_open = view[-1] != 0x0A
        return done


def complete_stdout_writes() -> None:
    """``sys.stdout`` over ``WholeWrites``: every byte written, or an ``OSError`` (exit 3, ``guarded``)."""
    out = sys.stdout
    try:
        raw = WholeWrites(out.fileno(), "w", closefd=False)
    except (OSError, ValueError, AttributeError):  # not a descriptor (a test's capture)
        return
    out.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(raw), encoding=out.encoding, errors=out.errors, newline="\n",
                                  line_buffering=out.line_buffering, write_through=out.write_through)


def to_devnull(stream) -> None:
    """Point ``stream``'s descriptor at /dev/null: what is written later (the final flush too) cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass

_bars: list = []  # progress bars on screen (objects with ``clear()``), see progress.py
_bar_line = False  # stderr's line may hold a bar drawn or closed (and a ``^C`` echoed after it) that ``erase_line`` has not blanked


def width() -> int:
    """``COLUMNS``, else the width of the first terminal of stdout, stderr and stdin, else 80."""
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
    """Whether to style text written to ``out``: only on a terminal, never with ``NO_COLOR`` or ``TERM=dumb``."""
    return not (os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb") and isatty(out)


def isatty(stream) -> bool:
    """Whether ``stream`` is a terminal (False for a closed stream, or None)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def drawing_bar() -> None:
    """A bar is about to be drawn on stderr's line: a Ctrl-C before ``show_bar`` has its line blanked too (``clear_bars``)."""
    global _bar_line
    _bar_line = True


def show_bar(bar) -> None:
    _bars.append(bar)


def hide_bar(bar) -> None:
    drawing_bar()  # its line is blanked once the bar is closed (``erase_line``), or by the next ``clear_bars``
    if bar in _bars:
        _bars.remove(bar)


def clear_bars() -> None:
    """Erase the progress bars (they redraw on their next update): a line written now starts at the left edge."""
    for bar in _bars:
        bar.clear()
    if _bars or _bar_line:
        erase_line()


def erase_line() -> None:
    """Blank stderr's line on a terminal: tqdm blanks only its bar's width, not the ``^C`` the terminal echoed after the bar
    (``progress.bar_width`` leaves it the room), which the next line (``mqtool: error: interrupted``) would end with. An escape
    sequence where ``color`` writes them, else (``NO_COLOR``, ``TERM=dumb``) blanks over the line, as tqdm's own are."""
    global _bar_line
    _bar_line = False
    if isatty(sys.stderr):
        try:
            sys.stderr.write("\r\x1b[K" if color(sys.stderr) else "\r" + " " * width() + "\r")
            sys.stderr.flush()
        except (OSError, ValueError):  # a closed or vanished terminal: the line it would blank is gone too
            pass


def note(message: str, *, always: bool = False) -> None:
    """``mqtool: message`` on stderr unless ``--quiet`` (``always``: even then), wrapped at spaces on a terminal."""
    if always or not State.quiet:
        clear_bars()
        text = f"mqtool: {message}"
        if isatty(sys.__stderr__):
            from ..table import wrap

            text = "\n".join(wrap(text, width(), commands=True))
        write_stderr(text)


def data_console(**kwargs):
    """A rich console for data on stdout: a closed pipe raises ``BrokenPipeError`` (rich's default exits 1)."""
    from rich.console import Console

    class DataConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return DataConsole(**kwargs)


class DataStream:
    """A stream for data: writing to the terminal, it clears the progress bars before each write."""

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
