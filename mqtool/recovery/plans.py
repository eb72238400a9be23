"""A plan is data: frozen dataclasses round-tripping through the JSON docs/recovery.md describes. ``actions``: the file operations
``apply`` performs in order; ``inputs`` fingerprints the files, so a saved plan is refused once they change."""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PLAN_FORMAT = "mqtool-plan/1"


@dataclass(frozen=True)
class Fingerprint:
    """A file as planned: size, mtime (ns) and, for saved plans, CRC32 of its bytes."""

    path: str
    size: int
    mtime_ns: int
    crc32: int | None = None


@dataclass(frozen=True)
class Message:
    """A message named by a plan; ``topic`` None when only the record's fixed header decodes."""

    offset: int
    size: int
    topic: str | None
    queue_id: int
    queue_offset: int
    transaction_type: str
    store_timestamp: int
    msg_id: str
    uniq_key: str | None
    keys: tuple[str, ...]
    crc_ok: bool


@dataclass(frozen=True)
class CommitLogPlan:
    """Where the valid commit log ends (``valid_end``, ``end_reason``) and what is zeroed and deleted."""

    min_offset: int
    end_of_files: int
    scan_from: int
    scan_rule: str
    records_scanned: int
    valid_end: int
    end_reason: str
    end_detail: str
    end_is_damage: bool
    first_invalid: Message | None
    last_valid_offset: int
    cut_segment: str | None
    zero_from: int
    zero_to: int
    delete_segments: tuple[str, ...]


@dataclass(frozen=True)
class QueueRef:
    """A consume queue entry that points at a message lost by the cut."""

    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    size: int


@dataclass(frozen=True)
class LostMessages:
    """Records after the valid end (``messages``: the first ``limit`` of them), and consume queue
    entries pointing past the end at messages whose bytes no longer decode (``unreadable``)."""

    count: int
    bytes: int
    messages: tuple[Message, ...]
    complete: bool
    other_bytes: int  # non-zero bytes after the end that belong to no record
    first_other_offset: int | None
    unreadable: tuple[QueueRef, ...] = ()
    stale: int = 0  # of ``count``: stored before a record kept, overwritten history the broker already dropped (not lost now)
    stale_bytes: int = 0

    @property
    def lost_now(self) -> int:
        """Records this cut really discards (``count`` minus the stale ones)."""
        return self.count - self.stale


@dataclass(frozen=True)
class DispatchPhase:
    """A run of records the broker re-dispatches to consume queues and index: ``recovery`` (by the
    recovery scan) or ``reput`` (at start-up); ``tags``: ``tags-hash`` for 4.9.2-4.9.8 recovery (§3.5)."""

    name: str
    start: int
    stop: int
    discipline: str
    tags: str
    consume_queues: bool
    index: bool
    records: int
    cq_records: int
    scheduled_with_tags_hash: int = 0
    after_phys: int | None = None  # only records with PHYSICALOFFSET > this (5.3.2+ normal recovery)


@dataclass(frozen=True)
class QueueSeed:
    """A queue's state when a dispatch phase starts: next write position (None: no file)."""

    write_pos: int | None
    max_phys_offset: int


@dataclass(frozen=True)
class QueueFile:
    """One consume queue file's fate (``QueueSim.fates``)."""

    name: str
    action: str
    zero_from: int | None = None


@dataclass(frozen=True)
class MisplacedEntry:
    """An entry written at its queue's write position, not its record's QUEUEOFFSET (reference §5.10)."""

    queue_offset: int
    offset: int
    record_queue_offset: int


@dataclass(frozen=True)
class QueuePlan:
    topic: str
    queue_id: int
    min_before: int
    max_before: int
    max_after: int
    min_after: int
    dropped_by_recovery: int  # non-zero units after the first invalid unit (ignored by the broker)
    cut: int  # entries removed because they point at or past the valid end
    resurrected: int  # stale entries below the end that truncateDirtyLogicFiles brings back
    added: int
    fillers: int
    first_added: int | None  # queue offset
    last_added: int | None
    seeds: tuple[QueueSeed | None, ...]  # per dispatch phase (None: carry on)
    files: tuple[QueueFile, ...]
    misplaced: tuple[MisplacedEntry, ...] = ()  # entries written away from their record's QUEUEOFFSET, in writing order


@dataclass(frozen=True)
class IndexFilePlan:
    name: str
    action: str  # "keep" | "delete" | "append" | "create"; a rebuild's: "unchanged" (it holds the rebuild's bytes) | "rewrite"
    reason: str
    entries_before: int
    entries_after: int
    begin_timestamp: int
    end_timestamp: int
    end_phy_offset: int


@dataclass(frozen=True)
class IndexPlan:
    enabled: bool
    hash_slot_num: int
    index_num: int
    files: tuple[IndexFilePlan, ...]
    records_indexed_from: int | None
    keys_added: int
    index_msg_timestamp_after: int | None  # set when a file fills (IndexService.flush)
    after_name: str | None  # new files sort after this name


@dataclass(frozen=True)
class CheckpointPlan:
    exists: bool
    before: dict[str, int]
    after: dict[str, int]

    @property
    def changed(self) -> bool:
        return not self.exists or self.before != self.after


@dataclass(frozen=True)
class Action:
    """One file operation of ``apply`` (docs/recovery.md lists the ops and what ``start`` and ``end``
    mean for each); ``unit``: what ``fill-units`` writes (None in a plan saved before it: ``cqfmt.FILLER``)."""

    op: str
    path: str
    start: int | None = None
    end: int | None = None
    note: str = ""
    unit: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Expected:
    """A finding ``verify`` will report after the plan: ``lost_data``, else the step that removes it (``fixed_by``)."""

    kind: str
    severity: str
    file: str | None
    offset: int | None
    message: str
    lost_data: bool
    fixed_by: str | None = None


@dataclass(frozen=True)
class Plan:
    command: str
    store: str
    created_ms: int
    broker_version: str
    version_source: str
    mode: str | None  # recover: "abnormal" | "normal"
    options: dict[str, Any]
    commitlog: CommitLogPlan | None
    lost: LostMessages | None
    dispatch: tuple[DispatchPhase, ...]
    queues: tuple[QueuePlan, ...]
    index: IndexPlan | None
    checkpoint: CheckpointPlan | None
    remove_abort: bool
    notes: tuple[str, ...]
    actions: tuple[Action, ...]
    inputs: tuple[Fingerprint, ...]
    format: str = PLAN_FORMAT
    verify_after: tuple[Expected, ...] = ()  # recover: what `verify` still reports afterwards
    refused: str | None = None  # recover: why the broker refuses to start after the log's load (``nextstart.later_refusal``)
    # recover: records it keeps in the log whose consume queue entries it cuts and no later dispatch writes again (``DLedgerLog.unqueued``)
    unqueued: tuple[QueueRef, ...] = ()

    @classmethod
    def new(cls, command: str, root: Path, version: str, source: str, actions, **parts) -> "Plan":
        """A plan of the store at ``root`` made now; ``parts``: its other fields by name (the rest empty)."""
        empty = {"mode": None, "options": {}, "commitlog": None, "lost": None, "dispatch": (), "queues": (), "index": None, "checkpoint": None,
                 "remove_abort": False, "notes": (), "inputs": ()}
        return cls(command, str(Path(root).resolve()), int(time.time() * 1000), version, source, actions=tuple(actions), **{**empty, **parts})

    @property
    def is_empty(self) -> bool:
        return not self.actions

    def to_dict(self) -> dict[str, Any]:
        return _to_json_value(self)

    def to_json(self) -> str:
        """The plan as ``--plan-out`` saves it: one line per option, queue, action, ... (``readable_json``)."""
        return readable_json(self.to_dict(), PLAN_LEVELS)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "Plan":
        if not isinstance(doc, dict):  # JSON, but an array, a string or a number: no plan
            kind = {list: "an array", str: "a string", bool: "true or false", type(None): "null"}.get(type(doc), "a number")
            raise ValueError(f"not a {PLAN_FORMAT} document ({kind}, not a JSON object)")
        if doc.get("format") != PLAN_FORMAT:
            raise ValueError(f"not a {PLAN_FORMAT} document (format {doc.get('format')!r})")
        return _from_json_value(cls, doc)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))


# ---- JSON conversion ------------------------------------------------------------------------

PLAN_LEVELS = 2  # ``readable_json``'s ``levels`` for a plan document; one more for a document holding it (a backup manifest)
_compact = json.JSONEncoder(ensure_ascii=False).encode  # no indent: CPython's C encoder


def readable_json(value: Any, levels: int) -> str:
    """``value`` as JSON an engineer can read in ``less``, written by the C encoder: objects above depth ``levels`` and arrays
    down to it one member per line (an array of numbers alone, as a file's ``[size, mtime_ns]``, stays on its line), every
    deeper value on one line (``json.dumps(indent=...)`` runs CPython's pure-Python encoder over the whole document, and an
    apply encodes its manifest several times). ``json.loads`` reads it back to ``value``; object keys must be strings."""
    out: list[str] = []
    _readable(value, 0, levels, out)
    return "".join(out)


def _readable(value: Any, depth: int, levels: int, out: list[str]) -> None:
    if isinstance(value, dict) and value and depth < levels:
        pad, first = "\n" + " " * (depth + 1), True
        for key, member in value.items():
            if not isinstance(key, str):  # ``json.dumps`` would write 1 as "1": not read back as the key it was
                raise TypeError(f"readable_json: key {key!r} is not a string")
            out.append(("{" if first else ",") + pad + _compact(key) + ": ")
            _readable(member, depth + 1, levels, out)
            first = False
        out.append("\n" + " " * depth + "}")
    elif isinstance(value, (list, tuple)) and depth <= levels and any(isinstance(v, (str, list, tuple, dict)) for v in value):
        pad, first = "\n" + " " * (depth + 1), True
        for member in value:
            out.append(("[" if first else ",") + pad)
            _readable(member, depth + 1, levels, out)
            first = False
        out.append("\n" + " " * depth + "]")
    else:
        out.append(_compact(value))


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _to_json_value(value: Any) -> Any:
    kind = type(value)
    if kind in _SCALARS:  # most of a plan's values: no dataclass lookup for them
        return value
    names = _field_names(kind)
    if names is not None:
        return {name: _to_json_value(getattr(value, name)) for name in names}
    if isinstance(value, (list, tuple)):
        return [_to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _to_json_value(v) for k, v in value.items()}
    return value


@functools.cache
def _field_names(kind: type) -> tuple[str, ...] | None:
    """A dataclass type's field names in order (``dataclasses.fields`` builds them anew on every call); None for other types."""
    return tuple(f.name for f in dataclasses.fields(kind)) if dataclasses.is_dataclass(kind) else None


_type_hints = functools.cache(typing.get_type_hints)  # a plan dataclass's field types, each string annotation evaluated once


def _from_json_value(tp: Any, value: Any) -> Any:
    kind, parts = _shape(tp)
    if kind == "union":
        if value is None:
            return None
        (inner,) = parts
        return _from_json_value(inner, value)
    if kind == "dataclass":
        return tp(**{name: value[name] if plain else _from_json_value(hint, value[name]) for name, hint, plain in parts if name in value})
    if kind == "tuple":
        (inner, _ellipsis) = parts
        return tuple(_from_json_value(inner, v) for v in value)
    return value


@functools.cache
def _shape(tp: Any) -> tuple[str, Any]:
    """What ``_from_json_value`` reads a ``tp`` as, worked out once per type: a union (its types but None), a dataclass (each
    field's name, type and whether its value is taken as it is), a tuple (its type arguments), or a value taken as it is."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return "union", [a for a in typing.get_args(tp) if a is not type(None)]
    if dataclasses.is_dataclass(tp):
        hints = _type_hints(tp)
        return "dataclass", [(f.name, hints[f.name], _as_it_is(hints[f.name])) for f in dataclasses.fields(tp)]
    if origin is tuple:
        return "tuple", typing.get_args(tp)
    return "plain", None


def _as_it_is(tp: Any) -> bool:
    """Whether ``_from_json_value`` returns a value of type ``tp`` unchanged (``_shape``'s "plain", without its recursion)."""
    return typing.get_origin(tp) not in (typing.Union, types.UnionType, tuple) and not dataclasses.is_dataclass(tp)


@dataclass(frozen=True)
class PlanOptions:
    """What a planning command was asked (its options; ``None``: the store's own setting)."""

    mode: str | None = None  # recover: "abnormal" | "normal" | None (from the abort file)
    index_safe: bool | None = None  # messageIndexSafe (None: broker.conf's value)
    lost_limit: int = 1000
    full_scan: bool = False  # truncate-dirty: validate every segment, not only the broker's range
    topic: str | None = None  # rebuild-cq
    queue_id: int | None = None
    respect_topic_config: bool = False
    queues: frozenset[tuple[str, int]] | None = None  # rebuild-cq: only these (topic, queue id) (repair)
    keep_placed: bool = False  # recover: every queue's placed units kept readable (``QueueSim.keep_placed``: survivors reads them)
    scan_from: int | None = None  # rebuild-cq: where the recovery before it scans from (``repair``'s, after its recovery)
