"""The compiled helpers ``verify`` added to ``fastscan``, held equal to the Python decoder."""

from __future__ import annotations

import mmap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MAIN_VERSIONS, VERSIONS, manifest, store_path
from mqtool.formats import commitlog as cl
from mqtool.formats.errors import FormatError
from mqtool.store import fastscan as fs

SEGMENT = 1 << 20


def segments(version: str, name: str = "clean-small"):
    for path in sorted((store_path(version, name) / "commitlog").iterdir()):
        yield int(path.name), np.frombuffer(path.read_bytes(), dtype=np.uint8)


def python_resync(data: np.ndarray, start: int, base: int) -> int:
    """The definition, on the Python decoder: a record at p with its PHYSICALOFFSET == base + p
    whose next records chain (3 in all, or fewer up to a blank / zeros / the end), or a blank
    whose TOTALSIZE is the bytes left."""
    raw = data.tobytes()
    end = len(raw)
    for p in range(start, end - 7):
        try:
            r = cl.decode_record(raw, p, base)
        except FormatError:
            continue
        if isinstance(r, cl.BlankRecord):
            if r.total_size == end - p:
                return p
            continue
        if r.phys_offset != base + p:
            continue
        q, ok = p + r.total_size, True
        for _ in range(2):
            if q >= end or not any(raw[q : q + 8]):
                break
            try:
                nxt = cl.decode_record(raw, q, base)
            except FormatError:
                ok = False
                break
            if isinstance(nxt, cl.BlankRecord):
                break
            if nxt.phys_offset != base + q:
                ok = False
                break
            q += nxt.total_size
        if ok:
            return p
    return -1


@pytest.mark.parametrize("version", VERSIONS)
def test_resync_lands_on_the_next_record_start(version):
    starts = sorted(m["commitLogOffset"] for m in manifest(version, "clean-small")["messages"])
    scratch = np.empty((1, fs.N_COLS), dtype=np.int64)
    rng = np.random.default_rng(3)
    for base, data in segments(version):
        in_segment = [s for s in starts if base <= s < base + SEGMENT]
        probes = rng.integers(0, in_segment[-1] - base, size=25) if in_segment else []
        for p in probes:
            found = fs.find_record_start(data, int(p), len(data), base, 3, scratch)
            expected = next((s - base for s in in_segment if s - base >= p), None)
            if expected is None:  # after the last record: the blank, or nothing
                assert found == -1 or isinstance(cl.decode_record(data.tobytes(), found, base), cl.BlankRecord)
            else:
                assert found == expected, (base, p)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_resync_equals_the_python_definition_on_damaged_bytes(version):
    base, data = next(segments(version))
    damaged = data.copy()
    rng = np.random.default_rng(11)
    for _ in range(40):
        at = int(rng.integers(0, 200_000))
        damaged[at : at + int(rng.integers(1, 300))] = rng.integers(0, 256, size=1, dtype=np.uint8)
    scratch = np.empty((1, fs.N_COLS), dtype=np.int64)
    for p in rng.integers(0, 200_000, size=12):
        window = damaged[: int(p) + 40_000]  # keep the Python definition fast
        assert fs.find_record_start(window, int(p), len(window), base, 3, scratch) == python_resync(window, int(p), base)


def test_a_stale_copy_at_another_position_is_not_a_record_start():
    base, data = next(segments("4.9.7"))
    record = cl.decode_record(data.tobytes(), 0, base)
    moved = np.zeros(4096, dtype=np.uint8)
    moved[100 : 100 + record.total_size] = data[: record.total_size]  # PHYSICALOFFSET still says 0
    scratch = np.empty((1, fs.N_COLS), dtype=np.int64)
    assert fs.find_record_start(moved, 0, len(moved), base, 3, scratch) == -1
    assert fs.chain_holds(moved, 100, base - 100, 3, scratch)  # at its own offset it is one


def test_first_and_last_nonzero(tmp_path):
    data = np.zeros(3 * fs.ZERO_WINDOW + 17, dtype=np.uint8)
    assert fs.first_nonzero(data, 0, len(data)) == -1 and fs.last_nonzero(data, 0, len(data)) == -1
    for at in (0, 5, fs.ZERO_WINDOW - 1, fs.ZERO_WINDOW, 2 * fs.ZERO_WINDOW + 3, len(data) - 1):
        d = data.copy()
        d[at] = 7
        assert fs.first_nonzero(d, 0, len(d)) == at == fs.last_nonzero(d, 0, len(d))
        assert fs.first_nonzero(d, at + 1, len(d)) == -1
    path = tmp_path / "sparse"
    with open(path, "wb") as f:
        f.truncate(8 << 20)
        f.seek(6 << 20)
        f.write(b"\x01")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        array = np.frombuffer(m, dtype=np.uint8)
        assert fs.first_nonzero(array, 0, len(array), f.fileno()) == 6 << 20
        assert fs.first_nonzero(array, (6 << 20) + 1, len(array), f.fileno()) == -1
        del array


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_release_behind_scan_reads_the_same_records(version):
    from mqtool.store import Store

    with Store.open(store_path(version, "clean-small")) as store:
        plain = [(b.base_offset, b.rows.copy()) for b in fs.FastScan(store.commitlog, batch=128)]
        released = [(b.base_offset, b.rows.copy()) for b in fs.FastScan(store.commitlog, batch=128, release_behind=True)]
    assert len(plain) == len(released)
    for (b1, r1), (b2, r2) in zip(plain, released):
        assert b1 == b2 and np.array_equal(r1, r2)


@pytest.mark.parametrize("version", VERSIONS)
def test_compiled_index_key_hash_equals_the_broker_hash_on_every_fixture_key(version):
    from mqtool.formats.hashing import index_key_hash, java_string_hash
    from mqtool.verify.index import key_hashes

    pairs, expected = [], []
    for m in manifest(version, "clean-small")["messages"]:
        for key in ([m["uniqKey"]] if m["uniqKey"] else []) + m["keys"]:
            pairs.append((java_string_hash(m["topic"] + "#"), key))
            expected.append(index_key_hash(f"{m['topic']}#{key}"))
    assert key_hashes(pairs).tolist() == expected and len(expected) > 1000


@given(st.text(max_size=12), st.lists(st.text(max_size=40), max_size=20))
@settings(max_examples=200, deadline=None)
def test_compiled_index_key_hash_on_any_text(topic, keys):
    from mqtool.formats.hashing import index_key_hash, java_string_hash
    from mqtool.verify.index import key_hashes

    prefix = java_string_hash(topic + "#")
    assert key_hashes([(prefix, k) for k in keys]).tolist() == [index_key_hash(f"{topic}#{k}") for k in keys]
