"""The kernels interpreted (``mqtool.jit.interpret``) give what they give compiled.

Interpreted, a kernel runs as the Python it is written in, or as its ``interpreted_as`` form
(the same result by whole-array numpy, ``struct`` or ``re`` operations). Held here:

1. every ``interpreted_as`` form equals its compiled kernel, on every fixture segment's bytes and
   on damaged copies (this process runs the kernels compiled: ``conftest.py`` settles it);
2. every command a small store runs interpreted prints the same both ways, on every fixture store
   and on damaged copies: a fresh process in interpreted mode against this one;
3. a small store's commands load no numba; ``MQTOOL_ENGINE`` forces either engine.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, manifest, store_path, without_timings
from mqtool import jit
from mqtool.cli import app
from mqtool.cli import engine
from mqtool.scan import batches
from mqtool.store import fastscan as fs

for _module in ("recovery.fastdispatch", "recovery.queuegroups", "recovery.topicnumbers", "scan.bytecopy", "scan.kernels", "scan.stats", "scan.survivors", "store.textscan", "store.words", "verify.index", "verify.segments"):
    importlib.import_module(f"mqtool.{_module}")  # their kernels' interpreted forms register as they load

STORES = sorted(p for p in FIXTURES.glob("rocketmq-*/*") if p.is_dir())
CLEAN = store_path("4.9.7", "clean-small")
DAMAGES = ("crc", "zeros", "length", "magic", "garbage")  # one each in a copy of CLEAN's first segment


def damaged(data: bytes, name: str) -> bytearray:
    out = bytearray(data)
    if name == "crc":
        out[2000] ^= 0xFF  # a body byte
    elif name == "zeros":
        out[4096:8192] = bytes(4096)
    elif name == "length":
        out[1164:1168] = (999).to_bytes(4, "big")  # a TOTALSIZE
    elif name == "magic":
        out[1168:1172] = b"\x12\x34\x56\x78"
    else:
        out[30000:40240] = bytes(range(256)) * 40  # the walk resynchronises after it
    return out


def segment_arrays() -> list[np.ndarray]:
    """Every fixture commit log segment, and damaged copies of CLEAN's first one."""
    arrays = [np.fromfile(p, dtype=np.uint8) for store in STORES for p in sorted((store / "commitlog").glob("*"))]
    first = (CLEAN / "commitlog" / "00000000000000000000").read_bytes()
    return arrays + [np.frombuffer(bytes(damaged(first, name)), dtype=np.uint8) for name in DAMAGES]


ARRAYS = segment_arrays()
FORMS = dict(jit.interpreted_forms)  # kernel name -> (compiled kernel, interpreted form)
HELD = {  # the forms the tests below hold equal to their kernels
    f"mqtool.{name}"
    for name in (
        "store.fastscan.walk_segment", "store.fastscan.find_record_start", "store.fastscan._first_nonzero_in",
        "store.fastscan._last_nonzero_in", "store.fastscan.gather_be", "verify.segments.row_flags",
        "store.words.be32", "store.words.be64", "store.words.load8", "store.words.find_byte_below", "store.words.find_byte",
        "recovery.topicnumbers._same_bytes", "scan.kernels._put_int", "scan.kernels._put_ipv4_host",
        "scan.bytecopy.copy_bytes", "scan.bytecopy.copy_words", "store.textscan.java_hash_utf8",
        "verify.index.index_hashes", "scan.survivors.fnv1a64", "recovery.fastdispatch.dispatch_rows",
        "recovery.fastdispatch._fingerprint", "scan.kernels.is_utf8", "scan.kernels.gather_spans", "scan.kernels.gather_fields", "scan.kernels.spans_are_utf8", "scan.kernels.parse_properties", "verify.index.check_chains",
        "scan.stats._bucket", "scan.stats._topic_key", "recovery.fastdispatch.finish_keys", "recovery.queuegroups._group", "scan.kernels.format_msg_ids_rows", "scan.stats._slot",
    )
}


FIELD_SETS = list(batches._FIELDS.values())  # (deltas, widths) of the header fields, per layout


def pair(name: str):
    assert name in HELD
    return FORMS[name]


def walks(walk, array, out, check_crc, stop_on_crc, starts):
    """Everything ``walk`` returns from each start, called again after each full ``out``."""
    results = []
    for pos in starts:
        while True:
            count, pos, code, detail = walk(array, pos, array.shape[0], check_crc, stop_on_crc, out)
            results.append((int(count), int(pos), int(code), int(detail), out[:count].tolist()))
            if code != fs.END_CAPACITY:
                break
    return results


@pytest.mark.parametrize("index", range(len(ARRAYS)))
def test_the_decoded_walk_is_the_compiled_walk(index: int):
    compiled, python = pair("mqtool.store.fastscan.walk_segment")
    array = ARRAYS[index]
    starts = [0, 1, 4096, 12345, array.shape[0] - 3]
    for check_crc, stop_on_crc in ((True, False), (True, True), (False, False)):
        out = np.empty((97, fs.N_COLS), dtype=np.int64)  # small: the capacity stop too
        assert walks(python, array, out, check_crc, stop_on_crc, starts) == walks(compiled, array, out, check_crc, stop_on_crc, starts)


@pytest.mark.parametrize("index", range(len(ARRAYS)))
def test_the_searches_and_row_checks_are_the_compiled_ones(index):
    array = ARRAYS[index]
    scratch = np.empty((1, fs.N_COLS), dtype=np.int64)
    compiled, python = pair("mqtool.store.fastscan.find_record_start")
    for start in (1, 100, 5000, array.shape[0] // 2):
        for chain in (1, 3):
            assert python(array, start, array.shape[0], 0, chain, scratch) == compiled(array, start, array.shape[0], 0, chain, scratch)
    for name in ("_first_nonzero_in", "_last_nonzero_in"):
        compiled, python = pair(f"mqtool.store.fastscan.{name}")
        for start, stop in ((0, array.shape[0]), (7, 4097), (4100, 8000), (array.shape[0] - 100, array.shape[0]), (50, 50)):
            assert python(array, start, stop) == compiled(array, start, stop)
    out = np.empty((1 << 14, fs.N_COLS), dtype=np.int64)
    count = fs.walk_segment(array, 0, array.shape[0], True, False, out)[0]
    rows = out[:count]
    compiled, python = pair("mqtool.verify.segments.row_flags")
    flags = [np.empty(count, dtype=np.int8) for _ in range(2)]
    assert python(array, rows, 7, flags[0]) == compiled(array, rows, 7, flags[1]) and flags[0].tolist() == flags[1].tolist()
    assert python(array, rows, 0, flags[0]) == compiled(array, rows, 0, flags[1]) and flags[0].tolist() == flags[1].tolist()
    compiled, python = pair("mqtool.scan.kernels.gather_spans")
    for columns in ([fs.COL_TOPIC, fs.COL_PROPS], [fs.COL_BODY, fs.COL_BODY_LEN]):
        starts, ends = rows[:, columns[0]].copy(), rows[:, columns[1]].copy()
        lengths = ends - starts if columns[0] == fs.COL_TOPIC else ends
        lengths[::7] = -1  # an absent span
        got, want = python(array, starts, lengths), compiled(array, starts, lengths)
        assert got[0].tolist() == want[0].tolist() and got[1].tobytes() == want[1].tobytes()
    compiled, python = pair("mqtool.store.fastscan.gather_be")
    positions = np.random.default_rng(index).integers(0, array.shape[0] - 8, 500)
    for width in range(1, 9):
        for signed in (True, False):
            assert python(array, positions, 0, width, signed).tolist() == compiled(array, positions, 0, width, signed).tolist()
    compiled, python = pair("mqtool.scan.kernels.gather_fields")
    record_starts = np.ascontiguousarray(rows[:, fs.COL_POS])
    for deltas, widths in FIELD_SETS:  # every header layout's fields, at the records and anywhere
        for at in (record_starts, positions - 64 * (positions > array.shape[0] - 72)):
            assert python(array, at, deltas, widths).tolist() == compiled(array, at, deltas, widths).tolist()
    compiled, python = pair("mqtool.scan.kernels.spans_are_utf8")
    topic_starts = np.ascontiguousarray(rows[:, fs.COL_TOPIC])
    topic_lengths = rows[:, fs.COL_PROPS] - 2 - topic_starts
    span_sets = [(topic_starts, topic_lengths), (topic_starts[:0], topic_lengths[:0])]
    span_sets += [(starts, np.full(len(starts), n)) for starts, n in ((topic_starts, 40), (topic_starts[3:], 200), (topic_starts[-1:], 5000))]  # into bodies: binary too
    for starts, lengths in span_sets:
        lengths = np.minimum(lengths, array.shape[0] - starts)
        assert python(array, starts, lengths) == compiled(array, starts, lengths)


@pytest.mark.parametrize("index", range(len(ARRAYS)))
def test_the_dispatch_form_reads_the_fixed_fields_and_leaves_the_rest_to_the_reference(index):
    """Interpreted, ``dispatch_rows`` flags every record for its callers' reference decoder
    (``dispatch_request``: ``test_every_command_prints_the_same_interpreted`` holds the outcome)."""
    from mqtool.recovery import fastdispatch as fd

    array = ARRAYS[index]
    out = np.empty((1 << 14, fs.N_COLS), dtype=np.int64)
    rows = out[: fs.walk_segment(array, 0, array.shape[0], True, False, out)[0]].copy()
    compiled, python = pair("mqtool.recovery.fastdispatch.dispatch_rows")
    results = []
    for form in (compiled, python):
        fields, keys = np.zeros((rows.shape[0], fd.N_FIELDS), dtype=np.int64), np.zeros(int(rows[:, fs.COL_SIZE].sum()) + 64, dtype=np.int64)
        done, _ = form(array, rows, 0, False, fd.SCHEDULE_TOPIC_BYTES, np.zeros(19, dtype=np.int64), True, fields, 0, keys, 0)
        results.append((done, fields))
    (done, fields), (python_done, python_fields) = results
    fixed = [fd.F_POS, fd.F_TOPIC_FP, fd.F_TOPIC_POS, fd.F_TOPIC_LEN, fd.F_QUEUE_ID, fd.F_QUEUE_OFFSET, fd.F_PHYS, fd.F_SIZE, fd.F_SYS_FLAG, fd.F_STORE_TS]
    assert python_done == done == rows.shape[0]
    assert python_fields[:, fixed].tolist() == fields[:, fixed].tolist()
    assert (python_fields[:, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH).tolist() == (fields[:, fd.F_FLAGS] & fd.FLAG_MULTI_DISPATCH).tolist()
    assert (python_fields[:, fd.F_FLAGS] & fd.FLAG_FALLBACK).all() and not python_fields[:, fd.F_KEY_COUNT].any()
    compiled, python = pair("mqtool.recovery.fastdispatch._fingerprint")
    for pos, length in zip(fields[:, fd.F_TOPIC_POS].tolist()[:300], range(0, 3000, 10)):
        for n in (fields[0, fd.F_TOPIC_LEN], length % 40):
            assert python(array, pos, int(n)) == compiled(array, pos, int(n))


def dispatched(array: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """A segment's walk rows and what the compiled ``dispatch_rows`` makes of them: fields, the
    partial key hashes and how many."""
    from mqtool.recovery import fastdispatch as fd

    out = np.empty((1 << 14, fs.N_COLS), dtype=np.int64)
    rows = out[: fs.walk_segment(array, 0, array.shape[0], True, False, out)[0]].copy()
    fields, keys = np.zeros((rows.shape[0], fd.N_FIELDS), dtype=np.int64), np.zeros(int(rows[:, fs.COL_SIZE].sum()) + 64, dtype=np.int64)
    _, fill = FORMS["mqtool.recovery.fastdispatch.dispatch_rows"][0](array, rows, 0, False, fd.SCHEDULE_TOPIC_BYTES, np.zeros(19, dtype=np.int64), True, fields, 0, keys, 0)
    return rows, fields, keys, fill


def test_the_key_completion_is_the_compiled_one():
    """``finish_keys`` on the partial key hashes the compiled dispatch leaves for every record of
    every keyed segment, rows without keys among them, under topic states of the full 32 bits."""
    from mqtool.recovery import fastdispatch as fd
    from mqtool.store.textscan import POW31

    rng, keyed = np.random.default_rng(7), 0
    for array in ARRAYS:
        rows, fields, keys, fill = dispatched(array)
        states = rng.integers(0, 1 << 32, 7, dtype=np.int64)
        topic_ids = rng.integers(0, 7, rows.shape[0]).astype(np.int32)
        finished = [keys[:fill].copy() for _ in range(2)]
        for form, done in zip(pair("mqtool.recovery.fastdispatch.finish_keys"), finished):
            form(fields, 1, rows.shape[0], topic_ids, states, POW31, done)
        assert finished[0].tolist() == finished[1].tolist()
        keyed += finished[0].tolist() != keys[:fill].tolist() and (fields[:, fd.F_KEY_COUNT] == 0).any()
    assert keyed > len(ARRAYS) // 2


def test_the_queue_grouping_is_the_compiled_one():
    """``_group`` on every segment's dispatched rows, under topic numbers that split and merge
    its queues, with transaction types (PREPARED and ROLLBACK rows are not queued, ROLLBACK not
    indexed) and INNER_MULTI_DISPATCH flags sprinkled in."""
    from mqtool.recovery import fastdispatch as fd
    from mqtool.recovery import queuegroups as qg

    rng, grouped = np.random.default_rng(11), 0
    for array in ARRAYS:
        rows, fields, _, _ = dispatched(array)
        fields[:, fd.F_SYS_FLAG] |= rng.choice([0, 0, 0, qg.TRAN_COMMIT, 4, qg.TRAN_ROLLBACK], rows.shape[0])
        fields[:, fd.F_FLAGS] |= rng.choice([0, 0, fd.FLAG_MULTI_DISPATCH], rows.shape[0])
        topic_ids = rng.integers(0, 3, rows.shape[0]).astype(np.int32)
        results = []
        for form in pair("mqtool.recovery.queuegroups._group"):
            n = rows.shape[0]
            made = (np.empty(n + 1, dtype=np.int64), np.empty(n + 2, dtype=np.int64), np.empty(n, dtype=np.int32), np.empty(n, dtype=np.bool_), np.empty((4, n), dtype=np.int64), np.zeros(5, dtype=np.int64))
            assert form(fields, topic_ids, *made, np.full(1 << 16, -1, dtype=np.int64), np.zeros(n + 1, dtype=np.int64))
            queue_keys, starts, dest, indexed, columns, stats = made
            groups, queued = int(stats[qg.S_GROUPS]), int(stats[qg.S_QUEUED])
            results.append((queue_keys[:groups].tolist(), starts[: groups + 1].tolist(), dest.tolist(), indexed.tolist(), columns[:, :queued].tolist(), stats.tolist()))
        assert results[0] == results[1]
        grouped += len(results[0][0]) > 3
    assert grouped > len(ARRAYS) // 2


def test_the_message_ids_are_the_compiled_ones():
    """``format_msg_ids_rows`` on every fixture segment's records, each at its own store host
    (IPv4 and IPv6 layouts), and with the widths flipped (reading other bytes, still in the
    segment)."""
    from mqtool.formats import commitlog as clfmt

    compiled, python = pair("mqtool.scan.kernels.format_msg_ids_rows")
    phys = clfmt.HEADER_LAYOUTS[(False, False)].offset_of("phys_offset")
    wide_seen = 0
    for array in ARRAYS:
        out = np.empty((1 << 14, fs.N_COLS), dtype=np.int64)
        pos = out[: fs.walk_segment(array, 0, array.shape[0], False, False, out)[0], fs.COL_POS].copy()
        flags = fs.gather_be(array, pos, fs.POS_SYS_FLAG, 4, True)
        wide = (flags & 0x20) != 0  # STOREHOSTADDRESS_V6_FLAG
        deltas = np.array([clfmt.HEADER_LAYOUTS[(bool(f & 0x10), bool(f & 0x20))].offset_of("store_host_address") for f in flags.tolist()], dtype=np.int64)
        wide_seen += int(wide.sum())
        for widths in (wide, ~wide & (pos + 40 < array.shape[0] - 40)):
            got = [[a.tolist() for a in form(array, pos, deltas, widths, phys)] for form in (compiled, python)]
            assert got[0] == got[1]
    assert wide_seen


def test_the_word_readers_are_the_compiled_ones():
    rng = random.Random(7)
    array = ARRAYS[0]
    pool = np.concatenate([array[:64], array[:64], np.zeros(8, dtype=np.uint8)])  # 8 bytes to spare after every span, as callers keep
    forms = {name: pair(f"mqtool.store.words.{name}") for name in ("be32", "be64", "load8", "find_byte_below", "find_byte")}
    same_bytes = pair("mqtool.recovery.topicnumbers._same_bytes")
    for _ in range(2000):
        p = rng.randrange(0, array.shape[0] - 16)
        for name in ("be32", "be64", "load8"):
            compiled, python = forms[name]
            assert int(python(array, p)) == int(compiled(array, p))
        compiled, python = forms["find_byte_below"]
        end = min(array.shape[0], p + rng.randrange(0, 300))
        for n in (1, 2, 3, 32, 128):
            assert python(array, p, end, n) == compiled(array, p, end, n)
        compiled, python = forms["find_byte"]
        for b in (0, 1, 2, 32, 0x5D, 255):
            assert python(array, p, end, b) == compiled(array, p, end, b)
        compiled, python = same_bytes
        q, n = rng.randrange(0, 48), rng.randrange(0, 17)
        assert python(pool, q, pool, q + 64, n) == compiled(pool, q, pool, q + 64, n)
        assert python(array, p, pool, q, n) == compiled(array, p, pool, q, n)
    for name, values in (("_put_int", [0, 7, 10, 255, 65535, -1, -2147483648, 2147483647]), ("_put_ipv4_host", range(0, 4000, 37))):
        compiled, python = pair(f"mqtool.scan.kernels.{name}")
        for value in values:
            outs = [np.zeros(40, dtype=np.uint8) for _ in range(2)]
            args = (value,) if name == "_put_int" else (array, 1000 + value)
            end = python(outs[0], 3, *args)
            assert end == compiled(outs[1], 3, *args) and outs[0].tolist() == outs[1].tolist()
    for name in ("copy_bytes", "copy_words"):
        compiled, python = pair(f"mqtool.scan.bytecopy.{name}")
        for _ in range(300):
            s, n, k = rng.randrange(0, array.shape[0] - 200), rng.randrange(-1, 150), rng.randrange(0, 100)
            outs = [np.zeros(260, dtype=np.uint8) for _ in range(2)]
            end = python(outs[0], k, array, s, n)
            assert end == compiled(outs[1], k, array, s, n)
            assert outs[0][:end].tolist() == outs[1][:end].tolist()  # copy_words may write a few bytes past its end


def test_the_hashes_are_the_compiled_ones():
    texts = [" ".join(m.get("keys") or []) + m["topic"] + (m.get("uniqKey") or "") for v in ("4.9.7", "5.3.3") for m in manifest(v, "clean-small")["messages"]]
    texts += ["é", "日本語", "😀x", "", "a" * 40]
    raw = [t.encode() for t in texts] + [b"\xc0\x80", b"ab\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82", b"ok\xff"]
    compiled, python = pair("mqtool.store.textscan.java_hash_utf8")
    is_utf8 = pair("mqtool.scan.kernels.is_utf8")
    for data in raw:
        buf = np.frombuffer(data + bytes(8), dtype=np.uint8)
        for start, end in ((0, len(data)), (1, len(data)), (0, len(data) - 1), (2, 1)):
            assert is_utf8[1](buf, start, end) == is_utf8[0](buf, start, end)
        for h in (0, 12345):
            assert tuple(map(int, python(buf, 0, len(data), h))) == tuple(map(int, compiled(buf, 0, len(data), np.int64(h))))
    units = [t.encode("utf-16-be", "surrogatepass") for t in texts]
    lengths = np.array([len(u) // 2 for u in units], dtype=np.int64)
    ends = np.cumsum(lengths)
    codes = np.frombuffer(b"".join(units), dtype=">u2").astype(np.int64)
    prefixes = np.arange(len(texts), dtype=np.int64) * 7919
    compiled, python = pair("mqtool.verify.index.index_hashes")
    outs = [np.empty(len(texts), dtype=np.int64) for _ in range(2)]
    python(codes, ends - lengths, ends, prefixes, outs[0])
    compiled(codes, ends - lengths, ends, prefixes, outs[1])
    assert outs[0].tolist() == outs[1].tolist()
    encoded = [t.encode() for t in texts]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in encoded])]).astype(np.int32) + 5
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    compiled, python = pair("mqtool.scan.survivors.fnv1a64")
    assert python(offsets, data, 5).tolist() == compiled(offsets, data, 5).tolist()


def test_the_index_chain_replay_is_the_compiled_one():
    """Entries as ``putKey`` chains them (each ``prev`` the slot's last entry), with broken links,
    negative hashes and heads among them."""
    compiled, python = pair("mqtool.verify.index.check_chains")
    rng = np.random.default_rng(3)
    slots, n = 97, 5000
    hashes = rng.integers(-50, 100_000, n).astype(np.int32)
    last, prevs = np.zeros(slots, dtype=np.int64), np.empty(n, dtype=np.int32)
    for i, h in enumerate(hashes.tolist()):
        prevs[i] = last[h % slots] if h >= 0 and rng.random() > 0.01 else rng.integers(0, n)
        if h >= 0:
            last[h % slots] = 10 + i
    seen = [np.zeros(slots, dtype=np.int64) for _ in range(2)]
    assert tuple(map(int, python(hashes, prevs, 10, seen[0], slots))) == tuple(map(int, compiled(hashes, prevs, 10, seen[1], slots)))
    assert seen[0].tolist() == seen[1].tolist()


def test_the_statistics_keys_are_the_compiled_ones():
    compiled, python = pair("mqtool.scan.stats._bucket")
    for delay in [0, 1, -1, 1023, 1024, -1024, 1025, 4095, 4096, 10**6, -(10**9), 2**40 + 12345, 2**62]:
        assert python(delay) == compiled(delay)
    compiled, python = pair("mqtool.scan.stats._slot")
    rng = np.random.default_rng(2)
    keys = [(int(a), int(b), int(c)) for a, b, c in rng.integers(-(2**63), 2**63 - 1, (300, 3), dtype=np.int64)]
    keys += [(k, q, t) for k in (0, -1, 2**40) for q in range(-2, 6) for t in (0, 60_000, -(2**62))]
    tables = [(np.zeros((1024, 3), dtype=np.int64), np.zeros(1024, dtype=np.bool_), np.zeros((1024, 2), dtype=np.int64), np.zeros(1, dtype=np.int64), np.array([7, -7])) for _ in range(2)]
    for key in keys + keys[::3]:  # new keys, then found again
        assert python(*tables[0], *key) == compiled(*tables[1], *(np.int64(k) for k in key))
    assert all(a.tolist() == b.tolist() for a, b in zip(*tables)) and tables[0][3][0] == len(set(keys))
    compiled, python = pair("mqtool.scan.stats._topic_key")
    for array in ARRAYS[:8]:
        out = np.empty((256, fs.N_COLS), dtype=np.int64)
        count = fs.walk_segment(array, 0, array.shape[0], False, False, out)[0]
        for start, stop in out[:count, [fs.COL_TOPIC, fs.COL_PROPS]].tolist():
            for end in (stop - 2, start + 3, start):
                assert python(array, start, end) == compiled(array, start, end)


@pytest.mark.parametrize("legacy", [False, True])
def test_the_properties_parse_is_the_compiled_one(legacy):
    """Every fixture record's properties, and items the readers drop, split or repeat."""
    from mqtool.scan import kernels

    compiled, python = pair("mqtool.scan.kernels.parse_properties")
    crafted = [b"", b"\x02", b"A\x01b", b"A\x01b\x02", b"\x01b\x02A\x01\x02", b"TAGS\x01x\x02TAGS\x01y\x02", b"K\x01v\x01w\x02",
               b"K\x01v\x01\x01\x02", b"\x02\x02KEYS\x01a b\x02UNIQ_KEY\x01u", b"DELAY\x013\x02\x01\x01"]
    arrays = ARRAYS[:6] + [np.frombuffer(b"".join(crafted) + bytes(8), dtype=np.uint8)]
    for index, array in enumerate(arrays):
        if index < len(arrays) - 1:
            out = np.empty((4096, fs.N_COLS), dtype=np.int64)
            rows = out[: fs.walk_segment(array, 0, array.shape[0], False, False, out)[0]]
            starts, lengths = rows[:, fs.COL_PROPS].copy(), rows[:, fs.COL_SIZE] + rows[:, fs.COL_POS] - rows[:, fs.COL_PROPS]
        else:
            lengths = np.array([len(c) for c in crafted], dtype=np.int64)
            starts = np.cumsum(lengths) - lengths
        args = (array, starts, lengths, legacy, kernels.KEY_TAGS, kernels.KEY_KEYS, kernels.KEY_UNIQ, kernels.KEY_DELAY)
        assert [a.tolist() for a in python(*args)] == [a.tolist() for a in compiled(*args)]


def test_every_interpreted_form_is_held_equal():
    assert HELD == set(FORMS)


# ---- the commands, both ways ------------------------------------------------------------------

RUN_INTERPRETED = r"""
import json, sys
from mqtool import jit
assert jit.interpret()
from typer.testing import CliRunner
from mqtool.cli import app
done = [[r.exit_code, r.stdout] for r in (CliRunner().invoke(app, args) for args in json.load(sys.stdin))]
assert jit.interpreted() and "numba" not in sys.modules
json.dump(done, sys.stdout)
"""


def commands(store: Path, ids: Path) -> list[list[str]]:
    s = str(store)
    return [
        ["verify", s, "--format", "jsonl", "--keep-going"], ["stats", s, "--format", "json"], ["salvage", s, "--format", "jsonl"],
        ["survivors", s, str(ids), "--by", "uniq-key", "--format", "jsonl"], ["recover", s, "--dry-run", "--format", "json"],
        ["truncate-dirty", s, "--dry-run", "--format", "json"], ["rebuild-cq", s, "--dry-run", "--format", "json"],
        ["rebuild-index", s, "--dry-run", "--format", "json"], ["repair", s, "--dry-run", "--format", "json"],
    ]


def damaged_stores(tmp_path: Path) -> list[Path]:
    """Copies of CLEAN, each with one kind of damage in its first segment."""
    first = (CLEAN / "commitlog" / "00000000000000000000").read_bytes()
    made = []
    for name in DAMAGES:
        target = tmp_path / f"damaged {name}"
        shutil.copytree(CLEAN, target)
        (target / "commitlog" / "00000000000000000000").write_bytes(bytes(damaged(first, name)))
        made.append(target)
    return made


def test_every_command_prints_the_same_interpreted(tmp_path):
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(m["uniqKey"] + "\n" for m in manifest("4.9.7", "clean-small")["messages"][::3] if m.get("uniqKey")) + "0A0B0C0D0E0F\n")
    runs = [args for store in [*STORES, *damaged_stores(tmp_path)] for args in commands(store, ids)]
    done = subprocess.run([sys.executable, "-c", RUN_INTERPRETED], input=json.dumps(runs), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    interpreted = json.loads(done.stdout)
    assert jit.lean_loading is not None and not jit.interpreted()
    for args, (code, out) in zip(runs, interpreted):
        compiled = CliRunner().invoke(app, args)
        assert compiled.stdout.strip() or compiled.exit_code not in (0, 1), args  # a refusal prints no plan
        assert (code, without_timings(out)) == (compiled.exit_code, without_timings(compiled.stdout)), args


# ---- which engine a command takes --------------------------------------------------------------

LOADED = ("import atexit, sys; atexit.register(lambda: print('numba' in sys.modules, file=sys.stderr)); "
          "from mqtool.cli import engine, main; below = int(sys.argv.pop(1)); engine.INTERPRETED_BELOW.update((k, below) for k in engine.INTERPRETED_BELOW); "
          "sys.argv = ['mqtool', *sys.argv[1:]]; main()")


@pytest.mark.parametrize("forced,below,loads", [(None, 8000, False), (None, 1000, True), ("compiled", 8000, True), ("python", 1000, False)])
def test_a_small_store_runs_interpreted_unless_forced(forced, below, loads):
    """CLEAN holds 2000 records: interpreted below the crossover, compiled from it, either when forced."""
    env = {k: v for k, v in os.environ.items() if k != engine.ENV}
    if forced:
        env[engine.ENV] = forced
    for command in (["verify", str(CLEAN)], ["rebuild-cq", str(CLEAN), "--dry-run"]):
        done = subprocess.run([sys.executable, "-c", LOADED, str(below), *command], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0 and done.stderr.split()[-1] == str(loads), (command, done.stderr[-2000:])
