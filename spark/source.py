"""``spark.read.format("rocketmq")`` (``RocketMQDataSource``): commit logs as a DataFrame (docs/spark.md)."""

from __future__ import annotations

import json
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from ..store.records import BodyEncoding
from ..store.splits import parse_size
from ..scan.batches import projected_schema
from .inputs import resolve_inputs
from ..scan.filter import MessageFilter
from .reader import plan_tasks, read_messages, read_stats, write_messages
from ..scan.schema import MESSAGE_COLUMNS, STATS_COLUMNS, WRITTEN_COLUMNS, ddl

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
        self.output = options.get("output", "messages")
        if self.output not in ("messages", "stats", "parquet"):
            raise ValueError(f"option output={self.output!r}: expected messages, stats or parquet")
        self.directory = options.get("directory")
        if self.output == "parquet" and not self.directory:
            raise ValueError("option output=parquet needs the option directory")
        self.compression = options.get("compression", "snappy")
        number = lambda name: int(options[name]) if options.get(name) not in (None, "") else None  # noqa: E731
        self.from_offset, self.to_offset = number("fromOffset"), number("toOffset")
        self.keep_going = str(options.get("keepGoing", "false")).lower() == "true"
        self.filter = MessageFilter(topics=tuple(_list_option(options, "topics") or ()), queue=number("queue"), since=number("since"),
                                    until=number("until"), tag=options.get("tag"), key=options.get("key"), uniq_key=options.get("uniqKey"),
                                    msg_id=options.get("msgId"))


class RocketMQDataSource(DataSource):
    """RocketMQ commit log messages, a row each (``schema.MESSAGE_COLUMNS``), or per split aggregates (``output=stats``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        o = ScanOptions(self.options)
        if o.output == "stats":
            return ddl(STATS_COLUMNS)
        if o.output == "parquet":
            return ddl(WRITTEN_COLUMNS)
        return ddl([c for c in MESSAGE_COLUMNS if o.columns is None or c[0] in o.columns])

    def reader(self, schema) -> "RocketMQReader":
        return RocketMQReader(ScanOptions(self.options))


class RocketMQReader(DataSourceReader):
    def __init__(self, options: ScanOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        o = self.options
        inputs = resolve_inputs(o.paths, o.broker_names, broker_config=o.broker_config, broker_versions=o.broker_versions,
                                from_offset=o.from_offset, to_offset=o.to_offset)
        return [InputPartition(task) for task in plan_tasks(inputs, o.split_size, o.keep_going)]

    def read(self, partition: InputPartition) -> Iterator:
        task = partition.value
        if task is None:  # Spark's placeholder when there is nothing to read
            return
        o = self.options
        if o.output == "stats":
            yield from read_stats(task, o.filter)
        elif o.output == "parquet":
            yield from write_messages(task, o.directory, o.body, o.filter, o.compression)
        else:
            yield from read_messages(task, o.body, columns=o.columns, match=o.filter)
