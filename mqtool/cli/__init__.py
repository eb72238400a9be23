"""The ``mqtool`` command line: a thin typer shell over the store model and the planners. Command modules are imported only when
their command runs; ``MqtoolGroup.main`` is the program's edge (usage errors exit 2 in one line, a closed pipe exits 0)."""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
import sys
from collections.abc import Mapping
from typing import Annotated

import typer
from typer.core import TyperCommand, TyperGroup

from .. import __version__
from ..errors import EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, MqtoolError
from ..private_api import click_exceptions
from .state import State

_exceptions = click_exceptions()
ClickException, NoArgsIsHelpError, UsageError = _exceptions.ClickException, _exceptions.NoArgsIsHelpError, _exceptions.UsageError

# name -> (module, function, its help's first paragraph), in README order (tests/test_dump_columnar.py checks the texts)
LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "info": ("info", "info", "Show what a store holds: version, checkpoint, commit log range, topics, queues, index files."),
    "dump": ("dump", "dump", "Decode store files: messages, consume queue and index entries, the checkpoint, the timer log or DLedger entries."),
    "verify": ("verify", "verify", "Check every CRC and every cross-file reference of a store; report each problem and where it is."),
    "query": ("query", "app", "The broker's own lookups, offline: by key, UNIQ_KEY, offsetMsgId, queue offset, or time."),
    "stats": ("stats", "stats", 'Per topic and queue: messages, bytes, store times, born-to-store delay, transaction types, delayed, compressed, retry and DLQ topics.'),
    "offsets": ("offsets", "offsets", 'Committed offsets (consumerOffset.json), delay levels (delayOffset.json) and 5.x timercheck: range, lag, findings.'),
    "survivors": ("survivors", "survivors", 'Which of these messages survived: found, found-not-consumable, duplicated, past-damage or missing, per id.'),
    "salvage": ("salvage", "salvage", 'Every valid message of the commit log with its status: live, past-damage (the broker would discard it), stale.'),
    "recover": ("repair", "recover", "Do offline what the broker's start-up recovery would do: cut the commit log at the first invalid record, re-dispatch missing consume queue and index entries, update the checkpoint and remove the abort file, so a broker started afterwards cuts nothing."),
    "repair": ("repair", "repair", 'From "crashed" to "sound": the broker\'s recovery, then the fixes the broker never makes.'),
    "truncate-dirty": ("repair", "truncate_dirty", "Cut the commit log after its last valid record: zero the dirty bytes of that segment, delete later segments, and cut consume queue entries at or past the new end."),
    "rebuild-cq": ("repair", "rebuild_cq", "Regenerate consume queue files from the commit log, byte for byte as the broker writes them."),
    "rebuild-index": ("repair", "rebuild_index", "Regenerate every index file from the commit log (key and UNIQ_KEY lookups answer as the broker's)."),
    "apply": ("repair", "apply", "Apply a saved plan exactly, refusing if any file it read or changes differs since planning."),
    "restore": ("repair", "restore_cmd", "Put back, byte for byte, everything a repair command changed (also after an interrupted one). Refused if the files it left have changed since (a broker ran), unless --force."),
}


def load_command(name: str):
    """The click command ``name`` of ``LAZY_COMMANDS``, its module imported now."""
    module, function, _ = LAZY_COMMANDS[name]
    target = getattr(importlib.import_module(f".{module}", __name__), function)
    if isinstance(target, typer.Typer):  # a command group (``query``): the options on it and on each subcommand
        return command_group(target)
    holder = typer.Typer(rich_markup_mode=None)
    holder.command(name=name)(target)
    return _subcommand(holder, holder.registered_commands[0])


def command_group(target: typer.Typer):
    """The click group of ``target`` (``query``), its subcommands made on first use."""
    shell = copy.copy(target)
    shell.registered_commands = []
    group = typer.main.get_group(shell)
    add_global_options(group)
    makers = {info.name: functools.partial(_subcommand, target, info) for info in target.registered_commands}  # each named by query.py
    group.commands = CommandsOnUse(makers)
    return group


def _subcommand(target: typer.Typer, info):
    """The click command of ``target``'s command ``info`` alone, with the global options."""
    holder = copy.copy(target)
    holder.registered_commands = [info]
    (command,) = typer.main.get_group(holder).commands.values()
    add_global_options(command)
    command.short_help = " ".join(command.help.split("\n\n")[0].split())  # a group's listing (``query``): whole, as ``mqtool --help``'s
    return command


class CommandsOnUse(Mapping):
    """A group's subcommands by name (all listed), each made the first time it is looked up."""

    def __init__(self, makers: dict):
        self.makers = dict(makers)
        self.made: dict = {}

    def __getitem__(self, name: str):
        if name not in self.made:
            self.made[name] = self.makers[name]()  # KeyError: no such command
        return self.made[name]

    def __iter__(self):
        return iter(self.makers)

    def __len__(self) -> int:
        return len(self.makers)


def _error(message: str, code: int, *, traceback: bool = False) -> int:
    """``message`` as the one error line (``traceback``: under ``--debug``); terminal code imported only here."""
    from .terminal import debug_traceback, error_line

    if traceback:
        debug_traceback()
    error_line(" ".join(str(message).split()), code)
    return code


def _set(flag: str):
    """An option's callback: ``State.<flag>`` set when the option is given."""
    return lambda value: setattr(State, flag, True) if value else None


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"mqtool {__version__}")
        raise typer.Exit()


QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", callback=_set("quiet"), help="No progress bars or notes on stderr.")]
DebugOpt = Annotated[bool, typer.Option("--debug", callback=_set("debug"), help="Show the traceback of an error before its line (same exit code).")]
VersionOpt = Annotated[bool, typer.Option("--version", "-V", callback=_print_version, is_eager=True, help="Print the version and exit.")]


def _global_options(quiet: QuietOpt = False, debug: DebugOpt = False, version: VersionOpt = False) -> None:
    """The options every command accepts after its name too (they only set ``State``)."""


@functools.cache
def _global_option_templates() -> tuple:
    """The click parameters typer makes of ``_global_options`` (its signature read once), not passed to a command's function."""
    holder = typer.Typer(add_completion=False)
    holder.command()(_global_options)
    params = tuple(p for p in typer.main.get_command(holder).params if "--help" not in p.opts)
    for p in params:
        p.expose_value = False
    return params


def add_global_options(command) -> None:
    """Give ``command`` the global options it lacks, before ``--help``; arguments shown by name."""
    plain_arguments(command)
    refuse_both_ways(command)
    taken = {opt for p in command.params for opt in p.opts}
    help_at = next((i for i, p in enumerate(command.params) if "--help" in p.opts), len(command.params))
    command.params[help_at:help_at] = [copy.copy(o) for o in _global_option_templates() if not taken.intersection(o.opts)]


def plain_arguments(command) -> None:
    """Show ``command``'s arguments by name alone in usage and help, as POSIX usage lines do."""
    for param in getattr(command, "params", ()):
        if getattr(param, "param_type_name", None) != "argument" or not hasattr(param, "display_name_raw"):
            continue
        name = param.display_name_raw + ("..." if param.nargs != 1 and param.metavar is None else "")
        usage = name if param.required else f"[{name}]"
        param._usage_display_name = lambda usage=usage: usage
        if not getattr(getattr(param, "type_descriptor", None), "is_choice", False):  # choices still listed
            param.display_type_rich = lambda ctx: None


def refuse_both_ways(command) -> None:
    """A flag pair given both ways (``--abnormal --normal``) is a usage error, not the last one silently."""
    pairs = [(p.opts, p.secondary_opts) for p in command.params if getattr(p, "secondary_opts", None)]
    if not pairs:
        return
    parse_args = command.parse_args

    def checked(ctx, args):
        given = set(args[: args.index("--")] if "--" in args else args)
        for on, off in pairs:
            both = [o for o in on if o in given][:1] + [o for o in off if o in given][:1]
            if len(both) == 2:
                raise UsageError(f"{both[0]} and {both[1]} contradict each other: give one of them", ctx=ctx)
        return parse_args(ctx, args)

    command.parse_args = checked


@contextlib.contextmanager
def interrupt_aborts():
    """A Ctrl-C outside ``guarded`` as ``typer.Abort``, said "interrupted", not typer's silent exit 130."""
    try:
        yield
    except KeyboardInterrupt:
        raise typer.Abort() from None


class MqtoolGroup(TyperGroup):
    """The ``mqtool`` group: lazily loaded commands, global options on every command, errors as one line."""

    listing = False

    def list_commands(self, ctx) -> list[str]:
        return list(LAZY_COMMANDS)

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in self.commands or cmd_name not in LAZY_COMMANDS:
            return self.commands.get(cmd_name)
        if self.listing:
            summary = LAZY_COMMANDS[cmd_name][2]
            return TyperCommand(cmd_name, help=summary, short_help=summary)  # listed whole, wrapped to the width: not cut short with "..."
        self.commands[cmd_name] = command = load_command(cmd_name)
        return command

    def resolve_command(self, ctx, args):
        """Typer's, with "did you mean" drawn from every command, loaded or not."""
        try:
            return super().resolve_command(ctx, args)
        except UsageError as error:
            from difflib import get_close_matches

            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                error.message = f"{error.message.rstrip('.')}. Did you mean {', '.join(map(repr, matches))}?"
            raise

    def make_context(self, info_name, args, parent=None, **extra):
        with interrupt_aborts():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx):
        with interrupt_aborts():
            return super().invoke(ctx)

    def format_help(self, ctx, formatter) -> None:
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from .coercion import install

        State.debug = State.quiet = State.version_said = State.root_said = False
        State.broker_configs = {}
        State.args = [str(a) for a in (sys.argv[1:] if args is None else args)]
        install()  # values converted without pydantic
        try:
            code = super().main(args, prog_name or "mqtool", complete_var, standalone_mode=False, **extra)
            code = code if isinstance(code, int) else EXIT_OK
        except NoArgsIsHelpError as exc:
            typer.echo(exc.ctx.get_help())
            code = EXIT_USAGE
        except UsageError as exc:
            hint = f"; see '{exc.ctx.command_path} --help'" if exc.ctx is not None else ""
            message, name = exc.format_message().rstrip("."), getattr(exc, "option_name", None) or ""
            if name[1:].isdigit():  # `query offset STORE T 0 -1`: click takes a negative argument for an option, "No such option: -1"
                message = f"{name}: a negative number, where queue ids, offsets and counts are 0 or more"
            code = _error(message + hint, EXIT_USAGE)
        except ClickException as exc:
            code = _error(exc.format_message(), exc.exit_code)
        except typer.Abort:
            code = _error("interrupted", 130)
        except MqtoolError as exc:
            code = _error(str(exc), exc.exit_code, traceback=True)
        except BrokenPipeError:
            from .common import silence_stdout

            silence_stdout()
            code = EXIT_OK
        except Exception as exc:  # noqa: BLE001 - outside a command (option callbacks, completion)
            hint = "" if State.debug else " (run with --debug for a traceback)"
            code = _error(f"internal error: {type(exc).__name__}: {exc}{hint}", EXIT_INTERNAL, traceback=True)
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    name="mqtool", cls=MqtoolGroup,
    epilog="Exit codes: 0 ok, 1 findings, 2 usage, 3 bad input, 4 refused, 5 internal error, 130 interrupted (Ctrl-C).", no_args_is_help=True,
    suggest_commands=False, rich_markup_mode=None, pretty_exceptions_enable=False, pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 120},
)


@app.callback()
def _options(debug: DebugOpt = False, quiet: QuietOpt = False, version: VersionOpt = False) -> None:
    """Decode, check and repair Apache RocketMQ broker store directories offline (broker stopped).

    \b
    Examples:
      mqtool info /data/rocketmq/store
      mqtool verify /data/rocketmq/store
      mqtool recover /data/rocketmq/store
    """
    from ..allocator import keep_freed_memory
    from ..store.mappedfile import exit_on_sigbus
    from .terminal import color

    exit_on_sigbus(erase_line=color(sys.stderr))  # every command: a mapped file that shrinks, or a full filesystem, is one line and exit 3
    keep_freed_memory()  # every command: the batches' memory is reused, not faulted in again (``allocator.py``)


def interrupts_in_finalizers_kept() -> None:
    """A Ctrl-C in a finalizer is kept, not printed as "Exception ignored": exit 130 (``guarded``)."""
    previous = sys.unraisablehook

    def hook(unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            State.interrupt_kept = True
        else:
            previous(unraisable)

    sys.unraisablehook = hook


def main() -> None:
    """The console script: the command, then the process's end without the interpreter's teardown (``shutdown.py``)."""
    from .shutdown import exit_process
    from .terminal import complete_stdout_writes, open_closed_streams

    open_closed_streams()
    complete_stdout_writes()
    interrupts_in_finalizers_kept()
    # no linear algebra: numpy's OpenBLAS need not start a thread per CPU at import
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        app()
    except SystemExit as end:
        exit_process(end.code)
    except KeyboardInterrupt:  # before ``MqtoolGroup.main`` (typer making the group) or in its last line
        exit_process(_error("interrupted", 130))
    exit_process(0)
