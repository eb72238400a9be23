"""mqtool's own conversion of command-line values (``mqtool/cli/coercion.py``) gives what typer's
pydantic conversion gives, value for value, and the same usage error where typer refuses one."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from typing import get_args

import pytest
from typer._click import Context
from typer._click.exceptions import BadParameter
from typer._coercion import build_runtime_param

from mqtool.cli import LAZY_COMMANDS, load_command
from mqtool.cli.coercion import PlainRuntimeParam

from conftest import store_path

SAMPLES = ["", "0", "7", "-1", "+3", "2147483648", "1_000", " 5", "abc", "jsonl", "JSONL", "table", "base64", "/tmp/a b", "-", "x,y", "hour"]


def _parameters():
    for name in LAZY_COMMANDS:
        command = load_command(name)
        for sub in (command, *getattr(command, "commands", {}).values()):
            for param in sub.params:
                if getattr(param, "type_descriptor", None) is not None:
                    yield f"{name} {sub.name} {param.name}", sub, param


def _choices(annotation) -> tuple[str, ...]:
    """Every choice of a ``list[SomeEnum]`` parameter (a valid multi-value), else none."""
    (member,) = get_args(annotation) or (None,)
    return tuple(m.value for m in member) if isinstance(member, type) and issubclass(member, Enum) else ()


def _outcome(runtime, value, param, ctx):
    try:
        return "value", runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as exc:
        return "error", exc.format_message()


PARAMETERS = list(_parameters())


@pytest.mark.parametrize("label,command,param", PARAMETERS, ids=[p[0] for p in PARAMETERS])
def test_values_convert_as_typer_converts_them(label, command, param):
    descriptor = param.type_descriptor
    plain = PlainRuntimeParam(descriptor.parameter_info, descriptor.annotation, descriptor)
    typer_own = build_runtime_param(descriptor)
    ctx = Context(command)
    multiple = param.multiple or param.nargs == -1
    values = [None, param.default] + ([tuple(SAMPLES[:3]), list(SAMPLES[-3:]), _choices(param.type_descriptor.annotation)] if multiple else SAMPLES)
    for value in values:
        assert _outcome(plain, value, param, ctx) == _worded_as_typers_helper(_outcome(typer_own, value, param, ctx)), (label, value)


def _worded_as_typers_helper(outcome):
    """typer's refusal of a choice without the "Value error, " and full stop its pydantic
    conversion adds to its helper's words (mqtool says the helper's words alone)."""
    kind, said = outcome
    if kind == "error" and ": Value error, " in said and " is not one of " in said:
        return kind, said.replace(": Value error, ", ": ", 1).rstrip(".")
    return outcome


def test_a_choice_none_of_the_choices_matches_is_refused_without_pydantics_prefix():
    """Before: `info STORE --format xml` said "Invalid value for '--format' / '-f': Value error,
    'xml' is not one of ..." (pydantic's words before typer's)."""
    from typer.testing import CliRunner

    from mqtool.cli import app

    shown = CliRunner().invoke(app, ["info", str(store_path("5.3.3", "clean-small")), "--format", "xml"])
    assert shown.exit_code == 2
    assert shown.stderr.strip() == ("mqtool: error: Invalid value for '--format' / '-f': 'xml' is not one of 'table', 'json', 'jsonl', 'csv'; "
                                    "see 'mqtool info --help'")


@pytest.mark.parametrize("argv", [["verify", "{store}", "--only", "commitlog", "--only", "cq", "--format", "json"], ["offsets", "{store}", "--format", "json"],
                                  ["dump", "{store}", "--limit", "1", "--format", "csv"]])
def test_a_command_loads_no_pydantic(argv):
    """Every value these commands take converts here: typer's pydantic adapters never load."""
    argv = [a.format(store=store_path("5.3.3", "clean-small")) for a in argv]
    code = ("import atexit, sys; atexit.register(lambda: print('pydantic' in sys.modules, file=sys.stderr)); from mqtool.cli import main;"
            f"sys.argv = ['mqtool', *{argv!r}]; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "False"

