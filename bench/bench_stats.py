"""Benchmark ``mqtool stats`` against ``mqtool verify --only commitlog``, and one ``mqtool query``.

    python bench/bench_stats.py                       # 256 MiB store of 1 KiB records (default)
    python bench/bench_stats.py --size 2g --out /tmp/x

On a store from ``bench/make_store.py`` (generated or reused), page cache warm, best of
``--repeat``, measured in the same run and interleaved:

- ``verify --only commitlog`` in-process (``Verification``) and ``stats`` in-process
  (``mqtool.scan.stats.collect``): the ratio stats / verify (target <= 1.3);
- both CLIs end to end (process start-up included): the ratio again;
- wall and CPU time (the process's own, and its children's for the CLIs: the steadier figure
  on a shared machine);
- ``query uniq-key`` and ``query msg-id`` of a record in the last segment: in-process lookup and
  CLI wall time (target: <= 0.3 s for the whole process on a 2 GiB store).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_store  # noqa: E402

from mqtool.scan.stats import collect  # noqa: E402
from mqtool.store import Store  # noqa: E402
from mqtool.store.lookup import UNIQ_KEY, query_message, read_message  # noqa: E402
from mqtool.verify import Verification, VerifyOptions  # noqa: E402

STATS_TARGET = 1.3
QUERY_TARGET_S = 0.3
MQTOOL = str(Path(sys.executable).with_name("mqtool"))


def warm(path: Path) -> None:
    for f in sorted((path / "commitlog").iterdir()):
        with open(f, "rb") as fh:
            while fh.read(64 << 20):
                pass


def timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``: CPU of this process plus of the children it waited for."""
    def cpu() -> float:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

    t, c = time.perf_counter(), cpu()
    fn()
    return time.perf_counter() - t, cpu() - c


def verify_once(path: Path) -> None:
    with Store.open(path) as store:
        sum(1 for _ in Verification(store, VerifyOptions(checks=("commitlog",))).findings())


def stats_once(path: Path) -> None:
    with Store.open(path) as store:
        collect(store)


def cli(*args: str) -> None:
    subprocess.run([MQTOOL, *args], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def probe_record(path: Path):
    """A record near the end of the last segment: its topic, UNIQ_KEY and offsetMsgId."""
    with Store.open(path) as store:
        last = store.index_files[-1].header.end_phy_offset
        record, _ = read_message(store, last)
        props = record.property_map(legacy=store.legacy_properties)
        return record.topic_name, props["UNIQ_KEY"], record.msg_id


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/bench_stats.py", description=__doc__.splitlines()[0])
    make_store.add_arguments(p)
    p.set_defaults(size="256m")
    p.add_argument("--out", type=Path, default=make_store.OUT, help="store cache directory (default bench/out)")
    p.add_argument("--repeat", type=int, default=5)
    a = p.parse_args(argv)
    path = make_store.ensure_store(make_store.spec_from_args(a), a.out, log=lambda m: print(m, file=sys.stderr))
    warm(path)
    with Store.open(path) as store:  # also compiles / loads the cached kernels once
        data = collect(store).end.offset - store.commitlog.min_offset  # record bytes up to the logical end
    runs: dict[str, list[tuple[float, float]]] = {}
    topic, uniq, msg_id = probe_record(path)
    for _ in range(a.repeat):
        for name, fn in (
            ("verify --only commitlog (in-process)", lambda: verify_once(path)),
            ("stats (in-process)", lambda: stats_once(path)),
            ("mqtool verify --only commitlog (CLI)", lambda: cli("verify", "--only", "commitlog", str(path))),
            ("mqtool stats (CLI)", lambda: cli("stats", str(path), "-f", "jsonl")),
            ("query uniq-key (in-process)", lambda: _query(path, topic, uniq)),
            ("mqtool query uniq-key (CLI)", lambda: cli("query", "uniq-key", str(path), topic, uniq, "-f", "jsonl")),
            ("mqtool query msg-id (CLI)", lambda: cli("query", "msg-id", str(path), msg_id, "-f", "jsonl")),
            ("python -c 'import mqtool.cli' (start-up alone)", lambda: subprocess.run([sys.executable, "-c", "import mqtool.cli"], check=True)),
        ):
            runs.setdefault(name, []).append(timed(fn))
    best = {k: min(w for w, _ in v) for k, v in runs.items()}
    best_cpu = {k: min(c for _, c in v) for k, v in runs.items()}
    print(f"store {path} ({data / 2**20:.0f} MiB of commit log), best of {a.repeat}, load average {os.getloadavg()[0]:.1f}")
    print("| what | wall s | CPU s | GB/s (wall) |")
    print("|---|---|---|---|")
    for k, v in best.items():
        rate = f"{data / v / 1e9:.2f}" if "query" not in k and "import" not in k else ""
        print(f"| {k} | {v:.3f} | {best_cpu[k]:.3f} | {rate} |")
    ratios = {}
    for how, b in (("wall", best), ("CPU", best_cpu)):
        ratios[how] = (b["stats (in-process)"] / b["verify --only commitlog (in-process)"], b["mqtool stats (CLI)"] / b["mqtool verify --only commitlog (CLI)"])
        print(f"stats / verify --only commitlog ({how}): {ratios[how][0]:.2f}x in-process, {ratios[how][1]:.2f}x CLI (target <= {STATS_TARGET}x)")
    met = ratios["wall"][1] <= STATS_TARGET and ratios["wall"][0] <= STATS_TARGET
    print(f"stats target (wall, in-process and CLI): {'met' if met else 'NOT met'}")
    q = best["mqtool query uniq-key (CLI)"]
    print(f"query uniq-key, whole process: {q:.3f} s (target <= {QUERY_TARGET_S} s): {'met' if q <= QUERY_TARGET_S else 'NOT met'}; lookup alone {best['query uniq-key (in-process)'] * 1000:.1f} ms")
    return 0


def _query(path: Path, topic: str, uniq: str) -> None:
    with Store.open(path) as store:
        assert query_message(store, topic, uniq, UNIQ_KEY).matches


if __name__ == "__main__":
    sys.exit(main())
