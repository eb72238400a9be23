"""Start-up of the planning commands (issue #10: any command on a small store in 0.3 s or less) is
mostly imports: on a small store that is not DLedger, ``recover``, ``repair`` and ``verify`` load
neither a JIT nor what only another kind of store or a larger run needs (the DLedger modules but
the entry layout the one resynchronisation reads, the process and thread pools, the spill files'
``tempfile``, ``ctypes.util``), and still plan what the broker does."""

from __future__ import annotations

import ast
import importlib
import json
import os
import subprocess

import pytest

from conftest import ROOT, copy_store, manifest, run_loading, store_path

NOT_FOR_A_SMALL_STORE = (
    "mqtool.store.dledger", "mqtool.verify.dledger", "mqtool.recovery.dledger",
    "multiprocessing", "concurrent.futures", "tempfile", "ctypes.util",
)


def loaded(argv: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    return run_loading(argv, NOT_FOR_A_SMALL_STORE, env={**os.environ, "COLUMNS": "100"})


@pytest.mark.parametrize("command", ["recover", "repair"])
def test_a_small_stores_plan_loads_nothing_it_does_not_use(command, tmp_path):
    root = copy_store("5.3.3", "crashed-small", tmp_path)
    proc, extra = loaded([command, str(root), "--dry-run", "--format", "json"])
    assert proc.returncode == 0, proc.stderr
    assert extra == []
    doc = json.loads(proc.stdout)
    plan = doc if command == "recover" else doc["recover"]
    assert plan["mode"] == "abnormal" and plan["commitlog"]["valid_end"] > 0


def test_a_small_stores_verify_loads_nothing_it_does_not_use():
    proc, extra = loaded(["verify", str(store_path("5.3.3", "clean-small")), "--format", "json"])
    assert proc.returncode == 0, proc.stderr
    assert extra == []
    summary = json.loads(proc.stdout)["summary"]
    assert summary["sound"] and summary["commitlog"]["records"] == len(manifest("5.3.3", "clean-small")["messages"])


def test_a_json_verify_loads_neither_rich_nor_the_plan_model():
    """rich draws the table output only, and the plan's dataclasses are a planner's: ``verify
    --format json`` asks the next start where the broker scans from (``nextstart.start_of``, the
    eras left by ``recovery.candidates``) without either."""
    proc, extra = run_loading(["verify", str(store_path("5.3.3", "crashed-small")), "--format", "json"], ("rich", "mqtool.recovery.plans"),
                              env={**os.environ, "COLUMNS": "100"}, packages=False)
    assert proc.returncode == 1, proc.stderr
    assert extra == []
    assert json.loads(proc.stdout)["summary"]["next_start"]["mode"] == "abnormal"


PUBLIC_PLANNERS = ("plan_recover", "plan_truncate_dirty", "plan_rebuild_cq", "plan_rebuild_index")


def test_every_plan_function_callers_reach_plans_under_every_candidate_version():
    """A planner under the one version the store is read as skips the candidate versions' check
    (``candidates.py``); it is named ``*_one_version`` and imported by ``recovery.planners`` alone,
    and every module's ``plan_recover`` ... is the public one (recovery/repair.py once imported
    rebuild's)."""
    from mqtool.recovery import planners

    for tree_root in ("mqtool", "spark", "bench", "tests"):
        for path in (ROOT / tree_root).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if path == ROOT / "mqtool/recovery/planners.py" or "_one_version" not in text:  # a name not in the text is in no node
                continue
            reached = {n.attr if isinstance(n, ast.Attribute) else n.name  # imported, or read off a module
                       for n in ast.walk(ast.parse(text)) if isinstance(n, (ast.Attribute, ast.alias))}
            assert not {n for n in reached if n.startswith("plan_") and n.endswith("_one_version")}, path
    for path in (ROOT / "mqtool").rglob("*.py"):
        if path.name == "__main__.py":  # runs the CLI
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        module = importlib.import_module(".".join(p for p in rel.parts if p != "__init__"))
        for name in PUBLIC_PLANNERS:
            assert vars(module).get(name, getattr(planners, name)) is getattr(planners, name), (module.__name__, name)
