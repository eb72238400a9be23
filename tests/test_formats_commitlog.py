"""The commit log decoder against the real brokers' manifests, construct, and the encoder."""

from __future__ import annotations

import hashlib
import zlib

import construct
import pytest

from conftest import ALL_VERSIONS, BATCH_VERSIONS, MAIN_VERSIONS, VERSIONS, manifest, parse_host, store_path
from mqtool.store.rules import BrokerVersion, VersionRules
from mqtool.formats import commitlog as cl
from mqtool.formats.dispatch import DEFAULT_DELAY_TABLE, dispatch_request
from mqtool.formats.errors import CorruptRecord, LengthMismatch, TruncatedRecord
from mqtool.formats.hashing import tags_code
from mqtool.formats.msgid import decode_msg_id
from mqtool.formats.properties import split_keys
from mqtool.store import Store
from repair_support import assert_tags_code

SEGMENT = 1 << 20


def fixture_records(version: str, name: str = "clean-small"):
    """(manifest message, raw record bytes, segment bytes, position) for every manifest message."""
    segments: dict[int, bytes] = {}
    for msg in manifest(version, name)["messages"]:
        base = msg["commitLogOffset"] - msg["commitLogOffset"] % SEGMENT
        if base not in segments:
            segments[base] = (store_path(version, name) / "commitlog" / f"{base:020d}").read_bytes()
        data = segments[base]
        pos = msg["commitLogOffset"] - base
        yield msg, data[pos : pos + msg["size"]], data, pos


STORES = [(v, "clean-small") for v in ALL_VERSIONS] + [(v, "batch-small") for v in BATCH_VERSIONS] + [("5.3.3", "lmq-small"), ("5.3.3", "timer-small")]


@pytest.mark.parametrize("version,name", STORES)
def test_every_message_decodes_to_the_manifest(version, name):
    legacy = VersionRules(BrokerVersion.parse(version)).legacy_properties
    count = 0
    for msg, raw, data, pos in fixture_records(version, name):
        base = msg["commitLogOffset"] - pos
        r = cl.decode_record(data, pos, base)
        props = r.property_map(legacy=legacy)
        assert r.offset == r.phys_offset == msg["commitLogOffset"]
        assert r.total_size == msg["size"]
        assert r.topic_name == msg["topic"]
        assert (r.queue_id, r.queue_offset, r.sys_flag, r.flag) == (msg["queueId"], msg["queueOffset"], msg["sysFlag"], msg["flag"])
        assert r.body_crc == msg["bodyCRC"] and r.crc_ok()
        assert (r.born_timestamp, r.store_timestamp) == (msg["bornTimestamp"], msg["storeTimestamp"])
        assert parse_host(r.born_host) == parse_host(msg["bornHost"])
        assert parse_host(r.store_host) == parse_host(msg["storeHost"])
        assert (r.reconsume_times, r.prepared_transaction_offset) == (msg["reconsumeTimes"], msg["preparedTransactionOffset"])
        assert r.msg_id == msg["msgId"]
        assert props == msg["properties"]
        assert props.get("TAGS") == msg["tags"]
        assert tags_code(props.get("TAGS")) == msg["tagsHashCode"]
        assert split_keys(props.get("KEYS")) == msg["keys"]
        assert props.get("UNIQ_KEY") == msg["uniqKey"]
        assert r.body_length == msg["bodyLength"]
        assert hashlib.sha256(r.body).hexdigest() == msg["bodySha256"]
        assert r.transaction_type == msg["tranType"]
        if msg.get("dispatched"):
            req = dispatch_request(r, DEFAULT_DELAY_TABLE, legacy_properties=legacy)
            assert_tags_code(version, msg["topic"], req.tags_code, msg["cqTagsCode"])  # 3.2.6: §2.15
        if msg.get("batch"):  # a batch member carries the batch's properties after its own (WAIT twice)
            assert r.properties.decode().count("WAIT\x01") == 2
        count += 1
    assert count == manifest(version, name)["messageCount"]


@pytest.mark.parametrize("version", VERSIONS)
def test_fast_decoder_equals_construct_and_round_trips(version):
    for msg, raw, data, pos in fixture_records(version):
        fast = cl.decode_record(data, pos, msg["commitLogOffset"] - pos)._asdict()
        fast.pop("offset")
        parsed = cl.CommitLogMessageStruct.parse(raw)
        assert {k: v for k, v in parsed.items() if not k.startswith("_")} == fast
        assert cl.CommitLogMessageStruct.build(parsed) == raw
        assert cl.encode_message(fast) == raw
        assert cl.encode_message(fast, compute_crc=True) == raw


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_truncated_input_fails_the_same_way_in_both_decoders(version):
    samples = list(fixture_records(version))[:40]
    for msg, raw, _data, _pos in samples:
        for cut in range(1, len(raw), max(1, len(raw) // 97)):
            with pytest.raises((TruncatedRecord, LengthMismatch)):
                cl.decode_record(raw[:cut])
            with pytest.raises(construct.StreamError):
                cl.CommitLogMessageStruct.parse(raw[:cut])


def test_blank_record_and_garbage():
    blank = cl.decode_record(cl.encode_blank(4096) + bytes(4088), 0, 1 << 20)
    assert isinstance(blank, cl.BlankRecord) and blank.offset == 1 << 20 and blank.total_size == 4096
    assert cl.CommitLogBlankStruct.parse(cl.encode_blank(12)).magic_code == cl.BLANK_MAGIC
    with pytest.raises(CorruptRecord, match="illegal magic"):
        cl.decode_record(b"\x00\x00\x01\x00\x12\x34\x56\x78" + bytes(300))


def test_length_mismatch_is_reported_with_the_total_size():
    msg, raw, _d, _p = next(fixture_records("4.9.7"))
    bad = (len(raw) + 4).to_bytes(4, "big") + raw[4:] + bytes(4)
    with pytest.raises(LengthMismatch) as info:
        cl.decode_record(bad)
    assert info.value.total_size == len(raw) + 4 and info.value.computed == len(raw)


@pytest.mark.parametrize("version", VERSIONS)
def test_ids_decode(version):
    for msg, raw, data, pos in list(fixture_records(version))[:300]:
        decoded = decode_msg_id(msg["msgId"])
        assert decoded.commit_log_offset == msg["commitLogOffset"]
        assert parse_host(decoded.host) == parse_host(msg["storeHost"])


def test_compressed_bodies_inflate():
    seen = 0
    for msg, raw, data, pos in fixture_records("4.9.7"):
        if msg["compressed"]:
            r = cl.decode_record(raw)
            assert r.sys_flag & cl.SysFlag.COMPRESSED
            assert len(zlib.decompress(r.body)) > 0
            seen += 1
    assert seen > 10


@pytest.mark.parametrize("version", VERSIONS)
def test_store_scan_reaches_the_manifest_end(version):
    with Store.open(store_path(version, "clean-small")) as store:
        scan = store.commitlog.scan(check_crc=True)
        offsets = [r.offset for r in scan]
    m = manifest(version, "clean-small")
    assert offsets == sorted(msg["commitLogOffset"] for msg in m["messages"])
    assert scan.end.offset == m["commitLogMaxOffset"] and scan.end.is_clean
