"""``repair`` of a commit log segment before the last cut short (docs/recovery.md): padded with zeros only,
it would end the broker's recovery there and the broker would delete every later segment; an end-of-file
blank where the record the cut crosses starts lets every era's recovery and reput go on into the next
segment (rules §1.12). The plan names what is lost, the consume queue entries that pointed there become
filler units, the store verifies sound, and ``restore`` gives the cut file back."""

from __future__ import annotations

import json

import pytest
from conftest import copy_store, manifest, recovered
from damage_support import early_deletions
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.errors import EXIT_OK
from mqtool.formats import commitlog as clfmt
from mqtool.formats import consumequeue as cqfmt
from mqtool.formats.commitlog import CommitLogRecord
from mqtool.recovery.planners import plan_truncate_dirty
from mqtool.store import Store
from mqtool.store.lookup import pickup_store_timestamp
from repair_support import every_kill_point, queue_entries, tree

runner = CliRunner()
SEGMENT = 1048576  # the fixtures' commit log segment size


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def cut_segment(root, messages: list[dict], base: int, at_boundary: bool) -> tuple[int, int, bytes]:
    """Cut the segment at ``base`` inside (or at the start of) the record in the middle of it:
    (where that record starts, the cut, the segment's bytes before)."""
    inside = [m for m in messages if base <= m["commitLogOffset"] < base + SEGMENT]
    crossed = inside[len(inside) // 2]
    blank = crossed["commitLogOffset"] - base
    cut = blank if at_boundary else blank + crossed["size"] // 2
    segment = root / "commitlog" / f"{base:020d}"
    original = segment.read_bytes()
    segment.write_bytes(original[:cut])
    return blank, cut, original


def repaired(root, tmp_path, version: str) -> dict:
    """The plan, then ``repair --yes``: the plan's document."""
    given = ("--broker-version", version)
    shown = run("repair", root, "--format", "json", *given)
    assert shown.exit_code == EXIT_OK, shown.stderr
    applied = run("repair", root, "--yes", "--backup-dir", tmp_path / "backup", *given)
    assert applied.exit_code == EXIT_OK and "Traceback" not in applied.stderr, applied.stderr
    assert run("verify", root, *given).exit_code == EXIT_OK
    return json.loads(shown.stdout)


def assert_blank_at(root, base: int, blank: int, original: bytes) -> None:
    data = (root / "commitlog" / f"{base:020d}").read_bytes()
    assert len(data) == SEGMENT and data[:blank] == original[:blank]
    assert data[blank : blank + 8] == clfmt.encode_blank(SEGMENT - blank) and not any(data[blank + 8 :])


@pytest.mark.parametrize("where", ("mid-record", "record-boundary"))
@pytest.mark.parametrize("version", ("3.2.6", "4.4.0", "4.9.7", "5.3.3"))
def test_a_segment_cut_before_the_last_keeps_every_later_segment(version, where, tmp_path):
    """Clean stores: normal recovery scans the last three segments, the cut one among them."""
    root = copy_store(version, "clean-small", tmp_path)
    messages = manifest(version, "clean-small")["messages"]
    base = 3 * SEGMENT
    blank, cut, original = cut_segment(root, messages, base, where == "record-boundary")
    damaged = tree(root)
    lost = [m for m in messages if base + blank <= m["commitLogOffset"] < base + SEGMENT and m["dispatchToConsumeQueue"]]

    plan = repaired(root, tmp_path, version)
    steps = {s["step"]: s for s in plan["steps"]}
    assert "rebuild-cq" not in steps and plan["remaining"] == []  # the entries the fixes fill are no finding left
    assert "end-of-file blank" in steps["resize-segment"]["why"] and f"{len(lost)} consume queue entries pointed there" in steps["resize-segment"]["why"]
    assert (f"lost: bytes {blank}..{cut}" in steps["resize-segment"]["why"]) == (where == "mid-record")
    queue = min((m["topic"], m["queueId"]) for m in lost)  # the queues are named in order
    offsets = sorted(m["queueOffset"] for m in lost if (m["topic"], m["queueId"]) == queue)
    named = f"{queue[0]}/{queue[1]} queue offset" + (f"s {offsets[0]}-{offsets[-1]}" if len(offsets) > 1 else f" {offsets[0]}") + f" ({len(offsets)})"
    assert steps["drop-queue-entries"]["why"].startswith(f"{len(lost)} consume queue entries pointed into the bytes") and named in steps["drop-queue-entries"]["why"]
    assert plan["files"]["actions"][0]["op"] == "pad-blank" and plan["files"]["actions"][0]["start"] == blank

    assert_blank_at(root, base, blank, original)
    with Store.open(root, version=version) as store:
        assert plan_truncate_dirty(store).commitlog.valid_end == max(m["commitLogOffset"] + m["size"] for m in messages)
        for m in messages:
            offset = m["commitLogOffset"]
            if base + blank <= offset < base + SEGMENT:
                continue
            record = store.commitlog.read_record(offset)
            assert isinstance(record, CommitLogRecord) and record.queue_offset == m["queueOffset"], offset
            if m["dispatchToConsumeQueue"]:
                (entry,) = queue_entries(store, m["topic"], m["queueId"], m["queueOffset"], m["queueOffset"] + 1)
                assert entry[1:3] == (offset, m["size"]), m["seq"]
        kept = {(m["topic"], m["queueId"]): m["queueOffset"] for m in messages if m["dispatchToConsumeQueue"] and m not in lost}
        tail = [m for m in lost if m["queueOffset"] > kept.get((m["topic"], m["queueId"]), -1)]
        for m in lost:  # a filler where a later entry keeps its queue offset; the queue's last ones cut
            queue = store.consume_queue(m["topic"], m["queueId"])
            if m in tail:
                assert queue.recover().max_offset <= m["queueOffset"], m["seq"]
            else:
                assert queue.read_entry(m["queueOffset"]).is_filler, m["seq"]
        assert tail and len(tail) < len(lost)  # both happen in every fixture
        for topic, queue_id in {(m["topic"], m["queueId"]) for m in lost}:  # never a filler as a queue's last unit
            queue = store.consume_queue(topic, queue_id)
            end = queue.recover().max_offset
            assert end == 0 or not queue.read_entry(end - 1).is_filler, (topic, queue_id)

    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert tree(root) == damaged and (root / "commitlog" / f"{base:020d}").read_bytes() == original[:cut]


@pytest.mark.parametrize("version", ("4.0.0", "5.3.3"))
def test_a_crashed_store_with_its_first_segment_cut_recovers_the_later_ones_as_the_broker_did(version, tmp_path):
    """Abnormal recovery: the broker's recovered view of the records after the cut segment is kept."""
    root = copy_store(version, "crashed-small", tmp_path)
    messages = manifest(version, "crashed-small")["messages"]
    blank, _, original = cut_segment(root, messages, 0, False)
    damaged = tree(root)
    repaired(root, tmp_path, version)
    assert_blank_at(root, 0, blank, original)
    rec = recovered(version, "crashed-small")
    with Store.open(root, version=version) as store:
        assert plan_truncate_dirty(store).commitlog.valid_end == rec["commitLog"]["maxOffset"]
        for q in rec["queues"]:
            kept = [(e["queueOffset"], e["cq"]["phyOffset"], e["cq"]["size"]) for e in q["entries"] if not blank <= e["cq"]["phyOffset"] < SEGMENT]
            found = {e[0]: e[1:3] for e in queue_entries(store, q["topic"], q["queueId"], 0, 1 << 62)}
            assert [(o, *found.get(o, ())) for o, _, _ in kept] == kept, (q["topic"], q["queueId"])
            # a lost record's entry is a filler, or absent past the queue's end (the broker's recovery had dispatched it)
            assert all(found.get(e["queueOffset"], cqfmt.FILLER[:2]) == cqfmt.FILLER[:2] for e in q["entries"] if blank <= e["cq"]["phyOffset"] < SEGMENT)
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert tree(root) == damaged


def test_the_repair_plan_table_names_the_loss(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    messages = manifest("4.9.7", "clean-small")["messages"]
    blank, cut, _ = cut_segment(root, messages, SEGMENT, False)
    lost = sum(SEGMENT + blank <= m["commitLogOffset"] < 2 * SEGMENT and m["dispatchToConsumeQueue"] for m in messages)
    shown = runner.invoke(app, ["repair", str(root)], env={"COLUMNS": "400"})
    assert shown.exit_code == EXIT_OK
    assert f"cut inside the record at byte {blank}" in shown.stdout and f"lost: bytes {blank}..{cut}" in shown.stdout
    assert "drop-queue-entries" in shown.stdout and f"{lost} consume queue entries pointed into the bytes" in shown.stdout


def test_the_blank_and_the_fillers_survive_a_kill_at_every_point(tmp_path, monkeypatch):
    """The file fixes killed at each durability point, then finished (as the same command again does) or
    undone: the same bytes as an uninterrupted apply, or the cut store back."""
    from mqtool.apply import apply_plan
    from mqtool.recovery.repair import plan_file_fixes

    messages = manifest("5.3.3", "clean-small")["messages"]

    def cut_copy(name: str):
        root = copy_store("5.3.3", "clean-small", tmp_path / name)
        cut_segment(root, messages, 2 * SEGMENT, False)
        return root

    def plan_of(root):
        plan = plan_file_fixes(root)[1]
        assert {a.op for a in plan.actions} == {"pad-blank", "fill-units", "zero-range"}  # fillers, and the queues' last entries cut
        return plan

    root = cut_copy("whole")
    damaged = tree(root)
    apply_plan(plan_of(root), tmp_path / "whole-backup")
    assert every_kill_point(monkeypatch, tmp_path, cut_copy, plan_of, damaged, tree(root)) > 4


QUEUE_FILE_UNITS = 4  # consume queue files of 4 units: lost entries end queue files in every queue


def recut_queue_files(root, units: int) -> None:
    """Every consume queue's files re-cut into files of ``units`` units (as a broker with
    ``mappedFileSizeConsumeQueue`` = ``units`` x 20 rolls them): the same units at the same queue offsets."""
    size = units * cqfmt.ENTRY_SIZE
    for directory in (root / "consumequeue").glob("*/*"):
        files = sorted(directory.iterdir(), key=lambda p: int(p.name))
        first, data = int(files[0].name), b"".join(p.read_bytes() for p in files)
        for path in files:
            path.unlink()
        used = -(-len(data.rstrip(b"\0")) // size) * size or size
        for pos in range(0, used, size):
            (directory / f"{first + pos:020d}").write_bytes(data[pos : pos + size].ljust(size, b"\0"))


def expired_queue_files(queue, min_offset: int) -> list:
    """``MappedFileQueue.deleteExpiredFileByOffset(min_offset, 20)``: from the first, every file but the last
    whose last unit's offset is below the commit log's min offset is destroyed, up to the first that is not."""
    gone = []
    for base, path in queue.files[:-1]:
        if queue.read_entry((base + queue.file_size) // cqfmt.ENTRY_SIZE - 1).phys_offset >= min_offset:
            break
        gone.append(path)
    return gone


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3"))
def test_a_filler_ending_a_queue_file_leaves_the_file_to_the_broker_while_its_messages_are_in_the_log(version, tmp_path):
    """The fillers sit at the cut segment's base: once the log's min offset reaches that base, the broker's clean-up
    deletes no queue file that ends with one and holds messages still in the log (at offset 0 it would)."""
    root = copy_store(version, "clean-small", tmp_path)
    recut_queue_files(root, QUEUE_FILE_UNITS)
    messages = manifest(version, "clean-small")["messages"]
    base = 2 * SEGMENT
    blank, _, _ = cut_segment(root, messages, base, False)
    damaged = tree(root)
    lost = [m for m in messages if base + blank <= m["commitLogOffset"] < base + SEGMENT and m["dispatchToConsumeQueue"]]

    plan = repaired(root, tmp_path, version)
    assert f"each is replaced by a filler unit ({base}, 2147483647, 0)" in {s["step"]: s for s in plan["steps"]}["drop-queue-entries"]["why"]
    with Store.open(root, version=version) as store:
        ends = []  # the lost entries that end a queue file before the queue's last
        for m in lost:
            queue = store.consume_queue(m["topic"], m["queueId"])
            if m["queueOffset"] + 1 < queue.recover().max_offset:
                entry = queue.read_entry(m["queueOffset"])
                assert entry[1:] == (base, cqfmt.FILLER_SIZE, 0) and entry.is_filler, m["seq"]
                if (m["queueOffset"] + 1) % QUEUE_FILE_UNITS == 0:
                    ends.append(m)
        assert ends
        assert pickup_store_timestamp(store, base, cqfmt.FILLER_SIZE) == -1  # getMessage(base, 2147483647) maps nothing: no store time
        held = []  # queue files ending with a filler that hold messages still in the log
        for queue in store.consume_queues:  # the segments before the cut one expired
            gone = expired_queue_files(queue, base)
            for _, path in queue.files[:-1]:
                phys, size, tags = (queue.units(path)[f] for f in ("phys_offset", "size", "tags_code"))
                live = (phys >= base) & ~cqfmt.is_filler(phys, size, tags)
                if live.any():
                    assert path not in gone, path
                    held += [path] if cqfmt.is_filler(phys[-1], size[-1], tags[-1]) else []
        assert held
    assert early_deletions(root) == []  # the damage runs' oracle: nor at any later min offset

    m = ends[0]
    shown = run("dump", "consumequeue", root / "consumequeue" / m["topic"] / str(m["queueId"]), "--follow", "-f", "jsonl",
                "--from-offset", m["queueOffset"], "--limit", 1)
    (row,) = [json.loads(line) for line in shown.stdout.splitlines()]
    assert (row["phys_offset"], row["filler"], "message" in row) == (base, True, False)
    shown = run("query", "offset", root, m["topic"], m["queueId"], m["queueOffset"], "-f", "json", "--broker-version", version)
    (row,) = json.loads(shown.stdout)
    assert (row["cq_phys_offset"], row["status"]) == (base, "NO_MESSAGE_IN_QUEUE")

    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert tree(root) == damaged
