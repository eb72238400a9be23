"""Benchmark ``mqtool survivors``: a million ids against a store, next to ``verify --only commitlog``.

    python bench/bench_survivors.py                     # 256 MiB store, 1,000,000 ids
    python bench/bench_survivors.py --size 2g           # the target run

The store comes from ``bench/make_store.py`` (cached under ``--store-dir``, default
``/tmp/survivors-salvage/bench``). The ids are generated from the store: every other message's
UNIQ_KEY (found), topped up to ``--ids`` with UNIQ_KEY-shaped ids no message carries (missing).
Measured in the same run, page cache warm, each as its own process (wall time and peak RSS
sampled from ``/proc``):

- ``mqtool survivors STORE IDS --format jsonl`` (output to /dev/null);
- ``mqtool verify STORE --only commitlog`` (the baseline: one CRC-checked walk of the same log);
- a process that only reads the ids file into the id set (the "plus the id set" of the memory target).

Targets (issue 12): 1 million ids against the 2 GiB store <= 15 s; peak RSS <= 300 MB plus the id set.
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_store  # noqa: E402
from procs import run_measured  # noqa: E402

TARGET_SECONDS = 15.0
RSS_TARGET_MB = 300
ID_SET = r"""
import sys
import pyarrow as pa
from mqtool.cli.survivors import read_ids
ids = list(dict.fromkeys(read_ids(sys.argv[1], None)))
value_set = pa.array(ids, pa.string())
print(len(ids))
"""


def write_ids(store_path: Path, out: Path, count: int) -> tuple[int, int]:
    """Every other UNIQ_KEY of the store, topped up with unknown ones; (found, missing)."""
    from mqtool.scan.messages import MessageScan
    from mqtool.store import Store

    found = []
    with Store.open(store_path) as store:
        for batch in MessageScan(store, columns=["uniq_key"]):
            found.extend(k for k in batch["uniq_key"].to_pylist()[::2] if k)
            if len(found) >= count:
                break
    found = found[:count]
    missing = count - len(found)
    with open(out, "w") as f:
        for k in found:
            f.write(k + "\n")
        for i in range(missing):
            f.write(f"FFFFFFFF0000{i:020X}\n")
    return len(found), missing


def mqtool() -> list[str]:
    exe = Path(sys.executable).with_name("mqtool")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mqtool"]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(cmd: list[str], repeat: int) -> tuple[float, float, float]:
    """Best wall time, its CPU time (user + system) and the largest peak RSS over ``repeat`` runs
    (stdout discarded). On a shared machine the CPU time is the steadier figure."""
    runs, peaks = [], []
    for _ in range(repeat):
        cpu = children_cpu()
        proc, seconds, peak = run_measured(["sh", "-c", f"exec {shlex.join(cmd)} > /dev/null"])
        if proc.returncode not in (0, 1):
            raise SystemExit(f"bench_survivors: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
        runs.append((seconds, children_cpu() - cpu))
        peaks.append(peak)
    wall, cpu = min(runs)
    return wall, cpu, max(peaks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/bench_survivors.py", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="256m", help="commit log bytes (2g for the target run)")
    p.add_argument("--message-size", default="1k")
    p.add_argument("--ids", type=int, default=1_000_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--store-dir", type=Path, default=Path("/tmp/survivors-salvage/bench"))
    a = p.parse_args(argv)
    spec = make_store.StoreSpec(size=make_store.parse_size(a.size), message_size=make_store.parse_size(a.message_size))
    a.store_dir.mkdir(parents=True, exist_ok=True)
    path = make_store.ensure_store(spec, a.store_dir, log=lambda m: print(m, file=sys.stderr))
    ids_file = a.store_dir / f"ids-{path.name}-{a.ids}.txt"
    found, missing = write_ids(path, ids_file, a.ids)
    subprocess.run([*mqtool(), "verify", str(path), "--only", "commitlog", "--no-progress", "--format", "json"], stdout=subprocess.DEVNULL, check=False)  # warm

    survivors_s, survivors_cpu, survivors_mb = measured([*mqtool(), "survivors", str(path), str(ids_file), "--by", "uniq-key", "--format", "jsonl", "--no-progress"], a.repeat)
    verify_s, verify_cpu, verify_mb = measured([*mqtool(), "verify", str(path), "--only", "commitlog", "--no-progress", "--format", "json"], a.repeat)
    idset_s, idset_cpu, idset_mb = measured([sys.executable, "-c", ID_SET, str(ids_file)], 1)

    with open(path / ".complete.json") as f:
        data = json.load(f)["summary"]["commitlog_bytes"]
    print(f"\nstore {path} ({data / 2**30:.2f} GiB of records); {found + missing:,} ids: {found:,} present, {missing:,} not")
    print(f"{'command':52} {'wall s':>7} {'CPU s':>7} {'x verify':>9} {'peak RSS MB':>12}")
    for name, wall, cpu, mb in (
        ("mqtool verify --only commitlog (baseline)", verify_s, verify_cpu, verify_mb),
        ("reading the ids into the id set (memory baseline)", idset_s, idset_cpu, idset_mb),
        ("mqtool survivors --format jsonl > /dev/null", survivors_s, survivors_cpu, survivors_mb),
    ):
        print(f"{name:52} {wall:7.2f} {cpu:7.2f} {wall / verify_s:9.2f} {mb:12.0f}")
    over = survivors_mb - idset_mb
    print(f"\nsurvivors: {survivors_s:.1f} s wall, {survivors_cpu:.1f} s CPU (target at 2 GiB: <= {TARGET_SECONDS:.0f} s{'' if data >= 2 << 30 else '; this store is smaller'}); "
          f"peak RSS {survivors_mb:.0f} MB = id set {idset_mb:.0f} MB + {over:.0f} MB (target: + <= {RSS_TARGET_MB} MB: {'PASS' if over <= RSS_TARGET_MB else 'FAIL'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
