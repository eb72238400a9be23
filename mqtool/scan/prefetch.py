"""``Prefetch``: iterate a batch source in a worker thread, a few items ahead of the consumer.

The columnar scan's kernels release the GIL (``nogil``), so a walk building the next batch and a
consumer encoding the previous one (``mqtool dump``'s text encoder) run on two cores at once.
Items are handed over in order through a bounded queue (memory stays flat); an exception in the
source is raised in the consumer, at the position it happened; closing the iterator early (a
``--limit`` reached, a closed pipe) stops the worker after the item it is building.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterable, Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class Prefetch(Iterator[T]):
    """``for item in Prefetch(source, depth)``: the items of ``source``, built in a thread."""

    def __init__(self, source: Iterable[T], depth: int = 2):
        self._items: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._run, args=(source,), name="mqtool-prefetch", daemon=True)
        self._thread.start()

    def _run(self, source: Iterable[T]) -> None:
        try:
            for item in source:
                if not self._put((True, item)):
                    return
            self._put((True, _DONE))
        except BaseException as exc:  # handed to the consumer, raised there
            self._put((False, exc))

    def _put(self, entry) -> bool:
        while not self._stop.is_set():
            try:
                self._items.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __next__(self) -> T:
        if self._finished:
            raise StopIteration
        ok, item = self._items.get()
        if ok and item is not _DONE:
            return item
        self._finished = True
        self._thread.join()
        if not ok:
            raise item
        raise StopIteration

    def close(self) -> None:
        """Stop the worker (after the item it is building) and wait for it."""
        self._stop.set()
        self._finished = True
        self._thread.join()

    def __enter__(self) -> "Prefetch[T]":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
