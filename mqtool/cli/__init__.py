"""The ``mqtool`` command line: a thin typer shell over the store model and the planners.

Nothing imports this package except ``mqtool.__main__`` and the console script.
"""

from __future__ import annotations

from typing import Annotated

import typer

from .. import __version__
from .common import State
from .dump import dump
from .info import info
from .repair import register as register_repair
from .verify import verify

app = typer.Typer(
    name="mqtool",
    help="Decode, check and repair Apache RocketMQ broker store directories offline (broker stopped).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mqtool {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option("--debug", help="Show a traceback for unexpected errors.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", help="No progress bars or notes on stderr.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")] = False,
) -> None:
    State.debug, State.quiet = debug, quiet


# Commands, one module each (keep this list in README order).
app.command()(info)
app.command()(dump)
app.command()(verify)
register_repair(app)  # truncate-dirty, recover, rebuild-cq, rebuild-index, apply, restore


def main() -> None:
    app()
