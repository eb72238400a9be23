"""Randomized damage (issue #11, tests): each seed damages a copy of a real-broker fixture (bit
flips, cut files, zeroed ranges, garbage appended, stray files, deleted files), then runs
``info``, ``verify``, ``dump``, ``recover`` and ``repair`` as a user would, with a timeout:
no traceback, only documented exit codes, and ``repair --yes`` ends in a store that ``verify``
passes or whose only findings are lost data (commit log damage the recovery does not cut).

The seeds are fixed and printed; ``MQTOOL_DAMAGE_SEEDS=N`` adds N more (printed too, so a
failure can be replayed with ``MQTOOL_DAMAGE_SEED=S``).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from conftest import copy_store
from repair_support import mqtool
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_REFUSED
from mqtool.recovery.repair import LOST_KINDS

STORES = [("4.8.0", "crashed-small"), ("4.9.7", "clean-small"), ("4.9.7", "crashed-small"), ("5.3.3", "clean-small"), ("5.3.3", "crashed-small")]
DAMAGES = ("bit-flips", "cut-file", "zeroed-range", "garbage-appended", "stray-file", "deleted-file")
FIXED_SEEDS = [0, 1, 2, 3]
DOCUMENTED = {EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_REFUSED}
TIMEOUT = 120


def seeds() -> list[int]:
    if os.environ.get("MQTOOL_DAMAGE_SEED"):
        return [int(os.environ["MQTOOL_DAMAGE_SEED"])]
    extra = int(os.environ.get("MQTOOL_DAMAGE_SEEDS", "0"))
    return FIXED_SEEDS + list(range(1000, 1000 + extra))


def store_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "lock" and p.stat().st_size > 0)


def damage(root: Path, rng: random.Random) -> str:
    """Apply one random damage to the store at ``root``; returns what was done."""
    kind = rng.choice(DAMAGES)
    files = store_files(root)
    part = rng.choice(["commitlog", "consumequeue", "index", "checkpoint"])  # a part first: queues outnumber the rest
    target = rng.choice([p for p in files if p.relative_to(root).parts[0] == part] or files)
    rel = target.relative_to(root)
    size = target.stat().st_size
    data = bytearray(target.read_bytes())
    if kind == "bit-flips":
        n = rng.randint(1, 8)
        for _ in range(n):
            pos = rng.randrange(min(size, rng.choice([64, 4096, size])))
            data[pos] ^= 1 << rng.randrange(8)
        target.write_bytes(data)
        return f"{n} bit flips in {rel}"
    if kind == "cut-file":
        cut = rng.randrange(size)
        target.write_bytes(data[:cut])
        return f"{rel} cut to {cut} bytes"
    if kind == "zeroed-range":
        start = rng.randrange(size)
        end = min(size, start + rng.choice([8, 100, 4096, 65536]))
        data[start:end] = bytes(end - start)
        target.write_bytes(data)
        return f"{rel} zeroed [{start}, {end})"
    if kind == "garbage-appended":
        n = rng.choice([1, 20, 1000, 5000])
        target.write_bytes(bytes(data) + rng.randbytes(n))
        return f"{n} garbage bytes appended to {rel}"
    if kind == "stray-file":
        where = rng.choice([root / "commitlog", root / "index", target.parent])
        stray = where / rng.choice(["core.1234", "00000000000000000000.tmp", "README", ".nfs0001"])
        stray.write_bytes(rng.randbytes(rng.choice([0, 10, 4096])))
        return f"stray file {stray.relative_to(root)}"
    target.unlink()
    return f"{rel} deleted"


def run(*args) -> tuple[int, str, str]:
    proc = mqtool(*map(str, args), timeout=TIMEOUT)
    assert "Traceback" not in proc.stderr, f"mqtool {' '.join(map(str, args[:1]))}: traceback\n{proc.stderr[-3000:]}"
    assert proc.returncode in DOCUMENTED, f"mqtool {args[0]}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("seed", seeds())
def test_random_damage(seed, tmp_path):
    rng = random.Random(seed)
    version, name = STORES[seed % len(STORES)]
    root = copy_store(version, name, tmp_path / "x y")  # a path with a space
    what = damage(root, rng)
    print(f"seed {seed}: {version}/{name}: {what}")
    run("info", root)
    verify_rc, _, _ = run("verify", root, "--format", "jsonl")
    run("dump", root, "--limit", "50")
    run("recover", root, "--format", "json")
    rc, out, err = run("repair", root, "--yes", "--format", "json")
    if rc == EXIT_BAD_INPUT:
        return  # the store cannot be read at all (the one-line error is the answer)
    assert rc in (EXIT_OK, EXIT_FINDINGS), err
    plan = json.loads(out)  # printed before it is applied
    assert all(s["why"] for s in plan["steps"])
    vrc, out, _ = run("verify", root, "--format", "jsonl")
    findings = [json.loads(line) for line in out.splitlines()][:-1]
    failing = [f for f in findings if f["severity"] != "info"]
    assert (vrc == EXIT_OK) == (not failing)
    not_lost = [f for f in failing if f["kind"] not in LOST_KINDS and not f["kind"].startswith(("cq-", "index-", "consumer-offset"))]
    assert not not_lost, f"seed {seed} ({what}): after repair --yes verify reports more than lost data: {not_lost[:3]}"
    if failing:
        assert rc == EXIT_FINDINGS
        assert any(f["kind"] in LOST_KINDS for f in failing), f"seed {seed} ({what}): findings but no lost data: {failing[:3]}"
