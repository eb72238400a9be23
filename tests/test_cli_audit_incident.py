"""Second pass of the command-line audit (an incident's use of mqtool in a 100-column terminal, through
pipes, with Ctrl-C, on unreadable and mistyped input). Each test failed before its fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import copy_store, manifest, store_path
from repair_support import tree
from test_cli_audit import error_line, run
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS

ROOT = Path(__file__).resolve().parent.parent


def into_a_closed_pipe(*args) -> subprocess.CompletedProcess:
    """``mqtool ARGS | head -0``: stdout is a pipe whose reader is gone before the first write."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], stdout=write, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, timeout=300, env={**os.environ, "COLUMNS": "100"})
    finally:
        os.close(write)


# ---- a store directory mqtool may not read -----------------------------------------------------------


@pytest.mark.parametrize("command", ["info", "verify", "repair"])
def test_a_store_directory_that_cannot_be_read_is_bad_input_not_a_usage_error(command, tmp_path, monkeypatch):
    """Before: `chmod 111 STORE` (or a store of another user) made every command exit 2, "Invalid value
    for 'STORE': path ... is not readable; see 'mqtool info --help'": typer's own access check, a usage
    error, where README lists "permission denied" as bad input (exit 3), as for any file of the store.
    The check (``os.access``, answered here as for an unprivileged user) is no longer made: mqtool's own
    open says what it cannot read."""
    store = copy_store("4.9.7", "clean-small", tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == store else real_access(path, mode, *a, **k))
    done = run(command, store)
    assert done.exit_code != 2 and "is not readable" not in done.output, (done.exit_code, done.output)
    os.chmod(store, 0o111)
    try:
        if os.geteuid() != 0:  # root reads it all the same
            assert "ermission denied" in error_line(run(command, store), EXIT_BAD_INPUT)
    finally:
        os.chmod(store, 0o755)


def test_an_out_file_that_is_only_writable_is_written(tmp_path, monkeypatch):
    """Before: `salvage --out FILE` on an existing file mqtool may write but not read was refused as
    "is not readable" (exit 2)."""
    out = tmp_path / "salvaged.jsonl"
    out.write_text("old\n")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, *a, **k: False if Path(path) == out and mode == os.R_OK else real_access(path, mode, *a, **k))
    done = run("salvage", store_path("4.9.7", "clean-small"), "-f", "jsonl", "--out", out)
    assert done.exit_code == 0, done.output
    assert json.loads(out.read_text().splitlines()[0])["status"] == "live"


# ---- a reader that goes away (`| head`) ends the output, not the verdict ------------------------------


@pytest.mark.parametrize("fmt", ["table", "json", "jsonl", "csv"])
def test_verify_into_a_closed_pipe_still_exits_1_on_a_store_with_findings(fmt):
    """Before: `mqtool verify STORE | head` exited 0, "the store is sound", on a store with findings,
    whenever head left before verify had written everything (rewrite-clean: 186 lines), and 1 when it
    did not: under `set -o pipefail` a damaged store passed. A sound store still exits 0 quietly."""
    damaged = into_a_closed_pipe("verify", store_path("4.9.7", "rewrite-clean"), "-f", fmt)
    assert damaged.returncode == EXIT_FINDINGS, damaged.stderr
    assert "Traceback" not in damaged.stderr and "Broken pipe" not in damaged.stderr
    sound = into_a_closed_pipe("verify", store_path("5.3.3", "clean-small"), "-f", fmt)
    assert sound.returncode == 0, sound.stderr


@pytest.mark.parametrize("fmt", ["table", "jsonl"])
def test_offsets_and_survivors_into_a_closed_pipe_keep_exit_1(fmt, tmp_path):
    """Before: `mqtool offsets STORE -f jsonl | head -1` exited 0 with offsets beyond their queue, and
    `mqtool survivors STORE ids | head` 0 with ids missing: both verdicts are known before a row is written."""
    offsets = into_a_closed_pipe("offsets", store_path("4.9.7", "config-real"), "-f", fmt)
    assert offsets.returncode == EXIT_FINDINGS, offsets.stderr
    ids = tmp_path / "ids.txt"
    sent = [m["uniqKey"] for m in manifest("4.9.7", "clean-small")["messages"] if m.get("uniqKey")][:50]
    ids.write_text("\n".join(sent + ["0A0000000000000000000000000000FF"]) + "\n")  # one id no message has
    survivors = into_a_closed_pipe("survivors", store_path("4.9.7", "clean-small"), ids, "--by", "uniq-key", "-f", fmt)
    assert survivors.returncode == EXIT_FINDINGS, survivors.stderr


# ---- Ctrl-C before a repair's first stage began ---------------------------------------------------------


def test_ctrl_c_before_a_repairs_first_stage_says_nothing_changed_and_leaves_no_backup(tmp_path, monkeypatch):
    """Before: a Ctrl-C while `repair --yes` made its backup directory (seen at 2.5 s into a 2 GiB store's
    repair) said "interrupted: partly applied: ... undo with: mqtool restore DIR --yes" with the store
    unchanged, and that restore failed: "DIR: not an mqtool backup (no manifest.json)"."""
    from mqtool.apply import backup as backup_module

    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = tree(store)
    target = tmp_path / "backups" / "repair"

    def ctrl_c_while_making(directory):
        Path(directory).parent.mkdir(parents=True)  # the stages' directory is there, the first stage's not yet
        raise KeyboardInterrupt

    monkeypatch.setattr(backup_module, "makedirs", ctrl_c_while_making)
    line = error_line(run("repair", store, "--yes", "--backup-dir", target), 130)
    assert line == "mqtool: error: interrupted before anything was changed"
    assert not target.exists() and tree(store) == before
    assert "interrupted" not in run("info", store).stderr


# ---- a plan file that is no plan --------------------------------------------------------------------


@pytest.mark.parametrize("text", ["[1, 2]", '"recover"', "42", "null", '{"format": "mqtool-plan/1", "store": 5}'])
def test_apply_of_json_that_is_no_plan_is_bad_input(text, tmp_path):
    """Before: a plan file holding a JSON array, string, number or null (a wrong file, an edit) was
    "internal error: AttributeError: 'list' object has no attribute 'get'" (exit 5, "please report")."""
    plan = tmp_path / "plan.json"
    plan.write_text(text)
    line = error_line(run("apply", plan, "--yes"), EXIT_BAD_INPUT)
    assert "not a valid mqtool plan" in line and "internal error" not in line


# ---- a broker config that is not this broker's -------------------------------------------------------


@pytest.mark.parametrize("command", ["repair", "recover"])
def test_a_broker_config_whose_segment_size_no_file_has_names_the_config(command, tmp_path):
    """Before: `repair STORE --broker-config conf` with mappedFileSizeCommitLog=2097152 on 1 MiB segments
    said "00000000000000000000: 1048576 bytes, not 2097152 like the other segments ...; `mqtool repair`
    fixes the file first": repair sending the user to repair, and segments "like the other" when
    none has that size. Now the line names the setting and what the files hold."""
    conf = tmp_path / "broker.conf"
    conf.write_text("mappedFileSizeCommitLog=2097152\n")
    line = error_line(run(command, copy_store("4.9.7", "crashed-small", tmp_path / "store"), "--broker-config", conf), EXIT_BAD_INPUT)
    assert "mappedFileSizeCommitLog=2097152" in line and "1048576 bytes" in line
    assert "`mqtool repair` fixes" not in line and "like the other segments" not in line


@pytest.mark.parametrize("args", [("--topic", "NoSuch"), ("--topic", "TopicTest", "--queue", "99"), ("--tag", "NoSuchTag", "-f", "jsonl")])
def test_a_dump_whose_filters_match_no_message_says_so(args):
    """``dump STORE --topic NoSuch`` printed nothing at all, as if the store were empty: now a note says no
    message matched (exit 0: a dump is not a lookup); the same filters that match print no such note."""
    shown = run("dump", store_path("4.9.7", "clean-small"), *args)
    assert shown.exit_code == 0 and not shown.stdout.strip()
    assert "mqtool: no message matches the filters" in shown.stderr
    some = run("dump", store_path("4.9.7", "clean-small"), "--topic", "TopicTest", "--limit", "1")
    assert some.exit_code == 0 and some.stdout.strip() and "no message matches" not in some.stderr


def test_a_consume_queue_dump_of_no_such_queue_says_so():
    shown = run("dump", "consumequeue", store_path("4.9.7", "clean-small"), "--topic", "NoSuch", "--queue", "0")
    assert shown.exit_code == 0 and not shown.stdout.strip() and "no consume queue entry of that topic and queue" in shown.stderr
    some = run("dump", "consumequeue", store_path("4.9.7", "clean-small"), "--topic", "TopicTest", "--queue", "0", "--limit", "1")
    assert some.exit_code == 0 and some.stdout.strip() and "no consume queue entry" not in some.stderr


@pytest.mark.parametrize("fmt", ["json", "csv"])
@pytest.mark.parametrize("kind, where", [("dledger", ""), ("index", "commitlog")])
def test_a_dump_of_a_path_holding_no_such_files_writes_no_output(fmt, kind, where):
    """Before: `dump dledger STORE -f json > out.json` on a store with no DLedger member (and `dump index` of a
    folder holding no index file) wrote "[" (or the CSV header) to out.json, then the error and exit 3: a
    file that looked like the start of a dump. The rows' first is read before anything is written now."""
    shown = run("dump", kind, store_path("4.9.7", "clean-small") / where, "-f", fmt)
    assert shown.exit_code == EXIT_BAD_INPUT and shown.stdout == "", shown.stdout
    assert shown.stderr.startswith("mqtool: error: ") and "\n" not in shown.stderr.strip()
    some = run("dump", kind, store_path("4.9.7", "dledger-small" if kind == "dledger" else "clean-small"), "-f", fmt, "--limit", "1")
    assert some.exit_code == 0 and len(some.stdout.splitlines()) == (3 if fmt == "json" else 2), some.stdout


@pytest.mark.parametrize("window, said", [(("--from-offset", 99999999999), "[99999999999, end)"), (("--to-offset", 1048576), "[0, 1048576)"),
                                          (("--from-offset", 1048576, "--to-offset", 2097152), "[1048576, 2097152)")])
def test_verify_of_a_range_says_the_verdict_is_the_ranges(window, said):
    """Before: `verify STORE --from-offset N` (`--to-offset`) ended "the store is sound" whatever it had checked, even
    after its note "no commit log segment holds offset N ...: no record was checked". The summary names the range
    and the verdict holds for it; the whole store's verdict is unchanged (exit 0 as before)."""
    shown = run("verify", store_path("4.9.7", "clean-small"), *window)
    assert shown.exit_code == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert f"timer; commit log {said} only)" in text and text.endswith("sound in the range checked")
    assert "the store is sound" not in text
    whole = " ".join(run("verify", store_path("4.9.7", "clean-small")).stdout.split())
    assert "checks: commitlog, cq, index, checkpoint, timer) commit log:" in whole and whole.endswith("the store is sound")


def test_a_salvage_into_a_file_stopped_says_the_file_is_partial(tmp_path, monkeypatch):
    """Ctrl-C during ``salvage --out FILE`` said only "interrupted": now it says FILE holds only what was
    written before (exit 130 as ever)."""
    import mqtool.cli.salvage as salvage_cli

    written = salvage_cli.emit_batches

    def cut_short(items, fmt, fields, out=None, **kw):
        written(iter([next(iter(items))]), fmt, fields, out=out, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(salvage_cli, "emit_batches", cut_short)
    out = tmp_path / "rows.jsonl"
    result = run("salvage", store_path("4.9.7", "clean-small"), "-f", "jsonl", "--out", out, "--no-progress")
    assert result.exit_code == 130 and out.read_text().count("\n") > 0
    assert f"mqtool: {out}: holds only the rows written before salvage stopped" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == "mqtool: error: interrupted"


def test_a_backup_whose_paths_hold_brackets_is_shown_as_it_is(tmp_path):
    """Before: `mqtool restore BACKUP` (the plan, without --yes) printed each file it would put back
    through rich's markup, so `[x]` vanished from a name, `:fire:` became an emoji and `[/]` ended the
    command as an internal error (exit 5): here, a commit log on another disk (``storePathCommitLog``)
    in such folders."""
    store_dir = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    outside = tmp_path / "disk2 [" / "] [x] :fire:" / "commitlog"  # "disk2 [/] [x] :fire:/commitlog": a closing tag and an emoji, to rich
    outside.parent.mkdir(parents=True)
    (store_dir / "commitlog").rename(outside)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store_dir}\nstorePathCommitLog={outside}\n")
    assert run("recover", store_dir, "--broker-config", conf, "--yes", "--backup-dir", tmp_path / "bk").exit_code == 0
    shown = run("restore", tmp_path / "bk")
    assert shown.exit_code == 4 and "nothing changed: re-run with --yes" in shown.stderr and "Traceback" not in shown.output
    assert any(line.startswith("  restore ../") and line.endswith("disk2 [/] [x] :fire:/commitlog/00000000000004194304") for line in shown.stdout.splitlines()), shown.stdout


# ---- Ctrl-C in the checks between and after a repair's stages -------------------------------------------


def counted_checks(monkeypatch, ctrl_c_at: int | None = None) -> tuple[list, list]:
    """``repair``'s full verifies (``recovery.repair.verify_findings``): those begun and those that ended; the
    ``ctrl_c_at``-th begun gets a Ctrl-C as it starts."""
    import signal

    from mqtool.recovery import repair as planner

    begun, ended, verify_findings = [], [], planner.verify_findings

    def counted(*args, **kwargs):
        begun.append(1)
        if len(begun) == ctrl_c_at:
            os.kill(os.getpid(), signal.SIGINT)
        found = verify_findings(*args, **kwargs)
        ended.append(1)
        return found

    monkeypatch.setattr(planner, "verify_findings", counted)
    return begun, ended


def test_ctrl_c_in_the_check_after_a_repairs_stage_stops_it_there(tmp_path, monkeypatch):
    """Before: a Ctrl-C during the full verify `repair --yes` runs after a stage (minutes on a large store)
    was held until that verify ended and then ignored: the repair went on to its next check and exited 0,
    "verify: the store is sound", as if no key had been pressed. Only the stages' writes defer a Ctrl-C now:
    the check stops at once, as a Ctrl-C before the next stage does, and says how to finish or undo."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = tree(store)
    backup = tmp_path / "backup"
    begun, ended = counted_checks(monkeypatch, ctrl_c_at=2)  # the plan's check, then the one after the recover stage
    line = error_line(run("repair", store, "--yes", "--backup-dir", backup), 130)
    assert line == (f"mqtool: error: interrupted: partly applied: finish with `mqtool repair {store} --yes`, "
                    f"or undo with: mqtool restore {backup} --yes")
    assert (len(begun), len(ended)) == (2, 1)  # the check interrupted did not run on
    assert not (store / "abort").exists()  # the recover stage is applied
    assert "a repair on this store stopped before its last stage" in run("info", store).stderr
    assert run("restore", backup, "--yes").exit_code == 0 and tree(store) == before


def test_a_repair_checks_the_store_once_after_its_last_stage(tmp_path, monkeypatch):
    """Before: `repair --yes` ran the full verify after its last stage twice, once to see that nothing was
    left to fix and once more for the findings it reports (twice the time of a verify on a large store)."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    begun, _ = counted_checks(monkeypatch)
    result = run("repair", store, "--yes", "--backup-dir", tmp_path / "backup")
    assert result.exit_code == 0 and "verify: the store is sound" in result.stderr, result.stderr
    assert len(begun) == 2  # the plan's check, then the one after the recover stage, its only stage
    assert run("verify", store).exit_code == 0


def test_ctrl_c_while_restoring_a_repairs_stages_names_the_command_that_restores_them_all(tmp_path, monkeypatch):
    """Before: a Ctrl-C while `restore BACKUP --yes` undid a two-stage repair (a stray file quarantined, then the
    broker's recovery) said "run `mqtool restore BACKUP/02-recover --yes` again to finish": that command put
    back the recovery's files alone and said "nothing to restore", the quarantined file still out of the store.
    The line names the repair's backup directory, whose restore undoes every stage."""
    from mqtool.cli import repair as repair_cli

    store = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    (store / "commitlog" / "junk.txt").write_text("junk\n")  # a stray file: the repair's first stage quarantines it
    before = tree(store)
    backup = tmp_path / "backup"
    assert run("repair", store, "--yes", "--backup-dir", backup).exit_code == 0
    assert sorted(p.name for p in backup.iterdir()) == ["01-files", "02-recover"]
    restored = repair_cli.restore

    def ctrl_c_after_the_first(backup_set, **kwargs):
        restored(backup_set, **kwargs)
        raise KeyboardInterrupt  # as the later stage's restore ends, before the earlier one's begins

    monkeypatch.setattr(repair_cli, "restore", ctrl_c_after_the_first)
    line = error_line(run("restore", backup, "--yes"), 130)
    monkeypatch.undo()
    command = line.split("`")[1]
    assert command == f"mqtool restore {backup} --yes", line
    assert run(*command.split()[1:]).exit_code == 0 and tree(store) == before


def test_verify_summary_counts_one_of_anything_in_the_singular():
    """Before: the summary said "index: 1 files", and with `--to-offset 5` "commit log: 1 records, 5 bytes in
    1 segments" (the count of errors alone was worded by its number)."""
    crashed = " ".join(run("verify", store_path("4.9.7", "crashed-small")).stdout.split())
    assert "index: 1 file, 3663 entries" in crashed and "consume queues: 38 queues, 1390 entries" in crashed
    window = " ".join(run("verify", store_path("4.9.7", "clean-small"), "--to-offset", 5).stdout.split())
    assert "commit log: 1 record, 5 bytes in 1 segment;" in window


def flipped(tmp_path) -> Path:
    """A copy of 4.9.7 crashed-small with 64 bytes of a body flipped in its second segment: recovery cuts there."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    with open(store / "commitlog" / "00000000000001048576", "r+b") as segment:
        segment.seek(300000)
        segment.write(b"\xff" * 64)
    return store


def test_the_messages_a_cut_loses_are_a_table_at_100_columns(tmp_path):
    """Before: `recover` of a store with a body byte run flipped listed the messages its cut loses as 50
    vertical records of 12 lines each at 100 columns (offsetMsgIds of IPv6 hosts are 56 characters): 600
    lines that scrolled the cut and the next start off the screen. The queue and the CRC verdict are
    left out first, as the other optional columns, so each lost message is one line: offset, msg id, topic."""
    store = flipped(tmp_path)
    lost = json.loads(run("recover", store, "-f", "json").stdout)["lost"]["messages"][:50]
    assert any(len(m["msg_id"]) == 56 for m in lost)
    shown = run("recover", store, env={"COLUMNS": "100"})
    assert shown.exit_code == 4
    listed = shown.stdout.split("Lost by the cut: ")[1].split("\n\n")[0]
    assert "-[ RECORD" not in listed and len(listed.splitlines()) == 1 + 2 + 50 + 1  # title, header, rows, "... and N more"
    lines = listed.splitlines()
    for m in lost:
        line = next(x for x in lines if x.startswith(f"{m['offset']} "))
        assert m["msg_id"] in line.split() and line.endswith(m["topic"])


@pytest.mark.parametrize("kind", ["consumequeue", "batchconsumequeue"])
@pytest.mark.parametrize("folder", ["commitlog", "index"])
def test_a_queue_dump_of_a_folder_that_holds_no_queues_says_so(kind, folder):
    """Before: `dump consumequeue STORE/commitlog` (a mistyped path) took the folder for a topic named
    "commitlog", found no queue of it and printed nothing, exit 0: an empty dump of a store that has
    queues. It is bad input now, named; a topic folder is dumped as before."""
    store = store_path("4.9.7", "clean-small")
    line = error_line(run("dump", kind, store / folder, "-f", "jsonl"), EXIT_BAD_INPUT)
    expected = f"expected a store, its {kind}/, a topic folder in it or a queue folder"
    assert line == f"mqtool: error: {store / folder}: not a {kind} folder: {expected}"
    topic = run("dump", "consumequeue", store / "consumequeue" / "TopicTest", "-f", "jsonl", "--limit", "1")
    assert topic.exit_code == 0 and json.loads(topic.stdout)["topic"] == "TopicTest"


def test_a_plans_actions_are_a_table_at_100_columns(tmp_path):
    """Before: a plan's Actions turned into vertical records (5 lines each) at 100 columns as soon as one deleted a
    consume queue file of a topic longer than 16 characters: its detail names the queue ("consume queue
    SCHEDULE_TOPIC_XXXX/13"), a word the table would not break. The detail breaks now; every path is whole."""
    store = flipped(tmp_path)
    actions = json.loads(run("recover", store, "-f", "json").stdout)["actions"]
    assert any(a["path"].startswith("consumequeue/SCHEDULE_TOPIC_XXXX/") for a in actions)
    listed = run("recover", store, env={"COLUMNS": "100"}).stdout.split("\nActions\n")[1]
    assert "-[ RECORD" not in listed and all(len(line) <= 100 for line in listed.splitlines())
    for number, action in enumerate(actions, 1):
        line = next(x for x in listed.splitlines() if x[:3].strip() == str(number))  # the # column, not a detail's broken word
        assert action["op"] in line.split() and (action["path"] or "") in line


def test_a_repair_plan_calls_lost_data_only_the_findings_that_are(tmp_path):
    """Before: the repair plan headed every finding verify would still report "Lost data: ..." (4.9.7 config-real:
    five consumer offsets past their queue's end, which `repair --yes` itself says are not lost data, exit 0).
    The heading counts the lost data among them and a column says which (the plan's JSON `lost_data`)."""
    store = copy_store("4.9.7", "config-real", tmp_path / "real")  # a copy: repair refuses a store another test's process reads
    remaining = json.loads(run("repair", store, "-f", "json").stdout)["remaining"]
    assert len(remaining) == 5 and not any(e["lost_data"] for e in remaining)
    shown = run("repair", store, env={"COLUMNS": "100"})
    assert shown.exit_code == 0 and "Lost data" not in shown.stdout
    assert "After the repair `verify` will still report 5 error(s) or warning(s), 0 of them lost data" in shown.stdout
    damaged = copy_store("4.9.7", "clean-small", tmp_path)
    with open(damaged / "commitlog" / "00000000000000000000", "r+b") as segment:  # a body in the segment no recovery reads
        segment.seek(300000)
        segment.write(b"\xff" * 64)
    lost = run("repair", damaged, env={"COLUMNS": "100"}).stdout
    assert "After the repair `verify` will still report 1 error(s) or warning(s), 1 of them lost data" in lost
    assert any(line.split()[:4] == ["crc-mismatch", "error", "yes", "295364"] for line in lost.splitlines())


@pytest.mark.parametrize("args, number", [(("query", "offset", "{store}", "TopicTest", "0", "-1"), "-1"),
                                          (("query", "time", "{store}", "TopicTest", "-2", "2026-11-21T04:55:15"), "-2")])
def test_a_negative_number_where_an_argument_goes_is_said_to_be_one(args, number):
    """Before: `query offset STORE TopicTest 0 -1` said "No such option: -1" (click reads a negative argument as
    an option), naming no mistake the user made; a negative option value already said it must be 0 or more."""
    store = store_path("4.9.7", "clean-small")
    line = error_line(run(*(str(store) if a == "{store}" else a for a in args)), 2)
    said = f"{number}: a negative number, where queue ids, offsets and counts are 0 or more"
    assert line == f"mqtool: error: {said}; see 'mqtool {args[0]} {args[1]} --help'"
    assert error_line(run("dump", store, "-x"), 2) == "mqtool: error: No such option: -x; see 'mqtool dump --help'"
