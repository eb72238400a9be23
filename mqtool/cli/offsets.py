"""``mqtool offsets STORE``: committed offsets, delay levels' and the 5.x timer's progress against the
queues as the broker loads them (``store/offsets.py``); exit 1 when one lies outside its queue."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_FINDINGS
from ..store import offsets as progress
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, guarded, note, open_store, verdict_kept
from .output import OutputFormat, emit_rows, iso_ms

# The table's columns (topic last) and the JSON fields they show; "group" names the delay level or the timer there.
TABLE = {"group": None, "queue": "queue_id", "offset": "offset", "relation": "relation", "min": "queue_min_offset", "max": "queue_max_offset",
         "lag": "lag_messages", "lag bytes": "lag_bytes", "next message": "next_store_timestamp", "topic": "topic"}
TABLE_OPTIONAL = ("next message", "lag bytes")
FINDINGS = {
    progress.BEYOND_MAX: "beyond the queue's max offset: the broker answers OFFSET_OVERFLOW; the consumer resets or skips what is written meanwhile",
    progress.BELOW_MIN: "below the queue's min offset: the messages in between expired before they were consumed",
    progress.NO_QUEUE: "the topic or queue is no longer in the store",
}


@guarded
def offsets(
    store: Annotated[Path, typer.Argument(metavar="STORE", help="The store directory (broker stopped).")],
    group: Annotated[Optional[list[str]], typer.Option("--group", "-g", metavar="GROUP", help="Only this consumer group (repeatable).")] = None,
    format: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """Committed offsets (consumerOffset.json), delay levels (delayOffset.json) and 5.x timercheck: range, lag, findings.

    \b
    Example:
      mqtool offsets /data/rocketmq/store --group order_consumer_group
    """
    with open_store(store, broker_config, broker_version) as s:
        s.path()  # config/ and consumequeue/ are the root's: commit log segments alone are refused, not read as holding no offsets
        cache: dict = {}
        consumers, rows = progress.consumer_offsets(s, set(group) if group else None, cache)
        docs = [consumers]
        if not group:
            delays, delay_rows = progress.delay_offsets(s, cache)
            docs.append(delays)
            rows += delay_rows + progress.timer_progress(s, cache)
        for doc in docs:
            if doc.source is None:
                note(f"no readable config/{doc.name} ({'; '.join(doc.notes)})")
            elif doc.notes:
                note(f"{'; '.join(doc.notes)}: read {doc.source} instead, as the broker does")
        if group and not rows:
            note(f"no committed offsets of group {', '.join(group)}")
        bad = [r for r in rows if r["relation"] in FINDINGS]
        with verdict_kept(lambda: bool(bad)):  # `| head` on stdout or stderr: the findings are known already
            for r in bad:
                who = f"group {r['group']}" if r["group"] else f"delay level {r.get('delay_level')}" if r["kind"] == "delay" else r["kind"]
                moved = f" (the broker moves it to {r['loaded_offset']} on load)" if r.get("loaded_offset") not in (None, r["offset"]) else ""
                note(f"{who} on {r['topic']}/{r['queue_id']} at offset {r['offset']}: {FINDINGS[r['relation']]}{moved}")
            if format is OutputFormat.table:
                emit_rows(map(_table_row, rows), format, list(TABLE), optional=TABLE_OPTIONAL, fold=("group",))  # a group name may be longer than a line
            else:
                emit_rows(rows, format, progress.FIELDS)
        if bad:
            raise typer.Exit(EXIT_FINDINGS)


def _table_row(row: dict) -> dict:
    who = row["group"] if row["kind"] == "consumer" else f"delay level {row.get('delay_level')}" if row["kind"] == "delay" else row["kind"]
    shown = {label: row.get(field) for label, field in TABLE.items() if field}
    shown["next message"] = iso_ms(row.get("next_store_timestamp")) if row.get("next_store_timestamp") else None
    return {"group": who, **shown}
