"""``mqtool info STORE``: the store at a glance, like ``pg_controldata``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from ..store import Store
from ..store.summary import store_summary
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, guarded, open_store, shell_path
from .output import OutputFormat, Screen, emit_document, iso_ms, kv_table, titled_table
from .store_state import warn_store_state


def era_rows(version: dict[str, Any]) -> list[tuple[str, str]]:
    """The era with what sets it apart, or the rules that still differ between the candidate eras."""
    eras = version["eras"]
    if len(eras) == 1:
        return [("era", f"{eras[0]['era']} ({eras[0]['releases']}): {eras[0]['distinct']}")]
    if not version["candidates"]:
        return []
    differ = ", ".join(version["deciding_rules"]) or "none"
    return [("undecided", f"plans under {', '.join(version['candidates'])} (rules that differ: {differ}); --broker-version decides")]


def render_info(console: Screen, doc: dict[str, Any]) -> None:
    """The info document as tables, one per part of the store, then the notes."""
    unread, cp, cl, dl, index = doc.get("not_looked_at"), doc["checkpoint"], doc["commitlog"], doc.get("dledger"), doc["index"]
    console.print(_store_table(doc, unread))
    if cp:
        console.print(kv_table("Checkpoint", [
            *((name, checkpoint_value(field, cp[field])) for field, name in CHECKPOINT_NAMES.items()),
            ("recovery bound (min - 3 s)", iso_ms(cp["min_timestamp"])), ("bytes used", cp["used_bytes"]),
        ]))
    elif doc.get("checkpoint_file") and not unread:
        console.print(kv_table("Checkpoint", [("file", doc["checkpoint_file"])]))
    console.print(kv_table("Commit log", [
        ("segment size", cl["file_size"]),
        ("segments", f"{len(cl['segments'])}: " + ", ".join(s["name"] for s in cl["segments"][:6]) + (" ..." if len(cl["segments"]) > 6 else "")),
        ("min offset", cl["min_offset"]), ("max offset", f"{cl['max_offset']} ({cl['end_reason']}; scanned from {cl['scan_from']})"),
        *([("next start", doc["next_start"]["line"])] if doc.get("next_start") else []),
    ]))
    if dl:
        console.print(kv_table(f"DLedger member {dl['self_id']}", [
            ("folder", dl["home"]),
            ("data files", f"{dl['data_files']} x {dl['data_file_size']} bytes" + (f" (classic commit log below {dl['divided_offset']})" if dl["divided_offset"] else "")),
            ("entries", f"{dl['entries']}: index {dl['first_index']}..{dl['last_index']}, last term {dl['last_term']}"),
            ("entry walk end", f"{dl['end_offset']} ({dl['end_reason']})"),
            ("checkpoint", f"committedIndex {dl['committed_index']} " + (f"(ends at {dl['committed_pos']}: the commit log max right after load)"
                           if dl["committed_pos"] is not None else "(DLedger takes no committed position from it: updateCommittedIndex)")
             + f", endIndex {dl['end_index']}"),
            ("currterm", f"currTerm {dl['current_term']}, voteLeader {dl['vote_leader']}"),
            ("index", f"{dl['index_units']} units in {dl['index_files']} file(s) of {dl['index_file_size']} bytes"),
        ]))
    _print_queues(console, doc, unread)
    if index:
        rows = [(f["name"], iso_ms(f["begin_timestamp"]), iso_ms(f["end_timestamp"]), f"{f['begin_phy_offset']}..{f['end_phy_offset']}",
                 str(f["entries"]), str(f["hash_slot_count"])) for f in index["files"]]
        console.print(titled_table(f"Index files (maxHashSlotNum {index['hash_slot_num']}, maxIndexNum {index['index_num']})",
                                   ("file", "begin", "end", "phy offsets", "entries", "slots used"), optional=("slots used", "begin"), rows=rows))
    if doc.get("timer"):
        render_timer(console, doc["timer"])
    for n in doc["notes"]:
        console.print(f"note: {n}", markup=False)


def _store_table(doc: dict[str, Any], unread):
    abort, holder = doc["abort_file"], doc.get("lock_holder")
    lock = "present" if holder is None else f"present, HELD by pid {holder} (a running broker?)"
    if not doc["lock_file"]:
        lock = ("a directory (see verify)" if doc.get("lock_directory") else "a FIFO, socket or device node" if doc.get("lock_special") else "absent")
    return kv_table("Store", [
        ("path", shell_path(doc["store"]) if doc["store"] else ", ".join(map(shell_path, (doc.get("commitlog") or {}).get("dirs") or ["-"]))),
        ("broker version", doc["version"]["label"]),
        *era_rows(doc["version"]),
        ("evidence", "; ".join(doc["version"]["evidence"])),
        *([("not looked at", f"{', '.join(unread)}: {NOT_A_ROOT}")] if unread else [
            ("abort file", "absent (last shutdown clean)" if abort is None else f"PRESENT (pid {abort['pid']})" if abort["pid"]
             else "PRESENT (a directory: see verify)" if abort["directory"]
             else "PRESENT (a FIFO, socket or device node: see verify)" if abort.get("special") else "PRESENT"),
            ("lock file", lock),
        ]),
        *([("interrupted apply", f"backup {shell_path(doc['interrupted_apply'])} (see the note on stderr)")] if doc.get("interrupted_apply") else []),
        *([("interrupted repair", f"backup {shell_path(doc['interrupted_repair']['backup'])} (see the note on stderr)")] if doc.get("interrupted_repair") else []),
        *([("mqtool leftovers", ", ".join(doc["leftover_files"]))] if doc.get("leftover_files") else []),
    ])


# the checkpoint's fields under the broker's names (StoreCheckpoint), as every table shows them
CHECKPOINT_NAMES = {"physic_msg_timestamp": "physicMsgTimestamp", "logics_msg_timestamp": "logicsMsgTimestamp", "index_msg_timestamp": "indexMsgTimestamp",
                    "master_flushed_offset": "masterFlushedOffset", "confirm_phy_offset": "confirmPhyOffset"}


def checkpoint_value(field: str, value: int) -> str:
    """A checkpoint field's value as tables show it: a timestamp as a date and its epoch ms."""
    return f"{iso_ms(value)} ({value})" if field.endswith("_timestamp") else str(value)


def _print_queues(console: Screen, doc: dict[str, Any], unread) -> None:
    """The topics, the consume queues and the batch consume queues."""
    from_log = doc.get("topics_source") == "commitlog"
    title = "Topics (from the commit log)" if unread else "Topics (from the commit log: no consume queues)" if from_log else "Topics"
    rows = [(t["messages"], t["queues"], name) for name, t in doc["topics"].items()]
    console.print(titled_table(title, ("messages", "queues", "topic"), rows=rows))  # topic last: a long one runs past the edge
    for part, title, counts in (("queues", "Consume queues", ("files",)), ("batch_queues", "Batch consume queues", ("units", "files"))):
        if doc.get(part):
            rows = [[q[k] for k in ("queue_id", "min_offset", "max_offset", "messages", *counts, "topic")] for q in doc[part]]
            console.print(titled_table(title, ("queue", "min", "max", "messages", *counts, "topic"), rows=rows))
        elif part == "queues" and not unread:
            console.print(kv_table("Consume queues", [("consumequeue/", "MISSING or empty: no queue files")]))


def commitlog_topics(store: Store) -> dict[str, dict[str, int]]:
    """Topics, queue and message counts of the commit log's records up to the logical end (a store without consume queues)."""
    import pyarrow as pa  # only here: info otherwise needs no Arrow

    from ..scan.messages import read_batches

    per_queue: Counter = Counter()
    for batch in read_batches(store, columns=["topic", "queue_id"]):
        grouped = pa.Table.from_batches([batch]).group_by(["topic", "queue_id"]).aggregate([([], "count_all")])
        per_queue.update({(row["topic"], row["queue_id"]): row["count_all"] for row in grouped.to_pylist()})
    topics: dict[str, dict[str, int]] = {}
    for (topic, _), count in sorted(per_queue.items()):
        t = topics.setdefault(topic, {"queues": 0, "messages": 0})
        t["queues"], t["messages"] = t["queues"] + 1, t["messages"] + count
    return topics


NOT_A_ROOT = "given a commit log folder or segment, not the store root"
UNREAD_PARTS = ("abort", "lock", "checkpoint", "consumequeue", "index", "config")


def info_document(store: Store, state: dict[str, Any]) -> dict[str, Any]:
    """``store_summary`` from where the broker's next start scans, with what it keeps and drops (``store.nextstart``,
    ``verify.lmq.with_stall``), the commit log's topics without consume queues, ``state`` and the timer section; a bare commit
    log's other parts are ``not_looked_at``."""
    from ..store.nextstart import next_start, start_of
    from ..store.commitlog import ScanEnd
    from ..verify.lmq import with_stall

    start = start_of(store)
    doc = store_summary(store, None if start is None else start.offset)
    cl = doc["commitlog"]
    found = with_stall(store, next_start(store, ScanEnd(cl["max_offset"], cl["end_reason"]), None if start is None else start.offset))
    doc["next_start"] = None if found is None else found.as_dict()
    doc["topics_source"] = "consumequeue"
    if store.root is None:
        doc["not_looked_at"] = list(UNREAD_PARTS)
    if not doc["queues"]:
        doc["topics"] = commitlog_topics(store)
        doc["topics_source"] = "commitlog"
        if doc["topics"] and store.root is not None:
            doc["notes"].append("no consume queues: topics and message counts are those of the commit log records (rebuild the queues with `mqtool rebuild-cq`)")
    doc |= state
    if store.root is not None and (store.root / "timerlog").is_dir():
        from ..scan.timer import timer_summary  # pyarrow: only for a store with a timer log

        doc["timer"] = timer_summary(store, found)
    return doc


def render_timer(console: Screen, timer: dict[str, Any]) -> None:
    check = timer["timercheck"] or {}
    states = ", ".join(f"{n} {state}" for state, n in timer["states"].items() if n)
    rows = [("timer log units", f"{timer['units']} ({states or 'none'}); log end {timer['log_end']} ({timer['log_end_reason']})")]
    if check:
        rows += [
            ("lastReadTimeMs", f"{iso_ms(check['last_read_time_ms'])} ({check['last_read_time_ms']})"),
            ("lastTimerLogFlushPos", check["last_timer_log_flush_pos"]), ("lastTimerQueueOffset", check["last_timer_queue_offset"]),
            ("masterTimerQueueOffset", check["master_timer_queue_offset"]),
        ]
    else:  # TimerCheckpoint's constructor reads the file only where it exists: every offset 0
        rows.append(("config/timercheck", "missing: the broker reads its offsets as 0 (see verify)"))
    if timer["not_enqueued"] is not None:
        rows.append(("not yet enqueued", f"{timer['not_enqueued']} (rmq_sys_wheel_timer queue ends at {timer['queue_max_offset']})"))
    console.print(kv_table("Timer store", rows))
    if timer["next_deliveries"]:
        rows = [(iso_ms(d["delivery_time"]), str(d["real_queue_id"]), d["offset"], d["state"], str(d["real_topic"])) for d in timer["next_deliveries"]]
        console.print(titled_table("Next timer deliveries", ("delivery time", "queue", "offset", "state", "topic"), optional=("state",), rows=rows))  # topic last: a long one runs past the edge
    if timer["backlog_by_hour"]:
        rows = [(iso_ms(b["hour"]), b["messages"]) for b in timer["backlog_by_hour"]]
        console.print(titled_table("Timer backlog by hour (UTC)", ("hour", "messages"), rows=rows))


@guarded
def info(
    store_path: Annotated[Path, typer.Argument(metavar="STORE", help="Store root directory (or a commitlog folder or segment).")],
    broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
    format: FormatOpt = OutputFormat.table,
) -> None:
    """Show what a store holds: version, checkpoint, commit log range, topics, queues, index files.

    Without consume queues, the topics and their message counts come from the commit log.

    \b
    Example:
      mqtool info /data/rocketmq/store
    """
    with open_store(store_path, broker_config, broker_version) as store:
        state = warn_store_state(store.root)[0]  # said before the store is read
        doc = info_document(store, state)
        emit_document(doc, format, render_info)
