"""Imports point one way, ``formats < store < dispatch < scan < verify < recovery < apply < cli``
(the Spark job a shell beside the CLI), compiled modules included (checked with ast, and by
reading the ``.pyx`` imports)."""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from pathlib import Path

from conftest import ROOT

PACKAGE_DIRS = {"mqtool": ROOT / "mqtool", "mqtool.spark": ROOT / "spark"}  # pyproject.toml's package-dir
UI = {"typer", "rich", "tqdm", "click", "pyspark"}
FORMATS_FORBIDDEN_STDLIB = {"os", "mmap", "pathlib", "io", "shutil", "subprocess", "socket", "fcntl"}


def modules():
    """(dotted module name, path) of every module of the installed package layout."""
    for package, directory in PACKAGE_DIRS.items():
        for path in directory.rglob("*.py"):
            rel = path.relative_to(directory).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            yield name, path, path.name == "__init__.py"


def source_path(name: str) -> Path:
    """Where module ``name`` lies (without its suffix), by ``PACKAGE_DIRS``."""
    package = max((p for p in PACKAGE_DIRS if name == p or name.startswith(p + ".")), key=len)
    return PACKAGE_DIRS[package].joinpath(*name[len(package) + 1 :].split("."))


@cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a source file's syntax tree, parsed and walked once for every test here (the sources do not
    change during the run): ``ast.walk`` of all of mqtool, three times a module, was most of this file's time."""
    return tuple(ast.walk(ast.parse(path.read_text(encoding="utf-8"))))


@cache
def imports(name: str, path: Path, is_package: bool) -> frozenset[str]:
    """What module ``name`` imports, each name imported from a module included; once a module (``nodes``)."""
    pkg = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)
    return frozenset(found)


LAYERS = ("base", "formats", "store", "dispatch", "scan", "verify", "recovery", "apply", "cli")
# modules outside the layered packages: what every layer may use (no mqtool import above them)
BASE = {"mqtool", "mqtool.errors", "mqtool.allocator", "mqtool.handoff", "mqtool.table", "mqtool.fileops", "mqtool.private_api", "mqtool.scratch", "mqtool.activity"}


def layer(name: str) -> str:
    if name in BASE:
        return "base"
    part = name.split(".")[1]
    return {"__main__": "cli", "spark": "cli"}.get(part, part)


PYX_IMPORT = re.compile(r"^\s*from\s+([.\w]+)\s+c?import\s", re.M)


def compiled_imports(name: str, path: Path) -> set[str]:
    """The mqtool modules a ``.pyx`` or ``.pxd`` imports or cimports."""
    pkg = name.rpartition(".")[0]
    found = set()
    for mod in PYX_IMPORT.findall(path.read_text(encoding="utf-8")):
        if mod.startswith("."):
            dots = len(mod) - len(mod.lstrip("."))
            base = pkg.split(".")[: len(pkg.split(".")) - dots + 1]
            mod = ".".join(base + ([mod.lstrip(".")] if mod.lstrip(".") else []))
        found.add(mod)
    return found


@cache
def resolved(imp: str) -> str | None:
    """The mqtool module ``imp`` names (an imported name resolved to its module), or None."""
    while imp.startswith("mqtool"):
        p = source_path(imp)
        if any(p.with_suffix(s).exists() for s in (".py", ".pyx", ".pxd")) or (p / "__init__.py").exists():
            return imp
        imp = imp.rpartition(".")[0]
    return None


def test_layers_import_one_way():
    """No module imports a layer above its own (issue #30's order), ``.py`` and compiled alike."""
    found = []
    sources = [(n, p, pkg, False) for n, p, pkg in modules()]
    sources += [(".".join(["mqtool", *p.relative_to(ROOT / "mqtool").with_suffix("").parts]), p, False, True)
                for p in sorted((ROOT / "mqtool").rglob("*.p[yx][xd]"))]
    for name, path, pkg, compiled in sources:
        for imp in compiled_imports(name, path) if compiled else imports(name, path, pkg):
            target = resolved(imp)
            if target is None:
                continue
            if LAYERS.index(layer(target)) > LAYERS.index(layer(name)):
                found.append(f"{name} ({layer(name)}) imports {target} ({layer(target)})")
    assert found == []


def top(name: str) -> str:
    return name.split(".")[0]


def test_formats_imports_only_construct_and_the_standard_library():
    for name, path, pkg in modules():
        if not name.startswith("mqtool.formats"):
            continue
        for imp in imports(name, path, pkg):
            if imp.startswith("mqtool."):
                assert imp.startswith("mqtool.formats"), f"{path}: imports {imp}"
            else:
                assert top(imp) == "construct" or top(imp) in sys.stdlib_module_names or imp == "__future__", f"{path}: imports {imp}"
                assert top(imp) not in FORMATS_FORBIDDEN_STDLIB, f"{path}: formats must not touch files ({imp})"


def test_store_model_and_recovery_know_no_ui():
    for name, path, pkg in modules():
        if name.startswith(("mqtool.store", "mqtool.recovery", "mqtool.formats", "mqtool.verify")):
            for imp in imports(name, path, pkg):
                assert top(imp) not in UI, f"{path}: imports {imp}"
                assert not imp.startswith("mqtool.cli"), f"{path}: imports the CLI"
        if name.startswith("mqtool.store"):
            for imp in imports(name, path, pkg):
                assert not imp.startswith(("mqtool.recovery", "mqtool.apply", "mqtool.verify")), f"{path}: store imports upward ({imp})"
        if name.startswith("mqtool.recovery"):
            for imp in imports(name, path, pkg):
                assert not imp.startswith("mqtool.apply"), f"{path}: planning must not import the writer"


def test_nothing_imports_the_cli():
    for name, path, pkg in modules():
        if name.startswith("mqtool.cli") or name == "mqtool.__main__":
            continue
        for imp in imports(name, path, pkg):
            assert not imp.startswith("mqtool.cli"), f"{path}: imports the CLI"


def test_the_columnar_scan_sits_on_the_store_model_and_knows_no_ui_or_spark():
    """``mqtool/scan`` reads through the store model; the store model never imports it upward."""
    for name, path, pkg in modules():
        found = imports(name, path, pkg)
        if name.startswith("mqtool.scan"):
            for imp in found:
                assert top(imp) not in UI, f"{path}: imports {imp}"
                assert not imp.startswith(("mqtool.cli", "mqtool.spark", "mqtool.apply")), f"{path}: imports {imp}"
        if name.startswith(("mqtool.store", "mqtool.formats")):
            assert not any(i.startswith("mqtool.scan") for i in found), f"{path}: imports the columnar scan"


PUBLIC_UNDERSCORED = {"os._exit", "sys._getframe"}  # documented despite the underscore


def private_uses(walked: tuple[ast.AST, ...]) -> set[str]:
    """The private names of other packages a module reaches: imported (``from typer._coercion import``,
    ``from typer.core import _TyperParameter``) or read off an imported module (``threading._shutdown``,
    ``getattr(atexit, "_run_exitfuncs")``)."""
    private = lambda name: name.startswith("_") and not name.startswith("__")  # noqa: E731
    modules, found = set(), set()
    for node in walked:
        if isinstance(node, ast.Import):
            for a in node.names:
                if not a.name.startswith("mqtool"):
                    modules.add(a.asname or a.name.split(".")[0])
                    found.update(a.name for part in a.name.split(".") if private(part))
        elif isinstance(node, ast.ImportFrom) and not node.level and not node.module.startswith("mqtool"):
            names = node.module.split(".") + [a.name for a in node.names]
            found.update(f"{node.module}.{a.name}" for a in node.names if any(private(n) for n in names))
    for node in walked:
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules and private(node.attr):
            found.add(f"{node.value.id}.{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2
              and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str) and private(node.args[1].value)):
            found.add(f"{node.args[0].id}.{node.args[1].value}")
    return found - PUBLIC_UNDERSCORED


def test_private_apis_of_dependencies_are_used_only_in_private_api():
    """Issue #29: every private API of a dependency (or of CPython) mqtool relies on sits behind one
    guarded module, ``mqtool/private_api.py``."""
    for name, path, _ in modules():
        if name == "mqtool.private_api":
            continue
        assert private_uses(nodes(path)) == set(), path
    assert {"typer._coercion.RuntimeParam", "typer.core._TyperParameter", "pyarrow._compute", "threading._shutdown", "atexit._run_exitfuncs",
            "typer._click.exceptions"} <= private_uses(nodes(ROOT / "mqtool" / "private_api.py"))
