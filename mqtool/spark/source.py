"""``spark.read.format("rocketmq")``: RocketMQ commit logs as a Spark DataFrame (PySpark 4 Python
Data Source API), read by the same compiled walk as every mqtool command.

    from mqtool.spark.source import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)
    df = spark.read.format("rocketmq").load("/data/broker-a/store")          # or .load([p1, p2])

Options (all optional): ``brokerName`` / ``brokerNames`` (JSON list or comma-separated, one per
path), ``brokerVersion`` / ``brokerVersions``, ``brokerConfig`` (a broker.conf), ``splitSize``
(e.g. ``256m``; default one partition per segment), ``body`` (none|utf8|hex|base64|sha256),
``columns`` (comma-separated: only these columns are decoded and yielded; the Python data source
API does not prune columns by itself).

With one partition per segment every row is exact. Smaller splits resynchronise inside segments
and may pick up stale records after a segment's logical end: every row carries ``split_start``
and ``split_edge`` for the handoff check that ``spark/mqtool_scan.py`` runs, and
``mqtool.spark.job.checked_messages`` gives notebooks the checked DataFrame.

``schema()`` and ``partitions()`` run in short-lived Python processes on the driver host,
``read()`` in executor Python workers: the ``mqtool`` package must be importable in both
(``--py-files mqtool.zip``).
"""

from __future__ import annotations

import json
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..records import BodyEncoding
from ..store.splits import parse_size
from .batches import projected_schema
from .inputs import resolve_inputs
from .reader import plan_tasks, read_messages
from .schema import MESSAGE_COLUMNS, ddl

FORMAT = "rocketmq"


def _list_option(options, *names: str) -> list[str | None] | None:
    """A list option given as a JSON array or a comma-separated string (first name found)."""
    for name in names:
        value = options.get(name)
        if value is None:
            continue
        text = str(value).strip()
        if text.startswith("["):
            return [None if v is None else str(v) for v in json.loads(text)]
        return [v.strip() for v in text.split(",") if v.strip()]
    return None


class ScanOptions:
    """The data source options, parsed once (the same on the driver and in executors)."""

    def __init__(self, options):
        self.paths = _list_option(options, "paths") or _list_option(options, "path") or []
        self.broker_names = _list_option(options, "brokerNames", "brokerName")
        self.broker_versions = _list_option(options, "brokerVersions", "brokerVersion")
        self.broker_config = options.get("brokerConfig")
        split = options.get("splitSize")
        self.split_size = parse_size(split) if split else None
        self.body = BodyEncoding(options.get("body", "none"))
        self.columns = _list_option(options, "columns")
        projected_schema(self.columns)  # refuse unknown names on the driver


class RocketMQDataSource(DataSource):
    """RocketMQ commit log messages, one row each (``mqtool.spark.schema.MESSAGE_COLUMNS``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        columns = ScanOptions(self.options).columns
        return ddl([c for c in MESSAGE_COLUMNS if columns is None or c[0] in columns])

    def reader(self, schema) -> "RocketMQReader":
        return RocketMQReader(ScanOptions(self.options))


class RocketMQReader(DataSourceReader):
    def __init__(self, options: ScanOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        o = self.options
        inputs = resolve_inputs(o.paths, o.broker_names, broker_config=o.broker_config, broker_versions=o.broker_versions)
        return [InputPartition(task) for task in plan_tasks(inputs, o.split_size)]

    def read(self, partition: InputPartition) -> Iterator:
        task = partition.value
        if task is None:  # Spark's placeholder when there is nothing to read
            return
        yield from read_messages(task, self.options.body, columns=self.options.columns)
