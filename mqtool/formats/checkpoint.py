"""The ``checkpoint`` file (``StoreCheckpoint``, reference §7): int64s in a 4096-byte page, 24, 32 or 40 bytes used."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from ._layout import declared_on_use

CHECKPOINT_FILE_SIZE = 4096
RECOVERY_MARGIN_MS = 3000


def _declare() -> dict[str, Any]:
    from construct import Int64sb, Padding, Struct

    CheckpointStruct = Struct(
        "physic_msg_timestamp" / Int64sb, "logics_msg_timestamp" / Int64sb, "index_msg_timestamp" / Int64sb, "master_flushed_offset" / Int64sb,
        "confirm_phy_offset" / Int64sb, Padding(CHECKPOINT_FILE_SIZE - 40),
    )
    return {"CheckpointStruct": CheckpointStruct}


__getattr__ = declared_on_use(__name__, _declare, ("CheckpointStruct",))

_FIELDS = struct.Struct(">qqqqq4056x")  # derive_whole(CheckpointStruct).codec (tests/test_format_codecs.py)


class StoreCheckpoint(NamedTuple):
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    @property
    def min_timestamp(self) -> int:
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - RECOVERY_MARGIN_MS)

    @property
    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp, self.index_msg_timestamp)


def decode_checkpoint(buf) -> StoreCheckpoint:
    """Fields of a checkpoint page; a shorter buffer reads as zero past its end (as a fresh map)."""
    page = bytes(buf[:CHECKPOINT_FILE_SIZE]).ljust(CHECKPOINT_FILE_SIZE, b"\0")
    return StoreCheckpoint._make(_FIELDS.unpack(page))


def encode_checkpoint(checkpoint: StoreCheckpoint) -> bytes:
    return _FIELDS.pack(*checkpoint)


def used_bytes(buf) -> int:
    """How many leading bytes hold non-zero data: a hint of the writer's version (24/32/40)."""
    page = bytes(buf[:CHECKPOINT_FILE_SIZE])
    return len(page.rstrip(b"\0"))
