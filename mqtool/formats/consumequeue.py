"""Consume queue, ConsumeQueueExt and BatchConsumeQueue units (reference §5)."""

from __future__ import annotations

import struct
from collections import namedtuple
from typing import Any

from ._layout import declared_on_use, written


def _declare() -> dict[str, Any]:
    from construct import Bytes, Int16sb, Int32sb, Int64sb, Struct

    return {
        "ConsumeQueueEntryStruct": Struct("phys_offset" / Int64sb, "size" / Int32sb, "tags_code" / Int64sb),
        "ConsumeQueueExtUnitStruct": Struct(
            "size" / Int16sb, "tags_code" / Int64sb, "msg_store_time" / Int64sb, "bitmap_size" / Int16sb,
            "filter_bitmap" / Bytes(lambda ctx: max(ctx.bitmap_size, 0)),
        ),
        "BatchConsumeQueueUnitStruct": Struct(
            "phys_offset" / Int64sb, "size" / Int32sb, "tags_code" / Int64sb, "store_time" / Int64sb, "msg_base_offset" / Int64sb,
            "batch_size" / Int16sb, "compacted_offset" / Int32sb, "reserved" / Int32sb,
        ),
    }


__getattr__ = declared_on_use(__name__, _declare, ("ConsumeQueueEntryStruct", "ConsumeQueueExtUnitStruct", "BatchConsumeQueueUnitStruct"))

# the codecs, written out; tests/test_format_codecs.py holds each equal to its schema's derivation
ENTRY_LAYOUT = written(("phys_offset", "q"), ("size", "l"), ("tags_code", "q"))  # derive_whole(ConsumeQueueEntryStruct)
ENTRY = ENTRY_LAYOUT.codec
ENTRY_SIZE = ENTRY.size
EXT_UNIT_HEADER = struct.Struct(">hqqh")  # derive_fixed(ConsumeQueueExtUnitStruct).codec
BATCH_UNIT_LAYOUT = written(
    ("phys_offset", "q"), ("size", "l"), ("tags_code", "q"), ("store_time", "q"), ("msg_base_offset", "q"),
    ("batch_size", "h"), ("compacted_offset", "l"), ("reserved", "l"),
)  # derive_whole(BatchConsumeQueueUnitStruct)
BATCH_UNIT = BATCH_UNIT_LAYOUT.codec
BATCH_UNIT_SIZE = BATCH_UNIT.size

FILLER_SIZE = 0x7FFFFFFF
FILLER = (0, FILLER_SIZE, 0)
"""``fillPreBlank`` unit written before a queue's first entry when it does not start at 0."""


def filler_at(phys_offset: int) -> tuple[int, int, int]:
    """The filler unit with ``phys_offset``: repair's into a cut segment (its base), or ``fillPreBlank``'s (0, ``FILLER``)."""
    return (phys_offset, FILLER_SIZE, FILLER[2])


def is_filler(phys_offset, size, tags_code):
    """A filler unit: size 2147483647 and tags code 0 at any offset >= 0 (``FILLER``); ints or numpy arrays."""
    return (phys_offset >= 0) & (size == FILLER_SIZE) & (tags_code == FILLER[2])


EXT_MAX_ADDRESS = -2147483649
"""``ConsumeQueueExt.MAX_ADDR``: a tags code at or below this is an ext-file address."""


class ConsumeQueueEntry(namedtuple("ConsumeQueueEntry", ("queue_offset", *ENTRY_LAYOUT.names))):
    """A consume queue unit and the queue offset its position stands for."""

    __slots__ = ()

    @property
    def is_filler(self) -> bool:
        return bool(is_filler(self.phys_offset, self.size, self.tags_code))

    @property
    def is_valid(self) -> bool:
        """The broker's recovery rule (``offset >= 0 && size > 0``); fillers pass it too."""
        return self.phys_offset >= 0 and self.size > 0


def is_ext_address(tags_code: int) -> bool:
    return tags_code <= EXT_MAX_ADDRESS


def unit_position(queue_offset: int) -> int:
    """``expectLogicOffset``: ``cqOffset * CQ_STORE_UNIT_SIZE`` as a Java long, wrapping for a damaged QUEUEOFFSET (§5.10)."""
    return (queue_offset * ENTRY_SIZE + (1 << 63)) % (1 << 64) - (1 << 63)
