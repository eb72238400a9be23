"""Peak memory of a benchmarked command and every process it starts; the command that runs
mqtool from this tree or from another source tree (``mqtool_command``).

``ru_maxrss`` cannot be used for a child: Linux carries the parent's high-water mark into a
forked child and across ``exec``, so a child of a large benchmark process reports the parent's
peak. Instead the benchmark samples ``VmRSS`` of the command and all its descendants from
``/proc`` while it runs, and reports the largest single process (and the largest sum).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

# Runs mqtool from a source tree instead of the installed (editable) one: its finder is dropped, so
# ``mqtool`` and the ``formats``/``recovery`` beside it come from the tree (mqtool/__init__.py); with
# the finder kept, ``python -m mqtool`` in the tree would take those two from the installed tree.
OLD_TREE_LAUNCHER = (
    "import sys; tree = sys.argv.pop(1); sys.meta_path[:] = [f for f in sys.meta_path if 'Editable' not in str(f)]; "
    "sys.path.insert(0, tree); sys.argv[0] = 'mqtool'; from mqtool.cli import main; sys.exit(main())"
)


def mqtool_command(tree: Path | None = None) -> list[str]:
    """``python -m mqtool`` of the installed tree, or the same from source tree ``tree``."""
    return [sys.executable, "-m", "mqtool"] if tree is None else [sys.executable, "-c", OLD_TREE_LAUNCHER, str(tree)]


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            found.append(c)
            todo.append(c)
    return found


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field: str = "VmRSS:") -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class TreeSampler:
    """Samples the RSS of ``pid`` and its descendants every ``interval`` seconds, the descendants
    listed anew every ``RELIST`` samples: listing them reads every process's ``/proc`` entry, which
    every 10 ms took a share of a 2-CPU machine from the command measured (the kernel here has no
    ``/proc/PID/task/TID/children``)."""

    RELIST = 10

    def __init__(self, pid: int, interval: float = 0.01):
        self.pid, self.interval = pid, interval
        self.peak_process_mb = 0.0
        self.peak_total_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        tick, tree = 0, [self.pid]
        while not self._stop.is_set():
            if tick % self.RELIST == 0:
                tree = [self.pid, *descendants(self.pid)]
            tick += 1
            sizes = [rss_mb(p) for p in tree]
            self.peak_process_mb = max(self.peak_process_mb, *sizes)
            self.peak_total_mb = max(self.peak_total_mb, sum(sizes))
            self._stop.wait(self.interval)

    def __enter__(self) -> "TreeSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def run_measured(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``cmd``; returns (completed process, wall seconds, peak RSS of its largest process in MB)."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
    with TreeSampler(proc.pid) as sampler:
        out, err = proc.communicate()
    elapsed = time.perf_counter() - started
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), elapsed, sampler.peak_process_mb


def run_with_cpu(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float, float]:
    """``run_measured`` and the CPU seconds (user + sys) of ``cmd`` and every process it started:
    comparable between runs on a busy machine where wall time is not."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc, wall, peak = run_measured(cmd, **kwargs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return proc, wall, peak, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
