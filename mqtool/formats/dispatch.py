"""What the broker derives from a record when it dispatches it (reference §3.2-§3.5, §6.5; rules §4.2)."""

from __future__ import annotations

import unicodedata
from typing import Mapping, NamedTuple

from .commitlog import CommitLogRecord, TransactionType, transaction_type
from .errors import CorruptRecord
from .hashing import tags_code as hash_tags
from .properties import PropertyKey, java_split, split_keys
from .timer import TIMER_TOPIC

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str = DEFAULT_DELAY_LEVELS) -> dict[int, int]:
    """``messageDelayLevel`` -> ``{level: delay_ms}`` as ``parseDelayLevel`` (1000 ms for a bad token)."""
    table = {}
    for i, token in enumerate(java_split(text, " ")):
        if not token:
            break
        try:
            delay = java_parse_int(token[:-1], 64) * _UNIT_MS[token[-1]]
        except (ValueError, KeyError):
            table[i + 1] = 1000
            break
        table[i + 1] = (delay + (1 << 63)) % (1 << 64) - (1 << 63)
    return table


def java_parse_int(text: str, bits: int = 32) -> int:
    """``Integer.parseInt`` (``bits=64``: ``Long``, 16: ``Short``): sign, Unicode digits, in range, else ``ValueError``."""
    digits = text[1:] if text[:1] in "+-" and len(text) > 1 else text
    if not digits or any(unicodedata.decimal(ch, None) is None for ch in digits):
        raise ValueError(text)
    value = int("".join(str(unicodedata.decimal(ch)) for ch in digits))
    value = -value if text[0] == "-" else value
    if not -(1 << (bits - 1)) <= value < 1 << (bits - 1):
        raise ValueError(text)
    return value


def java_int_or_none(text: str | None, bits: int = 32) -> int | None:
    """``java_parse_int``, or None for no text or one the Java method throws on."""
    try:
        return None if text is None else java_parse_int(text, bits)
    except ValueError:
        return None


DEFAULT_DELAY_TABLE = parse_delay_levels()


def batch_unit_span(properties: Mapping[str, str], queue_offset: int) -> tuple[int, int]:
    """``(msgBaseOffset, batchSize)`` of a record's batch queue unit (§3.1, §5.5); ``ValueError`` where Java throws."""
    base, count = properties.get(PropertyKey.INNER_BASE), properties.get(PropertyKey.INNER_NUM)
    return (queue_offset, 1) if base is None or count is None else (java_parse_int(base, 64), java_parse_int(count, 16))


def dispatches_to_consume_queue(sys_flag: int) -> bool:
    return transaction_type(sys_flag) in (TransactionType.NOT_TYPE, TransactionType.COMMIT)


# ``IndexService.buildIndex``'s rule (rules file §4.2; ``VersionRules.index_rule``), as the dispatch kernel takes it
INDEX_NONE = 0  # messageIndexEnable=false
INDEX_UNIQ_AND_KEYS = 1  # 4.0.0+: NOT, PREPARED and COMMIT records; topic#UNIQ_KEY, then topic#key per KEYS token
INDEX_KEYS_ONLY = 2  # 3.2.6: NOT and PREPARED records; topic#key per KEYS token, no UNIQ_KEY


def is_indexed(sys_flag: int, rule: int = INDEX_UNIQ_AND_KEYS) -> bool:
    """Whether ``buildIndex`` indexes a record of this sysflag under ``rule`` (§4.2)."""
    tran = transaction_type(sys_flag)
    if rule == INDEX_KEYS_ONLY:
        return tran in (TransactionType.NOT_TYPE, TransactionType.PREPARED)
    return rule != INDEX_NONE and tran != TransactionType.ROLLBACK


def indexed_keys(sys_flag: int, uniq_key: str | None, keys: list[str] | tuple[str, ...], rule: int = INDEX_UNIQ_AND_KEYS) -> list[str]:
    """The keys ``buildIndex`` puts for a record, in order, unprefixed: UNIQ_KEY (unless ``INDEX_KEYS_ONLY``), KEYS."""
    if not is_indexed(sys_flag, rule):
        return []
    return ([uniq_key] if uniq_key is not None and rule == INDEX_UNIQ_AND_KEYS else []) + list(keys)


def consume_queue_tags_code(topic: str, properties: Mapping[str, str], store_timestamp: int, delay_table: Mapping[int, int]) -> int:
    """``checkMessageAndReturnSize``'s tagsCode (empty ``delay_table``: 4.9.2-4.9.8 abnormal recovery, §3.5)."""
    code = hash_tags(properties.get(PropertyKey.TAGS))
    delay = properties.get(PropertyKey.DELAY)
    if topic == SCHEDULE_TOPIC and delay is not None:
        try:
            level = java_parse_int(delay)
        except ValueError:
            raise CorruptRecord(-1, f"DELAY property {delay!r} is not an int (Integer.parseInt throws)") from None
        level = min(level, max(delay_table, default=0))
        if level > 0:
            code = store_timestamp + delay_table.get(level, 1000)
    return code


class DispatchRequest(NamedTuple):
    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: tuple[str, ...]
    uniq_key: str | None
    sys_flag: int
    prepared_transaction_offset: int

    @property
    def to_consume_queue(self) -> bool:
        return dispatches_to_consume_queue(self.sys_flag)

    @property
    def to_index(self) -> bool:
        return is_indexed(self.sys_flag)

    def index_keys(self, rule: int = INDEX_UNIQ_AND_KEYS) -> list[str]:
        """Index keys in put order: ``topic#UNIQ_KEY`` then ``topic#key`` per KEYS entry (``indexed_keys``)."""
        return [f"{self.topic}#{k}" for k in indexed_keys(self.sys_flag, self.uniq_key, self.keys, rule)]


def dispatch_request(
    record: CommitLogRecord, delay_table: Mapping[int, int] = DEFAULT_DELAY_TABLE, *, legacy_properties: bool = False,
) -> DispatchRequest:
    """Build the ``DispatchRequest`` of a decoded record."""
    props = record.property_map(legacy=legacy_properties)
    topic = record.topic_name
    try:
        code = consume_queue_tags_code(topic, props, record.store_timestamp, delay_table)
    except CorruptRecord as exc:
        raise CorruptRecord(record.offset, exc.reason) from None
    return DispatchRequest(
        topic, record.queue_id, record.phys_offset, record.total_size, code, record.store_timestamp, record.queue_offset,
        tuple(split_keys(props.get(PropertyKey.KEYS))), props.get(PropertyKey.UNIQ_KEY), record.sys_flag, record.prepared_transaction_offset,
    )


LMQ_PREFIX = "%LMQ%"
MULTI_DISPATCH_SEPARATOR = ","
# Which records ``checkMultiDispatchQueue`` leaves out, by release (rules file §3.12; ``VersionRules.lmq_rule``)
NO_MULTI_DISPATCH = -1  # before 4.9.3: no multi-dispatch at all (``enableMultiDispatch`` appears in 4.9.3)
LMQ_SKIP_NONE = 0  # 4.9.3-5.1.0: none
LMQ_SKIP_RETRY = 1  # 5.1.1: %RETRY% topics
LMQ_SKIP_RETRY_TIMER_SCHEDULE = 2  # 5.1.2-5.1.4: also rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX; queue names holding "/" skipped
LMQ_SKIP_SYSTEM = 3  # 5.2.0+ (``MultiDispatchUtils``): %RETRY%, every rmq_sys_ topic, SCHEDULE_TOPIC_XXXX; names holding "/" skipped


UNDECIDED_RELEASE = ("the broker is 4.9.3", "--broker-version")
UNDECIDED_MULTI_DISPATCH = ("enableMultiDispatch is on", "--broker-config")


class DispatchThrows(ValueError):
    """A record whose queue dispatch throws (rules §3.12): the load fails, the reput retries forever."""

    def __init__(self, why: str, wrote: str, offset: int | None = None, undecided: tuple[str, str] | None = None):
        super().__init__(why)
        self.why, self.wrote, self.offset, self.undecided = why, wrote, offset, undecided


class LmqOffsetThrows(DispatchThrows):
    """An ``INNER_MULTI_QUEUE_OFFSET`` ``Long.parseLong`` throws on in ``multiDispatchLmqQueue`` (@4.9.3-5.3.3)."""

    def __init__(self, written: list[tuple[str, int, int]], queue: str, value: str):
        entries = f"{len(written)} LMQ entr{'y' if len(written) == 1 else 'ies'}"
        super().__init__(f"lists LMQ queue {queue!r} with INNER_MULTI_QUEUE_OFFSET value {value!r}, which Long.parseLong refuses",
                         f"the record's own entry and the {entries} before it")
        self.written, self.queue, self.value = written, queue, value


class LmqNotifyThrows(DispatchThrows):
    """An ``INNER_MULTI_QUEUE_OFFSET`` that throws in the reput's ``notifyMessageArrive4MultiQueue`` (@4.9.3-5.3.3)."""

    def __init__(self, thrown: LmqOffsetThrows, dispatched: bool):
        super().__init__(f"{thrown.why} in the reput's long-polling notify (notifyMessageArrive4MultiQueue)",
                         "the record's own entry" if dispatched else "no consume queue entry")


def notify_throw(topic: str, queue_id: int, properties: Mapping[str, str], dispatched: bool, *, rule: int) -> LmqNotifyThrows | None:
    """``LmqNotifyThrows`` where the reput's notify throws, else None (``rule``: its %RETRY% skip alone)."""
    try:
        multi_dispatch_targets(topic, queue_id, properties, rule=min(rule, LMQ_SKIP_RETRY))
    except LmqOffsetThrows as exc:
        return LmqNotifyThrows(exc, dispatched)
    return None


class NoPropertiesThrows(DispatchThrows):
    """A record without properties under 4.9.3's ``enableMultiDispatch``: ``checkMultiDispatchQueue`` throws an NPE."""

    def __init__(self, offset: int | None = None, undecided: bool = False):
        super().__init__("has no properties, on which 4.9.3's checkMultiDispatchQueue throws a NullPointerException "
                         "(enableMultiDispatch on)",
                         "nothing (not even the record's own entry)", offset, UNDECIDED_RELEASE if undecided else None)


def multi_dispatch_targets(topic: str, queue_id: int, properties: Mapping[str, str], *, rule: int) -> list[tuple[str, int, int]]:
    """The LMQ entries of an ``INNER_MULTI_DISPATCH`` record (``multiDispatchLmqQueue``, reference §3.6)."""
    queues, offsets = properties.get("INNER_MULTI_DISPATCH", ""), properties.get("INNER_MULTI_QUEUE_OFFSET", "")
    names, values = java_split(queues, MULTI_DISPATCH_SEPARATOR), java_split(offsets, MULTI_DISPATCH_SEPARATOR)
    if (rule == NO_MULTI_DISPATCH or not queues.strip() or not offsets.strip() or len(names) != len(values)
            or rule >= LMQ_SKIP_RETRY and topic.startswith("%RETRY%")
            or rule >= LMQ_SKIP_RETRY_TIMER_SCHEDULE and (topic in (SCHEDULE_TOPIC, TIMER_TOPIC) or rule >= LMQ_SKIP_SYSTEM and topic.startswith("rmq_sys_"))):
        return []
    targets = []
    for name, value in zip(names, values):
        if rule >= LMQ_SKIP_RETRY_TIMER_SCHEDULE and "/" in name:
            continue
        try:
            offset = java_parse_int(value, 64)
        except ValueError:
            raise LmqOffsetThrows(targets, name, value) from None
        targets.append((name, 0 if name.startswith(LMQ_PREFIX) else queue_id, offset))
    return targets

