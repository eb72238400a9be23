"""What the on-call engineer met using every command as a person does (the cliaudit audit): a nearly
full disk under stdout, a path that starts with "-", a --broker-version the store contradicts, a
plan read through ``| head``. Each test failed before its fix."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_store, store_path
from mqtool.errors import EXIT_BAD_INPUT

ROOT = Path(__file__).resolve().parent.parent


def mqtool(*args, stdout=subprocess.PIPE, preexec_fn=None, cwd=ROOT, columns=100):
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONDONTWRITEBYTECODE": "1"}  # no .pyc cut short by a limit
    return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          cwd=cwd, env=env, preexec_fn=preexec_fn)


def disk_full_after(size: int):
    """A child whose files stop growing at ``size`` bytes (``RLIMIT_FSIZE``): the write that crosses it
    is cut short, as on a disk that fills up, and the next fails (``EFBIG``)."""
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return limit


@pytest.mark.parametrize("args", [("info", "5.3.3", "clean-small", "-f", "json"), ("recover", "5.3.3", "crashed-small", "-f", "json")])
def test_a_document_cut_short_by_a_full_disk_is_exit_3(tmp_path, args):
    """Before: `mqtool info STORE -f json > FILE` on a nearly full disk left the first 4096 bytes in
    FILE and exited 0 (recover: 4), saying nothing: the one write of the document was cut short and
    CPython's buffered stdout returned the short count unchecked."""
    command, version, name, *options = args
    out = tmp_path / "out.json"
    with out.open("w") as file:
        done = mqtool(command, copy_store(version, name, tmp_path / "store"), *options, stdout=file, preexec_fn=disk_full_after(4096))
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert done.stderr.splitlines()[-1] == "mqtool: error: cannot write: File too large"
    assert out.stat().st_size == 4096


def test_a_printed_command_names_a_path_that_starts_with_a_dash_so_it_pastes(tmp_path, monkeypatch):
    """Before: `recover -- -store --yes --backup-dir ./-bk` said "undo with: mqtool restore -bk --yes" and
    `--plan-out ./-plan.json` "apply it with: mqtool apply -plan.json --yes": pasted, each is
    "No such option: -b" (-p), and the undo line is the one the operator needs next."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    runner = CliRunner()
    copy_store("4.9.7", "crashed-small", tmp_path).rename(tmp_path / "-store")
    monkeypatch.chdir(tmp_path)
    planned = runner.invoke(app, ["recover", "--plan-out", "./-plan.json", "--", "-store"])
    assert planned.exit_code == 0, planned.output
    assert shlex.split(planned.stderr.split("apply it with: ", 1)[1]) == ["mqtool", "apply", "./-plan.json", "--yes"]
    applied = runner.invoke(app, ["recover", "--yes", "--backup-dir", "./-bk", "--", "-store"])
    assert applied.exit_code == 0, applied.output
    undo = shlex.split(applied.stderr.split("undo with: ", 1)[1])
    assert undo == ["mqtool", "restore", str(tmp_path / "-bk"), "--yes"]  # absolute: pasted from anywhere
    restored = runner.invoke(app, undo[1:])
    assert restored.exit_code == 0, restored.output


def test_a_broker_version_the_store_contradicts_is_said_once(tmp_path):
    """Before: `verify STORE --broker-version 3.2.6` on a sound 5.3.3 store said "NOT sound" with 1952
    index-entry-mismatch errors (3.2.6's key hashes), and `repair` planned to rebuild every index file,
    with not a word that the store's marks rule 3.2.6 out (only `info` said so)."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    runner = CliRunner()
    store = copy_store("5.3.3", "clean-small", tmp_path / "store")  # repair looks for a live broker: another test may hold the fixture open
    warning = (f"mqtool: warning: --broker-version 3.2.6: the store's marks leave E17-E18 (5.2.0-5.3.3), not E0 (3.2.6): "
               f"its rules are followed as given; `mqtool info {store}` lists the marks")
    for command in ("verify", "repair"):
        said = runner.invoke(app, [command, str(store), "--broker-version", "3.2.6"], env={"COLUMNS": "400"})
        assert said.stderr.splitlines().count(warning) == 1, said.stderr
    agreed = runner.invoke(app, ["verify", str(store), "--broker-version", "5.3.1"])
    assert agreed.exit_code == 0 and "warning" not in agreed.stderr, agreed.output


def into_a_closed_pipe(*args, stderr_closed: bool = False) -> subprocess.CompletedProcess:
    """``mqtool ARGS | head -0`` (``2>&1 | head -0`` with ``stderr_closed``): the reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], stdout=write, stderr=write if stderr_closed else subprocess.PIPE,
                              text=True, cwd=ROOT, timeout=300, env={**os.environ, "COLUMNS": "100"})
    finally:
        os.close(write)


@pytest.mark.parametrize("fmt,stderr_closed", [("table", False), ("jsonl", True)])
def test_salvage_to_store_into_a_closed_pipe_writes_the_whole_new_store(tmp_path, fmt, stderr_closed):
    """Before: `salvage STORE --to-store DIR | head -1` stopped at the first row head did not read:
    "DIR: the new store is incomplete; delete it before trying again", and exit 0. The new store is
    the write the operator asked for; the rows on stdout are its report."""
    store = store_path("5.3.3", "crashed-small")
    whole = mqtool("salvage", store, "--to-store", tmp_path / "whole", "-f", fmt, stdout=subprocess.DEVNULL)
    assert whole.returncode == 0, whole.stderr
    piped = into_a_closed_pipe("salvage", store, "--to-store", tmp_path / "piped", "-f", fmt, stderr_closed=stderr_closed)
    assert piped.returncode == 0, piped.stderr
    assert not piped.stderr or "incomplete" not in piped.stderr
    files = sorted(p.relative_to(tmp_path / "whole") for p in (tmp_path / "whole").rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "piped") for p in (tmp_path / "piped").rglob("*") if p.is_file())
    assert all((tmp_path / "whole" / f).read_bytes() == (tmp_path / "piped" / f).read_bytes() for f in files)


def test_a_plan_into_a_closed_pipe_keeps_its_exit_code_and_saves_its_plan_file(tmp_path):
    """Before: `recover STORE | head` exited 0 (4 when head read it all: "nothing changed: re-run with
    --yes"), and `recover STORE --plan-out FILE | head` saved no FILE, saying nothing, exit 0: what
    follows the plan on stdout depended on whether head had left."""
    from mqtool.errors import EXIT_REFUSED

    store = copy_store("5.3.3", "crashed-small", tmp_path / "store")  # a plan looks for a live broker: not the shared fixture
    shown = into_a_closed_pipe("recover", store)
    assert shown.returncode == EXIT_REFUSED, shown.stderr
    assert shown.stderr.splitlines()[-1] == f"mqtool: error: refused without --yes: the plan is only shown, nothing changed; re-run with --yes to apply it: mqtool recover {store} --yes"
    saved = into_a_closed_pipe("recover", store, "--plan-out", tmp_path / "plan.json")
    assert saved.returncode == 0 and (tmp_path / "plan.json").stat().st_size > 0, saved.stderr


@pytest.mark.parametrize("args", [("dump", "--queue", "99999999999999999999"), ("dump", "index", "-n", "9223372036854775808"),
                                  ("dump", "timer", "-n", "99999999999999999999"), ("dump", "--since", "99999999999999999999"),
                                  ("query", "time", "TopicTest", "0", "99999999999999999999")])
def test_a_number_past_a_java_long_is_a_usage_error(args):
    """Before: `dump STORE --queue 99999999999999999999` and `--since` so far ahead were "internal error:
    TypeError: Got unexpected argument type <class 'int'> for compute function" (exit 5, "a bug"),
    `dump index|timer -n` one past sys.maxsize "ValueError: Stop argument for islice()"."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    command, *rest = args
    kind = [rest.pop(0)] if rest[0] in ("index", "timer") else []
    store = store_path("5.3.3", "timer-small" if kind == ["timer"] else "clean-small")
    argv = [command, *kind, str(store), *rest] if command == "dump" else [command, rest[0], str(store), *rest[1:]]
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 2, done.output
    assert "out of range" in done.stderr and "internal error" not in done.stderr, done.stderr


def test_an_ids_file_that_cannot_be_read_is_one_plain_line(tmp_path):
    """Before: "mqtool: error: nosuch: cannot read the ids: [Errno 2] No such file or directory: 'nosuch'"."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    for path, reason in ((tmp_path / "nosuch", "No such file or directory"), (tmp_path, "Is a directory")):
        done = CliRunner().invoke(app, ["survivors", str(store_path("5.3.3", "clean-small")), str(path)])
        assert done.exit_code == EXIT_BAD_INPUT and done.stderr == f"mqtool: error: {path}: cannot read the ids: {reason}\n", done.stderr


def test_every_progress_option_says_the_default_it_has():
    """Before: `dump`, `stats` and `survivors --help` said the bar is drawn "when stderr is a terminal",
    `verify` and `salvage` "... and stdout is not a pipe": all five draw it by that one rule (``progress.drawn``)."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    said = set()
    for command in ("dump", "stats", "survivors", "salvage", "verify"):
        text = " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).stdout.split())
        said.add(text.split("--progress / --no-progress ", 1)[1].split(")", 1)[0] + ")")
    assert said == {"Progress bars on stderr (default: when stderr is a terminal and stdout is not a pipe)"}, said


@pytest.mark.parametrize("command", ["recover", "truncate-dirty", "rebuild-cq", "rebuild-index"])
def test_help_text_fits_a_60_column_terminal(command):
    """Before: the exit codes paragraph of the plan commands' --help kept its 73-column lines at any
    width, so a 60-column terminal wrapped them again mid-word."""
    text = mqtool(command, "--help", columns=60).stdout
    description = text.split("\n  Example:")[0]  # an example command is never wrapped
    assert "Exit codes" in description and max(map(len, description.splitlines())) <= 60, description


def test_restore_force_says_what_it_overrides():
    """Before: `restore --help` described --force as every repair command's ("Run even though another
    process uses the store"), while its own text says --force is what restores files a broker changed since."""
    text = " ".join(mqtool("restore", "--help").stdout.split())
    assert "--force Restore even though the files changed since (a broker ran), or another process uses the store" in text, text


def test_restore_yes_says_what_it_does():
    """Before: `restore --help` said --yes applies "the changes" and that without it "the plan is printed":
    restore has no plan; without --yes it prints what it would put back."""
    text = " ".join(mqtool("restore", "--help").stdout.split())
    assert "-y, --yes Restore (without it what it would put back is printed)." in text, text


@pytest.mark.parametrize("group", [(), ("query",)])
def test_command_listings_are_not_cut(group):
    """Before: `mqtool --help` and `mqtool query --help` at 100 columns cut most summaries short with "..."
    ("topics,...", "newest first;..."): each command's summary (its help's first paragraph) is listed whole."""
    from mqtool.cli import LAZY_COMMANDS, load_command

    text = mqtool(*group, "--help").stdout
    listing = text.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    assert not any(line.endswith("...") for line in listing.splitlines()) and max(map(len, listing.splitlines())) <= 100
    flat = " ".join(listing.split()).replace("- ", "-")  # a summary's hyphenated word may wrap after its hyphen
    summaries = [s for _, _, s in LAZY_COMMANDS.values()] if not group else [
        " ".join(c.help.split("\n\n")[0].split()) for c in load_command("query").commands.values()]
    assert len(summaries) >= 5 and all(s in flat for s in summaries), flat


def test_a_finding_whose_place_does_not_fit_keeps_it_under_the_finding():
    """Before: at 80 columns `verify` on 4.8.0 crashed-small wrapped a finding's file path to column 0,
    where it read as the start of another finding; it now goes on the next line, indented as the message."""
    import json

    store = store_path("4.8.0", "crashed-small")
    found = json.loads(mqtool("verify", store, "-f", "json").stdout)["findings"]
    lines = mqtool("verify", store, columns=80).stdout.splitlines()
    long = [f for f in found if len(f"{f['severity']:7} {f['kind']} offset {f['offset']} {f['file']}") > 80]
    assert [f["kind"] for f in long] == ["cq-entry-missing"]
    for f in long:
        at = lines.index(f"{f['severity'].upper():7} {f['kind']}")
        assert lines[at + 1] == f"        offset {f['offset']} {f['file']}"


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_salvage_out_on_a_full_disk_is_said_as_for_every_format(tmp_path, fmt):
    """Before: a full disk under `salvage -f parquet --out FILE` said pyarrow's "cannot write: Error writing
    bytes to file. Detail: [errno 27] File too large"; now said as for jsonl, the same error line naming FILE, and what is left of
    FILE: jsonl's whole rows, or no Parquet file cut short before its footer (which no reader opens)."""
    out = tmp_path / f"out.{fmt}"
    store = store_path("5.3.3", "clean-small")
    done = mqtool("salvage", store, "-f", fmt, "--body", "base64", "--out", out, preexec_fn=disk_full_after(65536))
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    left = {"jsonl": "holds only the rows written before salvage stopped",
            "parquet": "removed: the Parquet file was cut short before its footer, which every reader needs to open it"}[fmt]
    assert done.stderr.splitlines()[-2:] == [f"mqtool: {out}: {left}", f"mqtool: error: {out}: File too large"]
    assert out.exists() == (fmt == "jsonl")
