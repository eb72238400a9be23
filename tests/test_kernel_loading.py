"""Cached kernels loaded the lean way (``mqtool/jit.py``) link and give the same output as numba's own loading.

Each check runs in fresh processes: one that loads kernels with numba's own ``load_overload``
(``MQTOOL_NUMBA_LOAD=stock``, filling the cache where a kernel is new), then one that loads them lean,
where a symbol the lean load failed to provide would abort the process.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import without_timings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
CLEAN = FIXTURES / "rocketmq-5.3.3" / "clean-small"
CRASHED = FIXTURES / "rocketmq-4.9.7" / "crashed-small"


def mqtool(args: list[str], loading: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MQTOOL_ENGINE": "compiled"}
    if loading == "stock":
        env["MQTOOL_NUMBA_LOAD"] = "stock"
    else:
        env.pop("MQTOOL_NUMBA_LOAD", None)
    return subprocess.run([sys.executable, "-m", "mqtool", "--quiet", *args], capture_output=True, text=True, env=env, timeout=300)


COMMANDS = {
    "verify": ["verify", str(CRASHED), "-f", "jsonl"],
    "stats": ["stats", str(CLEAN), "-f", "jsonl"],
    "dump": ["dump", str(CLEAN), "-f", "jsonl", "--body", "sha256"],
    "recover": ["recover", str(CRASHED), "--dry-run", "-f", "json"],
    "salvage": ["salvage", str(CRASHED), "-f", "jsonl"],
}


@pytest.fixture(scope="module")
def stock() -> dict[str, subprocess.CompletedProcess]:
    """Each command's run with numba's own loading (on a fresh clone, this fills the cache)."""
    return {name: mqtool(args, "stock") for name, args in COMMANDS.items()}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_lean_loading_prints_what_stock_loading_prints(name, stock):
    args, before = COMMANDS[name], stock[name]
    lean = mqtool(args, "lean")
    assert lean.returncode == before.returncode, lean.stderr
    assert before.stdout.strip(), before.stderr
    if args[-1] == "json":
        assert without_timings(json.dumps(json.loads(lean.stdout))) == without_timings(json.dumps(json.loads(before.stdout)))
    else:
        assert without_timings(lean.stdout) == without_timings(before.stdout)


LOAD_EVERY_CACHED_KERNEL = r"""
import importlib, pathlib, sys
from mqtool import jit
from numba.core.caching import FunctionCache
from numba.core.registry import CPUDispatcher

assert jit.lean_loading
loaded = 0
for name in sys.argv[1:]:
    module = importlib.import_module(name)
    for value in vars(module).values():
        if not isinstance(value, CPUDispatcher) or value.__module__ != name or not isinstance(value._cache, FunctionCache):
            continue
        codegen = value.targetctx.codegen()
        for key in value._cache._cache_file._load_index():
            if key != value._cache._index_key(key[0], codegen):
                continue  # written by other code or another machine: numba would not load it
            value.compile(key[0])
            assert value._cache_hits[key[0]] == 1, (name, value.__name__, key[0])
            loaded += 1
assert "numba.np.linalg" not in sys.modules  # the registries were never installed
print(loaded)
"""


def kernel_modules() -> list[str]:
    """Every module that imports numba through ``mqtool.jit``, by dotted name."""
    names = []
    for root, package in ((ROOT / "mqtool", "mqtool"),):
        for path in sorted(root.rglob("*.py")):
            if re.search(r"^from \.+jit import .*\bnumba\b", path.read_text(encoding="utf-8"), re.M):
                names.append(".".join([package, *path.relative_to(root).with_suffix("").parts]))
    return names


def test_every_cached_kernel_links_without_the_registries(stock):
    """Every kernel in numba's cache (at least the commands' own) loads lean and links, with no compile before it."""
    modules = kernel_modules()
    assert len(modules) >= 15
    done = subprocess.run([sys.executable, "-c", LOAD_EVERY_CACHED_KERNEL, *modules], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) >= 20


def test_stock_loading_can_be_chosen():
    code = "from mqtool import jit; from numba.core import caching; print(jit.lean_loading, caching.Cache.load_overload is jit._load_overload)"
    env = {**os.environ, "MQTOOL_NUMBA_LOAD": "stock"}
    stock = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    env.pop("MQTOOL_NUMBA_LOAD")
    lean = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert (stock.stdout.split(), lean.stdout.split()) == (["False", "False"], ["True", "True"])
