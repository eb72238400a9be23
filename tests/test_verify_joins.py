"""The cross-checks' batch joins report exactly what the batches reported record by record do.

Every fixture store and damaged copies are verified with the joins on and with every batch
declined (each reported record by record); the finding lists (every field, in the order printed)
and the summaries must be equal. Each damage is also checked to produce the finding it is about,
so a comparison of two empty lists cannot pass for one of damage.
Small batch and chunk sizes make findings fall in many batches and entries cross chunk ends.
The cross-checks also run on a walk of their own, not the commit log check's: the same again;
and on the commit log check's walk both in threads beside it (two CPUs) and inline (one CPU).
"""

from __future__ import annotations

import itertools
import os
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import FIXTURES, manifest
from mqtool.formats import commitlog as cl
from mqtool.formats import consumequeue as cqfmt
from mqtool.formats import index as ixfmt
from mqtool.store import Store
import mqtool.verify.verification as verify_module
from mqtool.verify import Verification, VerifyOptions
from mqtool.dispatch import topicnumbers
from mqtool import handoff
from mqtool.store import segments
from mqtool.verify import consumequeue, index, logstream
from mqtool.verify.consumequeue import ConsumeQueueCheck
from mqtool.verify.index import IndexCheck
from mqtool.verify.sharedwalk import SharedWalk

STORES = sorted(
    (p.parent.name.removeprefix("rocketmq-"), p.name)
    for p in FIXTURES.glob("rocketmq-*/*")
    if p.is_dir() and (p.parent / f"{p.name}.manifest.json").is_file()
)
SMALL = {"batch": 7, "cq_chunk": 5, "index_chunk": 3, "topic_slots": 2, "shown_step": 1000}


@pytest.fixture(params=["default", "small"])
def sizes(request, monkeypatch):
    if request.param == "small":
        monkeypatch.setattr(logstream, "BATCH", SMALL["batch"])
        monkeypatch.setattr(consumequeue, "CHUNK_UNITS", SMALL["cq_chunk"])
        monkeypatch.setattr(index, "CHUNK_ENTRIES", SMALL["index_chunk"])
        monkeypatch.setattr(topicnumbers, "TABLE_SLOTS", SMALL["topic_slots"])  # the topic table grown, probed past collisions
        monkeypatch.setattr(segments, "SHOWN_STEP", SMALL["shown_step"])  # a batch's columns built from several walk calls
    return request.param


JOINED: dict[str, int] = {}  # batches the joins took in the last run, per check
SHARED: list[bool] = []  # whether the last run's cross-checks read the commit log check's walk
THREADED: list[bool] = []  # and whether in threads beside it


@contextmanager
def cpus(n: int):
    """``Verification`` sees ``n`` usable CPUs (threads and forks are for two or more)."""
    saved = verify_module.usable_cpus
    verify_module.usable_cpus = lambda: n
    try:
        yield
    finally:
        verify_module.usable_cpus = saved


@contextmanager
def joins_declined():
    """Every batch reported record by record: the joins decline them all."""
    saved = ConsumeQueueCheck.on_columns, IndexCheck.on_columns
    ConsumeQueueCheck.on_columns = IndexCheck.on_columns = lambda self, columns: False
    try:
        yield
    finally:
        ConsumeQueueCheck.on_columns, IndexCheck.on_columns = saved


def run(path: Path, joins: str = "on", cpu_count: int = 2, **options) -> tuple[list[dict], dict]:
    """Verify ``path``; ``joins="declined"``: every batch reported record by record."""
    with Store.open(path) as store, cpus(cpu_count), (joins_declined() if joins == "declined" else nullcontext()):
        v = Verification(store, VerifyOptions(**options))
        findings = [f.as_dict() for f in v.findings()]
        summary = v.summary.as_dict()
        SHARED[:] = [v.cross_checks_shared]
        THREADED[:] = [v.cross_checks_threaded]
        if joins == "on":
            JOINED.clear()
            JOINED.update({type(c).__name__: c.joined for c in v.cross_checks})
    for volatile in ("elapsed_s", "throughput_bytes_per_s"):
        summary.pop(volatile)
    return findings, summary


def run_jobs(path: Path, jobs: int) -> tuple[list[dict], dict]:
    with Store.open(path) as store, cpus(2):
        v = Verification(store, VerifyOptions(jobs=jobs))
        findings = [f.as_dict() for f in v.findings()]
        summary = v.summary.as_dict()
        SHARED[:] = [v.cross_checks_shared]
        THREADED[:] = [v.cross_checks_threaded]
    for volatile in ("elapsed_s", "throughput_bytes_per_s"):
        summary.pop(volatile)
    return findings, summary


def run_separate_walk(path: Path, joins: str = "on", **options) -> tuple[list[dict], dict]:
    """``run`` with the cross-checks on a walk of their own (``LogStream``), never on the
    commit log check's (``sharedwalk.py``)."""
    verify_module.SHARE_WALK = False
    try:
        return run(path, joins, **options)
    finally:
        verify_module.SHARE_WALK = True


FIRST: list = []  # the last ``same``'s first run: its summary and the batches the joins took


def same(path: Path, **options) -> list[dict]:
    """The findings with the joins on and with every batch reported record by record, asserted
    equal, and with the cross-checks on the commit log check's walk inline (one CPU) instead of
    in threads beside it (two), on a walk of their own, and with ``--jobs 2`` equal again;
    returns them."""
    joined, joined_summary = run(path, **options)
    FIRST[:] = [joined_summary, dict(JOINED)]
    shared, threaded = SHARED[0], THREADED[0]
    with Store.open(path) as store:
        dledger = store.is_dledger
    assert threaded == (shared and not dledger)  # two CPUs: a shared walk is a threaded one, but a DLedger log's (fed inline)
    assert run(path, cpu_count=1, **options) == (joined, joined_summary)
    assert SHARED == [shared] and THREADED == [False]
    records, records_summary = run(path, "declined", **options)
    assert joined == records
    assert joined_summary == records_summary
    assert run_separate_walk(path, **options) == (joined, joined_summary)
    assert SHARED == [False]
    if not options:
        assert run_jobs(path, 2) == (joined, joined_summary)
        assert SHARED == [shared] and THREADED == [threaded]  # --jobs 2 shares the walk too, where it can
    SHARED[:], THREADED[:] = [shared], [threaded]
    return joined


def joins_ran(small_batches: bool) -> bool:
    """With small batches, both joins took some batches (the comparison covers them)."""
    return not small_batches or (JOINED.get("ConsumeQueueCheck", 0) > 0 and JOINED.get("IndexCheck", 0) > 0)


def kinds(findings: list[dict]) -> set[str]:
    return {f["kind"] for f in findings}


@pytest.mark.parametrize("version,name", STORES)
def test_joins_and_record_by_record_agree_on_every_fixture_store(version, name, sizes):
    path = FIXTURES / f"rocketmq-{version}" / name
    same(path)
    records = sum(1 for m in manifest(version, name)["messages"])
    summary, joined = FIRST
    walked = summary["commitlog"]["records"]
    with Store.open(path) as store:
        # the comparison above covers the shared walk, a DLedger log's too (inline: ``SharedWalk.entry_rows``)
        assert SHARED == [walked > 0] and THREADED == [walked > 0 and not store.is_dledger]
    if walked and sizes == "small":
        assert records and joined["ConsumeQueueCheck"] > walked // SMALL["batch"] // 2
        assert joined["IndexCheck"] > walked // SMALL["batch"] // 2


def test_the_queue_windows_read_less_at_a_time_the_more_queues_a_store_has(monkeypatch):
    """Every queue's window is loaded at once: a store of thousands of long queues reads each in
    smaller chunks, so the windows stay within ``WINDOWS_BUDGET`` (down to ``MIN_CHUNK_UNITS``),
    and the findings are those of full-sized reads."""
    assert consumequeue.chunk_units(19) == consumequeue.CHUNK_UNITS
    assert consumequeue.chunk_units(10_000) * 32 * 10_000 <= consumequeue.WINDOWS_BUDGET < consumequeue.CHUNK_UNITS * 32 * 10_000
    assert consumequeue.chunk_units(10**7) == consumequeue.MIN_CHUNK_UNITS
    path = FIXTURES / "rocketmq-4.9.7" / "crashed-small"
    full = run(path)
    monkeypatch.setattr(consumequeue, "WINDOWS_BUDGET", 32 * 3 * 40)  # 3 units a queue for a store of 40 queues
    monkeypatch.setattr(consumequeue, "MIN_CHUNK_UNITS", 2)
    with Store.open(path) as store:
        assert 2 <= consumequeue.chunk_units(len(store.consume_queues)) <= 3
    asked, reads = [], consumequeue.queue_reads
    monkeypatch.setattr(consumequeue, "queue_reads", lambda queue, chunk: (asked.append(chunk), reads(queue, chunk))[1])
    assert run(path) == full and JOINED["ConsumeQueueCheck"] > 0
    assert asked and set(asked) <= {2, 3}  # every window read that many units at a time


@pytest.mark.parametrize("version,name", [("4.9.7", "clean-small"), ("5.3.3", "clean-small")])
@pytest.mark.parametrize("idle", ["always", "every-third"])
def test_batches_dispatched_in_the_checks_thread_give_the_same_findings(version, name, idle, monkeypatch):
    """A batch cut while the checks thread is idle is dispatched there (``sharedwalk.py``), the
    others on the walk, and its topics are numbered in order whoever dispatched it: with the
    thread always idle and idle at every third cut, the run is the inline one's."""
    monkeypatch.setattr(logstream, "BATCH", SMALL["batch"])
    monkeypatch.setattr(segments, "SHOWN_STEP", SMALL["shown_step"])
    path = FIXTURES / f"rocketmq-{version}" / name
    inline = run(path, cpu_count=1)
    answers = itertools.cycle([True] if idle == "always" else [True, False, False])
    deferred = []
    monkeypatch.setattr(handoff.Stage, "idle", lambda self: next(answers))
    check = SharedWalk._check
    monkeypatch.setattr(SharedWalk, "_check", lambda self, batch: deferred.append(batch[4]) or check(self, batch))
    assert run(path) == inline and THREADED == [True]
    assert JOINED["ConsumeQueueCheck"] > inline[1]["commitlog"]["records"] // SMALL["batch"] // 2
    period = 1 if idle == "always" else 3
    assert deferred[:12] == [i > 0 and i % period == 1 % period for i in range(12)]  # the first batch is cut before the thread is asked


# ---- damaged copies ---------------------------------------------------------------------------


def queue_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "consumequeue").glob("*/*/*") if p.is_file() and p.stat().st_size)


def units(path: Path) -> int:
    """Units up to the last non-zero one."""
    raw = path.read_bytes()
    n = len(raw.rstrip(b"\0"))
    return -(-n // cqfmt.ENTRY_SIZE)


def largest_queue(root: Path) -> Path:
    return max(queue_files(root), key=lambda p: (units(p), str(p)))


@pytest.mark.parametrize("version,name", STORES)
def test_compiled_unit_decoder_equals_the_schema_on_every_fixture_queue_file(version, name):
    """``consumequeue.decode_units`` against the construct schema's codec, unit by unit, with its
    counts of invalid and filler units; plus a filler and an invalid unit of our own."""
    root = FIXTURES / f"rocketmq-{version}" / name
    files = queue_files(root)
    if not files:
        pytest.skip("no consume queue files (a DLedger or commit-log-only fixture)")
    extra = cqfmt.ENTRY.pack(*cqfmt.FILLER) + cqfmt.ENTRY.pack(-1, 0, 7) + cqfmt.ENTRY.pack(5, -3, -(1 << 40))
    for path in files:
        raw = path.read_bytes()[: units(path) * cqfmt.ENTRY_SIZE] + extra
        n = len(raw) // cqfmt.ENTRY_SIZE
        rows = np.empty((n, 4), dtype=np.int64)
        invalid, fillers = consumequeue.decode_units(np.frombuffer(raw, dtype=np.uint8), 1000, rows)
        expected = [cqfmt.ENTRY.unpack_from(raw, i * cqfmt.ENTRY_SIZE) for i in range(n)]
        assert rows[:, [consumequeue.PHYS, consumequeue.SIZE, consumequeue.TAGS]].tolist() == [list(e) for e in expected]
        assert rows[:, consumequeue.QOFF].tolist() == list(range(1000, 1000 + n))
        assert invalid == sum(1 for p, s, _ in expected if p < 0 or s <= 0) >= 2
        assert fillers == sum(1 for e in expected if e == cqfmt.FILLER) >= 1


def put_key_replay(entries: list, slots: int) -> tuple:
    """``IndexFile.putKey``'s slot updates replayed over decoded entries: (bad links, first bad
    entry, negative hashes, chain heads, {slot: newest entry})."""
    last_seen, bad, first_bad, negative, heads = {}, 0, -1, 0, 0
    for e in entries:
        if e.key_hash < 0:
            negative += 1
            continue
        slot = e.key_hash % slots
        if e.prev_index != last_seen.get(slot, 0):
            bad += 1
            first_bad = e.position if first_bad < 0 else first_bad
        heads += e.prev_index == 0
        last_seen[slot] = e.position
    return bad, first_bad, negative, heads, last_seen


def entries_match_by_records(phy, hashes, diffs, begins, ends, offsets, counts, keys, store_ts, lower) -> int:
    """``index.entries_match``'s answer, record by record: -1, 0, or 1 (equal as multisets only)."""
    if any(b < a for a, b in itertools.pairwise(phy)):
        return -1
    judged = [j for j in range(len(phy)) if phy[j] >= lower]
    if judged != list(range(len(phy) - len(judged), len(phy))):
        return -1
    at, expected_keys = 0, []
    for offset, count in zip(offsets, counts):
        expected_keys.append((offset, keys[at : at + count]))
        at += count
    found = [(int(phy[j]), int(hashes[j])) for j in judged]
    if [p for p, _ in found] != [o for o, k in expected_keys for _ in k]:
        return -1
    for j in judged:
        k = int(np.searchsorted(ends, j, side="right"))
        r = offsets.index(int(phy[j]))
        if diffs[j] != (ixfmt.time_diff_seconds(store_ts[r], begins[k]) if begins[k] > 0 else 0):
            return -1
    return 0 if [h for _, h in found] == keys else 1


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_index_join_equals_a_record_by_record_reading(seed):
    """``index.entries_match`` on a batch's entries, as they are and with one thing changed: a
    hash (put order lost, or a key not the record's), an offset, a time difference, an entry too
    many or too few, an entry out of order, the range's lower bound."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    offsets = sorted(rng.choice(1 << 20, n, replace=False).tolist())
    counts = rng.integers(0, 4, n).tolist()
    store_ts = (1_700_000_000_000 + rng.integers(0, 10_000_000, n)).tolist()
    keys = rng.integers(0, 1 << 31, sum(counts)).tolist()
    below = int(rng.integers(0, 3))  # entries of earlier records, below ``lower``
    begins = [1_700_000_000_000 - 5000, 0][: int(rng.integers(1, 3))]
    phy = [int(offsets[0]) - 10 - b for b in range(below, 0, -1)] + [o for o, c in zip(offsets, counts) for _ in range(c)]
    hashes = rng.integers(0, 1 << 31, below).tolist() + list(keys)
    m = len(phy)
    ends = [m] if len(begins) == 1 else [m // 2, m]
    diffs = []
    for j, p in enumerate(phy):
        begin = begins[int(np.searchsorted(ends, j, side="right"))]
        ts = store_ts[offsets.index(p)] if p in offsets else store_ts[0]
        diffs.append(ixfmt.time_diff_seconds(ts, begin) if begin > 0 else 0)
    lower = int(offsets[0])
    cases = [(phy, hashes, diffs)]
    if m > below:
        j = int(rng.integers(below, m))
        for change in ("hash", "swap", "phy", "diff", "extra", "missing", "order"):
            p, h, d = list(phy), list(hashes), list(diffs)
            if change == "hash":
                h[j] += 1
            elif change == "swap" and j + 1 < m:
                h[j], h[j + 1] = h[j + 1], h[j]
            elif change == "phy":
                p[j] += 1
            elif change == "diff":
                d[j] += 1
            elif change == "extra":
                p.insert(j, p[j]), h.insert(j, h[j]), d.insert(j, d[j])
            elif change == "missing":
                del p[j], h[j], d[j]
            elif change == "order" and j > 0:
                p[j - 1], p[j] = p[j], p[j - 1]
            cases.append((p, h, d))
    for p, h, d in cases:
        e = [min(x, len(p)) for x in ends[:-1]] + [len(p)]
        arrays = [np.asarray(v, dtype=np.int64) for v in (p, h, d, begins, e, offsets, counts, keys, store_ts)]
        code, skipped = index.entries_match(*arrays, lower)
        assert code == entries_match_by_records(p, h, d, begins, e, offsets, counts, keys, store_ts, lower)
        if code >= 0:
            assert skipped == sum(1 for x in p if x < lower)


@pytest.mark.parametrize("version,name", STORES)
def test_compiled_chain_replay_equals_put_key_on_every_fixture_index_entry(version, name, sizes):
    """``index.IndexEntries.chunks`` (``read_entries`` chunk after chunk) against ``putKey``
    replayed in Python over the schema decoder's entries (``IndexFile.entries``): the same
    entries, counts, first bad entry and slot table; then ``read_entries`` alone on the entries
    with one prev changed and one hash negative."""
    with Store.open(FIXTURES / f"rocketmq-{version}" / name) as store:
        if not store.index_files:
            pytest.skip("no index files")
        for f in store.index_files:
            slots, entries = f.geometry.hash_slot_num, list(f.entries())
            meta = index.IndexEntries(SimpleNamespace(store=store), f, 0)
            read = [row for _, columns in meta.chunks() for row in zip(*(c.tolist() for c in columns))]
            assert read == [(e.key_hash, e.phy_offset, e.time_diff) for e in entries]
            bad, first_bad, negative, heads, seen, _table = meta.state
            assert (bad, first_bad, negative, heads, {s: int(seen[s]) for s in np.flatnonzero(seen).tolist()}) == put_key_replay(entries, slots)
            if len(entries) > 3:
                entries[1] = entries[1]._replace(prev_index=entries[1].prev_index + 7)
                entries[2] = entries[2]._replace(key_hash=-5)
                raw = b"".join(ixfmt.ENTRY.pack(*e[1:]) for e in entries)
                seen = np.zeros(slots, dtype=np.int32)
                columns = [np.empty(len(entries), dtype=np.int64) for _ in range(3)]
                got = index.read_entries(np.frombuffer(raw, dtype=np.uint8), 1, seen, slots, *columns)
                want = put_key_replay(entries, slots)
                assert got == want[:4] and want[0] and want[2] == 1
                assert {s: int(seen[s]) for s in np.flatnonzero(seen).tolist()} == want[4]
                assert [list(c.tolist()) for c in columns] == [[e.key_hash for e in entries], [e.phy_offset for e in entries], [e.time_diff for e in entries]]


@pytest.mark.parametrize("version,name", STORES)
def test_topic_numbers_are_the_topic_tables_ids_on_every_fixture_record(version, name, sizes):
    """``topicnumbers.TopicNumbers`` (the dispatch's look-up in ``known`` while the record is in
    cache, then the compiled ``number_topics`` for the rest, over a table kept for the whole walk)
    gives every record of the fixture the id ``TopicTable.id_of`` gives its topic bytes, whatever
    rows each call is shown; what the dispatch looks up is the final id or -1; the names are the
    manifest's topics."""
    from mqtool.dispatch import fastdispatch as fd
    from mqtool.dispatch.scanner import TopicTable
    from mqtool.store.fastscan import FastScan

    path = FIXTURES / f"rocketmq-{version}" / name
    numbers, reference = topicnumbers.TopicNumbers(TopicTable()), TopicTable()
    seen = 0
    with Store.open(path) as store:
        if store.is_dledger:
            pytest.skip("DLedger commit logs are not walked as plain records")
        for batch in FastScan(store.commitlog, check_crc=False, stop_on_crc=False):
            rows, n = batch.rows, batch.rows.shape[0]
            out = np.empty((n, fd.N_FIELDS), dtype=np.int64)
            keys = np.empty(int((rows[:, 0] + rows[:, 1] - rows[:, 5]).sum()) + 2 * n + 2, dtype=np.int64)
            got = np.full(n, -7, dtype=np.int64)
            step = 3 if sizes == "small" else n
            key_fill = 0
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                _, key_fill = fd.dispatch_rows(batch.array, rows[lo:hi], 0, store.legacy_properties, fd.SCHEDULE_TOPIC_BYTES, fd.delay_array({}), True,
                                               out, lo, keys, key_fill, numbers.known, got)
                expected = [reference.id_of(batch.array[p : p + k].tobytes()) for p, k in out[lo:hi, [fd.F_TOPIC_POS, fd.F_TOPIC_LEN]].tolist()]
                assert all(i in (e, -1) for i, e in zip(got[lo:hi].tolist(), expected))
                numbers.number(batch.array, out, lo, hi, got)
                assert got[lo:hi].tolist() == expected
            again = np.full(n, -7, dtype=np.int64)  # every topic known now: each looked up by the dispatch alone
            fd.dispatch_rows(batch.array, rows, 0, store.legacy_properties, fd.SCHEDULE_TOPIC_BYTES, fd.delay_array({}), True, out, 0, keys, 0, numbers.known, again)
            assert again.tolist() == got.tolist()
            seen += n
    assert seen and numbers.topics.names == reference.names
    assert set(reference.names) >= {m["topic"] for m in manifest(version, name)["messages"]}


@pytest.mark.parametrize("queues,capacity", [(1, 1024), (40, 1024), (700, 1024), (40, 8), (700, 100)])
def test_queue_groups_equals_a_python_grouping(queues, capacity, monkeypatch):
    """``consumequeue.group_queues`` (``queue_groups`` with its own hash table, grouping again when
    the batch has more queues than ``QUEUE_CAPACITY``) against a dict grouping: queues in order of first appearance, each one's records, first and last;
    only NOT_TYPE and COMMIT records of topics not skipped. ``consumequeue.join_groups`` then finds
    equal entries equal and any one changed field different."""
    rng = np.random.default_rng(queues)
    n = 5000
    topic_ids = rng.integers(0, 5, n)
    queue_ids = np.where(rng.random(n) < 0.3, 0, rng.integers(-2, queues, n))  # negative QUEUEIDs too, and runs
    sys_flags = rng.choice([0, 4, 8, 12, 1, 9], n)  # every transaction type, other bits set
    skip = np.array([False, False, True, False, False])
    expected: dict[tuple[int, int], list[int]] = {}
    for r in range(n):
        if sys_flags[r] & cl.TRANSACTION_TYPE_MASK in (0, 8) and not skip[topic_ids[r]]:
            expected.setdefault((int(topic_ids[r]), int(queue_ids[r])), []).append(r)
    monkeypatch.setattr(consumequeue, "QUEUE_CAPACITY", capacity)
    keys, counts, first, last, gid = consumequeue.group_queues(topic_ids, queue_ids, sys_flags, skip)
    assert [(k >> 32, (k & 0xFFFFFFFF) - ((k & 0x80000000) << 1)) for k in keys.tolist()] == list(expected)
    assert counts.tolist() == [len(rows) for rows in expected.values()]
    assert first.tolist() == [rows[0] for rows in expected.values()] and last.tolist() == [rows[-1] for rows in expected.values()]
    groups = {r: g for g, rows in enumerate(expected.values()) for r in rows}
    assert gid.tolist() == [groups.get(r, -1) for r in range(n)]
    columns = [rng.integers(0, 1 << 40, n) for _ in range(4)]  # offsets, sizes, QUEUEOFFSETs, tags codes (none an ext address)
    entries = np.zeros((len(order := [r for rows in expected.values() for r in rows]), 4), dtype=np.int64)
    for column, values in ((consumequeue.QOFF, columns[2]), (consumequeue.PHYS, columns[0]), (consumequeue.SIZE, columns[1]), (consumequeue.TAGS, columns[3])):
        entries[:, column] = values[order]
    bounds = np.cumsum([0, *counts.tolist()])
    views = lambda e: [e[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]  # each group's entries, as the cursors' windows give them
    view_of = np.arange(len(keys), dtype=np.int64)
    ext = np.zeros(len(keys), dtype=np.int64)
    assert consumequeue.join_groups(gid, view_of, views(entries), *columns, ext) and not ext.any()
    ext_entry = entries.copy()
    ext_entry[0, consumequeue.TAGS] = cqfmt.EXT_MAX_ADDRESS  # a ConsumeQueueExt address: counted, not compared
    assert consumequeue.join_groups(gid, view_of, views(ext_entry), *columns, ext) and ext.tolist() == [1] + [0] * (len(keys) - 1)
    for field in range(4):
        changed = entries.copy()
        changed[len(order) // 2, field] += 1
        assert not consumequeue.join_groups(gid, view_of, views(changed), *columns, ext)
    short = views(entries)
    short[-1] = short[-1][:-1]  # a group with more records than entries
    assert not consumequeue.join_groups(gid, view_of, short, *columns, ext)
    skipped = view_of.copy()
    skipped[-1] = -1  # a group not compared: its records are passed over
    assert consumequeue.join_groups(gid, skipped, short, *columns, ext)


def rewrite_unit(path: Path, number: int, change) -> tuple:
    raw = bytearray(path.read_bytes())
    pos = number * cqfmt.ENTRY_SIZE
    old = cqfmt.ENTRY.unpack_from(raw, pos)
    cqfmt.ENTRY.pack_into(raw, pos, *change(*old))
    path.write_bytes(raw)
    return old


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7", "5.3.3"])
@pytest.mark.parametrize(
    "damage,unit,change,kind",
    [
        ("size", 0.5, lambda p, s, t: (p, s + 1, t), "cq-entry-mismatch"),
        ("tags", 0.5, lambda p, s, t: (p, s, t ^ 0x10), "cq-entry-mismatch"),
        ("middle of a record", 0.3, lambda p, s, t: (p + 4, s, t), "cq-entry-dangling"),
        ("past the end", 1.0, lambda p, s, t: (p + (1 << 40), s, t), "cq-entry-beyond-end"),
        ("invalid unit", 0.4, lambda p, s, t: (-1, 0, t), "cq-invalid-unit"),
        ("first unit", 0.0, lambda p, s, t: (p, s, t + 1), "cq-entry-mismatch"),
    ],
)
def test_a_damaged_consume_queue_unit(version, damage, unit, change, kind, store_copy, sizes):
    root = store_copy(version, "clean-small")
    path = largest_queue(root)
    number = min(int(units(path) * unit), units(path) - 1)
    rewrite_unit(path, number, change)
    assert kind in kinds(same(root))
    assert joins_ran(sizes == "small")


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_deleted_and_emptied_consume_queues(version, store_copy, sizes):
    root = store_copy(version, "clean-small")
    files = sorted(queue_files(root), key=lambda p: (units(p), str(p)))
    files[-1].unlink()  # a whole queue's only file
    os.truncate(files[-2], 0)  # a queue with an empty file
    rewrite_unit(files[-3], units(files[-3]) // 2, lambda p, s, t: (p, s, t + 1))
    found = same(root)
    assert {"cq-entry-missing", "cq-entry-mismatch"} <= kinds(found)


def test_a_missing_consume_queue_file_between_two_others_is_a_gap(store_copy, sizes):
    root = store_copy("4.9.7", "clean-small")
    path = largest_queue(root)
    n = units(path)
    raw = path.read_bytes()
    size = 4 * cqfmt.ENTRY_SIZE  # three small files of the same queue, the middle one removed
    for i, base in enumerate(range(0, n * cqfmt.ENTRY_SIZE, size)):
        (path.parent / f"{base:020d}").write_bytes(raw[base : base + size].ljust(size, b"\0"))
    (path.parent / f"{size:020d}").unlink()
    with Store.open(root) as store:
        queue = next(q for q in store.consume_queues if q.directory == path.parent)
        assert queue.file_size == size
    assert {"cq-file-gap", "cq-entry-missing"} <= kinds(same(root))


def index_entry(root: Path, version: str, number: int, change, which: int = 0) -> None:
    path = sorted((root / "index").iterdir())[which]
    slots = manifest(version, "clean-small")["storeConfig"]["maxHashSlotNum"]
    raw = bytearray(path.read_bytes())
    pos = ixfmt.entry_position(slots, number)
    ixfmt.ENTRY.pack_into(raw, pos, *change(*ixfmt.ENTRY.unpack_from(raw, pos)))
    path.write_bytes(raw)


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
@pytest.mark.parametrize(
    "damage,number,change,kind",
    [
        ("hash", 40, lambda h, p, d, v: (h ^ 1, p, d, v), "index-entry-mismatch"),
        ("time", 41, lambda h, p, d, v: (h, p, d + 5, v), "index-entry-mismatch"),
        ("past the end", 42, lambda h, p, d, v: (h, p + (1 << 40), d, v), "index-entry-beyond-end"),
        ("middle of a record", 43, lambda h, p, d, v: (h, p + 3, d, v), "index-entry-dangling"),
        ("prev", 44, lambda h, p, d, v: (h, p, d, v + 9), "index-chain"),
        ("first entry", 1, lambda h, p, d, v: (h ^ 4, p, d, v), "index-entry-mismatch"),
    ],
)
def test_a_damaged_index_entry(version, damage, number, change, kind, store_copy, sizes):
    root = store_copy(version, "clean-small")
    index_entry(root, version, number, change)
    assert kind in kinds(same(root))
    assert joins_ran(sizes == "small")


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_deleted_index_files(version, store_copy, sizes):
    root = store_copy(version, "clean-small")
    files = sorted((root / "index").iterdir())
    files[-1].unlink()
    assert "index-keys-missing" in kinds(same(root))
    for f in files[:-1]:
        f.unlink()
    assert "index-keys-missing" in kinds(same(root))


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_a_zeroed_record_range(version, store_copy, sizes):
    root = store_copy(version, "clean-small")
    messages = sorted(manifest(version, "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    target = messages[len(messages) // 3]["commitLogOffset"]
    segment = root / "commitlog" / f"{target - target % (1 << 20):020d}"
    with open(segment, "r+b") as f:
        f.seek(target % (1 << 20))
        f.write(bytes(4096))
    found = same(root)
    # the zeros lie before the segment the broker's next start scans from: it never reads them and serves
    # the log past them, so the entries of the zeroed records dangle (not "beyond the end": issue #28)
    assert kinds(found) == {"damaged-range", "cq-entry-dangling", "index-entry-dangling"}
    same(root, keep_going=True)


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_ranges_and_single_checks(version, sizes):
    root = FIXTURES / f"rocketmq-{version}" / "clean-small"
    messages = sorted(manifest(version, "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    lower, upper = messages[len(messages) // 4]["commitLogOffset"], messages[len(messages) // 2]["commitLogOffset"]
    same(root, from_offset=lower)
    same(root, to_offset=upper)
    same(root, from_offset=lower + 1, to_offset=upper)
    same(root, checks=("cq",))
    assert SHARED == [True]  # a single cross-check reads the commit log check's walk too, unheard
    same(root, checks=("index",))
    assert SHARED == [True]


@pytest.mark.parametrize("name", ["timer-small", "timer-crashed"])
def test_the_timer_check_on_the_walk_of_the_commit_log_check_alone(name, sizes):
    """``--only commitlog,timer``: the timer check reads the commit log check's walk, no cq or index check on it (nothing
    dispatched), inline and in the thread beside it, in batches of 7 records too; the findings are those of its own walk."""
    same(FIXTURES / "rocketmq-5.3.3" / name, checks=("commitlog", "timer"))
    assert SHARED == THREADED == [False]  # the cross-checks' flags: none ran


def test_a_record_the_compiled_dispatch_cannot_decide_is_reported_record_by_record(store_copy, sizes):
    """A TAGS value that is not UTF-8: the batch is taken record by record."""
    root = store_copy("4.9.7", "clean-small")
    messages = sorted(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    with Store.open(root) as store:
        for m in messages:
            record = store.commitlog.read_record(m["commitLogOffset"])
            props = bytes(record.properties)
            at = props.find(b"TAGS\x01")
            if at >= 0 and m["dispatchToConsumeQueue"]:
                break
        else:
            pytest.fail("no tagged message")
        offset = m["commitLogOffset"]
        props_at = offset + record.total_size - len(props)
    segment = root / "commitlog" / f"{offset - offset % (1 << 20):020d}"
    with open(segment, "r+b") as f:
        f.seek((props_at + at + 5) % (1 << 20))
        f.write(b"\xff")
    found = same(root, checks=("cq", "index"))
    assert "cq-entry-mismatch" in kinds(found)


def run_jobs_separate(path: Path, jobs: int) -> tuple[list[dict], dict]:
    """``run_jobs`` with the cross-checks never on the commit log check's walk (as on a DLedger
    store): they run after it, on a walk of their own."""
    verify_module.SHARE_WALK = False
    try:
        return run_jobs(path, jobs)
    finally:
        verify_module.SHARE_WALK = True


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_jobs_2_findings_are_those_of_jobs_1_shared_or_separate(version, store_copy):
    """Sound store: ``--jobs 2`` runs the cross-checks in threads on the commit log check's walk;
    without a shared walk they run on a walk of their own. A flipped body byte (CRC) and a zeroed
    range: the findings are exactly those of ``--jobs 1`` either way."""
    root = FIXTURES / f"rocketmq-{version}" / "clean-small"
    alone = run_jobs(root, 1)
    assert alone and SHARED == THREADED == [True]
    assert run_jobs(root, 2) == alone and SHARED == THREADED == [True]
    assert run_jobs_separate(root, 1) == alone and SHARED == [False]
    assert run_jobs_separate(root, 2) == alone and SHARED == [False]
    root = store_copy(version, "clean-small")
    ordered = sorted(manifest(version, "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    victim = [m for m in ordered if m["bodyLength"] > 8][len(ordered) // 3]
    at = victim["commitLogOffset"] + cl.header_size(victim["sysFlag"]) + victim["bodyLength"] // 2
    segment = root / "commitlog" / f"{at - at % (1 << 20):020d}"
    with open(segment, "r+b") as f:
        f.seek(at % (1 << 20))
        byte = f.read(1)[0]
        f.seek(at % (1 << 20))
        f.write(bytes([byte ^ 0x20]))
    alone = run_jobs(root, 1)
    assert "crc-mismatch" in kinds(alone[0])
    assert run_jobs(root, 2) == alone and run_jobs_separate(root, 2) == alone
    end = ordered[2 * len(ordered) // 3]["commitLogOffset"]
    with open(root / "commitlog" / f"{end - end % (1 << 20):020d}", "r+b") as f:
        f.seek(end % (1 << 20))
        f.write(bytes(64))
    alone = run_jobs(root, 1)
    assert "damaged-range" in kinds(alone[0]) or "half-message" in kinds(alone[0])
    assert run_jobs(root, 2) == alone and run_jobs_separate(root, 2) == alone


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_the_checks_thread_reads_ahead_what_the_checks_after_the_walk_read(version, monkeypatch):
    """With two CPUs the checks thread, a step whenever it is idle at a cut, reads the broker's
    recovery start and the queues' recovery (where the checkpoint check places the consumer
    offsets) while the walk goes on, not after it; the findings are the inline run's."""
    from mqtool.store.consumequeue import ConsumeQueue

    monkeypatch.setattr(logstream, "BATCH", SMALL["batch"])  # more cuts than steps
    monkeypatch.setattr(segments, "SHOWN_STEP", SMALL["shown_step"])
    path = FIXTURES / f"rocketmq-{version}" / "config-real"
    inline = run(path, cpu_count=1)
    monkeypatch.setattr(handoff.Stage, "idle", lambda self: True)
    readers, recover = [], ConsumeQueue._recover
    monkeypatch.setattr(ConsumeQueue, "_recover", lambda self: readers.append(threading.current_thread().name) or recover(self))
    starts, broker_start = [], Verification.broker_start
    monkeypatch.setattr(Verification, "broker_start", lambda self: starts.append((self._broker_start, threading.current_thread().name)) or broker_start(self))
    assert run(path) == inline and THREADED == [True]
    assert any(f["kind"] == "consumer-offset-range" for f in inline[0])  # the offsets were placed
    assert readers and set(readers) == {"mqtool-verify-check"}
    assert starts[0] == (None, "mqtool-verify-check")  # found first beside the walk
