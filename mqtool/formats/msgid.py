"""Hosts and offsetMsgId (reference §2.4, §4; ``MessageDecoder.createMessageId``): 32 or 56 hex characters."""

from __future__ import annotations

import ipaddress
import struct
from typing import NamedTuple

_PORT_OFFSET = struct.Struct(">iq")


def format_host(address: bytes, port: int) -> str:
    """``ip:port``; IPv6 in compressed form inside brackets, ``[2001:db8::1]:10911``."""
    ip = ipaddress.ip_address(bytes(address))
    return f"[{ip.compressed}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def encode_msg_id(store_address: bytes, store_port: int, commit_log_offset: int) -> str:
    """The broker-generated offsetMsgId of a record."""
    return (bytes(store_address) + _PORT_OFFSET.pack(store_port, commit_log_offset)).hex().upper()


class OffsetMsgId(NamedTuple):
    address: bytes
    port: int
    commit_log_offset: int

    @property
    def host(self) -> str:
        return format_host(self.address, self.port)


def decode_msg_id(msg_id: str) -> OffsetMsgId:
    """``MessageDecoder.decodeMessageId``: 32 hex characters is IPv4, anything else IPv6."""
    raw = bytes.fromhex(msg_id)
    ip_len = 4 if len(msg_id) == 32 else 16
    if len(raw) != ip_len + 12:
        raise ValueError(f"not an offsetMsgId: {msg_id!r}")
    port, offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    return OffsetMsgId(raw[:ip_len], port, offset)
