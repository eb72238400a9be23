"""The store generator writes stores the decoders, consume queues and index agree on."""

from __future__ import annotations

from collections import defaultdict

import pytest

from mqtool.formats.dispatch import dispatch_request
from mqtool.store import Store, query_offsets
from mqtool.store.summary import store_summary
from mqtool.apply.synth import SynthSpec, build_store

LABELS = {"4.8": "E8-E9 (4.7.1-4.9.0)", "4.9": "E10-E12 (4.9.1-4.9.8)", "5": "E17-E18 (5.2.0-5.3.3)"}  # the eras the marks of each profile leave


@pytest.mark.parametrize("profile", ["4.8", "4.9", "5"])
def test_generated_store_is_self_consistent(tmp_path, profile):
    summary = build_store(SynthSpec(tmp_path / "s", profile=profile, seed=7, messages=2500, segment_size=1 << 20))
    with Store.open(tmp_path / "s") as store:
        assert store.version_guess.label == LABELS[profile]
        scan = store.commitlog.scan(check_crc=True)
        records = list(scan)
        assert len(records) == summary["messages"] and scan.end.is_clean
        assert len(scan.blanks) == len(store.commitlog.segments) - 1
        expected = defaultdict(list)
        for r in records:
            req = dispatch_request(r, store.delay_table, legacy_properties=store.legacy_properties)
            if req.to_consume_queue:
                expected[(req.topic, req.queue_id)].append((req.consume_queue_offset, r.offset, r.total_size, req.tags_code))
        for queue in store.consume_queues:
            assert [tuple(e) for e in queue.entries()] == expected.pop((queue.topic, queue.queue_id))
        assert not expected
        doc = store_summary(store)
        assert doc["commitlog"]["max_offset"] == summary["commitlog_end"]
        sample = records[:: max(1, len(records) // 60)]
        for r in sample:
            req = dispatch_request(r, store.delay_table, legacy_properties=store.legacy_properties)
            if req.to_index and req.uniq_key:
                assert r.offset in query_offsets(store.index_files, req.topic, req.uniq_key)


def test_fixed_message_size(tmp_path):
    build_store(SynthSpec(tmp_path / "s", messages=300, message_size=1024))
    with Store.open(tmp_path / "s") as store:
        assert {r.total_size for r in store.commitlog.scan()} == {1024}


def test_crashed_profile_leaves_an_abort_file(tmp_path):
    build_store(SynthSpec(tmp_path / "s", profile="5", messages=50, crashed=True))
    with Store.open(tmp_path / "s") as store:
        assert store.abort_present and store.abort.pid is not None


def test_refuses_a_non_empty_directory(tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "f").write_text("keep me")
    with pytest.raises(FileExistsError):
        build_store(SynthSpec(tmp_path / "x", messages=1))
