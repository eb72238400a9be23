"""Benchmark the Spark scan (``spark/mqtool_scan.py``) against mqtool's own process-pool scan.

    python bench/bench_spark.py --size 2g                         # the lead's full run
    python bench/bench_spark.py --size 256m --segment-size 64m    # a small run during development

On one generated store (``bench/make_store.py``; page cache warm), best of ``--repeat``:

- ``pool walk``: ``SplitScan`` over every split in a ``multiprocessing`` pool, CRC checked, no
  rows built: the fastest scan mqtool has (what ``mqtool verify --jobs N`` does per segment);
- ``pool stats`` / ``pool messages``: the same pool running the Spark tasks' own work without
  Spark: ``read_stats`` (the per-split aggregates the data source yields) merged with pyarrow,
  or ``write_messages`` (each split's messages as one Parquet file, written by pyarrow);
- ``spark stats`` / ``spark messages`` with ``local[1]`` and ``local[2]``: ``mqtool.spark.job.run``
  in a fresh driver per master, timed after ``--warmup`` queries of each mode on one segment
  (the JVM start and the first data-source query cost ~10 s once per session and are reported
  apart; through a session's first queries the JVM also keeps compiling Spark's own code, 3-4
  CPU-s per query in a fresh session, 1.5-3 s after five, not in proportion to the bytes read:
  the ``JVM CPU`` column).

Prints throughput, the ratios the targets name (issue 5: local[2] >= 1.6x local[1]; local[2]
within 2x of the pool with the same number of processes; peak RSS per Python worker <= 500 MB)
and the per-core rate used for the 10 TB estimate in BENCHMARKS.md (local[2] throughput divided by
the two cores it keeps busy: the JVM's share is part of the cost of every core).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_store  # noqa: E402
from procs import cpu_seconds, descendants, rss_mb  # noqa: E402

from mqtool.spark.inputs import resolve_inputs  # noqa: E402
from mqtool.spark.reader import plan_tasks, read_stats, write_messages  # noqa: E402
from mqtool.store import fastscan as fs  # noqa: E402
from mqtool.store.splits import SplitScan, auto_split_size  # noqa: E402

WORKER_RSS_TARGET_MB = 500
MODES = ("stats", "messages", "messages-spark-writer")
# messages-spark-writer: messages mode through Spark's own Parquet writer (--writer spark, what JSON,
# CSV and URI outputs use); its pool baseline is the same as messages'


def job_options(mode: str, **kw):
    from mqtool.spark import job

    if mode == "messages-spark-writer":
        return job.JobOptions(mode="messages", writer="spark", **kw)
    return job.JobOptions(mode=mode, **kw)


def pool_kind(mode: str) -> str:
    return "messages" if mode == "messages-spark-writer" else mode


# ---- the process pool baseline ------------------------------------------------------------------


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _walk(task) -> tuple[int, float, int]:
    records = size = 0
    for b in SplitScan(task.split, check_crc=True):
        records += len(b.rows)
        size += int(b.rows[:, fs.COL_SIZE].sum())
    return records, _rss_mb(), size


def _stats(task) -> tuple[object, float]:
    import pyarrow as pa

    batches = list(read_stats(task))
    return (pa.Table.from_batches(batches) if batches else None), _rss_mb()


def _messages(args) -> tuple[int, float]:
    task, out = args
    rows = sum(b["rows_written"][0].as_py() for b in write_messages(task, out))
    return rows, _rss_mb()


def pool_run(kind: str, tasks, processes: int, out: Path) -> dict:
    ctx = multiprocessing.get_context("fork")
    started = time.perf_counter()
    with ctx.Pool(processes) as pool:
        if kind == "walk":
            results = pool.map(_walk, tasks, chunksize=1)
            rows = sum(r[0] for r in results)
            record_bytes = sum(r[2] for r in results)
            results = [r[:2] for r in results]
        elif kind == "stats":
            import pyarrow as pa

            results = pool.map(_stats, tasks, chunksize=1)
            partials = pa.concat_tables([p for p, _ in results if p is not None])
            final = partials.group_by(["broker", "topic", "queue_id"]).aggregate([("messages", "sum"), ("bytes", "sum")])
            rows = sum(final["messages_sum"].to_pylist())
        else:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            results = pool.map(_messages, [(t, str(out)) for t in tasks], chunksize=1)
            rows = sum(r for r, _ in results)
    result = {"seconds": time.perf_counter() - started, "rows": rows, "worker_peak_rss_mb": max(m for _, m in results)}
    if kind == "walk":
        result["record_bytes"] = record_bytes
    return result


# ---- Spark, one fresh driver per master ---------------------------------------------------------


def peak_rss_mb(pid: int) -> float:
    """High-water RSS of a process started by exec (Spark's JVM and Python workers)."""
    return rss_mb(pid, "VmHWM:")


def spark_child(a: argparse.Namespace) -> int:
    """Run in a fresh process: one master, every mode, timed after a warm-up; prints JSON."""
    from pyspark.sql import SparkSession

    from mqtool.spark import job

    local = tempfile.mkdtemp(prefix="bench-spark-")
    spark = (
        SparkSession.builder.master(a.child)  # the benchmark harness chooses the master; the job never does
        .appName("mqtool-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", local)
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    job.configure(spark)  # what spark/mqtool_scan.py's session() does after the master is chosen
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._gateway.proc.pid
    first_segment = sorted((Path(a.store) / "commitlog").iterdir())[0]
    t = time.perf_counter()
    for _ in range(a.warmup):  # the first queries pay for Python workers and the JVM's JIT compiler
        for mode in a.modes.split(","):
            job.run(job_options(mode, paths=[str(first_segment)], output=f"{local}/warm-{mode}", split_size="64m"), spark)
    warm = time.perf_counter() - t
    results = {"master": a.child, "warmup_s": warm, "modes": {}}
    for mode in a.modes.split(","):
        runs = []
        for _ in range(a.repeat):
            cpu, t = cpu_seconds(jvm), time.perf_counter()
            doc = job.run(job_options(mode, paths=[a.store], output=f"{local}/{mode}", format="parquet"), spark)
            runs.append((time.perf_counter() - t, cpu_seconds(jvm) - cpu))
        best, jvm_cpu = min(runs)
        results["modes"][mode] = {"seconds": best, "jvm_cpu_s": jvm_cpu, "splits": doc["splits"], "rows": doc.get("rows_written", doc.get("messages"))}
    workers = [p for p in descendants(jvm) if "python" in _cmdline(p)]
    results["worker_peak_rss_mb"] = max((peak_rss_mb(p) for p in workers), default=0.0)
    results["jvm_peak_rss_mb"] = peak_rss_mb(jvm)
    results["driver_python_peak_rss_mb"] = peak_rss_mb(os.getpid())
    spark.stop()
    shutil.rmtree(local, ignore_errors=True)
    print(json.dumps(results))
    return 0


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def spark_run(store: Path, master: str, modes: str, repeat: int, warmup: int) -> dict:
    cmd = [sys.executable, __file__, "--child", master, "--store", str(store), "--modes", modes, "--repeat", str(repeat), "--warmup", str(warmup)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"spark run {master} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - t
    return result


# ---- main -------------------------------------------------------------------------------------


def warm_cache(store: Path) -> int:
    total = 0
    for seg in sorted((store / "commitlog").iterdir()):
        with open(seg, "rb") as f:
            while chunk := f.read(64 << 20):
                total += len(chunk)
    return total


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python bench/bench_spark.py", description=__doc__.splitlines()[0])
    make_store.add_arguments(p)
    p.add_argument("--repeat", type=int, default=1, help="timed runs per measurement (best is kept)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--masters", default="local[1],local[2]")
    p.add_argument("--warmup", type=int, default=5, help="warm-up queries per mode on one segment before timing (1: a fresh session)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return spark_child(a)

    store = make_store.ensure_store(make_store.spec_from_args(a), log=lambda m: print(m, file=sys.stderr))
    warm_cache(store)
    inputs = resolve_inputs([store])
    files = sum(b.bytes for b in inputs)
    masters = a.masters.split(",")
    results = {"store": str(store), "pool": {}, "spark": {}}
    out = Path(tempfile.mkdtemp(prefix="bench-pool-"))
    for processes in sorted({int(m[m.index("[") + 1 : -1]) for m in masters if m.startswith("local[")} or {2}):
        split = auto_split_size(files, processes)
        tasks = plan_tasks(inputs, None if split >= max(s.size for b in inputs for s in b.segments) else split)
        for kind in dict.fromkeys(("walk", *map(pool_kind, a.modes.split(",")))):
            best = min((pool_run(kind, tasks, processes, out / kind) for _ in range(a.repeat)), key=lambda r: r["seconds"])
            results["pool"][f"{kind}/{processes}"] = best
    shutil.rmtree(out, ignore_errors=True)
    data = results["bytes"] = next(r["record_bytes"] for k, r in results["pool"].items() if k.startswith("walk/"))
    for master in masters:
        results["spark"][master] = spark_run(store, master, a.modes, a.repeat, a.warmup)

    gb = data / 1e9
    print(f"store {store}: {data / 2**30:.2f} GiB of records in {files / 2**30:.2f} GiB of segments, page cache warm; GB/s = record bytes / s")
    print(f"{'run':34} {'seconds':>8} {'GB/s':>7} {'peak RSS/worker':>16}")
    for name, r in results["pool"].items():
        kind, n = name.split("/")
        print(f"{'pool ' + kind + f' ({n} processes)':34} {r['seconds']:8.2f} {gb / r['seconds']:7.2f} {r['worker_peak_rss_mb']:13.0f} MB")
    for master, r in results["spark"].items():
        for mode, m in r["modes"].items():
            print(f"{'spark ' + mode + ' ' + master:34} {m['seconds']:8.2f} {gb / m['seconds']:7.2f} {r['worker_peak_rss_mb']:13.0f} MB  JVM CPU {m['jvm_cpu_s']:.2f} s")
        print(f"{'  (warm-up, process total)':34} {r['warmup_s']:8.2f} {r['process_s']:7.1f}s  JVM peak {r['jvm_peak_rss_mb']:.0f} MB")
    print()
    one, two = results["spark"].get("local[1]"), results["spark"].get("local[2]")
    for mode in a.modes.split(","):
        if one and two:
            speedup = one["modes"][mode]["seconds"] / two["modes"][mode]["seconds"]
            print(f"{mode}: local[2] speed-up over local[1]: {speedup:.2f}x (target >= 1.6x)")
        if two and f"{pool_kind(mode)}/2" in results["pool"]:
            ratio = two["modes"][mode]["seconds"] / results["pool"][f"{pool_kind(mode)}/2"]["seconds"]
            walk = two["modes"][mode]["seconds"] / results["pool"]["walk/2"]["seconds"]
            print(f"{mode}: local[2] / pool of 2 doing the same work: {ratio:.2f}x (target <= 2x); / pool walk: {walk:.2f}x")
        if two:
            rate = data / two["modes"][mode]["seconds"] / 2  # both cores busy: Python workers and the JVM
            cores = 10e12 / rate / 3600
            print(f"{mode}: per-core rate (local[2] throughput / 2 cores, JVM included) {rate / 1e6:.0f} MB/s -> 10 TB in 1 hour needs ~{cores:.0f} cores")
    peaks = [r["worker_peak_rss_mb"] for r in results["spark"].values()]
    print(f"peak RSS per Python worker: {max(peaks):.0f} MB (target <= {WORKER_RSS_TARGET_MB} MB)")
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
