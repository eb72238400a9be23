"""Progress bars for long scans: tqdm on stderr, in bytes, off when stderr is not a terminal or with
``--quiet``; erased before any finding, row or message is written (``terminal.clear_bars``)."""

from __future__ import annotations

from tqdm import tqdm

from . import terminal
from .terminal import State


class ByteProgress:
    """Track a scan from ``start`` to ``stop`` (commit log offsets); cheap to call per record."""

    STEP = 1 << 22  # refresh at most every 4 MiB

    def __init__(self, start: int, stop: int, *, enabled: bool | None = None, desc: str = "scan"):
        disable = None if enabled is None else not enabled
        if State.quiet:
            disable = True
        self.bar = tqdm(total=max(stop - start, 0), unit="B", unit_scale=True, desc=desc, disable=disable, leave=False)
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
