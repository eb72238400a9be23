"""Bounded, in-order hand-offs between a command's thread and one helper: ``Stage`` consumes, ``produced_in_thread`` produces."""

from __future__ import annotations

import os
import queue
import threading
from typing import Callable, Iterator, NamedTuple

_STOP = object()
_DONE = object()


class Failure(NamedTuple):
    """An exception raised in a helper thread, handed over to be raised again in the caller's."""

    exc: BaseException


def usable_cpus() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``): a second thread helps only on two."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Stage:
    """``work(item)`` for every item ``put``, in order, in its own thread; the putter waits only in ``SimpleQueue.get``."""

    def __init__(self, work: Callable[[object], None], depth: int, name: str):
        self.work = work
        self.items: queue.SimpleQueue = queue.SimpleQueue()
        self.places: queue.SimpleQueue = queue.SimpleQueue()  # one token per item that may be put and not done (``depth`` waiting, one in hand)
        self.capacity = depth + 1
        for _ in range(self.capacity):
            self.places.put(None)
        self.put_count = self.done_count = 0
        self.error: BaseException | None = None
        self.cancelled = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.items.get()
            if item is _STOP:
                return
            try:
                if self.error is None and not self.cancelled:
                    try:
                        self.work(item)
                    except BaseException as error:  # noqa: BLE001 - raised again in the putting thread
                        self.error = error
            finally:
                item = None  # no reference to the item (nor the mapped segment it holds) is kept
                self.done_count += 1
                self.places.put(None)

    def put(self, item: object) -> None:
        """Hand ``item`` over (waiting while ``depth`` items wait); raise the work's exception, if any."""
        self._raise()
        self.places.get()
        self.put_count += 1
        self.items.put(item)

    def pending(self) -> int:
        """Items put and not yet done (waiting or in hand)."""
        return self.put_count - self.done_count

    def idle(self) -> bool:
        """Whether no item waits or is in hand."""
        return self.pending() == 0

    def drain(self) -> None:
        """Wait until every item put is done; raise the work's exception, if any."""
        taken = 0
        try:
            while taken < self.capacity:  # every token back: nothing waits or is in hand
                self.places.get()
                taken += 1
        finally:
            for _ in range(taken):
                self.places.put(None)
        self._raise()

    def close(self) -> None:
        """Skip what waits, let the item in hand finish, end the thread."""
        if self.thread.is_alive():
            self.cancelled = True
            self.items.put(_STOP)
            self.thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            self.cancelled = True
            raise error


def produced_in_thread(items: Iterator, name: str, depth: int = 2) -> Iterator:
    """``items`` produced in a thread up to ``depth`` ahead; closing the generator stops it. Waits as ``Stage`` does."""
    channel: queue.SimpleQueue = queue.SimpleQueue()
    places: queue.SimpleQueue = queue.SimpleQueue()  # one token per item the producer may be ahead
    for _ in range(depth):
        places.put(None)
    stopped = []  # not empty once the caller has stopped (a list: no lock to take)

    def run() -> None:
        try:
            for item in items:
                while not stopped:
                    try:
                        places.get(timeout=0.1)
                        break
                    except queue.Empty:
                        continue
                if stopped:
                    return
                channel.put(item)
            channel.put(_DONE)
        except BaseException as exc:  # noqa: BLE001 - raised again in the consuming thread
            channel.put(Failure(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a generator left early runs its cleanup now, in the thread that ran it

    worker = threading.Thread(target=run, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item = channel.get()
            if item is _DONE:
                break
            if isinstance(item, Failure):
                raise item.exc
            places.put(None)
            yield item
    finally:
        stopped.append(True)
        worker.join()
