"""The wheel ships the packages a checkout imports (issue #30): setuptools builds exactly the
``packages`` pyproject.toml lists, from the folders its ``package-dir`` maps, while a checkout
imports every folder with an ``__init__.py``; a package added to one and not the other would work
in the checkout and be missing from an installed wheel (or the reverse). Nothing extends a
package's ``__path__``, so both resolve modules the same way."""

from __future__ import annotations

import re
import tomllib

from conftest import ROOT
from test_layers import PACKAGE_DIRS


def built_packages() -> tuple[set[str], dict[str, str]]:
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    return set(setup["packages"]), setup.get("package-dir", {})


def checkout_packages() -> set[str]:
    """Every folder with an ``__init__.py`` under the package folders, as the package it imports as."""
    found = set()
    for package, folder in PACKAGE_DIRS.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if not any(p.startswith(".") for p in parts):
                found.add(".".join([package, *parts]))
    return found


def test_the_wheels_packages_are_the_checkouts():
    packages, package_dir = built_packages()
    assert {name: str(ROOT / folder) for name, folder in package_dir.items()} == {
        name: str(folder) for name, folder in PACKAGE_DIRS.items() if name != "mqtool"}
    assert packages == checkout_packages()


def test_every_folder_of_modules_is_a_package_the_wheel_ships():
    """A folder of modules without ``__init__.py`` imports in a checkout (a namespace package) but
    is left out of the wheel."""
    packages, _ = built_packages()
    for package, folder in PACKAGE_DIRS.items():
        for module in folder.rglob("*.py*"):
            parts = module.parent.relative_to(folder).parts
            if module.suffix in (".py", ".pyx") and "__pycache__" not in parts:
                assert ".".join([package, *parts]) in packages, module


def test_no_package_extends_its_path():
    for folder in PACKAGE_DIRS.values():
        for module in (*folder.rglob("*.py"), *folder.rglob("*.pyx")):
            assert not re.search(r"__path__|pkgutil\.extend_path", module.read_text(encoding="utf-8")), module
