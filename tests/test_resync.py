"""The resynchronisation (``resync.scan_start`` on the compiled ``find_record_start``) answers
what its definition on the schema's decoder answers, offset by offset, on every real-broker
fixture and on damaged copies made here; and a mid-record ``dump --from-offset`` says where it
reads from."""

from __future__ import annotations

import bisect
import json
import random
import shutil
from contextlib import ExitStack

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, copy_store, manifest, store_path
from mqtool.cli import app
from mqtool.formats import commitlog as fmt
from mqtool.formats import dledger as dfmt
from mqtool.formats.errors import FormatError
from mqtool.store import Store
from mqtool.store import fastscan as fs
from mqtool.store import resync
from mqtool.store.mappedfile import MappedFile

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


_MESSAGES = {(m & 0xFFFFFFFF).to_bytes(4, "big") for m in fmt.MESSAGE_MAGICS}
_BLANK = (fmt.BLANK_MAGIC & 0xFFFFFFFF).to_bytes(4, "big")


def chains(buf, p: int, base: int, end: int) -> bool:
    """The record at ``p`` decodes with its PHYSICALOFFSET ``base + p``, and so do the records
    after it, ``RESYNC_CHAIN`` in all (fewer at a blank, zeros or the end)."""
    q = p
    for i in range(resync.RESYNC_CHAIN):
        if q >= end:
            return i > 0
        if i > 0 and end - q >= 8 and buf[q + 4 : q + 8] == _BLANK:
            return True
        try:
            record = fmt.decode_record(buf, q, base, end)
        except FormatError:
            return i > 0 and not any(buf[q : min(q + 8, end)])
        if isinstance(record, fmt.BlankRecord) or record.phys_offset != base + q:
            return False
        q += record.total_size
    return True


class Mapped:
    """Each segment of ``cl`` mapped once, with its candidates found once, in order, by ``mmap.find``
    of the magics: the positions ``p`` of the message magics' first three bytes at ``p + 4``, and the
    end-of-file blanks (a blank magic at ``b + 4`` whose length field is the bytes left, ``end - b``).
    ``defined_start`` asks for those at or after a position for every probed offset."""

    def __init__(self, cl, stack: ExitStack):
        self.cl, self.stack, self.segments = cl, stack, {}

    def __getitem__(self, i: int) -> tuple:
        if i not in self.segments:
            seg = self.cl.segments[i]
            mf = self.stack.enter_context(MappedFile(seg.path, seg.base_offset))
            buf, end, magics, blanks = mf.buf, mf.size, [], []
            p = buf.find(b"\xda\xa3\x20", 4) - 4
            while p >= 0:
                magics.append(p)
                p = buf.find(b"\xda\xa3\x20", p + 5) - 4
            b = buf.find(_BLANK, 4) - 4
            while b >= 0:
                if int.from_bytes(buf[b : b + 4], "big", signed=True) == end - b:
                    blanks.append(b)
                b = buf.find(_BLANK, b + 5) - 4
            if getattr(self.cl, "is_entry_file", lambda seg: False)(seg):  # DLedger: the entries describing themselves
                magics, blanks = entry_positions(buf, end, seg.base_offset), None
            self.segments[i] = seg, buf, end, magics, blanks
        return self.segments[i]


def entry_positions(buf, end: int, base: int) -> list[int]:
    """Positions of the DLedger entry headers (the schema's decoder) that describe themselves: magic 1,
    ``pos`` their own offset, ``size`` their body's + 48 (§15.2, ``DLedgerMmapFileStore.recover``)."""
    found, p = [], buf.find(b"\0\0\0\x01")
    while 0 <= p <= end - dfmt.ENTRY_HEADER_SIZE:
        h = dfmt.decode_entry_header(buf, p, base)
        if h.pos == base + p and h.size > dfmt.ENTRY_HEADER_SIZE - 4 and h.size == h.body_size + dfmt.ENTRY_HEADER_SIZE:
            found.append(p)
        p = buf.find(b"\0\0\0\x01", p + 1)
    return found


def defined_start(mapped: Mapped, offset: int) -> int:
    """``resync.scan_start``'s rule on the decoder (a record or a blank at the position, else the
    first chaining message or exact end-of-file blank after it, segment by segment; in a DLedger data
    file the record of the first entry describing itself whose record starts there or after), candidates
    from ``Mapped``."""
    cl = mapped.cl
    index = cl.segment_index(offset)
    if index is None:
        return offset
    for i in range(index, len(cl.segments)):
        seg, buf, end, magics, blanks = mapped[i]
        pos = offset - seg.base_offset if i == index else 0
        if blanks is None:  # a DLedger data file: the first entry whose record starts at ``pos`` or after
            after = bisect.bisect_left(magics, pos - dfmt.ENTRY_HEADER_SIZE)
            if after < len(magics):
                return seg.base_offset + magics[after] + dfmt.ENTRY_HEADER_SIZE
            continue
        try:
            fmt.decode_record(buf, pos, seg.base_offset, end)
            return seg.base_offset + pos
        except FormatError:
            pass
        after = bisect.bisect_left(blanks, pos)
        blank = blanks[after] if after < len(blanks) else -1
        blank = blank if 0 <= blank <= end - 8 else -1
        for p in magics[bisect.bisect_left(magics, pos) :]:
            if not (p <= end - 8 and (blank < 0 or p < blank)):
                break
            if buf[p + 4 : p + 8] in _MESSAGES and chains(buf, p, seg.base_offset, end):
                return seg.base_offset + p
        if blank >= 0:
            return seg.base_offset + blank
    return offset


def assert_engines_agree(root, starts: list[int], seed: int = 0) -> int:
    with Store.open(root) as store, ExitStack() as stack:
        cl = store.commitlog
        mapped = Mapped(cl, stack)
        checked = 0
        for offset in probe_offsets(store, starts, seed):
            assert resync.scan_start(cl, offset) == defined_start(mapped, offset), (root, offset)
            checked += 1
        return checked


def message_offsets(version: str, name: str) -> list[int]:
    return sorted(m["commitLogOffset"] for m in manifest(version, name)["messages"])


@pytest.mark.parametrize("version,name", STORES, ids=[f"{v}-{n}" for v, n in STORES])
def test_resync_equals_its_definition_on_every_fixture(version, name):
    assert assert_engines_agree(store_path(version, name), message_offsets(version, name)) > 80


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
def test_resync_equals_its_definition_past_damage(tmp_path, version, damage):
    root = copy_store(version, "crashed-small", tmp_path)
    starts = message_offsets(version, "crashed-small")
    path = root / "commitlog" / f"{0:020d}"
    seg = bytearray(path.read_bytes())
    DAMAGE[damage](seg, starts)
    path.write_bytes(bytes(seg))
    assert assert_engines_agree(root, starts, seed=1) > 1000


def test_a_mid_record_from_offset_says_where_it_reads_from(tmp_path):
    root = tmp_path / "a store"
    shutil.copytree(store_path("5.3.3", "clean-small"), root)
    starts = message_offsets("5.3.3", "clean-small")
    result = CliRunner().invoke(app, ["dump", str(root), "--from-offset", str(starts[3] + 100), "--limit", "2", "-f", "json"])
    assert result.exit_code == 0, result.output
    assert [r["offset"] for r in json.loads(result.stdout)] == starts[4:6]
    assert f"--from-offset {starts[3] + 100} is not a record start; reading from the next record at {starts[4]}" in result.stderr


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_a_mid_record_from_offset_in_a_dledger_store_reads_from_the_next_entrys_record(version):
    """A DLedger record's offset is its entry's position + 48: the next record starts 48 bytes after the
    one before it ends. Before, the search looked for a classic record chaining to the next and found
    none until the last record (4.9.7 dledger-small: 49 read from 1911930, skipping 698 records)."""
    starts = message_offsets(version, "dledger-small")
    for inside in (starts[0] + 1, starts[5] + 100, starts[6] - 30, starts[7] - 1):
        result = CliRunner().invoke(app, ["dump", str(store_path(version, "dledger-small")), "--from-offset", str(inside), "--limit", "2", "-f", "json"])
        at = bisect.bisect_left(starts, inside)
        assert result.exit_code == 0, result.output
        assert [r["offset"] for r in json.loads(result.stdout)] == starts[at : at + 2], inside
