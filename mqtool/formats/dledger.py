"""DLedger commit log files (reference §15): the 48-byte entry header, the 32-byte index unit, checkpoint text."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from ._layout import declared_on_use, written


def _declare() -> dict[str, Any]:
    from construct import Int32sb, Int64sb, Struct

    return {
        "DLedgerEntryHeaderStruct": Struct(
            "magic" / Int32sb, "size" / Int32sb, "index" / Int64sb, "term" / Int64sb, "pos" / Int64sb, "channel" / Int32sb, "chain_crc" / Int32sb,
            "body_crc" / Int32sb, "body_size" / Int32sb,
        ),
        "DLedgerIndexUnitStruct": Struct("magic" / Int32sb, "pos" / Int64sb, "size" / Int32sb, "index" / Int64sb, "term" / Int64sb),
    }


__getattr__ = declared_on_use(__name__, _declare, ("DLedgerEntryHeaderStruct", "DLedgerIndexUnitStruct"))

# the layouts, written out; tests/test_format_codecs.py holds each equal to derive_whole(its schema)
ENTRY_HEADER_LAYOUT = written(
    ("magic", "l"), ("size", "l"), ("index", "q"), ("term", "q"), ("pos", "q"),
    ("channel", "l"), ("chain_crc", "l"), ("body_crc", "l"), ("body_size", "l"),
)  # DLedgerEntryHeaderStruct
ENTRY_HEADER = ENTRY_HEADER_LAYOUT.codec
ENTRY_HEADER_SIZE = ENTRY_HEADER.size  # DLedgerEntry.BODY_OFFSET
INDEX_UNIT_LAYOUT = written(("magic", "l"), ("pos", "q"), ("size", "l"), ("index", "q"), ("term", "q"))  # DLedgerIndexUnitStruct
INDEX_UNIT = INDEX_UNIT_LAYOUT.codec
INDEX_UNIT_SIZE = INDEX_UNIT.size  # DLedgerMmapFileStore.INDEX_UNIT_SIZE

ENTRY_MAGIC = 1  # DLedgerEntry.MAGIC / DLedgerMmapFileStore.MAGIC_1
BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE
assert ENTRY_HEADER_SIZE == 48 and INDEX_UNIT_SIZE == 32


class EntryHeader(namedtuple("EntryHeader", ("offset", *ENTRY_HEADER_LAYOUT.names))):
    """One entry header; ``offset`` is where it lies in the data file list (= ``pos`` when sound)."""

    __slots__ = ()

    @property
    def is_blank(self) -> bool:
        return self.magic == BLANK_MAGIC

    @property
    def record_offset(self) -> int:
        """The commit log offset of the message inside (what queues, index and msg ids hold)."""
        return self.pos + ENTRY_HEADER_SIZE


IndexUnit = namedtuple("IndexUnit", ("number", *INDEX_UNIT_LAYOUT.names))
"""One unit of ``index/``: ``number`` is its position (the entry index it stands for)."""


def decode_entry_header(buf, pos: int = 0, base_offset: int = 0) -> EntryHeader:
    """The 48 header bytes at ``buf[pos:]`` (a blank is only 8 bytes: the rest reads as zero)."""
    raw = bytes(buf[pos : pos + ENTRY_HEADER_SIZE]).ljust(ENTRY_HEADER_SIZE, b"\0")
    return EntryHeader(base_offset + pos, *ENTRY_HEADER.unpack(raw))


def decode_index_unit(buf, pos: int, number: int) -> IndexUnit:
    return IndexUnit(number, *INDEX_UNIT.unpack_from(buf, pos))


def encode_index_unit(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    return INDEX_UNIT.pack(magic, pos, size, index, term)


def encode_checkpoint_text(committed_index: int, end_index: int) -> str:
    """``DLedgerMmapFileStore.persistCheckPoint``'s text, as the fixtures hold it."""
    return f"committedIndex={committed_index}\nendIndex={end_index}\n"
