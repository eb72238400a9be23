"""Builds mqtool's compiled kernels ahead of time: every ``.pyx`` module beside the Python ones
(``mqtool/**/_*.pyx``) becomes a C extension at install, so no command compiles anything when it
runs. The options are the kernels' contract: callers own the bounds (``boundscheck``,
``wraparound`` off) and integer division is C's (``cdivision``), as in the Java code they mirror."""

from Cython.Build import cythonize
from setuptools import Extension, setup

DIRECTIVES = {
    "language_level": 3,
    "boundscheck": False,
    "wraparound": False,
    "initializedcheck": False,
    "cdivision": True,
    "embedsignature": True,
}

setup(
    ext_modules=cythonize(
        [Extension("*", ["mqtool/**/*.pyx"], extra_compile_args=["-O3"])],
        compiler_directives=DIRECTIVES,
        quiet=True,
    )
)
