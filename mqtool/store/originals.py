"""The files a rebuild compares its bytes with, so a file already holding them is left alone."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .fastscan import data_ranges
from .mappedfile import open_read_only

CHUNK = 1 << 22  # bytes read at a time where the bytes expected are zeros


class OriginalFiles:
    """A rebuild's original files, one open at a time, read by ``pread`` once each (zeros past a short end): memory flat."""

    def __init__(self):
        self._open: tuple[Path, object] | None = None

    def file(self, path: Path):
        """``path`` open for reading, unbuffered (``fileno`` for ``pread``)."""
        if self._open is None or self._open[0] != path:
            self.close()
            self._open = (path, os.fdopen(open_read_only(path), "rb", buffering=0))
        return self._open[1]

    def holds(self, path: Path, position: int, data: np.ndarray) -> bool:
        """Whether the file holds the bytes ``data`` (uint8) from ``position`` on."""
        got = os.pread(self.file(path).fileno(), len(data), position).ljust(len(data), b"\0")
        return bool(np.array_equal(np.frombuffer(got, dtype=np.uint8), data))

    def zeros(self, path: Path, start: int, stop: int) -> bool:
        """Whether the file's bytes in ``[start, stop)`` are all zero: the holes of a sparse file skipped unread (``data_ranges``)."""
        fd = self.file(path).fileno()
        for lo, hi in data_ranges(fd, start, stop):
            for at in range(lo, hi, CHUNK):
                if np.frombuffer(os.pread(fd, min(CHUNK, hi - at), at), dtype=np.uint8).any():
                    return False
        return True

    def close(self) -> None:
        if self._open is not None:
            self._open[1].close()
            self._open = None
