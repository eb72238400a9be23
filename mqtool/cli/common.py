"""What every command shares: error handling at the edge, common options, opening the store."""

from __future__ import annotations

import errno
import functools
import os
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer

from ..errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_INTERNAL, MqtoolError
from ..fileops import shell_path  # noqa: F401 - the commands' import of it
from ..store import Store, StoreConfig, load_broker_config
from ..store.commitlog import ScanEnd
from ..store.records import message_dict
from .output import OutputFormat
from .state import State
from .terminal import debug_traceback, error_line, note, to_devnull

def fail(message: str, code: int) -> None:
    error_line(message, code)
    raise typer.Exit(code)


# What the machine refused (full disk, bad path, read-only filesystem, I/O error), not a bug in mqtool.
ENVIRONMENT_ERRORS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO,
    errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EMFILE, errno.ENFILE,
})


def environment_error(exc: OSError) -> str | None:
    """``out.jsonl: No space left on device`` for an ``OSError`` the machine caused (its file quoted as a shell reads it), else None."""
    if exc.errno not in ENVIRONMENT_ERRORS:
        return None
    reason = exc.strerror or os.strerror(exc.errno)
    if exc.filename:
        return f"{shell_path(exc.filename)}: {reason}"
    return f"cannot write: {reason}" if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else reason


def interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C, or was raised in its place by a compiled function or a worker thread."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def silence_stdout() -> None:
    """Point stdout at /dev/null (its reader went away, or it failed): the final flush cannot fail again."""
    to_devnull(sys.stdout)


@contextmanager
def verdict_kept(has_findings: Callable[[], bool]):
    """A reader gone mid-output ends the output, not the verdict: exit 1 with ``has_findings()``, else 0."""
    try:
        yield
    except BrokenPipeError:
        if not has_findings():
            raise
        silence_stdout()
        raise typer.Exit(EXIT_FINDINGS) from None


def guarded(fn):
    """Every failure as one stderr line and a documented exit code (``--debug``: with traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            result = fn(*args, **kwargs)
            if State.interrupt_kept:
                raise KeyboardInterrupt
            return result
        except typer.Exit:
            if State.interrupt_kept:
                fail("interrupted", 130)
            raise
        except MqtoolError as exc:
            debug_traceback()
            fail(str(exc), exc.exit_code)
        except BrokenPipeError:
            silence_stdout()  # the reader went away (e.g. `| head`): not an error
            raise typer.Exit(0)
        except KeyboardInterrupt:
            fail("interrupted", 130)
        except Exception as exc:  # noqa: BLE001 - the edge of the program
            line = environment_error(exc) if isinstance(exc, OSError) else None
            if not isinstance(exc, OSError) and interrupted(exc):
                fail("interrupted", 130)
            debug_traceback()
            if line is None:
                fail(f"internal error: {type(exc).__name__}: {exc}{'' if State.debug else ' (run with --debug for a traceback)'}", EXIT_INTERNAL)
            try:
                sys.stdout.flush()
            except OSError:
                silence_stdout()  # stdout is what failed: its buffer would fail again at exit
            fail(line, EXIT_BAD_INPUT)
        finally:
            State.output_may_close = State.interrupt_kept = False  # a command run again in the same process (tests) starts afresh

    return wrapper


BrokerConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--broker-config", metavar="FILE", help="The broker's broker.conf: file sizes and index geometry (default: inferred from the files)."),
]
def _broker_version(value: str | None) -> str | None:
    """A RocketMQ release (``rules.BrokerVersion.parse``): anything else is a usage error (exit 2)."""
    if value is None:
        return None
    from ..errors import UnknownStoreVersion
    from ..store.rules import BrokerVersion

    try:
        return str(BrokerVersion.parse(value))
    except UnknownStoreVersion as exc:
        raise typer.BadParameter(str(exc), param_hint="'--broker-version'") from None


BrokerVersionOpt = Annotated[
    Optional[str],
    typer.Option("--broker-version", metavar="X.Y.Z", callback=_broker_version, help="Release of the broker that wrote the store, 3.2.6 to 5.3.3, e.g. 4.4.0 (default: detected from the store's marks)."),
]
ProgressOpt = Annotated[Optional[bool], typer.Option("--progress/--no-progress", help="Progress bars on stderr (default: when stderr is a terminal and stdout is not a pipe).")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format (table is the default everywhere).")]
SinceOpt = Annotated[Optional[str], typer.Option("--since", metavar="TIME", help="Store time at or after (epoch ms or ISO-8601; naive = UTC).")]
UntilOpt = Annotated[Optional[str], typer.Option("--until", metavar="TIME", help="Store time at or before.")]


def broker_config_of(path: Path | None) -> StoreConfig:
    """``--broker-config``'s settings, read once a run (a pipe gives them to the first read only)."""
    if path is None:
        return StoreConfig()
    if (config := State.broker_configs.get(str(path))) is not None:
        return config
    config = State.broker_configs[str(path)] = load_broker_config(path)
    if not config.settings:
        note(f"{path}: no setting mqtool reads is there (e.g. mappedFileSizeCommitLog, storePathRootDir, maxIndexNum): "
             "is it the broker's broker.conf? The store's own files decide")
    return config


def open_store(path: Path, broker_config: Path | None = None, broker_version: str | None = None) -> Store:
    config = broker_config_of(broker_config)
    store = Store.open(path, config, broker_version)
    if broker_version is not None and not State.version_said:
        _say_version_against_marks(store, path, broker_version)
    named, root = config.store_root, store.root
    if not State.root_said and named is not None and root is not None and Path(os.path.abspath(named)).resolve() != root.resolve():
        State.root_said = True  # a copy of the store, or the wrong store given: said once a run, the STORE argument is read
        note(f"{broker_config}: storePathRootDir={named}, but the store read is {root}: "
             "if it is not a copy of that store, check the STORE argument")
    return store


def _say_version_against_marks(store: Store, path: Path, broker_version: str) -> None:
    """Say once a run that ``--broker-version``'s era is ruled out by the store's marks."""
    from ..store.version import given_source

    State.version_said, source = True, given_source(store)
    if source != "given":
        note(f"warning: --broker-version {broker_version}: {source.removeprefix('given; ')}; `mqtool info {shell_path(path)}` lists the marks")


def message_of(store: Store, record, body, decompress: bool = False) -> dict:
    """``records.message_dict`` of ``record`` under ``store``'s property and delay-level rules."""
    return message_dict(record, body, decompress=decompress, legacy_properties=store.legacy_properties, delay_table=store.delay_table)


def read_on(store: Store, end: ScanEnd, stop, keep_going: bool = False) -> int | None:
    """Where the read goes on after ``end``, or None: past damage the next start never reads (``store.nextstart``) or DLedger's
    recovery keeps (``CommitLog.resume_after_damage``, ``dledgerstart.loose_walk``), else with ``--keep-going`` at the next
    record."""
    segments = store.commitlog.segments
    if store.root is not None and store.is_dledger:
        from ..store.dledgerstart import KEPT, record_in_broken_entry

        resumed = store.commitlog.resume_after_damage(end)  # None: where DLedger's recovery cuts, or nothing after it
        if resumed is not None and (stop is None or resumed < stop):
            skipped = record_in_broken_entry(store.commitlog, end, resumed) or resumed
            note(end.skipped_note(skipped, kept=KEPT))
            return resumed
    elif store.root is not None and segments and end.offset < segments[-1].base_offset:
        from ..store.nextstart import scan_start_offset

        start = scan_start_offset(store)
        if end.unread_by_broker(start):
            resumed = store.commitlog.resume_after_damage(end)  # None: nothing after it can be read
            if resumed is not None and (stop is None or resumed < stop):
                note(end.skipped_note(resumed, start))
                return resumed
    if end.is_clean or not keep_going:
        return None
    from ..store.resync import resume_after

    resumed = resume_after(store.commitlog, end.offset + 1)  # None: nothing after it can be read
    if resumed is None or (stop is not None and resumed >= stop):
        return None
    note(end.skipped_note(resumed))
    return resumed


def this_command_with_yes() -> str:
    """The command being run, as given (every word quoted to paste), with ``--yes``: what applies the plan it just showed,
    its options (``--abnormal``, ``--index-safe``, ``--topic``, ``--broker-config``, ``--backup-dir``, ...) kept."""
    return " ".join(["mqtool", *map(shlex.quote, State.args), "--yes"])
