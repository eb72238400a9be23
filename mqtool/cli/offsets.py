"""``mqtool offsets STORE``: consumer groups' committed offsets, delay levels' and the 5.x timer's
progress, against the queues as the broker loads them (``mqtool/store/offsets.py``).

Exit 0 when every committed offset lies in its queue's range, 1 when one is beyond max, below min
or names a queue that is gone, 3 on bad input.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_FINDINGS
from ..store import offsets as progress
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, guarded, note, open_store
from .output import OutputFormat, emit_rows

TABLE = ("kind", "group", "delay_level", "topic", "queue_id", "offset", "relation", "queue_min_offset", "queue_max_offset", "lag_messages", "lag_bytes", "next_store_timestamp")
FINDINGS = {
    progress.BEYOND_MAX: "beyond the queue's max offset: the broker answers OFFSET_OVERFLOW; the consumer resets or skips what is written meanwhile",
    progress.BELOW_MIN: "below the queue's min offset: the messages in between expired before they were consumed",
    progress.NO_QUEUE: "the topic or queue is no longer in the store",
}


@guarded
def offsets(
    store: Annotated[Path, typer.Argument(help="The store directory (broker stopped).")],
    group: Annotated[Optional[list[str]], typer.Option("--group", "-g", help="Only this consumer group (repeatable).")] = None,
    format: FormatOpt = OutputFormat.table,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = None,
) -> None:
    """Committed offsets (consumerOffset.json), delay levels (delayOffset.json) and 5.x timercheck: range, lag, findings.

    Example: mqtool offsets /data/rocketmq/store --group order_consumer_group
    """
    with open_store(store, broker_config, broker_version) as s:
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
        for r in bad:
            who = f"group {r['group']}" if r["group"] else f"delay level {r.get('delay_level')}" if r["kind"] == "delay" else r["kind"]
            moved = f" (the broker moves it to {r['loaded_offset']} on load)" if r.get("loaded_offset") not in (None, r["offset"]) else ""
            note(f"{who} on {r['topic']}/{r['queue_id']} at offset {r['offset']}: {FINDINGS[r['relation']]}{moved}")
        emit_rows(rows, format, progress.FIELDS, TABLE)
        if bad:
            raise typer.Exit(EXIT_FINDINGS)
