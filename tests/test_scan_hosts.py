"""Host and offsetMsgId columns of a batch whose records mix IPv4 and IPv6 layouts: one kernel pass
(``kernels.format_hosts``, ``format_msg_ids_rows``) equals ``format_host`` / ``encode_msg_id`` row by row,
IPv4-mapped IPv6 addresses (spliced in from ``format_host``) included."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mqtool.formats.msgid import encode_msg_id, format_host
from mqtool.scan import _kernels as kernels
from mqtool.scan.batches import _hosts

HEXTETS = st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0xDB8, 0x2001, 0x7F00]), min_size=8, max_size=8)
ROWS = st.lists(st.tuples(st.booleans(), HEXTETS, st.integers(-(2**31), 2**31 - 1), st.integers(0, 2**63 - 1)), min_size=1, max_size=30)
SLOT = 40  # bytes per synthetic record: address (4 or 16), port, padding, then an 8-byte offset at +32


def _records(rows):
    raw = bytearray()
    for wide, hextets, port, offset in rows:
        address = b"".join(h.to_bytes(2, "big") for h in hextets)
        address = address if wide else address[12:]
        slot = address + port.to_bytes(4, "big", signed=True)
        raw += slot.ljust(32, b"\0") + offset.to_bytes(8, "big")
    return np.frombuffer(bytes(raw), dtype=np.uint8), [(address if wide else address[12:]) for wide, address in ((w, b"".join(h.to_bytes(2, "big") for h in x)) for w, x, _, _ in rows)]


@settings(max_examples=200, deadline=None)
@given(ROWS)
@example([(True, [0, 0, 0, 0, 0, 0xFFFF, 0x7F00, 1], 10911, 5), (False, [0] * 6 + [0xC0A8, 0x0164], 8080, 7), (True, [0x2001, 0xDB8] + [0] * 6, -1, 0)])
def test_hosts_of_mixed_layouts_equal_format_host(rows):
    buf, addresses = _records(rows)
    pos = np.arange(len(rows), dtype=np.int64) * SLOT
    at = np.zeros(len(rows), dtype=np.int64)
    wide = np.array([w for w, *_ in rows], dtype=np.bool_)
    assert _hosts(buf, pos, at, wide).to_pylist() == [format_host(a, port) for a, (_, _, port, _) in zip(addresses, rows)]
    offsets, data = kernels.format_msg_ids_rows(buf, pos, at, wide, 32)
    got = [bytes(data[offsets[i] : offsets[i + 1]]).decode() for i in range(len(rows))]
    assert got == [encode_msg_id(a, port, offset) for a, (_, _, port, offset) in zip(addresses, rows)]
