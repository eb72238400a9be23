"""Issue #28: every finding says what it means, no option is silently ignored, no fact is stated
unchecked. Each test runs ``mqtool`` as a user does (a subprocess) on the real-broker fixtures and
failed before its fix."""

from __future__ import annotations

import json
import shutil

from conftest import copy_store, manifest, store_path
from mqtool.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_USAGE
from repair_support import mqtool

# ---- say what each finding means -------------------------------------------------------------------


def test_recover_calls_the_records_a_broker_overwrote_stale_not_lost():
    """rewrite-clean: a clean store whose 56 records after the logical end are history the broker
    cut back and wrote over before. Before: "DAMAGE ... throws away the 56 valid message(s)"."""
    stale = [r for r in manifest("4.9.7", "rewrite-clean")["stalePhase1Records"]["records"] if r["where"] == "beyondLogicalEnd"]
    shown = mqtool("recover", store_path("4.9.7", "rewrite-clean"), "--dry-run", env={"COLUMNS": "100"})
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "DAMAGE" not in shown.stderr + shown.stdout and "Lost by the cut" not in shown.stdout
    assert f"After the cut: {len(stale)} stale record(s)" in shown.stdout
    assert "stale records the broker overwrote (not lost now)" in " ".join(shown.stdout.split())
    doc = json.loads(mqtool("recover", store_path("4.9.7", "rewrite-clean"), "--dry-run", "-f", "json").stdout)
    lost = doc["lost"]
    assert lost["stale"] == lost["count"] == len(stale)
    assert [m["offset"] for m in lost["messages"]] == [r["commitLogOffset"] for r in stale]
    assert lost["stale_bytes"] == lost["bytes"] == sum(r["size"] for r in stale)


def test_recover_still_calls_a_cut_that_discards_new_messages_damage(tmp_path):
    """A flipped byte in the middle of a clean log: the records after it are newer than those
    kept, so the cut loses them and the note says DAMAGE (none of them is stale)."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    victim = manifest("4.9.7", "clean-small")["messages"][-40]
    size = manifest("4.9.7", "clean-small")["storeConfig"]["mappedFileSizeCommitLog"]
    seg = root / "commitlog" / f"{victim['commitLogOffset'] // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[victim["commitLogOffset"] % size + 4] ^= 0xFF  # the magic code
    seg.write_bytes(data)
    shown = mqtool("recover", root, "--dry-run", "-f", "json")
    lost = json.loads(shown.stdout)["lost"]
    assert lost["count"] == 39 and lost["stale"] == 0
    assert "DAMAGE" in shown.stderr and "throws away the 39 valid message(s)" in " ".join(shown.stderr.split())


def test_repair_without_yes_prints_the_plan_and_exits_0(tmp_path):
    """The normal first step. Before: "error: nothing changed: re-run with --yes", exit 4."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    shown = mqtool("repair", root)
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "error" not in shown.stderr and "apply it with --yes" in shown.stderr
    assert shown.stdout.startswith("Plan: repair")


def test_consumer_offsets_beyond_the_queue_are_not_lost_data(tmp_path):
    """config-real: committed offsets beyond max / below min. Before: "nothing can be repaired:
    verify reports 5 finding(s) of lost data", exit 1."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    shown = mqtool("repair", root, "-f", "json")
    assert shown.returncode == EXIT_OK, shown.stderr
    remaining = json.loads(shown.stdout)["remaining"]
    beyond = [e for e in remaining if e["kind"] == "consumer-offset-range" and "beyond the queue's max" in e["message"]]
    assert beyond and not any(e["lost_data"] for e in remaining)
    assert "lost data" not in shown.stderr.replace("not lost data", "")
    applied = mqtool("repair", root, "--yes", "--backup-dir", tmp_path / "bk")
    assert applied.returncode == EXIT_OK, applied.stderr  # nothing lost: exit 1 is for lost data only


def test_offsets_zero_on_a_queue_never_written_is_its_max():
    """4.9.2 config-real: delay levels 10, 13 and 15 were never used (offset 0, no queue). A broker
    reads a missing queue as [0, 0]. Before: "the topic or queue is no longer in the store"."""
    root = store_path("4.9.2", "config-real")
    assert not (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "9").exists()
    shown = mqtool("offsets", root, "-f", "json")
    rows = {r["delay_level"]: r for r in json.loads(shown.stdout) if r["kind"] == "delay"}
    for level in (10, 13, 15):
        assert (rows[level]["offset"], rows[level]["relation"], rows[level]["queue_max_offset"], rows[level]["lag_messages"]) == (0, "at_max", 0, 0)
    assert "no longer in the store" not in shown.stderr


def test_offsets_the_default_timer_offset_of_a_store_without_timer_messages(tmp_path):
    """A 5.x timer checkpoint at its default (lastTimerQueueOffset 0) on a store that never held a
    timer message (no rmq_sys_wheel_timer queue). Before: exit 1, "no longer in the store"."""
    root = copy_store("5.3.3", "clean-small", tmp_path)
    check = bytearray((store_path("5.3.3", "timer-small") / "config" / "timercheck").read_bytes())
    check[16:24] = bytes(8)  # TimerCheckpoint.lastTimerQueueOffset = 0, as a broker that never dispatched a timer message writes it
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "timercheck").write_bytes(check)
    shown = mqtool("offsets", root, "-f", "json")
    assert shown.returncode == EXIT_OK, shown.stderr
    (timer,) = [r for r in json.loads(shown.stdout) if r["kind"] == "timer"]
    assert (timer["topic"], timer["offset"], timer["relation"]) == ("rmq_sys_wheel_timer", 0, "at_max")
    assert "no longer in the store" not in shown.stderr


# ---- no option silently ignored ---------------------------------------------------------------------


def test_dump_body_in_a_table_shows_the_body_column():
    """Before: `dump STORE --body utf8` printed the same table as without it."""
    first = min(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    shown = mqtool("dump", store_path("4.9.7", "clean-small"), "--body", "sha256", "-n", "1", env={"COLUMNS": "100"})
    assert shown.returncode == EXIT_OK, shown.stderr
    assert f"body         | {first['bodySha256']}" in shown.stdout.splitlines()


def test_dump_decompress_without_body_is_a_usage_error():
    """Before: `dump STORE --decompress` printed the table as if it were not given."""
    shown = mqtool("dump", store_path("4.9.7", "clean-small"), "--decompress", "-n", "1")
    assert shown.returncode == EXIT_USAGE and shown.stdout == ""
    assert shown.stderr.strip() == "mqtool: error: --decompress inflates the bodies --body shows: give --body too (utf8, hex, base64 or sha256)"


def test_dump_consumequeue_follow_in_a_table_shows_the_followed_message():
    """Before: `dump consumequeue --follow` printed the entries alone in a table."""
    messages = {m["commitLogOffset"]: m for m in manifest("4.9.7", "clean-small")["messages"]}
    shown = mqtool("dump", "consumequeue", store_path("4.9.7", "clean-small") / "consumequeue" / "TopicTest" / "1", "--follow", "-n", "3", env={"COLUMNS": "200"})
    assert shown.returncode == EXIT_OK, shown.stderr
    header, _, *rows = shown.stdout.splitlines()
    assert header.split()[:6] == ["queue", "queue", "offset", "phys_offset", "size", "tags_code"] and "msg_id" in header and "stored" in header
    for row in rows:
        phys = int(row.split()[2])
        assert messages[phys]["msgId"] in row.split() and messages[phys]["topic"] == "TopicTest"


def test_dump_queue_kinds_on_a_store_without_that_folder(tmp_path):
    """Before: the store's parent was scanned as the queue folder ("batch consume queue files are
    1048576 bytes, not a multiple of 46"), or a store without consumequeue/ dumped nothing."""
    shown = mqtool("dump", "batchconsumequeue", store_path("4.9.7", "clean-small"))
    assert (shown.returncode, shown.stderr.strip()) == (EXIT_BAD_INPUT, f"mqtool: error: {store_path('4.9.7', 'clean-small').resolve()} has no batchconsumequeue/")
    root = copy_store("4.9.7", "clean-small", tmp_path)
    shutil.rmtree(root / "consumequeue")
    shown = mqtool("dump", "consumequeue", root)
    assert (shown.returncode, shown.stderr.strip()) == (EXIT_BAD_INPUT, f"mqtool: error: {root.resolve()} has no consumequeue/")
