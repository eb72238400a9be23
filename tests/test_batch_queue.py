"""Batch consume queues (``batchconsumequeue/``, reference §5.5): decoded, summarised and checked.

No real-broker fixture has one (the 5.x broker writes them only for topics created with
``queue.type=BatchCQ``), so each test turns a topic of the real 5.3.3 ``clean-small`` store into a
BatchCQ topic: its units are written from the manifest (the broker's own put results: offset,
size, consume queue tags code, store time, queue offset) in the unit layout of the schema, and its
plain consume queue is removed, as on a broker where the topic is BatchCQ.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from conftest import manifest
from mqtool.cli import app
from mqtool.formats.consumequeue import BATCH_UNIT_SIZE, BatchConsumeQueueUnitStruct
from mqtool.formats.dispatch import batch_unit_span, java_parse_int
from mqtool.store import Store
from mqtool.store.batchconsumequeue import DEFAULT_FILE_SIZE
from mqtool.verify import Verification, VerifyOptions

TOPIC = "TopicTest"


def _units_by_queue() -> dict[int, list[dict]]:
    """The units the broker writes for TOPIC's records: one per dispatched record, batchSize 1."""
    queues: dict[int, list[dict]] = {}
    for msg in sorted(manifest("5.3.3", "clean-small")["messages"], key=lambda m: m["commitLogOffset"]):
        if msg["topic"] == TOPIC and msg["dispatched"]:
            queues.setdefault(msg["queueId"], []).append(dict(
                phys_offset=msg["commitLogOffset"], size=msg["size"], tags_code=msg["cqTagsCode"], store_time=msg["storeTimestamp"],
                msg_base_offset=msg["queueOffset"], batch_size=1, compacted_offset=-1, reserved=0))
    return queues


def _write_queue(root, queue_id: int, units: list[dict]) -> None:
    directory = root / "batchconsumequeue" / TOPIC / str(queue_id)
    directory.mkdir(parents=True, exist_ok=True)
    with open(directory / f"{0:020d}", "wb") as f:
        for unit in units:
            f.write(BatchConsumeQueueUnitStruct.build(unit))
        f.truncate(DEFAULT_FILE_SIZE)  # preallocated as the broker maps it (sparse here)


@pytest.fixture
def batch_store(store_copy):
    root = store_copy("5.3.3", "clean-small")
    for queue_id, units in _units_by_queue().items():
        _write_queue(root, queue_id, units)
    shutil.rmtree(root / "consumequeue" / TOPIC)
    return root


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def _findings(root):
    with Store.open(root) as store:
        run = Verification(store, VerifyOptions(checks=("cq",)))
        return list(run.findings()), run.summary


def _unit_file(root, queue_id: int):
    return root / "batchconsumequeue" / TOPIC / str(queue_id) / f"{0:020d}"


def test_dump_decodes_every_unit_as_written(batch_store):
    """Every unit up to the last non-zero one (the rest of the file is preallocated zeros)."""
    result = _run("dump", "batchconsumequeue", batch_store, "--format", "jsonl")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    expected = []
    for queue_id, units in sorted(_units_by_queue().items()):
        for i, unit in enumerate(units):
            expected.append({"topic": TOPIC, "queue_id": queue_id, "position": i * BATCH_UNIT_SIZE, **unit, "valid": True})
    assert len(rows) == len(expected)
    assert rows == expected
    data = bytearray(_unit_file(batch_store, 0).read_bytes())
    data[BATCH_UNIT_SIZE : BATCH_UNIT_SIZE * 2] = bytes(BATCH_UNIT_SIZE)  # an invalid unit inside the data is shown
    _unit_file(batch_store, 0).write_bytes(bytes(data))
    rows = [json.loads(line) for line in _run("dump", "batchconsumequeue", batch_store, "--queue", 0, "--format", "jsonl").stdout.splitlines()]
    assert [r["valid"] for r in rows] == [True, False] + [True] * (len(_units_by_queue()[0]) - 2)


def test_dump_scopes_to_a_queue_folder_and_limit(batch_store):
    queue_id, units = sorted(_units_by_queue().items())[1]
    result = _run("dump", "batchconsumequeue", batch_store / "batchconsumequeue" / TOPIC / str(queue_id), "--format", "jsonl", "--limit", len(units))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["phys_offset"] for r in rows] == [u["phys_offset"] for u in units]
    assert {r["queue_id"] for r in rows} == {queue_id}
    assert _run("dump", "batchconsumequeue", batch_store, "--follow").exit_code == 2  # an option it does not use


def test_info_counts_each_queue_as_the_broker_loads_it(batch_store):
    result = _run("info", batch_store, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    got = {q["queue_id"]: q for q in doc["batch_queues"]}
    for queue_id, units in _units_by_queue().items():
        first, last = units[0]["msg_base_offset"], units[-1]["msg_base_offset"] + 1
        assert got[queue_id] == {"topic": TOPIC, "queue_id": queue_id, "units": len(units), "min_offset": first, "max_offset": last,
                                 "messages": last - first, "files": 1}
    assert not any("batchconsumequeue" in n for n in doc["notes"])  # read, so not named as unchecked


def test_verify_passes_a_sound_batch_queue(batch_store):
    findings, summary = _findings(batch_store)
    assert findings == []
    total = sum(len(u) for u in _units_by_queue().values())
    assert f"{len(_units_by_queue())} batch consume queue(s) checked against the records, {total} units" in summary.notes


def test_verify_finds_damaged_batch_units(batch_store):
    queues = _units_by_queue()
    (wrong_q, wrong), (cut_q, cut), (last_q, last) = list(sorted(queues.items()))[:3]
    data = bytearray(_unit_file(batch_store, wrong_q).read_bytes()[:BATCH_UNIT_SIZE * len(wrong)])
    data[BATCH_UNIT_SIZE * 2 + 8 : BATCH_UNIT_SIZE * 2 + 12] = (999).to_bytes(4, "big")  # unit 2: wrong size
    data[BATCH_UNIT_SIZE * 3 + 28 : BATCH_UNIT_SIZE * 3 + 36] = (10**6).to_bytes(8, "big")  # unit 3: wrong msgBaseOffset
    with open(_unit_file(batch_store, wrong_q), "r+b") as f:  # in place: the file keeps its length
        f.write(bytes(data))
    cut_file = bytearray(_unit_file(batch_store, cut_q).read_bytes())
    cut_file[BATCH_UNIT_SIZE * 4 : BATCH_UNIT_SIZE * 5] = bytes(BATCH_UNIT_SIZE)  # unit 4 invalid: the broker stops there
    _unit_file(batch_store, cut_q).write_bytes(bytes(cut_file))
    end = manifest("5.3.3", "clean-small")["commitLogMaxOffset"]
    beyond = dict(last[-1], phys_offset=end, msg_base_offset=last[-1]["msg_base_offset"] + 1)
    _unit_file(batch_store, last_q).unlink()
    _write_queue(batch_store, last_q, last[:-1] + [beyond])  # the last record lost its unit; one unit past the end

    findings, _ = _findings(batch_store)
    by_kind = {}
    for f in findings:
        by_kind.setdefault(f.kind, []).append(f)
    assert sorted(by_kind) == ["cq-entry-beyond-end", "cq-entry-mismatch", "cq-entry-missing", "cq-invalid-unit"]
    assert [(f.offset, f.details["field"], f.expected, f.found) for f in by_kind["cq-entry-mismatch"]] == [
        (wrong[2]["phys_offset"], "size", wrong[2]["size"], 999), (wrong[3]["phys_offset"], "msg_base_offset", wrong[3]["msg_base_offset"], 10**6)]
    [invalid] = by_kind["cq-invalid-unit"]
    assert (invalid.details["queue_id"], invalid.details["unit_position"], invalid.details["valid_after"]) == (cut_q, 4 * BATCH_UNIT_SIZE, len(cut) - 5)
    missing = {(f.details["queue_id"], f.offset, f.details["count"]) for f in by_kind["cq-entry-missing"]}
    assert missing == {(cut_q, cut[4]["phys_offset"], len(cut) - 4), (last_q, last[-1]["phys_offset"], 1)}
    [past] = by_kind["cq-entry-beyond-end"]
    assert (past.details["queue_id"], past.offset, past.severity.value) == (last_q, end, "warning")


def test_a_batch_queue_file_of_another_length_is_found(batch_store):
    """5.x ``MappedFileQueue.load`` refuses a batch consume queue file of another length than the
    others (the broker does not start), as it does a consume queue file: ``cq-file-size``."""
    queue_id = min(_units_by_queue())
    path = _unit_file(batch_store, queue_id)
    os.truncate(path, 5000)
    findings, _ = _findings(batch_store)
    [wrong] = [f for f in findings if f.kind == "cq-file-size"]
    assert (wrong.file, wrong.expected, wrong.found, wrong.details["queue_kind"]) == (str(path.relative_to(batch_store)), DEFAULT_FILE_SIZE, 5000, "batch")
    assert wrong.severity.value == "error"


def test_inner_batch_span_follows_the_broker_dispatch():
    assert batch_unit_span({"INNER_BASE": "40", "INNER_NUM": "8"}, 40) == (40, 8)
    assert batch_unit_span({"INNER_NUM": "8"}, 17) == (17, 1)  # both are needed (checkMessageAndReturnSize)
    with pytest.raises(ValueError):
        batch_unit_span({"INNER_BASE": "40", "INNER_NUM": "40000"}, 40)  # Short.parseShort overflows
    assert java_parse_int("9223372036854775807", 64) == 2**63 - 1
    with pytest.raises(ValueError):
        java_parse_int("2147483648")


def test_a_batch_queue_directory_plus_1_is_never_read_its_queue_1_is_empty(batch_store):
    """``batchconsumequeue/TopicTest/1`` renamed ``+1``: ``ConsumeQueueStore.load`` takes queue id 1 from the name
    (``Integer.parseInt``) but its ``BatchConsumeQueue`` reads and writes ``TopicTest/1`` (5.0.0-5.3.3), so the queue is empty.
    Before, the store model read ``+1`` as queue 1 and verify found nothing; now ``+1`` is a ``cq-directory-unread`` warning
    and queue 1's records have no unit, in ``TopicTest/1``."""
    (batch_store / "batchconsumequeue" / TOPIC / "1").rename(batch_store / "batchconsumequeue" / TOPIC / "+1")
    units = _units_by_queue()[1]
    with Store.open(batch_store) as store:
        assert [(q.queue_id, q.directory.name, q.files) for q in store.batch_consume_queues if q.queue_id == 1] == [(1, "1", [])]
    findings, _ = _findings(batch_store)
    assert [(f.kind, f.file, f.offset, f.expected, f.found) for f in findings] == [
        ("cq-directory-unread", f"batchconsumequeue/{TOPIC}/+1", None, f"batchconsumequeue/{TOPIC}/1", "+1"),
        ("cq-entry-missing", f"batchconsumequeue/{TOPIC}/1", units[0]["phys_offset"], None, None)]
    assert findings[0].details == {"topic": TOPIC, "queue_id": 1, "read_from": f"batchconsumequeue/{TOPIC}/1", "files": 1, "queue_kind": "batch"}
    assert findings[0].message.startswith("a batch consume queue directory the broker never reads: it takes queue id 1 of TopicTest")
    assert findings[1].details["count"] == len(units)


@pytest.mark.parametrize("checks", [("cq",), None], ids=["only-cq", "full"])
def test_units_past_damage_before_the_recovery_start_are_held_against_the_log_the_broker_serves(batch_store, checks):
    """The first commit log segment zeroed (4.8 MiB of log: the broker's normal recovery scans from the last segments and never
    reads it, so it serves every record after it). Before, the batch units were held against a walk of their own that ended at
    the zeros: every unit was ``cq-entry-beyond-end`` past "the logical end 0" (718 false warnings). The check now reads the cq
    check's walk (``Verification._riders``), which reads on where the broker does: the units of records in the zeros point where
    no record starts (``cq-entry-dangling``), every other unit matches its record."""
    segment = batch_store / "commitlog" / f"{0:020d}"
    with open(segment, "r+b") as f:
        f.write(bytes(segment.stat().st_size))
    cut = segment.stat().st_size
    units = {q: u for q, u in _units_by_queue().items()}
    with Store.open(batch_store) as store:
        run = Verification(store, VerifyOptions(checks=checks) if checks else VerifyOptions())
        findings = [f for f in run.findings() if (f.details or {}).get("queue_kind") == "batch"]
        summary = run.summary
    assert summary.logical_end == manifest("5.3.3", "clean-small")["commitLogMaxOffset"]
    lost = sorted((q, u["phys_offset"]) for q, us in units.items() for u in us if u["phys_offset"] < cut)
    assert 0 < len(lost) < sum(len(u) for u in units.values())
    assert sorted((f.kind, f.details["queue_id"], f.offset) for f in findings) == [("cq-entry-dangling", q, offset) for q, offset in lost]
    assert {f.severity.value for f in findings} == {"error"}
    assert f"{len(units)} batch consume queue(s) checked against the records, {sum(len(u) for u in units.values())} units" in summary.notes
