"""The consume queue's recovery, min offset and unit reads (``ConsumeQueue.recover`` through the
compiled ``first_invalid_unit``, ``corrected_min_offset``, ``read_entry``: §5.7, §5.9) give what a
numpy reading of the same files (``read_units``) gives, on every fixture queue and on damage placed
at chunk boundaries, for files read whole and mapped alike; and a lookup does not load numpy."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from conftest import FIXTURES, manifest, store_path

from mqtool.store import ConsumeQueue, Store
from mqtool.store import consumequeue as cq
from mqtool.store.consumequeue import ENTRY_SIZE, UNIT_DTYPE, read_units

STORES = sorted((p.parent.name.removeprefix("rocketmq-"), p.name) for p in FIXTURES.glob("rocketmq-*/*") if p.is_dir() and (p / "consumequeue").is_dir())


def numpy_first_invalid(units: np.ndarray) -> int:
    bad = (units["phys_offset"] < 0) | (units["size"] <= 0)
    return int(np.argmax(bad)) if bad.any() else units.shape[0]


def numpy_recover(queue: ConsumeQueue) -> tuple[int, int]:
    """The recovery loop over numpy views, as ``(end, max_phys)``."""
    start, max_phys = max(0, len(queue.files) - 3), -1
    for index in range(start, len(queue.files)):
        base, path = queue.files[index]
        units = read_units(path, queue.file_size)
        stop = numpy_first_invalid(units)
        if stop:
            max_phys = int(units["phys_offset"][stop - 1]) + int(units["size"][stop - 1])
        if stop * ENTRY_SIZE < queue.file_size or index + 1 == len(queue.files):
            return base + stop * ENTRY_SIZE, max_phys
    raise AssertionError


def numpy_min(queue: ConsumeQueue, cl_min: int, end: int) -> int:
    base, path = queue.files[0]
    units = read_units(path, queue.file_size)[: max(end - base, 0) // ENTRY_SIZE]
    hits = np.flatnonzero(units["phys_offset"] >= cl_min)
    return (base + int(hits[0]) * ENTRY_SIZE) // ENTRY_SIZE if hits.size else 0


def assert_queue_equal(queue: ConsumeQueue, cl_min: int) -> None:
    r = queue.recover()
    assert (r.end, r.max_phys_offset) == numpy_recover(queue)
    if r.end > 0:
        assert queue.corrected_min_offset(cl_min, r.end, v5=False) == numpy_min(queue, cl_min, r.end)
    for base, path in queue.files:
        units = read_units(path, queue.file_size)
        for i in sorted({0, len(units) // 2, len(units) - 1} - {-1}):
            e = queue.read_entry(base // ENTRY_SIZE + i)
            assert (e.phys_offset, e.size, e.tags_code) == tuple(units[i].tolist())


@pytest.fixture(params=["read", "mapped"])
def recovery_path(request, monkeypatch):
    """Each test on both of ``_valid_prefix``'s reads: a file read whole, and one mapped."""
    if request.param == "mapped":
        monkeypatch.setattr(cq, "READ_BELOW", 0)


@pytest.mark.parametrize("version,name", STORES)
def test_fixture_queues_read_as_the_numpy_view(version, name, recovery_path):
    with Store.open(store_path(version, name)) as store:
        assert store.consume_queues
        for queue in store.consume_queues:
            assert_queue_equal(queue, store.commitlog.min_offset)
            assert_queue_equal(queue, store.commitlog.min_offset + 1_000_000)  # retention: the min moves into the queue


@pytest.mark.parametrize("bad_at", [0, 1, cq._CHUNK_UNITS - 1, cq._CHUNK_UNITS, cq._CHUNK_UNITS + 1, 2 * cq._CHUNK_UNITS + 5, None])
@pytest.mark.parametrize("bad", [(-1, 100, 0), (1 << 40, 0, 0), (1 << 40, -5, 0), (-(1 << 40), 7, 0)])
def test_an_invalid_unit_anywhere_ends_the_queue_as_numpy_finds_it(tmp_path, bad_at, bad, recovery_path):
    count = 3 * cq._CHUNK_UNITS
    file_size = (count + 10) * ENTRY_SIZE
    directory = tmp_path / "q"
    directory.mkdir()
    for n, base in enumerate((0, file_size)):
        data = np.zeros(file_size // ENTRY_SIZE, dtype=UNIT_DTYPE)
        data["phys_offset"][: count + 10] = np.arange(count + 10) * 100 + n * 10_000_000 + 5_000_000_000
        data["size"][: count + 10] = 100
        if n == 0 and bad_at is not None:
            data[bad_at] = bad
        (directory / f"{base:020d}").write_bytes(data.tobytes())
    queue = ConsumeQueue("T", 0, directory, file_size)
    assert_queue_equal(queue, 5_000_000_000 + 100 * (cq._CHUNK_UNITS + 3))
    assert_queue_equal(queue, 0)


def test_a_queue_lookup_loads_no_numpy():
    m = manifest("5.3.3", "clean-small")["messages"][3]
    code = (
        "import sys\nfrom mqtool.cli import app\n"
        f"try:\n    app(['query', 'offset', {str(store_path('5.3.3', 'clean-small'))!r}, {m['topic']!r}, '{m['queueId']}', '0'])\n"
        "except SystemExit:\n    pass\nprint(sorted(m for m in ('numpy', 'mqtool.store._fastscan', 'pyarrow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")


def test_a_queue_found_by_the_listing_is_read_once(monkeypatch):
    """Once ``consume_queues`` has listed the queues, ``consume_queue`` gives the same objects, and
    a queue's files are judged once however often it is recovered (verify's cq check and its
    consumer offset check both ask); before the listing, a lookup reads its own queue."""
    reads = []
    judge = cq._valid_prefix
    monkeypatch.setattr(cq, "_valid_prefix", lambda path, size: reads.append(path) or judge(path, size))
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        first = store.consume_queues[0]
        alone = store.consume_queue(first.topic, first.queue_id)
        results = [q.recover() for q in store.consume_queues] + [store.consume_queue(q.topic, q.queue_id).recover() for q in store.consume_queues]
        assert alone is first and store.consume_queue(first.topic, first.queue_id + 10_000).files == []
        assert results[: len(results) // 2] == results[len(results) // 2 :]
        assert sorted(reads) == sorted(set(reads)) and reads
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        assert store.consume_queue(first.topic, first.queue_id) == first and "consume_queues" not in store.__dict__


@pytest.mark.parametrize("version,name", STORES)
def test_a_small_file_read_gives_the_units_its_map_gives(version, name, monkeypatch, tmp_path):
    """``read_units`` reads a file below ``READ_BELOW`` and maps a larger one: the same units,
    whole, cut to a smaller configured size, and for a file shorter than the configured size."""
    with Store.open(store_path(version, name)) as store:
        files = [(path, queue.file_size) for queue in store.consume_queues for _, path in queue.files]
    short = tmp_path / "short"
    short.write_bytes(files[0][0].read_bytes()[: 7 * ENTRY_SIZE + 3])
    cases = [(path, size) for path, size in files] + [(path, size // 2) for path, size in files[:3]] + [(short, files[0][1])]
    assert all(size < cq.READ_BELOW for _, size in files)  # the fixtures' files are read
    read = [read_units(path, size).tolist() for path, size in cases]
    monkeypatch.setattr(cq, "READ_BELOW", 0)
    assert [read_units(path, size).tolist() for path, size in cases] == read
    assert len(read[-1]) == 7 and any(read)


def test_verify_reads_a_small_queue_file_as_it_reads_a_mapped_one(monkeypatch, tmp_path):
    """``verify``'s queue reads (``queue_reads``) of files read whole equal those of mapped ones:
    every fixture queue, in small chunks too, and a queue whose files end in a torn unit, in
    zeros, short of the configured size, and with a gap between them."""
    from mqtool.verify import consumequeue as vcq

    queues = []
    for version, name in STORES:
        with Store.open(store_path(version, name)) as store:
            queues += store.consume_queues
    first = queues[0].files[0][1].read_bytes()
    size = len(first)
    made = tmp_path / "consumequeue" / "T" / "0"
    made.mkdir(parents=True)
    (made / f"{0:020d}").write_bytes(first[: 5 * ENTRY_SIZE] + b"\x07" * 7)  # a torn unit after five
    (made / f"{size:020d}").write_bytes(first[: 9 * ENTRY_SIZE] + bytes(40))  # zeros after nine units
    (made / f"{3 * size:020d}").write_bytes(first)  # a file missing before it
    queues.append(ConsumeQueue("T", 0, made, size))

    def reads():
        return [[(type(r).__name__, *r) for r in vcq.queue_reads(q, chunk)] for q in queues for chunk in (vcq.CHUNK_UNITS, 3)]

    read = reads()
    monkeypatch.setattr(vcq, "READ_BELOW", 0)
    assert reads() == read
    kinds = [(r[0], len(r[3]) // ENTRY_SIZE if r[0] == "QueueUnits" else None) for r in read[-2]]
    assert kinds[:5] == [("QueueUnits", 5), ("QueueFileEnd", None), ("QueueUnits", 9), ("QueueFileEnd", None), ("QueueGap", None)]



@pytest.mark.parametrize("version,name", STORES)
def test_units_equal_is_the_schemas_reading_of_every_fixture_unit(version, name):
    """The compiled comparison a rebuild makes with the original files (``units_are``) holds each
    file's units, decoded by the schema (``ConsumeQueueEntryStruct``), equal, one field off not;
    past a file's end it reads zeros."""
    from mqtool.formats.consumequeue import ConsumeQueueEntryStruct
    from mqtool.store.consumequeue import units_are

    with Store.open(store_path(version, name)) as store:
        for queue in store.consume_queues:
            for _, path in queue.files:
                data = path.read_bytes()
                written = -(-len(data.rstrip(b"\0")) // ENTRY_SIZE) * ENTRY_SIZE  # the units up to the last written one
                units = [ConsumeQueueEntryStruct.parse(data[i : i + ENTRY_SIZE]) for i in range(0, written, ENTRY_SIZE)]
                phys = np.array([u.phys_offset for u in units] + [0], dtype=np.int64)
                size = np.array([u.size for u in units] + [0], dtype=np.int32)
                tags = np.array([u.tags_code for u in units] + [0], dtype=np.int64)
                with open(path, "rb", buffering=0) as f:
                    assert units_are(f, 0, phys, size, tags)  # the last unit: zeros after the written ones, or past the end
                    zero, one = np.zeros(1, np.int64), np.ones(1, np.int64)
                    assert units_are(f, len(data), zero, zero.astype(np.int32), zero) and not units_are(f, len(data), one, zero.astype(np.int32), zero)
                    for column in (phys, size, tags):
                        k = len(units) // 2
                        column[k] += 1
                        assert not units_are(f, 0, phys, size, tags)
                        assert units_are(f, (k + 1) * ENTRY_SIZE, phys[k + 1 :], size[k + 1 :], tags[k + 1 :])
                        column[k] -= 1
