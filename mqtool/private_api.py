"""Every private API of mqtool's dependencies, each guarded with a fallback (BENCHMARKS.md, ``cli/shutdown.py``)."""

from __future__ import annotations

import atexit
import threading
from types import ModuleType, SimpleNamespace
from typing import Callable


def arrow_compute() -> ModuleType:
    """The module that defines Arrow's ``call_function`` and its ``*Options`` classes."""
    try:
        import pyarrow._compute as module
    except ImportError:  # a pyarrow that moved it: the public module has the same names
        import pyarrow.compute as module
    return module


def typer_conversion() -> SimpleNamespace | None:
    """typer's runtime parameter and its pydantic-free converters, or None if this typer lacks them."""
    try:
        from typer._coercion import RuntimeParam, build_runtime_param
        from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path
        from typer.core import _TyperParameter
    except ImportError:
        return None
    return SimpleNamespace(RuntimeParam=RuntimeParam, build_runtime_param=build_runtime_param, coerce_cli_choice=coerce_cli_choice,
                           coerce_cli_path=coerce_cli_path, routes_to_path=routes_to_path, TyperParameter=_TyperParameter)


def click_exceptions() -> ModuleType:
    """The exceptions module of the click typer runs on (``ClickException``, ``UsageError``, ...)."""
    try:  # typer vendors a trimmed click since 0.2x
        from typer._click import exceptions
    except ImportError:  # an older typer on real click
        from click import exceptions
    return exceptions


def exit_steps() -> tuple[Callable[[], None], Callable[[], None]] | None:
    """``threading._shutdown`` and ``atexit._run_exitfuncs``, what exit runs before its teardown; None if either lacks."""
    steps = getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)
    return steps if all(callable(s) for s in steps) else None
