"""The ``rocketmq`` data source's columns as a Spark DDL string and the equal Arrow schema; no pyspark."""

from __future__ import annotations

import pyarrow as pa

from ..store.records import MESSAGE_FIELDS
from .stats import BASE_AGGREGATES

TIMESTAMP = pa.timestamp("us", tz="UTC")
_TYPES = {
    "bigint": pa.int64(), "int": pa.int32(), "boolean": pa.bool_(), "string": pa.string(), "timestamp": TIMESTAMP,
    "array<string>": pa.list_(pa.field("element", pa.string())), "array<bigint>": pa.list_(pa.field("element", pa.int64())),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
}

# the Spark type of each of ``mqtool dump``'s fields; their order is ``mqtool.store.records.MESSAGE_FIELDS``
_DUMP_FIELDS_BY_KIND = {
    "bigint": ("offset", "phys_offset", "queue_offset", "born_timestamp", "store_timestamp", "prepared_transaction_offset", "tags_code"),
    "int": ("size", "magic_version", "body_crc", "queue_id", "flag", "sys_flag", "reconsume_times", "body_length"), "boolean": ("crc_ok",),
    "string": ("born_host", "store_host", "topic", "tags", "uniq_key", "msg_id", "transaction_type", "body"),
    "array<string>": ("sys_flag_names", "keys"), "map<string,string>": ("properties",),
}
_DUMP_FIELD_KIND = {name: kind for kind, names in _DUMP_FIELDS_BY_KIND.items() for name in names}
assert len(_DUMP_FIELD_KIND) == len(MESSAGE_FIELDS), "every field of mqtool.store.records has one Spark type"

MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    *((name, _DUMP_FIELD_KIND[name]) for name in MESSAGE_FIELDS),
    ("born_time", "timestamp"),  # born_timestamp as a TIMESTAMP (UTC)
    ("store_time", "timestamp"),  # store_timestamp as a TIMESTAMP (UTC)
    ("split_start", "bigint"),  # absolute offset where the split that read the row starts
    ("split_edge", "boolean"),  # the first or last record its split read (the handoff check)
    ("split_skipped", "array<bigint>"),  # on its last record: the split's ``skipped`` (below), else null
    ("filtered_out", "boolean"),  # the filters given drop the row (``MessageFilter``): kept, so the split check sees every row
)

_SPLIT_COLUMNS: tuple[tuple[str, str], ...] = (  # the split a row of ``stats`` or ``output=parquet`` is about
    ("broker", "string"),
    ("split_start", "bigint"),
    ("first_offset", "bigint"),  # the split's first record, and the offset after its last one:
    ("exit_offset", "bigint"),  # the handoff check's inputs (for every row of the split)
    ("skipped", "array<bigint>"),  # damage the split read past (``SplitScan.skipped``): where each range begins, where it resumes
)

STATS_COLUMNS: tuple[tuple[str, str], ...] = (
    *_SPLIT_COLUMNS,
    ("topic", "string"),
    ("queue_id", "int"),
    ("hour", "timestamp"),  # the UTC hour of store time
    *((out, "bigint") for out, _, _ in BASE_AGGREGATES),  # messages, dispatched, bytes, ...: as ``mqtool stats``
)

WRITTEN_COLUMNS: tuple[tuple[str, str], ...] = (  # ``output=parquet``: one row per split read
    *_SPLIT_COLUMNS,
    ("rows_read", "bigint"),
    ("rows_written", "bigint"),  # the rows the filters kept, in ``file``
    ("file", "string"),  # the Parquet file the task wrote (null when no row was kept)
)


def ddl(columns) -> str:
    """Spark DDL of the columns, every one nullable (as the Arrow schema below)."""
    return ", ".join(f"`{name}` {kind}" for name, kind in columns)


def arrow_schema(columns) -> pa.Schema:
    return pa.schema([pa.field(name, _TYPES[kind]) for name, kind in columns])


MESSAGE_SCHEMA = arrow_schema(MESSAGE_COLUMNS)
STATS_SCHEMA = arrow_schema(STATS_COLUMNS)
WRITTEN_SCHEMA = arrow_schema(WRITTEN_COLUMNS)
SPLIT_CHECK_COLUMNS = ("split_edge", "split_skipped", "filtered_out")  # what the split check reads, never written
MESSAGE_FILE_SCHEMA = arrow_schema([c for c in MESSAGE_COLUMNS if c[0] not in SPLIT_CHECK_COLUMNS])  # a written file's columns
