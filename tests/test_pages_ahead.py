"""``fastscan.PagesAhead``: a segment's pages mapped ahead of the walk in a thread of its own,
within a bounded window, never past the file's end, and never outliving the walk."""

from __future__ import annotations

import mmap
import os
import threading
import time

import numpy as np
import pytest

from conftest import store_path
from mqtool.store import Store
from mqtool.store import fastscan as fs
from mqtool.store._pages import populate
from mqtool.store.segments import SegmentTask, analyze_segment

MIB = 1 << 20


def resident_bytes(address: int) -> int:
    """The resident size of this process's mapping starting at ``address`` (/proc/self/smaps)."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == address
            elif inside and head == "Rss:":
                return int(line.split()[1]) * 1024
    raise AssertionError("mapping not found")


@pytest.fixture
def mapped(tmp_path):
    path = tmp_path / "00000000000000000000"
    path.write_bytes(os.urandom(64 * MIB))
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return path, buf, np.frombuffer(buf, dtype=np.uint8)  # unmapped when the last reference goes


def ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "mqtool-pages-ahead"]


def test_the_pages_ahead_of_the_walk_are_mapped_within_the_window(mapped):
    _, buf, array = mapped
    address = array.ctypes.data
    assert resident_bytes(address) == 0
    ahead = fs.PagesAhead(buf, array, 0, len(buf))
    try:
        ahead.at(0)
        deadline = time.monotonic() + 30
        while resident_bytes(address) < fs.PagesAhead.AHEAD and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # a thread that did not stop at the window would map on meanwhile
        assert fs.PagesAhead.AHEAD <= resident_bytes(address) <= fs.PagesAhead.AHEAD + fs.PagesAhead.STEP
    finally:
        ahead.close()
    assert not ahead_threads()


def test_populating_past_the_end_of_a_cut_file_fails_quietly(mapped):
    """A file cut under the map: a read past its end raises SIGBUS; mapping ahead must not."""
    path, _, array = mapped
    os.truncate(path, 4 * MIB)
    assert populate(array, 0, 4 * MIB, mmap.PAGESIZE)
    assert not populate(array, 4 * MIB, 8 * MIB, mmap.PAGESIZE)
    ahead = fs.PagesAhead(mapped[1], array, 2 * MIB, 64 * MIB)
    ahead.at(2 * MIB)
    ahead.thread.join(30)
    assert not ahead.thread.is_alive()  # it stopped at the end, without a signal
    ahead.close()


def walked(store: Store) -> tuple:
    """What the two walks make of ``store``: ``FastScan``'s batches and end, each segment's report."""
    scan = fs.FastScan(store.commitlog, batch=256, stop_on_crc=False)
    rows = [(batch.base_offset, batch.rows.tolist()) for batch in scan]
    reports = [analyze_segment(SegmentTask(i, str(s.path), s.base_offset, 0, None)) for i, s in enumerate(store.commitlog.segments)]
    return rows, scan.end, reports


@pytest.mark.parametrize("version,name", [("3.2.6", "crashed-small"), ("4.9.7", "dledger-small"), ("5.3.3", "clean-small")])
def test_walks_mapping_ahead_read_what_they_read_without_and_leave_no_thread(version, name, monkeypatch):
    store = Store.open(store_path(version, name))
    without = walked(store)
    monkeypatch.setattr(fs.PagesAhead, "STEP", 4096)
    monkeypatch.setattr(fs.PagesAhead, "AHEAD", 4 * 4096)
    assert walked(store) == without
    scan = iter(fs.FastScan(store.commitlog, batch=16))
    next(scan)
    assert ahead_threads()
    scan.close()  # a consumer that stops early (``dump --limit``)
    assert not ahead_threads()
