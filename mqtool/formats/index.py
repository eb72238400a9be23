"""Index files ``index/<yyyyMMddHHmmssSSS>`` (reference §6); ``IndexWriter`` writes as ``IndexFile.putKey``."""

from __future__ import annotations

import struct
from collections import namedtuple
from typing import Any

from ._layout import declared_on_use, written


def _declare() -> dict[str, Any]:
    from construct import Int32sb, Int64sb, Struct

    return {
        "IndexHeaderStruct": Struct(
            "begin_timestamp" / Int64sb, "end_timestamp" / Int64sb, "begin_phy_offset" / Int64sb, "end_phy_offset" / Int64sb,
            "hash_slot_count" / Int32sb, "index_count" / Int32sb,
        ),
        "IndexSlotStruct": Struct("entry_number" / Int32sb),
        "IndexEntryStruct": Struct("key_hash" / Int32sb, "phy_offset" / Int64sb, "time_diff" / Int32sb, "prev_index" / Int32sb),
    }


__getattr__ = declared_on_use(__name__, _declare, ("IndexHeaderStruct", "IndexSlotStruct", "IndexEntryStruct"))

# the layouts, written out; tests/test_format_codecs.py holds each equal to derive_whole(its schema)
HEADER_LAYOUT = written(
    ("begin_timestamp", "q"), ("end_timestamp", "q"), ("begin_phy_offset", "q"), ("end_phy_offset", "q"),
    ("hash_slot_count", "l"), ("index_count", "l"),
)  # IndexHeaderStruct
HEADER = HEADER_LAYOUT.codec
SLOT = struct.Struct(">l")  # IndexSlotStruct
ENTRY_LAYOUT = written(("key_hash", "l"), ("phy_offset", "q"), ("time_diff", "l"), ("prev_index", "l"))  # IndexEntryStruct
ENTRY = ENTRY_LAYOUT.codec
HEADER_SIZE, SLOT_SIZE, ENTRY_SIZE = HEADER.size, SLOT.size, ENTRY.size
MAX_QUERY_RESULTS = 64  # IndexService maxMsgsNumBatch
DEFAULT_GEOMETRY = (5_000_000, 20_000_000)  # MessageStoreConfig maxHashSlotNum / maxIndexNum
INT32_MAX = 0x7FFFFFFF


class IndexHeader(namedtuple("IndexHeader", HEADER_LAYOUT.names)):
    __slots__ = ()

    @property
    def entry_count(self) -> int:
        return max(self.index_count - 1, 0)


IndexEntry = namedtuple("IndexEntry", ("position", *ENTRY_LAYOUT.names))
"""Entry ``position`` (its entry number) as stored."""


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + SLOT_SIZE * hash_slot_num + ENTRY_SIZE * index_num


def slot_position(slot: int) -> int:
    return HEADER_SIZE + SLOT_SIZE * slot


def entry_position(hash_slot_num: int, number: int) -> int:
    return HEADER_SIZE + SLOT_SIZE * hash_slot_num + ENTRY_SIZE * number


def index_key(topic: str, key: str) -> str:
    """The string the broker hashes: ``topic + "#" + key`` (``IndexService.buildKey``)."""
    return f"{topic}#{key}"


def read_header(buf) -> IndexHeader:
    return IndexHeader._make(HEADER.unpack_from(buf, 0))


def time_diff_seconds(store_timestamp: int, begin_timestamp: int) -> int:
    """``putKey``'s timeDiff: seconds since the header's begin time, clamped to [0, INT32_MAX]."""
    if begin_timestamp <= 0:
        return 0
    diff = (store_timestamp - begin_timestamp) // 1000  # Java's division truncates: they differ only below 0, clamped to 0
    return min(max(diff, 0), INT32_MAX)
