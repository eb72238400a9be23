"""The broker's JSON config files under ``config/`` (reference §1.4), read with ``formats.fastjson``; and ``broker.conf``."""

from __future__ import annotations

import re
from typing import Any

from .dispatch import java_parse_int


CONFIG_FILES = {
    "topics.json": "topicConfigTable",  # TopicConfigManager
    "consumerOffset.json": "offsetTable",  # ConsumerOffsetManager
    "delayOffset.json": "offsetTable",  # ScheduleMessageService (delay level -> offset)
    "subscriptionGroup.json": "subscriptionGroupTable",  # SubscriptionGroupManager
    "consumerFilter.json": "filterDataByTopic",  # ConsumerFilterManager
    "timermetrics": "timingCount",  # 5.x TimerMetrics
}
# the files whose ``decode`` takes a null table (``{"offsetTable":null}``) without a throw (3.2.6-5.3.3), with what that does
# (None: an empty table); the others' ``putAll(null)`` throws, and the load falls back to the ``.bak``
NULL_TABLE_KEPT = {
    "consumerOffset.json": "ConsumerOffsetManager.decode keeps (this.offsetTable = obj.offsetTable, no throw): the broker "
                           "starts with no offset table, and each offset commit or query throws a NullPointerException",
    "consumerFilter.json": None,
}


class ConfigError(ValueError):
    """A config document that does not have the shape the broker writes."""


def decode_config(name: str, text: str) -> tuple[dict[str, Any], dict | None]:
    """One config file parsed, its table checked: the document, and its offsets as the broker converts them."""
    if not text.strip():
        raise ConfigError(empty(name))
    from . import fastjson  # on first use: its patterns compile at import

    try:
        doc = fastjson.loads(text)
    except fastjson.FastjsonError as exc:
        raise ConfigError(f"{name} is not JSON fastjson can read: {exc}") from None
    table = CONFIG_FILES.get(name)
    if not isinstance(doc, dict):
        raise ConfigError(f"{name} is not a JSON object")
    if table and table not in doc:
        raise ConfigError(absent(name))
    if table and not isinstance(doc[table], dict) and not (doc[table] is None and name in NULL_TABLE_KEPT):
        raise ConfigError(f"{name}'s {table!r} is not an object")
    read = _OFFSET_TABLES.get(name)
    try:
        return doc, None if read is None else read(doc)
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{name} has an offset fastjson cannot read as Integer -> Long ({exc!r})") from None


def empty(name: str) -> str:
    """``decode_config``'s error for a file holding nothing (or only whitespace)."""
    return f"{name} is empty"


def absent(name: str) -> str:
    """``decode_config``'s error for an object without the file's table, which the broker reads without a throw (@4.9.7)."""
    return f"{name} has no {CONFIG_FILES[name]!r} object"


def topic_names(topics_doc: dict[str, Any]) -> set[str]:
    return set(topics_doc["topicConfigTable"])


def consumer_offsets(offsets_doc: dict[str, Any]) -> dict[tuple[str, str, int], int]:
    """``{"<topic>@<group>": {<queueId>: offset}}`` as ``{(topic, group, queue_id): offset}`` (bare or quoted ids)."""
    result = {}
    for topic_group, queues in (offsets_doc["offsetTable"] or {}).items():  # null: NULL_TABLE_KEPT
        topic, _, group = str(topic_group).rpartition("@")
        for queue_id, offset in queues.items():
            result[(topic, group, _java_number(queue_id, 32))] = _java_number(offset, 64)
    return result


def delay_offsets(offsets_doc: dict[str, Any]) -> dict[int, int]:
    """``delayOffset.json``'s ``{<level>: offset}`` (``ScheduleMessageService``'s Integer -> Long table)."""
    return {_java_number(level, 32): _java_number(offset, 64) for level, offset in offsets_doc["offsetTable"].items()}


def _java_number(value: Any, bits: int) -> int:
    """A map key (``bits=32``) or value (64) as fastjson converts it; ``ValueError`` where it throws."""
    if value is None:
        raise ValueError("null")
    if isinstance(value, str):
        return java_parse_int(value, bits)
    if isinstance(value, int) and not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(f"{value} out of range")
    return int(value)


_OFFSET_TABLES = {"consumerOffset.json": consumer_offsets, "delayOffset.json": delay_offsets}


def parse_java_properties(text: str) -> dict[str, str]:
    """A Java properties file as ``Properties.load`` splits it (``broker.conf``, DLedger's), without escapes."""
    result = {}
    for line in re.split(r"\r\n|\r|\n", text):
        line = line.lstrip(" \t\f")
        if line and line[0] not in "#!":
            key, value = _PROPERTY_LINE.fullmatch(line).groups()
            result[key] = value
    return result


_PROPERTY_LINE = re.compile(r"([^=: \t\f]*)[ \t\f]*[=:]?[ \t\f]*(.*)", re.DOTALL)
