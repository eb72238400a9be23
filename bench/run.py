"""Every command on one benchmark store, each against baselines measured in the same run.

    python bench/run.py --size 256m                        # quick (after each hot-path change)
    python bench/run.py --size 2g --record 1k --record 128  # the full table of BENCHMARKS.md
    python bench/run.py --size 8g --only verify,info --out /tmp/x   # the memory rows
    python bench/run.py --suite verify --size 2g           # a detailed suite (bench_verify.py ...)

For each store (``bench/make_store.py``: 1 GiB segments, 19 queues, index on; generated once
into ``--out``), page cache warm, it runs each command as a user does (the ``mqtool`` CLI in a
fresh process, start-up included; best of ``--repeat``) and prints its wall time, throughput
(commit log record bytes per second, or records per second), peak RSS of its largest process
(sampled from /proc) and two ratios of its time: against an ISA-L CRC32 pass over the same
commit log bytes (in this process) and against ``mqtool verify --only commitlog``. A plain
Python walk (struct + zlib CRC, over at most the first 256 MiB, extrapolated) is the third
baseline: ``x plain`` is a command's throughput over that walk's.

``cold`` runs each listed command twice in fresh processes (best of ``--repeat`` such pairs) as right after the README's install:
from the installed tree (its bytecode compiled at install), with an empty home and cache folder, and
checks that neither run writes a cache of any kind (no new ``.pyc``, no file in the new home). The
target is a first run within 10% of the second. A second row per command (``code not cached``)
first drops the code's pages (mqtool, the venv, the standard library) from the page cache
(``posix_fadvise``), as a new container starts: what that first run pays over the second is
reading the code from disk (the store's pages stay warm, as for every other row).

``verify, the store with an abort file`` runs on the store hard-linked with an abort file added: where its next start
re-dispatches, verify also says whether a record whose dispatch throws stops it (from its one walk of the log).
``recover --abnormal`` runs on a crashed copy (segments hard-linked, no consume queues, no
index, zeroed checkpoint, abort file), ``rebuild-cq`` and ``rebuild-index`` on a copy without
consume queues / index; the copies live under ``--out`` and are deleted afterwards. ``salvage``
writes JSON Lines to /dev/null (every field, the whole log: dump's work plus the status). ``dump`` is
measured by ``bench/bench_dump.py`` when it exists (run as is, its output shown). ``spark-submit``
runs ``spark-submit spark/mqtool_scan.py`` on the README's sample store (not the benchmark store).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import make_store  # noqa: E402
from bench_recover import crashed_copy  # noqa: E402
from bench_verify import data_ranges, python_loop, warm  # noqa: E402
from procs import run_measured  # noqa: E402

SUITES = {"verify": "bench_verify.py", "recover": "bench_recover.py", "spark": "bench_spark.py"}
PLAIN_LIMIT = 256 << 20
ROWS = ("help", "cold", "verify", "info", "dump", "salvage", "recover", "rebuild-cq", "rebuild-index", "spark-submit")
SAMPLE = HERE.parent / "fixtures" / "rocketmq-5.3.3" / "clean-small"  # the README's 5 MB sample store
SPARK_SUBMIT_TARGET = 15.0  # seconds, issue #29: `spark-submit spark/mqtool_scan.py` on the sample store
COLD_TARGET = 1.10  # first run / second run
# targets of issue #10: (row, record size) -> ("GB/s" or "s", bound)
TARGETS = {
    ("verify", "1k"): ("GB/s", 1.0),
    ("verify", "128"): ("GB/s", 0.4),
    ("verify --jobs 2", "1k"): ("GB/s", 1.6),
    ("info", "1k"): ("s", 1.5),
    ("recover --abnormal", "1k"): ("GB/s", 0.6),  # the issue names 128-byte records for verify only
}
RSS_TARGET_MB = 300


def mqtool_cmd() -> list[str]:
    exe = Path(sys.executable).with_name("mqtool")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "mqtool"]


def crc_seconds(ranges, repeat: int) -> float:
    from isal import isal_zlib

    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for path, n in ranges:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                view = memoryview(m)
                value = 0
                for p in range(0, n, 64 << 20):
                    value = isal_zlib.crc32(view[p : min(n, p + (64 << 20))], value)
                view.release()
        best = min(best, time.perf_counter() - t)
    return best


def plain_walk_bytes_per_s(ranges) -> float:
    """The plain Python walk's throughput on at most ``PLAIN_LIMIT`` bytes."""
    part, left = [], PLAIN_LIMIT
    for path, n in ranges:
        if left <= 0:
            break
        part.append((path, min(n, left)))
        left -= n
    t = time.perf_counter()
    python_loop(part)
    return sum(n for _, n in part) / (time.perf_counter() - t)


def rebuild_copy(base: Path, work: Path) -> Path:
    """A clean copy without consume queues and index: segments hard-linked, checkpoint and config copied."""
    shutil.rmtree(work, ignore_errors=True)
    store = work / "store"
    (store / "commitlog").mkdir(parents=True)
    for seg in sorted((base / "commitlog").iterdir()):
        os.link(seg, store / "commitlog" / seg.name)
    shutil.copy(base / "checkpoint", store / "checkpoint")
    if (base / "config").is_dir():
        shutil.copytree(base / "config", store / "config")
    return store


def aborted_copy(base: Path, work: Path) -> Path:
    """The store as a broker killed after writing it leaves it, for ``verify`` (which only reads it): every file hard-linked,
    and an abort file, so that its next start re-dispatches from the checkpoint's segment (an incident's first ``verify``)."""
    shutil.rmtree(work, ignore_errors=True)
    store = work / "store"
    for path in sorted(base.rglob("*")):
        if path.is_file():
            (store / path.relative_to(base)).parent.mkdir(parents=True, exist_ok=True)
            os.link(path, store / path.relative_to(base))
    (store / "abort").write_bytes(b"")
    return store


def broker_args(spec, work: Path) -> list[str]:
    conf = work / "broker.conf"
    conf.write_text(
        f"mappedFileSizeCommitLog={spec.segment_size}\nmappedFileSizeConsumeQueue={spec.cq_file_size}\n"
        f"maxHashSlotNum={spec.hash_slot_num}\nmaxIndexNum={spec.index_num}\n"
    )
    return ["--broker-config", str(conf), "--broker-version", "4.9.7" if spec.profile == "4.9" else "5.3.3"]


def measure(cmd: list[str], repeat: int, prepare=None, **popen) -> tuple[float, float, str]:
    """Best wall time and the peak RSS (MB) of ``cmd`` over ``repeat`` runs (``popen``: e.g. its ``env``)."""
    best, peak, out = float("inf"), 0.0, ""
    for _ in range(repeat):
        if prepare is not None:
            prepare()
        proc, wall, rss = run_measured(cmd, **popen)
        if proc.returncode not in (0, 1):
            raise SystemExit(f"bench/run.py: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        best, peak, out = min(best, wall), max(peak, rss), proc.stdout
    return best, peak, out


def cold_commands(mq: list[str], path: Path) -> list[tuple[str, list[str]]]:
    store = str(path)
    return [
        ("dump --format jsonl --limit 1000", [*mq, "dump", store, "--format", "jsonl", "--limit", "1000"]),
        ("verify", [*mq, "verify", store, "--no-progress", "--format", "json"]),
        ("stats", [*mq, "stats", store, "--format", "json"]),
        ("recover --dry-run", [*mq, "recover", store, "--dry-run", "--format", "json"]),
        ("info", [*mq, "info", store, "--format", "json"]),
    ]


def code_files() -> list[Path]:
    """Every file a command's start can read: mqtool's tree, the venv's and the standard library's."""
    import sysconfig

    roots = {HERE.parent / "mqtool", Path(sys.prefix), Path(sysconfig.get_paths()["stdlib"])}
    return [p for root in roots for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def drop_from_page_cache(files: list[Path]) -> None:
    """Evict the files' clean pages (no root needed), as a new container starts with none cached."""
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def cold_and_warm(cmd: list[str], scratch: Path, evict: bool, repeat: int) -> tuple[float, float, float, list[str]]:
    """The first and the second run of ``cmd`` in fresh processes (module docstring; ``evict``: the code's
    pages dropped first), each the best of ``repeat`` pairs, each pair with a new home; the first runs'
    peak RSS, and the caches the runs wrote (expected: none)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE")}
    firsts, seconds, peak, written = [], [], 0.0, []
    for _ in range(repeat):
        shutil.rmtree(scratch, ignore_errors=True)
        home = scratch / "home"
        home.mkdir(parents=True)
        env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"))
        files = code_files()
        pyc_before = {p for p in files if p.suffix == ".pyc"}
        if evict:
            drop_from_page_cache(files)
        (proc, first, rss), (proc2, second, _) = run_measured(cmd, env=env), run_measured(cmd, env=env)
        for done in (proc, proc2):
            if done.returncode not in (0, 1):
                raise SystemExit(f"bench/run.py: {' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
        firsts.append(first)
        seconds.append(second)
        peak = max(peak, rss)
        written += [str(p) for p in home.rglob("*")] + [str(p) for p in code_files() if p.suffix == ".pyc" and p not in pyc_before]
    shutil.rmtree(scratch, ignore_errors=True)
    return min(firsts), min(seconds), peak, written


def bench_store(spec, label: str, a) -> list[dict]:
    path = make_store.ensure_store(spec, a.out, log=lambda m: print(m, file=sys.stderr))
    ranges = data_ranges(path)
    data = sum(n for _, n in ranges)
    records = data // spec.message_size
    warm(ranges)
    crc = crc_seconds(ranges, a.repeat)
    plain = plain_walk_bytes_per_s(ranges) if "verify" in a.only else None
    mq = mqtool_cmd()
    rows: list[dict] = []

    def row(name: str, wall: float, rss: float | None, per_byte: bool = True, note: str = "") -> None:
        rows.append({"store": label, "command": name, "wall_s": wall, "gb_s": data / wall / 1e9 if per_byte else None, "msgs_s": records / wall if per_byte else None, "peak_rss_mb": rss, "note": note})

    row("baseline: isal.crc32 over the commit log bytes", crc, None)
    if plain is not None:
        row("baseline: plain Python walk (struct + zlib CRC)", data / plain, None)
    if "help" in a.only:
        wall, rss, _ = measure([*mq, "--help"], a.repeat)
        row("mqtool --help (start-up)", wall, rss, per_byte=False)
    if "cold" in a.only:
        for evict in (False, True):
            for name, cmd in cold_commands(mq, path):
                first, second, rss, written = cold_and_warm(cmd, a.out / f"cold-{label}", evict, a.repeat)
                ratio = first / second
                verdict = "" if evict else f"; target <= {COLD_TARGET}: {'met' if ratio <= COLD_TARGET else 'NOT met'}"
                caches = f"caches written: {len(written)} ({', '.join(written[:2])})" if written else "no cache written"
                row(f"first run{', code not cached' if evict else ''}: {name}", first, rss, per_byte=False, note=f"{ratio:.2f} x the second run ({second:.2f} s){verdict}; {caches}")
    verify = [*mq, "verify", str(path), "--no-progress", "--format", "json"]
    if "verify" in a.only:
        for name, extra in (
            ("verify --only commitlog", ["--only", "commitlog"]),
            ("verify", []),
            ("verify --jobs 2", ["--jobs", "2"]),
            ("verify --only cq", ["--only", "cq"]),
            ("verify --only index", ["--only", "index"]),
            ("verify --only checkpoint", ["--only", "checkpoint"]),
        ):
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            wall, rss, out = measure([*verify, *extra], a.repeat)
            now = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (now.ru_utime + now.ru_stime - used.ru_utime - used.ru_stime) / a.repeat  # all its processes, mean of the runs
            summary = json.loads(out)["summary"]
            findings = sum(summary["findings"].values())
            row(name, wall, rss, note=f"CPU {cpu:.2f} s" + (f"; {findings} findings!" if findings else ""))
        try:  # its findings are the abort file's and the index file its next start drops
            wall, rss, _ = measure([*mq, "verify", str(aborted_copy(path, a.out / f"aborted-{label}")), "--no-progress", "--format", "json"], a.repeat)
            row("verify, the store with an abort file", wall, rss)
        finally:
            shutil.rmtree(a.out / f"aborted-{label}", ignore_errors=True)
    if "info" in a.only:
        wall, rss, _ = measure([*mq, "info", str(path), "--format", "json"], a.repeat)
        row("info", wall, rss)
    if "salvage" in a.only:
        wall, rss, _ = measure([*mq, "--quiet", "salvage", str(path), "--format", "jsonl", "--out", os.devnull], a.repeat)
        row("salvage --format jsonl", wall, rss)
    if "dump" in a.only:
        dump_bench = HERE / "bench_dump.py"
        if dump_bench.exists():
            args = ["--store", str(path), "--out", str(a.out), "--repeat", str(a.repeat)]
            print(f"\n---- {dump_bench.name} {' '.join(args)}", flush=True)
            subprocess.call([sys.executable, str(dump_bench), *args])
        else:
            print("\n(dump: bench/bench_dump.py is not there yet; when it is, this script runs it here)", flush=True)
    work = a.out / f"work-{label}"
    try:
        if "recover" in a.only:
            cmd = [*mq, "--quiet", "recover", str(work / "store"), "--abnormal", "--yes", *broker_args(spec, a.out), "--backup-dir", str(work / "backup"), "-f", "json"]
            wall, rss, _ = measure(cmd, a.repeat, prepare=lambda: crashed_copy(path, work))
            row("recover --abnormal", wall, rss)
        for name in ("rebuild-cq", "rebuild-index"):
            if name in a.only:
                cmd = [*mq, "--quiet", name, str(work / "store"), "--yes", *broker_args(spec, a.out), "--backup-dir", str(work / "backup"), "-f", "json"]
                wall, rss, _ = measure(cmd, a.repeat, prepare=lambda: rebuild_copy(path, work))
                row(name, wall, rss)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = next((r["wall_s"] for r in rows if r["command"] == "verify --only commitlog"), None)
    for r in rows:
        r["x_crc"] = r["wall_s"] / crc
        r["x_commitlog"] = r["wall_s"] / base if base else None
        r["x_plain"] = r["gb_s"] * 1e9 / plain if plain and r["gb_s"] else None
    print(f"\n{label} records: {data / 1e9:.2f} GB, {records:,} records, {len(ranges)} segments ({path})")
    print(f"{'command':50} {'wall s':>7} {'GB/s':>6} {'Mmsg/s':>7} {'RSS MB':>7} {'÷ crc':>6} {'÷ cl':>5} {'x plain':>7}  notes")
    for r in rows:
        notes = [r["note"]] if r["note"] else []
        target = TARGETS.get((r["command"], label)) or TARGETS.get((r["command"], None))
        if target:
            unit, bound = target
            ok = r["wall_s"] <= bound if unit == "s" else (r["gb_s"] or 0) >= bound
            notes.append(f"target {'<=' if unit == 's' else '>='} {bound} {unit}: {'met' if ok else 'NOT met'}")
        if r["peak_rss_mb"] is not None and r["command"] != "mqtool --help (start-up)":
            notes.append(f"RSS {'<=' if r['peak_rss_mb'] <= RSS_TARGET_MB else '>'} {RSS_TARGET_MB} MB")
        ratio_targets = r["command"] == "verify" and label == "1k"  # the issue sets the ratios on 1 KiB records
        if ratio_targets and r["x_commitlog"]:
            notes.append(f"target <= 1.6 x commitlog: {'met' if r['x_commitlog'] <= 1.6 else 'NOT met'}")
        if ratio_targets and r["x_plain"]:
            notes.append(f"target >= 3 x plain: {'met' if r['x_plain'] >= 3 else 'NOT met'}")
        print(
            f"{r['command']:50} {r['wall_s']:7.2f} {r['gb_s'] or 0:6.2f} {(r['msgs_s'] or 0) / 1e6:7.2f} "
            f"{'' if r['peak_rss_mb'] is None else round(r['peak_rss_mb']):>7} {r['x_crc']:6.1f} "
            f"{'' if r['x_commitlog'] is None else format(r['x_commitlog'], '.2f'):>5} {'' if r['x_plain'] is None else format(r['x_plain'], '.1f'):>7}  {'; '.join(notes)}",
            flush=True,
        )
    return rows


def spark_submit(a) -> None:
    """``spark-submit spark/mqtool_scan.py`` on the sample store, whole process (the JVM's start
    and Spark's session included) as a user runs it, best of ``--repeat``; once, whatever
    ``--record``: it does not read the benchmark store."""
    submit = Path(sys.executable).with_name("spark-submit")
    out = a.out / "spark-submit-out"
    cmd = [str(submit), str(HERE.parent / "spark" / "mqtool_scan.py"), str(SAMPLE), "--output", str(out)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PATH": f"{submit.parent}{os.pathsep}{os.environ.get('PATH', '')}"}  # as in the activated venv
    try:
        wall, rss, _ = measure(cmd, a.repeat, prepare=lambda: shutil.rmtree(out, ignore_errors=True), env=env)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    verdict = "met" if wall <= SPARK_SUBMIT_TARGET else "NOT met"
    print(f"\nspark-submit spark/mqtool_scan.py {SAMPLE.relative_to(HERE.parent)}: {wall:.2f} s, peak RSS {rss:.0f} MB "
          f"(target <= {SPARK_SUBMIT_TARGET:.0f} s: {verdict})", flush=True)


def markdown(rows: list[dict], command_line: str) -> str:
    """One table per command family, as BENCHMARKS.md shows them."""
    families = {
        "verify": lambda c: c.startswith(("verify", "baseline")),
        "info": lambda c: c == "info",
        "salvage": lambda c: c.startswith("salvage"),
        "recover, rebuild-cq, rebuild-index": lambda c: c.startswith(("recover", "rebuild")),
        "start-up": lambda c: c.startswith("mqtool --help"),
        "first run after install": lambda c: c.startswith("first run"),
    }
    out = []
    for title, member in families.items():
        chosen = [r for r in rows if member(r["command"])]
        if not chosen or all(r["command"].startswith("baseline") for r in chosen):
            continue
        out += [f"### {title}", "", f"`{command_line}`", "", "| store | command | wall s | GB/s | M records/s | peak RSS MB | ÷ CRC | ÷ commitlog | x plain walk |", "|---|---|---|---|---|---|---|---|---|"]
        for r in chosen:
            cells = [
                r["store"], r["command"], f"{r['wall_s']:.2f}", "" if r["gb_s"] is None else f"{r['gb_s']:.2f}",
                "" if r["msgs_s"] is None else f"{r['msgs_s'] / 1e6:.2f}", "" if r["peak_rss_mb"] is None else str(round(r["peak_rss_mb"])),
                f"{r['x_crc']:.1f}", "" if r["x_commitlog"] is None else f"{r['x_commitlog']:.2f}", "" if r["x_plain"] is None else f"{r['x_plain']:.1f}",
            ]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/run.py", description=__doc__.splitlines()[0])
    p.add_argument("--size", default="256m", help="commit log bytes per store (default 256m; 2g for the BENCHMARKS.md table)")
    p.add_argument("--record", action="append", choices=("1k", "128"), help="record size of the store (repeatable; default 1k)")
    p.add_argument("--repeat", type=int, default=1, help="best of this many runs per command")
    p.add_argument("--only", default=",".join(ROWS), help=f"comma-separated commands to run (default all: {','.join(ROWS)})")
    p.add_argument("--out", type=Path, default=make_store.OUT, help="where stores are generated and kept (default bench/out)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--markdown", action="store_true", help="also print the tables as BENCHMARKS.md shows them")
    p.add_argument("--suite", choices=sorted(SUITES), action="append", help="run a detailed benchmark script instead (repeatable)")
    a = p.parse_args(argv)
    if a.suite:
        failed = [name for name in a.suite if subprocess.call([sys.executable, str(HERE / SUITES[name]), "--size", a.size])]
        return 1 if failed else 0
    a.only = set(a.only.split(","))
    unknown = a.only - set(ROWS)
    if unknown:
        p.error(f"unknown command(s) for --only: {', '.join(sorted(unknown))}")
    rows = []
    if "spark-submit" in a.only:
        spark_submit(a)
    for label in a.record or ["1k"] if a.only - {"spark-submit"} else []:
        spec = make_store.StoreSpec(size=make_store.parse_size(a.size), message_size=make_store.parse_size(label), segment_size=make_store.parse_size("1g"))
        rows += bench_store(spec, label, a)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))
    if a.markdown:
        print("\n" + markdown(rows, "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
