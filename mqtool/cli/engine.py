"""Which engine a command runs on: the compiled kernels or the pure-Python reference.

The compiled paths (numba kernels over mapped bytes, Arrow batches) are the fast ones once they
run, but loading them is a fixed cost per process (numba, numpy, pyarrow and the cached kernels);
the pure-Python paths (``CommitLog.scan`` with the construct-derived decoder, record by record)
start at once and cost about the same per record whatever its size. So the crossover is a number
of records, not bytes (``dump --to-offset N -f jsonl`` with both engines forced, on 1 KiB and
128-byte records alike; ``bench/bench_startup.py --crossover``); ``COMPILED_FROM`` sits below
it, as the compiled start-up is shorter on a quiet machine.

The commands that read a whole store through the kernels (``verify``, ``stats``, ``survivors``,
``salvage``, the repair commands) settle instead how the kernels run (``settle_kernels``):
interpreted below ``INTERPRETED_BELOW[command]`` records (``mqtool.jit.interpret``: the kernels
run as plain Python and numba is never imported), compiled from there on.

A command estimates the records it will read (``estimated_records``: the span's bytes over the
mean size of its first ``SAMPLE`` records) and asks ``engine_for``. Both engines print the same
bytes: tests force each (``MQTOOL_ENGINE=compiled`` or ``python``) and compare.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store.commitlog import CommitLog

COMPILED, PYTHON = "compiled", "python"
ENGINES = (COMPILED, PYTHON)
ENV = "MQTOOL_ENGINE"
COMPILED_FROM = 8_000  # records
# Records below which a command's kernels run interpreted (``settle_kernels``): where their cost in
# the interpreter, per record, meets numba's fixed start, measured per command on small stores of
# 1 KiB records (``bench/bench_crossover.py``); recover and repair include a verify after the plan,
# salvage's JSON Lines are written by the compiled text encoder when compiled.
INTERPRETED_BELOW = {"verify": 8_000, "rebuild-cq": 8_000, "rebuild-index": 8_000, "truncate-dirty": 7_000,
                     "stats": 6_000, "survivors": 5_000, "salvage": 4_500, "recover": 5_000, "repair": 5_000}
SAMPLE = 32  # records read to estimate the mean record size


def forced() -> str | None:
    """The engine ``MQTOOL_ENGINE`` forces, or None (an unknown value is a usage error)."""
    value = os.environ.get(ENV, "").strip().lower()
    if not value:
        return None
    if value not in ENGINES:
        from ..errors import UsageError

        raise UsageError(f"{ENV}={value!r}: choose {' or '.join(ENGINES)}")
    return value


def engine_for(records: int) -> str:
    """The engine for a command that will decode about ``records`` records."""
    return forced() or (COMPILED if records >= COMPILED_FROM else PYTHON)


def settle_kernels(command: str, commitlog: CommitLog) -> str:
    """How this process runs the kernels (``mqtool.jit``), for ``command`` about to read the whole
    of ``commitlog``: interpreted below ``INTERPRETED_BELOW[command]`` records (or with
    ``MQTOOL_ENGINE=python``), compiled otherwise. Call it before the command imports a module with
    kernels: once one is loaded, the mode is fixed. Returns the engine the kernels run on."""
    from .. import jit

    below = INTERPRETED_BELOW[command]
    engine = forced() or (PYTHON if estimated_records(commitlog, commitlog.min_offset, None) < below else COMPILED)
    return PYTHON if engine == PYTHON and jit.interpret() else COMPILED


def estimated_records(commitlog: CommitLog, start: int, stop: int | None) -> int:
    """About how many records ``[start, stop)`` holds: exact when the log ends (or is damaged)
    within the first ``SAMPLE`` records, else the span over their mean size (the zeros after
    the written end count as records: an overestimate, on the side of the compiled engine)."""
    count = size = 0
    for record in commitlog.scan(start, stop):
        count, size = count + 1, size + record.total_size
        if count == SAMPLE:
            end = stop if stop is not None else commitlog.end_of_files
            return max(end - start, 0) * count // size
    return count
