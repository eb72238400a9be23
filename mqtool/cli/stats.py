"""``mqtool stats STORE``: what is in the store, per topic and queue, and with ``--by`` per period (``scan/stats.py``)."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, ProgressOpt, guarded, note, open_store, read_on
from .output import OutputFormat, emit_rows
from .progress import ByteProgress


Period = enum.Enum("Period", {p: p for p in ("minute", "hour", "day")}, type=str)  # --by: scan.stats.PERIODS' keys


# topic last: a long one runs past the edge whole; the least important columns are left out first at a narrow width
QUEUE_TABLE = ("queue_id", "messages", "bytes", "first_store_time", "last_store_time", "delay_median_ms", "prepared", "rollback", "compressed", "crc_failures", "topic")
QUEUE_TABLE_OPTIONAL = ("crc_failures", "compressed", "rollback", "prepared", "delay_median_ms", "first_store_time")
PERIOD_TABLE = ("period_start_time", "messages", "bytes", "topic")


@guarded
def stats(
    store: Annotated[Path, typer.Argument(metavar="STORE", help="The store directory (broker stopped).")],
    topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", metavar="TOPIC", help="Only this topic (repeatable).")] = None,
    by: Annotated[Optional[Period], typer.Option("--by", help="Also volumes per topic and minute, hour or day of store time.")] = None,
    format: FormatOpt = OutputFormat.table,
    progress: ProgressOpt = None, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """Per topic and queue: messages, bytes, store times, born-to-store delay, transaction types, delayed, compressed, retry and DLQ topics.

    Example: mqtool stats /data/rocketmq/store --topic TopicTest --by hour
    """
    with open_store(store, broker_config, broker_version) as s:
        from ..scan.stats import PERIOD_FIELDS, PERIODS, QUEUE_FIELDS, collect, period_rows, queue_rows

        start, stop = s.commitlog.min_offset, s.commitlog.end_of_writes()
        with ByteProgress(start, stop, enabled=progress, desc="stats") as bar:
            result = collect(s, PERIODS[by.value] if by else PERIODS["hour"], progress=bar.advance, read_on=lambda end: read_on(s, end, None))
        end = result.end
        if end is not None and not end.is_clean:
            note(f"the records end at offset {end.offset}: {end.reason}: {end.detail} (the broker would cut the log here)")
        rows = queue_rows(result, topic)
        missing = sorted(set(topic or ()) - {r["topic"] for r in rows})
        if missing:
            note(f"no records of topic {', '.join(missing)}")
        periods = period_rows(result, by.value, topic) if by else []
        if format is OutputFormat.table:
            emit_rows(rows, format, QUEUE_FIELDS, QUEUE_TABLE, title=f"{result.records} records, {len(rows)} queues", optional=QUEUE_TABLE_OPTIONAL)
            if by:
                emit_rows(periods, format, PERIOD_FIELDS, PERIOD_TABLE, title=f"per {by.value}")
        else:
            fields = list(dict.fromkeys([*QUEUE_FIELDS, *PERIOD_FIELDS]))
            emit_rows(iter(rows + periods), format, fields)
