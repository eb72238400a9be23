"""What every command shares: error handling at the edge, common options, opening the store."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import EXIT_INTERNAL, MqtoolError
from ..store import Store, StoreConfig, load_broker_config
from ..store.mappedfile import exit_on_sigbus
from .output import OutputFormat, stderr
from .state import State  # noqa: F401  (commands import it from here)


def fail(message: str, code: int) -> None:
    stderr.print(f"mqtool: error: {message}", markup=False)
    raise typer.Exit(code)


def note(message: str) -> None:
    if not State.quiet:
        stderr.print(f"mqtool: {message}", markup=False)


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
            sys.stderr.close()  # the reader went away (e.g. `| head`): not an error
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
    typer.Option("--broker-config", help="The broker's broker.conf: file sizes and index geometry (default: inferred from the files)."),
]
BrokerVersionOpt = Annotated[
    Optional[str],
    typer.Option("--broker-version", help="Version of the broker that wrote the store, e.g. 4.9.7 (default: detected)."),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format (table is the default everywhere).")]


def open_store(path: Path, broker_config: Path | None = None, broker_version: str | None = None) -> Store:
    exit_on_sigbus()  # a mapped file that shrinks or a full filesystem: one line and exit 3, not "Bus error"
    config = load_broker_config(broker_config) if broker_config else StoreConfig()
    return Store.open(path, config, broker_version)
