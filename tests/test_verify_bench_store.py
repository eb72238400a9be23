"""``bench/make_store.py`` at small size: its records, consume queues and index files must be
exactly what the broker (the project's broker-rule decoder and writers) gives for them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from mqtool.formats import commitlog as cl
from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, dispatch_request
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions
from mqtool.apply.writers import ConsumeQueueWriter, IndexWriterService

spec_ = importlib.util.spec_from_file_location("make_store", ROOT / "bench" / "make_store.py")
make_store = sys.modules.setdefault("make_store", importlib.util.module_from_spec(spec_))
spec_.loader.exec_module(make_store)

GEOMETRY = dict(segment_size=256 << 10, cq_file_size=400 * 20, hash_slot_num=97, index_num=600)


@pytest.fixture(scope="module", params=[("1k", "4.9"), ("128", "5")])
def bench_store(request, tmp_path_factory):
    size, profile = request.param
    spec = make_store.StoreSpec(size=1 << 20, message_size=make_store.parse_size(size), profile=profile, templates=40, **GEOMETRY)
    out = tmp_path_factory.mktemp("bench") / spec.name
    summary = make_store.build_store(spec, out, chunk_bytes=40_000, log=lambda m: None)
    return spec, out, summary


def records(path: Path):
    with Store.open(path) as store:
        scan = store.commitlog.scan(check_crc=True)
        found = list(scan)
        return found, scan.end, store.legacy_properties


def test_records_decode_with_correct_crcs_and_offsets(bench_store):
    spec, path, summary = bench_store
    found, end, _ = records(path)
    assert len(found) == summary["records"] and end.is_clean
    assert all(r.total_size == spec.message_size and r.phys_offset == r.offset and r.crc_ok() for r in found)
    numbered = [r.body for r in found if r.body_length >= len(make_store.SEQ_PREFIX) + make_store.SEQ_DIGITS]
    assert len(set(numbered)) == len(numbered) and (numbered or spec.message_size < 256)  # a sequence number in each body
    per_segment = (spec.segment_size - 8) // spec.message_size
    with Store.open(path) as store:
        for seg in store.commitlog.segments[:-1]:
            blank = store.commitlog.read_record(seg.base_offset + per_segment * spec.message_size)
            assert isinstance(blank, cl.BlankRecord) and blank.total_size == spec.segment_size - per_segment * spec.message_size
    kinds = {r.transaction_type for r in found}
    assert cl.TransactionType.NOT_TYPE in kinds
    next_offset: dict = {}
    for r in found:
        if r.transaction_type in (cl.TransactionType.NOT_TYPE, cl.TransactionType.COMMIT):
            key = (r.topic, r.queue_id)
            assert r.queue_offset == next_offset.get(key, 0)
            next_offset[key] = r.queue_offset + 1
        else:
            assert r.queue_offset == 0


def test_consume_queues_and_index_equal_the_broker_rule_writers(bench_store, tmp_path):
    spec, path, _ = bench_store
    found, _, legacy = records(path)
    cq = ConsumeQueueWriter(tmp_path / "consumequeue", spec.cq_file_size)
    index = IndexWriterService(tmp_path / "index", spec.hash_slot_num, spec.index_num)
    for r in found:
        request = dispatch_request(r, DEFAULT_DELAY_TABLE, legacy_properties=legacy)
        if request.to_consume_queue:
            cq.put_request(request)
        index.put_request(request)
    cq.close(fsync=False)
    index.close()
    for kind in ("consumequeue", "index"):
        ours = {p.relative_to(path / kind): p.read_bytes() for p in (path / kind).rglob("*") if p.is_file()}
        reference = {p.relative_to(tmp_path / kind): p.read_bytes() for p in (tmp_path / kind).rglob("*") if p.is_file()}
        assert sorted(ours) == sorted(reference)
        assert all(ours[name] == reference[name] for name in ours), kind
    assert len(list((path / "index").iterdir())) > 1  # the index rolled over at least once


def test_the_generated_store_verifies_sound(bench_store):
    _, path, summary = bench_store
    with Store.open(path) as store:
        run = Verification(store, VerifyOptions(keep_going=True))
        assert list(run.findings()) == []
    assert run.summary.records == summary["records"] and run.summary.index_entries > 0
