"""``mqtool query``: the broker's own lookups, offline (``store/lookup.py``): ``key`` / ``uniq-key`` as
``DefaultMessageStore.queryMessage``, ``msg-id``, ``offset`` and ``time`` (``getOffsetInQueueByTime``)."""

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer

from ..errors import EXIT_FINDINGS, UsageError
from ..formats.msgid import decode_msg_id
from ..formats.properties import PropertyKey
from ..formats.timer import TIMER_TOPIC
from ..store.records import MESSAGE_FIELDS, BodyEncoding, parse_time
from ..store import Store, lookup
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, SinceOpt, UntilOpt, guarded, message_of, note, open_store
from .output import OutputFormat, emit_rows, with_body

app = typer.Typer(
    name="query", help="The broker's own lookups, offline: by key, UNIQ_KEY, offsetMsgId, queue offset, or time.",
    epilog="Example: mqtool query key /data/rocketmq/store TopicTest order-42 --format json", rich_markup_mode=None, no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

HIT_FIELDS = ("source", "key_matches", "index_file", "index_entry", "error", "timer_state", "delivery_time", "delivered_offset", *MESSAGE_FIELDS)
HIT_TABLE = ("offset", "source", "key_matches", "queue_id", "queue_offset", "store_timestamp", "msg_id", "uniq_key", "keys", "timer_state", "error", "topic")  # topic last
HIT_TABLE_OPTIONAL = ("timer_state", "uniq_key", "keys", "source", "queue_offset", "store_timestamp")  # left out first to fit the width
HEADERS = {"key_matches": "match", "timer_state": "timer"}  # an IPv6 msg_id takes 56
QUEUE_FIELDS = ("topic", "queue_id", "queue_offset", "status", "queue_min_offset", "queue_max_offset", "cq_phys_offset", "cq_size", "cq_tags_code", "error", *[f for f in MESSAGE_FIELDS if f not in ("topic", "queue_id", "queue_offset")])
QUEUE_TABLE = ("queue_id", "queue_offset", "status", "offset", "size", "store_timestamp", "tags", "keys", "msg_id", "topic")  # topic last
QUEUE_TABLE_OPTIONAL = ("size", "tags", "keys", "store_timestamp")
TIME_FIELDS = ("topic", "queue_id", "timestamp", "queue_offset", "rule", "queue_min_offset", "queue_max_offset", "message_offset", "message_store_timestamp")

StoreArg = Annotated[Path, typer.Argument(metavar="STORE", help="The store directory (broker stopped).")]
TopicArg = Annotated[str, typer.Argument(metavar="TOPIC", help="The topic (as stored: SCHEDULE_TOPIC_XXXX for delayed messages).")]
BodyOpt = Annotated[BodyEncoding, typer.Option("--body", help="How to show the stored body bytes.")]
OldBeginOpt = Annotated[Optional[str], typer.Option("--begin", metavar="TIME", hidden=True)]  # --since, as dump names it
OldEndOpt = Annotated[Optional[str], typer.Option("--end", metavar="TIME", hidden=True)]  # --until


def _renamed(value: str | None, old: str | None, name: str, old_name: str) -> str | None:
    """An option given under its name or under the old spelling kept working (not both)."""
    if value is not None and old is not None:
        raise UsageError(f"{old_name} is the old spelling of {name}: give one of them")
    return old if value is None else value


def _hit_rows(store: Store, found: list[lookup.Found], body: BodyEncoding) -> Iterator[dict]:
    for f in found:
        row: dict[str, Any] = {"source": f.source, "key_matches": f.key_matches, "index_file": f.index_file, "index_entry": f.index_entry,
                               "error": f.error, "timer_state": None, "delivery_time": None, "delivered_offset": None}
        yield {**row, **(message_of(store, f.record, body) if f.record is not None else {"offset": f.offset})}


def _waiting_timer_messages(store: Store, topic: str, key: str, kind: str, max_hits, bounds) -> list[lookup.Found]:
    """Undelivered 5.x timer messages, indexed under ``rmq_sys_wheel_timer`` (reference §9)."""
    if topic == TIMER_TOPIC or store.root is None or not (store.root / "timerlog").is_dir():
        return []
    result = lookup.query_message(store, TIMER_TOPIC, key, kind, max_hits, *bounds)
    legacy = store.legacy_properties
    return [replace(f, source="timer") for f in result.matches if f.record.property_map(legacy=legacy).get(PropertyKey.REAL_TOPIC) == topic]


def _add_timer_states(store: Store, rows: list[dict]) -> None:
    """``timer_state``, ``delivery_time`` and ``delivered_offset`` of each ``rmq_sys_wheel_timer`` row."""
    timer_rows = [r for r in rows if r.get("topic") == TIMER_TOPIC]
    if not timer_rows or store.root is None:
        return
    from ..store.timer import TimerStore

    timer = TimerStore.open(store.root)
    if timer is None:
        return
    from ..scan.timer import timer_report  # pyarrow: only when a hit is a timer message

    units: dict[int, dict] = {}
    for unit in timer_report(store, timer).rows:
        if units.get(unit["offset"], {}).get("state") != "delivered":  # a re-enqueued message: its delivery wins
            units[unit["offset"]] = unit
    for row in timer_rows:
        unit = units.get(row["offset"])
        if unit is not None:
            row.update(timer_state=unit["state"], delivery_time=unit["delivery_time"], delivered_offset=unit["delivered_offset"])
        else:
            out = (row.get("properties") or {}).get(PropertyKey.TIMER_OUT_MS)
            row.update(timer_state="pending", delivery_time=int(out) if out and out.isdigit() else None, delivered_offset=None)


def _key_command(name: str, kind: str, key_arg, max_help: str, max_default: int, doc: str) -> None:
    """``query key`` and ``query uniq-key``: one lookup, by KEYS or by UNIQ_KEY."""

    def by_key(
        store: StoreArg,
        topic: TopicArg,
        key: key_arg,
        max_hits: Annotated[int, typer.Option("--max", min=1, metavar="N", help=max_help)] = max_default,
        since: SinceOpt = None,
        until: UntilOpt = None,
        begin: OldBeginOpt = None,
        end: OldEndOpt = None,
        body: BodyOpt = BodyEncoding.none,
        format: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
    ) -> None:
        b = parse_time(_renamed(since, begin, "--since", "--begin"), "--since")
        e = parse_time(_renamed(until, end, "--until", "--end"), "--until")
        with open_store(store, broker_config, broker_version) as s:
            bounds = (b if b is not None else 0, e if e is not None else lookup.LONG_MAX)
            result = lookup.query_message(s, topic, key, kind, max_hits, *bounds)
            if not result.indexed:
                from ..scan.lookup import scan_key_offsets  # the columnar scan: only when there is no index
                from .progress import ByteProgress

                note(result.notes.pop())
                with ByteProgress(s.commitlog.min_offset, s.commitlog.end_of_writes(), desc="scan") as bar:
                    offsets, _ = scan_key_offsets(s, topic, key, uniq=kind == lookup.UNIQ_KEY, begin=b, end=e, progress=bar.advance)
                result.found = lookup.found_by_scan(s, offsets, topic, key, kind)
            for n in result.notes:
                note(n)
            collisions = sum(1 for f in result.found if f.key_matches is False)
            if collisions:
                note(f"{collisions} index hit(s) are hash collisions (key_matches false: another key with the same hash)")
            waiting = _waiting_timer_messages(s, topic, key, kind, max_hits, bounds)
            rows = list(_hit_rows(s, [*result.found, *waiting], body))
            _add_timer_states(s, rows)
            emit_rows(rows, format, HIT_FIELDS, with_body(HIT_TABLE, body), optional=HIT_TABLE_OPTIONAL, headers=HEADERS)
            if not result.matches and not waiting:
                if s.root is not None and s.path("consumequeue").is_dir() and not s.path("consumequeue", topic).is_dir():
                    note(f"topic {topic} is not in the store (no consumequeue/{topic}/)")
                else:
                    upper = kind == lookup.UNIQ_KEY and key != key.upper() and all(c in "0123456789abcdefABCDEF" for c in key)
                    hint = f" (a client writes its UNIQ_KEY in upper case: try {key.upper()})" if upper else ""  # the index: exact
                    note(f"no message of topic {topic} has {'KEYS' if kind == lookup.KEY else 'UNIQ_KEY'} {key}{hint}")
                raise typer.Exit(EXIT_FINDINGS)

    by_key.__doc__ = doc
    app.command(name)(guarded(by_key))


_key_command("key", lookup.KEY, Annotated[str, typer.Argument(metavar="KEY", help="One KEYS entry.")],
             "At most this many index hits (the broker caps at 64).", lookup.DEFAULT_MAX_KEY,
             """Messages by KEYS through the index (IndexService.queryOffset, newest first; collisions flagged).

    \b
    Example:
      mqtool query key /data/rocketmq/store TopicTest order-42 --since 2024-05-01T03:00
    """)
_key_command("uniq-key", lookup.UNIQ_KEY,
             Annotated[str, typer.Argument(metavar="UNIQ_KEY", help="The client message id (UNIQ_KEY property).")],
             "At most this many index hits (broker default 32).", lookup.DEFAULT_MAX_UNIQ,
             """Messages by UNIQ_KEY (the client msgId) through the index entry topic#UNIQ_KEY.

    \b
    Example:
      mqtool query uniq-key /data/rocketmq/store TopicTest 7F0000010BB818B4AAC2155B6BD20000
    """)


@app.command("msg-id")
@guarded
def query_msg_id(
    store: StoreArg,
    msg_id: Annotated[str, typer.Argument(metavar="OFFSET_MSG_ID", help="The broker's offsetMsgId (32 or 56 hex characters).")],
    body: BodyOpt = BodyEncoding.none,
    format: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """The message an offsetMsgId names: its commit log offset read directly (viewMessage).

    \b
    Example:
      mqtool query msg-id /data/rocketmq/store 0A0000010000291F000000000008A3C0 --body utf8
    """
    try:
        decoded = decode_msg_id(msg_id)
    except ValueError:
        raise UsageError(f"{msg_id!r} is not an offsetMsgId (32 or 56 hex characters)") from None
    with open_store(store, broker_config, broker_version) as s:
        record, error = lookup.read_served(s, decoded.commit_log_offset)
        if record is not None and record.msg_id != msg_id.upper():
            note(f"the record at offset {decoded.commit_log_offset} has msg_id {record.msg_id} (store host differs: {decoded.host} in the id)")
        found = [lookup.Found(decoded.commit_log_offset, "msg-id", record, record is not None, error=error)]
        if error:
            note(f"offset {decoded.commit_log_offset}: {error}")
        if record is not None or format != OutputFormat.table:  # a table of empty columns says no more than the line
            emit_rows(_hit_rows(s, found, body), format, HIT_FIELDS, with_body(HIT_TABLE, body), optional=HIT_TABLE_OPTIONAL, headers=HEADERS)
        if record is None:
            raise typer.Exit(EXIT_FINDINGS)


@app.command("offset")
@guarded
def query_offset(
    store: StoreArg,
    topic: TopicArg,
    queue: Annotated[int, typer.Argument(metavar="QUEUE", min=0, help="Queue id.")],
    queue_offset: Annotated[int, typer.Argument(metavar="QUEUE_OFFSET", min=0, help="Offset in the queue.")],
    body: BodyOpt = BodyEncoding.none,
    format: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """The message at a queue offset, through the consume queue (as getMessage reads it).

    \b
    Example:
      mqtool query offset /data/rocketmq/store TopicTest 2 1041
    """
    with open_store(store, broker_config, broker_version) as s:
        rng = lookup.queue_range(s, topic, queue)
        row: dict[str, Any] = {"topic": topic, "queue_id": queue, "queue_offset": queue_offset}
        record = None
        if rng is None:  # ``findConsumeQueue`` makes the queue: empty, max offset 0 (every release)
            row.update(status="NO_MESSAGE_IN_QUEUE", queue_min_offset=0, queue_max_offset=0, error=f"no consume queue {topic}/{queue}")
        else:
            row.update(queue_min_offset=rng.min_offset, queue_max_offset=rng.max_offset)
            entry = s.consume_queue(topic, queue).read_entry(queue_offset)
            if entry is not None:
                row.update(cq_phys_offset=entry.phys_offset, cq_size=entry.size, cq_tags_code=entry.tags_code)
            if rng.max_offset == 0:  # ``getMessage`` asks this first
                row["status"] = "NO_MESSAGE_IN_QUEUE"
            elif queue_offset < rng.min_offset:
                row["status"] = "OFFSET_TOO_SMALL"
            elif queue_offset >= rng.max_offset:
                row["status"] = "OFFSET_OVERFLOW_BADLY" if queue_offset > rng.max_offset else "OFFSET_OVERFLOW_ONE"
            if entry is not None and entry.is_valid and not entry.is_filler:
                record, row["error"], status = lookup.read_queue_entry(s, topic, queue, queue_offset, entry.phys_offset, entry.size)
                row.setdefault("status", status)
            else:
                row.setdefault("status", "NO_MESSAGE_IN_QUEUE")
        if record is not None:
            msg = message_of(s, record, body)
            if (msg["topic"], msg["queue_id"], msg["queue_offset"]) != (topic, queue, queue_offset):
                row["error"] = f"the entry leads to a record of {msg['topic']}/{msg['queue_id']} at queue offset {msg['queue_offset']}"
            row.update({k: v for k, v in msg.items() if k not in row})
        _say_why(row, rng)
        emit_rows([row], format, QUEUE_FIELDS, with_body(QUEUE_TABLE, body), optional=QUEUE_TABLE_OPTIONAL, headers=HEADERS)
        if record is None:
            raise typer.Exit(EXIT_FINDINGS)


def _say_why(row: dict, rng: lookup.QueueRange | None) -> None:
    """Why ``query offset`` served no message, or the wrong one, on stderr (the table has no column for it)."""
    where = f"{row['topic']}/{row['queue_id']}"
    if rng is None:
        note(f"no consume queue {where}: the broker answers NO_MESSAGE_IN_QUEUE")
    elif row.get("error"):
        note(f"{where} queue offset {row['queue_offset']}: {row['error']}")
    elif row["status"] in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_ONE", "OFFSET_OVERFLOW_BADLY"):
        note(f"{where} holds queue offsets [{rng.min_offset}, {rng.max_offset})")


@app.command("time")
@guarded
def query_time(
    store: StoreArg,
    topic: TopicArg,
    queue: Annotated[int, typer.Argument(metavar="QUEUE", min=0, help="Queue id.")],
    time: Annotated[str, typer.Argument(metavar="TIME", help="Store time: epoch ms or ISO-8601 (naive = UTC).")],
    format: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """The queue offset getOffsetInQueueByTime returns (the input of resetOffsetByTime).

    \b
    Example:
      mqtool query time /data/rocketmq/store TopicTest 2 2024-05-01T03:00
    """
    timestamp = parse_time(time, "TIME")
    with open_store(store, broker_config, broker_version) as s:
        rng, offset = lookup.queue_range_and_offset_by_time(s, topic, queue, timestamp)
        if rng is None:
            note(f"no consume queue {topic}/{queue}: the broker answers 0")
        row: dict[str, Any] = {"topic": topic, "queue_id": queue, "timestamp": timestamp, "queue_offset": offset,
                               "rule": "5.x BoundaryType.LOWER" if s.rules.v5 else "4.x nearest",
                               "queue_min_offset": rng.min_offset if rng else None, "queue_max_offset": rng.max_offset if rng else None}
        entry = s.consume_queue(topic, queue).read_entry(offset) if rng and offset < rng.max_offset else None
        if entry is not None and entry.is_valid and not entry.is_filler:
            row["message_offset"] = entry.phys_offset
            ts = lookup.pickup_store_timestamp(s, entry.phys_offset, entry.size)
            row["message_store_timestamp"] = ts if ts >= 0 else None
        emit_rows([row], format, TIME_FIELDS, asked_times=("timestamp",))
        if rng is None:
            raise typer.Exit(EXIT_FINDINGS)
