"""What the on-call engineer met at 3 a.m. (the audit's CLI pass): an answer whose reason the table has
no column for, a store given as its commit log folder where a repair needs the root, a Ctrl-C that glued
the error into a half-written row, a non-UTF-8 locale, a store given to ``restore``. Each test failed
before its fix."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import copy_store, drained, manifest, store_path

from mqtool.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "100"})


def test_query_offset_says_why_no_message_is_served_where_the_table_has_no_column_for_it(tmp_path):
    """A queue entry whose record's magic code is broken, an offset past the queue, a topic with no queue:
    the table showed MESSAGE_WAS_REMOVING, OFFSET_OVERFLOW_BADLY or NO_MESSAGE_IN_QUEUE with empty columns
    and nothing on stderr (the reason and the queue's range were in the JSON only)."""
    doc = manifest("4.9.7", "clean-small")  # its normal recovery scans the last segments: a record in the first is served as read
    size = doc["storeConfig"]["mappedFileSizeCommitLog"]
    msg = next(m for m in doc["messages"] if m["topic"] == "TopicTest" and m["queueOffset"] > 0 and m["commitLogOffset"] < size)
    queue = next(q for q in doc["queues"] if (q["topic"], q["queueId"]) == (msg["topic"], msg["queueId"]))
    entry, offset = {"queueOffset": msg["queueOffset"]}, msg["commitLogOffset"]
    store = copy_store("4.9.7", "clean-small", tmp_path / "s")
    with open(store / "commitlog" / "00000000000000000000", "r+b") as f:  # the record's MAGICCODE (after TOTALSIZE) zeroed
        f.seek(offset + 4)
        f.write(b"\0\0\0\0")
    where = f"{queue['topic']}/{queue['queueId']}"
    res = run("query", "offset", store, queue["topic"], queue["queueId"], entry["queueOffset"])
    (json_row,) = json.loads(run("query", "offset", store, queue["topic"], queue["queueId"], entry["queueOffset"], "-f", "json").stdout)
    assert res.exit_code == 1 and "MESSAGE_WAS_REMOVING" in res.stdout
    assert json_row["error"] == f"no record: illegal magic code 0x00000000 at position {offset}"
    assert res.stderr == f"mqtool: {where} queue offset {entry['queueOffset']}: {json_row['error']}\n"
    res = run("query", "offset", store, queue["topic"], queue["queueId"], queue["maxOffset"] + 5)
    assert res.exit_code == 1 and "OFFSET_OVERFLOW_BADLY" in res.stdout
    assert res.stderr == f"mqtool: {where} holds queue offsets [{queue['minOffset']}, {queue['maxOffset']})\n"
    res = run("query", "offset", store, queue["topic"], 999, 0)
    assert res.exit_code == 1 and "NO_MESSAGE_IN_QUEUE" in res.stdout
    assert res.stderr == f"mqtool: no consume queue {queue['topic']}/999: the broker answers NO_MESSAGE_IN_QUEUE\n"


def test_a_commit_log_folder_where_the_store_root_is_needed_names_the_root_to_give(tmp_path, monkeypatch):
    """``recover``, ``repair`` and ``offsets`` given ``STORE/commitlog`` or one segment (tab completion stops
    there): recover said "this command needs a store root directory, not commit log segments" (no path, nothing
    to paste), repair a segment "repair needs the store's root directory", and offsets exited 0 saying "no
    readable config/consumerOffset.json" of a store whose consumer offsets are there."""
    root = copy_store("5.3.3", "config-real", tmp_path / "my store")
    assert (root / "config" / "consumerOffset.json").is_file()
    folder = root / "commitlog"
    segment = sorted(folder.iterdir())[0]
    line = (f"mqtool: error: {folder}: commit log segments alone: this command needs the store's root directory, "
            f"the folder holding commitlog/ ('{root}' here)")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*"))
    given = (("recover", folder, "--yes"), ("repair", segment, "--yes"), ("repair", folder), ("offsets", folder),
             ("query", "time", segment, "T", 0, 0))
    for args in given:
        res = run(*args)
        assert (res.exit_code, res.stderr.strip().splitlines()[-1]) == (3, line), args
    monkeypatch.chdir(folder)  # `mqtool recover .` from inside it
    res = run("recover", ".")
    assert (res.exit_code, res.stderr.strip()) == (3, line.replace(str(folder), ".", 1))
    assert sorted((p.name, p.stat().st_mtime_ns) for p in root.rglob("*")) == before


def test_a_locale_that_is_not_utf8_reads_and_writes_the_brokers_utf8_topics():
    """LC_ALL=C with PYTHONUTF8=0, a locale that is not UTF-8 as Latin-1 or EUC-JP are: ``stats --topic`` of a topic
    typed in UTF-8 matched nothing (an empty array) and ``stats``' table ended "internal error: UnicodeEncodeError"
    (exit 5) with nothing written (under Latin-1 ``info`` also named consumequeue/Tópico-主题-тема/ ``TÃ³pico...``)."""
    path = store_path("4.9.7", "crashed-small")
    topics = {m["topic"] for m in manifest("4.9.7", "crashed-small")["messages"]}
    topic = next(t for t in topics if not t.isascii())
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "COLUMNS": "100"}

    def mqtool(*args):
        res = subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], capture_output=True, cwd=ROOT, env=env)
        assert (res.returncode, b"Traceback" in res.stderr) == (0, False), res.stderr
        return res.stdout.decode("utf-8")

    assert {q["topic"] for q in json.loads(mqtool("info", path, "-f", "json"))["queues"]} == topics
    rows = json.loads(mqtool("stats", path, "--topic", topic, "-f", "json"))
    assert rows and {r["topic"] for r in rows} == {topic}
    assert topic in mqtool("stats", path)


def test_ctrl_c_in_a_row_on_the_terminal_puts_the_error_on_a_line_of_its_own():
    """``dump`` on a terminal interrupted while a row is written (the terminal not reading: the write blocks part-way):
    the error ran on from the cut row, ``topic        | Tópico-主题-темаmqtool: error: interrupted``."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "NO_COLOR")}
    args = [sys.executable, "-m", "mqtool", "dump", store_path("4.9.7", "crashed-small"), "--no-progress"]
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, close_fds=True)
    os.close(slave)
    waiting, deadline = (-1, 0.0), time.monotonic() + 120
    while time.monotonic() < deadline:  # until the terminal's buffer is full and stays so: the child blocked in a write
        queued = struct.unpack("i", fcntl.ioctl(master, termios.FIONREAD, b"\0" * 4))[0]
        if queued and queued == waiting[0] and time.monotonic() - waiting[1] > 0.5:
            break
        if queued != waiting[0]:
            waiting = (queued, time.monotonic())
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    shown = drained(master).decode().replace("\r\n", "\n")
    os.close(master)
    assert proc.wait(timeout=60) == 130
    rows, error = shown.split("mqtool: error: interrupted")
    first = min(manifest("4.9.7", "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    assert first["msgId"] in rows[:2000] and len(rows) > 4096 and error == "\n"
    assert rows.endswith("\n"), rows[-200:]


def test_restore_given_the_store_names_the_backups_to_give(tmp_path):
    """``restore STORE`` (the store recovered, not its backup) said "not an mqtool backup (no manifest.json)" and
    nothing of where the backup is: it names the store's backups, newest first, and a command that pastes. A backup
    folder still being built (``.mqtool-tmp``: an apply killed after its manifest, before its rename, changed nothing)
    is no backup: before, it was named first, as the newest."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    res = run("recover", store, "--yes")
    assert res.exit_code == 0, res.stderr
    undo = res.stderr.strip().splitlines()[-1]
    backup = Path(shlex.split(undo.removeprefix("mqtool: undo with: "))[2])
    assert backup.parent == tmp_path / "on call" / ".mqtool-backups" and (backup / "manifest.json").is_file()
    building = backup.parent / "on call-29991231T000000000-rebuild-index.mqtool-tmp"
    building.mkdir()
    (building / "manifest.json").write_bytes((backup / "manifest.json").read_bytes())
    recovered = sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file())
    res = run("restore", store, "--yes")
    assert res.exit_code == 3
    assert res.stderr == (f"mqtool: error: {store}: a store, not a backup: give restore the backup directory a repair command named; this "
                          f"store's in '{backup.parent}', newest first: {backup.name} (without --yes it shows what it would put back: "
                          f"mqtool restore '{backup}')\n")
    assert sorted((p.relative_to(store), p.read_bytes()) for p in store.rglob("*") if p.is_file()) == recovered
    res = run("restore", backup.parent, "--yes")
    assert res.exit_code == 3 and res.stderr.endswith(f"a folder of backups ({backup.name}), not one: restore each alone, newest first\n")
    assert run("restore", backup, "--yes").exit_code == 0


def test_a_body_holding_escape_sequences_is_shown_escaped_in_a_table(tmp_path):
    """``dump --body utf8`` (and every table) wrote a body's control codes to the terminal as they are: a producer's
    ``ESC[31m`` recoloured the screen and ``ESC]0;...BEL`` retitled the window. A table shows them written out;
    ``-f jsonl`` keeps them."""
    first = min(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    store = copy_store("4.9.7", "clean-small", tmp_path / "s")
    segment = store / "commitlog" / "00000000000000000000"
    body = json.loads(run("dump", store, "-n", "1", "--body", "utf8", "-f", "jsonl").stdout)["body"].encode()
    bait = b"\x1b[31mRED\x1b]0;title\x07\r"
    data = segment.read_bytes()
    at = data.index(body, first["commitLogOffset"], first["commitLogOffset"] + first["size"])
    segment.write_bytes(data[:at] + bait + data[at + len(bait):])  # the body's first bytes (its CRC no longer matches)
    assert json.loads(run("dump", store, "-n", "1", "--body", "utf8", "-f", "jsonl").stdout)["body"].startswith(bait.decode())
    res = run("dump", store, "-n", "1", "--body", "utf8")
    assert res.exit_code == 0 and not {"\x1b", "\x07", "\r"} & set(res.stdout)
    assert "\\x1b[31mRED\\x1b]0;title\\x07\\x0d" in res.stdout


def test_a_plan_out_that_is_a_directory_is_refused_before_planning_by_its_own_name(tmp_path):
    """``recover --plan-out DIR`` (a folder, as for --backup-dir) planned, then said
    "DIR.mqtool-tmp: Is a directory", a path the engineer never typed, with nothing saved."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "s")
    folder = tmp_path / "plans here"
    folder.mkdir()
    res = run("recover", store, "--plan-out", folder)
    assert (res.exit_code, res.stdout) == (3, "")
    assert res.stderr == (f"mqtool: error: {folder}: Is a directory: --plan-out names the plan's file, "
                          f"e.g. --plan-out '{folder}/plan.json'\n")
    assert list(folder.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["plans here", "s"]
    res = run("recover", store, "--plan-out", folder / "plan.json")
    assert res.exit_code == 0 and json.loads((folder / "plan.json").read_text())["command"] == "recover"


def test_survivors_reading_ids_from_the_terminal_says_so_and_how_to_end_them():
    """``survivors STORE -`` with no pipe (the ids to be pasted, or a pipe forgotten) waited in silence; it says
    it reads the terminal and that Ctrl-D ends the ids, then answers for the ids typed."""
    first = min(manifest("4.9.7", "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    master, slave = pty.openpty()
    args = [sys.executable, "-m", "mqtool", "survivors", store_path("4.9.7", "crashed-small"), "-", "-f", "csv"]
    proc = subprocess.Popen(args, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, close_fds=True)
    os.close(slave)
    said = proc.stderr.readline().decode() if select.select([proc.stderr], [], [], 60)[0] else ""  # before: nothing, ever
    os.write(master, f"{first['uniqKey']}\n".encode())
    os.write(master, b"\x04")
    out, err = proc.communicate(timeout=120)
    os.close(master)
    assert said == "mqtool: reading the ids from the terminal, one per line; end them with Ctrl-D\n"
    assert proc.returncode == 0, err
    assert out.decode().splitlines()[1].startswith(f"{first['uniqKey']},found,{first['commitLogOffset']},{first['topic']},")


def test_survivors_matches_hex_ids_whatever_their_case(tmp_path):
    """UNIQ_KEYs copied through a log that lower-cases them (the Java client writes upper-case hex) were each
    "missing", exit 1, "all survived False", for messages the store holds: detected as UNIQ_KEYs, then compared
    with the stored ones letter for letter. A hex id is a number; its case says nothing."""
    sent = [m for m in manifest("4.9.7", "clean-small")["messages"] if m["uniqKey"]][:20]
    answers = []
    for name, case in (("upper.txt", str.upper), ("lower.txt", str.lower)):
        (tmp_path / name).write_text("".join(f"{case(m['uniqKey'])}\n" for m in sent))
        res = run("survivors", store_path("4.9.7", "clean-small"), tmp_path / name, "-f", "csv")
        answers.append((res.exit_code, res.stdout, res.stderr))
    assert answers[1] == answers[0]
    rows = [line.split(",") for line in answers[0][1].splitlines()[1:]]
    assert [(r[0], int(r[2])) for r in rows] == [(m["uniqKey"], m["commitLogOffset"]) for m in sent]
    assert {r[1] for r in rows} <= {"found", "found-not-consumable"}


def test_a_broker_config_value_that_is_no_number_says_what_to_do(tmp_path):
    """``--broker-config`` with ``maxIndexNum=4k``: "is not a number (Integer.parseInt throws: the broker ignores it)",
    exit 3, which read as if mqtool ignored it too and left the engineer no way on."""
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-a\nmaxIndexNum=4k\n")
    res = run("info", store_path("4.9.7", "clean-small"), "--broker-config", conf)
    assert (res.exit_code, res.stdout) == (3, "")
    assert res.stderr == ("mqtool: error: broker config: maxIndexNum='4k' is not a number: the broker ignores it (Integer.parseInt "
                          "throws in MixAll.properties2Object) and keeps its default; give the value in a copy of the file, or leave "
                          "out --broker-config to take it from the store's files\n")
    conf.write_text("brokerName=broker-a\nmaxIndexNum=4000\n")
    assert run("info", store_path("4.9.7", "clean-small"), "--broker-config", conf).exit_code == 0


@pytest.mark.parametrize("setting", ["mappedFileSizeCommitLog=-5", "mappedFileSizeCommitLog=0", "mapedFileSizeConsumeQueue=-20"])
def test_a_broker_config_file_size_no_broker_can_write_is_one_line_of_bad_input(tmp_path, setting):
    """``--broker-config`` with ``mappedFileSizeCommitLog=-5``: verify exited 1 with "00000000000000000000: 1048576 bytes, not -5
    like the other segments", a finding against the files for a setting no broker could have written them with."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-a\n{setting}\n")
    res = run("verify", store_path("4.9.7", "clean-small"), "--broker-config", conf)
    key, value = setting.split("=")
    assert (res.exit_code, res.stdout) == (3, "")
    assert res.stderr.startswith(f"mqtool: error: broker config: {key}='{value}' is an impossible file size: a broker given it can write")
    assert res.stderr.count("\n") == 1


def test_a_group_name_holding_an_escape_sequence_is_written_out_on_stderr_and_in_findings(tmp_path):
    """A consumerOffset.json group named ``analytics\\u001b[2J_cg``: ``offsets``' findings on stderr and ``verify``'s
    wrote its ESC[2J as it is, clearing the engineer's screen (stderr dropped only BEL, BS, VT, FF and CR; rich only
    those). Written out now, as in a table."""
    store = copy_store("5.3.3", "config-real", tmp_path / "s")
    before = run("offsets", store)
    offsets = store / "config" / "consumerOffset.json"
    offsets.write_text(offsets.read_text(encoding="utf-8").replace("analytics_cg", "analytics\\u001b[2J_cg"), encoding="utf-8")
    after = run("offsets", store)
    assert "analytics_cg on " in before.stderr and after.exit_code == before.exit_code == 1
    assert after.stderr == before.stderr.replace("analytics_cg", "analytics\\x1b[2J_cg")
    assert "analytics\\x1b[2J_cg" in after.stdout and "\x1b" not in after.stdout + after.stderr
    checked = run("verify", store, "--only", "checkpoint")  # its findings name the group too
    assert checked.exit_code == 1 and "consumer group analytics\\x1b[2J_cg on " in checked.stdout and "\x1b" not in checked.stdout


def test_query_uniq_key_in_lower_case_names_the_key_to_try():
    """``query uniq-key`` of a lower-cased UNIQ_KEY answers as the broker's index does, nothing (its hash is of the
    exact string), and said only "no message ... has UNIQ_KEY c17b...": it names the upper-case key to try."""
    first = min(manifest("4.9.7", "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    path = store_path("4.9.7", "crashed-small")
    res = run("query", "uniq-key", path, first["topic"], first["uniqKey"].lower())
    assert (res.exit_code, res.stdout) == (1, "")
    assert res.stderr == (f"mqtool: no message of topic {first['topic']} has UNIQ_KEY {first['uniqKey'].lower()} "
                          f"(a client writes its UNIQ_KEY in upper case: try {first['uniqKey']})\n")
    res = run("query", "uniq-key", path, first["topic"], first["uniqKey"], "-f", "json")
    assert res.exit_code == 0 and [r["offset"] for r in json.loads(res.stdout)] == [first["commitLogOffset"]]
