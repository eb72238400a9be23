"""``mqtool.scan.compute``: Arrow's functions called by name give what ``pyarrow.compute`` gives,
``numbers`` what ``pa.array`` gives, and a small store's commands do not load ``pyarrow.compute``
(some 30 ms of a command's start-up: ``mqtool/private_api.py``)."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import manifest, run_loading, store_path
from mqtool.scan import compute
from mqtool.scan.messages import read_batches
from mqtool.scan.schema import MESSAGE_SCHEMA
from mqtool.store import Store

STORE = store_path("5.3.3", "clean-small")


@pytest.fixture(scope="module")
def batch() -> pa.RecordBatch:
    return next(read_batches(Store.open(STORE)))


@pytest.mark.parametrize("field", [f for f in MESSAGE_SCHEMA if pa.types.is_integer(f.type) or pa.types.is_boolean(f.type) or pa.types.is_timestamp(f.type)], ids=lambda f: f.name)
def test_numbers_are_what_pa_array_makes(field, batch):
    rng = np.random.default_rng(5)
    wide = rng.integers(-(1 << 40), 1 << 40, (300, 3))
    values = wide[:, 1] if not pa.types.is_boolean(field.type) else wide[:, 1] > 0  # a strided column, as callers pass
    if pa.types.is_int32(field.type):
        values = values.astype(np.int32)
    valid = rng.random(300) > 0.2
    assert compute.numbers(values, field.type).equals(pa.array(values, field.type))
    assert compute.numbers(values, field.type, valid).equals(pa.array(values, field.type, mask=~valid))
    assert compute.numbers(values, field.type, np.ones(300, dtype=bool)).null_count == 0
    if field.name in batch.schema.names and not pa.types.is_timestamp(field.type):
        column = batch[field.name]
        assert compute.numbers(column.to_numpy(zero_copy_only=False), field.type).equals(column)


def test_the_functions_by_name_are_pyarrow_computes(batch):
    rows = pa.array([5, 0, 3, 3], pa.int64())
    topics = batch["topic"]
    some = pa.array(sorted(set(topics.to_pylist()))[:1], pa.string())
    equal = pc.equal(batch["queue_id"], 1)
    nulls = pa.array([True, None, False])
    pairs = [
        (compute.take(batch, rows), pc.take(batch, rows)),
        (compute.take(topics, rows), pc.take(topics, rows)),
        (compute.take(topics, np.array([5, 0, 3, 3])), pc.take(topics, rows)),  # numpy indices
        (compute.take(topics, np.array([True, False, True])), pc.take(topics, pa.array([1, 0, 1]))),
        (compute.filter(batch, equal), batch.filter(equal)),
        (compute.equal(batch["queue_id"], 1), equal),
        (compute.and_(equal, compute.greater(batch["size"], 300)), pc.and_(equal, pc.greater(batch["size"], 300))),
        (compute.is_in(topics, some), pc.is_in(topics, value_set=some)),
        (compute.index_in(topics, some), pc.index_in(topics, value_set=some)),
        (compute.fill_null(nulls, False), pc.fill_null(nulls, False)),
        (compute.fill_null(pa.array([1, None], pa.int32()), 0), pc.fill_null(pa.array([1, None], pa.int32()), 0)),
        (compute.cast(batch["queue_offset"], pa.string()), pc.cast(batch["queue_offset"], pa.string())),
        (compute.dictionary_encode(topics), pc.dictionary_encode(topics)),
        (compute.list_flatten(batch["keys"]), pc.list_flatten(batch["keys"])),
        (compute.list_parent_indices(batch["keys"]), pc.list_parent_indices(batch["keys"])),
        (compute.is_valid(batch["tags"]), pc.is_valid(batch["tags"])),
        (compute.map_lookup(batch["properties"], options=compute.MapLookupOptions(pa.scalar("UNIQ_KEY"), "first")), pc.map_lookup(batch["properties"], "UNIQ_KEY", "first")),
        (compute.binary_join_element_wise('"', topics, '"', ""), pc.binary_join_element_wise('"', topics, '"', "")),
        (compute.match_substring_regex(topics, options=compute.MatchSubstringOptions("[0-9]")), pc.match_substring_regex(topics, "[0-9]")),
        (compute.if_else(equal, topics, batch["msg_id"]), pc.if_else(equal, topics, batch["msg_id"])),
    ]
    for ours, theirs in pairs:
        assert ours.equals(theirs)
    assert len(batch) > 5 and compute.filter(batch, equal).num_rows not in (0, len(batch))  # the filter keeps some rows, not all


PROBED = ("pyarrow.compute",)


@pytest.mark.parametrize("argv", [
    ["survivors", "{store}", "{ids}"], ["survivors", "{store}", "{ids}", "-f", "jsonl"], ["salvage", "{store}"], ["salvage", "{store}", "-f", "jsonl"],
    ["stats", "{store}"], ["verify", "{store}"], ["dump", "{store}", "--topic", "{topic}", "-f", "jsonl"],
], ids=lambda a: " ".join(x for x in a if "{" not in x))
def test_a_small_stores_command_does_not_load_pyarrow_compute(argv, tmp_path):
    messages = manifest("5.3.3", "clean-small")["messages"]
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(m["uniqKey"] + "\n" for m in messages[:80] if m.get("uniqKey")))
    argv = [a.format(store=STORE, ids=ids, topic=messages[0]["topic"]) for a in argv]
    proc, loaded = run_loading(argv, PROBED, env={**os.environ, "COLUMNS": "100"})
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout.strip()
    assert loaded == []
