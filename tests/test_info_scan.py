"""``info``'s logical end: the schema decoder's walk (small commit logs, no compiled code) and its hand-over
to the compiled walk give exactly what the compiled walk alone gives, on every fixture store and on
damaged copies (the end at damage, its reason and words, the records counted)."""

from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import FIXTURES, VERSIONS, copy_store, manifest

from mqtool.store import Store, summary
from mqtool.store.commitlog import StopReason
from mqtool.store.fastscan import FastScan

STORES = sorted(p for p in FIXTURES.glob("rocketmq-*/*") if p.is_dir())  # every fixture store, DLedger ones included


def compiled_end(store: Store, start: int):
    scan = FastScan(store.commitlog, start, check_crc=True, stop_on_crc=True)
    return sum(len(b.rows) for b in scan), scan.end


@lru_cache(maxsize=None)
def reference_end(root: Path, start: int):
    """``compiled_end`` of a store no test writes, walked once for all the variants (limits, CPUs, walks) compared with it."""
    with Store.open(root) as store:
        return compiled_end(store, start)


def starts(store: Store) -> set[int]:
    segments = store.commitlog.segments
    return {segments[max(0, len(segments) - 3)].base_offset if segments else 0, store.commitlog.min_offset}


@pytest.fixture(params=[1, 2], ids=["one-walk", "segments-in-parallel"])
def cpus(request, monkeypatch):
    """``summary.compiled_end`` walks segments in parallel on two CPUs, one after another on one."""
    monkeypatch.setattr(summary.os, "cpu_count", lambda: request.param)


@pytest.fixture(params=["as-shipped", "records-cut-by-the-window", "segments-split"])
def walk(request, monkeypatch):
    """``summary.compiled_end`` as shipped (a fixture segment is one window and one stretch), with a ``fastscan.ReadWindow``
    smaller than most records (each walked again from the next window's start, or mapped), and with each segment cut into
    stretches of about 100 kB (``summary.walk_splits``, walked in parallel on two CPUs)."""
    if request.param == "records-cut-by-the-window":
        monkeypatch.setattr(summary, "WALK_READ_WINDOW", 700)
    if request.param == "segments-split":
        monkeypatch.setattr(summary, "WALK_SPLIT_BYTES", 100_000)


@pytest.mark.parametrize("limit", [summary.SCHEMA_SCAN_RECORDS, 100, 1])
@pytest.mark.parametrize("root", STORES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_logical_end_equals_the_compiled_walk_on_every_fixture(root, limit, monkeypatch, cpus, walk):
    monkeypatch.setattr(summary, "SCHEMA_SCAN_RECORDS", limit)
    with Store.open(root) as store:
        for start in starts(store):
            assert summary.logical_end(store, start) == reference_end(root, start)


def _damage(path, kind: str, m: dict) -> None:
    offset, size, body = m["commitLogOffset"], m["size"], m["bodyLength"]
    segments = sorted((path / "commitlog").iterdir())
    segment = max((s for s in segments if int(s.name) <= offset), key=lambda s: int(s.name))
    pos = offset - int(segment.name)
    with open(segment, "r+b") as f:
        if kind == "crc":  # a body byte flipped
            f.seek(pos + size - body - 20 if body > 40 else pos + size - 1)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))
        elif kind == "zeros":  # TOTALSIZE and magic zeroed: unwritten bytes as far as the walk can tell
            f.seek(pos)
            f.write(bytes(8))
        elif kind == "magic":
            f.seek(pos + 4)
            f.write(b"\x12\x34\x56\x78")
        elif kind == "length":  # TOTALSIZE one more than the fields add up to
            f.seek(pos)
            f.write((size + 1).to_bytes(4, "big"))


REASONS = {"crc": StopReason.CRC, "zeros": StopReason.ZEROS, "magic": StopReason.CORRUPT, "length": StopReason.LENGTH_MISMATCH}


@pytest.fixture(scope="module")
def damaged_copy(tmp_path_factory):
    """clean-small of ``version`` with one record damaged (``kind``, ``place`` of the way in), copied and damaged once
    for the six walks of it (CPUs × windows), which only read it: (its root, the damaged record's manifest entry)."""
    made: dict[tuple, tuple[Path, dict]] = {}
    folder = tmp_path_factory.mktemp("damaged")

    def damaged(version: str, kind: str, place: float) -> tuple[Path, dict]:
        if (version, kind, place) not in made:
            root = copy_store(version, "clean-small", folder / f"{kind}-{place}")
            messages = manifest(version, "clean-small")["messages"]
            victim = messages[int(len(messages) * place)]
            _damage(root, kind, victim)
            made[version, kind, place] = root, victim
        return made[version, kind, place]

    yield damaged
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("place", [1 / 4, 3 / 4])
@pytest.mark.parametrize("kind", list(REASONS))
@pytest.mark.parametrize("version", VERSIONS)
def test_logical_end_at_damage_equals_the_compiled_walk(damaged_copy, version, kind, place, monkeypatch, cpus, walk):
    root, victim = damaged_copy(version, kind, place)
    for limit in (summary.SCHEMA_SCAN_RECORDS, 100):
        monkeypatch.setattr(summary, "SCHEMA_SCAN_RECORDS", limit)
        with Store.open(root) as store:
            for start in starts(store):
                got = summary.logical_end(store, start)
                assert got == reference_end(root, start)
                if start <= victim["commitLogOffset"]:  # else the walk starts after the damage
                    assert got[1].offset == victim["commitLogOffset"] and got[1].reason == REASONS[kind]


@pytest.mark.parametrize("cut", ["at-record-starts", "at-record-starts-a-crc-failing-inside-one", "inside-records"])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_segment_cut_into_stretches_is_walked_once_unless_a_cut_is_off_the_chain(tmp_path, version, cut, monkeypatch):
    """``summary.compiled_end`` walks stretches of one segment on two CPUs (``walk_splits``): cut at record starts, each
    byte once (each stretch's walk stops exactly where the next begins; a CRC failure inside one ends the log there, as the
    single walk does); cut inside records (a guess off the chain), the walk before the cut goes on from its start alone.
    Either way the log's end and count are the single walk's, up to a stop past the log's end too."""
    from mqtool.store import fastscan

    walks: list[tuple[int, int | None]] = []

    class Counted(fastscan.FastScan):
        def __init__(self, commitlog, start=None, stop=None, **kw):
            walks.append((start, stop))
            super().__init__(commitlog, start, stop, **kw)

    splits = summary.walk_splits
    monkeypatch.setattr(fastscan, "FastScan", Counted)
    monkeypatch.setattr(summary.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(summary, "WALK_SPLIT_BYTES", 100_000)
    if cut == "inside-records":
        monkeypatch.setattr(summary, "walk_splits", lambda *a: [c + 8 for c in splits(*a)])
    root, end = copy_store(version, "clean-small", tmp_path), manifest(version, "clean-small")["commitLogMaxOffset"]
    if "crc" in cut:
        victim = manifest(version, "clean-small")["messages"][1200]  # in the third of its five segments
        _damage(root, "crc", victim)
        end = victim["commitLogOffset"]
    with Store.open(root) as store:
        want = compiled_end(store, 0)
        walks.clear()
        got = summary.compiled_end(store, 0)
        assert got == want and got[1].offset == end
        starts = [start for start, _ in walks]
        past = store.commitlog.segments[-1].end_offset * 2 + 12345  # a stop past the last segment (a queue entry past the log)
        single = FastScan(store.commitlog, 0, past, check_crc=True, stop_on_crc=True)
        assert summary.compiled_end(store, 0, stop=past) == (sum(len(b.rows) for b in single), single.end)
    if cut != "inside-records":
        assert len(set(starts)) == len(starts) > 2 * len(store.commitlog.segments)  # cut, and each stretch walked once
    else:
        assert starts.count(0) == 2  # the first stretch's walk stops past the cut: walked again from 0, alone


def test_info_of_a_small_store_loads_no_compiled_code():
    """The small-store path (and the lock/pending-apply check every info makes) loads no compiled kernel."""
    import json
    import subprocess
    import sys

    root = FIXTURES / "rocketmq-5.3.3" / "clean-small"
    code = ("import atexit, sys; atexit.register(lambda: print('mqtool.store._fastscan' in sys.modules, file=sys.stderr)); from mqtool.cli import main;"
            f"sys.argv = ['mqtool', 'info', {str(root)!r}, '--format', 'json']; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["commitlog"]["max_offset"] == manifest("5.3.3", "clean-small")["commitLogMaxOffset"]
    assert proc.stderr.strip().splitlines()[-1] == "False"
