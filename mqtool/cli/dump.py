"""``mqtool dump``: decode store files to table, JSON, JSON Lines or CSV.

``mqtool dump STORE`` prints the messages of a store's commit log; ``mqtool dump KIND PATH``
prints one kind of file: ``commitlog`` (a store, a commitlog folder or one segment),
``consumequeue`` (a store, the consumequeue folder, a topic or queue folder, or one file),
``index`` (a store, the index folder or one file) or ``checkpoint``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from ..errors import BadInput, UsageError
from ..formats.checkpoint import decode_checkpoint
from ..formats.commitlog import CommitLogRecord
from ..formats.errors import FormatError
from ..formats.hashing import index_key_hash
from ..formats.index import index_key
from ..formats.msgid import decode_msg_id
from ..formats.properties import PropertyKey, split_keys
from ..records import (
    CONSUME_QUEUE_FIELDS,
    DLEDGER_ENTRY_FIELDS,
    INDEX_ENTRY_FIELDS,
    MESSAGE_FIELDS,
    BodyEncoding,
    consume_queue_dict,
    dledger_entry_dict,
    index_entry_dict,
    message_dict,
    parse_time,
)
from ..store import ConsumeQueue, IndexFile, Store, load_broker_config
from ..store.consumequeue import discover_queues, infer_queue_file_size
from ..store.dledger import open_entry_files
from ..store.index import IndexGeometry, infer_index_geometry, list_index_files
from ..store.mappedfile import OFFSET_NAME, MappedFile
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, guarded, note, open_store
from .output import OutputFormat, emit_document, emit_rows, iso_ms
from .progress import ByteProgress

KINDS = ("commitlog", "consumequeue", "index", "checkpoint", "timer", "dledger")
MESSAGE_TABLE = ("offset", "topic", "queue_id", "queue_offset", "store_timestamp", "size", "tags", "keys", "uniq_key", "msg_id")
CQ_TABLE = ("topic", "queue_id", "queue_offset", "phys_offset", "size", "tags_code")
DLEDGER_TABLE = ("offset", "magic", "size", "index", "term", "body_size", "index_unit", "record_offset", "topic", "queue_id", "queue_offset")


class MessageFilter:
    """The message filters of ``dump`` (all given filters must match)."""

    def __init__(self, topics, queue, since, until, key, tag, uniq_key):
        self.topics = {t.encode() for t in topics} if topics else None
        self.queue, self.since, self.until = queue, since, until
        self.key, self.tag, self.uniq_key = key, tag, uniq_key
        self.needs_properties = key is not None or tag is not None or uniq_key is not None

    def __call__(self, record, legacy: bool) -> bool:
        if self.topics is not None and record.topic not in self.topics:
            return False
        if self.queue is not None and record.queue_id != self.queue:
            return False
        if self.since is not None and record.store_timestamp < self.since:
            return False
        if self.until is not None and record.store_timestamp > self.until:
            return False
        if self.needs_properties:
            props = record.property_map(legacy=legacy)
            if self.tag is not None and props.get(PropertyKey.TAGS) != self.tag:
                return False
            if self.uniq_key is not None and props.get(PropertyKey.UNIQ_KEY) != self.uniq_key:
                return False
            if self.key is not None and self.key not in split_keys(props.get(PropertyKey.KEYS)):
                return False
        return True


def message_rows(store: Store, match: MessageFilter, start, stop, msg_id, limit, body, decompress, progress) -> Iterator[dict]:
    legacy = store.legacy_properties
    as_dict = lambda r: message_dict(r, body, decompress=decompress, legacy_properties=legacy, delay_table=store.delay_table)  # noqa: E731
    if msg_id is not None:
        try:
            offset = decode_msg_id(msg_id).commit_log_offset
        except ValueError:
            raise UsageError(f"--msg-id {msg_id!r} is not an offsetMsgId (32 or 56 hex characters)") from None
        try:
            record = store.commitlog.read_record(offset)
        except (FormatError, LookupError) as exc:
            note(f"no message at offset {offset} of --msg-id: {exc}")
            return
        if getattr(record, "msg_id", None) == msg_id.upper() and match(record, legacy):
            yield as_dict(record)
        return
    start = store.commitlog.min_offset if start is None else start
    scan = store.commitlog.scan(start, stop)
    count = 0
    with ByteProgress(start, stop or store.commitlog.end_of_files, enabled=progress, desc="dump") as bar:
        for record in scan:
            bar.advance(record.offset)
            if not match(record, legacy):
                continue
            yield as_dict(record)
            count += 1
            if limit is not None and count >= limit:
                return
    end = scan.end
    if end.is_clean:
        note(f"end of the commit log at offset {end.offset} ({end.reason})")
    else:
        note(f"stopped at offset {end.offset}: {end.reason}: {end.detail} (the broker would cut the log here)")


def _queues_at(path: Path, topics, queue) -> tuple[list[ConsumeQueue], Path | None]:
    """The consume queues a dump path names (store, consumequeue/, topic, queue folder or one
    file), and the store root when the path lies inside a store."""
    path = path.resolve()
    single = None
    if path.is_file():
        if not OFFSET_NAME.match(path.name) or not path.parent.name.isdigit():
            raise BadInput(f"{path}: not a consume queue file (…/<topic>/<queueId>/<20-digit offset>)")
        single, path = path, path.parent
    if (path / "consumequeue").is_dir():
        cq_dir = path / "consumequeue"
    elif path.name == "consumequeue":
        cq_dir = path
    elif path.name.isdigit():
        cq_dir, topics, queue = path.parent.parent, [path.parent.name], int(path.name)
    else:
        cq_dir, topics = path.parent, [path.name]
    size = single.stat().st_size if single else infer_queue_file_size(cq_dir) or 6_000_000
    queues = [q for q in discover_queues(cq_dir, size) if (not topics or q.topic in topics) and (queue is None or q.queue_id == queue)]
    if single is not None:
        for q in queues:
            q.files = [(base, p) for base, p in q.files if p == single]
    root = cq_dir.parent if cq_dir.name == "consumequeue" else None
    return queues, root


def cq_rows(path: Path, topics, queue, start, stop, follow, body, limit) -> Iterator[dict]:
    queues, root = _queues_at(path, topics, queue)
    store = None
    if follow:
        if root is None or not (root / "commitlog").is_dir():
            raise BadInput(f"{path}: --follow needs the consume queue inside a store (…/consumequeue/<topic>/<queue>)")
        store = Store.open(root)
    count = 0
    for q in queues:
        for entry in q.entries(start or 0):
            if stop is not None and entry.queue_offset >= stop:
                break
            row = consume_queue_dict(q.topic, q.queue_id, entry)
            if store is not None and not entry.is_filler:
                row["message"] = _followed(store, entry.phys_offset, body)
            yield row
            count += 1
            if limit is not None and count >= limit:
                return


def _followed(store: Store, offset: int, body: BodyEncoding) -> dict:
    try:
        record = store.commitlog.read_record(offset)
    except (FormatError, LookupError) as exc:
        return {"error": str(exc)}
    if not isinstance(record, CommitLogRecord):
        return {"error": f"blank record at offset {offset}"}
    return message_dict(record, body, legacy_properties=store.legacy_properties, delay_table=store.delay_table)


def index_rows(path: Path, broker_config, topic, key, limit) -> Iterator[dict]:
    path = path.resolve()
    if path.is_file():
        files = [path]
    else:
        index_dir = path / "index" if (path / "index").is_dir() else path
        files = list_index_files(index_dir)
        if not files:
            raise BadInput(f"{path}: no index files")
    if broker_config is not None:
        cfg = load_broker_config(broker_config)
        geometry = IndexGeometry(cfg.hash_slot_num, cfg.index_num) if cfg.hash_slot_num and cfg.index_num else None
    else:
        geometry = None
    wanted = None
    if key is not None:
        if not topic:
            raise UsageError("--key on an index dump needs --topic (the index hashes topic#key)")
        wanted = index_key_hash(index_key(topic[0], key))
    count = 0
    for p in files:
        f = IndexFile(p, geometry or infer_index_geometry(p))
        try:
            for entry in f.entries():
                if wanted is not None and entry.key_hash != wanted:
                    continue
                yield index_entry_dict(f.name, f.geometry.hash_slot_num, entry)
                count += 1
                if limit is not None and count >= limit:
                    return
        finally:
            f.close()


def dledger_rows(path: Path, start, stop, limit) -> Iterator[dict]:
    """DLedger entries in order (blanks included), as ``DLedgerMmapFileStore.recover`` walks
    them; where the walk stops early, stderr says why."""
    cl = open_entry_files(path)
    try:
        index = cl.segment_index(start) if start is not None else None
        scan = cl.entries(cl.segments[index].base_offset if index is not None else None, with_blanks=True)
        count = 0
        for header in scan:
            if start is not None and header.offset < start:
                continue
            if stop is not None and header.offset >= stop:
                return
            segment = cl.segments[cl.segment_index(header.offset)]
            record = None
            if not header.is_blank:
                try:
                    record = cl.read_record(header.record_offset)
                except (FormatError, LookupError) as exc:
                    record = exc
            yield dledger_entry_dict(segment.path.name, header, None if header.is_blank else cl.index_unit(header.index), record)
            count += 1
            if limit is not None and count >= limit:
                return
        if scan.end is not None and not scan.end.is_clean:
            note(f"stopped at offset {scan.end.offset}: {scan.end.detail}")
    finally:
        cl.close()


def checkpoint_doc(path: Path) -> dict:
    path = path / "checkpoint" if path.is_dir() else path
    if not path.is_file():
        raise BadInput(f"{path}: no checkpoint file")
    with MappedFile(path) as mf:
        if mf.size != 4096:
            note(f"{path}: {mf.size} bytes; the broker maps 4096")
        cp = decode_checkpoint(mf.buf)
    doc = cp._asdict()
    doc.update({f"{k}_iso": iso_ms(v) for k, v in cp._asdict().items() if k.endswith("timestamp")})
    doc["min_timestamp"] = cp.min_timestamp
    return doc


def _render_checkpoint(console, doc) -> None:
    for k, v in doc.items():
        console.print(f"{k:28} {v}")


@guarded
def dump(
    target: Annotated[list[str], typer.Argument(metavar="[KIND] PATH", help="A store, or KIND (commitlog|consumequeue|index|checkpoint|timer|dledger) and a path.")],
    topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", help="Only this topic (repeatable).")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", "-q", help="Only this queue id.")] = None,
    from_offset: Annotated[Optional[int], typer.Option("--from-offset", help="Commit log offset to start at (queue offset for consumequeue).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", help="Stop before this offset (exclusive).")] = None,
    since: Annotated[Optional[str], typer.Option("--since", help="Store time at or after (epoch ms or ISO-8601; naive = UTC).")] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="Store time at or before.")] = None,
    key: Annotated[Optional[str], typer.Option("--key", help="Only messages with this KEYS entry.")] = None,
    tag: Annotated[Optional[str], typer.Option("--tag", help="Only messages with this TAGS value.")] = None,
    msg_id: Annotated[Optional[str], typer.Option("--msg-id", help="The message with this offsetMsgId (direct lookup).")] = None,
    uniq_key: Annotated[Optional[str], typer.Option("--uniq-key", help="Only messages with this UNIQ_KEY.")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=0, help="At most this many rows.")] = None,
    body: Annotated[BodyEncoding, typer.Option("--body", help="How to show the stored body bytes.")] = BodyEncoding.none,
    decompress: Annotated[bool, typer.Option("--decompress", help="Inflate compressed bodies before --body encodes them.")] = False,
    follow: Annotated[bool, typer.Option("--follow", help="consumequeue: decode the message each entry points to.")] = False,
    format: FormatOpt = OutputFormat.table,
    progress: Annotated[Optional[bool], typer.Option("--progress/--no-progress", help="Progress bar on stderr (default: when stderr is a terminal).")] = None,
    broker_config: BrokerConfigOpt = None,
    broker_version: BrokerVersionOpt = None,
) -> None:
    """Decode store files: messages, consume queue entries, index entries or the checkpoint."""
    if len(target) == 1:
        kind, path = "commitlog", Path(target[0])
    elif len(target) == 2 and target[0] in KINDS:
        kind, path = target[0], Path(target[1])
    else:
        raise UsageError(f"expected PATH or KIND PATH with KIND one of {', '.join(KINDS)}")
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if kind == "commitlog":
        with open_store(path, broker_config, broker_version) as store:
            match = MessageFilter(topic, queue, parse_time(since, "--since"), parse_time(until, "--until"), key, tag, uniq_key)
            rows = message_rows(store, match, from_offset, to_offset, msg_id, limit, body, decompress, progress)
            emit_rows(rows, format, MESSAGE_FIELDS, MESSAGE_TABLE)
    elif kind == "consumequeue":
        emit_rows(cq_rows(path, topic, queue, from_offset, to_offset, follow, body, limit), format, CONSUME_QUEUE_FIELDS + (("message",) if follow else ()), CQ_TABLE)
    elif kind == "dledger":
        emit_rows(dledger_rows(path, from_offset, to_offset, limit), format, DLEDGER_ENTRY_FIELDS, DLEDGER_TABLE)
    elif kind == "index":
        emit_rows(index_rows(path, broker_config, topic, key, limit), format, INDEX_ENTRY_FIELDS)
    elif kind == "timer":
        from .timer import dump_timer

        dump_timer(path, format, broker_config, broker_version, limit)
    else:
        emit_document(checkpoint_doc(path), format, _render_checkpoint)
