"""The ``mqtool`` command line: a thin typer shell over the store model and the planners.

Nothing imports this package except ``mqtool.__main__`` and the console script. Command modules
are imported only when their command runs (or prints its own help): ``mqtool --help`` and
``--version`` import typer and nothing heavy, and ``mqtool dump`` never loads what ``verify`` or
the repair commands need.
"""

from __future__ import annotations

import importlib
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from .. import __version__
from .state import State

# name -> (module, function, the first paragraph of its help). Keep this list in README order.
# The repair commands come from ``repair.register``. tests/test_cli_startup.py holds the help
# texts equal to the commands' own.
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "info": ("info", "info", "Show what a store holds: version, checkpoint, commit log range, queues, index files."),
    "dump": ("dump", "dump", "Decode store files: messages, consume queue entries, index entries or the checkpoint."),
    "verify": ("verify", "verify", "Check every CRC and every cross-file reference of a store; report each problem and where it is."),
    "truncate-dirty": ("repair", "register", "Cut the commit log after its last valid record: zero the dirty bytes of that segment, delete later segments, and cut consume queue entries at or past the new end."),
    "recover": ("repair", "register", "Do offline what the broker's start-up recovery would do: cut the commit log at the first invalid record, re-dispatch missing consume queue and index entries, update the checkpoint and remove the abort file, so a broker started afterwards cuts nothing."),
    "rebuild-cq": ("repair", "register", "Regenerate consume queue files from the commit log, byte for byte as the broker writes them."),
    "rebuild-index": ("repair", "register", "Regenerate every index file from the commit log (key and UNIQ_KEY lookups answer as the broker's)."),
    "query": ("query", "app", "The broker's own lookups, offline: by key, UNIQ_KEY, offsetMsgId, queue offset, or time."),
    "stats": ("stats", "stats", 'Per topic and queue: messages, bytes, store times, born-to-store delay, transaction types, delayed, compressed, retry and DLQ topics.'),
    "offsets": ("offsets", "offsets", 'Committed offsets (consumerOffset.json), delay levels (delayOffset.json) and 5.x timercheck: range, lag, findings.'),
    "salvage": ("salvage", "salvage", 'Every valid message of the commit log with its status: live, past-damage (the broker would discard it), stale.'),
    "survivors": ("survivors", "survivors", 'Which of these messages survived: found, found-not-consumable, duplicated, past-damage or missing, per id.'),
    "repair": ("repair", "register", 'From "crashed" to "sound": the broker\'s recovery, then the fixes the broker never makes.'),
    "apply": ("repair", "register", "Apply a saved plan exactly, refusing if any file it read or changes differs since planning."),
    "restore": ("repair", "register", "Put back, byte for byte, everything a repair command changed (also after an interrupted one). Refused if the files it left have changed since (a broker ran), unless --force."),
}


def load_command(name: str):
    """The click command ``name`` of ``LAZY_COMMANDS``, its module imported now."""
    module, function, _ = LAZY_COMMANDS[name]
    target = getattr(importlib.import_module(f".{module}", __name__), function)
    if isinstance(target, typer.Typer):  # a command group (``query``)
        return typer.main.get_group(target)
    holder = typer.Typer(rich_markup_mode=None)
    if function == "register":
        target(holder)
    else:
        holder.command(name=name)(target)
    return typer.main.get_group(holder).commands[name]


class LazyCommands(TyperGroup):
    """The top-level group: lazily loaded commands first, then any registered the usual way.
    Listing them in ``--help`` shows their help text without importing them."""

    listing = False

    def list_commands(self, ctx) -> list[str]:
        return [*LAZY_COMMANDS, *(name for name in self.commands if name not in LAZY_COMMANDS)]

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in self.commands or cmd_name not in LAZY_COMMANDS:
            return self.commands.get(cmd_name)
        if self.listing:
            return TyperCommand(cmd_name, help=LAZY_COMMANDS[cmd_name][2], short_help=LAZY_COMMANDS[cmd_name][2])
        self.commands[cmd_name] = command = load_command(cmd_name)
        return command

    def format_help(self, ctx, formatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


app = typer.Typer(
    name="mqtool",
    cls=LazyCommands,
    rich_markup_mode=None,
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


# Commands registered the usual way (``app.command()(fn)``) are imported at start-up; prefer an
# entry in LAZY_COMMANDS.


def main() -> None:
    app()
