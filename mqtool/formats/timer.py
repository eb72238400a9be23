"""The 5.x timer store's layouts (reference §9): ``timerlog/`` unit, ``timerwheel`` ``Slot``, ``timercheck``."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from ._layout import declared_on_use, written

TIMER_CHECK_FILE_SIZE = 4096


def _declare() -> dict[str, Any]:
    from construct import Int32sb, Int64sb, Padding, Struct

    return {
        "TimerLogUnitStruct": Struct(
            "size" / Int32sb, "prev_pos" / Int64sb, "magic" / Int32sb, "curr_write_time_ms" / Int64sb, "delay_time" / Int32sb, "offset_py" / Int64sb,
            "size_py" / Int32sb, "hash_topic" / Int32sb, "reserved" / Int64sb,
        ),
        "WheelSlotStruct": Struct("time_slot" / Int64sb, "first_pos" / Int64sb, "last_pos" / Int64sb, "num" / Int32sb, "magic" / Int32sb),
        "TimerCheckStruct": Struct(
            "last_read_time_ms" / Int64sb, "last_timer_log_flush_pos" / Int64sb, "last_timer_queue_offset" / Int64sb,
            "master_timer_queue_offset" / Int64sb, "state_version" / Int64sb, "data_version_timestamp" / Int64sb, "data_version_counter" / Int64sb,
            Padding(TIMER_CHECK_FILE_SIZE - 56),
        ),
    }


__getattr__ = declared_on_use(__name__, _declare, ("TimerLogUnitStruct", "WheelSlotStruct", "TimerCheckStruct"))

# the layouts, written out; tests/test_format_codecs.py holds each equal to derive_whole(its schema)
UNIT_LAYOUT = written(
    ("size", "l"), ("prev_pos", "q"), ("magic", "l"), ("curr_write_time_ms", "q"), ("delay_time", "l"),
    ("offset_py", "q"), ("size_py", "l"), ("hash_topic", "l"), ("reserved", "q"),
)  # TimerLogUnitStruct
UNIT = UNIT_LAYOUT.codec
UNIT_SIZE = UNIT.size  # 52
SLOT_LAYOUT = written(("time_slot", "q"), ("first_pos", "q"), ("last_pos", "q"), ("num", "l"), ("magic", "l"))  # WheelSlotStruct
SLOT = SLOT_LAYOUT.codec
SLOT_SIZE = SLOT.size  # 32
_CHECK_LAYOUT = written(
    ("last_read_time_ms", "q"), ("last_timer_log_flush_pos", "q"), ("last_timer_queue_offset", "q"), ("master_timer_queue_offset", "q"),
    ("state_version", "q"), ("data_version_timestamp", "q"), ("data_version_counter", "q"), (None, f"{TIMER_CHECK_FILE_SIZE - 56}x"),
)  # TimerCheckStruct
_CHECK = _CHECK_LAYOUT.codec

MAGIC_DEFAULT = 1
MAGIC_ROLL = 2
MAGIC_DELETE = 4
BLANK_MAGIC = -875286124
"""``TimerLog.BLANK_MAGIC_CODE`` (0xBBCCDDEE ^ (1880681586 + 8)), at offset 12 of the 16-byte end-of-file blank."""
BLANK_SIZE = 16
DEFAULT_LOG_FILE_SIZE = 100 * 1024 * 1024
"""``MessageStoreConfig.mappedFileSizeTimerLog``'s default (5.0.0-5.3.3): the size of a timer log file unless broker.conf sets another."""
DEFAULT_PRECISION_MS = 1000
"""``MessageStoreConfig.timerPrecisionMs``'s default (5.0.0-5.3.3): a slot's time is a delivery time over it."""
SLOTS_TOTAL = 7 * 86400
"""``TimerMessageStore.TIMER_WHEEL_TTL_DAY * DAY_SECS``: the wheel holds ``2 * SLOTS_TOTAL`` slots."""
WHEEL_FILE_SIZE = 2 * SLOTS_TOTAL * SLOT_SIZE
"""``TimerWheel.wheelLength``: the length its constructor sets on an empty ``timerwheel`` and throws on any other (5.0.0-5.3.3)."""
TIMER_TOPIC = "rmq_sys_wheel_timer"


class TimerLogUnit(namedtuple("TimerLogUnit", ("timer_log_offset", *UNIT_LAYOUT.names))):
    """A decoded timer log unit and its timer log offset."""

    __slots__ = ()

    @property
    def delivery_time(self) -> int:
        return self.curr_write_time_ms + self.delay_time

    @property
    def is_valid(self) -> bool:
        """``TimerMessageStore.recoverAndRevise``: a unit of size 52 whose magic has no bit above 0xF."""
        return self.size == UNIT_SIZE and (self.magic | 0xF) == 0xF


class WheelSlot(namedtuple("WheelSlot", ("slot", *SLOT_LAYOUT.names))):
    """A decoded ``timerwheel`` slot and its index."""

    __slots__ = ()

    @property
    def is_read(self) -> bool:
        """``TimerWheel`` reads a slot only for its own time (``getSlot``, ``checkPhyPos``: index = time / precision % slots)."""
        return self.time_slot >= 0 and self.time_slot % (2 * SLOTS_TOTAL) == self.slot


TimerCheck = namedtuple("TimerCheck", _CHECK_LAYOUT.names)


def decode_unit(buf, pos: int) -> TimerLogUnit:
    return TimerLogUnit(pos, *UNIT.unpack_from(buf, pos))


def is_blank(buf, pos: int) -> bool:
    """The 16-byte end-of-file blank starts at ``pos`` (its magic at ``pos + 12``)."""
    return len(buf) - pos >= BLANK_SIZE and int.from_bytes(bytes(buf[pos + 12 : pos + 16]), "big", signed=True) == BLANK_MAGIC


def encode_blank(remaining: int) -> bytes:
    """The 16-byte end-of-file blank ``TimerLog.append`` writes where the next unit does not fit (``remaining``: the bytes left)."""
    return remaining.to_bytes(4, "big", signed=True) + bytes(8) + BLANK_MAGIC.to_bytes(4, "big", signed=True)


def decode_slot(buf, index: int) -> WheelSlot:
    return WheelSlot(index, *SLOT.unpack_from(buf, index * SLOT_SIZE))


def decode_timer_check(buf) -> TimerCheck:
    """A shorter page reads as zero past its end (as a fresh map does)."""
    page = bytes(buf[:TIMER_CHECK_FILE_SIZE]).ljust(TIMER_CHECK_FILE_SIZE, b"\0")
    return TimerCheck(*_CHECK.unpack(page))
