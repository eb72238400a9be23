"""Message properties: ``name \\x01 value \\x02`` pairs in UTF-8 (reference §2.8, §2.9), per version."""

from __future__ import annotations

from typing import Mapping

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
KEY_SEPARATOR = " "


class PropertyKey:
    """Standard property names (``MessageConst``)."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    UNIQ_KEY = "UNIQ_KEY"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    CLUSTER = "CLUSTER"
    INNER_MULTI_DISPATCH = "INNER_MULTI_DISPATCH"
    INNER_MULTI_QUEUE_OFFSET = "INNER_MULTI_QUEUE_OFFSET"
    INNER_NUM = "INNER_NUM"
    INNER_BASE = "INNER_BASE"
    TRANSACTION_ID = "__transactionId__"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    DUP_INFO = "DUP_INFO"
    CRC32 = "__CRC32#"


# The ``__CRC32#`` property 5.2+ brokers append (reference §2.10): key, separator, ten digits and
# the item separator (``MessageConst.CRC32_RESERVED_LEN``).
PROP_CRC_KEY = PropertyKey.CRC32.encode() + b"\x01"
PROP_CRC_LEN = len(PROP_CRC_KEY) + 10 + 1


def parse_properties(raw: bytes | memoryview, *, legacy: bool = False) -> dict[str, str]:
    """A stored properties string as the broker parses it (``legacy``: the 4.0.0-4.9.0 reader); later duplicates win."""
    text = bytes(raw).decode("utf-8", "replace")  # as Java's new String(bytes, UTF_8): malformed input -> U+FFFD
    result: dict[str, str] = {}
    if not text:
        return result
    if legacy:
        for item in text.split(PROPERTY_SEPARATOR):
            parts = java_split(item, NAME_VALUE_SEPARATOR)
            if len(parts) == 2:
                result[parts[0]] = parts[1]
        return result
    for item in text.split(PROPERTY_SEPARATOR):
        name, _, value = item.partition(NAME_VALUE_SEPARATOR)  # at the first separator, as indexOf
        if name and value:  # both non-empty (an item without a separator has no value)
            result[name] = value
    return result


def encode_properties(properties: Mapping[str, str], *, trailing_separator: bool = True) -> bytes:
    """Serialize properties in the given order (``messageProperties2String``)."""
    text = PROPERTY_SEPARATOR.join(f"{name}{NAME_VALUE_SEPARATOR}{value}" for name, value in properties.items() if value is not None)
    if text and trailing_separator:
        text += PROPERTY_SEPARATOR
    return text.encode("utf-8")


def java_split(text: str, separator: str) -> list[str]:
    """``text.split(separator)`` as Java's ``String.split`` of a one-character pattern: trailing empty strings dropped."""
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def split_keys(keys: str | None) -> list[str]:
    """The KEYS property as the index sees it: split on one space, empties dropped."""
    return [k for k in (keys or "").split(KEY_SEPARATOR) if k]
