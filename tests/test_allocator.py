"""``allocator.keep_freed_memory`` (what glibc's malloc keeps of what the batches free): on Linux with
glibc the C library takes both thresholds, so every command reuses freed batch memory rather than
faulting it in again (BENCHMARKS.md, "Allocator")."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's thresholds are glibc's")
def test_glibc_takes_both_thresholds_in_a_fresh_process():
    code = "from mqtool.allocator import keep_freed_memory; print(keep_freed_memory())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "True\n"
