"""``verify --jobs N`` (N > 1): the cq and index checks in a forked process, overlapping the commit log check.

Only where they cannot read the commit log check's own walk (a DLedger store, or ``SHARE_WALK``
off; else ``sharedwalk.py``). The child runs exactly the serial code
(``Verification._cross_check``) on a walk of its own (``LogStream``), the end of the files standing
in for the logical end it cannot know yet: its findings are the serial run's whenever the logical
end is where the stream ended, and otherwise the parent drops them and runs the checks itself.
Findings are pickled in chunks to an unlinked temporary file and replayed in order once the
commit log's findings are out."""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
import time
from typing import TYPE_CHECKING, Callable, Generator

from ..store.mappedfile import exit_on_sigbus, sigbus_handled
from .findings import Finding, replay_spilled

if TYPE_CHECKING:
    from .crosscheck import CrossCheckOutcome
    from .verification import Verification

CHUNK = 4096  # findings per pickled chunk


class ForkedCrossCheck:
    """Start the cross-checks in a child now; ``result`` waits for it, ``replay`` yields its findings."""

    def __init__(self, verification: "Verification", cross: list[str], start: int):
        import multiprocessing

        self.findings = tempfile.TemporaryFile(prefix="mqtool-verify-")
        self.outcome_file = tempfile.TemporaryFile(prefix="mqtool-verify-")
        self.counter = multiprocessing.get_context("fork").Value("q", 0, lock=False)
        self.outcome: CrossCheckOutcome | None = None
        self.pid = os.fork()
        if self.pid == 0:  # pragma: no cover - the child; its work is checked through the parent
            os._exit(self._child(verification, cross, start))

    def _child(self, verification: "Verification", cross: list[str], start: int) -> int:
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: the parent reports it
            if sigbus_handled():
                exit_on_sigbus(worker=True)  # a failed mapped read ends the parent with its one line
            run = verification._cross_check(cross, start, None, None, progress=self._count)
            chunk: list[Finding] = []
            while True:
                try:
                    chunk.append(next(run))
                except StopIteration as done:
                    outcome = done.value
                    break
                if len(chunk) >= CHUNK:
                    pickle.dump(chunk, self.findings, pickle.HIGHEST_PROTOCOL)
                    chunk = []
            if chunk:
                pickle.dump(chunk, self.findings, pickle.HIGHEST_PROTOCOL)
            self.findings.flush()
            pickle.dump(outcome, self.outcome_file, pickle.HIGHEST_PROTOCOL)
            self.outcome_file.flush()
            return 0
        except BaseException:  # noqa: BLE001 - any failure: the parent runs the checks itself
            return 1

    def _count(self, delta: int) -> None:
        self.counter.value += delta

    def result(self, logical_end: int | None, progress: Callable[[int], None] | None) -> "ForkedCrossCheck | None":
        """Wait for the child; self when its findings are the serial run's, else None."""
        shown = 0
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if progress is not None:
                done = self.counter.value
                progress(done - shown)
                shown = done
            if pid:
                break
            time.sleep(0.05)
        self.pid = 0
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            return None
        self.outcome_file.seek(0)
        self.outcome = pickle.load(self.outcome_file)
        end = self.outcome.end
        if end is None or end.offset != logical_end:
            return None
        return self

    def replay(self) -> Generator[Finding, None, "CrossCheckOutcome"]:
        yield from replay_spilled(self.findings)
        return self.outcome

    def close(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self.pid = 0
        self.findings.close()
        self.outcome_file.close()
