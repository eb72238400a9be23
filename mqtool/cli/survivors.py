"""``mqtool survivors STORE IDS_FILE``: which of these messages survived, and can a consumer get them
(each id's status: ``mqtool.scan.survivors``)."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from ..errors import EXIT_FINDINGS, BadInput, UsageError
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, ProgressOpt, guarded, note, open_store, verdict_kept
from .output import OutputFormat, Screen, emit_batches, emit_rows, heading, kv_table
from .progress import ByteProgress
from .store_state import warn_store_state
from .terminal import isatty

ID_KINDS = ("uniq-key", "msg-id", "key")  # ``scan.survivors.IdKind``'s values (tests hold them equal)


def read_ids(source: str, column: str | None) -> list[str]:
    """Ids from a file or stdin (``-``): one per line, or the ``column`` of CSV / JSON Lines. A terminal on stdin
    (no pipe given) is said, and how to end it: the command otherwise waits in silence."""
    if source == "-" and isatty(sys.stdin):
        note("reading the ids from the terminal, one per line; end them with Ctrl-D")
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{source}: cannot read the ids: {getattr(exc, 'strerror', None) or exc}") from None  # not "[Errno 2] ... 'FILE'"
    lines = text.splitlines()
    if column is None:
        return [line.strip() for line in lines if line.strip()]
    first = next((line for line in lines if line.strip()), "")
    if first.lstrip().startswith("{"):
        ids = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line).get(column)
            except (json.JSONDecodeError, AttributeError):
                raise BadInput(f"{source}:{number}: not a JSON object") from None
            if value is not None and str(value).strip():
                ids.append(str(value).strip())
        return ids
    reader = csv.DictReader(lines)
    if reader.fieldnames is None or column not in reader.fieldnames:
        raise UsageError(f"--column {column!r}: the CSV header of {source} has {', '.join(reader.fieldnames or [])}")
    return [row[column].strip() for row in reader if row.get(column) and row[column].strip()]


def row_batches(search) -> Iterator[tuple]:
    """``SurvivorSearch.chunks()`` as ``ROW_FIELDS`` batches for ``emit_batches``; missing ids' location null."""
    import pyarrow as pa

    from ..scan import compute
    from ..scan.survivors import ROW_FIELDS, STATUSES

    statuses = pa.array(STATUSES, pa.string())
    for c in search.chunks():
        topics = pa.array(search.topics, pa.string())  # known once the search has run
        offset, topic, queue_id, queue_offset, stored = (compute.numbers(v, pa.int64(), c.found) for v in
                                                         (c.offset, c.topic, c.queue_id, c.queue_offset, c.store_timestamp))
        columns = [c.id_array, compute.take(statuses, c.code), offset, compute.take(topics, topic), queue_id, queue_offset, stored,
                   compute.numbers(c.copies, pa.int64()), compute.numbers(c.consumable, pa.bool_(), c.found)]
        yield pa.record_batch(columns, names=list(ROW_FIELDS)), None


TABLE = ("id", "status", "offset", "queue_id", "queue_offset", "store_timestamp", "copies", "consumable", "topic")  # topic last: a long one runs past the edge
TABLE_OPTIONAL = ("copies", "store_timestamp", "queue_offset")  # left out first to fit the width (an IPv6 msg id takes 56)


@guarded
def survivors(
    store_path: Annotated[Path, typer.Argument(metavar="STORE", help="The store (read only).")],
    ids_file: Annotated[str, typer.Argument(metavar="IDS_FILE", help="One id per line (or CSV / JSON Lines with --column); - for stdin.")],
    by: Annotated[Optional[str], typer.Option("--by", metavar="<uniq-key|msg-id|key>", help="What the ids are: uniq-key (client msgId), msg-id (offsetMsgId) or key (KEYS). Default: detected.")] = None,
    column: Annotated[Optional[str], typer.Option("--column", metavar="NAME", help="The CSV column or JSON Lines field holding the ids.")] = None,
    format: FormatOpt = OutputFormat.table,
    progress: ProgressOpt = None, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """Which of these messages survived: found, found-not-consumable, duplicated, past-damage or missing, per id.

    Example: mqtool survivors /data/rocketmq/store sent-ids.txt --format jsonl
    """
    if by is not None and by not in ID_KINDS:
        raise UsageError(f"--by {by!r}: choose uniq-key, msg-id or key")
    if not store_path.exists():
        raise BadInput(f"{store_path}: no such file or directory")
    ids = read_ids(ids_file, column)
    if not ids:
        raise BadInput(f"{ids_file}: no ids")
    with open_store(store_path, broker_config, broker_version) as store:
        warn_store_state(store.root)
        from ..recovery.planners import queues_after_start
        from ..scan.survivors import ROW_FIELDS, IdKind, SurvivorSearch, before_the_log, detect_kind

        kind = IdKind(by) if by is not None else detect_kind(ids, store)
        if by is None:
            note(f"ids read as {kind.value} (--by to say otherwise)")
        if kind is IdKind.msg_id and (gone := before_the_log(ids, store)):
            note(f"{gone} offsetMsgId(s) name offsets below the commit log's min offset {store.commitlog.min_offset}: the segments holding "
                 "them are gone (expired or deleted), so they are missing")
        with ByteProgress(store.commitlog.min_offset, store.commitlog.end_of_files, enabled=progress, desc="survivors") as bar:
            search = SurvivorSearch(store, ids, kind, progress=bar.advance, queues=lambda next_start: queues_after_start(store, next_start))
            searched = search.summary  # complete once the first row is yielded: a missing id is known before any is written
            with verdict_kept(lambda: sum(searched.counts.values()) == searched.ids and not searched.all_survived):
                if format is OutputFormat.json:
                    doc = {"ids": list(search.rows()), "summary": search.summary.as_dict()}
                    sys.stdout.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n")
                elif format is OutputFormat.jsonl:
                    emit_batches(row_batches(search), format, ROW_FIELDS)
                    sys.stdout.write(json.dumps({"summary": search.summary.as_dict()}, ensure_ascii=False) + "\n")
                else:
                    shown = emit_rows(search.rows(), format, ROW_FIELDS, TABLE, optional=TABLE_OPTIONAL)
                    if format is OutputFormat.table:
                        screen = Screen(sys.stdout)
                        screen.printed = bool(shown)  # a blank line between the rows and the summary
                        screen.print(kv_table("Summary", [(heading(k), v) for k, v in search.summary.as_dict().items()]))
        s = search.summary
        counts = ", ".join(f"{v} {k}" for k, v in s.counts.items())
        note(f"{s.ids} ids: {counts}")
        if s.records_past_damage:
            note(f"the broker's recovery ends the commit log at {s.commitlog_end} ({s.end_reason}); {s.records_past_damage} valid records lie past it: `mqtool salvage` recovers them")
        note(f"consumable: judged against the consume queues {s.queue_view}")
    sys.stdout.flush()
    if not s.all_survived:
        raise typer.Exit(EXIT_FINDINGS)
