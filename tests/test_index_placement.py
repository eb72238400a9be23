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


def test_a_first_unit_whose_position_wraps_around_a_java_long_follows_whole_fillers():
    """``putMessagePositionInfo`` of a queue's first unit at QUEUEOFFSET 2^60 + 3 (damage seed 4800051):
    ``cqOffset * 20`` wraps around a Java long to 2^62 + 60, 4 bytes off the unit grid of its file;
    ``fillPreBlank`` writes whole filler units while below that position, so the unit goes to the next
    whole unit (the rebuild used to write it 4 bytes into a filler)."""
    import numpy as np

    from mqtool.dispatch.placement import S_FILL_FROM, S_FILL_TO, S_WRITE, QueueState, place_units

    file_size = 20 * 1000
    qoff = np.array([(1 << 60) + 3], dtype=np.int64)
    state, pos = QueueState().as_array(), np.empty(1, dtype=np.int64)
    placed = place_units(qoff, np.array([4194304], dtype=np.int64), np.array([1900], dtype=np.int64), state, file_size, True, True, pos)
    wrapped = ((1 << 60) + 3) * 20 % (1 << 64)  # the Java long, positive here
    base = wrapped - wrapped % file_size
    assert placed == 1 and state[S_FILL_FROM] == base and (wrapped - base) % 20 == 4
    assert state[S_FILL_TO] == pos[0] == base + (wrapped - base + 19) // 20 * 20 and state[S_WRITE] == pos[0] + 20
