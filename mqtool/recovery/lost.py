"""The messages a cut loses, described for the plan (``plans.Message``)."""

from __future__ import annotations

from ..formats import commitlog as fmt
from ..formats import msgid
from ..formats.errors import FormatError
from ..formats.properties import PropertyKey, split_keys
from ..store.commitlog import CommitLog
from .plans import Message


def describe(record: fmt.CommitLogRecord, crc_ok: bool, legacy: bool) -> Message:
    props = record.property_map(legacy=legacy)
    return Message(record.offset, record.total_size, record.topic_name, record.queue_id, record.queue_offset, record.transaction_type.name,
                   record.store_timestamp, record.msg_id, props.get(PropertyKey.UNIQ_KEY), tuple(split_keys(props.get(PropertyKey.KEYS))), crc_ok)


def record_at(commitlog: CommitLog, offset: int, legacy: bool) -> Message | None:
    """The record at ``offset`` if its fields decode (even with a bad CRC), else its intact fixed header, else None."""
    try:
        record = commitlog.read_record(offset)
    except LookupError:
        return None
    except FormatError:
        return _header_at(commitlog, offset)
    return describe(record, record.crc_ok(), legacy) if isinstance(record, fmt.CommitLogRecord) else None  # None: a blank


def _header_at(commitlog: CommitLog, offset: int) -> Message | None:
    raw = commitlog.read_bytes(offset, fmt.HEADER_LAYOUTS[(True, True)].size)
    if len(raw) < fmt.SYS_FLAG_POSITION + 4:
        return None
    sys_flag = int.from_bytes(raw[fmt.SYS_FLAG_POSITION : fmt.SYS_FLAG_POSITION + 4], "big", signed=True)
    layout = fmt.HEADER_LAYOUTS[(bool(sys_flag & fmt.SysFlag.BORNHOST_V6), bool(sys_flag & fmt.SysFlag.STOREHOST_V6))]
    if len(raw) < layout.size:
        return None
    h = dict(zip(layout.names, layout.codec.unpack_from(raw)))
    if h["magic_code"] not in fmt.MESSAGE_MAGICS or h["total_size"] <= 0 or h["phys_offset"] != offset:
        return None
    return Message(offset, h["total_size"], None, h["queue_id"], h["queue_offset"], fmt.transaction_type(h["sys_flag"]).name, h["store_timestamp"],
                   msgid.encode_msg_id(h["store_host_address"], h["store_host_port"], h["phys_offset"]), None, (), False)
