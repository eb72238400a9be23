"""``mqtool.scan.read_batches`` reads exactly the records the record-by-record scan reads, with the same fields."""

from __future__ import annotations

import pytest

from conftest import store_path
from mqtool.store.records import message_dict
from mqtool.scan.filter import MessageFilter
from mqtool.scan.messages import MessageScan
from mqtool.store import Store

CLASSIC = [("4.8.0", "clean-small"), ("4.8.0", "crashed-small"), ("4.9.7", "clean-small"), ("4.9.7", "crashed-small"),
           ("4.9.7", "retention-small"), ("4.9.7", "rewrite-clean"), ("4.9.7", "batch-small"), ("4.9.7", "config-real"),
           ("5.3.3", "clean-small"), ("5.3.3", "crashed-small"), ("5.3.3", "lmq-small"), ("5.3.3", "timer-small")]
FIELDS = ["offset", "topic", "queue_id", "queue_offset", "store_timestamp", "tags", "keys", "uniq_key", "msg_id"]


@pytest.mark.parametrize("version,name", CLASSIC)
def test_batches_equal_the_record_scan(version, name):
    with Store.open(store_path(version, name)) as store:
        records = store.commitlog.scan(check_crc=True)
        expected = [{k: d[k] for k in FIELDS} for d in (message_dict(r, legacy_properties=store.legacy_properties, delay_table=store.delay_table) for r in records)]
        scan = MessageScan(store, columns=FIELDS)
        got = [row for batch in scan for row in batch.to_pylist()]
        assert len(got) > 0 and got == expected
        assert (scan.end.offset, scan.end.reason) == (records.end.offset, records.end.reason)


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_filters_apply_on_batches(version):
    with Store.open(store_path(version, "clean-small")) as store:
        rows = [r for b in MessageScan(store, columns=FIELDS) for r in b.to_pylist()]
        probe = next(r for r in rows if r["keys"] and r["tags"] and r["uniq_key"])
        match = MessageFilter(topics=(probe["topic"],), queue=probe["queue_id"], tag=probe["tags"], key=probe["keys"][0], uniq_key=probe["uniq_key"])
        got = [r["offset"] for b in MessageScan(store, columns=["offset"], match=match) for r in b.to_pylist()]
        assert got == [r["offset"] for r in rows if r["topic"] == probe["topic"] and r["queue_id"] == probe["queue_id"] and r["tags"] == probe["tags"]
                       and probe["keys"][0] in r["keys"] and r["uniq_key"] == probe["uniq_key"]]
        assert probe["offset"] in got


@pytest.mark.parametrize("version,name", [("4.9.7", "clean-small"), ("5.3.3", "timer-small"), ("4.8.0", "crashed-small")])
def test_a_filter_decided_first_gives_the_rows_of_the_filtered_full_batches(version, name):
    """The filter is decided on its own columns, then the kept rows alone are built: every field of
    every row equals the unfiltered scan's row, over batches the filter keeps whole, in part or not at all."""
    with Store.open(store_path(version, name)) as store:
        rows = [r for b in MessageScan(store, batch=64) for r in b.to_pylist()]
        probe = next(r for r in rows[len(rows) // 2 :] if r["tags"])
        cases = [
            (MessageFilter(since=probe["store_timestamp"]), lambda r: r["store_timestamp"] >= probe["store_timestamp"]),
            (MessageFilter(topics=(probe["topic"],)), lambda r: r["topic"] == probe["topic"]),
            (MessageFilter(tag=probe["tags"]), lambda r: r["tags"] == probe["tags"]),
            (MessageFilter(topics=(probe["topic"],), until=probe["store_timestamp"]), lambda r: r["topic"] == probe["topic"] and r["store_timestamp"] <= probe["store_timestamp"]),
        ]
        for match, keeps in cases:
            expected = [r for r in rows if keeps(r)]
            got = [r for b in MessageScan(store, match=match, batch=64) for r in b.to_pylist()]
            assert 0 < len(got) < len(rows) and got == expected, match


@pytest.mark.parametrize("version,name", CLASSIC)
def test_builder_threads_give_the_same_batches_in_order(version, name):
    """``workers=2`` (``dump``'s scan): the same rows, every field, in the same order, and the same end."""
    with Store.open(store_path(version, name)) as store:
        one = MessageScan(store, stop_on_crc=False, batch=50)
        expected = [r for b in one for r in b.to_pylist()]
        two = MessageScan(store, stop_on_crc=False, batch=50, workers=2)
        got = [r for b in two for r in b.to_pylist()]
        assert len(got) > 0 and got == expected
        assert (two.end.offset, two.end.reason, two.end.detail) == (one.end.offset, one.end.reason, one.end.detail)
        probe = next(r for r in expected if r["tags"])
        match = MessageFilter(tag=probe["tags"])
        assert [r for b in MessageScan(store, match=match, batch=50, stop_on_crc=False, workers=2) for r in b.to_pylist()] == [r for r in expected if r["tags"] == probe["tags"]]
