"""``mqtool dump [KIND] PATH``: decode store files (messages by default) to table, JSON, JSON Lines or CSV."""

from __future__ import annotations

import itertools
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Iterable, Iterator, Optional

import typer

from ..errors import EXIT_FINDINGS, BadInput, UsageError
from ..formats.checkpoint import decode_checkpoint
from ..formats.commitlog import CommitLogRecord
from ..formats.errors import FormatError
from ..formats.hashing import index_key_hash
from ..formats.index import index_key
from ..store.records import BATCH_UNIT_FIELDS, CONSUME_QUEUE_FIELDS, DLEDGER_ENTRY_FIELDS, INDEX_ENTRY_FIELDS, MESSAGE_FIELDS, BodyEncoding
from ..store.records import batch_unit_dict, consume_queue_dict, dledger_entry_dict, index_entry_dict, parse_time
from ..store import IndexFile, ScanEnd, Store
from ..store.commitlog import StopReason
from ..store.consumequeue import discover_queues, infer_queue_file_size, queue_id_of
from ..store.index import IndexGeometry, infer_index_geometry, list_index_files
from ..store.mappedfile import OFFSET_NAME, MappedFile
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, ProgressOpt, SinceOpt, UntilOpt, broker_config_of, guarded, message_of, note, open_store, read_on
from .output import OutputFormat, emit_batches, emit_document, emit_rows, iso_ms, text_encoder, with_body

if TYPE_CHECKING:
    from ..scan.filter import MessageFilter

KINDS = ("commitlog", "consumequeue", "batchconsumequeue", "index", "checkpoint", "timer", "dledger")
MESSAGE_TABLE = ("offset", "queue_id", "queue_offset", "store_timestamp", "size", "tags", "keys", "msg_id", "uniq_key", "topic")  # topic last: a long one runs past the edge
CQ_TABLE = ("queue_id", "queue_offset", "phys_offset", "size", "tags_code", "topic")
BCQ_TABLE = ("position", "phys_offset", "size", "msg_base_offset", "batch_size", "store_time", "tags_code", "valid", "queue_id", "topic")
DLEDGER_TABLE = ("offset", "magic", "size", "index", "term", "body_size", "index_unit", "record_offset", "queue_id", "queue_offset", "topic")
# table columns left out first when the terminal is too narrow (JSON and CSV carry every field)
MESSAGE_TABLE_OPTIONAL = ("size", "tags", "keys", "uniq_key", "store_timestamp", "queue_offset")  # an IPv6 msg_id takes 56
CQ_TABLE_OPTIONAL = ("tags_code", "size")
# --follow in a table: the followed message's columns before the topic (``_followed_cells``)
CQ_FOLLOW_TABLE = (*CQ_TABLE[:-1], "msg_id", "store_timestamp", "tags", "keys", "topic")
CQ_FOLLOW_TABLE_OPTIONAL = ("keys", "tags", *CQ_TABLE_OPTIONAL, "store_timestamp")
BCQ_TABLE_OPTIONAL = ("tags_code", "store_time", "size", "valid")
DLEDGER_TABLE_OPTIONAL = ("magic", "index_unit", "record_offset", "body_size", "queue_offset", "term")
TIMER_TABLE = ("timer_log_offset", "offset", "delivery_time", "real_queue_id", "state", "uniq_key", "real_topic")
TIMER_TABLE_OPTIONAL = ("timer_log_offset", "uniq_key", "delivery_time")
# the delivery's queue and topic headed as `info`'s "Next timer deliveries" heads them (one line at 100 columns)
TIMER_HEADERS = {"real_queue_id": "queue", "real_topic": "topic"}
# the options each KIND uses (commitlog: every one but --follow); any other one given is a usage error, never silently ignored
KIND_OPTIONS = {
    "consumequeue": {"--topic", "--queue", "--from-offset", "--to-offset", "--limit", "--follow", "--body"},
    "batchconsumequeue": {"--topic", "--queue", "--limit"}, "index": {"--topic", "--key", "--limit", "--broker-config"}, "checkpoint": set(),
    "timer": {"--limit", "--broker-config", "--broker-version"}, "dledger": {"--from-offset", "--to-offset", "--limit"},
}


def _index_lookup(store: Store, match: MessageFilter) -> tuple[list[int] | None, str]:
    """The offsets the index names for ``--key``/``--uniq-key`` under each ``--topic`` (no 64 cap), or None and why."""
    wanted, option = (match.uniq_key, "--uniq-key") if match.uniq_key is not None else (match.key, "--key")
    if not match.topics:
        return None, f"{option} without --topic: the index is keyed by topic#key"
    if store.root is None:
        return None, f"{option}: no index files beside a commit log folder or segment"
    if not list_index_files(store.path("index")):
        return None, f"{option}: the store has no index files"
    if store.abort_present:
        return None, f"{option}: the store was not shut down cleanly (abort file), its index may lag the commit log"
    offsets: set[int] = set()
    for f in store.index_files:
        for topic in match.topics:
            offsets.update(phy_offset for _, phy_offset, _ in f.chain(index_key(topic, wanted)))
    return sorted(offsets), ""


SCAN_BATCH = 1 << 12  # records per batch: two builders and their texts are in flight, so a batch's size sets the resident memory
BUILDERS = 2  # threads building batches while the main thread walks and prints: building is most of the work


def dump_messages(store: Store, match: MessageFilter, start, stop, msg_id, limit, body, decompress, progress, use_index, fmt: OutputFormat, keep_going: bool = False) -> None:
    """Print the messages ``dump`` selects: the columnar scan, or ``--msg-id`` and index lookups; one ``MessageFilter``."""
    if msg_id is not None:  # a lookup, as `query msg-id`: exit 1 when it prints nothing
        from ..scan.filter import msg_id_offset

        offset = msg_id_offset(msg_id)
        rows = list(_msg_id_rows(store, match, msg_id, offset, limit, body, decompress))
        _emit_rows(rows, fmt, body)
        if not rows:
            raise typer.Exit(EXIT_FINDINGS)
        return
    offsets = None
    if use_index and (match.key is not None or match.uniq_key is not None):
        offsets, why = _index_lookup(store, match)
        if offsets is None:
            note(f"{why}; scanning the commit log")
    if offsets is not None:
        written = _emit_rows(_looked_up_rows(store, match, offsets, start, stop, limit, body, decompress), fmt, body)
    else:
        start = _scan_from(store, start)
        encoder = None if fmt is OutputFormat.table else text_encoder(MESSAGE_FIELDS, fmt)  # the compiled encoder
        items = _scan_batches(store, match, start, stop, limit, body, decompress, progress, keep_going, encoder)
        if fmt is OutputFormat.table:  # the bytes of the rows as dicts
            written = _emit_rows(({**r, "properties": dict(r["properties"])} for b, _ in items for r in b.to_pylist()), fmt, body)
        else:
            written = emit_batches(items, fmt, MESSAGE_FIELDS, encoder)
    if not written and match != type(match)():  # filters given, and nothing passed them
        note("no message matches the filters (`mqtool info` lists the topics and queues)")


def _scan_from(store: Store, start: int | None) -> int:
    """Where ``--from-offset``'s scan begins: that offset when a record starts there, else the next (``resync.record_start``)."""
    if start is None:
        return store.commitlog.min_offset
    from ..store.resync import record_start, record_start_note

    resumed = record_start(store.commitlog, start)
    if (moved := record_start_note(start, resumed, store.commitlog.min_offset)) is not None:
        note(moved)
    return resumed


def _emit_rows(rows: Iterable[dict], fmt: OutputFormat, body: BodyEncoding) -> int:
    """Message rows; in a table ``body`` comes last when ``--body`` asks for it (a long one runs past the edge)."""
    return emit_rows(rows, fmt, MESSAGE_FIELDS, with_body(MESSAGE_TABLE, body), optional=MESSAGE_TABLE_OPTIONAL)


def _matching(rows: list[dict], match: MessageFilter) -> list[dict]:
    """The rows ``match`` keeps (the one filter, on a table of the columns it reads)."""
    columns = match.columns()
    if not columns or not rows:
        return rows
    import pyarrow as pa

    from ..scan.schema import MESSAGE_SCHEMA

    table = pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows], schema=pa.schema([MESSAGE_SCHEMA.field(c) for c in columns]))
    return [r for r, keep in zip(rows, match.mask(table).to_pylist()) if keep]


def _msg_id_rows(store: Store, match: MessageFilter, msg_id: str, offset: int, limit, body, decompress) -> Iterator[dict]:
    """``--msg-id``: the record at its ``offset`` alone, none past the next start's end (``nextstart.end_before``)."""
    from ..store.lookup import past_end_error
    from ..store.nextstart import end_before

    try:
        record = store.commitlog.read_record(offset)
    except (FormatError, LookupError) as exc:
        note(f"no message at offset {offset} of --msg-id: {exc}")
        return
    if getattr(record, "msg_id", None) != msg_id.upper():
        note(f"the record at offset {offset} of --msg-id has offsetMsgId {getattr(record, 'msg_id', None)}: another store host")
    elif (cut := end_before(store, record.offset, record.total_size)) is not None:
        note(f"no message at offset {offset} of --msg-id: {past_end_error(cut)}")
    elif limit != 0:
        yield from _matching([message_of(store, record, body, decompress)], match)


def _looked_up_rows(store: Store, match: MessageFilter, offsets: list[int], start, stop, limit, body, decompress) -> Iterator[dict]:
    """The records at the index's offsets that pass the filters, in log order, none past the next start's end."""
    from ..store.lookup import past_end_error, read_message
    from ..store.nextstart import ends_before

    rows = []
    for offset in offsets:
        if (start is None or offset >= start) and (stop is None or offset < stop):
            record, _ = read_message(store, offset)  # None: the index outlives expired segments
            if record is not None:
                rows.append(message_of(store, record, body, decompress))
    rows = _matching(rows, match)
    cuts = ends_before(store, [(r["offset"], r["size"]) for r in rows])
    if (gone := [c for c in cuts if c is not None]):
        note(f"{len(gone)} matching message(s) {past_end_error(gone[0])}")
        rows = [r for r, c in zip(rows, cuts) if c is None]
    note(f"looked up through the index: {len(offsets)} offsets, {len(rows)} matching messages")
    yield from rows[:limit]


def _scan_batches(store: Store, match: MessageFilter, start: int, stop, limit, body, decompress, progress, keep_going: bool = False, encoder=None) -> Iterator:
    """(batch, text) pairs of the columnar scan, ``limit`` rows at most, built in ``BUILDERS`` threads."""
    from ..scan.messages import MessageScan
    from ..store.dledgerstart import loose_walk
    from .progress import ByteProgress

    if limit == 0:
        return
    batch = SCAN_BATCH if limit is None else min(SCAN_BATCH, max(limit, 256))
    count = 0
    then = None if encoder is None else (lambda b: encoder.encode(b, fresh=True))
    walk = None  # the record inside a DLedger entry whose header alone is broken (``loose_walk``), read before ``start``
    with ByteProgress(start, store.commitlog.end_of_writes(stop), enabled=progress, desc="dump") as bar:
        while True:
            scan = MessageScan(store, start=start, stop=stop, body=body, decompress=decompress, columns=MESSAGE_FIELDS, match=match,
                               stop_on_crc=False, batch=batch, workers=BUILDERS, then=then, walk=walk)
            items = iter(scan)  # the next batches are built and encoded in threads while this one is printed
            with closing(items):
                for item in items:
                    b, text = item if then is not None else (item, None)
                    if limit is not None and count + b.num_rows >= limit:
                        yield b.slice(0, limit - count), None
                        return
                    count += b.num_rows
                    yield b, text
                    bar.advance(b.column("offset")[-1].as_py())
            if walk is not None:
                walk = None
                continue
            end = _reference_end(store, scan.end, stop)
            start = read_on(store, end, stop, keep_going)
            if start is None:
                break
            walk = loose_walk(store.commitlog, end, start, stop_on_crc=False, batch=batch, release_behind=True)
    log = store.commitlog
    if end.reason == StopReason.NO_SEGMENTS and log.segments:  # --from-offset outside the files
        note(f"nothing to read at offset {end.offset}: no commit log segment holds it (the files hold [{log.min_offset}, {log.end_of_files}))")
    elif end.is_clean:
        note(f"end of the commit log at offset {end.offset} ({end.reason})")
    else:
        note(end.stopped_note(keep_going))


def _reference_end(store: Store, end: ScanEnd, stop) -> ScanEnd:
    """Where the scan stopped, worded by the record decoder (``CommitLog.scan``) when it is damage."""
    if end.is_clean:
        return end
    reference = store.commitlog.scan(end.offset, stop)
    return reference.end if next(iter(reference), None) is None and reference.end is not None and reference.end.offset == end.offset else end


def _queue_scope(path: Path, folder: str, topics, queue) -> tuple[Path, list | None, int | None, Path | None]:
    """(folder, topics, queue id, single file) of a dump path in ``folder`` (``consumequeue`` or ``batchconsumequeue``)."""
    path = path.resolve()
    single = None
    if path.is_file():
        if not OFFSET_NAME.match(path.name) or not path.parent.name.isdigit():
            raise BadInput(f"{path}: not a {folder} file (…/<topic>/<queueId>/<20-digit offset>)")
        single, path = path, path.parent
    if (path / folder).is_dir():
        return path / folder, topics, queue, single
    if path.name == folder:
        return path, topics, queue, single
    queue_id = queue_id_of(path.name)
    if path.name.isdigit() or queue_id is not None and path.name != str(queue_id):  # a queue folder (``+1`` too)
        if queue_id is None or path.name != str(queue_id):  # the broker reads no queue here (``discover_queues``)
            raise BadInput(f"{path}: a queue directory the broker never reads: " + (
                "Integer.parseInt refuses its name: no queue is loaded from it" if queue_id is None else
                f"it takes queue id {queue_id} from the name but reads and writes that queue in {path.parent / str(queue_id)}"))
        return path.parent.parent, [path.parent.name], queue_id, single
    from ..store.layout import READ

    # a store root (commitlog/, checkpoint, index/, ...; or dledger-<id>/), not a topic folder: never scan its parent as the queue folder
    if path.is_dir() and any(p.name in READ or p.name.startswith("dledger-") for p in path.iterdir()):
        raise BadInput(f"{path} has no {folder}/")
    if not any(p.name.isdigit() and p.is_dir() for p in path.iterdir()):  # commitlog/, index/: no topic folder, whose queues are
        raise BadInput(f"{path}: not a {folder} folder: expected a store, its {folder}/, a topic folder in it or a queue folder")
    return path.parent, [path.name], queue, single


def _in_scope(queues, topics, queue, single: Path | None) -> list:
    """The (batch) consume queues of ``topics`` and ``queue``, each with ``single`` alone of its files when one file is named."""
    queues = [q for q in queues if (not topics or q.topic in topics) and (queue is None or q.queue_id == queue)]
    if single is not None:
        for q in queues:
            q.files = [(base, p) for base, p in q.files if p == single]
    return queues


def batch_unit_rows(path: Path, topics, queue) -> Iterator[dict]:
    """Every unit of the batch consume queues a dump path names, invalid ones included (``valid``)."""
    from ..store.batchconsumequeue import discover_batch_queues  # not loaded for a message dump

    bcq_dir, topics, queue, single = _queue_scope(path, "batchconsumequeue", topics, queue)
    for q in _in_scope(discover_batch_queues(bcq_dir), topics, queue, single):
        for unit in q.entries(include_invalid=True):
            yield batch_unit_dict(q.topic, q.queue_id, unit)


def cq_rows(path: Path, topics, queue, start, stop, follow, body) -> Iterator[dict]:
    """The entries of the consume queues a dump path names, with ``--follow`` each with its message."""
    cq_dir, topics, queue, single = _queue_scope(path, "consumequeue", topics, queue)
    size = single.stat().st_size if single else infer_queue_file_size(cq_dir) or 6_000_000
    queues = _in_scope(discover_queues(cq_dir, size), topics, queue, single)
    store = None
    if follow:
        if cq_dir.name != "consumequeue" or not (cq_dir.parent / "commitlog").is_dir():
            raise BadInput(f"{path}: --follow needs the consume queue inside a store (…/consumequeue/<topic>/<queue>)")
        store = Store.open(cq_dir.parent)
    try:
        for q in queues:
            for entry in q.entries(start or 0):
                if stop is not None and entry.queue_offset >= stop:
                    break
                row = consume_queue_dict(q.topic, q.queue_id, entry)
                if store is not None and not entry.is_filler:
                    try:
                        record = store.commitlog.read_record(entry.phys_offset)
                    except (FormatError, LookupError) as exc:
                        row["message"] = {"error": str(exc)}
                    else:
                        blank = not isinstance(record, CommitLogRecord)
                        row["message"] = {"error": f"blank record at offset {entry.phys_offset}"} if blank else message_of(store, record, body)
                yield row
    finally:
        if store is not None:
            store.close()  # its maps, when the dump ends or stops early (``--limit``, a closed pipe)


def _followed_cells(row: dict) -> dict:
    """A ``--follow`` table row: the message's fields beside the entry's (msg_id says why there is none)."""
    message = row.get("message") or {}
    why = "(filler entry)" if row["filler"] else f"({message['error']})" if "error" in message else None
    return {**row, **{c: message.get(c) for c in ("store_timestamp", "tags", "keys", "body")}, "msg_id": message.get("msg_id") or why}


def index_rows(path: Path, broker_config, topic, key) -> Iterator[dict]:
    path = path.resolve()
    if path.is_file():
        files = [path]
    else:
        files = list_index_files(path / "index" if (path / "index").is_dir() else path)
        if not files:
            raise BadInput(f"{path}: no index files")
    cfg = broker_config_of(broker_config)
    geometry = IndexGeometry(cfg.hash_slot_num, cfg.index_num) if cfg.hash_slot_num and cfg.index_num else None
    wanted = None
    if key is not None:
        if not topic:
            raise UsageError("--key on an index dump needs --topic (the index hashes topic#key)")
        wanted = index_key_hash(index_key(topic[0], key))
    for p in files:
        with closing(IndexFile(p, geometry or infer_index_geometry(p))) as f:
            for entry in f.entries():
                if wanted is None or entry.key_hash == wanted:
                    yield index_entry_dict(f.name, f.geometry.hash_slot_num, entry)


def dledger_rows(path: Path, start, stop) -> Iterator[dict]:
    """DLedger entries in order, blanks included, as ``DLedgerMmapFileStore.recover`` walks them."""
    from ..store.dledger import open_entry_files  # not loaded for a message dump

    with closing(open_entry_files(path)) as cl:
        index = cl.segment_index(start) if start is not None else None
        scan = cl.entries(cl.segments[index].base_offset if index is not None else None, with_blanks=True)
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
        if scan.end is not None and not scan.end.is_clean:
            note(f"stopped at offset {scan.end.offset}: {scan.end.detail}")


def checkpoint_doc(path: Path) -> dict:
    path = path / "checkpoint" if path.is_dir() else path
    if not path.is_file():  # a directory: ``nextstart.checkpoint_refusal``
        raise BadInput(f"{path}: {'a directory, not a checkpoint file' if path.is_dir() else 'no checkpoint file'}")
    with MappedFile(path) as mf:
        if mf.size != 4096:
            note(f"{path}: {mf.size} bytes; the broker maps 4096")
        cp = decode_checkpoint(mf.buf)
    doc = cp._asdict()
    return {**doc, **{f"{k}_iso": iso_ms(v) for k, v in doc.items() if k.endswith("timestamp")}, "min_timestamp": cp.min_timestamp}


def _render_checkpoint(console, doc) -> None:
    for k, v in doc.items():
        console.print(f"{k:28} {v}")


def check_options(kind: str, given: dict[str, object]) -> None:
    """Refuse, as usage errors, the options ``kind`` does not use and contradictory ones."""
    used = {name for name, value in given.items() if not (value is None or value is False or value == [] or value is BodyEncoding.none)}
    extra = sorted(used - (set(given) - {"--follow"} if kind == "commitlog" else KIND_OPTIONS[kind]))
    if extra:
        raise UsageError(f"{', '.join(extra)} do{'es' if len(extra) == 1 else ''} not apply to `dump {kind}`")
    if "--decompress" in used and "--body" not in used:
        raise UsageError("--decompress inflates the bodies --body shows: give --body too (utf8, hex, base64 or sha256)")
    if kind == "consumequeue" and "--body" in used and "--follow" not in used:
        raise UsageError("--body on a consumequeue dump needs --follow (the entries hold no body)")
    if kind == "index" and "--topic" in used and "--key" not in used:
        raise UsageError("--topic on an index dump needs --key (the index hashes topic#key)")
    if "--no-index" in used and not used & {"--key", "--uniq-key"}:
        raise UsageError("--no-index turns off the index lookup of --key/--uniq-key: give one of them too")
    from ..scan.filter import check_offset_range

    check_offset_range(given.get("--from-offset"), given.get("--to-offset"), given.get("--msg-id"))
    since, until = given.get("--since"), given.get("--until")
    if since is not None and until is not None and since > until:
        raise UsageError("--since is after --until")


@guarded
def dump(
    target: Annotated[list[str], typer.Argument(metavar="[KIND] PATH", help="A store, or KIND (commitlog|consumequeue|batchconsumequeue|index|checkpoint|timer|dledger) and a path.")],
    topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", metavar="TOPIC", help="Only this topic (repeatable); index: the topic of --key.")] = None,
    queue: Annotated[Optional[int], typer.Option("--queue", min=0, metavar="ID", help="Only this queue id.")] = None,
    from_offset: Annotated[Optional[int], typer.Option("--from-offset", min=0, metavar="OFFSET", help="Commit log offset to start at: the record there or the next one (queue offset for consumequeue, entry offset for dledger).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", min=0, metavar="OFFSET", help="Stop before this offset (exclusive).")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    key: Annotated[Optional[str], typer.Option("--key", metavar="KEY", help="Only messages with this KEYS entry (index: entries of topic#KEY).")] = None,
    tag: Annotated[Optional[str], typer.Option("--tag", metavar="TAG", help="Only messages with this TAGS value.")] = None,
    msg_id: Annotated[Optional[str], typer.Option("--msg-id", metavar="ID", help="The message with this offsetMsgId (direct lookup).")] = None,
    uniq_key: Annotated[Optional[str], typer.Option("--uniq-key", metavar="KEY", help="Only messages with this UNIQ_KEY.")] = None,
    keep_going: Annotated[bool, typer.Option("--keep-going", help="Read past damaged ranges of the commit log (the broker would cut the log at the first).")] = False,
    use_index: Annotated[bool, typer.Option("--index/--no-index", help="--key/--uniq-key with --topic: look up through the index files (clean stores).")] = True,
    limit: Annotated[Optional[int], typer.Option("--limit", "-n", min=0, metavar="N", help="At most this many rows (0: none).")] = None,
    body: Annotated[BodyEncoding, typer.Option("--body", help="How to show the stored body bytes (consumequeue: with --follow).")] = BodyEncoding.none,
    decompress: Annotated[bool, typer.Option("--decompress", help="Inflate compressed bodies before --body encodes them.")] = False,
    follow: Annotated[bool, typer.Option("--follow", help="consumequeue: decode the message each entry points to.")] = False,
    format: FormatOpt = OutputFormat.table,
    progress: ProgressOpt = None, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """Decode store files: messages, consume queue and index entries, the checkpoint, the timer log or DLedger entries.

    \b
    The options each KIND uses (any other is an error):
      commitlog          every option but --follow
      consumequeue       --topic, --queue, queue offsets, --follow, --limit
      batchconsumequeue  --topic, --queue, --limit
      index              --topic with --key, --limit, --broker-config
      timer              --limit, --broker-config, --broker-version
      dledger            entry offsets, --limit
      checkpoint         none

    \b
    Example:
      mqtool dump /data/rocketmq/store --topic TopicTest --since 2024-05-01T03:00 -n 20
    """
    if not (len(target) == 1 or (len(target) == 2 and target[0] in KINDS)):
        raise UsageError(f"expected PATH or KIND PATH with KIND one of {', '.join(KINDS)}")
    kind, path = target[0] if len(target) == 2 else "commitlog", Path(target[-1])  # PATH alone: a store, its commit log
    since_ms, until_ms = parse_time(since, "--since"), parse_time(until, "--until")
    check_options(kind, {
        "--topic": topic, "--queue": queue, "--from-offset": from_offset, "--to-offset": to_offset, "--since": since_ms,
        "--until": until_ms, "--key": key, "--tag": tag, "--msg-id": msg_id, "--uniq-key": uniq_key, "--limit": limit,
        "--keep-going": keep_going, "--no-index": not use_index, "--body": body, "--decompress": decompress, "--follow": follow, "--progress": progress is not None or None,
        "--broker-config": broker_config, "--broker-version": broker_version,
    })
    if not path.exists():
        raise BadInput(f"{path}: no such file or directory")
    if kind == "commitlog":
        from ..scan.filter import MessageFilter

        with open_store(path, broker_config, broker_version) as store:
            match = MessageFilter(tuple(topic or ()), queue, since_ms, until_ms, tag, key, uniq_key)
            dump_messages(store, match, from_offset, to_offset, msg_id, limit, body, decompress, progress, use_index, format, keep_going)
    elif kind == "consumequeue":
        rows = itertools.islice(cq_rows(path, topic, queue, from_offset, to_offset, follow, body), limit)
        if follow and format is OutputFormat.table:
            columns = with_body(CQ_FOLLOW_TABLE, body)
            written = emit_rows(map(_followed_cells, rows), format, CONSUME_QUEUE_FIELDS, columns, optional=CQ_FOLLOW_TABLE_OPTIONAL)
        else:
            written = emit_rows(rows, format, CONSUME_QUEUE_FIELDS + (("message",) if follow else ()), CQ_TABLE, optional=CQ_TABLE_OPTIONAL)
        if not written and (topic or queue is not None):
            note("no consume queue entry of that topic and queue (`mqtool info` lists the topics and queues)")
    elif kind == "batchconsumequeue":
        emit_rows(itertools.islice(batch_unit_rows(path, topic, queue), limit), format, BATCH_UNIT_FIELDS, BCQ_TABLE, optional=BCQ_TABLE_OPTIONAL)
    elif kind == "dledger":
        emit_rows(itertools.islice(dledger_rows(path, from_offset, to_offset), limit), format, DLEDGER_ENTRY_FIELDS, DLEDGER_TABLE, optional=DLEDGER_TABLE_OPTIONAL)
    elif kind == "index":
        emit_rows(itertools.islice(index_rows(path, broker_config, topic, key), limit), format, INDEX_ENTRY_FIELDS)
    elif kind == "timer":  # each timer unit joined with its timer message and its fate (``scan/timer.py``)
        from ..scan.timer import TIMER_FIELDS, timer_report  # pyarrow: not loaded for a message dump
        from ..store.timer import TimerStore

        with open_store(path, broker_config, broker_version) as store:
            timer = TimerStore.open(store.root) if store.root is not None else None
            if timer is None:
                raise BadInput(f"{path}: no timer store (timerlog/, timerwheel, config/timercheck): the broker ran without timerWheelEnable or before 5.0")
            report = timer_report(store, timer)
            emit_rows(itertools.islice(report.rows, limit), format, TIMER_FIELDS, TIMER_TABLE, optional=TIMER_TABLE_OPTIONAL, headers=TIMER_HEADERS)
            end = report.log_end
            note(f"timer log {'ends' if end.clean else 'stops'} at offset {end.offset} ({end.reason}); commit log logical end {report.commitlog_end}")
    else:
        emit_document(checkpoint_doc(path), format, _render_checkpoint)
