"""``RebuildScan`` (one walk) dispatches exactly what its definition does with two: the broker's
recovery scan from its start segment finds the valid end (§8.3), then the served walk (the reput,
§8.12, no CRC, resuming where the log does past a record it cannot read; in a DLedger log after
its entry) dispatches every record from the first segment to that end.

On real-broker stores whose recovery starts past the first segment (clean-small: the
third-from-last segment; crashed-small: abnormal recovery), and on a damaged copy where a
record's TOTALSIZE reaches past the recovery's start segment: the served walk resumes at the
next record (in a DLedger log, after the entry: DLedger's recovery keeps it).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import VERSIONS, copy_store, fixture_version

from mqtool.dispatch import fastdispatch as fd
from mqtool.formats.dledger import ENTRY_HEADER_SIZE
from mqtool.dispatch.scanner import TAGS_DELIVERY_TIME, TopicTable, phase_scanner
from mqtool.recovery.rebuild import RebuildScan
from mqtool.store.rules import VersionRules
from mqtool.recovery.planparts import store_version
from mqtool.store import Store

pytestmark = pytest.mark.usefixtures("ahead_on_small_segments")  # the segments the reput walks whole go ahead

# the columns the spill keeps (topics are compared by name); F_KEY_START is a batch's own numbering
COMPARED = [c for c in range(fd.N_FIELDS) if c not in (fd.F_TOPIC_FP, fd.F_TOPIC_POS, fd.F_TOPIC_LEN, fd.F_KEY_START)]


def by_definition(store: Store, rules: VersionRules, start: int, index: bool, discipline: str):
    """The two walks: the recovery scan for the end, then the served walk from the first segment."""
    cl = store.commitlog
    common = dict(tags=TAGS_DELIVERY_TIME, delay_table=store.delay_table, legacy_properties=rules.legacy_properties)
    recovery = phase_scanner(cl, start, None, discipline="recovery", index_enable=False, check_crc=store.config.check_crc_on_recover, **common)
    for _ in recovery:
        pass
    topics = TopicTable()
    reput = phase_scanner(cl, cl.min_offset, recovery.end.offset, discipline=discipline, index_enable=index, check_crc=False, topics=topics, **common)
    return list(reput), topics, recovery.end, reput.skipped


def dispatched(batches, topics: TopicTable):
    fields = np.concatenate([b.fields[:, COMPARED] for b in batches]) if batches else np.empty((0, len(COMPARED)))
    keys = np.concatenate([b.keys for b in batches]) if batches else np.empty(0)
    names = [topics.names[t] for b in batches for t in b.topic_ids.tolist()]
    return fields, keys, names


def assert_same(store_dir, index: bool, expect_split: bool) -> None:
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        rules = VersionRules(store_version(store)[0])
        scan = RebuildScan(store, rules, TopicTable(), index=index)
        assert (scan.start > store.commitlog.min_offset) == expect_split
        got = list(scan)
        segments = store.commitlog.segments
        first = store.commitlog.segment_index(scan.start)
        crosses = first + 1 < len(segments) and scan.end.offset > segments[first + 1].base_offset
        head = first - store.commitlog.segment_index(store.commitlog.min_offset)  # whole segments the reput walks first
        assert any(b.spilled is not None for b in got) == (crosses or head >= 2)  # dispatched ahead, read back
        want, want_topics, want_end, want_skipped = by_definition(store, rules, scan.start, index, scan.discipline)
        a, b = dispatched(got, scan.topics), dispatched(want, want_topics)
        assert len(a[0]) > 0
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) and a[2] == b[2]
        assert (scan.end.offset, scan.end.reason) == (want_end.offset, want_end.reason)
        assert [s.offset for s in scan.skipped] == [s.offset for s in want_skipped]


@pytest.mark.parametrize("index", [False, True])
@pytest.mark.parametrize("name", ["clean-small", "crashed-small"])
@pytest.mark.parametrize("version", VERSIONS)
def test_one_walk_dispatches_what_two_walks_do(tmp_path, version, name, index):
    store_dir = copy_store(version, name, tmp_path)
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        split = RebuildScan(store, VersionRules(store_version(store)[0]), TopicTable(), index=index).start > store.commitlog.min_offset
    if name == "clean-small" and version != "5.3.3":
        assert split  # the third-from-last segment of five
    assert_same(store_dir, index, split)


@pytest.mark.parametrize(("version", "name"), [("4.8.0", "clean-small"), ("4.9.7", "clean-small"), ("5.3.3", "dledger-small")])
def test_a_totalsize_reaching_into_the_start_segment(tmp_path, version, name):
    """The served walk skips the one record and resumes at the start segment's first record (a
    DLedger log's entry header is sound: DLedger's recovery keeps it and the log after it)."""
    store_dir = copy_store(version, name, tmp_path)
    if name == "clean-small":  # 5.3.2+ starts at the first segment without queues
        (store_dir / "consumequeue").rename(tmp_path / "cq-aside")  # no queues: the 4.x start is the third-from-last segment
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        rules = VersionRules(store_version(store)[0])
        start = RebuildScan(store, rules, TopicTable(), index=False).start
        assert start > store.commitlog.min_offset
        seg = store.commitlog.segments[store.commitlog.segment_index(start) - 1]
        last = None
        for record in store.commitlog.scan(seg.base_offset, check_crc=False):
            if record.offset >= start:
                break
            last = record
    # the last record before the start segment claims a TOTALSIZE reaching 100 bytes into it
    with open(seg.path, "r+b") as f:
        f.seek(last.offset - seg.base_offset)
        f.write((start + 100 - last.offset).to_bytes(4, "big"))  # TOTALSIZE: the first field, big-endian int32
    dledger = name.startswith("dledger")
    assert_same(store_dir, False, True)
    with Store.open(store_dir, version=fixture_version(store_dir)) as store:
        scan = RebuildScan(store, VersionRules(store_version(store)[0]), TopicTable(), index=False)
        offsets = [b.fields[:, fd.F_PHYS] for b in scan]
        skipped = [s.offset for s in scan.skipped]
    header = ENTRY_HEADER_SIZE if dledger else 0  # a DLedger record's body follows its entry's header
    assert skipped == [last.offset - header]  # the walk names the entry
    assert start + header in np.concatenate(offsets)  # the start segment's first record
