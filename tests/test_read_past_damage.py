"""Reads past damage (``dump``, ``stats``, ``cli.common.read_on``): past damage the broker never reads
the read goes on where the log does, and where nothing after the damage can be read it stops."""

from __future__ import annotations

import json
import random

import pytest
from typer.testing import CliRunner

from conftest import manifest
from mqtool.cli import app


@pytest.mark.parametrize("command", ["stats", "dump"])
def test_zeros_from_before_the_recovery_start_to_the_end(command, store_copy):
    """Damage seed 5000015: zeros from inside segment 0 to the end of every file. The broker never
    reads segment 0 (its next start scans from segment 2), so the read goes on past the zeros where
    it can; nothing after them can be read, and the read used to retry one byte further on each
    time (``resync.scan_start`` gives back its input), a walk of every remaining byte that did not
    end. It now reads the records before the zeros and stops."""
    root = store_copy("4.9.7", "clean-small")
    zeros_from = 465_137
    for seg in sorted((root / "commitlog").iterdir()):
        base = int(seg.name)
        data = seg.read_bytes()
        keep = max(0, zeros_from - base)
        seg.write_bytes(data[:keep] + bytes(len(data) - keep))
    whole = [m for m in manifest("4.9.7", "clean-small")["messages"] if m["commitLogOffset"] + m["size"] <= zeros_from]
    res = CliRunner().invoke(app, [command, str(root), "-f", "jsonl"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    if command == "stats":
        assert sum(r["messages"] for r in rows if r["row"] == "queue") == len(whole)
    else:
        assert [r["offset"] for r in rows] == sorted(m["commitLogOffset"] for m in whole)


def test_dump_keep_going_stops_where_nothing_can_be_read_on(store_copy):
    """Random bytes from inside segment 0 to the end of every file: ``dump --keep-going`` found no
    record to resume at, but went on one byte further each time (``resync.scan_start`` gives back
    its input), a "skipped the damaged range [n, n+1)" line per byte, a walk that does not end on a
    large store. Nothing after the damage can be read: it stops there."""
    root = store_copy("4.9.7", "crashed-small")
    damage_from, rng = 300_000, random.Random(1)
    for seg in sorted((root / "commitlog").iterdir()):
        base, data = int(seg.name), seg.read_bytes()
        keep = max(0, damage_from - base)
        seg.write_bytes(data[:keep] + rng.randbytes(len(data) - keep))
    whole = [m for m in manifest("4.9.7", "crashed-small")["messages"] if m["commitLogOffset"] + m["size"] <= damage_from]
    res = CliRunner().invoke(app, ["dump", str(root), "-f", "jsonl", "--keep-going"])
    assert res.exit_code == 0, res.output
    assert [json.loads(line)["offset"] for line in res.stdout.splitlines()] == sorted(m["commitLogOffset"] for m in whole)
    assert "skipped the damaged range" not in res.stderr
