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


def present_pages(address: int, start: int, stop: int) -> int:
    """How many pages of ``[start, stop)`` of the mapping at ``address`` are mapped (/proc/self/pagemap, bit 63)."""
    first, count = (address + start) // mmap.PAGESIZE, (stop - start) // mmap.PAGESIZE
    with open("/proc/self/pagemap", "rb") as f:
        entries = np.frombuffer(os.pread(f.fileno(), 8 * count, 8 * first), dtype="<u8")
    return int(np.count_nonzero(entries >> np.uint64(63)))


def test_a_walk_that_ran_ahead_of_the_mapping_is_not_mapped_behind(mapped):
    """The mapping thread waits for an idle core; when the walk has gone past what it mapped (and released its
    pages behind it), it goes on from the walk, not from where it was: mapping the pages the walk passed again
    kept them resident to the end of the segment (``verify --only checkpoint`` grew to 800 MB)."""
    _, buf, array = mapped
    address, window = array.ctypes.data, fs.PagesAhead.AHEAD
    ahead = fs.PagesAhead(buf, array, 0, len(buf))
    try:
        ahead.at(0)
        deadline = time.monotonic() + 30
        while ahead.mapped < window and time.monotonic() < deadline:
            time.sleep(0.01)
        jump = 3 * window
        fs.release_pages(buf, 0, jump)  # the walk went on to ``jump`` and released what it passed
        ahead.at(jump)
        while ahead.mapped < jump + window and time.monotonic() < deadline:
            time.sleep(0.01)
        assert present_pages(address, jump, jump + window) == window // mmap.PAGESIZE
        assert present_pages(address, 0, jump - (64 << 10)) == 0  # (the kernel maps a fault's 64 KiB neighbourhood with it)
    finally:
        ahead.close()


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
