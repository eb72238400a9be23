"""The documented JSON shape of decoded records for ``mqtool dump`` and Spark (docs/reading.md "JSON field reference")."""

from __future__ import annotations

import base64
import zlib
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

from ..formats import commitlog as clfmt
from ..formats.consumequeue import ConsumeQueueEntry
from ..formats.dispatch import DEFAULT_DELAY_TABLE, consume_queue_tags_code
from ..formats.errors import CorruptRecord
from ..formats.index import IndexEntry
from ..formats.properties import PropertyKey, split_keys

if TYPE_CHECKING:
    from .batchconsumequeue import BatchUnit


class BodyEncoding(str, Enum):
    none = "none"
    utf8 = "utf8"
    hex = "hex"
    base64 = "base64"
    sha256 = "sha256"


MESSAGE_FIELDS = (
    "offset", "phys_offset", "size", "magic_version", "body_crc", "crc_ok", "queue_id", "flag", "queue_offset", "sys_flag",
    "sys_flag_names", "born_timestamp", "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset",
    "body_length", "topic", "properties", "tags", "keys", "uniq_key", "msg_id", "transaction_type", "tags_code", "body",
)
CONSUME_QUEUE_FIELDS = ("topic", "queue_id", "queue_offset", "phys_offset", "size", "tags_code", "filler")
BATCH_UNIT_FIELDS = ("topic", "queue_id", "position", "phys_offset", "size", "tags_code", "store_time", "msg_base_offset", "batch_size", "compacted_offset", "reserved", "valid")
INDEX_ENTRY_FIELDS = ("file", "slot", "position", "key_hash", "phys_offset", "time_diff", "prev_index")
DLEDGER_ENTRY_FIELDS = (
    "file", "offset", "magic", "size", "index", "term", "pos", "channel", "chain_crc", "body_crc", "body_size",
    "record_offset", "index_unit", "topic", "queue_id", "queue_offset", "msg_id",
)


def inflate_body(body: bytes, sys_flag: int, offset: int) -> bytes:
    """``body`` inflated when ``sys_flag`` has COMPRESSED (reference §2.11, ``UtilAll.uncompress``); ``offset`` for errors."""
    if not sys_flag & clfmt.SysFlag.COMPRESSED:
        return body
    kind = clfmt.compression_type(sys_flag)
    if kind in (clfmt.CompressionType.ZLIB_LEGACY, clfmt.CompressionType.ZLIB):
        try:
            return zlib.decompress(body)
        except zlib.error as exc:
            raise CorruptRecord(offset, f"compressed body does not inflate: {exc}") from None
    raise CorruptRecord(offset, f"body compression type {kind} (LZ4/ZSTD) is not supported")


def encode_body(body: bytes, encoding: BodyEncoding) -> str | None:
    if encoding is BodyEncoding.none:
        return None
    if encoding is BodyEncoding.utf8:
        return body.decode("utf-8", "replace")
    if encoding is BodyEncoding.hex:
        return body.hex()
    if encoding is BodyEncoding.base64:
        return base64.b64encode(body).decode("ascii")
    import hashlib  # only for --body sha256 (OpenSSL's loading would slow every lookup)

    return hashlib.sha256(body).hexdigest()


def sys_flag_names(sys_flag: int) -> list[str]:
    return [flag.name for flag in clfmt.SysFlag if sys_flag & flag and not flag.name.startswith("COMPRESSION")]


def message_dict(record: clfmt.CommitLogRecord, body: BodyEncoding = BodyEncoding.none, *, decompress: bool = False, legacy_properties: bool = False,
                 delay_table=DEFAULT_DELAY_TABLE) -> dict[str, Any]:
    """A message record as the documented JSON object."""
    props = record.property_map(legacy=legacy_properties)
    topic = record.topic_name
    try:
        tags_code = consume_queue_tags_code(topic, props, record.store_timestamp, delay_table)
    except CorruptRecord:
        tags_code = None
    raw_body = inflate_body(record.body, record.sys_flag, record.offset) if decompress and body is not BodyEncoding.none else record.body
    computed = {"size": record.total_size, "crc_ok": record.crc_ok(), "sys_flag_names": sys_flag_names(record.sys_flag), "topic": topic,
                "properties": props, "tags": props.get(PropertyKey.TAGS), "keys": split_keys(props.get(PropertyKey.KEYS)),
                "uniq_key": props.get(PropertyKey.UNIQ_KEY), "transaction_type": record.transaction_type.name, "tags_code": tags_code,
                "body": encode_body(raw_body, body)}
    return {name: computed[name] if name in computed else getattr(record, name) for name in MESSAGE_FIELDS}


def consume_queue_dict(topic: str, queue_id: int, entry: ConsumeQueueEntry) -> dict[str, Any]:
    return {"topic": topic, "queue_id": queue_id, **entry._asdict(), "filler": entry.is_filler}


def batch_unit_dict(topic: str, queue_id: int, unit: BatchUnit) -> dict[str, Any]:
    """A batch consume queue unit (reference §5.5); ``position``: its byte offset in the queue."""
    return {"topic": topic, "queue_id": queue_id, **unit._asdict(), "valid": unit.is_valid}


def index_entry_dict(file: str, hash_slot_num: int, entry: IndexEntry) -> dict[str, Any]:
    slot = entry.key_hash % hash_slot_num if entry.key_hash >= 0 else None
    return dict(zip(INDEX_ENTRY_FIELDS, (file, slot, *entry)))


def dledger_entry_dict(file: str, header, unit, record) -> dict[str, Any]:
    """One DLedger entry (§15.2): its header, whether its index unit agrees, and the message inside."""
    blank = header.is_blank
    row = {"file": file, **{k: (None if blank and k not in ("offset", "magic", "size") else v) for k, v in header._asdict().items()}}
    from .dledger import unit_matches  # DLedger modules: loaded for DLedger data only

    row["record_offset"] = None if blank else header.record_offset
    row["index_unit"] = None if blank else "missing" if unit is None else "ok" if unit_matches(unit, header) else "mismatch"
    for key, attr in (("topic", "topic_name"), ("queue_id", "queue_id"), ("queue_offset", "queue_offset"), ("msg_id", "msg_id")):
        row[key] = getattr(record, attr) if isinstance(record, clfmt.CommitLogRecord) else None
    return row


SECONDS_LIKE = (10**9, 10**11)  # epoch values read as seconds, not milliseconds, by a person: refused with a hint


def parse_time(text: str | None, option: str) -> int | None:
    """``--since``/``--until``: epoch ms or ISO-8601 (UTC default); 10-11 digits (seconds) refused with a hint."""
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        value = int(text)
        if SECONDS_LIKE[0] <= value < SECONDS_LIKE[1]:  # 10 or 11 digits: a time in 1970-1973 as ms, 2001-5138 as seconds
            as_ms = datetime.fromtimestamp(value / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            raise UsageError(f"{option} {text} looks like epoch seconds (as milliseconds it is {as_ms}): give {value * 1000} or an ISO-8601 time")
        if not -(1 << 63) <= value < 1 << 63:  # a store time is a Java long
            raise UsageError(f"{option} {text}: out of range for a store time (epoch milliseconds, a signed 64-bit number)")
        return value
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected epoch milliseconds or an ISO-8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)
