"""The recovery scan with the next segment dispatched ahead in a second thread
(``DispatchScanner.ahead``, ``dispatch._Ahead``: spilled, read back in order) hands out the rows,
keys, topics, end, record count and last valid offset of the scan that walks the segments one
after the other, on the real-broker fixtures, whole and damaged where the chain ends before,
in or at the start of a segment dispatched ahead; so does the reput of whole segments (the
rebuilds' walk before the recovery's start segment), also where it skips damage and goes on;
and ``DispatchCache`` adopts the spilled batches so the apply writes what it writes from
batches it spilled itself."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from conftest import VERSIONS, copy_store, manifest, python_lock_calls

from mqtool.apply import apply_plan
from mqtool.formats import commitlog as clfmt
from mqtool.dispatch import fastdispatch as fd
from mqtool.dispatch.scanner import DispatchCache, phase_scanner
from mqtool.recovery.planners import PlanOptions, plan_recover
from mqtool.store import Store
from test_recovery_cache import written

BODY_CRC = clfmt.HEADER_LAYOUTS[(False, False)].offset_of("body_crc")
KEPT = [c for c in range(fd.N_FIELDS) if c not in (fd.F_TOPIC_FP, fd.F_TOPIC_POS, fd.F_TOPIC_LEN)]  # what the spill keeps
DAMAGES = ("none", "crc-first-segment", "crc-last-segment", "garbage-last-segment", "zeros-last-segment")


pytestmark = pytest.mark.usefixtures("ahead_on_small_segments")


def damage(root, version: str, name: str, kind: str) -> None:
    if kind == "none":
        return
    offsets = [m["commitLogOffset"] for m in manifest(version, name)["messages"]]
    with Store.open(root) as store:
        size = store.commitlog.file_size
        last_base = max(o // size * size for o in offsets)
    inside = [o for o in offsets if o // size * size == (0 if "first" in kind else last_base)]
    offset = inside[len(inside) // 2] if "zeros" not in kind else last_base
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    at = offset % size
    if kind.startswith("crc"):
        data[at + BODY_CRC] ^= 0x01
    elif kind.startswith("garbage"):
        data[at : at + 16] = b"not a record!!!!"
    else:
        data[:] = bytes(len(data))
    seg.write_bytes(data)


def scanned(store: Store, ahead: bool, discipline: str = "recovery", stop: int | None = None):
    scanner = phase_scanner(
        store.commitlog, store.commitlog.min_offset, stop, discipline=discipline, tags="delivery-time", delay_table=store.delay_table,
        legacy_properties=store.legacy_properties, index_enable=True, check_crc=discipline == "recovery", ahead=ahead,
    )
    scanner.BATCH = 64  # several batches a segment
    batches = list(scanner)
    assert scanner._parallel() == ahead
    rows = np.concatenate([b.fields[:, KEPT] for b in batches])
    keys = np.concatenate([b.keys for b in batches])
    names = [scanner.topics.names[t] for b in batches for t in b.topic_ids.tolist()]
    read_back = sum(b.spilled is not None for b in batches)
    return (rows, keys, names, scanner.end, scanner.records, scanner.last_valid_offset, scanner.skipped), read_back


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ("clean-small", "crashed-small"))
@pytest.mark.parametrize("kind", DAMAGES)
def test_dispatch_ahead_equals_one_segment_after_the_other(version, name, kind, tmp_path):
    root = copy_store(version, name, tmp_path)
    damage(root, version, name, kind)
    with Store.open(root) as store:
        (rows, keys, names, end, records, last, _), _ = scanned(store, False)
        (rows2, keys2, names2, end2, records2, last2, _), read_back = scanned(store, True)
        segments_walked = len({int(o) // store.commitlog.file_size for o in rows[:, KEPT.index(fd.F_POS)]})
    assert records > 0 and records == rows.shape[0]
    assert np.array_equal(rows, rows2) and np.array_equal(keys, keys2) and names == names2
    assert (end, records, last) == (end2, records2, last2)
    expected_reason = {"crc-first-segment": "crc", "crc-last-segment": "crc", "garbage-last-segment": "corrupt", "zeros-last-segment": "zeros"}.get(kind)
    assert expected_reason is None or end.reason == expected_reason
    if kind == "crc-first-segment":
        assert segments_walked == 1  # the chain ends in the first segment: the work ahead is dropped
    if segments_walked > 1:
        assert read_back > 0  # the later segments came through the spill of the thread ahead


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ("none", "crc-first-segment", "garbage-first-segment", "garbage-last-segment"))
@pytest.mark.parametrize("to", ("end", "last-segment"))
def test_reput_ahead_equals_one_segment_after_the_other(version, kind, to, tmp_path):
    """The reput (no CRC: a flipped CRC changes nothing) to the end of the log or to the last
    segment's first byte, as the rebuilds walk before the recovery's start segment; garbage in
    a segment ends the chain there and the reput goes on from the next one (``doReput``)."""
    root = copy_store(version, "clean-small", tmp_path)
    damage(root, version, "clean-small", kind)
    with Store.open(root) as store:
        stop = None if to == "end" else store.commitlog.segments[-1].base_offset
        (rows, keys, names, end, records, last, skipped), _ = scanned(store, False, "reput", stop)
        (rows2, keys2, names2, end2, records2, last2, skipped2), read_back = scanned(store, True, "reput", stop)
    assert records > 0 and records == rows.shape[0]
    assert np.array_equal(rows, rows2) and np.array_equal(keys, keys2) and names == names2
    assert (end, records, last, skipped) == (end2, records2, last2, skipped2)
    assert read_back > 0  # later segments came through the spill of the thread ahead
    assert bool(skipped) == (kind == "garbage-first-segment")  # in the last segment there is nothing to go on to
    if to == "last-segment":
        assert end.offset == stop


@pytest.mark.parametrize("version", VERSIONS)
def test_a_cache_adopts_the_spill_ahead(version, tmp_path):
    """recover applied from a cache holding the batches read back from the thread ahead writes
    what an apply that walks the log again writes."""
    out = {}
    for label, cache in (("walk", None), ("cache", DispatchCache())):
        root = copy_store(version, "crashed-small", tmp_path / label)
        with Store.open(root) as store:
            plan = plan_recover(store, PlanOptions(mode="abnormal"), cache=cache)
        if cache is not None:
            adopted = [e for e in cache.phases[0] if e[0] is not cache._spill.file]
            assert adopted and cache.enabled
        apply_plan(plan, tmp_path / label / "backup", cache=cache)
        out[label] = written(root)
    assert out["walk"] and out["cache"] == out["walk"]


def no_room_after(monkeypatch, writes: int) -> None:
    """Every spill (the thread ahead's, the apply cache's) fails as a full ``$TMPDIR`` fails after ``writes`` batches."""
    from mqtool.dispatch import scanner as dispatch

    write, done = dispatch.BatchSpill.write, []

    def failing(spill, batch):
        if len(done) >= writes:
            raise OSError(errno.ENOSPC, "No space left on device")
        done.append(1)
        return write(spill, batch)

    monkeypatch.setattr(dispatch.BatchSpill, "write", failing)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("writes", (0, 1))
def test_with_no_room_for_the_spill_the_segment_is_walked_on_in_turn(version, kind, writes, tmp_path, monkeypatch):
    """Before: a full ``$TMPDIR`` failed the plan (exit 5, "short write to the dispatch spill"). Now the
    batch that did not fit goes over as it is, the consumer walks the rest of the segment, and the scan
    is the one of the segments walked one after the other."""
    root = copy_store(version, "crashed-small", tmp_path)
    damage(root, version, "crashed-small", kind)
    with Store.open(root) as store:
        expected, _ = scanned(store, False)
        no_room_after(monkeypatch, writes)
        got, read_back = scanned(store, True)
    rows, keys, names, *rest = expected
    assert rows.shape[0] > 0 and np.array_equal(rows, got[0]) and np.array_equal(keys, got[1]) and names == got[2]
    assert rest == list(got[3:])
    assert read_back <= writes and (kind != "none" or read_back == writes)  # what was spilled is read back, the rest walked


@pytest.mark.parametrize("version", VERSIONS)
def test_with_no_room_for_any_spill_recover_applies_as_with_room(version, tmp_path, monkeypatch):
    out = {}
    for label in ("room", "full"):
        root = copy_store(version, "crashed-small", tmp_path / label)
        cache = DispatchCache()
        if label == "full":
            no_room_after(monkeypatch, 0)
        with Store.open(root) as store:
            plan = plan_recover(store, PlanOptions(mode="abnormal"), cache=cache)
        assert cache.enabled == (label == "room")  # the apply's cache gives up and the apply walks again
        apply_plan(plan, tmp_path / label / "backup", cache=cache)
        out[label] = written(root)
    assert out["room"] and out["full"] == out["room"]


def test_the_consumer_of_the_segment_ahead_waits_on_no_python_lock_a_ctrl_c_could_leave_held(tmp_path):
    """Before: the scan took each segment dispatched ahead through a ``threading.Condition``
    (``_Ahead.batches``), in the command's own thread, where Ctrl-C lands during a recovery plan or
    a rebuild: a KeyboardInterrupt there can leave the Condition's lock held, and the thread ahead
    then waits for it forever in its next hand-off, and ``close`` joins it forever (the hang fixed
    in ``handoff.Stage``). The consumer now waits only in ``SimpleQueue.get``."""
    from mqtool.dispatch import scanner as dispatch

    root = copy_store("5.3.3", "clean-small", tmp_path)
    with Store.open(root) as store:
        scanner = phase_scanner(store.commitlog, store.commitlog.min_offset, None, discipline="recovery", tags="delivery-time", delay_table=store.delay_table,
                                legacy_properties=store.legacy_properties, index_enable=True, check_crc=True, ahead=True)
        ahead = dispatch._Ahead(scanner, 1)  # the second segment, in its thread
        batches, done = [], None
        try:
            with python_lock_calls() as entered:
                taken = ahead.batches()
                while done is None:
                    try:
                        batches.append(next(taken))
                    except StopIteration as stop:
                        done = stop.value
        finally:
            ahead.close()
    assert batches and batches[0].spilled is not None and done is not None  # read back from the spill, then the segment's end
    assert entered == set()  # no function of threading.py or queue.py: no Python-level lock
