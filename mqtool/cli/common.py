"""What every command shares: error handling at the edge, common options, opening the store."""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_INTERNAL, MqtoolError
from ..store import Store, StoreConfig, load_broker_config
from .output import OutputFormat
from .state import State
from .terminal import clear_bars, note, stderr

__all__ = ["State", "note", "fail", "guarded", "quiet_broken_pipe", "shell_path", "open_store"]


def fail(message: str, code: int) -> None:
    clear_bars()
    stderr.print(f"mqtool: error: {message}", markup=False)
    raise typer.Exit(code)


def shell_path(path) -> str:
    """``path`` quoted for pasting into a POSIX shell (spaces, quotes, non-ASCII)."""
    return shlex.quote(str(path))


def quiet_broken_pipe() -> None:
    """The reader of stdout went away (``| head``): point stdout at /dev/null so the final flush
    at exit cannot fail again, and say nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def guarded(fn):
    """Turn every failure into one line on stderr and a documented exit code (``--debug``
    re-raises unexpected errors with their traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except MqtoolError as exc:
            if State.debug:
                raise
            fail(str(exc), exc.exit_code)
        except BrokenPipeError:
            quiet_broken_pipe()  # the reader went away (e.g. `| head`): not an error
            raise typer.Exit(0)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Exception as exc:  # noqa: BLE001 - the edge of the program
            if State.debug:
                raise
            fail(f"internal error: {type(exc).__name__}: {exc} (run with --debug for a traceback)", EXIT_INTERNAL)

    return wrapper


BrokerConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--broker-config", metavar="FILE", help="The broker's broker.conf: file sizes and index geometry (default: inferred from the files)."),
]
VERSION_TEXT = re.compile(r"\d+(\.\d+){0,2}")


def _broker_version(value: str | None) -> str | None:
    if value is not None and not VERSION_TEXT.fullmatch(value.strip()):
        raise typer.BadParameter(f"{value!r} is not a version of the form X.Y.Z, e.g. 4.9.7", param_hint="'--broker-version'")
    return value


BrokerVersionOpt = Annotated[
    Optional[str],
    typer.Option("--broker-version", metavar="X.Y.Z", callback=_broker_version, help="Version of the broker that wrote the store, e.g. 4.9.7 (default: detected)."),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format (table is the default everywhere).")]


def open_store(path: Path, broker_config: Path | None = None, broker_version: str | None = None) -> Store:
    config = load_broker_config(broker_config) if broker_config else StoreConfig()
    return Store.open(path, config, broker_version)
