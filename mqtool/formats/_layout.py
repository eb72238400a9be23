"""Fast ``struct`` codecs derived from the construct schemas, exact or refused (held equal by ``test_format_codecs.py``)."""

from __future__ import annotations

import struct
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple

if TYPE_CHECKING:
    import construct


class FixedLayout(NamedTuple):
    """A run of fixed-width fields: their names, one ``struct.Struct`` and byte offsets."""

    names: tuple[str, ...]
    codec: struct.Struct
    offsets: Mapping[str, int]

    @property
    def size(self) -> int:
        return self.codec.size

    def offset_of(self, name: str) -> int:
        return self.offsets[name]


def written(*fields: tuple[str | None, str]) -> FixedLayout:
    """A layout written out: ``(name, struct code)`` fields, big-endian, ``None`` naming padding (as ``derive_fixed``)."""
    codes, names, offsets, pos = [">"], [], {}, 0
    for name, code in fields:
        codes.append(code)
        if not code.endswith("x"):
            names.append(name)
        offsets[name] = pos
        pos += struct.calcsize(">" + code)
    return FixedLayout(tuple(names), struct.Struct("".join(codes)), offsets)


def declared_on_use(module: str, declare: Callable[[], dict[str, Any]], names: tuple[str, ...]):
    """A module ``__getattr__`` (PEP 562) running ``declare`` (construct) the first time one of ``names`` is read."""

    def __getattr__(name: str):
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        namespace = vars(sys.modules[module])
        namespace.update(declare())
        return namespace[name]

    return __getattr__


def _field_code(subcon: construct.Construct, context: Mapping[str, Any]) -> str | None:
    """The struct code of one field, or None where its width depends on data."""
    import construct

    if isinstance(subcon, construct.Renamed):
        subcon = subcon.subcon
    while isinstance(subcon, construct.IfThenElse):
        try:
            taken = subcon.condfunc(context) if callable(subcon.condfunc) else subcon.condfunc
        except (KeyError, AttributeError):
            return None
        subcon = subcon.thensubcon if taken else subcon.elsesubcon
    if isinstance(subcon, construct.FormatField):
        if subcon.fmtstr[0] != ">":
            raise TypeError(f"only big-endian fields can be derived, got {subcon.fmtstr!r}")
        return subcon.fmtstr[1:]
    if isinstance(subcon, construct.Bytes) and isinstance(subcon.length, int):
        return f"{subcon.length}s"
    return f"{subcon.length}x" if isinstance(subcon, construct.Padded) and isinstance(subcon.subcon, construct.Pass.__class__) else None


def derive_fixed(schema: construct.Struct, context: Mapping[str, Any] | None = None, *, stop_at: str | None = None) -> FixedLayout:
    """The leading fixed-width block of ``schema`` (up to ``stop_at``), ``IfThenElse`` branches decided by ``context``."""
    context = dict(context or {})
    fields = []
    for sc in schema.subcons:
        if stop_at is not None and sc.name == stop_at:
            break
        code = _field_code(sc, context)
        if code is None:
            if stop_at is not None:
                raise TypeError(f"field {sc.name!r} before {stop_at!r} is not fixed-width")
            break
        fields.append((sc.name, code))
    layout = written(*fields)
    if not layout.names:
        raise TypeError("schema has no leading fixed-width field")
    return layout


def derive_whole(schema: construct.Struct, context: Mapping[str, Any] | None = None) -> FixedLayout:
    """Derive a schema that must be fixed-width from end to end (CQ entry, index entry...)."""
    layout = derive_fixed(schema, context)
    if len(layout.offsets) != len(schema.subcons):
        missing = [sc.name for sc in schema.subcons if sc.name not in layout.offsets]
        raise TypeError(f"schema is not fixed-width; cannot derive {missing}")
    if schema.sizeof() != layout.size:
        raise TypeError(f"derived size {layout.size} != schema size {schema.sizeof()}")
    return layout


def derive_field(schema: construct.Struct, name: str, context: Mapping[str, Any] | None = None) -> struct.Struct:
    """The ``struct.Struct`` of one fixed-width field of ``schema`` (branches decided by ``context``)."""
    for sc in schema.subcons:
        if sc.name == name:
            code = _field_code(sc, dict(context or {}))
            if code is None:
                raise TypeError(f"field {name!r} is not fixed-width in this context")
            return struct.Struct(">" + code)
    raise KeyError(name)
