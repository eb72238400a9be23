"""``mqtool/private_api.py``: without typer's internals or the interpreter's exit steps (hidden
here, as a release that moves them would), mqtool takes the public way."""

from __future__ import annotations

import sys
import threading

import pytest

from mqtool import private_api


def test_typer_conversion_is_none_without_typers_internals(monkeypatch):
    assert private_api.typer_conversion() is not None
    monkeypatch.setitem(sys.modules, "typer._coercion", None)
    assert private_api.typer_conversion() is None


def test_without_the_interpreters_exit_steps_the_process_exits_the_usual_way(monkeypatch):
    from mqtool.cli.shutdown import exit_process

    monkeypatch.delattr(threading, "_shutdown")
    assert private_api.exit_steps() is None
    with pytest.raises(SystemExit) as end:
        exit_process(4)
    assert end.value.code == 4
