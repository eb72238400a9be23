"""The broker's JSON config files under ``config/`` (reference §1.4) and ``broker.conf``.

Written by ``ConfigManager.persist`` (fastjson) with a ``.bak`` copy of the previous content;
the broker loads the ``.bak`` when the file is missing, empty or undecodable. They are not
strict JSON (bare integer map keys, ``{0:76}``): they are read with ``formats.fastjson``, which
accepts what fastjson's own parser accepts; ``decode_config`` checks only the shape the store
relies on.
"""

from __future__ import annotations

import re
from typing import Any


CONFIG_FILES = {
    "topics.json": "topicConfigTable",  # TopicConfigManager
    "consumerOffset.json": "offsetTable",  # ConsumerOffsetManager
    "delayOffset.json": "offsetTable",  # ScheduleMessageService (delay level -> offset)
    "subscriptionGroup.json": "subscriptionGroupTable",  # SubscriptionGroupManager
    "consumerFilter.json": "filterDataByTopic",  # ConsumerFilterManager
    "timermetrics": "timingCount",  # 5.x TimerMetrics
}


class ConfigError(ValueError):
    """A config document that does not have the shape the broker writes."""


def decode_config(name: str, text: str) -> dict[str, Any]:
    """Parse one JSON config file and check its top-level table is present."""
    if not text.strip():
        raise ConfigError(f"{name} is empty")
    from . import fastjson  # on first use: its patterns compile at import

    try:
        doc = fastjson.loads(text)
    except fastjson.FastjsonError as exc:
        raise ConfigError(f"{name} is not JSON fastjson can read: {exc}") from None
    table = CONFIG_FILES.get(name)
    if not isinstance(doc, dict) or (table and not isinstance(doc.get(table), dict)):
        raise ConfigError(f"{name} has no {table!r} object")
    return doc


def topic_names(topics_doc: dict[str, Any]) -> set[str]:
    return set(topics_doc["topicConfigTable"])


def consumer_offsets(offsets_doc: dict[str, Any]) -> dict[tuple[str, str, int], int]:
    """``{"<topic>@<group>": {<queueId>: offset}}`` as ``{(topic, group, queue_id): offset}``
    (fastjson writes the queue ids bare; quoted ones are read too)."""
    result = {}
    for topic_group, queues in offsets_doc["offsetTable"].items():
        topic, _, group = topic_group.rpartition("@")
        for queue_id, offset in queues.items():
            result[(topic, group, int(queue_id))] = int(offset)
    return result


def parse_java_properties(text: str) -> dict[str, str]:
    """A Java properties file as ``java.util.Properties.load`` splits it (``broker.conf``, DLedger's
    ``checkpoint`` and ``currterm``): ``#``/``!`` comments; the key ends at the first ``=``, ``:``
    or whitespace, then whitespace and one ``=`` or ``:`` are skipped. Values are stripped;
    backslash escapes and continued lines, which these files never hold, are not read."""
    result = {}
    for line in text.splitlines():
        line = line.strip()
        if line and line[0] not in "#!":
            key, value = _PROPERTY_LINE.fullmatch(line).groups()
            result[key] = value
    return result


_PROPERTY_LINE = re.compile(r"([^=:\s]*)\s*[=:]?\s*(.*)", re.DOTALL)
