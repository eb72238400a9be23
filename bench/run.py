"""Run every benchmark, one after the other: ``python bench/run.py [--size 2g] [NAME ...]``.

NAME is ``verify``, ``recover`` or ``spark`` (default: all three). Each benchmark generates or
reuses its store under ``bench/out/`` (``bench/make_store.py``) and prints its numbers next to
baselines measured in the same run. Results are recorded in BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = {"verify": "bench_verify.py", "recover": "bench_recover.py", "spark": "bench_spark.py"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/run.py", description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run: {', '.join(BENCHES)} (default: all)")
    p.add_argument("--size", default="2g", help="commit log bytes per store (default 2g; e.g. 256m for a quick run)")
    a = p.parse_args(argv)
    unknown = set(a.names) - set(BENCHES)
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    failed = []
    for name in a.names or list(BENCHES):
        print(f"\n==== {name}: python bench/{BENCHES[name]} --size {a.size}", flush=True)
        started = time.perf_counter()
        rc = subprocess.call([sys.executable, str(HERE / BENCHES[name]), "--size", a.size])
        print(f"==== {name}: exit {rc} after {time.perf_counter() - started:.0f} s", flush=True)
        if rc:
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
