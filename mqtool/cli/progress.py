"""Progress bars for long scans: tqdm on stderr, in bytes, off when stderr is not a terminal."""

from __future__ import annotations

from tqdm import tqdm

from .common import State


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

    def advance(self, offset: int) -> None:
        if offset - self.shown >= self.STEP:
            self.bar.update(offset - self.shown)
            self.shown = offset

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> "ByteProgress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
