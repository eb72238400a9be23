"""A bounded, in-order hand-off to a worker thread: one stage of ``sharedwalk.py``'s pipeline.

The commit log check's CRC walk (``fastscan.walk_segment``) and the cross-checks' compiled
kernels (``recovery/fastdispatch.py``) release the GIL (``nogil=True``), so on two CPUs the
cross-checks' work on one MiB of records can run while the walk reads the next. A ``Stage`` is
one thread that applies its ``work`` to the items ``put`` to it, one after another in the order
put (so whatever it yields comes out in the order a loop would have made it); at most ``depth``
items wait, so memory stays flat however far the walk could run ahead. An exception in the work
is raised again, in the putting thread, by the next ``put`` or ``drain``.
"""

from __future__ import annotations

import os
import queue
import threading
from typing import Callable

_STOP = object()


def usable_cpus() -> int:
    """CPUs this process may run on (``os.sched_getaffinity``): a second thread helps only on two."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class Stage:
    """``work(item)`` for every item ``put``, in order, in a thread of its own."""

    def __init__(self, work: Callable[[object], None], depth: int, name: str):
        self.work = work
        self.queue: queue.Queue = queue.Queue(depth)
        self.error: BaseException | None = None
        self.cancelled = False
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is _STOP:
                    return
                if self.error is None and not self.cancelled:
                    try:
                        self.work(item)
                    except BaseException as error:  # noqa: BLE001 - raised again in the putting thread
                        self.error = error
            finally:
                item = None  # no reference to the item (nor the mapped segment it holds) is kept
                self.queue.task_done()

    def put(self, item: object) -> None:
        self._raise()
        self.queue.put(item)

    def idle(self) -> bool:
        """Whether no item waits or is in hand."""
        return self.queue.unfinished_tasks == 0

    def drain(self) -> None:
        """Wait until every item put is done; raise the work's exception, if any."""
        self.queue.join()
        self._raise()

    def close(self) -> None:
        """Skip what waits, let the item in hand finish, end the thread."""
        if self.thread.is_alive():
            self.cancelled = True
            self.queue.put(_STOP)
            self.thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            self.cancelled = True
            raise error
