"""Builds mqtool's compiled kernels ahead of time: every ``.pyx`` module beside the Python ones
(``mqtool/**/_*.pyx``) becomes a C extension at install, so no command compiles anything when it
runs. The options are the kernels' contract: callers own the bounds (``boundscheck``,
``wraparound`` off) and integer division is C's (``cdivision``), as in the Java code they mirror.

An in-place build (``pip install -e .``) also compiles the package's ``.py`` files to bytecode, as
``pip install`` of a wheel does, so that the first command after an install does not."""

import compileall
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
    "embedsignature": True,
}


class BuildKernels(build_ext):
    def run(self):
        super().run()
        if self.inplace:
            root = Path(__file__).resolve().parent
            for package in ("mqtool", "spark"):
                compileall.compile_dir(str(root / package), quiet=2)


setup(
    cmdclass={"build_ext": BuildKernels},
    ext_modules=cythonize(
        [Extension("*", ["mqtool/**/*.pyx"], extra_compile_args=["-O3"])],
        compiler_directives=DIRECTIVES,
        quiet=True,
    ),
)
