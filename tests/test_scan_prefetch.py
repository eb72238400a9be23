"""``Prefetch`` (dump builds the next batch in a thread): the source's items in order, its error
raised in the consumer after the items before it, and an early close stops the worker."""

from __future__ import annotations

import threading

import pytest

from conftest import store_path
from mqtool.records import MESSAGE_FIELDS
from mqtool.scan.messages import MessageScan
from mqtool.scan.prefetch import Prefetch
from mqtool.store import Store


def test_the_batches_of_a_scan_in_order_and_the_scan_end():
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        direct = MessageScan(store, columns=MESSAGE_FIELDS, stop_on_crc=False, batch=128)
        expected = [b.column("offset").to_pylist() for b in direct]
        scan = MessageScan(store, columns=MESSAGE_FIELDS, stop_on_crc=False, batch=128)
        with Prefetch(scan) as batches:
            got = [b.column("offset").to_pylist() for b in batches]
        assert got == expected and len(got) > 10
        assert scan.end == direct.end


def test_an_error_of_the_source_is_raised_in_the_consumer_after_the_items_before_it():
    def source():
        yield 1
        yield 2
        raise LookupError("damaged")

    got = []
    with pytest.raises(LookupError, match="damaged"):
        for item in Prefetch(source()):
            got.append(item)
    assert got == [1, 2]


def test_closing_early_stops_the_worker():
    made = []

    def endless():
        i = 0
        while True:
            made.append(i)
            yield i
            i += 1

    before = threading.active_count()
    with Prefetch(endless(), depth=2) as items:
        assert [next(items) for _ in range(3)] == [0, 1, 2]
    assert threading.active_count() == before
    assert len(made) <= 3 + 2 + 1  # what was taken, the queue, the one being built
