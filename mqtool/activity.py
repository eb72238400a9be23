"""How far a command's long work has got, for the progress bars: ``(stage, delta, total)`` to whoever is ``listening``."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterable, Iterator

Listener = Callable[[str, int, int], None]  # (stage, bytes walked since the last report, the stage's bytes in all); 0 bytes: a scan of the stage begins

_listener: Listener | None = None


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """``listener`` hears every report made while the block runs."""
    global _listener
    before, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = before


def listener(prefix: str = "") -> Listener | None:
    """The one listening (its stages named ``prefix + stage``), or None."""
    heard = _listener
    return heard if heard is None or not prefix else lambda stage, delta, total: heard(prefix + stage, delta, total)


def reporter(stage: str, start: int, stop: int) -> Callable[[int], None] | None:
    """For a scan of ``[start, stop)``: a function told each offset reached, or None when nobody listens."""
    heard = _listener
    if heard is None:
        return None
    heard(stage, 0, stop - start)
    shown = [start]

    def reached(offset: int) -> None:
        if offset > shown[0]:
            heard(stage, offset - shown[0], stop - start)
            shown[0] = offset

    return reached


def reached_by(batches: Iterable, stage: str, start: int, end: Callable[[], int]) -> Iterable:
    """``batches`` of records, the offset each reaches told to listeners (``end()`` at the end); closing it closes them."""
    reached = reporter(stage, start, end()) if _listener is not None else None
    return batches if reached is None else _reporting(batches, reached)


def _reporting(batches: Iterable, reached: Callable[[int], None]) -> Iterator:
    try:
        for batch in batches:
            reached(int(batch.offsets[-1] + batch.sizes[-1]))
            yield batch
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
