"""The index placement (``dispatch.placement.IndexPlacement``: ``IndexService.buildIndex``'s file
rolls, headers and keys, writing nothing) is what the recovery planner reads, and the index writer
(``apply.writers.IndexWriterService``) is that placement writing the files: on a real broker's
records the writer gives the files the broker wrote, the placement their names and headers."""

from __future__ import annotations

import pytest
from conftest import VERSIONS, store_path

from mqtool.apply.writers import IndexWriterService
from mqtool.dispatch.placement import IndexPlacement
from mqtool.formats import index as ixfmt
from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, dispatch_request
from mqtool.store import Store


@pytest.mark.parametrize("version", VERSIONS)
def test_the_placement_is_what_the_writer_writes_and_the_broker_wrote(tmp_path, version):
    with Store.open(store_path(version, "clean-small")) as store:
        g, rules = store.index_geometry, store.rules
        broker = [f.header for f in store.index_files]
        placement = IndexPlacement(g.hash_slot_num, g.index_num, counts_used_slots=rules.index_counts_used_slots)
        writer = IndexWriterService(tmp_path, g.hash_slot_num, g.index_num, counts_used_slots=rules.index_counts_used_slots)
        for record in store.commitlog.scan():
            request = dispatch_request(record, DEFAULT_DELAY_TABLE, legacy_properties=rules.legacy_properties)
            placement.put_request(request)
            writer.put_request(request)
    written = writer.close()
    assert placement.close() == [] and sorted(tmp_path.iterdir()) == sorted(written)
    assert len(broker) > 1  # the index rolled over
    assert [ixfmt.read_header(p.read_bytes()) for p in sorted(tmp_path.iterdir())] == [r.end for r in writer.results] == broker
    # the placement counts without a slot table: every header field but the used slots
    counted = [(r.name, r.created, r.start, r.end._replace(hash_slot_count=0)) for r in writer.results]
    assert [(r.name, r.created, r.start, r.end) for r in placement.results] == counted
