"""Every private API of mqtool's dependencies that mqtool relies on, here and nowhere else.

Each is kept because its start-up saving is worth it (BENCHMARKS.md, "Start-up and lookups")
or because the public package does not export the name; each is guarded, so a release that moves
it costs that saving and nothing else:

- ``arrow_compute``: ``pyarrow._compute``, where ``call_function`` and the options classes are
  defined; ``pyarrow.compute`` wraps Arrow's ~290 functions in Python functions as it is
  imported, in every process. Fallback: ``pyarrow.compute``.
- ``typer_conversion``: typer's pydantic-free value helpers and its runtime parameter
  (``typer._coercion``, ``typer._param_types``, ``typer.core._TyperParameter``), for
  ``cli/coercion.py``; importing pydantic and building adapters is most of the CPU of ``info`` on
  the sample store. Fallback: None, typer converts as it always does.
- ``click_exceptions``: the exception classes of the click typer vendors (``typer._click``),
  which typer does not re-export and the CLI catches and raises. Fallback: ``click.exceptions``
  (a typer on real click).
- ``exit_steps``: ``threading._shutdown`` (waits for non-daemon threads after running the
  callbacks that stop idle pool workers) and ``atexit._run_exitfuncs``, what the interpreter's
  exit runs before its teardown; ``cli/shutdown.py`` runs them, then ends the process with
  ``os._exit`` (skipping the teardown of numpy, pyarrow and the loaded modules).
  Fallback: None, the process exits the usual way.
"""

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
    """What the interpreter's exit runs before its teardown, in order: ``threading._shutdown`` and
    ``atexit._run_exitfuncs``; None if this Python lacks either."""
    steps = getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)
    return steps if all(callable(s) for s in steps) else None
