"""Where each command's kernels should stop running interpreted: both engines on small stores.

    python bench/bench_crossover.py [--sizes 4m,8m,16m] [--repeat 3]

Generates (``make_store.py``, cached under ``bench/out``) stores of 1 KiB records in 4 MiB
segments, 1024 records a MiB, and runs every command that settles its kernels
(``mqtool/cli/engine.py``) once with ``MQTOOL_ENGINE=compiled`` and once with ``python``,
alternating, as fresh processes. Prints the best wall time of each; the crossover, in records,
is where the two meet: ``engine.INTERPRETED_BELOW`` is set from it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from procs import mqtool_command  # noqa: E402

COMMANDS = (
    ["verify"], ["stats"], ["salvage", "--format", "jsonl"], ["recover", "--dry-run"], ["repair", "--dry-run"],
    ["truncate-dirty", "--dry-run"], ["rebuild-cq", "--dry-run"], ["rebuild-index", "--dry-run"],
)  # survivors reads the scan salvage reads


def make(size: str) -> Path:
    args = ["--size", size, "--message-size", "1k", "--segment-size", "4m", "--cq-file-size", "60000", "--hash-slots", "50000", "--index-num", "200000"]
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "make_store.py"), *args], capture_output=True, text=True, check=True)
    return Path(done.stdout.strip().splitlines()[-1])


def best(args: list[str], repeat: int) -> dict[str, float]:
    """The best wall time of ``args`` with each engine, runs alternating."""
    times: dict[str, list[float]] = {"compiled": [], "python": []}
    for _ in range(repeat):
        for engine, runs in times.items():
            env = {**os.environ, "MQTOOL_ENGINE": engine}
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            started = time.perf_counter()
            subprocess.run([*mqtool_command(), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
            runs.append(time.perf_counter() - started)
    return {engine: min(runs) for engine, runs in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4m,8m,16m")
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    print("| store | records | command | compiled s | interpreted s |")
    print("|---|---|---|---|---|")
    for size in opts.sizes.split(","):
        store = make(size)
        records = int(size[:-1]) * 1024
        for command in COMMANDS:
            args = [command[0], str(store), *command[1:]]
            walls = best(args, opts.repeat)
            print(f"| {size} | {records} | `{' '.join(command)}` | {walls['compiled']:.2f} | {walls['python']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
