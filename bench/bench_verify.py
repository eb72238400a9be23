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
from procs import run_measured  # noqa: E402

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/bench_verify.py", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="2g", help="commit log bytes per store (e.g. 2g; 256m or less during development)")
    p.add_argument("--message-size", action="append", choices=("1k", "128"), help="store(s) to measure (default both)")
    p.add_argument("--segment-size", default=None, help="segment size (default 1g)")
    p.add_argument("--jobs", default="1,2", help="comma-separated --jobs values")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = p.parse_args(argv)
    size = make_store.parse_size(a.size)
    rows = []
    for label in a.message_size or ["1k", "128"]:
        spec = make_store.StoreSpec(size=size, message_size=make_store.parse_size(label), segment_size=make_store.parse_size(a.segment_size or "1g"))
        rows += bench_store(spec, label, [int(j) for j in a.jobs.split(",")], a.repeat)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
