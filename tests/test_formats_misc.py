"""Consume queue, index, checkpoint, markers, config and hash schemas: symmetric, and equal to
their derived fast codecs on the real fixture files."""

from __future__ import annotations

import itertools
import json

import pytest

from conftest import MAIN_VERSIONS, store_path
from mqtool.formats import checkpoint as cp
from mqtool.formats import config as cfg
from mqtool.formats import consumequeue as cq
from mqtool.formats import index as ix
from mqtool.formats import markers
from mqtool.formats.hashing import index_key_hash, java_string_hash, tags_code
from mqtool.formats.properties import encode_properties, parse_properties
from mqtool.store import Store


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_consume_queue_units_parse_build_and_fast_path_agree(version):
    path = next((store_path(version, "clean-small") / "consumequeue" / "TopicTest" / "0").iterdir())
    data = path.read_bytes()
    for pos in range(0, len(data), 20):
        raw = data[pos : pos + 20]
        parsed = cq.ConsumeQueueEntryStruct.parse(raw)
        assert tuple(v for k, v in parsed.items() if not k.startswith("_")) == cq.ENTRY.unpack(raw)
        assert cq.ConsumeQueueEntryStruct.build(parsed) == raw == cq.ENTRY.pack(*cq.ENTRY.unpack(raw))


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_index_file_parse_build_and_fast_path_agree(version):
    with Store.open(store_path(version, "clean-small")) as store:
        f = store.index_files[0]
        data = f.path.read_bytes()
        header = ix.IndexHeaderStruct.parse(data[:40])
        assert ix.IndexHeaderStruct.build(header) == data[:40]
        assert tuple(v for k, v in header.items() if not k.startswith("_")) == tuple(f.header)
        for entry in list(f.entries())[:500]:
            pos = ix.entry_position(f.geometry.hash_slot_num, entry.position)
            parsed = ix.IndexEntryStruct.parse(data[pos : pos + 20])
            assert (parsed.key_hash, parsed.phy_offset, parsed.time_diff, parsed.prev_index) == entry[1:]
            assert ix.IndexEntryStruct.build(parsed) == data[pos : pos + 20]


def test_checkpoint_round_trip_and_rules():
    raw = (store_path("4.9.7", "clean-small") / "checkpoint").read_bytes()
    c = cp.decode_checkpoint(raw)
    assert cp.CheckpointStruct.build(cp.CheckpointStruct.parse(raw)) == raw
    assert cp.encode_checkpoint(c) == raw
    assert c.min_timestamp == min(c.physic_msg_timestamp, c.logics_msg_timestamp) - 3000
    assert c.min_timestamp_index == min(c.min_timestamp, c.index_msg_timestamp)
    assert cp.used_bytes(raw) <= 24
    assert cp.StoreCheckpoint(1000, 5000, 0).min_timestamp == 0  # clamped at 0


def test_markers():
    assert markers.decode_abort((store_path("5.3.3", "crashed-small") / "abort").read_bytes()).pid > 0
    assert markers.decode_abort((store_path("4.9.7", "crashed-small") / "abort").read_bytes()).pid is None
    assert markers.LockFileStruct.parse((store_path("4.9.7", "clean-small") / "lock").read_bytes()).content == b"lock"


def test_config_documents(tmp_path):
    topics, _ = cfg.decode_config("topics.json", json.dumps({"topicConfigTable": {"A": {"topicName": "A"}}, "dataVersion": {}}))
    assert cfg.topic_names(topics) == {"A"}
    doc, offsets = cfg.decode_config("consumerOffset.json", json.dumps({"offsetTable": {"A@g1": {"0": 5, "3": 9}}}))
    assert offsets == cfg.consumer_offsets(doc) == {("A", "g1", 0): 5, ("A", "g1", 3): 9}
    for bad in ("", "{", '{"other": 1}'):
        with pytest.raises(cfg.ConfigError):
            cfg.decode_config("topics.json", bad)
    conf = cfg.parse_java_properties("# c\nbrokerName = b1\nstorePathRootDir=/data/store\n! x\nflag: true\n")
    assert conf == {"brokerName": "b1", "storePathRootDir": "/data/store", "flag": "true"}
    # Properties.load's other separators: whitespace, and whitespace around one '=' or ':' (DLedger's
    # checkpoint was read with '=' only: ``committedIndex:5`` was no committed index at all)
    conf = cfg.parse_java_properties("committedIndex:5\nendIndex 9\nflushDiskType  =  SYNC_FLUSH\na:b=c\nalone\n=v\n")
    assert conf == {"committedIndex": "5", "endIndex": "9", "flushDiskType": "SYNC_FLUSH", "a": "b=c", "alone": "", "": "v"}



def test_delay_levels_read_as_parse_delay_level_does(tmp_path):
    """Before: a messageDelayLevel the broker's loop stops in (two spaces, an unknown unit, a
    number Long.parseLong refuses) ended every read of a delayed record as an internal error; the
    broker keeps the levels before it, and a non-empty bad token still counts as the max level
    (delivered after computeDeliverTimestamp's 1000 ms)."""
    from typer.testing import CliRunner

    from mqtool.cli import app
    from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, parse_delay_levels

    assert len(DEFAULT_DELAY_TABLE) == 18 and DEFAULT_DELAY_TABLE[18] == 7_200_000
    assert parse_delay_levels("1s  5s") == {1: 1000}
    assert parse_delay_levels(" 1s") == {}
    assert parse_delay_levels("1s 5s ") == {1: 1000, 2: 5000}
    assert parse_delay_levels("1s 5x 10s") == parse_delay_levels("1s 1_0s 10s") == parse_delay_levels("1s s") == {1: 1000, 2: 1000}
    conf = tmp_path / "broker.conf"
    conf.write_text("messageDelayLevel=1s  5s 10s\n", encoding="utf-8")
    res = CliRunner().invoke(app, ["verify", str(store_path("4.9.7", "config-real")), "--broker-config", str(conf), "--only", "cq"])
    assert res.exit_code in (0, 1), res.output


def test_java_hashes():
    assert java_string_hash("") == 0
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert index_key_hash("polygenelubricants") == 0  # Math.abs(MIN_VALUE) stays negative -> 0
    assert java_string_hash("😀") == 31 * 0xD83D + 0xDE00  # UTF-16 surrogate units
    assert tags_code(None) == tags_code("") == 0


def test_properties_codec_versions():
    props = {"KEYS": "a b", "TAGS": "t", "X": "v\x01w"}
    assert encode_properties(props, trailing_separator=False) == b"KEYS\x01a b\x02TAGS\x01t\x02X\x01v\x01w"
    assert encode_properties(props).endswith(b"\x02")
    assert parse_properties(encode_properties(props)) == props  # 4.9.1+ keeps a value with \x01
    assert "X" not in parse_properties(encode_properties(props), legacy=True)  # the old reader drops it
    assert parse_properties(b"K\x01\x02\x01v\x02ok\x01yes") == {"ok": "yes"}  # empty key or value dropped


def test_batch_and_ext_units_are_symmetric():
    unit = cq.BatchConsumeQueueUnitStruct.build(dict(phys_offset=123, size=456, tags_code=-7, store_time=1, msg_base_offset=10, batch_size=3, compacted_offset=-1, reserved=0))
    assert len(unit) == cq.BATCH_UNIT_SIZE == 46 and cq.BATCH_UNIT.unpack(unit) == (123, 456, -7, 1, 10, 3, -1, 0)
    ext = cq.ConsumeQueueExtUnitStruct.build(dict(size=28, tags_code=5, msg_store_time=6, bitmap_size=8, filter_bitmap=b"\xff" * 8))
    assert cq.ConsumeQueueExtUnitStruct.parse(ext).filter_bitmap == b"\xff" * 8
    assert cq.is_ext_address(cq.EXT_MAX_ADDRESS) and not cq.is_ext_address(-(2**31))


def test_compiled_java_hash_equals_java_string_hash_at_every_length_and_alignment():
    """``textscan.java_hash_utf8`` (four ASCII bytes at a time, then byte by byte)
    equals ``java_string_hash`` for ASCII, 2-, 3- and 4-byte UTF-8 at every position, and
    composes; ASCII runs of every length at every alignment, the highest ASCII bytes among them."""
    import numpy as np

    from mqtool.store.textscan import java_hash_utf8

    mixed = ["a", "Z", "0", " ", "é", "主", "😀", "~"]
    ascii_only = ["a", "Z", "0", " ", "~", "\x7f", "\x03"]
    rng = np.random.default_rng(7)
    for length, pieces in itertools.product(range(0, 41), (mixed, ascii_only)):
        for _ in range(6):
            text = "".join(pieces[i] for i in rng.integers(0, len(pieces), length))
            raw = np.frombuffer(b"xx" + text.encode() + b"yy", dtype=np.uint8)
            h, units, ok = java_hash_utf8(raw, 2, raw.shape[0] - 2, np.int64(0))
            assert ok and units == len(text.encode("utf-16-le")) // 2
            assert h == java_string_hash(text) & 0xFFFFFFFF, text
            cut = len(text[: length // 2].encode()) + 2
            first, _, _ = java_hash_utf8(raw, 2, cut, np.int64(0))
            assert java_hash_utf8(raw, cut, raw.shape[0] - 2, first)[0] == h  # the state carries on
