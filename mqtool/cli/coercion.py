"""Command-line values converted without pydantic, whose import (typer's ``TypeAdapter``) costs more than a whole lookup: the
plain kinds mqtool takes go through typer's pydantic-free helpers (``private_api.typer_conversion``), others as before."""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

from ..private_api import click_exceptions, typer_conversion

_typer = typer_conversion()

_INTEGER = re.compile(r"[+-]?[0-9]+")
_TYPER = object()  # "not a plain value: typer converts it"


def install() -> None:
    """Have every typer parameter convert its values as this module says."""
    if _typer is not None:
        _typer.TyperParameter.get_runtime_param = _get_runtime_param


if _typer is not None:

    def _get_runtime_param(param):
        if param._runtime_param is None:
            descriptor = param.type_descriptor
            param._runtime_param = PlainRuntimeParam(descriptor.parameter_info, descriptor.annotation, descriptor)
        return param._runtime_param

    @dataclass(frozen=True)
    class PlainRuntimeParam(_typer.RuntimeParam):
        """typer's ``RuntimeParam`` (its ``None`` and multi-value rules) for plain values."""

        descriptor: Any

        def _coerce_value(self, value: Any, param, ctx) -> Any:
            plain = self._plain(value, param, ctx)
            if plain is _TYPER:
                return _typer.build_runtime_param(self.descriptor)._coerce_value(value, param=param, ctx=ctx)
            return plain

        def _plain(self, value: Any, param, ctx) -> Any:
            kind, info = self.annotation, self.parameter_info
            if kind is str or kind is bool:
                return value if isinstance(value, kind) else _TYPER
            if _is_enum(kind):
                return _choice(value, kind, info, ctx, param)
            if kind is int:
                return _integer(value, info, ctx, param)
            if get_origin(kind) is list and get_args(kind) == (str,):
                return list(value) if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value) else _TYPER
            if get_origin(kind) is list and _is_enum(get_args(kind)[0]) and isinstance(value, (list, tuple)):
                return [_choice(v, get_args(kind)[0], info, ctx, param) for v in value]
            if kind is Path and info.path_type is None and _typer.routes_to_path(kind, info) and isinstance(value, (str, Path)):
                return _typer.coerce_cli_path(Path(value), _unchecked_access(info), path_type=Path, param=param, ctx=ctx)
            return _TYPER

    def _unchecked_access(info):
        """``info`` without typer's ``readable=True``: an unreadable path is mqtool's bad input, not a usage error."""
        if not info.readable:
            return info
        unchecked = copy.copy(info)
        unchecked.readable = False
        return unchecked


def _is_enum(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, Enum)


def _choice(value: Any, kind: type[Enum], info, ctx, param) -> Any:
    """``value`` as a member of ``kind``; refused in typer's words without pydantic's "Value error, "."""
    try:
        return _typer.coerce_cli_choice(value, choices=list(kind), case_sensitive=info.case_sensitive, ctx=ctx)
    except ValueError as exc:
        raise click_exceptions().BadParameter(str(exc).rstrip("."), ctx=ctx, param=param) from None


LONG = (-(1 << 63), (1 << 63) - 1)  # every number mqtool takes (an offset, a queue id, a count) is at most a Java long


def _integer(value: Any, info, ctx=None, param=None) -> Any:
    """``value`` as a plainly written int within the option's range (one past a Java long refused)."""
    if info.clamp:
        return _TYPER
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        return _TYPER
    if not LONG[0] <= value <= LONG[1]:
        raise click_exceptions().BadParameter(f"{value} is out of range: numbers are signed 64-bit, {LONG[0]} to {LONG[1]}", ctx=ctx, param=param)
    return _TYPER if (info.min is not None and value < info.min) or (info.max is not None and value > info.max) else value
