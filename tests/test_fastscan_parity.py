"""The compiled walk equals the Python decoder on every fixture record and every damage kind."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import VERSIONS, store_path
from mqtool.formats import commitlog as cl
from mqtool.store import Store
from mqtool.store import fastscan as fs

STORES = [(v, n) for v in VERSIONS for n in ("clean-small", "crashed-small")] + [("4.9.7", "rewrite-clean"), ("4.9.7", "retention-small")]


def same_end(a, b):
    """Where and why a scan stopped (detail texts differ between the two walkers)."""
    return (a.offset, a.reason, a.total_size) == (b.offset, b.reason, b.total_size)


def python_scan(store, start=None, stop=None):
    scan = store.commitlog.scan(start, stop, check_crc=True)
    return list(scan), scan.end


def fast_scan(store, start=None, stop=None, batch=1 << 16):
    scan = fs.FastScan(store.commitlog, start, stop, check_crc=True, stop_on_crc=True, batch=batch)
    rows = []
    for b in scan:
        for row in b.rows:
            rows.append((b.base_offset, b.array, row.copy()))
    return rows, scan.end


@pytest.mark.parametrize("version,name", STORES)
def test_fast_scan_equals_python_scan(version, name):
    with Store.open(store_path(version, name)) as store:
        records, end = python_scan(store)
        rows, fast_end = fast_scan(store, batch=97)  # small batches exercise END_CAPACITY
        assert same_end(fast_end, end)
        assert len(rows) == len(records)
        for (base, array, row), r in zip(rows, records):
            assert base + row[fs.COL_POS] == r.offset and row[fs.COL_SIZE] == r.total_size
            assert row[fs.COL_BODY_LEN] == r.body_length and row[fs.COL_CRC_OK] == 1
            assert bytes(array[row[fs.COL_BODY] : row[fs.COL_BODY] + max(r.body_length, 0)]) == r.body
            assert bytes(array[row[fs.COL_TOPIC] : row[fs.COL_PROPS] - 2]) == r.topic
            assert bytes(array[row[fs.COL_PROPS] : row[fs.COL_POS] + r.total_size]) == r.properties


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_gathered_columns_equal_decoded_fields(version):
    with Store.open(store_path(version, "clean-small")) as store:
        records, _ = python_scan(store)
        by_offset = {r.offset: r for r in records}
        layout = cl.HEADER_LAYOUTS[(False, False)]
        for b in fs.FastScan(store.commitlog):
            pos = np.ascontiguousarray(b.rows[:, fs.COL_POS])
            for name, width in (("queue_id", 4), ("queue_offset", 8), ("phys_offset", 8), ("sys_flag", 4), ("born_timestamp", 8), ("body_crc", 4)):
                column = fs.gather_be(b.array, pos, layout.offset_of(name), width, True)
                assert column.tolist() == [getattr(by_offset[b.base_offset + p], name) for p in pos.tolist()]


def _damaged_segment(tmp_path, mutate):
    src = store_path("4.9.7", "clean-small") / "commitlog" / "00000000000000000000"
    data = bytearray(src.read_bytes())
    mutate(data)
    d = tmp_path / "commitlog"
    d.mkdir()
    (d / src.name).write_bytes(bytes(data))
    return d


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.__setitem__(slice(2000, 2001), bytes([d[2000] ^ 0xFF])),  # a body byte: CRC
        lambda d: d.__setitem__(slice(4096, 8192), bytes(4096)),  # zeroed range
        lambda d: d.__setitem__(slice(1164, 1168), (999).to_bytes(4, "big")),  # total size: mismatch
        lambda d: d.__setitem__(slice(1168, 1172), b"\x12\x34\x56\x78"),  # magic
        lambda d: d.__setitem__(slice(1164 + 88 + 600, 1164 + 88 + 604), b"\xff\xff\xff\xff"),  # inside a body
    ],
    ids=["crc", "zeros", "length", "magic", "body"],
)
def test_fast_scan_stops_where_the_python_scan_stops(tmp_path, mutate):
    with Store.open(_damaged_segment(tmp_path, mutate)) as store:
        records, end = python_scan(store)
        rows, fast_end = fast_scan(store)
    assert same_end(fast_end, end) and len(rows) == len(records)


def test_fast_scan_respects_stop_and_start():
    with Store.open(store_path("5.3.3", "clean-small")) as store:
        records, _ = python_scan(store)
        start, stop = records[10].offset, records[50].offset
        part, end = fast_scan(store, start, stop)
        py, py_end = python_scan(store, start, stop)
        assert len(part) == len(py) == 40 and same_end(end, py_end)


def window_scan(store, window, start=None, stop=None):
    """``FastScan`` with ``read_window`` (the next start's walk, ``summary.compiled_end``): each record's offset, size and
    parts, copied before the next batch overwrites the window."""
    scan = fs.FastScan(store.commitlog, start, stop, check_crc=True, stop_on_crc=True, batch=97, read_window=window)
    rows = []
    for b in scan:
        for pos, size, body, body_len, topic, props, crc_ok in b.rows[:, :7].tolist():
            assert crc_ok == 1
            rows.append((b.base_offset + pos, size, bytes(b.array[body : body + max(body_len, 0)]), bytes(b.array[topic : props - 2]),
                         bytes(b.array[props : pos + size])))
    return rows, scan.end


WINDOWS = [64, 700, 4096 + 13, 1 << 20]  # every record walked mapped, some, records cut at the window's end, a whole segment


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("version,name", STORES)
def test_a_read_window_walk_equals_the_python_scan(version, name, window):
    """Records the window's end cuts are read again from the next window's start, a record longer than the window is
    walked mapped: every record, its parts and the end are the schema decoder's."""
    assert [fs.COL_POS, fs.COL_SIZE, fs.COL_BODY, fs.COL_BODY_LEN, fs.COL_TOPIC, fs.COL_PROPS, fs.COL_CRC_OK] == list(range(7))
    with Store.open(store_path(version, name)) as store:
        records, end = python_scan(store)
        rows, window_end = window_scan(store, window)
        assert same_end(window_end, end)
        assert rows == [(r.offset, r.total_size, r.body, r.topic, r.properties) for r in records]
        start, stop = records[10].offset, records[-50].offset + 3  # a stop inside a record
        part, part_end = window_scan(store, window, start, stop)
        assert part_end == fast_scan(store, start, stop)[1] and part == rows[10:-49]
        assert window_scan(store, window, start + 1, stop)[1] == fast_scan(store, start + 1, stop)[1]  # a start inside one


@pytest.mark.parametrize("window", range(301, 3000, 89))
def test_a_read_window_walk_ends_at_a_damaged_record_wherever_the_window_cuts_it(tmp_path, window):
    """A CRC failure, zeros, a wrong length or magic in the window, cut by its end or not: the end of the mapped walk."""
    mutations = [
        lambda d: d.__setitem__(slice(2000, 2001), bytes([d[2000] ^ 0xFF])),  # a body byte: CRC
        lambda d: d.__setitem__(slice(4096, 8192), bytes(4096)),  # zeroed range
        lambda d: d.__setitem__(slice(1164, 1168), (999).to_bytes(4, "big")),  # total size: mismatch
        lambda d: d.__setitem__(slice(1168, 1172), b"\x12\x34\x56\x78"),  # magic
    ]
    for i, mutate in enumerate(mutations):
        (tmp_path / str(i)).mkdir()
        with Store.open(_damaged_segment(tmp_path / str(i), mutate)) as store:
            rows, end = window_scan(store, window)
            mapped_rows, mapped_end = fast_scan(store)
        assert end == mapped_end and [r[0] for r in rows] == [b + row[fs.COL_POS] for b, _, row in mapped_rows]


def test_a_segment_that_shrinks_or_fails_under_a_read_window_is_one_error(tmp_path):
    """A file shorter than when its walk began (``ReadWindow``'s short read), or one the system cannot read (an I/O error;
    here a directory's EISDIR), is ``BadStoreFile`` (one line, exit 3), as a mapped walk's SIGBUS is."""
    from mqtool.errors import BadStoreFile

    path = _damaged_segment(tmp_path, lambda d: None) / "00000000000000000000"
    size = path.stat().st_size
    window = fs.ReadWindow(path, 4096, size)
    try:
        assert bytes(window.read(size - 4096)[0]) == path.read_bytes()[-4096:]
        with open(path, "r+b") as f:
            f.truncate(size - 100)
        with pytest.raises(BadStoreFile, match="file shrank while reading the store"):
            window.read(size - 4096)
    finally:
        window.close()
    unreadable = fs.ReadWindow(tmp_path, 4096, 8192)
    try:
        with pytest.raises(BadStoreFile, match="Is a directory"):
            unreadable.read(0)
    finally:
        unreadable.close()
