"""Benchmark ``mqtool dump`` end to end (the whole process) against two baselines of the same run.

    python bench/bench_dump.py --size 256m --out /tmp/dump-speed/stores
    python bench/bench_dump.py --size 2g --message-size 128 --out /tmp/dump-speed/stores
    python bench/bench_dump.py --store /tmp/b2g/store-4.9-2g-msg1k-seg1g-s7   # an existing store, as bench/run.py does

The store (``--message-size`` records, generated or reused by ``bench/make_store.py`` under ``--out``,
or the one ``--store`` names) is read once to warm the page cache. Each ``mqtool dump`` variant runs as a subprocess with stdout to /dev/null: wall time,
CPU time (user + system, the process's own: the machine may be shared; ``dump`` runs its walk and
its text encoder on two threads, so CPU time can exceed wall), messages per second of wall and of
CPU, peak RSS (``procs.TreeSampler``), and the load average while the scans ran. Baselines, measured in the same run:

- ``plain loop``: a Python walk of the same records (``struct.unpack_from`` of the header with
  the layout derived from the construct schema, ``zlib.crc32`` of the body);
- ``isal.crc32``: ISA-L CRC32 over the same bytes (what reading every byte costs at least).

Targets (issue #10): ``--body none`` >= 300 k msgs/s, ``--body base64`` >= 150 k msgs/s, filters
no slower than unfiltered, lookups (``--msg-id``, ``--key`` through the index, ``--from-offset``)
<= 0.3 s wall, start-up (``--help``, ``--version``, a small-store ``dump --limit 5``) <= 0.3 s.
"""

from __future__ import annotations

import argparse
import mmap
import os
import resource
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_store  # noqa: E402
from procs import TreeSampler  # noqa: E402

from mqtool.formats import commitlog as clfmt  # noqa: E402
from mqtool.store.records import message_dict  # noqa: E402
from mqtool.store import Store  # noqa: E402
from mqtool.store.fastscan import scan_start  # noqa: E402

MQTOOL = [sys.executable, "-m", "mqtool"]
SMALL_STORE = HERE.parent / "fixtures" / "rocketmq-4.9.7" / "clean-small"


def run(cmd: list[str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s, peak RSS MB, exit code) of ``cmd`` with stdout to /dev/null."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with TreeSampler(proc.pid) as sampler:
        _, err = proc.communicate()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}: {err.decode()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), sampler.peak_process_mb, proc.returncode


def best(cmd: list[str], repeat: int) -> tuple[float, float, float]:
    runs = [run(cmd) for _ in range(repeat)]
    return min(r[0] for r in runs), min(r[1] for r in runs), max(r[2] for r in runs)


def segments(store_path: Path) -> list[Path]:
    with Store.open(store_path) as store:
        return [s.path for s in store.commitlog.segments]


def plain_loop(paths: list[Path]) -> tuple[int, float, int]:
    """(records, CPU seconds, record bytes) of a Python walk: header fields unpacked at the positions of the
    layouts derived from the construct schema, magic checked, body CRC (zlib)."""
    layouts = {(b, s): clfmt.HEADER_LAYOUTS[(b, s)] for b in (False, True) for s in (False, True)}
    first = struct.Struct(">iii")
    flags_at = layouts[(False, False)].offset_of("sys_flag")
    body_len_at = {k: (v.offset_of("body_length"), v.size) for k, v in layouts.items()}
    born_v6, store_v6 = int(clfmt.SysFlag.BORNHOST_V6), int(clfmt.SysFlag.STOREHOST_V6)
    magics = (clfmt.MESSAGE_MAGIC_V1, clfmt.MESSAGE_MAGIC_V2)
    int32 = struct.Struct(">i")
    count = walked = 0
    started = time.process_time()
    for path in paths:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            pos, size = 0, len(buf)
            while pos + 96 <= size:
                total, magic, crc = first.unpack_from(buf, pos)
                if magic not in magics or total <= 0:
                    break
                flags = int32.unpack_from(buf, pos + flags_at)[0]
                at, header = body_len_at[(bool(flags & born_v6), bool(flags & store_v6))]
                body_len = int32.unpack_from(buf, pos + at)[0]
                if zlib.crc32(buf[pos + header : pos + header + body_len]) & 0x7FFFFFFF != crc:
                    break
                count += 1
                pos += total
            walked += pos
    return count, time.process_time() - started, walked


def isal_pass(paths: list[Path]) -> float:
    from isal import isal_zlib

    started = time.process_time()
    for path in paths:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            isal_zlib.crc32(buf)
    return time.process_time() - started


def probes(store_path: Path, walked: int) -> dict:
    """A record from the middle of the store's ``walked`` record bytes: its topic, tag, a key, msg id, offset and time."""
    with Store.open(store_path) as store:
        offset = store.commitlog.min_offset
        middle = scan_start(store.commitlog, offset + walked // 2)
        row = None
        for record in store.commitlog.scan(middle):
            row = message_dict(record)
            if row["keys"] and row["tags"] and row["transaction_type"] == "NOT_TYPE":
                break
        return {"topic": row["topic"], "tag": row["tags"], "key": row["keys"][0], "msg_id": row["msg_id"], "offset": row["offset"],
                "since": row["store_timestamp"], "first": offset}


def main() -> int:
    p = argparse.ArgumentParser(prog="python bench/bench_dump.py", description=__doc__.splitlines()[0])
    make_store.add_arguments(p)
    p.add_argument("--out", type=Path, default=make_store.OUT, help="store cache directory (default bench/out)")
    p.add_argument("--store", type=Path, default=None, help="measure this existing store instead (no generation; --size and --message-size ignored)")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--lookups-only", action="store_true", help="skip the full scans (the 2 GiB run on a shared machine)")
    a = p.parse_args()
    store = a.store or make_store.ensure_store(make_store.spec_from_args(a), a.out, log=lambda *x: print(*x, file=sys.stderr))
    paths = segments(store)
    for path in paths:  # warm the page cache
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass
    records, loop_cpu, walked = plain_loop(paths[:1] if a.lookups_only else paths)
    crc_cpu = isal_pass(paths)
    pr = probes(store, walked)
    s = str(store)
    print(f"store {s}: {records} records, {sum(os.path.getsize(x) for x in paths) >> 20} MiB of segments; "
          f"plain loop {records / loop_cpu / 1e3:.0f} k msgs/s ({loop_cpu:.2f} s CPU), isal.crc32 {crc_cpu:.3f} s CPU")
    scans = [
        ("jsonl --body none", ["-f", "jsonl"]),
        ("csv --body none", ["-f", "csv"]),
        ("json --body none", ["-f", "json"]),
        ("jsonl --body base64", ["-f", "jsonl", "--body", "base64"]),
        ("jsonl --topic", ["-f", "jsonl", "--topic", pr["topic"]]),
        ("jsonl --tag", ["-f", "jsonl", "--tag", pr["tag"]]),
        ("jsonl --since", ["-f", "jsonl", "--since", str(pr["since"])]),
        ("jsonl --key (scan, --no-index)", ["-f", "jsonl", "--key", pr["key"], "--no-index"]),
    ]
    lookups = [
        ("--msg-id", ["-f", "jsonl", "--msg-id", pr["msg_id"]]),
        ("--topic --key (index)", ["-f", "jsonl", "--topic", pr["topic"], "--key", pr["key"]]),
        ("--from-offset mid-record --limit 10", ["-f", "jsonl", "--from-offset", str(pr["offset"] + 100), "--limit", "10"]),
    ]
    startup = [
        ("mqtool --version", ["--version"]),
        ("mqtool --help", ["--help"]),
        ("dump <fixture store> --limit 5", ["dump", str(SMALL_STORE), "-f", "jsonl", "--limit", "5"]),
    ]
    print("\n| command | wall s | CPU s | k msgs/s (wall) | k msgs/s (CPU) | x plain loop (wall) | x isal.crc32 time (CPU) | peak RSS |")
    print("|---|---|---|---|---|---|---|---|")
    loads = [os.getloadavg()[0]]
    rates = {}
    for name, args in [] if a.lookups_only else scans:
        wall, cpu, rss = best([*MQTOOL, "dump", s, *args], a.repeat)
        loads.append(os.getloadavg()[0])
        rates[name] = records / wall
        print(f"| dump {name} | {wall:.2f} | {cpu:.2f} | {records / wall / 1e3:.0f} | {records / cpu / 1e3:.0f} | "
              f"{loop_cpu / wall:.2f} | {cpu / crc_cpu:.0f} | {rss:.0f} MB |")
    for name, args in lookups:
        wall, cpu, rss = best([*MQTOOL, "dump", s, *args], a.repeat)
        print(f"| dump {name} | {wall:.2f} | {cpu:.2f} | | | | | {rss:.0f} MB |")
    for name, args in startup:
        wall, cpu, rss = best([*MQTOOL, *args], max(a.repeat, 3))
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | | | | | {rss:.0f} MB |")
    print(f"\nload average (1 min) during the scans: {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} CPUs")
    if rates:
        plain = records / loop_cpu
        unfiltered = rates["jsonl --body none"]
        slowest = min((r, n) for n, r in rates.items() if n.startswith("jsonl --") and "body" not in n)
        print("targets (issue #10, wall): "
              + "; ".join(f"{n} >= 300 k msgs/s: {'met' if rates[n] >= 300e3 else 'NOT met'}" for n in ("jsonl --body none", "csv --body none"))
              + f"; jsonl >= 0.65 x plain loop: {unfiltered / plain:.2f} x, {'met' if unfiltered >= 0.65 * plain else 'NOT met'}"
              + f"; filters no slower than unfiltered: slowest {slowest[1]} {slowest[0] / unfiltered:.2f} x, {'met' if slowest[0] >= unfiltered else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
