"""The Spark job behind ``spark/mqtool_scan.py`` (docs/spark.md), checked by ``splits.check_splits``."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import sys
import time
import uuid
from contextlib import closing
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import SparkConf, StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession, functions as F

from ..errors import EXIT_FINDINGS, EXIT_INTERNAL, BadInput, MqtoolError, UnknownStoreVersion, UsageError
from ..verify.findings import FINDING_FIELDS
from ..store.records import parse_time
from ..store.dledgerstart import KEPT, record_in_broken_entry
from ..store.resync import record_start_note
from ..store.splits import Damage, Rejected, SplitResult, auto_split_size, check_splits, parse_size
from ..store import BrokerVersion, StoreConfig, load_broker_config
from .inputs import BrokerInput, broker_store, resolve_inputs
from .reader import ScanTask, plan_tasks
from ..scan import compute
from ..table import Table
from ..scan.filter import check_offset_range, msg_id_offset
from ..scan.schema import MESSAGE_FILE_SCHEMA, SPLIT_CHECK_COLUMNS, TIMESTAMP, arrow_schema
from ..scan.stats import BASE_AGGREGATES
from .source import FORMAT, RocketMQDataSource

MODES = ("messages", "stats", "verify")
FORMATS = ("parquet", "json", "csv")
WRITERS = ("auto", "python", "spark")
# spark.sql.parquet.compression.codec -> pyarrow's name, for the tasks' own Parquet writer
PYARROW_CODECS = {"snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "lz4_raw": "lz4", "brotli": "brotli", "none": "none", "uncompressed": "none"}
# and the part files' extension, as Spark's writer names them (parquet-java's ``CompressionCodecName``)
PART_EXTENSIONS = {"snappy": ".snappy", "gzip": ".gz", "zstd": ".zstd", "lz4_raw": ".lz4raw", "brotli": ".br"}
PRINT_ROWS = 200
# the options that choose records (in the order of JobOptions' fields), which --mode verify refuses: it checks every record
SCAN_OPTIONS = ("topic", "queue", "key", "tag", "since", "until", "uniq-key", "msg-id", "from-offset", "to-offset", "split-size")
SplitKey = tuple[str, int]  # (broker, split_start): a split of the scan


@dataclass
class JobOptions:
    paths: list[str]
    output: str
    mode: str = "messages"
    format: str = "parquet"
    topics: list[str] = field(default_factory=list)
    queue: int | None = None
    key: str | None = None
    tag: str | None = None
    since: int | None = None
    until: int | None = None
    uniq_key: str | None = None
    msg_id: str | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    split_size: str | None = None
    body: str = "none"
    broker_names: list[str] = field(default_factory=list)
    broker_versions: list[str] = field(default_factory=list)
    broker_config: str | None = None
    keep_going: bool = False
    writer: str = "auto"

    @classmethod
    def from_args(cls, args) -> "JobOptions":
        """From ``spark/mqtool_scan.py``'s argparse namespace (a repeatable option named in the singular: ``topic``)."""
        values = {f.name: getattr(args, f.name if hasattr(args, f.name) else f.name[:-1]) for f in fields(cls)}
        values = {k: list(v) if isinstance(v, list) else v for k, v in values.items()}
        return cls(**{**values, "since": parse_time(args.since, "--since"), "until": parse_time(args.until, "--until")})

    def offset_range(self) -> tuple[int | None, int | None]:
        """The offsets read, ``[from, to)``: ``--msg-id``'s record alone, else ``--from-offset``/``--to-offset``."""
        if self.msg_id is not None:
            offset = msg_id_offset(self.msg_id)
            return offset, offset + 1
        return self.from_offset, self.to_offset


# ---- session, shipping, reading ------------------------------------------------------------------


def session() -> SparkSession:
    """The session with mqtool's defaults where the user configured nothing (never the master)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # started with plain ``python`` (spark-submit sets the gateway port): Python workers would
        # otherwise be the ``python3`` on PATH, which may lack mqtool and pyarrow
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    conf = SparkConf()
    builder = SparkSession.builder.appName("mqtool-scan")
    if not conf.contains("spark.sql.session.timeZone"):
        builder = builder.config("spark.sql.session.timeZone", "UTC")
    return configure(builder.getOrCreate(), conf)


def configure(spark: SparkSession, conf: SparkConf | None = None) -> SparkSession:
    """Quiet logs and few shuffle partitions, unless ``conf`` (the user's) sets them."""
    conf = conf or SparkConf()
    if not conf.contains("spark.log.level"):
        spark.sparkContext.setLogLevel("WARN")
    if not conf.contains("spark.sql.shuffle.partitions"):
        # what is shuffled (stats' aggregates) is small; Spark's default of 200 tasks per stage
        # costs seconds per query on a few cores
        spark.conf.set("spark.sql.shuffle.partitions", str(2 * spark.sparkContext.defaultParallelism))
    return spark


class Scan:
    """The resolved inputs of one run, their split plan, and DataFrames over them."""

    def __init__(self, spark: SparkSession, o: JobOptions, inputs: list[BrokerInput]):
        self.spark, self.o, self.inputs = spark, o, inputs
        largest = max((s.size for b in inputs for s in b.segments), default=0)
        size = parse_size(o.split_size) if o.split_size else auto_split_size(sum(b.bytes for b in inputs), spark.sparkContext.defaultParallelism)
        self.split_size = None if size >= largest else size
        self.tasks: list[ScanTask] = plan_tasks(inputs, self.split_size, o.keep_going)
        self.partition = {(t.broker, t.split.offset): i for i, t in enumerate(self.tasks)}  # Spark's partition index
        self.damage: list[Damage] = []  # what the check found the log read past or stopping at (``_rejected``)
        self.config = load_broker_config(Path(o.broker_config)) if o.broker_config else StoreConfig()
        self.msg_id_past_end = msg_id_past_end(o.msg_id, inputs, self.config) if o.msg_id is not None else {}

    def read(self, body: str = "none", output: str = "messages", **options: str) -> DataFrame:
        """The ``rocketmq`` data source over the inputs (``output``, ``options``), with the job's offset range and filters."""
        o, each = self.o, [(p, b) for b in self.inputs for p in b.paths]
        given = {"body": body, "output": output, "brokerNames": json.dumps([b.broker for _, b in each]),
                 "brokerVersions": json.dumps([b.version for _, b in each]), "topics": json.dumps(o.topics)}
        start, stop = o.offset_range()  # the same range ``prepare`` planned the splits with
        values = {"brokerConfig": os.path.abspath(o.broker_config) if o.broker_config else None, "splitSize": self.split_size,
                  "fromOffset": start, "toOffset": stop, "queue": o.queue, "since": o.since, "until": o.until, "tag": o.tag, "key": o.key,
                  "uniqKey": o.uniq_key, "msgId": o.msg_id, "keepGoing": "true" if o.keep_going else None}
        given.update((name, str(v)) for name, v in values.items() if v is not None)
        return self.spark.read.format(FORMAT).options(**{**given, **options}).load([p for p, _ in each])

    def rejected(self, edges) -> list[tuple[int, Rejected]]:
        """``(partition, Rejected)`` of the splits whose first record is not where the chain before ends."""
        rows: dict[SplitKey, list[int]] = {}
        skipped: dict[SplitKey, list[int]] = {}
        for e in edges:
            b = rows.setdefault((e["broker"], e["split_start"]), [e["offset"], e["offset"] + e["size"]])
            b[:] = min(b[0], e["offset"]), max(b[1], e["offset"] + e["size"])
            if e["split_skipped"]:
                skipped[(e["broker"], e["split_start"])] = e["split_skipped"]
        results = {key: self.tasks[self.partition[key]].result_of_rows(*b) for key, b in rows.items()}
        return self._rejected(results, skipped)

    def check(self, rows) -> list[tuple[int, Rejected]]:
        """``rejected`` from the rows each split that read records reports (as ``SplitScan`` reports them)."""
        split = {(r["broker"], r["split_start"]): r for r in rows}
        results = {key: self.tasks[self.partition[key]].result(r["first_offset"], r["exit_offset"]) for key, r in split.items()}
        return self._rejected(results, {key: r["skipped"] for key, r in split.items() if r["skipped"]})

    def _rejected(self, results: dict[SplitKey, SplitResult], skipped: dict[SplitKey, Sequence[int]]) -> list[tuple[int, Rejected]]:
        """The check (``check_splits``); keeps in ``damage`` what the splits that pass read past or stop at."""
        every = [results.get((t.broker, t.split.offset)) or t.result(None, None) for t in self.tasks]
        splits = {(r.segment, r.start): t.split for r, t in zip(every, self.tasks)}
        pairs = {((broker, self.tasks[self.partition[(broker, start)]].split.base_offset), start): list(zip(offsets[::2], offsets[1::2]))
                 for (broker, start), offsets in skipped.items() if offsets}
        self.damage = []
        rejected = check_splits(every, splits, self.damage, pairs)
        done = {(r.segment, r.start) for r in rejected}
        rejected += [Rejected(r.segment, r.start, r.first, r.first, self.msg_id_past_end[r.segment[0]]) for r in every
                     if r.segment[0] in self.msg_id_past_end and r.first is not None and (r.segment, r.start) not in done]
        return [(self.partition[(r.segment[0], r.start)], r) for r in rejected]


def msg_id_past_end(msg_id: str, inputs: Sequence[BrokerInput], config: StoreConfig) -> dict[str, str]:
    """Per broker whose ``--msg-id`` record lies past the next start's end, ``mqtool dump``'s words; its rows dropped."""
    from ..store.lookup import past_end_error, read_message
    from ..store.nextstart import end_before

    offset, found = msg_id_offset(msg_id), {}
    for b in inputs:
        with broker_store(b, config) as store:
            record, _ = read_message(store, offset)
            if record is not None and record.msg_id == msg_id.upper() and (cut := end_before(store, record.offset, record.total_size)) is not None:
                found[b.broker] = f"no message at offset {offset} of --msg-id: {past_end_error(cut)}"
    return found


def checked_messages(spark: SparkSession, paths: Sequence[str], *, split_size: str | None = None, body: str = "none", broker_names: Sequence[str] = ()) -> tuple[DataFrame, list[Rejected]]:
    """For notebooks: the messages of ``paths`` without the rows of splits failing the handoff check (one extra pass)."""
    spark.dataSource.register(RocketMQDataSource)
    o = JobOptions(paths=list(paths), output="", split_size=split_size, body=body, broker_names=list(broker_names))
    scan = Scan(spark, o, prepare(o))
    df = scan.read(body)
    if scan.split_size is None:
        return df, []
    edges = df.filter(F.col("split_edge")).select("broker", "split_start", "offset", "size", "split_skipped").collect()
    rejected = [r for _, r in scan.rejected(edges)]
    return without(df, rejected), rejected


def without(df: DataFrame, rejected: Sequence[Rejected]) -> DataFrame:
    """``df`` without the rows of the ``rejected`` splits (rows carry ``broker`` and ``split_start``)."""
    if not rejected:
        return df
    bad = [f"{r.segment[0]}\x00{r.start}" for r in rejected]
    return df.filter(~F.concat_ws("\x00", "broker", F.col("split_start").cast("string")).isin(bad))


# ---- output ------------------------------------------------------------------------------------


class Output:
    """The output directory (any Hadoop file system path: local, hdfs://, s3a://...)."""

    def __init__(self, spark: SparkSession, root: str, fmt: str):
        self.spark, self.fmt = spark, fmt
        self.local = "://" not in root  # a path (on a mount every executor shares, on a cluster)
        self.root = os.path.abspath(root) if self.local else root.rstrip("/")
        self.codec_name = spark.conf.get("spark.sql.parquet.compression.codec", "snappy").lower()
        self.codec = PYARROW_CODECS.get(self.codec_name)  # None: pyarrow cannot write it
        self._Path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
        self.fs = self._Path(self.root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def write(self, df: DataFrame, name: str, *, single: bool = False, order: Sequence[str] = ()) -> str:
        """Write ``df`` as ``name`` (``single``: one file, sorted by ``order``)."""
        if single:
            df = df.coalesce(1).sortWithinPartitions(*order) if order else df.coalesce(1)
        if self.fmt == "csv":
            df = df.select(*[F.to_json(F.col(f.name)).alias(f.name) if f.dataType.typeName() in ("map", "array", "struct") else F.col(f.name) for f in df.schema.fields])
            df.write.mode("overwrite").option("header", True).option("escape", '"').csv(self.path(name))  # RFC 4180 quotes
        elif self.fmt == "json":
            df.write.mode("overwrite").option("ignoreNullFields", False).json(self.path(name))
        else:
            df.write.mode("overwrite").parquet(self.path(name))
        return self.path(name)

    @property
    def pyarrow_writes(self) -> bool:
        """Whether pyarrow can write this output itself: Parquet, to a path, in a codec it has."""
        return self.fmt == "parquet" and self.local and self.codec is not None

    def part_name(self, partition: int, run: str) -> str:
        return f"part-{partition:05d}-{run}{PART_EXTENSIONS.get(self.codec_name, '')}.parquet"

    def write_table(self, table: pa.Table, name: str) -> str:
        """Write a small driver-side table as ``name``, one file: with pyarrow when it can, else Spark's writer."""
        if not self.pyarrow_writes:
            return self.write(self.spark.createDataFrame(table), name, single=True)
        target = self.fresh_dir(name)
        pq.write_table(table, target / self.part_name(0, uuid.uuid4().hex), compression=self.codec)
        (target / "_SUCCESS").touch()
        return str(target)

    def fresh_dir(self, name: str) -> Path:
        """The local directory of output ``name``, emptied (overwrite, as Spark's writer)."""
        target = Path(self.path(name))
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        return target

    def task_files(self, name: str, partitions: Sequence[int]) -> list[str]:
        """The files the given write tasks produced (``part-<task index>-...``)."""
        wanted = set(partitions)
        paths = [status.getPath() for status in self.fs.listStatus(self._Path(self.path(name)))]
        return [p.toString() for p in paths if (match := re.match(r"part-(\d+)-", p.getName())) and int(match.group(1)) in wanted]

    def delete(self, paths: Sequence[str]) -> None:
        for p in paths:
            self.fs.delete(self._Path(p), True)

    def rename(self, name: str, new_name: str) -> str:
        """Move output ``name`` to ``new_name``, replacing it."""
        self.delete([self.path(new_name)])
        if not self.fs.rename(self._Path(self.path(name)), self._Path(self.path(new_name))):
            raise MqtoolError(f"could not rename {self.path(name)} to {self.path(new_name)}")
        return self.path(new_name)

    def write_text(self, name: str, text: str) -> str:
        stream = self.fs.create(self._Path(self.path(name)), True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        return self.path(name)

    def count_files(self, files: Sequence[str]) -> int:
        if not files:
            return 0
        reader = self.spark.read.format(self.fmt)
        if self.fmt == "csv":
            reader = reader.option("header", True).option("escape", '"').option("multiLine", True)
        return reader.load(list(files)).count()


# ---- modes ---------------------------------------------------------------------------------------


def run_messages(scan: Scan, out: Output) -> dict:
    """``messages`` written by the tasks (``--writer``; Parquet in a pyarrow codec), else by Spark's writer (BENCHMARKS.md)."""
    if scan.o.writer == "python" and not out.pyarrow_writes:
        raise UsageError(f"--writer python: needs --format parquet, an output path (a mount every executor shares; not a URI) and a "
                         f"codec pyarrow writes (spark.sql.parquet.compression.codec={out.codec_name})")
    if scan.o.writer != "spark" and out.pyarrow_writes:
        return run_messages_in_tasks(scan, out)
    obs, edge = Observation("mqtool-messages"), F.struct("broker", "split_start", "offset", "size", "split_skipped")
    df = scan.read(scan.o.body).observe(obs, F.collect_list(F.when(F.col("split_edge"), edge)).alias("edges"), F.count(F.lit(1)).alias("rows"))
    kept_obs = Observation("mqtool-written")
    kept = df.filter(~F.col("filtered_out")).observe(kept_obs, F.count(F.lit(1)).alias("rows"))
    target = out.write(kept.drop(*SPLIT_CHECK_COLUMNS), "messages")
    rejected = scan.rejected(obs.get["edges"])
    dropped = out.task_files("messages", [i for i, _ in rejected])
    dropped_rows = out.count_files(dropped)
    out.delete(dropped)
    return {"messages": target, "rows_read": obs.get["rows"], "rows_written": kept_obs.get["rows"] - dropped_rows, "rejected": rejected}


def run_messages_in_tasks(scan: Scan, out: Output) -> dict:
    """``messages`` written by the tasks to staging, the passing splits' files moved into place, then ``_SUCCESS``."""
    target = out.fresh_dir("messages")
    staging = target / "_temporary"
    staging.mkdir()
    written = scan.read(scan.o.body, output="parquet", directory=str(staging), compression=out.codec).collect()
    rejected = scan.check(written)
    bad = {(r.segment[0], r.start) for _, r in rejected}
    run_id, kept, files = uuid.uuid4().hex, 0, 0
    for r in written:
        key = (r["broker"], r["split_start"])
        if key in bad or r["file"] is None:
            continue
        os.replace(r["file"], target / out.part_name(scan.partition[key], run_id))
        kept += r["rows_written"]
        files += 1
    if not files:
        pq.write_table(MESSAGE_FILE_SCHEMA.empty_table(), target / out.part_name(0, run_id), compression=out.codec)
    shutil.rmtree(staging)
    (target / "_SUCCESS").touch()
    return {"messages": str(target), "rows_read": sum(r["rows_read"] for r in written), "rows_written": kept, "rejected": rejected}


def run_stats(scan: Scan, out: Output) -> dict:
    """Per split aggregates, checked, then combined by one grouping-sets job into the per-queue and per-hour tables."""
    obs = Observation("mqtool-stats")
    split = F.struct("broker", "split_start", "first_offset", "exit_offset", "skipped")
    partial = scan.read(output="stats").observe(obs, F.collect_set(split).alias("splits")).persist(StorageLevel.MEMORY_AND_DISK)
    sums = [F.sum(c).alias(c) for c in ("messages", "dispatched", "bytes", "body_bytes", "crc_failures")]

    def write_hourly(df: DataFrame, name: str) -> str:
        return out.write(df.groupBy("broker", "topic", "hour").agg(*sums), name, single=True, order=("broker", "topic", "hour"))

    try:
        nonempty = partial.filter(F.col("messages") > 0)  # > 0: not all filtered out
        staged = "_hourly_unchecked"
        write_hourly(nonempty, staged)  # the scan: fills the cache and the observation
        splits = obs.get["splits"]
        rejected = scan.check(splits)
        kept = without(nonempty, [r for _, r in rejected])
        if rejected:  # rare (stale records after a truncation): written again without them, from the cache
            hourly = write_hourly(kept, "hourly")
            out.delete([out.path(staged)])
        else:
            hourly = out.rename(staged, "hourly")
        written = {"hourly": hourly}
        # per queue, and per broker and hour (printed): both small enough for the driver, one job
        both = kept.groupingSets([["broker", "topic", "queue_id"], ["broker", "hour"]], "broker", "topic", "queue_id", "hour").agg(
            F.grouping("hour").alias("per_queue"),
            *(getattr(F, op)(name).alias(name) for name, _, op in BASE_AGGREGATES),  # the splits' sums, minima and maxima combined
        ).toArrow()
    finally:
        partial.unpersist()
    per_queue = compute.equal(both["per_queue"], 1)
    queues = both.filter(per_queue).drop_columns(["hour", "per_queue"]).sort_by([(c, "ascending") for c in ("broker", "topic", "queue_id")])
    for name in ("first_store", "last_store"):  # the store times also as TIMESTAMP columns
        queues = queues.append_column(f"{name}_time", compute.cast(compute.multiply(queues[f"{name}_timestamp"], 1000), TIMESTAMP))
    per_hour = both.filter(compute.invert(per_queue)).sort_by([("broker", "ascending"), ("hour", "ascending")]).slice(0, PRINT_ROWS + 1).to_pylist()
    written["queues"] = out.write_table(queues, "queues")
    totals = queues.group_by("broker").aggregate(
        [(c, "sum") for c in ("messages", "bytes", "crc_failures")] + [("first_store_timestamp", "min"), ("last_store_timestamp", "max")]
    )
    totals = {r["broker"]: {k.rsplit("_", 1)[0]: v for k, v in r.items()} for r in totals.to_pylist()}
    brokers_rows = broker_rows(scan, totals, splits, rejected)
    written["brokers"] = out.write_table(pa.Table.from_pylist(brokers_rows, schema=arrow_schema(BROKER_COLUMNS)), "brokers")
    print_table("brokers", brokers_rows, BROKER_PRINT, optional=BROKER_PRINT_OPTIONAL)
    print_table("queues", queues.slice(0, PRINT_ROWS + 1).to_pylist(), QUEUE_PRINT, optional=QUEUE_PRINT_OPTIONAL)
    print_table("hourly (all topics)", per_hour, ["broker", "hour", "messages", "bytes"])
    return {**written, "messages": sum(r["messages"] for r in brokers_rows), "rejected": rejected}


BROKER_COLUMNS = (("broker", "string"), *((name, "int") for name in ("segments", "splits", "rejected_splits")),
                  *((name, "bigint") for name in ("min_offset", "max_offset", "messages", "bytes", "crc_failures", "first_store_timestamp", "last_store_timestamp")))
# printed: the optional columns least important first (and a queue's topic last: a long one runs past the edge)
BROKER_PRINT = [name for name, _ in BROKER_COLUMNS]
BROKER_PRINT_OPTIONAL = ["first_store_timestamp", "last_store_timestamp", "segments"]
QUEUE_PRINT = ["broker", "queue_id", "messages", "dispatched", "bytes", "crc_failures", "min_queue_offset", "max_queue_offset", "first_store_time", "last_store_time", "topic"]
QUEUE_PRINT_OPTIONAL = ["first_store_time", "last_store_time", "crc_failures", "bytes"]


def broker_rows(scan: Scan, totals: dict[str, dict], splits, rejected) -> list[dict]:
    """Per broker: the log's min offset, its logical end (its last records' chain end, or the next segment), totals."""
    bad = {(r.segment[0], r.start) for _, r in rejected}
    ends: dict[str, int] = {}
    for s in splits:
        if (s["broker"], s["split_start"]) not in bad:
            ends[s["broker"]] = max(ends.get(s["broker"], 0), s["exit_offset"])
    rows = []
    for b in scan.inputs:
        min_offset, t = b.segments[0].base_offset if b.segments else 0, totals.get(b.broker, {})
        rows.append({"broker": b.broker, "segments": len(b.segments), "splits": sum(1 for task in scan.tasks if task.broker == b.broker),
                     "rejected_splits": sum(1 for _, r in rejected if r.segment[0] == b.broker),
                     "min_offset": min_offset, "max_offset": _past_blank(b, ends.get(b.broker, min_offset)),
                     **{k: t.get(k) or 0 for k in ("messages", "bytes", "crc_failures")},
                     **{k: t.get(k) for k in ("first_store_timestamp", "last_store_timestamp")}})
    return rows


def _past_blank(b: BrokerInput, end: int) -> int:
    """A chain that ends on a blank record continues in the next segment (``CommitLog.scan``)."""
    from ..formats.commitlog import BLANK_MAGIC
    from ..store.dledger import commitlog_of

    with closing(commitlog_of(list(b.segments), b.file_size)) as cl:  # 8 bytes read in the segment holding ``end``, or fewer
        nxt = cl.next_segment(end)
        blank = nxt is not None and int.from_bytes(cl.read_bytes(end, 8)[4:], "big", signed=True) == BLANK_MAGIC
    return nxt if blank else end


FINDING_COLUMNS = tuple((name, "bigint" if name == "offset" else "string") for name in ("broker", *FINDING_FIELDS))


def run_verify(scan: Scan, out: Output) -> dict:
    """``mqtool verify``'s commit log check per broker: a Spark task per segment, stitched on the driver."""
    from ..verify.commitlog import CommitLogCheck
    from ..store.nextstart import next_start, scan_start_offset

    rows, brokers = [], []
    for b in scan.inputs:
        store = broker_store(b, scan.config)
        if store.is_dledger:
            from ..verify.dledger import DLedgerLogCheck  # DLedger modules: only for a DLedger store, as `mqtool verify` does

            check = DLedgerLogCheck(store, keep_going=scan.o.keep_going)
        else:  # where the broker's next start scans from: asked only at damage, computed once
            unread_before = functools.cache(functools.partial(scan_start_offset, store))
            check = CommitLogCheck(store, keep_going=scan.o.keep_going, unread_before=unread_before)
        tasks = check.tasks()
        findings = list(check.run(scan.spark.sparkContext.parallelize(tasks, len(tasks)).map(check.analyze).collect() if tasks else []))
        for f in findings:
            d = f.as_dict()
            text = {k: None if d[k] is None else str(d[k]) for k in ("expected", "found")}
            rows.append({**d, "broker": b.broker, **text, "details": json.dumps(d["details"], ensure_ascii=False)})
        r = check.result
        for note in check.notes:
            print(f"mqtool-scan: {b.broker}: {note}", file=sys.stderr)
        # the end as `mqtool verify` says it: where the broker's next start ends the log (its CRC check
        # included), from the check's own walk (``Verification._settle_next_start``)
        walked_from, end = (None if store.is_dledger else check.broker_walk(store.config.check_crc_on_recover)) or (None, None)
        start = next_start(store, end, walked_from)
        logical_end, end_reason = start.reported_end(end)
        brokers.append({"broker": b.broker, "records": r.records, "logical_end": logical_end, "end_reason": end_reason, "findings": len(findings), "notes": check.notes})
    target = out.write_table(pa.Table.from_pylist(rows, schema=arrow_schema(FINDING_COLUMNS)), "findings")
    print_table("findings", rows, ["broker", "severity", "kind", "offset", "file"])
    print_table("brokers", brokers, ["broker", "records", "logical_end", "end_reason", "findings"])
    unsound = any(row["severity"] in ("error", "warning") for row in rows)
    return {"findings": target, "count": len(rows), "brokers": brokers, "unsound": unsound, "rejected": []}


# ---- reporting -----------------------------------------------------------------------------------


def print_table(title: str, rows: list[dict], columns: Sequence[str], *, optional: Sequence[str] = ()) -> None:
    """``rows`` laid out as ``mqtool``'s tables (``mqtool.table``), at most ``PRINT_ROWS`` of them."""
    width = shutil.get_terminal_size().columns  # COLUMNS, else the terminal, else 80
    heading = {c: c.replace("_", " ") for c in columns}
    table = Table([heading[c] for c in columns], title=title, optional=[heading[c] for c in optional])
    for r in rows[:PRINT_ROWS]:
        table.add_row(*(_cell(r.get(c)) for c in columns))
    layout = table.layout(width)
    if layout.dropped:
        print(f"mqtool-scan: {title}: not shown at {width} columns: {', '.join(layout.dropped)} (every column is in the output)", file=sys.stderr)
    sys.stdout.write("\n".join([title, *table.render(layout, width=width)]) + "\n")
    if len(rows) > PRINT_ROWS:
        sys.stdout.write("... more rows in the output\n")
    sys.stdout.write("\n")


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, datetime):
        return v.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" if v.tzinfo else v.isoformat(timespec="milliseconds")
    return str(v)


def report(scan: Scan, out: Output, mode: str, result: dict, elapsed: float) -> dict:
    rejected = result.pop("rejected")
    doc = {
        "mode": mode, "format": out.fmt, "output": out.root,
        "brokers": [{"broker": b.broker, "paths": list(b.paths), "version": b.version, "segments": len(b.segments), "bytes": b.bytes} for b in scan.inputs],
        "split_size": scan.split_size, "splits": len(scan.tasks),
        "rejected_splits": [{"broker": r.segment[0], "segment": r.segment[1], "split_start": r.start, "first_offset": r.first,
                             "expected_offset": r.expected, "reason": r.reason, "partition": i} for i, r in rejected],
        "damage": [{"broker": d.segment[0], "offset": d.end.offset, "reason": d.end.reason, "detail": d.end.detail, "resumed": d.resumed,
                    "message": line} for d, line in damage_lines(scan)],
        **result, "elapsed_s": round(elapsed, 3),
    }
    out.write_text("report.json", json.dumps(doc, indent=2) + "\n")
    for d in doc["damage"]:
        print(f"mqtool-scan: {d['broker']}: {d['message']}", file=sys.stderr)
    print_dropped(doc["rejected_splits"])
    return doc


def damage_lines(scan: Scan) -> list[tuple[Damage, str]]:
    """Each range the read skipped and the damage a log stops at, with ``mqtool dump``'s stderr line for it."""
    inputs = {b.broker: b for b in scan.inputs}
    lines = []
    for d in scan.damage:
        b = inputs[d.segment[0]]
        if d.resumed is not None and b.stop is not None and d.resumed >= b.stop:
            if d.end.is_clean:
                continue  # zeros up to the end asked for: where the written data ends, no damage
            d = d._replace(resumed=None)
        if d.resumed is None:
            lines.append((d, d.end.stopped_note(scan.o.keep_going)))
        elif b.served is not None:  # damage a DLedger broker keeps: of an entry whose header alone is broken, the header
            lines.append((d, d.end.skipped_note(record_in_broken_entry(b.served.commitlog, d.end, d.resumed) or d.resumed, kept=KEPT)))
        else:
            unread = b.resume_before is not None and d.end.offset < b.resume_before
            lines.append((d, d.end.skipped_note(d.resumed, b.scan_start if unread else None)))
    return lines


DROPPED_LINES = 20


def print_dropped(rejected: Sequence[dict]) -> None:
    """A stderr line per dropped split, or per broker and reason, at most ``DROPPED_LINES`` (report.json lists all)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rejected:
        groups.setdefault((r["broker"], r["reason"]), []).append(r)
    lines = [f"dropped split {broker}@{splits[0]['split_start']}: {reason}" if len(splits) == 1 else
             f"dropped {len(splits)} splits of {broker}, from {splits[0]['split_start']} to {splits[-1]['split_start']}: {reason}"
             for (broker, reason), splits in groups.items()]
    for line in lines[:DROPPED_LINES]:
        print(f"mqtool-scan: {line}", file=sys.stderr)
    if len(lines) > DROPPED_LINES:
        print(f"mqtool-scan: and {len(lines) - DROPPED_LINES} more dropped splits (report.json lists every one)", file=sys.stderr)


def prepare(o: JobOptions) -> list[BrokerInput]:
    """Every check of the arguments and paths before the JVM starts (``UsageError``, ``BadInput``); the inputs for ``run``."""
    for flag, value, allowed in (("--mode", o.mode, MODES), ("--format", o.format, FORMATS), ("--writer", o.writer, WRITERS)):
        if value not in allowed:
            raise UsageError(f"{flag} {value!r}: expected one of {', '.join(allowed)}")
    if o.mode == "verify" and (given := [f"--{n}" for n in SCAN_OPTIONS if getattr(o, "topics" if n == "topic" else n.replace("-", "_")) not in (None, [])]):
        raise UsageError(f"{', '.join(given)}: --mode verify checks whole segments, every record")
    if o.split_size:
        parse_size(o.split_size)
    if o.queue is not None and o.queue < 0:
        raise UsageError(f"--queue {o.queue}: a queue id is 0 or more")
    for flag, value in (("--from-offset", o.from_offset), ("--to-offset", o.to_offset)):
        if value is not None and value < 0:
            raise UsageError(f"Invalid value for '{flag}': Input should be greater than or equal to 0")  # dump's words
    check_offset_range(o.from_offset, o.to_offset, o.msg_id)
    start, stop = o.offset_range()  # a --msg-id that is no offsetMsgId: a usage error
    if o.since is not None and o.until is not None and o.since > o.until:
        raise UsageError("--since is after --until")
    for version in o.broker_versions:  # not a release: a usage error, as for every mqtool command
        try:
            BrokerVersion.parse(version)
        except UnknownStoreVersion as exc:
            raise UsageError(f"--broker-version: {exc}") from None
    inputs = resolve_inputs(o.paths, o.broker_names or None, broker_config=o.broker_config, broker_versions=o.broker_versions or None,
                            from_offset=start, to_offset=stop)
    if o.keep_going and o.mode != "verify" and any(s.entries for b in inputs for s in b.segments):
        raise UsageError("--keep-going: not past damage in DLedger data files here; `mqtool dump --keep-going` reads past it")
    check_output(o.output)
    return inputs


def check_output(root: str) -> None:
    """A local ``--output`` that cannot be a writable directory is bad input (exit 3), before the JVM starts."""
    if not root or "://" in root:
        return
    path = Path(os.path.abspath(root))
    if path.exists() and not path.is_dir():
        raise BadInput(f"--output {root}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--output {root}: cannot create it: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise BadInput(f"--output {root}: cannot write in it")


def run(o: JobOptions, spark: SparkSession | None = None, inputs: list[BrokerInput] | None = None) -> dict:
    """Run one mode end to end (``inputs``: from ``prepare``, else resolved here); returns the report (also report.json)."""
    inputs = prepare(o) if inputs is None else inputs
    started = time.monotonic()
    spark = spark or session()
    spark.dataSource.register(RocketMQDataSource)
    scan = Scan(spark, o, inputs)
    for broker, why in scan.msg_id_past_end.items():
        print(f"mqtool-scan: {broker}: {why}", file=sys.stderr)
    for b in inputs:
        if o.from_offset is not None and b.start is not None and b.segments and (moved := record_start_note(o.from_offset, b.start, b.segments[0].base_offset)):
            print(f"mqtool-scan: {b.broker}: {moved}", file=sys.stderr)
    out = Output(spark, o.output, o.format)
    result = {"messages": run_messages, "stats": run_stats, "verify": run_verify}[o.mode](scan, out)
    doc = report(scan, out, o.mode, result, time.monotonic() - started)
    size = sum(b.bytes for b in scan.inputs)
    if o.mode == "verify":
        what = f"{sum(len(b.segments) for b in scan.inputs)} segments, {size} bytes in all, {doc['count']} findings"
    else:
        what = f"{len(scan.tasks)} splits, {size} bytes in all, {len(doc['rejected_splits'])} dropped"
    print(f"mqtool-scan: {o.mode}: {what}; output in {out.root}", file=sys.stderr)
    return doc


def error_line(exc: BaseException) -> str:
    """One line for a Spark failure: the Python error inside it, else the message's first line."""
    text = str(exc).strip()
    python_errors = re.findall(r"^(\w+(?:Error|Exception)(?::.*)?)$", text, re.MULTILINE)
    if python_errors:
        return python_errors[-1].strip()
    return text.splitlines()[0] if text else type(exc).__name__


def prepare_args(args) -> tuple[JobOptions, list[BrokerInput]] | int:
    """``prepare`` from parsed arguments: options and inputs, or the exit code of the stderr line printed (2, 3)."""
    try:
        o = JobOptions.from_args(args)
        return o, prepare(o)
    except MqtoolError as exc:
        print(f"mqtool-scan: error: {exc}", file=sys.stderr)
        return exc.exit_code


def main(args, prepared: tuple[JobOptions, list[BrokerInput]] | None = None) -> int:
    """Run from parsed arguments; every failure one stderr line and an exit code (2, 3, 5; verify: 1 on findings)."""
    prepared = prepare_args(args) if prepared is None else prepared
    if isinstance(prepared, int):
        return prepared
    o, inputs = prepared
    try:
        doc = run(o, inputs=inputs)
    except MqtoolError as exc:
        print(f"mqtool-scan: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - the edge of the program: Py4J and Spark errors
        if getattr(args, "debug", False):
            raise
        print(f"mqtool-scan: error: {type(exc).__name__}: {error_line(exc)} (--debug shows the whole error)", file=sys.stderr)
        return EXIT_INTERNAL
    if o.msg_id is not None and not doc["rows_written" if o.mode == "messages" else "messages"]:
        print(f"mqtool-scan: no message has --msg-id {o.msg_id}", file=sys.stderr)
        return EXIT_FINDINGS  # as `mqtool dump --msg-id`
    return EXIT_FINDINGS if doc.get("unsound") else 0
