"""Random and mutated bytes never make the decoders raise anything but FormatError."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import store_path
from mqtool.formats import commitlog as cl
from mqtool.formats.errors import FormatError
from mqtool.store import fastscan as fs

SEGMENT = (store_path("5.3.3", "clean-small") / "commitlog" / "00000000000000000000").read_bytes()[:200_000]


def decode_all(buf: bytes):
    """Decode record after record like a scan; returns the stop position."""
    pos = 0
    while pos < len(buf):
        try:
            r = cl.decode_record(buf, pos)
        except FormatError:
            return pos
        if isinstance(r, cl.BlankRecord):
            return pos
        assert 0 < r.total_size <= len(buf) - pos
        pos += r.total_size
    return pos


@settings(max_examples=150, deadline=None)
@given(st.binary(min_size=0, max_size=600))
def test_random_bytes(buf):
    decode_all(buf)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SEGMENT) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_mutated_real_records_agree_with_the_compiled_walk(edits):
    data = bytearray(SEGMENT)
    for pos, value in edits:
        data[pos] = value
    stop = decode_all(bytes(data))
    out = np.empty((4096, fs.N_COLS), dtype=np.int64)
    count, pos, code, _ = fs.walk_segment(np.frombuffer(bytes(data), dtype=np.uint8), 0, len(data), False, True, out)
    assert pos == stop
