"""Issue #28: every finding says what it means, no option is silently ignored, no fact is stated
unchecked. Each test runs ``mqtool``'s command line (``repair_support.cli``: a user's exit code, stdout and
stderr; a real process and terminal where that is the point) on the real-broker fixtures and failed before its fix."""

from __future__ import annotations

import json
import os
import shutil

from conftest import copy_store, manifest, store_path
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE
from repair_support import cli, tree

# ---- say what each finding means -------------------------------------------------------------------


def test_recover_calls_the_records_a_broker_overwrote_stale_not_lost(tmp_path):
    """rewrite-clean: a clean store whose 56 records after the logical end are history the broker
    cut back and wrote over before. Before: "DAMAGE ... throws away the 56 valid message(s)"."""
    stale = [r for r in manifest("4.9.7", "rewrite-clean")["stalePhase1Records"]["records"] if r["where"] == "beyondLogicalEnd"]
    store = copy_store("4.9.7", "rewrite-clean", tmp_path / "store")  # a plan looks for a live broker: another test may hold the fixture open
    shown = cli("recover", store, "--dry-run", env={"COLUMNS": "100"})
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "DAMAGE" not in shown.stderr + shown.stdout and "Lost by the cut" not in shown.stdout
    assert f"After the cut: {len(stale)} stale record(s)" in shown.stdout
    assert "stale records the broker overwrote (not lost now)" in " ".join(shown.stdout.split())
    doc = json.loads(cli("recover", store, "--dry-run", "-f", "json").stdout)
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
    shown = cli("recover", root, "--dry-run", "-f", "json")
    lost = json.loads(shown.stdout)["lost"]
    assert lost["count"] == 39 and lost["stale"] == 0
    assert "DAMAGE" in shown.stderr and "throws away the 39 valid message(s)" in " ".join(shown.stderr.split())


def test_repair_without_yes_prints_the_plan_and_exits_0(tmp_path):
    """The normal first step. Before: "error: nothing changed: re-run with --yes", exit 4."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    shown = cli("repair", root)
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "error" not in shown.stderr and f"apply it with: mqtool repair {root} --yes" in shown.stderr
    assert shown.stdout.startswith("Plan: repair")


def test_consumer_offsets_beyond_the_queue_are_not_lost_data(tmp_path):
    """config-real: committed offsets beyond max / below min. Before: "nothing can be repaired:
    verify reports 5 finding(s) of lost data", exit 1."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    shown = cli("repair", root, "-f", "json")
    assert shown.returncode == EXIT_OK, shown.stderr
    remaining = json.loads(shown.stdout)["remaining"]
    beyond = [e for e in remaining if e["kind"] == "consumer-offset-range" and "beyond the queue's max" in e["message"]]
    assert beyond and not any(e["lost_data"] for e in remaining)
    assert "lost data" not in shown.stderr.replace("not lost data", "")
    applied = cli("repair", root, "--yes", "--backup-dir", tmp_path / "bk")
    assert applied.returncode == EXIT_OK, applied.stderr  # nothing lost: exit 1 is for lost data only


def test_offsets_zero_on_a_queue_never_written_is_its_max():
    """4.9.2 config-real: delay levels 10, 13 and 15 were never used (offset 0, no queue). A broker
    reads a missing queue as [0, 0]. Before: "the topic or queue is no longer in the store"."""
    root = store_path("4.9.2", "config-real")
    assert not (root / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "9").exists()
    shown = cli("offsets", root, "-f", "json")
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
    shown = cli("offsets", root, "-f", "json")
    assert shown.returncode == EXIT_OK, shown.stderr
    (timer,) = [r for r in json.loads(shown.stdout) if r["kind"] == "timer"]
    assert (timer["topic"], timer["offset"], timer["relation"]) == ("rmq_sys_wheel_timer", 0, "at_max")
    assert "no longer in the store" not in shown.stderr


# ---- no option silently ignored ---------------------------------------------------------------------


def test_dump_body_in_a_table_shows_the_body_column():
    """Before: `dump STORE --body utf8` printed the same table as without it."""
    first = min(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    shown = cli("dump", store_path("4.9.7", "clean-small"), "--body", "sha256", "-n", "1", env={"COLUMNS": "100"})
    assert shown.returncode == EXIT_OK, shown.stderr
    assert f"body         | {first['bodySha256']}" in shown.stdout.splitlines()


def test_dump_decompress_without_body_is_a_usage_error():
    """Before: `dump STORE --decompress` printed the table as if it were not given."""
    shown = cli("dump", store_path("4.9.7", "clean-small"), "--decompress", "-n", "1")
    assert shown.returncode == EXIT_USAGE and shown.stdout == ""
    assert shown.stderr.strip() == "mqtool: error: --decompress inflates the bodies --body shows: give --body too (utf8, hex, base64 or sha256)"


def test_dump_no_index_without_key_is_a_usage_error():
    """Before: `dump STORE --no-index` without --key or --uniq-key dumped as if it were not given."""
    shown = cli("dump", store_path("4.9.7", "clean-small"), "--no-index", "--topic", "TopicTest", "-n", "1")
    assert (shown.returncode, shown.stdout) == (EXIT_USAGE, "")
    assert shown.stderr.strip() == "mqtool: error: --no-index turns off the index lookup of --key/--uniq-key: give one of them too"
    shown = cli("dump", store_path("4.9.7", "clean-small"), "--no-index", "--topic", "TopicTest", "--key", "nosuchkey")
    assert shown.returncode == EXIT_OK, shown.stderr


def test_dump_consumequeue_follow_in_a_table_shows_the_followed_message():
    """Before: `dump consumequeue --follow` printed the entries alone in a table."""
    messages = {m["commitLogOffset"]: m for m in manifest("4.9.7", "clean-small")["messages"]}
    shown = cli("dump", "consumequeue", store_path("4.9.7", "clean-small") / "consumequeue" / "TopicTest" / "1", "--follow", "-n", "3", env={"COLUMNS": "200"})
    assert shown.returncode == EXIT_OK, shown.stderr
    header, _, *rows = shown.stdout.splitlines()
    headings = [h.strip() for h in header.split("  ") if h.strip()]
    assert headings[:5] == ["queue", "queue offset", "phys offset", "size", "tags code"] and "msg id" in headings and "stored" in headings
    for row in rows:
        phys = int(row.split()[2])
        assert messages[phys]["msgId"] in row.split() and messages[phys]["topic"] == "TopicTest"


def test_dump_queue_kinds_on_a_store_without_that_folder(tmp_path):
    """Before: the store's parent was scanned as the queue folder ("batch consume queue files are
    1048576 bytes, not a multiple of 46"), or a store without consumequeue/ dumped nothing."""
    shown = cli("dump", "batchconsumequeue", store_path("4.9.7", "clean-small"))
    assert (shown.returncode, shown.stderr.strip()) == (EXIT_BAD_INPUT, f"mqtool: error: {store_path('4.9.7', 'clean-small').resolve()} has no batchconsumequeue/")
    root = copy_store("4.9.7", "clean-small", tmp_path)
    shutil.rmtree(root / "consumequeue")
    shown = cli("dump", "consumequeue", root)
    assert (shown.returncode, shown.stderr.strip()) == (EXIT_BAD_INPUT, f"mqtool: error: {root.resolve()} has no consumequeue/")


def test_contradictory_options_are_usage_errors(tmp_path):
    """Before: `recover --yes --dry-run` printed the plan (the --yes ignored), `--yes --plan-out`
    saved it, and `--abnormal --normal` ran the last one given."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    before = tree(root)
    cases = {
        ("recover", root, "--yes", "--dry-run"): "--yes applies the plan and --dry-run changes nothing: give one of them",
        ("recover", root, "--yes", "--plan-out", tmp_path / "plan.json"): "--yes applies the plan and --plan-out changes nothing: give one of them",
        ("repair", root, "--yes", "--dry-run"): "--yes applies the plan and --dry-run changes nothing: give one of them",
        ("recover", root, "--abnormal", "--normal"): "--abnormal and --normal contradict each other: give one of them; see 'mqtool recover --help'",
    }
    for args, line in cases.items():
        shown = cli(*args)
        assert (shown.returncode, shown.stdout, shown.stderr.strip()) == (EXIT_USAGE, "", f"mqtool: error: {line}"), args
    assert tree(root) == before and not (tmp_path / "plan.json").exists()


def test_info_on_a_bare_commitlog_folder_does_not_claim_a_clean_shutdown():
    """crashed-small has an abort file; given its commitlog/ folder, info said "abort file: absent
    (last shutdown clean)" and "consumequeue/ MISSING"; then "path -" (the folder given is the path)."""
    folder = store_path("4.9.7", "crashed-small") / "commitlog"
    assert (folder.parent / "abort").exists()
    shown = cli("info", folder, env={"COLUMNS": "100"})
    assert shown.returncode == EXIT_OK, shown.stderr
    assert "last shutdown clean" not in shown.stdout and "MISSING" not in shown.stdout and "rebuild-cq" not in shown.stdout
    assert "not looked at   abort, lock, checkpoint, consumequeue, index, config" in shown.stdout
    assert f"path            {folder}\n" in shown.stdout
    doc = json.loads(cli("info", folder, "-f", "json").stdout)
    assert doc["not_looked_at"] == ["abort", "lock", "checkpoint", "consumequeue", "index", "config"]


def test_verify_reports_a_missing_timer_wheel(tmp_path):
    """timer-small without its timerwheel: the broker starts an empty wheel and never delivers the
    pending timer messages. Before: no finding, "the store is sound" for the timer check."""
    undelivered = [m for m in manifest("5.3.3", "timer-small")["messages"] if m.get("timer") and not m["timer"].get("delivered")]
    assert not [f for f in json.loads(cli("verify", store_path("5.3.3", "timer-small"), "--only", "timer", "-f", "json").stdout)["findings"] if f["kind"] == "timer-wheel"]
    root = copy_store("5.3.3", "timer-small", tmp_path)
    (root / "timerwheel").unlink()
    shown = cli("verify", root, "--only", "timer", "-f", "json")
    assert shown.returncode == EXIT_FINDINGS, shown.stderr
    (wheel,) = [f for f in json.loads(shown.stdout)["findings"] if f["kind"] == "timer-wheel"]
    assert (wheel["severity"], wheel["file"]) == ("error", "timerwheel")
    assert 0 < wheel["details"]["pending"] <= len(undelivered)


def test_query_key_names_a_topic_the_store_does_not_hold():
    """Before: `query key STORE NoSuchTopic k` printed nothing and exited 1."""
    shown = cli("query", "key", store_path("4.9.7", "clean-small"), "NoSuchTopic", "k")
    assert (shown.returncode, shown.stdout, shown.stderr.strip()) == (EXIT_FINDINGS, "", "mqtool: topic NoSuchTopic is not in the store (no consumequeue/NoSuchTopic/)")
    shown = cli("query", "key", store_path("4.9.7", "clean-small"), "TopicTest", "no-such-key")
    assert (shown.returncode, shown.stderr.strip()) == (EXIT_FINDINGS, "mqtool: no message of topic TopicTest has KEYS no-such-key")


def test_epoch_seconds_are_refused_with_a_hint():
    """Before: `--since 1795237465` was read as milliseconds (1970-01-21) and matched everything."""
    store = store_path("4.9.7", "clean-small")
    newest = max(m["storeTimestamp"] for m in manifest("4.9.7", "clean-small")["messages"])
    seconds = str(newest // 1000)
    for args in (("dump", store, "--since", seconds), ("query", "time", store, "TopicTest", "0", seconds)):
        shown = cli(*args)
        assert shown.returncode == EXIT_USAGE and shown.stdout == ""
        assert "looks like epoch seconds (as milliseconds it is 1970-" in shown.stderr and f"give {seconds}000 or an ISO-8601 time" in shown.stderr
    assert cli("dump", store, "--since", seconds + "000", "-n", "1").returncode == EXIT_OK


def test_no_color_turns_off_bold_on_a_terminal():
    """NO_COLOR on a terminal: no escape sequence at all. Before: verify's finding kinds and
    summary were still bold (rich's no_color keeps styles)."""
    import pty
    import subprocess
    import sys

    from repair_support import ROOT

    def on_a_terminal(env):
        leader, follower = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "mqtool", "verify", store_path("4.9.7", "config-real")], stdout=follower, stderr=subprocess.DEVNULL,
                                cwd=ROOT, env={**os.environ, "COLUMNS": "100", **env})
        os.close(follower)
        out = b""
        while True:  # read while it writes (a pty holds little), until it closes its end
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        os.close(leader)
        return proc.wait(timeout=120), out

    code, styled = on_a_terminal({})
    assert b"\x1b[" in styled  # the terminal gets styles without NO_COLOR
    code, plain = on_a_terminal({"NO_COLOR": "1"})
    assert code == EXIT_FINDINGS and b"consumer-offset-range" in plain and b"\x1b[" not in plain


def test_info_flags_a_cut_checkpoint(tmp_path):
    """Before: a checkpoint cut to 7 bytes showed its half-read physicMsgTimestamp and zeros in
    `info` with nothing to say they are not what the broker wrote (verify warned, info did not)."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    with open(root / "checkpoint", "r+b") as f:
        f.truncate(7)
    line = "the checkpoint is 7 bytes, the broker maps 4096: missing bytes read as zero"
    shown = cli("info", root, "-f", "json")
    assert shown.returncode == EXIT_OK and line in json.loads(shown.stdout)["notes"]
    shown = cli("verify", root, "-f", "json", "--no-progress")
    assert [(f["message"], f["found"]) for f in json.loads(shown.stdout)["findings"] if f["kind"] == "checkpoint-size"] == [(line, 7)]


def test_a_cut_index_file_is_a_finding_not_a_refusal(tmp_path):
    """Before: a store whose only index file was cut (no other file shows the index geometry) made
    `info` and `verify` exit 3 ("cannot infer maxHashSlotNum/maxIndexNum"). Now info notes it and
    verify reports it; the planners, which would write index files, still refuse without the geometry."""
    root = copy_store("5.3.3", "crashed-small", tmp_path)
    (index,) = (root / "index").iterdir()
    with open(index, "r+b") as f:
        f.truncate(1000)
    shown = cli("info", root, "-f", "json")
    assert shown.returncode == EXIT_OK, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["index"] is None and any(n.startswith(f"index files not read ({index.name} is 1000 bytes): ") for n in doc["notes"])
    shown = cli("verify", root, "-f", "json", "--no-progress")
    assert shown.returncode == EXIT_FINDINGS, shown.stderr
    cut = [f for f in json.loads(shown.stdout)["findings"] if f["kind"] == "index-file-size"]
    assert [(f["file"], f["found"], f["severity"]) for f in cut] == [(f"index/{index.name}", 1000, "error")]
    shown = cli("repair", root)
    assert shown.returncode == EXIT_BAD_INPUT and shown.stderr.count("\n") == 1
