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
    rng = np.random.default_rng(3)
    for base, data in segments(version):
        in_segment = [s for s in starts if base <= s < base + SEGMENT]
        probes = rng.integers(0, in_segment[-1] - base, size=25) if in_segment else []
        for p in probes:
            found = fs.find_record_start(data, int(p), len(data), base, 3)
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
    for p in rng.integers(0, 200_000, size=12):
        window = damaged[: int(p) + 40_000]  # keep the Python definition fast
        assert fs.find_record_start(window, int(p), len(window), base, 3) == python_resync(window, int(p), base)


def test_a_stale_copy_at_another_position_is_not_a_record_start():
    base, data = next(segments("4.9.7"))
    record = cl.decode_record(data.tobytes(), 0, base)
    moved = np.zeros(4096, dtype=np.uint8)
    moved[100 : 100 + record.total_size] = data[: record.total_size]  # PHYSICALOFFSET still says 0
    assert fs.find_record_start(moved, 0, len(moved), base, 3) == -1
    assert fs.chain_holds(moved, 100, base - 100, 3)  # at its own offset it is one


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


def test_last_nonzero_skips_the_holes_after_the_last_data_and_finds_the_same_byte(tmp_path):
    """``last_nonzero`` with the descriptor starts from ``data_end`` (the end of the last data
    extent: ``SEEK_DATA``/``SEEK_HOLE``) and gives the byte a full scan gives, with data written
    before holes, between them, as explicit zeros at the end, and not at all."""
    layouts = {
        "data, hole": [(0, b"\x05" * 1000)],
        "data, hole, data, hole": [(0, b"\x05" * 1000), ((3 << 20) + 17, b"\x09")],
        "data, written zeros": [(0, b"\x05" * 1000), (1000, bytes(2 << 20))],
        "hole only": [],
        "data at the very end": [((8 << 20) - 1, b"\x03")],
    }
    for name, writes in layouts.items():
        path = tmp_path / name.replace(" ", "_").replace(",", "")
        with open(path, "wb") as f:
            f.truncate(8 << 20)
            for at, data in writes:
                f.seek(at)
                f.write(data)
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            array = np.frombuffer(m, dtype=np.uint8)
            end = fs.data_end(f.fileno(), 0, len(array))
            assert not array[end:].any(), name
            for start in (0, 500, 1 << 20):
                assert fs.last_nonzero(array, start, len(array), f.fileno()) == fs.last_nonzero(array, start, len(array)), (name, start)
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


@pytest.mark.parametrize("version", VERSIONS)
def test_row_flags_equal_the_decoder_on_every_fixture_record(version):
    """``segments.row_flags`` against the Python decoder, every record of every segment: clean
    records unflagged; a PHYSICALOFFSET changed and a body CRC made wrong (in the rows) flagged."""
    from mqtool.store import segments as vs

    checked = 0
    for base, data in segments(version):
        data = data.copy()
        out = np.empty((1 << 16, fs.N_COLS), dtype=np.int64)
        count, _, _, _ = fs.walk_segment(data, 0, len(data), True, False, out)
        rows = out[:count].copy()
        if not count:
            continue
        flags = np.empty(count, dtype=np.int8)
        assert vs.row_flags(data, rows, base, flags) == 0 and not flags.any()
        raw = data.tobytes()
        victim = count // 2
        pos = int(rows[victim, fs.COL_POS])
        record = cl.decode_record(raw, pos, base)
        assert record.phys_offset == base + pos
        data[pos + fs.POS_PHYS_OFFSET + 7] ^= 1
        rows[0, fs.COL_CRC_OK] = 0
        assert vs.row_flags(data, rows, base, flags) == 2
        assert flags[0] == 1 and flags[victim] == 2 and np.count_nonzero(flags) == 2
        checked += count
    assert checked == len(manifest(version, "clean-small")["messages"])


def test_a_wrong_crc32_property_is_a_finding_and_a_right_one_is_not(tmp_path):
    """No fixture broker wrote ``__CRC32#`` (5.2+ with ``enableCalcPropCRC``), so the records are
    made with the schema's encoder: the property holds ``crc32(record[:-20]) & 0x7FFFFFFF`` in 10
    digits, least significant first (``MessageDecoder.createCrc32``, reference §2.10)."""
    from mqtool.formats.hashing import CRC31_MASK, body_crc
    from mqtool.store import segments as vs

    fields = dict(
        magic_code=cl.MESSAGE_MAGIC_V2, body_crc=0, queue_id=0, flag=0, queue_offset=0, sys_flag=0, born_timestamp=1,
        born_host_address=bytes(4), born_host_port=1, store_timestamp=1, store_host_address=bytes(4), store_host_port=1,
        reconsume_times=0, prepared_transaction_offset=0, body=b"payload", topic=b"t",
    )

    def record(at: int, digits: bytes | None) -> bytes:
        props = b"KEYS\x01k\x02__CRC32#\x01" + (digits or b"0" * 10) + b"\x02"
        raw = cl.encode_message({**fields, "phys_offset": at, "properties": props}, compute_crc=True)
        if digits is None:  # the right value
            crc = body_crc(raw[: len(raw) - vs.PROP_CRC_LEN]) & CRC31_MASK
            right = "".join(str(crc // 10**i % 10) for i in range(10)).encode()
            raw = raw[: len(raw) - 11] + right + b"\x02"
        return raw

    good = record(0, None)
    bad = record(len(good), b"1234567890")
    data = bytearray(4096)
    data[: len(good) + len(bad)] = good + bad
    data[len(good) + len(bad) : len(good) + len(bad) + 8] = cl.encode_blank(4096 - len(good) - len(bad))
    path = tmp_path / f"{0:020d}"
    path.write_bytes(bytes(data))
    report = vs.analyze_segment(vs.SegmentTask(0, str(path), 0, 0, None))
    assert report.chain.records == 2 and report.chain.code == fs.OK_BLANK
    expected = body_crc(bad[: len(bad) - vs.PROP_CRC_LEN]) & CRC31_MASK
    assert report.chain.prop_crc == [(len(good), expected, 987654321)]
    assert report.chain.crc == [] and report.chain.phys == []
