"""The compiled dispatch equals ``formats.dispatch.dispatch_request`` (the Python source of truth)
on every fixture record, with both property readers and with the 4.9.2-4.9.8 recovery quirk, and
on hand-made records that force its fallback (malformed UTF-8, odd DELAY values, separators)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import VERSIONS, store_path

from mqtool.store.textscan import index_key_hashes, java_hash_states, java_hash_utf8, utf16_units_of
from mqtool.formats import commitlog as clfmt
from mqtool.formats.dispatch import SCHEDULE_TOPIC, dispatch_request
from mqtool.formats.hashing import index_key_hash, java_string_hash
from mqtool.dispatch import fastdispatch as fd
from mqtool.formats.dispatch import java_parse_int
from mqtool.dispatch.scanner import DispatchOptions, DispatchScanner, TopicTable
from mqtool.dispatch import topicnumbers
from mqtool.dispatch.topicnumbers import TopicNumbers
from mqtool.store import Store


def dispatched(store, options, start=0):
    scanner = DispatchScanner(store.commitlog, start, None, options)
    rows = []
    for batch in scanner:
        for i in range(len(batch)):
            f = batch.fields[i]
            keys = batch.keys[f[fd.F_KEY_START] : f[fd.F_KEY_START] + f[fd.F_KEY_COUNT]].tolist()
            rows.append((int(batch.offsets[i]), scanner.topics.names[batch.topic_ids[i]], *(int(f[c]) for c in (fd.F_QUEUE_ID, fd.F_QUEUE_OFFSET, fd.F_PHYS, fd.F_SIZE, fd.F_SYS_FLAG, fd.F_STORE_TS, fd.F_TAGS)), keys))
    return rows, scanner


def expected(records, table, legacy, index_enable=True):
    rows = []
    for r in records:
        req = dispatch_request(r, table, legacy_properties=legacy)
        keys = [index_key_hash(k) for k in req.index_keys()] if req.to_index and index_enable else []
        rows.append((r.offset, req.topic, req.queue_id, req.consume_queue_offset, req.commit_log_offset, req.msg_size, req.sys_flag, req.store_timestamp, req.tags_code, keys))
    return rows


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["clean-small", "crashed-small"])
@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("quirk", [False, True])
def test_fast_dispatch_equals_dispatch_request(version, name, legacy, quirk):
    with Store.open(store_path(version, name)) as store:
        table = {} if quirk else store.delay_table
        got, scanner = dispatched(store, DispatchOptions(table, legacy, True))
        records = list(store.commitlog.scan(check_crc=True))
        assert got == expected(records, table, legacy)
        assert scanner.end.offset == records[-1].end
        assert scanner.last_valid_offset == records[-1].offset


def test_quirk_changes_only_delayed_tags_codes():
    with Store.open(store_path("4.9.7", "crashed-small")) as store:
        normal, _ = dispatched(store, DispatchOptions(store.delay_table))
        quirk, _ = dispatched(store, DispatchOptions({}))
    changed = [(a, b) for a, b in zip(normal, quirk) if a != b]
    assert changed and all(a[1] == SCHEDULE_TOPIC and a[8] != b[8] and a[:8] == b[:8] for a, b in changed)


def test_java_parse_int():
    assert java_parse_int("17") == 17 and java_parse_int("+3") == 3 and java_parse_int("-2") == -2
    assert java_parse_int("\u0663") == 3  # Character.digit accepts Unicode decimal digits
    for bad in ("", "+", " 3", "3 ", "1_0", "0x3", "2147483648", "3.0"):
        with pytest.raises(ValueError):
            java_parse_int(bad)
    assert java_parse_int("-2147483648") == -(1 << 31)


# ---- hand-made records -----------------------------------------------------------------------


def build(tmp_path, props_list, topics=None):
    """A one-segment commit log of records with the given raw properties bytes."""
    segment = bytearray(1 << 16)
    pos = 0
    for i, props in enumerate(props_list):
        topic = (topics[i] if topics else b"TopicTest")
        fields = {
            "magic_code": clfmt.MESSAGE_MAGIC_V1, "body_crc": 0, "queue_id": i % 3, "flag": 0, "queue_offset": i,
            "phys_offset": pos, "sys_flag": 0, "born_timestamp": 1_700_000_000_000, "born_host_address": bytes(4),
            "born_host_port": 1, "store_timestamp": 1_700_000_000_000 + i * 7, "store_host_address": bytes([10, 0, 0, 1]),
            "store_host_port": 10911, "reconsume_times": 0, "prepared_transaction_offset": 0, "body": b"", "topic": topic, "properties": props,
        }
        raw = clfmt.encode_message(fields)
        segment[pos : pos + len(raw)] = raw
        pos += len(raw)
    path = tmp_path / "commitlog" / f"{0:020d}"
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(segment))
    return path


ODD = [
    b"TAGS\x01caf\xc3\xa9\x02KEYS\x01k1 k2  k3\x02UNIQ_KEY\x01U1\x02",
    b"TAGS\x01bad\xff\xfeutf8\x02KEYS\x01\xe2\x82 broken\x02",
    b"TAGS\x01a\x02TAGS\x01b\x02KEYS\x01x\x01y\x02",  # duplicate TAGS (last wins); \x01 inside a value
    b"TAGS\x01\x02KEYS\x01\x02UNIQ_KEY\x01\x02",  # empty values are dropped
    "TAGS\x01emoji-\U0001F600\x02KEYS\x01\U0001F600 ключ\x02".encode(),  # surrogate pairs
    b"\x01v\x02TAGS\x01t\x01\x01\x02",  # empty key; trailing \x01s (legacy: split drops them)
    b"KEYS\x01only-keys",  # no final separator (4.9.x writer)
]


@pytest.mark.parametrize("legacy", [False, True])
def test_fallback_records_equal_dispatch_request(tmp_path, legacy):
    topics = [b"TopicTest"] * (len(ODD) - 1) + [b"T\xff\xfeopic"]
    with Store.open(build(tmp_path, ODD, topics)) as store:
        got, _ = dispatched(store, DispatchOptions(store.delay_table, legacy))
        assert got == expected(list(store.commitlog.scan()), store.delay_table, legacy)
        assert len(got) == len(ODD)


@pytest.mark.parametrize(
    "delay,ok",
    [(b"3", True), (b"+3", True), (b"-1", True), (b"0", True), (b"40", True), ("\u0663".encode(), True), (b" 3", False), (b"1_0", False), (b"99999999999", False), (b"x", False)],
)
def test_delay_property_parsing_follows_integer_parse_int(tmp_path, delay, ok):
    """A SCHEDULE_TOPIC_XXXX record whose DELAY Integer.parseInt rejects is invalid for the broker:
    the recovery scan ends there. Valid ones get the delivery time (clamped level) or the hash."""
    props = [b"TAGS\x01t\x02", b"TAGS\x01t\x02DELAY\x01" + delay + b"\x02", b"TAGS\x01u\x02"]
    with Store.open(build(tmp_path, props, [b"x", SCHEDULE_TOPIC.encode(), b"x"])) as store:
        got, scanner = dispatched(store, DispatchOptions(store.delay_table))
        records = list(store.commitlog.scan())
        if ok:
            assert got == expected(records, store.delay_table, False)
            level = java_parse_int(delay.decode())
            if level > 0:
                assert got[1][8] == records[1].store_timestamp + store.delay_table[min(level, 18)]
        else:
            assert len(got) == 1 and scanner.end.offset == records[1].offset and scanner.end.reason == "corrupt"


def test_index_disabled_yields_no_keys():
    with Store.open(store_path("5.3.3", "clean-small")) as store:
        got, _ = dispatched(store, DispatchOptions(store.delay_table, False, index_enable=False))
    assert all(row[-1] == [] for row in got)


def test_multi_dispatch_records_are_flagged(tmp_path):
    props = [b"TAGS\x01t\x02", b"INNER_MULTI_DISPATCH\x01%LMQ%a,%LMQ%b\x02INNER_MULTI_QUEUE_OFFSET\x013,4\x02"]
    with Store.open(build(tmp_path, props)) as store:
        batches = list(DispatchScanner(store.commitlog, 0, None, DispatchOptions(store.delay_table)))
    assert sum(b.queue_groups.multi for b in batches) == 1



def _hash_inner(buf):
    return java_hash_utf8(buf, 1, buf.shape[0] - 1, np.int64(0))


@pytest.mark.parametrize(
    "text",
    ["", "T", "Ta", "TagA", "TagAB", "A1D990BC856629E4C99D4FA1BE000000", "k000000080", "ü", "aü", "abü", "Tópico-主题-тема", "x😀", "😀y", "ab" * 300 + "é"],
)
def test_hash_of_a_value_equals_java_string_hash(text):
    """``java_hash_utf8`` as dispatch calls it (four ASCII bytes a step, then byte by byte): Java's
    hash and UTF-16 length of a value between property separators."""
    raw = np.frombuffer(b"\x01" + text.encode("utf-8") + b"\x02", dtype=np.uint8)
    h, units, ok = _hash_inner(raw)
    assert ok and units == len(text.encode("utf-16-be")) // 2
    assert h == java_string_hash(text) & 0xFFFFFFFF


def test_hash_of_many_keys_at_once_equals_java_string_hash():
    """``java_hash_states`` (whole-array numpy, for the keys the Python
    decoder settles): each text's hash continued from a state, empty texts, a text longer than
    a properties value can be, and spans read out of order."""
    texts = ["", "T", "TagAB", "A1D990BC856629E4C99D4FA1BE000000", "Tópico-主题-тема", "x😀", "é" * 40000, ""]
    units, starts, ends = utf16_units_of(texts)
    prefixes = ["", "t#", "TopicTest#", "", "主题#", "x", "", "q#"]
    states = np.array([java_string_hash(p) & 0xFFFFFFFF for p in prefixes], dtype=np.int64)
    want = [java_string_hash(p + t) & 0xFFFFFFFF for p, t in zip(prefixes, texts)]
    assert java_hash_states(units, starts, ends, states).tolist() == want
    order = [6, 2, 0, 5, 1, 3, 7, 4]
    assert java_hash_states(units, starts[order], ends[order], states[order]).tolist() == [want[i] for i in order]
    assert index_key_hashes(np.array(want, dtype=np.int64)).tolist() == [index_key_hash(p + t) for p, t in zip(prefixes, texts)]
    assert index_key_hashes(np.array([1 << 31, (1 << 32) - 1, 0], dtype=np.int64)).tolist() == [0, 1, 0]


@pytest.mark.parametrize("length", [5, 8, 21, 37, 64, 130])
@pytest.mark.parametrize("slots", [1, 2, 64])
@pytest.mark.parametrize("id_type", [np.int32, np.int64])  # the dispatch's ids and verify's
def test_topic_numbers_tell_apart_topics_the_fingerprint_does_not(slots, length, id_type, monkeypatch):
    """Raw topics of one length that differ in one byte (every position a masked word, a word or
    the tail compares), all with one fingerprint, get ids of their own; malformed UTF-8 topics that
    decode to one name share its id (``TopicTable``); the table grows from ``slots``."""
    monkeypatch.setattr(topicnumbers, "TABLE_SLOTS", slots)
    base = bytes(65 + i % 58 for i in range(length))  # ASCII: every changed byte makes another name
    topics = [base]
    for at in range(length):
        changed = bytearray(base)
        changed[at] ^= 0x20
        topics.append(bytes(changed))
    topics += [b"bad\xff" + bytes(length - 4), b"bad\xfe" + bytes(length - 4), base, topics[5]]
    buf = np.frombuffer(b"".join(topics), dtype=np.uint8)
    out = np.zeros((len(topics), fd.N_FIELDS), dtype=np.int64)
    out[:, fd.F_TOPIC_POS] = np.arange(len(topics)) * length
    out[:, fd.F_TOPIC_LEN] = length
    out[:, fd.F_TOPIC_FP] = 7  # every fingerprint equal: only the bytes decide
    got = np.full(len(topics), -1, dtype=id_type)
    numbers = TopicNumbers(TopicTable())
    numbers.number(buf, out, 0, len(topics), got)
    assert got.tolist() == [*range(length + 1), length + 1, length + 1, 0, 5]
    assert numbers.topics.names[length + 1] == "bad\ufffd" + "\0" * (length - 4)


