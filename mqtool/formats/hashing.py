"""Checksums and hashes the broker computes, bit for bit (reference §2.7, §3.4, §6.4)."""

from __future__ import annotations

import struct
import zlib

CRC31_MASK = 0x7FFFFFFF


def body_crc(body: bytes | memoryview) -> int:
    """The BODYCRC the broker stores: CRC32 of the stored body, low 31 bits."""
    return zlib.crc32(body) & CRC31_MASK


def java_string_hash(text: str) -> int:
    """Java ``String.hashCode()``: ``h = 31*h + unit`` over UTF-16 code units, signed int32."""
    h = 0
    units = text.encode("ascii") if text.isascii() else [u for (u,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass"))]
    for unit in units:  # UTF-16 code units (what Java's ``String`` holds); ASCII: a byte per unit
        h = (31 * h + unit) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def tags_code(tags: str | None) -> int:
    """CQ tagsCode of a record's TAGS (the MULTI_TAGS sys flag does not change it)."""
    return java_string_hash(tags) if tags else 0


def index_key_hash(key: str) -> int:
    """The non-negative key hash stored in index entries (``Math.abs``; MIN_VALUE maps to 0)."""
    h = java_string_hash(key)
    return 0 if h == -0x80000000 else abs(h)
