"""Commit log records (reference §2, §3.1): ``decode_record``, the one decoder, and ``encode_message``."""

from __future__ import annotations

import enum
import struct
from collections import namedtuple
from typing import Any, Union

from . import hashing, msgid
from ._layout import FixedLayout, declared_on_use, written
from .errors import CorruptRecord, LengthMismatch, TruncatedRecord
from .properties import parse_properties

MESSAGE_MAGIC_V1 = -626843481  # 0xDAA320A7, every version
MESSAGE_MAGIC_V2 = -626843477  # 0xDAA320AB, 5.1.0+: 2-byte topic length
BLANK_MAGIC = -875286124  # 0xCBD43194, end-of-file filler
MESSAGE_MAGICS = (MESSAGE_MAGIC_V1, MESSAGE_MAGIC_V2)
END_FILE_MIN_BLANK_LENGTH = 8


class SysFlag(enum.IntFlag):
    """SYSFLAG bits (``MessageSysFlag``). Transaction type and compression type are fields."""

    COMPRESSED = 0x001
    MULTI_TAGS = 0x002
    TRANSACTION_PREPARED = 0x004
    TRANSACTION_COMMIT = 0x008
    BORNHOST_V6 = 0x010
    STOREHOST_V6 = 0x020
    NEED_UNWRAP = 0x040
    INNER_BATCH = 0x080
    COMPRESSION_TYPE_BIT0 = 0x100
    COMPRESSION_TYPE_BIT1 = 0x200
    COMPRESSION_TYPE_BIT2 = 0x400


TRANSACTION_TYPE_MASK = 0x00C
COMPRESSION_TYPE_MASK = 0x700


class TransactionType(enum.IntEnum):
    NOT_TYPE = 0x0
    PREPARED = 0x4
    COMMIT = 0x8
    ROLLBACK = 0xC


class CompressionType(enum.IntEnum):
    """Compression type bits 8-10 (4.9.4+); 0 is the legacy zlib body."""

    ZLIB_LEGACY = 0
    LZ4 = 1
    ZSTD = 2
    ZLIB = 3


def transaction_type(sys_flag: int) -> TransactionType:
    return TransactionType(sys_flag & TRANSACTION_TYPE_MASK)


def compression_type(sys_flag: int) -> int:
    return (sys_flag & COMPRESSION_TYPE_MASK) >> 8


def _declare() -> dict[str, Any]:
    from construct import Bytes, IfThenElse, Int8sb, Int16sb, Int32sb, Int64sb, Struct, this

    def host_address(bit: int):
        return IfThenElse(this.sys_flag & bit, Bytes(16), Bytes(4))

    return {
        # One message record, magic V1 or V2 (§2.1). Lengths are signed; negatives read no bytes.
        "CommitLogMessageStruct": Struct(
            "total_size" / Int32sb, "magic_code" / Int32sb, "body_crc" / Int32sb, "queue_id" / Int32sb, "flag" / Int32sb, "queue_offset" / Int64sb,
            "phys_offset" / Int64sb, "sys_flag" / Int32sb, "born_timestamp" / Int64sb, "born_host_address" / host_address(SysFlag.BORNHOST_V6),
            "born_host_port" / Int32sb, "store_timestamp" / Int64sb, "store_host_address" / host_address(SysFlag.STOREHOST_V6),
            "store_host_port" / Int32sb, "reconsume_times" / Int32sb, "prepared_transaction_offset" / Int64sb, "body_length" / Int32sb,
            "body" / Bytes(lambda ctx: max(ctx.body_length, 0)), "topic_length" / IfThenElse(this.magic_code == MESSAGE_MAGIC_V2, Int16sb, Int8sb),
            "topic" / Bytes(this.topic_length), "properties_length" / Int16sb, "properties" / Bytes(lambda ctx: max(ctx.properties_length, 0)),
        ),
        # The end-of-file blank record (§2.6). Before 4.9.1 stale bytes follow it up to the file end.
        "CommitLogBlankStruct": Struct("total_size" / Int32sb, "magic_code" / Int32sb),
    }


__getattr__ = declared_on_use(__name__, _declare, ("CommitLogMessageStruct", "CommitLogBlankStruct"))


# ---- the fast path, written out; tests/test_format_codecs.py holds it equal to its derivation from the schemas


def _header(born_host: str, store_host: str) -> FixedLayout:
    """TOTALSIZE .. BODYLEN for one pair of host widths: ``derive_fixed(CommitLogMessageStruct, ..., stop_at="body")``."""
    return written(
        ("total_size", "l"), ("magic_code", "l"), ("body_crc", "l"), ("queue_id", "l"), ("flag", "l"),
        ("queue_offset", "q"), ("phys_offset", "q"), ("sys_flag", "l"), ("born_timestamp", "q"),
        ("born_host_address", born_host), ("born_host_port", "l"), ("store_timestamp", "q"),
        ("store_host_address", store_host), ("store_host_port", "l"), ("reconsume_times", "l"),
        ("prepared_transaction_offset", "q"), ("body_length", "l"),
    )


_PREFIX = written(("total_size", "l"), ("magic_code", "l"))  # derive_fixed(CommitLogBlankStruct)
BLANK_HEADER_SIZE = _PREFIX.codec.size  # TOTALSIZE and the magic: an 8-byte blank (CommitLog.END_FILE_MIN_BLANK_LENGTH)
HEADER_LAYOUTS: dict[tuple[bool, bool], FixedLayout] = {
    (born_v6, store_v6): _header("16s" if born_v6 else "4s", "16s" if store_v6 else "4s") for born_v6 in (False, True) for store_v6 in (False, True)
}
"""Fixed header (TOTALSIZE .. BODYLEN) for each born-host / store-host address width."""

_IPV4_HEADER = HEADER_LAYOUTS[(False, False)]
SYS_FLAG_POSITION = _IPV4_HEADER.offset_of("sys_flag")
PHYS_OFFSET_POSITION = _IPV4_HEADER.offset_of("phys_offset")
_SYS_FLAG = struct.Struct(">i")
_HEADER_BY_FLAGS = [HEADER_LAYOUTS[(bool(f & 1), bool(f & 2))].codec for f in range(4)]
TOPIC_LENGTH = {MESSAGE_MAGIC_V1: struct.Struct(">b"), MESSAGE_MAGIC_V2: struct.Struct(">h")}  # derive_field(..., "topic_length", {"magic_code": magic})
PROPERTIES_LENGTH = struct.Struct(">h")  # derive_field(CommitLogMessageStruct, "properties_length")
_TOPIC_V1, _TOPIC_V2 = TOPIC_LENGTH[MESSAGE_MAGIC_V1], TOPIC_LENGTH[MESSAGE_MAGIC_V2]


def header_size(sys_flag: int) -> int:
    """Bytes from TOTALSIZE through BODYLEN: 88 for IPv4/IPv4, +12 per IPv6 host."""
    return _HEADER_BY_FLAGS[(sys_flag >> 4) & 3].size


def message_length(magic_code: int, sys_flag: int, body_length: int, topic_length: int, properties_length: int) -> int:
    """``calMsgLength``: the TOTALSIZE a record with these field lengths must have (§2.5)."""
    return (
        header_size(sys_flag) + max(body_length, 0) + TOPIC_LENGTH[magic_code].size + topic_length + PROPERTIES_LENGTH.size
        + max(properties_length, 0)
    )


_RECORD_FIELDS = ("offset", *_IPV4_HEADER.names, "body", "topic_length", "topic", "properties_length", "properties")


class CommitLogRecord(namedtuple("CommitLogRecord", _RECORD_FIELDS)):
    """A decoded message record: ``offset`` and every stored field, named as by ``CommitLogMessageStruct.parse``."""

    __slots__ = ()

    @property
    def magic_version(self) -> int:
        return 2 if self.magic_code == MESSAGE_MAGIC_V2 else 1

    @property
    def topic_name(self) -> str:
        return self.topic.decode("utf-8", "replace")

    def property_map(self, *, legacy: bool = False) -> dict[str, str]:
        return parse_properties(self.properties, legacy=legacy)

    @property
    def born_host(self) -> str:
        return msgid.format_host(self.born_host_address, self.born_host_port)

    @property
    def store_host(self) -> str:
        return msgid.format_host(self.store_host_address, self.store_host_port)

    @property
    def msg_id(self) -> str:
        return msgid.encode_msg_id(self.store_host_address, self.store_host_port, self.phys_offset)

    @property
    def transaction_type(self) -> TransactionType:
        return transaction_type(self.sys_flag)

    @property
    def end(self) -> int:
        return self.offset + self.total_size

    def crc_ok(self) -> bool:
        """The broker's body CRC check; skipped (True) when BODYLEN <= 0."""
        return self.body_length <= 0 or hashing.body_crc(self.body) == self.body_crc


BlankRecord = namedtuple("BlankRecord", ("offset", *_PREFIX.names))
"""The end-of-file blank record; its TOTALSIZE is not used by any reader."""


Record = Union[CommitLogRecord, BlankRecord]


def decode_record(buf, pos: int = 0, base_offset: int = 0, end: int | None = None) -> Record:
    """Decode the record at ``buf[pos:]`` as ``checkMessageAndReturnSize`` without the CRC (``FormatError`` subclasses)."""
    if end is None:
        end = len(buf)
    offset = base_offset + pos
    if end - pos < 8:
        raise TruncatedRecord(offset, 8, end - pos)
    total_size, magic = _PREFIX.codec.unpack_from(buf, pos)
    if magic == BLANK_MAGIC:
        return BlankRecord(offset, total_size, magic)
    if magic != MESSAGE_MAGIC_V1 and magic != MESSAGE_MAGIC_V2:
        raise CorruptRecord(offset, f"illegal magic code 0x{magic & 0xFFFFFFFF:08X}")
    if total_size <= 0:
        raise CorruptRecord(offset, f"negative total size {total_size}")
    if end - pos < SYS_FLAG_POSITION + 4:
        raise TruncatedRecord(offset, SYS_FLAG_POSITION + 4, end - pos)
    (sys_flag,) = _SYS_FLAG.unpack_from(buf, pos + SYS_FLAG_POSITION)
    header = _HEADER_BY_FLAGS[(sys_flag >> 4) & 3]
    p = pos + header.size
    if p > end:
        raise TruncatedRecord(offset, header.size, end - pos)
    fields = header.unpack_from(buf, pos)
    body_length = fields[-1]
    if body_length > total_size:
        raise CorruptRecord(offset, f"body length {body_length} exceeds total size {total_size}")
    body_end = p + max(body_length, 0)
    topic_codec = _TOPIC_V2 if magic == MESSAGE_MAGIC_V2 else _TOPIC_V1
    if body_end + topic_codec.size > end:
        raise TruncatedRecord(offset, body_end + topic_codec.size - pos, end - pos)
    (topic_length,) = topic_codec.unpack_from(buf, body_end)
    if topic_length < 0 or topic_length > total_size:
        raise CorruptRecord(offset, f"impossible topic length {topic_length}")
    topic_start = body_end + topic_codec.size
    props_start = topic_start + topic_length + 2
    if props_start > end:
        raise TruncatedRecord(offset, props_start - pos, end - pos)
    (properties_length,) = PROPERTIES_LENGTH.unpack_from(buf, props_start - 2)
    if properties_length > total_size:
        raise CorruptRecord(offset, f"properties length {properties_length} exceeds total size {total_size}")
    props_end = props_start + max(properties_length, 0)
    if props_end > end:
        raise TruncatedRecord(offset, props_end - pos, end - pos)
    if props_end - pos != total_size:
        raise LengthMismatch(offset, total_size, props_end - pos)
    return CommitLogRecord(
        offset, *fields, bytes(buf[p:body_end]), topic_length, bytes(buf[topic_start : topic_start + topic_length]), properties_length,
        bytes(buf[props_start:props_end]),
    )


def encode_message(record: CommitLogRecord | dict, *, compute_crc: bool = False) -> bytes:
    """A message record's bytes (``decode_record``'s inverse), sizes recomputed; ``compute_crc``: BODYCRC too."""
    f = record._asdict() if isinstance(record, CommitLogRecord) else dict(record)
    body, topic, properties = bytes(f["body"]), bytes(f["topic"]), bytes(f["properties"])
    magic = f.get("magic_code", MESSAGE_MAGIC_V1)
    sys_flag = f["sys_flag"]
    crc = hashing.body_crc(body) if compute_crc else f["body_crc"]
    total = message_length(magic, sys_flag, len(body), len(topic), len(properties))
    values = {**f, "total_size": total, "magic_code": magic, "body_crc": crc, "body_length": len(body)}
    header = _HEADER_BY_FLAGS[(sys_flag >> 4) & 3].pack(*(bytes(values[n]) if n.endswith("_address") else values[n] for n in _IPV4_HEADER.names))
    return b"".join((header, body, TOPIC_LENGTH[magic].pack(len(topic)), topic, PROPERTIES_LENGTH.pack(len(properties)), properties))


def encode_blank(remaining: int) -> bytes:
    """The 8-byte end-of-file blank the broker writes since 4.9.1 (TOTALSIZE = bytes left)."""
    return _PREFIX.codec.pack(remaining, BLANK_MAGIC)
