"""The columns the ``rocketmq`` data source yields, as a Spark DDL string and the equal Arrow schema.

``stats`` rows are one split's messages aggregated in the reader (``reader.read_stats``).
``messages`` rows carry every field of ``mqtool dump``'s JSON object (``mqtool.store.records``), with
the same names and meanings, plus ``broker``, the two timestamps as Spark TIMESTAMPs, and the
split tag. Python's data source API passes Arrow batches through only when their schema equals
``to_arrow_schema`` of the declared one exactly (nullability included), so both are built here
from one table and a test holds them equal. Imports pyarrow, not pyspark.
"""

from __future__ import annotations

import pyarrow as pa

from ..store.records import MESSAGE_FIELDS

TIMESTAMP = pa.timestamp("us", tz="UTC")
_TYPES = {
    "bigint": pa.int64(),
    "int": pa.int32(),
    "boolean": pa.bool_(),
    "string": pa.string(),
    "timestamp": TIMESTAMP,
    "array<string>": pa.list_(pa.field("element", pa.string())),
    "map<string,string>": pa.map_(pa.string(), pa.string()),
}

_DUMP_FIELD_TYPES = {
    "offset": "bigint",
    "phys_offset": "bigint",
    "size": "int",
    "magic_version": "int",
    "body_crc": "int",
    "crc_ok": "boolean",
    "queue_id": "int",
    "flag": "int",
    "queue_offset": "bigint",
    "sys_flag": "int",
    "sys_flag_names": "array<string>",
    "born_timestamp": "bigint",
    "born_host": "string",
    "store_timestamp": "bigint",
    "store_host": "string",
    "reconsume_times": "int",
    "prepared_transaction_offset": "bigint",
    "body_length": "int",
    "topic": "string",
    "properties": "map<string,string>",
    "tags": "string",
    "keys": "array<string>",
    "uniq_key": "string",
    "msg_id": "string",
    "transaction_type": "string",
    "tags_code": "bigint",
    "body": "string",
}
assert tuple(_DUMP_FIELD_TYPES) == MESSAGE_FIELDS, "the Spark columns must follow mqtool.store.records"

MESSAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    *_DUMP_FIELD_TYPES.items(),
    ("born_time", "timestamp"),  # born_timestamp as a TIMESTAMP (UTC)
    ("store_time", "timestamp"),  # store_timestamp as a TIMESTAMP (UTC)
    ("split_start", "bigint"),  # absolute offset where the split that read the row starts
    ("split_edge", "boolean"),  # the first or last record its split read (the handoff check)
)

STATS_COLUMNS: tuple[tuple[str, str], ...] = (
    ("broker", "string"),
    ("split_start", "bigint"),
    ("first_offset", "bigint"),  # the split's first record, and the offset after its last one:
    ("exit_offset", "bigint"),  # the handoff check's inputs (for every row of the split)
    ("topic", "string"),
    ("queue_id", "int"),
    ("hour", "timestamp"),  # the UTC hour of store time
    ("messages", "bigint"),
    ("dispatched", "bigint"),  # NOT_TYPE and COMMIT records: the ones the consume queue holds
    ("bytes", "bigint"),
    ("body_bytes", "bigint"),
    ("crc_failures", "bigint"),
    ("first_store_timestamp", "bigint"),
    ("last_store_timestamp", "bigint"),
    ("min_queue_offset", "bigint"),  # of dispatched records
    ("max_queue_offset", "bigint"),
)


WRITTEN_COLUMNS: tuple[tuple[str, str], ...] = (  # ``output=parquet``: one row per split read
    ("broker", "string"),
    ("split_start", "bigint"),
    ("first_offset", "bigint"),  # the handoff check's inputs, as in STATS_COLUMNS
    ("exit_offset", "bigint"),
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
MESSAGE_FILE_SCHEMA = arrow_schema([c for c in MESSAGE_COLUMNS if c[0] != "split_edge"])  # a written file's columns
