"""The record-by-record ``mqtool dump`` of before the columnar core, kept as the reference its output
must equal byte for byte: ``CommitLog.scan`` + ``message_dict`` per record, its own per-record
filter, rendered by ``emit_rows``. Only tests use it."""

from __future__ import annotations

import io

from mqtool.cli.output import OutputFormat, emit_rows
from mqtool.formats.errors import FormatError
from mqtool.formats.msgid import decode_msg_id
from mqtool.formats.properties import PropertyKey, split_keys
from mqtool.store.records import MESSAGE_FIELDS, BodyEncoding, message_dict
from mqtool.store import Store

from mqtool.cli.dump import MESSAGE_TABLE, MESSAGE_TABLE_OPTIONAL  # the table's layout is not what this reference checks


class RecordFilter:
    """The message filters of the old ``dump`` (all given filters must match)."""

    def __init__(self, topics=None, queue=None, since=None, until=None, key=None, tag=None, uniq_key=None):
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


def message_rows(store: Store, match: RecordFilter, start, stop, msg_id, limit, body, decompress, notes: list[str]):
    legacy = store.legacy_properties
    as_dict = lambda r: message_dict(r, body, decompress=decompress, legacy_properties=legacy, delay_table=store.delay_table)  # noqa: E731
    if msg_id is not None:
        offset = decode_msg_id(msg_id).commit_log_offset
        try:
            record = store.commitlog.read_record(offset)
        except (FormatError, LookupError) as exc:
            notes.append(f"no message at offset {offset} of --msg-id: {exc}")
            return
        if getattr(record, "msg_id", None) == msg_id.upper() and match(record, legacy):
            yield as_dict(record)
        return
    start = store.commitlog.min_offset if start is None else start
    scan = store.commitlog.scan(start, stop)
    count = 0
    for record in scan:
        if not match(record, legacy):
            continue
        yield as_dict(record)
        count += 1
        if limit is not None and count >= limit:
            return
    end = scan.end
    if end.is_clean:
        notes.append(f"end of the commit log at offset {end.offset} ({end.reason})")
    else:
        notes.append(f"stopped at offset {end.offset}: {end.reason}: {end.detail} (the broker would cut the log here; --keep-going reads past it)")


def reference_dump(path, fmt="table", body="none", decompress=False, start=None, stop=None, msg_id=None, limit=None, keep=None, **filters):
    """(stdout, stderr notes) of the old ``mqtool dump PATH``; ``keep`` drops rows (a predicate on the dict)."""
    notes: list[str] = []
    out = io.StringIO()
    with Store.open(path) as store:
        rows = message_rows(store, RecordFilter(**filters), start, stop, msg_id, limit, BodyEncoding(body), decompress, notes)
        if keep is not None:
            rows = (r for r in rows if keep(r))
        written = emit_rows(rows, OutputFormat(fmt), MESSAGE_FIELDS, MESSAGE_TABLE, optional=MESSAGE_TABLE_OPTIONAL, out=out)
    if not written and msg_id is None and any(v is not None for v in filters.values()):
        notes.append("no message matches the filters (`mqtool info` lists the topics and queues)")
    return out.getvalue(), "".join(f"mqtool: {n}\n" for n in notes)
