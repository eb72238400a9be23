"""Differential check of the Spark job (``spark/mqtool_scan.py``) against the CLI on damaged copies of the
real-broker fixtures: ``messages`` rows with tiny splits against ``mqtool dump --format jsonl``, ``stats``
with tiny splits against ``mqtool stats --format json`` and its log end (``brokers.max_offset``) against
dump's, ``verify`` findings against ``mqtool verify --format json`` (its commit log kinds: docs/spark.md).
Damage goes to the commit log (classic segments or DLedger data files): bit flips, zeroed ranges, random
bytes over a range, a segment cut, and a blank record written at a record start, which leaves the records
after it as stale bytes. All stores go through one SparkSession (local[2]), one job per mode. Prints every
difference and the tally; exit 1 when any.

    python bench/spark_diff.py -n 24                 # 24 damaged copies, seeds 0..23, split size 4k
    python bench/spark_diff.py --seed 7 --keep DIR   # replay one copy, keep it in DIR
    python bench/spark_diff.py --from-offset 1500000 --to-offset 3300000   # messages of that range only, against dump's
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import pyarrow.parquet as pq  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from conftest import FIXTURES, copy_store  # noqa: E402
from mqtool.cli import app  # noqa: E402
from mqtool.formats.commitlog import BLANK_MAGIC  # noqa: E402
from mqtool.store import Store  # noqa: E402

KINDS = tuple(sorted((d.parent.name.removeprefix("rocketmq-"), d.name) for d in FIXTURES.glob("rocketmq-*/*") if d.is_dir()))
DAMAGES = ("bit-flips", "zeroed-range", "garbage", "cut-segment", "stale-after-blank")
ROW_FIELDS = ("offset", "size", "topic", "queue_id", "queue_offset", "keys", "tags", "msg_id", "uniq_key", "crc_ok", "body",
              "properties", "store_timestamp", "sys_flag")
QUEUE_FIELDS = ("messages", "dispatched", "bytes", "body_bytes", "crc_failures", "min_queue_offset", "max_queue_offset",
                "first_store_timestamp", "last_store_timestamp")
runner = CliRunner()


def cli(*args) -> tuple[int, str, str]:
    r = runner.invoke(app, [str(a) for a in args])
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    return r.exit_code, r.stdout, r.stderr


def damage(root: Path, rng: random.Random) -> str:
    """One commit log damage: a segment (DLedger data file) chosen, then where in its written bytes."""
    with Store.open(root) as store:
        segs = [(s.path, s.base_offset) for s in store.commitlog.segments]
        dledger = store.is_dledger
    # DLedger: no blank record; a data file cut short makes the store one no broker (nor mqtool) opens
    kinds = [k for k in DAMAGES if not (dledger and k in ("stale-after-blank", "cut-segment"))]
    kind = rng.choice(kinds)
    path, base = rng.choice(segs)
    data = bytearray(path.read_bytes())
    used = len(data.rstrip(b"\0")) or len(data)
    rel = path.relative_to(root)
    if kind == "bit-flips":
        n = rng.randint(1, 8)
        for _ in range(n):
            data[rng.randrange(used)] ^= 1 << rng.randrange(8)
        path.write_bytes(data)
        return f"{n} bit flips in {rel}"
    if kind in ("zeroed-range", "garbage"):
        start = rng.randrange(used)
        end = min(len(data), start + rng.choice([8, 100, 4096, 65536]))
        data[start:end] = bytes(end - start) if kind == "zeroed-range" else rng.randbytes(end - start)
        path.write_bytes(data)
        return f"{rel} {kind} [{start}, {end})"
    if kind == "cut-segment":
        cut = rng.randrange(used)
        path.write_bytes(data[:cut])
        return f"{rel} cut to {cut} bytes"
    code, out, _ = cli("dump", root, "--format", "jsonl", "--from-offset", base, "--to-offset", base + len(data))
    starts = [json.loads(line)["offset"] - base for line in out.splitlines()]
    if len(starts) < 2:
        return "no record to blank"
    pos = rng.choice(starts[1:])
    data[pos : pos + 8] = (len(data) - pos).to_bytes(4, "big") + BLANK_MAGIC.to_bytes(4, "big", signed=True)
    path.write_bytes(data)
    return f"{rel} blank at {pos}, stale records after it"


def parquet_rows(directory: Path) -> dict[str, list[dict]]:
    rows: dict[str, list[dict]] = {}
    for r in sorted(pq.read_table(directory).to_pylist(), key=lambda r: (r["broker"], r["offset"])):
        rows.setdefault(r["broker"], []).append(r)
    return rows


def row_key(r: dict) -> tuple:
    props = r.get("properties")
    props = dict(props) if props is not None else None
    return tuple(props if f == "properties" else (list(r[f]) if f == "keys" and r[f] is not None else r[f]) for f in ROW_FIELDS)


def diff_rows(name: str, want: list[dict], got: list[dict]) -> list[str]:
    w, g = [row_key(r) for r in want], [row_key(r) for r in got]
    if w == g:
        return []
    ws, gs = {k[0]: k for k in w}, {k[0]: k for k in g}
    missing = sorted(set(ws) - set(gs))
    extra = sorted(set(gs) - set(ws))
    changed = sorted(o for o in set(ws) & set(gs) if ws[o] != gs[o])
    out = [f"{name}: messages: dump {len(w)} rows, spark {len(g)}; missing {len(missing)} {missing[:5]}, extra {len(extra)} {extra[:5]}"]
    for o in changed[:3]:
        fields = [f"{f} dump={a!r} spark={b!r}" for f, a, b in zip(ROW_FIELDS, ws[o], gs[o]) if a != b]
        out.append(f"{name}:   offset {o}: " + ", ".join(fields))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=24, help="how many damaged copies (default 24)")
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--seed", type=int, help="this one seed only")
    ap.add_argument("--only", help="comma-separated store names or version/name")
    ap.add_argument("--split-size", default="4k")
    ap.add_argument("--keep", help="build the copies in this folder and keep them")
    ap.add_argument("--from-offset", type=int, help="messages only: this range of every store, against dump's")
    ap.add_argument("--to-offset", type=int)
    args = ap.parse_args()
    kinds = [k for k in KINDS if not args.only or any(w in (k[1], "/".join(k)) for w in args.only.split(","))]
    if args.from_offset is not None or args.to_offset is not None:  # the job refuses an offset range of a DLedger store (exit 2)
        kinds = [k for k in kinds if not k[1].startswith("dledger")]
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.n))
    work = Path(args.keep or tempfile.mkdtemp(prefix="spark-diff-"))
    work.mkdir(parents=True, exist_ok=True)
    stores: dict[str, tuple[Path, str, str]] = {}
    for seed in seeds:
        version, name = kinds[seed % len(kinds)]
        rng = random.Random(seed)
        root = copy_store(version, name, work / f"s{seed}")
        what = [damage(root, rng) for _ in range(rng.randint(1, 2))]
        stores[f"s{seed}"] = (root, version, "; ".join(what))
        print(f"s{seed}: {version}/{name}: {stores[f's{seed}'][2]}", flush=True)

    from mqtool.spark import job

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = job.configure(SparkSession.builder.master("local[2]").appName("mqtool-spark-diff").config("spark.ui.enabled", "false")
                          .config("spark.ui.showConsoleProgress", "false")
                          .config("spark.sql.session.timeZone", "UTC").config("spark.driver.host", "127.0.0.1")
                          .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    names = list(stores)

    def run(mode: str, **kw) -> dict:
        o = job.JobOptions(paths=[str(stores[b][0]) for b in names], broker_names=names, broker_versions=[stores[b][1] for b in names],
                           output=str(work / f"out-{mode}"), mode=mode, **kw)
        return job.run(o, spark)

    problems: list[str] = []
    ranged = args.from_offset is not None or args.to_offset is not None
    doc = run("messages", split_size=args.split_size, body="sha256", from_offset=args.from_offset, to_offset=args.to_offset)
    spark_rows = parquet_rows(work / "out-messages" / "messages")
    stats_doc = {} if ranged else run("stats", split_size=args.split_size)
    verify_doc = {} if ranged else run("verify")
    if not ranged:
        queues = pq.read_table(work / "out-stats" / "queues").to_pylist()
        brokers = {r["broker"]: r for r in pq.read_table(work / "out-stats" / "brokers").to_pylist()}
        findings = pq.read_table(work / "out-verify" / "findings").to_pylist()
    bounds = [a for k, v in (("--from-offset", args.from_offset), ("--to-offset", args.to_offset)) if v is not None for a in (k, v)]
    for b in names:
        root, version, what = stores[b]
        tag = f"{b} ({root.name}: {what})"
        code, out, err = cli("dump", root, "--format", "jsonl", "--body", "sha256", "--broker-version", version, *bounds)
        want = [json.loads(line) for line in out.splitlines()]
        problems += diff_rows(tag, want, spark_rows.get(b, []))
        if ranged:
            continue
        dump_end = re.findall(r"(?:end of the commit log at offset|stopped at offset) (\d+)", err)
        if dump_end and int(dump_end[-1]) != brokers[b]["max_offset"]:
            problems.append(f"{tag}: stats brokers max_offset {brokers[b]['max_offset']}, dump's end {dump_end[-1]}")
        code, out, err = cli("stats", root, "--format", "json", "--broker-version", version)
        cli_queues = {(r["topic"], r["queue_id"]): r for r in json.loads(out) if r.get("row") == "queue"} if out.strip() else {}
        sp_queues = {(r["topic"], r["queue_id"]): r for r in queues if r["broker"] == b}
        for k in sorted(set(cli_queues) | set(sp_queues), key=str):
            a, s = cli_queues.get(k), sp_queues.get(k)
            if a is None or s is None or any(a[f] != s[f] for f in QUEUE_FIELDS):
                fields = [f for f in QUEUE_FIELDS if a and s and a[f] != s[f]]
                problems.append(f"{tag}: stats queue {k}: " + (", ".join(f"{f} cli={a[f]} spark={s[f]}" for f in fields)
                                                             if a and s else f"cli {a is not None}, spark {s is not None}"))
        code, out, err = cli("verify", root, "--format", "json", "--broker-version", version, "--only", "commitlog")
        v = json.loads(out)
        cli_f = sorted((f["kind"], f["offset"], f["severity"]) for f in v["findings"])
        sp_f = sorted((f["kind"], f["offset"], f["severity"]) for f in findings if f["broker"] == b)
        if cli_f != sp_f:
            only_cli, only_spark = sorted(set(cli_f) - set(sp_f)), sorted(set(sp_f) - set(cli_f))
            problems.append(f"{tag}: verify: only cli {only_cli[:6]}, only spark {only_spark[:6]}")
        sb = next((x for x in verify_doc.get("brokers", []) if x["broker"] == b), None)
        whole = json.loads(cli("verify", root, "--format", "json", "--broker-version", version)[1])["summary"]["commitlog"]
        if sb and (sb["logical_end"], sb["records"]) != (whole["logical_end"], whole["records"]):
            problems.append(f"{tag}: verify logical end, records cli={whole['logical_end']}, {whole['records']} "
                            f"spark={sb['logical_end']}, {sb['records']}")
    splits = doc.get("splits")
    print(f"{len(names)} stores, {splits} splits of {args.split_size} (messages), {stats_doc.get('splits')} (stats); "
          f"{len(doc['rejected_splits'])} splits dropped; {len(problems)} differences")
    for p in problems:
        print(p)
    spark.stop()
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
