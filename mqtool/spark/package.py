"""The ``mqtool`` package as one zip for ``spark-submit --py-files`` (PySpark adds only .zip,
.egg and .jar files to the executors' Python path, never wheels).

The zip holds the package as it is laid out (``mqtool/``, ``mqtool/formats/``, ``mqtool/recovery/``...),
Python sources only.
"""

from __future__ import annotations

import importlib
import pkgutil
import zipfile
from pathlib import Path

import mqtool  # its location decides imported_from_zip


def package_dirs() -> dict[str, Path]:
    """``{dotted package name: its directory}`` for ``mqtool`` and every subpackage."""
    dirs = {"mqtool": Path(mqtool.__file__).parent}
    for info in pkgutil.walk_packages([str(dirs["mqtool"])], "mqtool.", onerror=lambda name: None):
        if info.ispkg:
            dirs[info.name] = Path(importlib.import_module(info.name).__file__).parent
    return dirs


def build_zip(dest: str | Path) -> Path:
    """Write the package's ``.py`` files to ``dest`` (a zip with ``mqtool/`` at its root)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, directory in sorted(package_dirs().items()):
            prefix = name.replace(".", "/")
            for source in sorted(directory.glob("*.py")):
                zf.write(source, f"{prefix}/{source.name}")
    return dest


def imported_from_zip() -> bool:
    """True when this process imported ``mqtool`` from a zip (``--py-files``)."""
    return ".zip" in str(Path(mqtool.__file__))
