"""Benchmark ``mqtool verify --only commitlog`` against the physical limit and a plain Python loop.

    python bench/bench_verify.py --size 2g                    # the lead's full run (1 KiB and 128-byte stores)
    python bench/bench_verify.py --size 128m --segment-size 32m --message-size 1k

For each store (generated or reused by ``bench/make_store.py``), with the page cache warm, it
measures in one run, best of ``--repeat``:

- ``isal.crc32``: ISA-L CRC32 over the same commit log bytes (the physical limit of a scan that
  reads and checksums every byte), and ``zlib.crc32`` for reference;
- a plain ``struct.unpack_from`` Python loop: walk every record, unpack its header with the
  layout derived from the construct schema, check the magic and the body CRC (zlib);
- ``verify --only commitlog`` in-process (``Verification``), for each ``--jobs`` value, in a
  child process so its peak RSS is its own;
- the CLI ``mqtool verify --only commitlog`` end to end (process start-up included).

Throughput is commit log data bytes (first segment start to the logical end) per second.
Targets (issue 3): >= 1.5 GB/s single process on 1 KiB messages, >= 0.8 GB/s on 128-byte ones,
>= 2.4 GB/s with ``--jobs 2`` on 1 KiB, peak RSS <= 300 MB.

``--full`` measures instead every check against the commit log check alone (issue 10), the CLI
end to end, runs interleaved, best of ``--repeat``: ``verify --only commitlog``, ``verify`` and
``verify --jobs 2``, each with its ratio to ``--only commitlog`` of the same tree, its CPU time
(all threads and processes) and peak RSS; ``--old DIR`` runs the same commands with the code of
another source tree too (``procs.mqtool_command``: ``DIR``'s own code, e.g. a ``git archive`` of an earlier
commit), interleaved with this one's, and prints each command's ratio to the old tree's:

    python bench/bench_verify.py --full --store /path/to/store --old /tmp/old --repeat 5

Targets (issue 10): ``verify`` >= 1.0 GB/s on 1 KiB records (>= 0.4 on 128 B), <= 1.6x
``--only commitlog``; ``--jobs 2`` >= 1.6 GB/s, and no slower than ``--jobs 1``.
"""

from __future__ import annotations

import argparse
import json
import mmap
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_store  # noqa: E402
from procs import mqtool_command, run_measured, run_with_cpu  # noqa: E402

from mqtool.formats import commitlog as clfmt  # noqa: E402
from mqtool.store import Store  # noqa: E402

TARGETS = {("1k", 1): 1.5e9, ("128", 1): 0.8e9, ("1k", 2): 2.4e9}
RSS_TARGET_MB = 300


def data_ranges(store_path: Path) -> list[tuple[Path, int]]:
    """(segment, bytes of records in it) up to the logical end."""
    with Store.open(store_path) as store:
        from mqtool.store.fastscan import FastScan

        scan = FastScan(store.commitlog, check_crc=False, release_behind=True)
        for _ in scan:
            pass
        end = scan.end.offset
        return [(s.path, min(s.size, end - s.base_offset)) for s in store.commitlog.segments if s.base_offset < end]


def warm(ranges) -> None:
    for path, n in ranges:
        with open(path, "rb") as f:
            while n > 0:
                chunk = f.read(min(n, 64 << 20))
                if not chunk:
                    break
                n -= len(chunk)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def crc_pass(ranges, crc) -> None:
    for path, n in ranges:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            value = 0
            for p in range(0, n, 64 << 20):
                value = crc(view[p : min(n, p + (64 << 20))], value)
            view.release()


def python_loop(ranges) -> int:
    """The plain loop: struct.unpack_from header, magic check, body CRC with zlib."""
    headers = {flags: clfmt.HEADER_LAYOUTS[(bool(flags & 1), bool(flags & 2))].codec for flags in range(4)}
    sys_flag_at = clfmt.SYS_FLAG_POSITION
    magics = (clfmt.MESSAGE_MAGIC_V1, clfmt.MESSAGE_MAGIC_V2)
    head = struct.Struct(">ii")
    flag = struct.Struct(">i")
    bad = 0
    for path, n in ranges:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            view = memoryview(m)
            pos = 0
            while pos < n:
                total, magic = head.unpack_from(m, pos)
                if magic not in magics:
                    break
                (sys_flag,) = flag.unpack_from(m, pos + sys_flag_at)
                codec = headers[(sys_flag >> 4) & 3]
                fields = codec.unpack_from(m, pos)
                body_len = fields[-1]
                if body_len > 0:
                    start = pos + codec.size
                    if zlib.crc32(view[start : start + body_len]) & 0x7FFFFFFF != fields[2]:
                        bad += 1
                pos += total
            view.release()
    return bad


CHILD = r"""
import json, sys, time
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions
path, jobs, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
times, findings = [], None
for _ in range(repeat):
    with Store.open(path) as store:
        run = Verification(store, VerifyOptions(checks=("commitlog",), jobs=jobs))
        t = time.perf_counter()
        findings = sum(1 for _ in run.findings())
        times.append(time.perf_counter() - t)
print(json.dumps({"seconds": min(times), "findings": findings, "records": run.summary.records}))
"""


def run_child(store_path: Path, jobs: int, repeat: int) -> dict:
    proc, _, peak_mb = run_measured([sys.executable, "-c", CHILD, str(store_path), str(jobs), str(repeat)])
    if proc.returncode:
        raise SystemExit(f"bench_verify: child failed: {proc.stderr.strip()}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "peak_rss_mb": peak_mb}


def run_cli(store_path: Path, jobs: int) -> float:
    mqtool = Path(sys.executable).with_name("mqtool")
    cmd = [str(mqtool)] if mqtool.exists() else [sys.executable, "-m", "mqtool"]
    t = time.perf_counter()
    subprocess.run([*cmd, "verify", str(store_path), "--only", "commitlog", "--jobs", str(jobs), "--no-progress", "--format", "json"], check=True, capture_output=True)
    return time.perf_counter() - t


def bench_store(spec: make_store.StoreSpec, label: str, jobs_list: list[int], repeat: int) -> list[dict]:
    path = make_store.ensure_store(spec, log=lambda m: print(m, file=sys.stderr))
    ranges = data_ranges(path)
    data = sum(n for _, n in ranges)
    warm(ranges)
    rows = []

    def row(name: str, seconds: float, **extra) -> None:
        rows.append({"store": label, "method": name, "seconds": seconds, "gb_s": data / seconds / 1e9, **extra})

    from isal import isal_zlib

    row("isal.crc32 (physical limit)", best(lambda: crc_pass(ranges, isal_zlib.crc32), repeat))
    row("zlib.crc32", best(lambda: crc_pass(ranges, zlib.crc32), repeat))
    row("plain struct.unpack_from loop", best(lambda: python_loop(ranges), 1))
    for jobs in jobs_list:
        child = run_child(path, jobs, repeat)
        target = TARGETS.get((label, jobs))
        row(f"verify --only commitlog --jobs {jobs}", child["seconds"], peak_rss_mb=round(child["peak_rss_mb"]), target_gb_s=target / 1e9 if target else None, findings=child["findings"])
    for jobs in jobs_list:
        row(f"CLI mqtool verify --only commitlog --jobs {jobs} (incl. start-up)", run_cli(path, jobs))
    plain = next(r for r in rows if r["method"].startswith("plain"))["gb_s"]
    limit = rows[0]["gb_s"]
    for r in rows:
        r["vs_plain_loop"] = r["gb_s"] / plain
        r["vs_isal_crc"] = r["gb_s"] / limit
    print(f"\n{label} messages: {data / 1e9:.2f} GB of records in {len(ranges)} segments ({path})")
    print(f"{'method':62} {'GB/s':>7} {'x plain':>8} {'x crc':>6}  notes")
    for r in rows:
        notes = []
        if r.get("target_gb_s"):
            notes.append(f"target {r['target_gb_s']:.1f} GB/s: {'PASS' if r['gb_s'] >= r['target_gb_s'] else 'FAIL'}")
        if "peak_rss_mb" in r:
            notes.append(f"peak RSS {r['peak_rss_mb']} MB ({'PASS' if r['peak_rss_mb'] <= RSS_TARGET_MB else 'FAIL'})")
        if r.get("findings"):
            notes.append(f"{r['findings']} findings!")
        print(f"{r['method']:62} {r['gb_s']:7.2f} {r['vs_plain_loop']:8.1f} {r['vs_isal_crc']:6.2f}  {'; '.join(notes)}")
    return rows


FULL_COMMANDS = (("verify --only commitlog", ["--only", "commitlog"]), ("verify", []), ("verify --jobs 2", ["--jobs", "2"]))
FULL_TARGETS = {("verify", "1k"): 1.0e9, ("verify", "128"): 0.4e9, ("verify --jobs 2", "1k"): 1.6e9}


def record_label(store_path: Path) -> str:
    """"1k" or "128": TOTALSIZE of the store's first record."""
    first = min((store_path / "commitlog").iterdir())
    with open(first, "rb") as f:
        size = int.from_bytes(f.read(4), "big")
    return "1k" if size == 1024 else "128" if size == 128 else str(size)


def full_verify(store_path: Path, label: str, repeat: int, old: Path | None) -> list[dict]:
    """Every check against the commit log check alone, CLI end to end, trees and commands interleaved."""
    import os

    ranges = data_ranges(store_path)
    data = sum(n for _, n in ranges)
    warm(ranges)
    trees = [("this tree", None)] + ([("old", old)] if old is not None else [])
    best: dict[tuple[str, str], dict] = {}
    for tree, source in trees:  # untimed: a tree's first run may compile and cache its kernels
        subprocess.run([*mqtool_command(source), "verify", str(store_path), "--no-progress", "--format", "json"], capture_output=True)
    load = os.getloadavg()
    for _ in range(repeat):
        for tree, source in trees:
            for name, extra in FULL_COMMANDS:
                cmd = [*mqtool_command(source), "verify", str(store_path), "--no-progress", "--format", "json", *extra]
                proc, wall, peak, cpu = run_with_cpu(cmd)
                if proc.returncode not in (0, 1):
                    raise SystemExit(f"bench_verify: {' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
                findings = sum(json.loads(proc.stdout)["summary"]["findings"].values())
                row = best.setdefault((tree, name), {"store": label, "tree": tree, "method": name, "seconds": wall, "cpu_s": cpu, "peak_rss_mb": 0.0, "findings": findings})
                if wall < row["seconds"]:
                    row["seconds"], row["cpu_s"] = wall, cpu
                row["peak_rss_mb"] = max(row["peak_rss_mb"], peak)
    load = (load, os.getloadavg())
    rows = list(best.values())
    print(f"\n{label} messages: {data / 1e9:.2f} GB of records ({store_path}); best of {repeat}, interleaved; "
          f"load average {load[0][0]:.1f} before, {load[1][0]:.1f} after")
    print(f"{'tree':10} {'command':26} {'wall s':>7} {'GB/s':>6} {'CPU s':>6} {'RSS MB':>7} {'÷ cl':>5} {'÷ old':>6}  notes")
    for r in rows:
        r["gb_s"] = data / r["seconds"] / 1e9
        r["x_commitlog"] = r["seconds"] / best[(r["tree"], "verify --only commitlog")]["seconds"]
        was = best.get(("old", r["method"])) if r["tree"] != "old" else None
        r["x_old"] = r["seconds"] / was["seconds"] if was else None
        notes = []
        target = FULL_TARGETS.get((r["method"], label))
        if target:
            notes.append(f"target >= {target / 1e9:.1f} GB/s: {'met' if r['gb_s'] * 1e9 >= target else 'NOT met'}")
        if r["method"] == "verify":
            notes.append(f"target <= 1.6 x commitlog: {'met' if r['x_commitlog'] <= 1.6 else 'NOT met'}")
        if r["peak_rss_mb"] > RSS_TARGET_MB:
            notes.append(f"RSS > {RSS_TARGET_MB} MB")
        if r["findings"]:
            notes.append(f"{r['findings']} findings!")
        print(f"{r['tree']:10} {r['method']:26} {r['seconds']:7.2f} {r['gb_s']:6.2f} {r['cpu_s']:6.2f} {round(r['peak_rss_mb']):7} {r['x_commitlog']:5.2f} "
              f"{'' if r['x_old'] is None else format(r['x_old'], '.2f'):>6}  {'; '.join(notes)}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/bench_verify.py", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="2g", help="commit log bytes per store (e.g. 2g; 256m or less during development)")
    p.add_argument("--message-size", action="append", choices=("1k", "128"), help="store(s) to measure (default both)")
    p.add_argument("--segment-size", default=None, help="segment size (default 1g)")
    p.add_argument("--jobs", default="1,2", help="comma-separated --jobs values")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--full", action="store_true", help="every check against --only commitlog (CLI), instead of the commit log check's suite")
    p.add_argument("--store", type=Path, action="append", help="with --full: an existing store to measure (its records' size read from its first record)")
    p.add_argument("--old", type=Path, default=None, help="with --full: a source tree whose code runs the same commands, interleaved")
    a = p.parse_args(argv)
    size = make_store.parse_size(a.size)
    rows = []
    if a.full:
        stores = [(path, record_label(path)) for path in a.store] if a.store else []
        for label in [] if a.store else a.message_size or ["1k", "128"]:
            spec = make_store.StoreSpec(size=size, message_size=make_store.parse_size(label), segment_size=make_store.parse_size(a.segment_size or "1g"))
            stores.append((make_store.ensure_store(spec, log=lambda m: print(m, file=sys.stderr)), label))
        for path, label in stores:
            rows += full_verify(path, label, a.repeat, a.old)
        if a.json:
            a.json.write_text(json.dumps(rows, indent=2))
        return 0
    for label in a.message_size or ["1k", "128"]:
        spec = make_store.StoreSpec(size=size, message_size=make_store.parse_size(label), segment_size=make_store.parse_size(a.segment_size or "1g"))
        rows += bench_store(spec, label, [int(j) for j in a.jobs.split(",")], a.repeat)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
