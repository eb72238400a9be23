"""Hosts, offsetMsgId and UNIQ_KEY (reference §2.4, §4).

- A host field is the raw address (4 or 16 bytes) followed by an int32 port.
- offsetMsgId = uppercase hex of store-host address + int32 port + int64 commit log offset
  (``MessageDecoder.createMessageId``): 32 hex characters for IPv4, 56 for IPv6.
- UNIQ_KEY = hex of ip (4/16) + int16 pid + int32 class-loader hash + uint32 ms since the start of
  the producer's month + int16 counter (``MessageClientIDSetter``).
"""

from __future__ import annotations

import ipaddress
import struct
from datetime import datetime, timezone
from typing import NamedTuple

_PORT = struct.Struct(">i")
_PORT_OFFSET = struct.Struct(">iq")


def format_host(address: bytes, port: int) -> str:
    """``ip:port``; IPv6 in compressed form inside brackets, ``[2001:db8::1]:10911``."""
    ip = ipaddress.ip_address(bytes(address))
    return f"[{ip.compressed}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """Inverse of ``format_host``; also accepts Java's long IPv6 form."""
    host, _, port = text.rpartition(":")
    ip = ipaddress.ip_address(host.strip("[]"))
    return ip.packed, int(port)


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


class UniqKey(NamedTuple):
    address: bytes
    pid: int
    class_loader_hash: int
    time_diff_ms: int
    counter: int

    @property
    def ip(self) -> str:
        return str(ipaddress.ip_address(self.address))

    def timestamp_near(self, reference_ms: int) -> int:
        """Best estimate of the producer time, taking the month from ``reference_ms``.

        The key only holds milliseconds since the start of a month in the producer's time
        zone (wrapping at 2**32); the month is chosen as the one that puts the result closest
        to ``reference_ms`` (normally the record's born timestamp), assuming UTC.
        """
        ref = datetime.fromtimestamp(reference_ms / 1000, timezone.utc)
        candidates = []
        for delta in (-1, 0, 1):
            month = ref.month - 1 + delta
            start = datetime(ref.year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)
            candidates.append(int(start.timestamp() * 1000) + self.time_diff_ms)
        return min(candidates, key=lambda t: abs(t - reference_ms))


def decode_uniq_key(uniq_key: str) -> UniqKey:
    """Decode a Java client's UNIQ_KEY (raises ValueError for other formats)."""
    raw = bytes.fromhex(uniq_key)
    ip_len = 16 if len(raw) == 28 else 4
    if len(raw) != ip_len + 12:
        raise ValueError(f"not a Java client UNIQ_KEY: {uniq_key!r}")
    pid, loader, diff, counter = struct.unpack_from(">HiIH", raw, ip_len)
    return UniqKey(raw[:ip_len], pid, loader, diff, counter)
