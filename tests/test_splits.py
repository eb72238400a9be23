"""Byte-range splits (Spark-free): every record exactly once, stale bytes never, at any cut."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import store_path
from mqtool.errors import UsageError
from mqtool.formats import commitlog as cl
from mqtool.store import Store
from mqtool.store import fastscan as fs
from mqtool.store.commitlog import CommitLog, Segment
from mqtool.store.splits import MAX_AUTO_SPLIT, MIN_AUTO_SPLIT, Split, SplitResult, SplitScan, auto_split_size, check_handoffs, parse_size, plan_splits

STORES = [("4.8.0", "clean-small"), ("4.8.0", "crashed-small"), ("4.9.7", "clean-small"), ("4.9.7", "crashed-small"), ("4.9.7", "rewrite-clean"), ("4.9.7", "retention-small"), ("5.3.3", "clean-small"), ("5.3.3", "crashed-small")]


def scan_splits(splits, **kw):
    """(offsets of the accepted splits' records in split order, rejected, offsets per split start)."""
    read, results = {}, []
    for sp in splits:
        scan = SplitScan(sp, **kw)
        offsets = [b.base_offset + int(p) for b in scan for p in b.rows[:, fs.COL_POS]]
        assert scan.records == len(offsets) and (not offsets or (scan.first == offsets[0] and scan.exit > offsets[-1]))
        read[sp.offset] = offsets
        results.append(SplitResult(sp.base_offset, sp.base_offset, sp.offset, scan.first, scan.exit))
    rejected = check_handoffs(results)
    bad = {r.start for r in rejected}
    return [o for sp in splits if sp.offset not in bad for o in read[sp.offset]], rejected, read


def sequential(store):
    """The broker's recovery scan (what ``mqtool dump`` reads)."""
    return [r.offset for r in store.commitlog.scan()]


def segment_records(seg: Segment):
    """Records of one segment walked from its first byte, and where that walk ended."""
    scan = fs.FastScan(CommitLog([seg], seg.size), check_crc=False)
    rows = [(b.base_offset + int(r[fs.COL_POS]), int(r[fs.COL_SIZE]), int(r[fs.COL_BODY]), int(r[fs.COL_BODY_LEN])) for b in scan for r in b.rows]
    return rows, scan.end


def cuts_everywhere(seg: Segment) -> list[int]:
    """Split starts at every kind of place: on a record boundary, inside the header (at the magic,
    inside PHYSICALOFFSET), in the middle of a body, on a record's last byte, on and just after the
    end-of-file blank or the logical end, and inside whatever follows it."""
    records, end = segment_records(seg)
    base = seg.base_offset
    cuts = set()
    for offset, size, body, body_len in records[::7]:
        pos = offset - base
        cuts.update({pos, pos + 1, pos + 4, pos + 30, body + body_len // 2, pos + size - 1})
    stop = end.offset - base
    cuts.update(p for p in (stop, stop + 1, stop + 4, stop + 8, stop + 100, stop + 5000, (stop + seg.size) // 2) if 0 < p < seg.size)
    return sorted(c for c in cuts if 0 < c < seg.size)


def splits_at(seg: Segment, cuts: list[int]) -> list[Split]:
    bounds = [0, *cuts, seg.size]
    return [Split(str(seg.path), seg.base_offset, seg.size, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def test_sizes_parse_and_the_automatic_split_size_is_clamped():
    assert parse_size("128m") == 128 << 20 and parse_size("1G") == 1 << 30 and parse_size("4096") == 4096 and parse_size("64KiB") == 64 << 10
    for bad in ("", "12q", "-1", "0"):
        with pytest.raises(UsageError):
            parse_size(bad)
    assert auto_split_size(1 << 40, 2) == MAX_AUTO_SPLIT
    assert auto_split_size(1 << 30, 8) == MIN_AUTO_SPLIT
    assert auto_split_size(12 << 30, 8) == (12 << 30) // 24


def test_plan_covers_every_byte_once():
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        segments = store.commitlog.segments
        assert [(s.start, s.end) for s in plan_splits(segments)] == [(0, s.size) for s in segments]
        splits = plan_splits(segments, 300_000)
        for seg in segments:
            ranges = [(s.start, s.end) for s in splits if s.base_offset == seg.base_offset]
            assert ranges[0][0] == 0 and ranges[-1][1] == seg.size
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


@pytest.mark.parametrize("version,name", [("4.9.7", "clean-small"), ("4.8.0", "clean-small"), ("5.3.3", "crashed-small"), ("4.9.7", "rewrite-clean")])
def test_cuts_at_every_kind_of_place_read_each_record_once(version, name):
    with Store.open(store_path(version, name)) as store:
        expected = sequential(store)
        splits = [sp for seg in store.commitlog.segments for sp in splits_at(seg, cuts_everywhere(seg))]
        union, rejected, read = scan_splits(splits)
    assert union == expected
    starts = {sp.offset for sp in splits}
    assert starts & set(expected), "some split starts exactly on a record"
    if name == "rewrite-clean":
        # stale records with correct self-offsets after the logical end: read, then rejected
        assert rejected and all(read[r.start] for r in rejected)
        assert all(r.first > r.expected for r in rejected)


@pytest.mark.parametrize("version,name", STORES)
@pytest.mark.parametrize("size", [1000, 8191, 65536])
def test_uniform_split_sizes_equal_the_sequential_scan(version, name, size):
    with Store.open(store_path(version, name)) as store:
        union, rejected, _ = scan_splits(plan_splits(store.commitlog.segments, size), window=size * 2)
        assert union == sequential(store)
        assert bool(rejected) == (name == "rewrite-clean")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(min_value=1, max_value=(1 << 20) - 1), min_size=1, max_size=12, unique=True))
def test_random_cuts_through_live_and_stale_records(cuts):
    with Store.open(store_path("4.9.7", "rewrite-clean")) as store:
        seg = store.commitlog.segments[1]  # the logical end, a torn record, then 56 stale records
        expected = [o for o in sequential(store) if o >= seg.base_offset]
        union, _, _ = scan_splits(splits_at(seg, sorted(cuts)))
    assert union == expected


def test_small_windows_change_nothing():
    with Store.open(store_path("5.3.3", "clean-small")) as store:
        splits = plan_splits(store.commitlog.segments)
        assert scan_splits(splits, window=4096, batch=7)[0] == scan_splits(splits)[0] == sequential(store)


def _embedded_segment(tmp_path):
    """A segment whose second record's body holds a well-formed record that names its own
    position, followed by zeros inside the body: a resync landing there would accept it."""
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        template = next(iter(store.commitlog.scan()))._asdict()
    template.pop("offset")
    size = 1 << 16
    data = bytearray(size)

    def put(pos: int, body: bytes) -> int:
        raw = cl.encode_message({**template, "phys_offset": pos, "body": body}, compute_crc=True)
        data[pos : pos + len(raw)] = raw
        return pos + len(raw)

    pos = put(0, b"first")
    outer = pos
    header = cl.header_size(template["sys_flag"])
    fake_at = outer + header + 100
    fake = cl.encode_message({**template, "phys_offset": fake_at, "body": b"fake"}, compute_crc=True)
    body = bytes(100) + fake + bytes(300)
    pos = put(outer, body)
    outer_end = pos
    for i in range(5):
        pos = put(pos, b"after %d" % i)
    data[pos : pos + 8] = cl.encode_blank(size - pos)[:8]
    path = tmp_path / f"{0:020d}"
    path.write_bytes(bytes(data))
    return Segment(path, 0, size), fake_at, outer_end


def test_a_false_resync_is_rejected_and_reported_never_emitted(tmp_path):
    seg, fake_at, outer_end = _embedded_segment(tmp_path)
    records, _ = segment_records(seg)
    expected = [r[0] for r in records]
    assert fake_at not in expected
    # a split boundary on the next real record: the false split is dropped, nothing is lost
    union, rejected, read = scan_splits(splits_at(seg, [fake_at - 10, outer_end]))
    assert union == expected
    assert [r.start for r in rejected] == [fake_at - 10] and read[fake_at - 10] == [fake_at]
    assert "inside the record" in rejected[0].reason
    # a false start that swallows real records: they are reported as dropped, never invented
    union, rejected, _ = scan_splits(splits_at(seg, [fake_at - 10, outer_end + 40]))
    assert set(union) < set(expected) and fake_at not in union
    missing = sorted(set(expected) - set(union))
    assert rejected and missing[0] >= fake_at - 10


def test_handoff_check_rules():
    def r(start, first, exit):
        return SplitResult("seg", 0, start, first, exit)

    assert check_handoffs([r(0, 0, 150), r(100, None, None), r(200, 150, 260), r(300, 310, 400)])[0].start == 300
    assert check_handoffs([r(0, None, None), r(100, 120, 200)])[0].expected == 0  # nothing at the segment start
    assert not check_handoffs([r(0, 0, 120), r(100, 120, 200), r(200, None, None)])
