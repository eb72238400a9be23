"""The broker's JSON config files under ``config/`` (reference §1.4) and ``broker.conf``.

Written by ``ConfigManager.persist`` (fastjson) with a ``.bak`` copy of the previous content;
the broker loads the ``.bak`` when the file is missing, empty or undecodable. These are read
with the standard ``json`` module; ``validate_*`` check only the shape the store relies on.
"""

from __future__ import annotations

import json
from typing import Any

CONFIG_FILES = {
    "topics.json": "topicConfigTable",
    "consumerOffset.json": "offsetTable",
    "delayOffset.json": "offsetTable",
    "subscriptionGroup.json": "subscriptionGroupTable",
}


class ConfigError(ValueError):
    """A config document that does not have the shape the broker writes."""


def decode_config(name: str, text: str) -> dict[str, Any]:
    """Parse one JSON config file and check its top-level table is present."""
    if not text.strip():
        raise ConfigError(f"{name} is empty")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    table = CONFIG_FILES.get(name)
    if not isinstance(doc, dict) or (table and not isinstance(doc.get(table), dict)):
        raise ConfigError(f"{name} has no {table!r} object")
    return doc


def topic_names(topics_doc: dict[str, Any]) -> set[str]:
    return set(topics_doc["topicConfigTable"])


def consumer_offsets(offsets_doc: dict[str, Any]) -> dict[tuple[str, str, int], int]:
    """``{"<topic>@<group>": {"<queueId>": offset}}`` as ``{(topic, group, queue_id): offset}``."""
    result = {}
    for topic_group, queues in offsets_doc["offsetTable"].items():
        topic, _, group = topic_group.rpartition("@")
        for queue_id, offset in queues.items():
            result[(topic, group, int(queue_id))] = int(offset)
    return result


def parse_broker_conf(text: str) -> dict[str, str]:
    """A Java properties file (``broker.conf``): ``key=value`` or ``key: value``, ``#``/``!`` comments."""
    result = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            result[line] = ""
        else:
            result[line[:sep].strip()] = line[sep + 1 :].strip()
    return result
