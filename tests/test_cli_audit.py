"""What the on-call engineer met using mqtool at 3 a.m. (issue #11 audit): a full disk, the wrong
kind of path, Ctrl-C in the middle of a repair, a store a process still holds, tables that fit a
100-column terminal, --help with an example. Each test failed before its fix."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, recovered, stderr_on_a_terminal, store_path
from mqtool.apply import executor
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_REFUSED
from mqtool.fileops import shell_path

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent


def run(*args, env=None):
    return runner.invoke(app, [str(a) for a in args], env=env)


def error_line(result, code: int) -> str:
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr.strip()
    assert "\n" not in err.splitlines()[-1] and err.splitlines()[-1].startswith("mqtool: error: "), err
    assert "Traceback" not in result.output
    return err.splitlines()[-1]


def mqtool(*args, stdout=subprocess.PIPE, env=None):
    return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], stdout=stdout, stderr=subprocess.PIPE, text=True,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "100", **(env or {})})


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def ctrl_c_after_the_first_file_operation(monkeypatch) -> None:
    """Ctrl-C at the apply's 6th durability point: after its first file operation (the pending
    marker, 3 while the dispatch is staged, the range backed up, step 0)."""
    calls = {"n": 0}

    def ctrl_c(label):
        calls["n"] += 1
        if calls["n"] == 6:
            raise KeyboardInterrupt

    monkeypatch.setattr(executor, "durability_point", ctrl_c)


# ---- a full disk, the wrong kind of path ------------------------------------------------------------


@pytest.mark.parametrize("args", [("dump", "-f", "jsonl"), ("info",), ("verify", "--only", "checkpoint"), ("salvage", "-f", "csv")])
def test_a_full_disk_under_stdout_is_one_line_and_exit_3(args):
    """Before: `mqtool dump STORE > file` on a full disk said "internal error: OSError ... (run with
    --debug)" and exited 5, the code of a bug."""
    command, *options = args
    with open("/dev/full", "w") as full:  # every write fails with ENOSPC
        result = mqtool(command, store_path("5.3.3", "clean-small"), *options, stdout=full)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    assert result.stderr.splitlines()[-1] == "mqtool: error: cannot write: No space left on device"
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_an_output_path_that_cannot_be_written_is_bad_input(tmp_path):
    """Before: `salvage --out DIR`, `salvage --out missing/x.jsonl` and `recover --plan-out DIR`
    were internal errors (exit 5). The path is quoted as a shell reads it, as every path mqtool shows."""
    store = store_path("5.3.3", "crashed-small")
    assert error_line(run("salvage", store, "--out", tmp_path), EXIT_BAD_INPUT) == f"mqtool: error: {tmp_path}: Is a directory"
    missing = tmp_path / "no such dir" / "rows.jsonl"
    assert error_line(run("salvage", store, "-f", "jsonl", "--out", missing), EXIT_BAD_INPUT) == f"mqtool: error: {shell_path(missing)}: No such file or directory"
    err = error_line(run("recover", store, "--plan-out", tmp_path), EXIT_BAD_INPUT)
    assert "Is a directory" in err and "internal error" not in err


def test_apply_and_restore_given_the_wrong_kind_of_path(tmp_path):
    """Before: `apply DIR` and `restore FILE` were internal errors (exit 5)."""
    assert "a directory; give the plan file saved with --plan-out" in error_line(run("apply", tmp_path), EXIT_BAD_INPUT)
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    assert "not an mqtool backup" in error_line(run("restore", plan, "--yes"), EXIT_BAD_INPUT)


# ---- Ctrl-C while a repair writes ---------------------------------------------------------------------


def test_ctrl_c_while_applying_says_how_to_finish_or_undo(tmp_path, monkeypatch):
    """Before: Ctrl-C in the middle of `recover --yes` printed only "interrupted": nothing said that
    the store was half-changed, nor how to finish or undo it; `verify` then reported the half-applied
    store's findings without a word about it."""
    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")  # a path with a space
    before = tree(store)
    ctrl_c_after_the_first_file_operation(monkeypatch)
    err = error_line(run("recover", store, "--yes"), 130)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    finish = err.split("partly applied: finish with `", 1)[1].split("`", 1)[0]  # before: "the same command again (with --yes)"
    assert shlex.split(finish) == ["mqtool", "recover", str(store), "--yes"]
    assert tree(store) != before
    undo = shlex.split(err.split("undo with: ", 1)[1])  # the printed command pastes as it is
    assert undo[:2] == ["mqtool", "restore"] and undo[3] == "--yes"

    checked = run("verify", store, "--only", "checkpoint")
    assert "an apply on this store was interrupted" in checked.stderr and shlex.quote(undo[2]) in checked.stderr
    planned = run("recover", store, "--dry-run")
    assert planned.exit_code == 0 and "an earlier apply on this store was interrupted" in planned.stderr

    assert run(*undo[1:]).exit_code == 0
    assert tree(store) == before  # byte for byte, as before the interrupted apply


@pytest.mark.parametrize("command,planner", [("recover", "mqtool.recovery.planners.plan_recover"),
                                             ("rebuild-cq", "mqtool.recovery.planners.plan_rebuild_cq"),
                                             ("repair", "mqtool.recovery.repair.plan_file_fixes")])
def test_ctrl_c_while_planning_says_the_plan_changed_nothing(tmp_path, monkeypatch, command, planner):
    """Before: a Ctrl-C while `--yes` was still planning (most of a large store's run) said only
    "interrupted", not whether the store was changed, as it does once the apply begins."""
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    before = tree(store)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(planner, ctrl_c)
    line = error_line(run(command, store, "--yes", "--backup-dir", tmp_path / "bk"), 130)
    assert line == "mqtool: error: interrupted while planning: the plan changed nothing"
    assert tree(store) == before and not (tmp_path / "bk").exists()


def test_ctrl_c_before_the_apply_starts_says_nothing_changed(tmp_path, monkeypatch):
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    before = tree(store)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("mqtool.apply.executor.apply_plan", ctrl_c)
    assert error_line(run("recover", store, "--yes", "--backup-dir", tmp_path / "bk"), 130) == "mqtool: error: interrupted before anything was changed"
    assert tree(store) == before


# ---- a store a process still holds --------------------------------------------------------------------


def test_a_live_lock_is_named_once_and_verify_warns(tmp_path):
    """Before: the refusal named the lock holder twice (lock, open file), and `verify` on a store a
    running broker holds said nothing about it."""
    store = copy_store("5.3.3", "clean-small", tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)", str(store / "lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        err = error_line(run("rebuild-index", store, "--yes"), EXIT_REFUSED)
        assert err.count(f"pid {holder.pid} ") == 1 and "holds the POSIX lock on" in err and "has open" in err
        checked = run("verify", store, "--only", "checkpoint")
        assert f"pid {holder.pid} holds the store's lock" in checked.stderr
    finally:
        holder.kill()
        holder.wait()


# ---- pipes and Ctrl-C in scans ------------------------------------------------------------------------


def test_no_progress_bar_when_stdout_is_a_pipe():
    """Before: `mqtool verify STORE -f jsonl | head -1` drew the bar on the terminal and head's line
    landed after it (`commitlog:   0%|...| 0.00/5.24M [00:00<?, ?B/s]{"kind": ...`)."""
    args = ["verify", store_path("5.3.3", "crashed-small"), "-f", "jsonl", "--only", "commitlog"]
    shown, out = stderr_on_a_terminal(args)
    assert out.splitlines()[-1].startswith('{"summary"') and "B/s" not in shown and "%|" not in shown
    forced, _ = stderr_on_a_terminal([*args, "--progress"])
    assert "commitlog" in forced and "B/s" in forced  # --progress still draws it


def test_ctrl_c_inside_compiled_code_is_an_interrupt():
    """Before: Ctrl-C during `dump STORE -f jsonl > file` on a big store said "internal error:
    SystemError: CPUDispatcher(<function _json_strings ...>) returned a result with an exception
    set" with exit 5: a compiled function may turn the KeyboardInterrupt into a SystemError caused by it."""
    import typer

    from mqtool.cli.common import guarded

    @guarded
    def scan():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function _json_strings>) returned a result with an exception set") from exc

    with pytest.raises(typer.Exit) as stopped:
        scan()
    assert stopped.value.exit_code == 130


def test_the_exit_codes_listed_by_help_and_readme_include_the_interrupted_one():
    """Before: Ctrl-C exits 130 (tested above), a code neither `mqtool --help` nor README's exit
    code table listed."""
    from conftest import ROOT

    assert "130 interrupted" in " ".join(run("--help", env={"COLUMNS": "100"}).stdout.split())
    assert "\n| 130 | interrupted" in (ROOT / "README.md").read_text(encoding="utf-8")


# ---- tables a 100-column terminal can read ------------------------------------------------------------


def table_lines(result) -> list[list[str]]:
    """The data lines of a table (after the header's dashes), split on runs of spaces; the lines a
    long last column wraps onto (in the terminal) are not there: the table prints them whole."""
    assert result.exit_code in (0, 1), result.stderr
    lines = result.stdout.splitlines()
    assert not any(line.startswith("-[ RECORD") for line in lines), "vertical records instead of a table"
    dashes = {i for i, line in enumerate(lines) if line.startswith("---")}
    assert dashes, "no table header"
    headers = dashes | {i - 1 for i in dashes}  # a streamed table repeats its header when widths change
    return [line.split() for i, line in enumerate(lines) if i > min(dashes) and i not in headers and line.strip()]


def test_offsets_is_a_table_at_100_columns():
    """Before: every committed offset was a 13-line vertical record at 100 (and 120) columns: the
    first screen showed three of them."""
    store = store_path("4.9.7", "config-real")
    rows = json.loads(run("offsets", store, "-f", "json").stdout)
    shown = table_lines(run("offsets", store, env={"COLUMNS": "100"}))
    assert len(shown) == len(rows)
    for cells, row in zip(shown, rows):
        who = row["group"] if row["kind"] == "consumer" else f"delay level {row['delay_level']}" if row["kind"] == "delay" else row["kind"]
        n = len(who.split())
        assert cells[:n] == who.split() and cells[-1] == row["topic"].split()[-1]
        assert [int(x) for x in (cells[n], cells[n + 1])] == [row["queue_id"], row["offset"]] and cells[n + 2] == row["relation"]
        assert [int(x) for x in cells[n + 3:n + 6]] == [row["queue_min_offset"], row["queue_max_offset"], row["lag_messages"]]


def test_salvage_and_query_are_tables_at_100_columns():
    """Before: `salvage` and `query key` printed vertical records at 100 columns (the topic column in
    the middle, a 127-character topic, nothing that could be left out)."""
    store = store_path("5.3.3", "crashed-small")
    m = manifest("5.3.3", "crashed-small")
    shown = table_lines(run("salvage", store, env={"COLUMNS": "100"}))
    acked = sorted(x["commitLogOffset"] for x in m["messages"])
    assert [int(c[0]) for c in shown] == acked and {c[1] for c in shown} == {"live"}
    msg = next(x for x in m["messages"] if x["keys"] and x["topic"] == "TopicTest")
    hits = json.loads(run("query", "key", store, "TopicTest", msg["keys"][0], "-f", "json").stdout)
    shown = table_lines(run("query", "key", store, "TopicTest", msg["keys"][0], env={"COLUMNS": "100"}))
    assert [int(c[0]) for c in shown] == [h["offset"] for h in hits] and msg["commitLogOffset"] in [h["offset"] for h in hits]
    assert all(c[-1] == "TopicTest" and h["msg_id"] in c for c, h in zip(shown, hits))


def test_query_and_salvage_tables_show_the_body_asked_for():
    """Before: `query key|uniq-key|msg-id|offset ... --body utf8` (msg-id's own --help example) and `salvage --body`
    printed their tables without the body, and without a word; JSON carried it. `dump` showed it."""
    store = store_path("5.3.3", "clean-small")
    msg = next(x for x in manifest("5.3.3", "clean-small")["messages"] if x["keys"] and x["topic"] == "TopicTest")
    row = json.loads(run("dump", store, "--from-offset", msg["commitLogOffset"], "--limit", 1, "-f", "jsonl", "--body", "sha256").stdout)
    asks = [("query", "key", store, "TopicTest", msg["keys"][0]), ("query", "uniq-key", store, "TopicTest", row["uniq_key"]),
            ("query", "msg-id", store, row["msg_id"]), ("query", "offset", store, "TopicTest", row["queue_id"], row["queue_offset"]),
            ("salvage", store), ("dump", store, "--limit", 1, "--from-offset", row["offset"])]
    for args in asks:
        shown = run(*args, "--body", "sha256", env={"COLUMNS": "300"})
        assert shown.exit_code == 0 and row["body"] in shown.stdout.split(), args


# ---- --help at 100 columns ---------------------------------------------------------------------------

MY_COMMANDS = ["verify", "query key", "query uniq-key", "query msg-id", "query offset", "query time", "offsets", "salvage",
               "recover", "repair", "truncate-dirty", "rebuild-cq", "rebuild-index", "apply", "restore"]


@pytest.mark.parametrize("command", MY_COMMANDS)
def test_every_help_has_an_example_kept_whole_and_plain_metavars(command):
    """Before: the five `query` subcommands had no example, salvage's example wrapped in the middle
    of its options, verify showed `--only <list[commitlog|cq|...]>`, `--jobs <int range>`,
    `--from-offset <int range>`, and the restore example named a backup as no command names it."""
    result = run(*command.split(), "--help", env={"COLUMNS": "100"})
    assert result.exit_code == 0
    text = result.stdout
    assert all(len(line) <= 100 for line in text.splitlines())
    lines = text.splitlines()
    example = lines[next(i for i, line in enumerate(lines) if line.strip().startswith("Example")) + 1].strip()
    assert example.startswith("mqtool " + command.split()[0]), example  # the whole command on one line
    options = text.split("Options:")[1]
    assert "<int range>" not in options and "<list[" not in options and "<str>" not in options
    if command == "restore":
        from mqtool.apply import default_backup_dir

        name = default_backup_dir(Path("/data/rocketmq/store"), "recover").name
        shown = example.split()[2].rsplit("/", 1)[1]
        assert len(shown) == len(name) and shown.split("-")[0] == "store" and shown.endswith("-recover")


def test_rebuild_cq_of_a_topic_that_is_not_there_says_so():
    """Before: `rebuild-cq STORE --topic TopicTset` (a typo) printed an empty plan and "nothing to
    do", as if the queues were sound."""
    store = store_path("5.3.3", "clean-small")
    assert {x["topic"] for x in manifest("5.3.3", "clean-small")["messages"]} >= {"TopicTest"}
    typo = run("rebuild-cq", store, "--topic", "TopicTset", "--dry-run")
    assert typo.exit_code == 0 and "no record of topic TopicTset in the commit log" in typo.stderr
    real = run("rebuild-cq", store, "--topic", "TopicTest", "--dry-run")
    assert real.exit_code == 0 and "no record of" not in real.stderr


def test_dump_timer_table_shows_delivery_times_as_dates():
    """Before: the table of `dump timer` showed `delivery_time` as epoch milliseconds
    (1795522280000), unreadable at 3 a.m.; JSON keeps the number."""
    from mqtool.cli.output import iso_ms

    store = store_path("5.3.3", "timer-small")
    rows = json.loads(run("dump", "timer", store, "--limit", "2", "-f", "json").stdout)
    shown = table_lines(run("dump", "timer", store, "--limit", "2", env={"COLUMNS": "120"}))
    assert len(shown) == 2 and all(isinstance(r["delivery_time"], int) for r in rows)
    assert all(iso_ms(r["delivery_time"]) in c and str(r["delivery_time"]) not in c for c, r in zip(shown, rows))


def test_dump_timer_table_heads_its_columns_on_one_line_at_100_columns():
    """Before: the heading "real queue id" of `dump timer` wrapped into three lines over its
    five-cell column at 100 columns; the delivery's queue and topic are headed "queue" and
    "topic", as in `info`'s "Next timer deliveries"."""
    shown = run("dump", "timer", store_path("5.3.3", "timer-crashed"), "--limit", "5", env={"COLUMNS": "100"})
    lines = shown.stdout.splitlines()
    assert shown.exit_code == 0 and set(lines[1]) <= {"-", " "}, shown.stdout  # the dashes under a one-line heading
    assert lines[0].split()[-1] == "topic" and "queue" in lines[0].split()


def test_dump_and_survivors_tables_put_the_topic_last_at_100_columns(tmp_path):
    """Before: `dump` printed 10-line vertical records at 100 columns (the topic, up to 180
    characters, second), and `survivors` likewise; now each is a table whose last column is the
    topic, numbers and ids whole."""
    store = store_path("5.3.3", "crashed-small")
    m = manifest("5.3.3", "crashed-small")
    acked = sorted(m["messages"], key=lambda x: x["commitLogOffset"])[:40]
    shown = table_lines(run("dump", store, "-n", "40", env={"COLUMNS": "100"}))
    assert len(shown) == len(acked)
    for cells, msg in zip(shown, acked):
        assert [int(c) for c in cells[:3]] == [msg["commitLogOffset"], msg["queueId"], msg["queueOffset"]]
        assert msg["msgId"] in cells and cells[-1] == msg["topic"]
    assert all(len(line) <= 100 or line.rstrip().endswith(tuple(x["topic"] for x in acked)) for line in run("dump", store, "-n", "40", env={"COLUMNS": "100"}).stdout.splitlines())

    ids = tmp_path / "ids.txt"
    wanted = [x for x in acked if x["uniqKey"]][:10]
    ids.write_text("\n".join([x["uniqKey"] for x in wanted] + ["no-such-id"]) + "\n")
    result = run("survivors", store, ids, "--by", "uniq-key", env={"COLUMNS": "100"})
    rows = table_lines(result)[: len(wanted) + 1]
    for cells, msg in zip(rows, wanted):
        assert cells[:3] == [msg["uniqKey"], "found", str(msg["commitLogOffset"])] and cells[-1] == msg["topic"]
        assert str(msg["queueId"]) in cells[3:-1]
    assert rows[-1] == ["no-such-id", "missing"]


def sparse_copy(version: str, name: str, dest: Path) -> Path:
    """A copy of a fixture store whose all-zero 4 KiB blocks are holes, as the broker's files are
    (a segment is created with setLength and written from its start)."""
    target = copy_store(version, name, dest)
    for seg in (target / "commitlog").iterdir():
        data = seg.read_bytes()
        with open(seg, "wb") as f:
            for at in range(0, len(data), 4096):
                block = data[at:at + 4096]
                if block.count(0) == len(block):
                    f.seek(len(block), os.SEEK_CUR)
                else:
                    f.write(block)
            f.truncate(len(data))
    return target


def test_progress_total_is_the_bytes_the_scan_reads(tmp_path, monkeypatch):
    """Before: `dump` and `stats` sized their bar by the files (crashed-small: 5 MiB, a never-written
    pre-allocated segment included) while the scan stops at the logical end (3.6 MB): the bar
    ended at 70% and its rate and ETA were wrong."""
    from mqtool.cli import progress as progress_module
    from mqtool.cli import stats as stats_module

    totals = []

    class Recorded(progress_module.ByteProgress):
        def __init__(self, start, stop, **kwargs):
            super().__init__(start, stop, **kwargs)
            totals.append((kwargs.get("desc"), start, stop))

    monkeypatch.setattr(progress_module, "ByteProgress", Recorded)
    monkeypatch.setattr(stats_module, "ByteProgress", Recorded)
    logical_end = recovered("5.3.3", "crashed-small")["commitLog"]["maxOffset"]
    segment = manifest("5.3.3", "crashed-small")["storeConfig"]["mappedFileSizeCommitLog"]
    for store, slack in ((store_path("5.3.3", "crashed-small"), segment), (sparse_copy("5.3.3", "crashed-small", tmp_path), 4096)):
        totals.clear()
        assert run("dump", store, "-f", "jsonl").exit_code == 0
        assert run("stats", store, "-f", "json").exit_code == 0
        assert run("dump", store, "-f", "jsonl", "--from-offset", 1000000).exit_code == 0
        (_, d0, d1), (_, s0, s1), (_, f0, f1) = totals
        assert d0 == s0 == 0 and 1000000 <= f0 < 1000000 + 30000
        assert logical_end <= d1 == s1 == f1 < logical_end + slack  # before: 5242880, the end of the files


# ---- what info says first, what an interrupted apply leaves, restore twice -----------------------------


def hold_lock(store: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl,sys,time; f=open(sys.argv[1],'r+'); fcntl.lockf(f, fcntl.LOCK_EX); print('locked', flush=True); time.sleep(60)", str(store / "lock")],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_info_says_a_live_lock_and_an_interrupted_apply(tmp_path, monkeypatch):
    """Before: `info` on a store a running broker holds, or half-changed by an interrupted apply,
    said neither (only "lock file: present"); `verify` said both."""
    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")
    holder = hold_lock(store)
    try:
        shown = run("info", store, env={"COLUMNS": "100"})
        as_json = json.loads(run("info", store, "-f", "json").stdout)
    finally:
        holder.kill()
        holder.wait()
    assert shown.exit_code == 0 and shown.stderr.count("\n") == 1
    assert shown.stderr.startswith(f"mqtool: pid {holder.pid} holds the store's lock (a running broker?)")
    assert f"lock file present, HELD by pid {holder.pid} (a running broker?)" in " ".join(shown.stdout.split())
    assert as_json["lock_holder"] == holder.pid and as_json["interrupted_apply"] is None

    ctrl_c_after_the_first_file_operation(monkeypatch)
    backup = tmp_path / "my backup"
    error_line(run("recover", store, "--yes", "--backup-dir", backup), 130)
    shown = run("info", store, env={"COLUMNS": "100"})
    assert shown.exit_code == 0 and shown.stderr.count("\n") == 1
    line = shown.stderr.strip()
    assert line.startswith(f"mqtool: an apply on this store was interrupted (backup {shlex.quote(str(backup))})")
    assert shlex.split(line.split("undo it with: ", 1)[1]) == ["mqtool", "restore", str(backup), "--yes"]
    assert json.loads(run("info", store, "-f", "json").stdout)["interrupted_apply"] == str(backup)
    assert "lock file present interrupted apply backup" in " ".join(shown.stdout.split())


def test_a_failed_apply_names_a_restore_command_that_pastes_and_restore_cleans_up(tmp_path, monkeypatch):
    """Before: after a failed apply the executor printed `mqtool restore /x/my backup --yes`
    unquoted (the shell splits it at the space), and the temporary file the full disk left
    (`.mqtool-pending.mqtool-tmp`) stayed in the store, named by nothing (now the failed write
    removes it, and the apply, which changed nothing, says so; a kill in the middle of the write still leaves it)."""
    import errno

    from mqtool import fileops

    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")
    before = tree(store)
    real_replace = os.replace
    backup = tmp_path / "my backup"
    leftover = store / ".mqtool-pending.mqtool-tmp"
    for failing in (".mqtool-pending", "checkpoint"):  # the apply's first write, then one after it changed the store

        def full_disk(src, dst, *args, **kwargs):
            if Path(dst).name == failing:
                raise OSError(errno.ENOSPC, "No space left on device", str(dst))
            return real_replace(src, dst, *args, **kwargs)

        monkeypatch.setattr(fileops.os, "replace", full_disk)
        err = error_line(run("recover", store, "--yes", "--backup-dir", backup), EXIT_BAD_INPUT)
        monkeypatch.setattr(fileops.os, "replace", real_replace)
        assert not leftover.exists()  # a failed write removes its temporary file; a kill in the middle leaves it
        if failing == ".mqtool-pending":
            assert "the apply stopped before it changed the store" in err and "restore" not in err and tree(store) == before
    undo = shlex.split(err.split("undo it with: ", 1)[1])
    assert undo == ["mqtool", "restore", str(backup), "--yes"]
    assert run(*undo[1:]).exit_code == 0 and tree(store) == before
    leftover.write_text(str(backup))

    for command in (("info",), ("verify", "--only", "checkpoint")):
        said = run(*command, store).stderr
        assert "temporary files an interrupted mqtool left in the store: .mqtool-pending.mqtool-tmp;" in said, said
    restored = run(*undo[1:])
    assert restored.exit_code == 0 and "removed the temporary files an interrupted mqtool had left: .mqtool-pending.mqtool-tmp" in restored.stderr
    assert tree(store) == before
    assert "temporary files" not in run("info", store).stderr


def test_a_restore_stopped_by_a_full_disk_leaves_nothing_where_the_broker_loads_files(tmp_path, monkeypatch):
    """Before: `restore` copied each backed-up file to `<file>.mqtool-restore` in the file's own
    directory; stopped there (full disk, Ctrl-C), it left `00000000000000000000.mqtool-restore` in
    commitlog/, a name the broker refuses to start on, and nothing named it."""
    import errno

    from mqtool.apply import backup as backups

    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")
    before = tree(store)
    backup = tmp_path / "my backup"
    assert run("recover", store, "--yes", "--backup-dir", backup).exit_code == 0
    repaired = tree(store)
    real_put_back = backups._put_back  # a copy, or a hard link where the backup made one

    def full_disk(copy, tmp, how, copied=None):
        backups.copy_sparse(copy, tmp, copied)
        with open(tmp, "r+b") as f:
            f.truncate(os.path.getsize(tmp) // 2)
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))

    monkeypatch.setattr(backups, "_put_back", full_disk)
    error_line(run("restore", backup, "--yes"), EXIT_BAD_INPUT)
    monkeypatch.setattr(backups, "_put_back", real_put_back)
    staged = [rel for rel in tree(store) if rel not in before and rel not in repaired]
    assert staged and all(rel.startswith(".mqtool-staging/") or rel == ".mqtool-pending" for rel in staged), staged
    assert f"a restore on this store was interrupted (backup {shlex.quote(str(backup))}): the store is partly restored; finish it with: mqtool restore {shlex.quote(str(backup))} --yes" in run("info", store).stderr
    again = run("restore", backup, "--yes")
    assert again.exit_code == 0, again.stderr
    assert tree(store) == before


def test_apply_refuses_a_pending_store_with_a_command_that_pastes(tmp_path):
    from mqtool.apply import apply_plan
    from mqtool.apply.backup import write_pending
    from mqtool.errors import Refused
    from mqtool.recovery.plans import Plan

    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")
    plan = Plan.from_dict(json.loads(run("recover", store, "--dry-run", "-f", "json").stdout))
    (tmp_path / "a backup").mkdir()  # there: the apply can be undone (gone: test_undo's backup_is_gone)
    write_pending(store, tmp_path / "a backup")
    with pytest.raises(Refused) as refused:
        apply_plan(plan, tmp_path / "other backup")
    assert shlex.split(str(refused.value).split("undo it with: ", 1)[1]) == ["mqtool", "restore", str(tmp_path / "a backup"), "--yes"]


def test_restore_twice_says_there_is_nothing_to_restore(tmp_path):
    """Before: a second `restore --yes` copied the backup over the store again, silently; had a
    broker run since the first, what it wrote was thrown away."""
    store = copy_store("5.3.3", "crashed-small", tmp_path / "on call")
    backup = tmp_path / "my backup"
    assert run("recover", store, "--yes", "--backup-dir", backup).exit_code == 0
    first = run("restore", backup, "--yes")
    assert first.exit_code == 0 and "restored" in first.stderr
    restored_ms = json.loads(run("restore", backup, "-f", "json").stdout)["restored_ms"]
    assert isinstance(restored_ms, int)
    with open(store / "checkpoint", "r+b") as f:  # a broker started since writes its checkpoint
        f.write(b"\x01" * 8)
    after_broker = tree(store)
    for args in (("--yes",), ()):
        again = run("restore", backup, *args, env={"COLUMNS": "200"})
        assert again.exit_code == 0, again.stderr
        from mqtool.cli.output import iso_ms

        assert again.stderr.strip() == f"mqtool: nothing to restore: {shell_path(backup)} was already restored ({iso_ms(restored_ms)}); its files were put back then"
        assert f"restored yes, {iso_ms(restored_ms)}" in " ".join(again.stdout.split())
        assert "  restore " not in again.stdout  # no list of files it would put back
    assert tree(store) == after_broker


@pytest.mark.parametrize("given", ["empty dir", "a file.txt", "consumequeue"])
def test_not_a_store_says_what_was_expected_and_the_path(tmp_path, given, monkeypatch):
    """Before: `info DIR` said "DIR: not a RocketMQ store (no commitlog/, ...)" with the path as
    given, and a file not named by an offset was "a commit log segment is named by its 20-digit
    start offset", as if a segment had been meant."""
    store = copy_store("5.3.3", "clean-small", tmp_path)
    (tmp_path / "empty dir").mkdir()
    (tmp_path / "a file.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    path = Path(f"{store.name}/consumequeue") if given == "consumequeue" else Path(given)
    line = error_line(run("info", path), EXIT_BAD_INPUT)
    found = {"empty dir": "an empty directory", "a file.txt": "a file", "consumequeue": "a directory without commitlog/, consumequeue/, index/ or checkpoint"}[given]
    expected = (f"mqtool: error: {tmp_path / path}: not a RocketMQ store: expected a broker store directory (with commitlog/), "
                f"a commitlog/ folder or one segment file named by its 20-digit start offset; found {found}")
    assert line == expected + (f"; its store is probably {store}" if given == "consumequeue" else "")

    home = tmp_path / "rocketmq home"  # the broker's home given for its store/
    home.mkdir()
    store.rename(home / "store")
    line = error_line(run("info", home), EXIT_BAD_INPUT)
    assert line.endswith(f"; found a directory without commitlog/, consumequeue/, index/ or checkpoint; the store is probably {home / 'store'}")


ALL_COMMANDS = ["info", "dump", "verify", "stats", "offsets", "survivors", "salvage", *MY_COMMANDS[1:6], *MY_COMMANDS[7:]]


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_help_names_arguments_and_option_values_by_a_word_or_the_choices(command):
    """Before: `survivors --by <str>`, `--column <str>`, `stats --topic <list[str]>`, arguments
    followed by their type (`TOPIC <str>`, `QUEUE <int range>`, `STORE <path>`) and required
    ones in braces in the usage line (`{STORE}`), `stats`'s argument in lower case."""
    text = run(*command.split(), "--help", env={"COLUMNS": "100"}).stdout
    usage = text.splitlines()[0]
    assert "{" not in usage and usage.split("[OPTIONS] ", 1)[1].replace("[KIND] ", "").split()[0] in ("STORE", "PATH", "PLAN", "BACKUP")
    arguments = text.split("Arguments:")[1].split("Options:")[0]
    assert not any(t in arguments for t in ("<str>", "<int range>", "<path>", "<list[", "<int>"))
    options = text.split("Options:")[1]
    assert "<str>" not in options and "<list[" not in options and "<int range>" not in options and "<path>" not in options
    if command == "survivors":
        assert "--by <uniq-key|msg-id|key>" in options and "--column NAME" in options
    if command == "stats":
        assert "--topic TOPIC" in options and "--by <minute|hour|day>" in options


@pytest.mark.parametrize("typed, line", [
    (["dupm"], "mqtool: error: No such command 'dupm'. Did you mean 'dump'?; see 'mqtool --help'"),
    (["verfy"], "mqtool: error: No such command 'verfy'. Did you mean 'verify', 'query'?; see 'mqtool --help'"),
    (["zzz"], "mqtool: error: No such command 'zzz'; see 'mqtool --help'"),
    (["query", "ofset"], "mqtool: error: No such command 'ofset'. Did you mean 'offset'?; see 'mqtool query --help'"),
])
def test_a_mistyped_command_is_one_line_naming_the_commands_meant(typed, line):
    """Before: a mistyped top-level command got no "did you mean" (typer looks only at the commands
    loaded, and mqtool loads a command's module only when it runs)."""
    result = mqtool(*typed, store_path("5.3.3", "clean-small"))
    assert result.returncode == 2
    assert result.stderr.strip() == line


def test_info_with_a_broker_version_the_stores_marks_contradict_says_so():
    """Before: `info STORE --broker-version 5.3.3` on a 4.9.7 store showed "5.3.3 (given)" and an
    empty evidence row, while `recover` with the same option said the marks leave 4.9.1-4.9.8: an
    operator who passed the wrong release learnt it only from the plan."""
    store = store_path("4.9.7", "clean-small")
    wrong = json.loads(run("info", store, "--broker-version", "5.3.3", "-f", "json").stdout)["version"]
    assert wrong["label"] == "5.3.3 (given; the store's marks leave E10-E12 (4.9.1-4.9.8), not E18 (5.3.2-5.3.3): its rules are followed as given)"
    detected = json.loads(run("info", store, "-f", "json").stdout)["version"]
    assert wrong["evidence"] == detected["evidence"] and detected["evidence"]
    right = json.loads(run("info", store, "--broker-version", "4.9.7", "-f", "json").stdout)["version"]
    assert right["label"] == "4.9.7 (given)" and right["evidence"] == detected["evidence"]


def test_a_refusal_naming_a_process_whose_command_spans_lines_is_one_line(tmp_path):
    """Before: a store held by `python -c "<script of several lines>"` was refused with the
    script's lines in the error, three lines on stderr instead of one."""
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    script = "import fcntl, sys, time\nf = open(sys.argv[1], 'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\ntime.sleep(60)"
    holder = subprocess.Popen([sys.executable, "-c", script, str(store / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        for args in (("recover", "--yes"), ("repair",)):
            result = run(args[0], store, *args[1:])
            err = error_line(result, EXIT_REFUSED)
            assert result.stderr.count("\n") == 1, result.stderr
            assert f"pid {holder.pid} ({sys.executable} -c import fcntl, sys, time f = open(sys.argv[1], 'r+') fcntl.lockf" in err
    finally:
        holder.kill()
        holder.wait()


def test_salvage_and_survivors_say_an_interrupted_apply_and_a_live_lock_first(tmp_path, monkeypatch):
    """What `info` and `verify` tell a reader first, the two commands that answer "what survived"
    did not: before, `salvage` of a half-repaired store (an interrupted `recover --yes`) or of one a
    running broker holds listed its records as the store's, without a word."""
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text(manifest("5.3.3", "crashed-small")["messages"][0]["uniqKey"] + "\n")
    holder = hold_lock(store)
    try:
        said = [run("salvage", store, "-f", "csv").stderr, run("survivors", store, ids).stderr]
    finally:
        holder.kill()
        holder.wait()
    assert all(s.startswith(f"mqtool: pid {holder.pid} holds the store's lock (a running broker?)") for s in said), said

    ctrl_c_after_the_first_file_operation(monkeypatch)
    error_line(run("recover", store, "--yes", "--backup-dir", tmp_path / "backup"), 130)
    said = [run("salvage", store, "-f", "csv").stderr, run("survivors", store, ids).stderr]
    assert all(s.startswith(f"mqtool: an apply on this store was interrupted (backup {tmp_path / 'backup'})") for s in said), said


def test_recover_and_its_restore_name_what_they_did_as_it_was_done(tmp_path):
    """Before: restoring a `recover` said "deleted 1 file(s) the repair had created", and the
    applied step without one path was noted as "write-dispatch " with a trailing space."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    backup = tmp_path / "backup"
    applied = run("recover", store, "--yes", "--backup-dir", backup)
    assert applied.exit_code == 0, applied.stderr
    assert "mqtool:   write-dispatch\n" in applied.stderr and not [line for line in applied.stderr.splitlines() if line.endswith(" ")]
    restored = run("restore", backup, "--yes")
    assert restored.exit_code == 0, restored.stderr
    assert "mqtool: restored 4 file(s)/range(s), deleted 1 file(s) the recover had created" in restored.stderr.splitlines()


def test_dump_from_an_offset_past_the_files_says_no_segment_holds_it():
    """Before: `dump STORE --from-offset 99999999999` said "end of the commit log at offset
    99999999999 (no-segments)", as if the log ended there."""
    result = run("dump", store_path("4.9.7", "clean-small"), "--from-offset", 99999999999)
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == "mqtool: nothing to read at offset 99999999999: no commit log segment holds it (the files hold [0, 5242880))\n"


def test_a_store_on_a_read_only_filesystem_is_said_so_and_left_alone(tmp_path, monkeypatch):
    """Before: `recover STORE --yes` on a read-only mount said only "STORE/lock: Read-only file
    system" (the first file it opens to write), which does not say that nothing changed nor what to do."""
    import errno

    from repair_support import damage_index_entry

    store = copy_store("4.9.7", "crashed-small", tmp_path)
    damage_index_entry(store)  # an index file rebuild-index rewrites (it leaves alone one already holding its bytes)
    before = tree(store)
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if str(path).startswith(str(store)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    for command in ("recover", "repair", "rebuild-index"):
        err = error_line(run(command, store, "--yes", "--backup-dir", tmp_path / f"backup-{command}"), EXIT_BAD_INPUT)
        assert err == f"mqtool: error: {store}: on a read-only filesystem, nothing changed: remount it read-write, or copy the store and work on the copy"
    assert tree(store) == before


def test_a_store_whose_only_index_file_shows_no_geometry_is_still_read(tmp_path):
    """Damage seed 19 on 5.3.3 crashed-small (bits flipped in its one index file, the abort file
    emptied): the version detection read the index files for its marks, so `info`, `verify`,
    `salvage` and `survivors` all stopped with "cannot infer maxHashSlotNum/maxIndexNum" (exit 3)
    instead of noting the unreadable index as they do for any other store."""
    from damage_support import damage_copy

    root, _ = damage_copy("5.3.3", "crashed-small", 19, tmp_path)
    info = run("info", root, "-f", "json")
    assert info.exit_code == 0, info.stderr
    assert any("cannot infer maxHashSlotNum/maxIndexNum" in n for n in json.loads(info.stdout)["notes"])
    verify = run("verify", root, "-f", "jsonl")
    assert verify.exit_code == 1 and '"kind": "index-file-size"' in verify.stdout
    salvage = run("salvage", root, "-f", "jsonl")
    assert salvage.exit_code == 0 and len(salvage.stdout.splitlines()) == len(manifest("5.3.3", "crashed-small")["messages"])


def test_verify_counts_one_error_in_the_singular(tmp_path):
    """Before: "findings: 1 errors, 0 warnings" (damage seed 6 on 5.3.3 clean-small cuts an index file)."""
    store = copy_store("5.3.3", "clean-small", tmp_path)
    index = sorted((store / "index").iterdir())[-1]
    os.truncate(index, 48910)
    result = run("verify", store, env={"COLUMNS": "100"})
    assert result.exit_code == 1
    assert "  findings: 1 error, 0 warnings, 0 info (index-file-size: 1)" in result.stdout.splitlines()


def test_applying_a_saved_plan_twice_says_it_was_applied(tmp_path):
    """Before: `apply plan.json --yes` run again (was the first one done? the terminal dropped) said
    "commitlog/00000000000004194304 no longer exists: the store changed since the plan was made;
    plan again" (exit 4): its own apply had deleted that segment."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "on call")
    plan = tmp_path / "plan.json"
    assert run("recover", store, "--plan-out", plan).exit_code == 0
    assert run("apply", plan, "--yes").exit_code == 0
    after = tree(store)
    (backup,) = (tmp_path / "on call" / ".mqtool-backups").iterdir()
    again = run("apply", plan, "--yes")
    assert again.exit_code == 0, again.stderr
    line = again.stderr.splitlines()[-1]
    assert line.startswith(f"mqtool: this plan was applied already (backup {shlex.quote(str(backup))}); nothing changed")
    assert shlex.split(line.split("undo it with: ", 1)[1]) == ["mqtool", "restore", str(backup), "--yes"]
    assert tree(store) == after
    assert run("restore", backup, "--yes").exit_code == 0
    assert run("apply", plan, "--yes").exit_code == 0  # restored: the plan applies again


def test_salvage_names_damage_before_the_start_segment_once(tmp_path):
    """A 4.9.7 clean-small whose first segment is overwritten with 0xff (the README's first-screen
    example): before, salvage said "no valid record in [0, 1048576)" twice, the second time bare."""
    store = copy_store("4.9.7", "clean-small", tmp_path)
    (store / "commitlog" / "00000000000000000000").write_bytes(b"\xff" * (1 << 20))
    result = run("salvage", store, "-f", "csv")
    assert result.exit_code == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "[0, 1048576)" in line]
    assert said == ["mqtool: no valid record in [0, 1048576): the broker's next start never reads it and serves the records around it; "
                    "411 message(s) the consume queues point into it are lost"]


def test_a_msg_id_that_names_no_record_is_one_line_and_no_empty_table():
    """Before: `query msg-id` of an id whose offset holds no record start printed a table of twelve
    empty columns, its error wrapped one word a line, under the line that already said it."""
    store = store_path("5.3.3", "clean-small")
    first = min(manifest("5.3.3", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    inside = f"{first['msgId'][:16]}{first['commitLogOffset'] + 1:016X}"  # the same store host, one byte into the record
    result = run("query", "msg-id", store, inside, env={"COLUMNS": "100"})
    assert result.exit_code == 1 and result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"mqtool: offset {first['commitLogOffset'] + 1}: no record")
    rows = json.loads(run("query", "msg-id", store, inside, "-f", "json").stdout)
    assert [(r["offset"], r["key_matches"]) for r in rows] == [(first["commitLogOffset"] + 1, False)] and rows[0]["error"].startswith("no record")


def test_dump_msg_id_that_names_no_message_exits_1_as_query_does():
    """Before: `dump --msg-id` of an id naming no message printed nothing and exited 0, where `query
    msg-id` exits 1: a script could not tell a miss from a hit without reading stdout."""
    store = store_path("5.3.3", "clean-small")
    first = min(manifest("5.3.3", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    found = run("dump", store, "--msg-id", first["msgId"], "-f", "jsonl")
    assert found.exit_code == 0 and json.loads(found.stdout)["offset"] == first["commitLogOffset"]
    inside = f"{first['msgId'][:16]}{first['commitLogOffset'] + 1:016X}"  # one byte into the record
    other_host = "7F000001" + first["msgId"][8:]  # the record's offset, another store host (127.0.0.1)
    for msg_id, said in ((inside, "no message at offset"), (other_host, "another store host")):
        result = run("dump", store, "--msg-id", msg_id, "-f", "jsonl")
        assert result.exit_code == 1 and result.stdout == "" and said in result.stderr, result.stderr


def test_an_index_whose_geometry_cannot_be_inferred_names_what_to_pass(tmp_path):
    """Before: `repair` of a store whose only index file has its entries zeroed (damage seed 12 on
    5.3.3 crashed-small) said only "pass --broker-config": not which settings, nor the defaults."""
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    [index] = (store / "index").iterdir()
    data = bytearray(index.read_bytes())
    data[18690:] = bytes(len(data) - 18690)
    index.write_bytes(data)
    line = error_line(run("repair", store), EXIT_BAD_INPUT)
    assert line.endswith("pass --broker-config with the broker.conf that sets them (the defaults, 5000000 and 20000000, make files of 420000040 bytes)")


def test_verify_of_a_store_that_is_not_sound_names_the_commands_that_plan_what_next(tmp_path):
    """Before: `verify` on a crashed store ended with "the store is NOT sound" and nothing about
    what to run next; it now names `recover` and `repair` on the store, quoted to paste (a path
    with a space), and the pasted commands print their plans."""
    import shlex

    from conftest import copy_store

    store = copy_store("4.9.7", "crashed-small", tmp_path / "broker a")
    shown = run("verify", store, env={"COLUMNS": "100"})
    assert shown.exit_code == 1
    tail = " ".join(shown.stdout[shown.stdout.index("the store is NOT sound") :].split())
    pasted = [shlex.split(part.split("`")[1]) for part in tail.split("next: ", 1)[1].split(", ")[:2]]
    assert [argv[:2] for argv in pasted] == [["mqtool", "recover"], ["mqtool", "repair"]]
    assert all(argv[2:] == [str(store)] for argv in pasted)
    assert [run(*argv[1:]).exit_code for argv in pasted] == [4, 0]  # plans: nothing changed
    assert "next:" not in run("verify", copy_store("4.9.7", "clean-small", tmp_path / "clean")).stdout


def test_verify_of_a_half_applied_store_names_the_commands_that_finish_or_undo_it(tmp_path, monkeypatch):
    """Before: `verify -q` of a store an interrupted `recover --yes` left half-changed ended with "next:
    `mqtool recover STORE` ..., `mqtool repair STORE` ...", two commands that refuse such a store (exit 4),
    and (-q) no word of the interrupted apply: its next line now names the two that work."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "broker a")
    before = tree(store)
    ctrl_c_after_the_first_file_operation(monkeypatch)
    error_line(run("recover", store, "--yes", "--backup-dir", tmp_path / "my backup"), 130)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    shown = run("-q", "verify", store, env={"COLUMNS": "100"})
    assert shown.exit_code == 1 and shown.stderr == ""
    tail = " ".join(shown.stdout[shown.stdout.index("the store is NOT sound") :].split())
    assert "shows what the broker's next start will do" not in tail and tail.count("next: ") == 1, tail
    finish, undo = (shlex.split(part) for part in re.findall(r"run `([^`]*)` to finish it, or undo it with: (.*)$", tail)[0])
    assert finish == ["mqtool", "recover", str(store), "--yes"] and undo == ["mqtool", "restore", str(tmp_path / "my backup"), "--yes"]
    assert run("recover", store).exit_code == 4  # what it said before: refused until the apply is finished or undone
    assert run(*undo[1:]).exit_code == 0 and tree(store) == before


def test_an_interrupted_apply_of_a_saved_plan_is_finished_by_that_apply_again(tmp_path, monkeypatch):
    """Before: after `mqtool apply PLAN --yes` was interrupted, every line said to finish it with `mqtool recover STORE --yes`,
    a command the engineer had not run, which finishes the recorded apply, then plans anew and applies whatever that plan
    holds too. Now the line names the apply they ran, which finishes that plan and nothing more; where the plan file is
    gone, the plan's command still finishes it."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "broker a")
    plan_file = tmp_path / "saved plan.json"
    assert run("recover", store, "--plan-out", plan_file).exit_code == 0
    ctrl_c_after_the_first_file_operation(monkeypatch)
    error_line(run("apply", plan_file, "--yes", "--backup-dir", tmp_path / "my backup"), 130)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    tail = " ".join(run("-q", "verify", store, env={"COLUMNS": "100"}).stdout.split())
    finish, undo = (shlex.split(part) for part in re.findall(r"run `([^`]*)` to finish it, or undo it with: (.*)$", tail)[0])
    assert finish == ["mqtool", "apply", str(plan_file), "--yes"] and undo == ["mqtool", "restore", str(tmp_path / "my backup"), "--yes"]
    finished = run(*finish[1:])
    assert finished.exit_code == 0 and "that was this plan: it is now applied" in finished.stderr
    assert not (store / "abort").exists()
    assert run("restore", tmp_path / "my backup", "--yes").exit_code == 0
    ctrl_c_after_the_first_file_operation(monkeypatch)
    error_line(run("apply", plan_file, "--yes", "--backup-dir", tmp_path / "second backup"), 130)
    monkeypatch.setattr(executor, "durability_point", lambda label: None)
    plan_file.unlink()
    info = " ".join(run("info", store, env={"COLUMNS": "100"}).stderr.split())
    assert f"run `mqtool recover {shlex.quote(str(store))} --yes` to finish it" in info


def test_verify_of_a_store_whose_next_start_drops_messages_names_the_salvage_that_saves_them_first(tmp_path):
    """Before: on a store whose next start cuts valid messages (a body byte flipped in the third-from-last
    segment), `verify`'s next line named `recover` and `repair`, whose --yes zeroes those messages, and not
    `salvage`, which reads them only before that (1017 of the 1018, the damaged one aside; after `recover --yes` none)."""
    store = copy_store("4.9.7", "clean-small", tmp_path / "broker a")
    with open(store / "commitlog" / "00000000000002097152", "r+b") as f:
        f.seek(300000)
        f.write(b"\xff" * 4)
    dropped = json.loads(run("verify", store, "-f", "json").stdout)["summary"]["next_start"]["dropped_messages"]
    shown = " ".join(run("verify", store, env={"COLUMNS": "100"}).stdout.split())
    first = shown.split("first: `", 1)[1]
    argv = shlex.split(first.split("`", 1)[0])
    assert argv[:2] == ["mqtool", "salvage"] and argv[2] == str(store) and f"saves what is readable of the {dropped} message(s)" in first
    out = tmp_path / "saved.jsonl"
    saved = run(*[str(out) if a == "FILE" else a for a in argv[1:]])
    assert saved.exit_code == 1 and saved.stderr.count("its body CRC does not match") == 1  # the damaged record: skipped
    assert sum(json.loads(line)["status"] == "past-damage" for line in out.read_text(encoding="utf-8").splitlines()) == dropped - 1 > 0
    assert "first: " not in run("verify", copy_store("4.9.7", "crashed-small", tmp_path / "b")).stdout  # drops nothing


def test_a_broker_config_that_sets_nothing_mqtool_reads_is_said_to(tmp_path):
    """``--broker-config /etc/passwd`` (the wrong file) went by in silence: the store's own files
    decided and nothing said the file was not a broker.conf. A file with a setting mqtool reads
    gets no such note."""
    store = store_path("4.9.7", "crashed-small")
    wrong = tmp_path / "passwd"
    wrong.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    said = run("info", store, "--broker-config", wrong)
    assert said.exit_code == 0, said.output
    assert f"{wrong}: no setting mqtool reads is there" in said.stderr
    right = tmp_path / "broker.conf"
    right.write_text("brokerName=broker-a\nmappedFileSizeCommitLog=1048576\n")
    quiet = run("info", store, "--broker-config", right)
    assert quiet.exit_code == 0 and "no setting mqtool reads" not in quiet.stderr, quiet.output


def test_a_broker_config_naming_another_store_root_is_said_once(tmp_path):
    """``storePathRootDir`` of ``--broker-config`` was read and never used: a broker.conf of another store
    (the wrong STORE given) went by in silence. Said once a run when it names another directory; the
    STORE argument is still the store read. Naming the store itself (a trailing slash aside) says nothing."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    other = tmp_path / "broker.conf"
    other.write_text("storePathRootDir=/data/rocketmq/store\n")
    plan = run("recover", store, "--broker-config", other, "--dry-run", "-f", "json")
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout)["commitlog"]["valid_end"] == recovered("4.9.7", "crashed-small")["commitLog"]["maxOffset"]
    said = [line for line in plan.stderr.splitlines() if "storePathRootDir" in line]
    assert said == [f"mqtool: {other}: storePathRootDir=/data/rocketmq/store, but the store read is {store}: "
                    "if it is not a copy of that store, check the STORE argument"]
    assert run("repair", store, "--broker-config", other).stderr.count("storePathRootDir") == 1
    own = tmp_path / "own.conf"
    own.write_text(f"storePathRootDir={store}/\n")
    quiet = run("recover", store, "--broker-config", own, "--dry-run")
    assert quiet.exit_code == 0 and "storePathRootDir" not in quiet.stderr, quiet.output


def test_a_backup_that_cannot_start_leaves_no_directory_behind(tmp_path):
    """``recover --yes --backup-dir FULL/bk`` on a full disk said "cannot create the backup ...
    nothing was changed" (exit 3) but left the empty ``bk/`` (and the directories made for it)
    behind. Every write fails here as on a full disk (``RLIMIT_FSIZE`` 0, ``EFBIG``)."""
    import resource
    import signal

    store = copy_store("4.9.7", "crashed-small", tmp_path / "store")
    before = tree(store)
    target = tmp_path / "new" / "bk"

    def no_writes():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    done = subprocess.run([sys.executable, "-m", "mqtool", "recover", str(store), "--yes", "--backup-dir", str(target)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=ROOT, preexec_fn=no_writes)
    assert done.returncode == EXIT_BAD_INPUT, done.stderr
    assert "cannot create the backup" in done.stderr and "nothing was changed" in done.stderr, done.stderr
    assert not (tmp_path / "new").exists() and tree(store) == before


@pytest.mark.parametrize("inside", [True, False])
def test_sigbus_while_applying_says_how_to_finish_or_undo(inside):
    """A SIGBUS during ``recover --yes`` on a full tmpfs said only "check the disk and run the
    command again", not that the store may be partly changed nor how to undo it. Inside the
    apply's block, once its backup set exists (``said_changing``), the line says both; after it, the usual line is back."""
    code = ("import os, signal; from pathlib import Path; from mqtool.store.mappedfile import exit_on_sigbus; "
            "from mqtool.cli.repair import explain_interrupt, said_changing; exit_on_sigbus(); "
            "root, backup = Path('/data/on call/store'), Path('/data/my backup'); block = explain_interrupt(root, backup); "
            "block.__enter__(); said_changing(root, backup)(); " + ("" if inside else "block.__exit__(None, None, None); ")
            + "os.kill(os.getpid(), signal.SIGBUS)")
    done = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert done.returncode == EXIT_BAD_INPUT and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("mqtool: error: a store file could not be read through its memory map (SIGBUS")
    if inside:
        assert "the store may be partly changed: `mqtool info '/data/on call/store'` says whether an apply was interrupted" in done.stderr
        assert shlex.split(done.stderr.rsplit("undo it with: ", 1)[1]) == ["mqtool", "restore", "/data/my backup", "--yes"]
    else:
        assert done.stderr.endswith("; check the disk and run the command again\n")


def test_no_help_splits_an_option_name_at_a_hyphen():
    """``dump --help`` at 100 columns split "--broker-" / "version" in the prose naming each
    KIND's options (click wraps at hyphens); that list is now a block of its own, as is the default
    backup folder of the repair commands. Every command's help at 80, 100 and 120 columns keeps
    each option name and path it mentions whole. In this process: a terminal of COLUMNS columns is
    click's help width COLUMNS - 2 (``HelpFormatter``), the text a fresh ``mqtool`` prints there."""
    import re

    commands = [m[1] for m in re.finditer(r"^  ([a-z][a-z-]+)  +\S", run("--help").stdout, re.M)]
    assert "dump" in commands and "rebuild-cq" in commands and "mqtool" not in commands
    split = re.compile(r"\w-$")  # an option name or a path (``.mqtool-`` / ``backups``) broken at its hyphen
    for columns in (80, 100, 120):
        for command in commands:
            shown = runner.invoke(app, [command, "--help"], terminal_width=columns - 2)
            assert shown.exit_code == 0, (command, shown.stderr)
            assert not [line for line in shown.stdout.splitlines() if split.search(line.rstrip())], (command, columns)


@pytest.mark.parametrize("columns", [60, 80, 100])
def test_info_keeps_each_key_of_its_tables_on_one_line(tmp_path, monkeypatch, columns):
    """Before: with a store path a little narrower than the terminal (12 columns less: 48 characters at 60 columns, as the
    fixtures' own path, 88 in a 100-column tmux) the Store table's path took the room its keys needed, the key column narrowed
    to its longest word: "abort file" printed as "abort" beside the value and "file" alone on the next line (so "broker
    version", "lock file"), read as a row of its own. Each key of info's key/value tables (Store, Checkpoint, Commit log, Timer
    store) stays whole on its row's first line; the values wrap, a word longer than their room (the path) running past the
    edge whole."""
    folder = "d" * (columns - 12 - len("/5.3.3-timer-crashed"))
    copy_store("5.3.3", "timer-crashed", tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    shown = run("info", f"{folder}/5.3.3-timer-crashed", env={"COLUMNS": str(columns)})
    assert shown.exit_code == 0, shown.stderr
    blocks = {block.splitlines()[0]: block.splitlines()[1:] for block in shown.stdout.split("\n\n")}
    kv = {title: lines for title, lines in blocks.items() if not any(line.startswith(("---", "-[ RECORD")) for line in lines[:2])
          and not title.startswith("note:")}
    assert {"Store", "Checkpoint", "Commit log", "Timer store"} <= set(kv), list(blocks)
    for title, lines in kv.items():
        for line in lines:  # a row's first line: its key, two spaces or more, its value; else a value's continuation
            assert line.startswith(" ") or re.match(r"\S.*?\S {2,}\S", line), (columns, title, line)
    keys = [line.split("  ")[0] for line in kv["Store"] if not line.startswith(" ")]
    assert keys == ["path", "broker version", "undecided", "evidence", "abort file", "lock file"], (columns, keys)


def test_a_path_with_spaces_is_one_line_of_the_plan_and_backup_tables_at_60_columns(tmp_path):
    """Before: at 60 columns the backup table's ``backup`` row read ``my`` and, on the next line,
    ``store/.mqtool-backups/...``: two things. The store's and the backup's paths are shown quoted,
    as typed in a shell, one word the tables never break."""
    store = copy_store("4.9.7", "crashed-small", tmp_path / "my store")
    env = {**os.environ, "COLUMNS": "60"}
    recover = mqtool("recover", str(store), "--yes", "--broker-version", "4.9.7", env=env)
    assert recover.returncode == 0, recover.stderr
    assert f"store           {shlex.quote(str(store))}\n" in recover.stdout
    (backup,) = (tmp_path / "my store" / ".mqtool-backups").iterdir()
    shown = mqtool("restore", str(backup), env=env)
    assert f"backup            {shlex.quote(str(backup))}\n" in shown.stdout
    assert f"store             {shlex.quote(str(store))}\n" in shown.stdout
    info = mqtool("info", str(store), env=env)
    assert f"path            {shlex.quote(str(store))}\n" in info.stdout
