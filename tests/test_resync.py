"""The pure-Python resynchronisation (``mqtool.store.resync``) answers what the compiled one
(``fastscan.scan_start``) answers, offset by offset, on every real-broker fixture and on damaged
copies made here; and a mid-record ``dump --from-offset`` says where it reads from."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, copy_store, manifest, store_path
from mqtool.cli import app
from mqtool.store import Store
from mqtool.store import fastscan as fs
from mqtool.store import resync

STORES = sorted((p.parent.name.removeprefix("rocketmq-"), p.name.removesuffix(".manifest.json")) for p in FIXTURES.glob("rocketmq-*/*.manifest.json"))


def probe_offsets(store: Store, starts: list[int], seed: int) -> list[int]:
    """Every offset of the first records; around and inside later records (bodies); the
    last bytes of every segment and the first of the next; past the end of the files."""
    rng = random.Random(seed)
    first = starts[0] if starts else store.commitlog.min_offset
    offsets = set(range(first, first + 1000))
    for o in starts[::31]:
        offsets.update(range(o - 3, o + 12))
        offsets.update(o + rng.randrange(1, 4000) for _ in range(3))
    for seg in store.commitlog.segments:
        offsets.update(range(seg.end_offset - 40, seg.end_offset + 2))
        offsets.update(range(seg.base_offset, seg.base_offset + 9))
    end = store.commitlog.end_of_files
    offsets.update(range(end - 2, end + 3))
    offsets = sorted(o for o in offsets if o >= 0)
    if any(seg.entries for seg in store.commitlog.segments):  # DLedger: no record names its raw position,
        return offsets[::15]  # every search runs to the segment end (both engines)
    return offsets


def assert_engines_agree(root, starts: list[int], seed: int = 0, windows=(None,)) -> int:
    with Store.open(root) as store:
        cl = store.commitlog
        checked = 0
        for offset in probe_offsets(store, starts, seed):
            expected = fs.scan_start(cl, offset)
            for window in windows:
                assert resync.scan_start(cl, offset, window=window) == expected, (root, offset, window)
            checked += 1
        return checked


def message_offsets(version: str, name: str) -> list[int]:
    return sorted(m["commitLogOffset"] for m in manifest(version, name)["messages"])


def test_one_chain_length():
    assert resync.CHAIN == fs.RESYNC_CHAIN


@pytest.mark.parametrize("version,name", STORES, ids=[f"{v}-{n}" for v, n in STORES])
def test_python_resync_equals_the_compiled_one_on_every_fixture(version, name):
    assert assert_engines_agree(store_path(version, name), message_offsets(version, name), windows=(None, 512)) > 80


def _zero_range(seg: bytearray, starts: list[int]) -> None:
    seg[starts[3] + 10 : starts[9] + 30] = bytes(starts[9] + 20 - starts[3])


def _flip_phys_offset(seg: bytearray, starts: list[int]) -> None:
    """The PHYSICALOFFSET of the 6th record no longer names its position: no chain through it."""
    seg[starts[5] + fs.POS_PHYS_OFFSET + 7] ^= 0x01


def _flip_magic(seg: bytearray, starts: list[int]) -> None:
    seg[starts[4] + 6] ^= 0x40


def _magic_in_a_body(seg: bytearray, starts: list[int]) -> None:
    """Copies of a record's first 100 bytes inside another's body: candidates that fail the chain."""
    big = max(range(len(starts) - 1), key=lambda i: starts[i + 1] - starts[i])
    head = bytes(seg[starts[0] : starts[0] + 100])
    for at in range(starts[big] + 120, starts[big + 1] - 120, 100):
        seg[at : at + 100] = head


def _torn(seg: bytearray, starts: list[int]) -> None:
    del seg[starts[12] + 50 :]


DAMAGE = {"zeroed-range": _zero_range, "flipped-offset": _flip_phys_offset, "flipped-magic": _flip_magic, "magic-in-body": _magic_in_a_body, "torn-segment": _torn}


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7", "5.3.3"])
@pytest.mark.parametrize("damage", DAMAGE)
def test_python_resync_equals_the_compiled_one_past_damage(tmp_path, version, damage):
    root = copy_store(version, "crashed-small", tmp_path)
    starts = message_offsets(version, "crashed-small")
    path = root / "commitlog" / f"{0:020d}"
    seg = bytearray(path.read_bytes())
    DAMAGE[damage](seg, starts)
    path.write_bytes(bytes(seg))
    assert assert_engines_agree(root, starts, seed=1, windows=(None, 256)) > 1000


def test_candidate_budget_hands_over_to_the_compiled_search(tmp_path, monkeypatch):
    """Failing candidates past ``MAX_CANDIDATES``: the compiled search answers (the same)."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    starts = message_offsets("4.9.7", "clean-small")
    path = root / "commitlog" / f"{0:020d}"
    seg = bytearray(path.read_bytes())
    _magic_in_a_body(seg, starts)
    path.write_bytes(bytes(seg))
    big = max(range(len(starts) - 1), key=lambda i: starts[i + 1] - starts[i])
    with Store.open(root) as store:
        offset = starts[big] + 1
        with pytest.raises(resync._Exhausted):
            monkeypatch.setattr(resync, "MAX_CANDIDATES", 2)
            resync.python_scan_start(store.commitlog, offset)
        assert resync.scan_start(store.commitlog, offset, window=None) == fs.scan_start(store.commitlog, offset) == starts[big + 1]


def test_a_mid_record_from_offset_says_where_it_reads_from(tmp_path):
    root = tmp_path / "a store"
    shutil.copytree(store_path("5.3.3", "clean-small"), root)
    starts = message_offsets("5.3.3", "clean-small")
    result = CliRunner().invoke(app, ["dump", str(root), "--from-offset", str(starts[3] + 100), "--limit", "2", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert [r["offset"] for r in json.loads(result.stdout)] == starts[4:6]
    assert f"--from-offset {starts[3] + 100} is not a record start; reading from the next record at {starts[4]}" in result.stderr
