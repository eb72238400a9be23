"""The command line as people use it (issue #11 §3-4): tables that never cut a number or an id at
100 or 80 columns (piped with COLUMNS, or in a real terminal), one-line usage errors with exit 2,
quiet exit 0 into a closed pipe, pasteable shell-quoted commands, ``info`` without consume queues."""

from __future__ import annotations

import collections
import functools
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, store_path, terminal_run
from mqtool.cli import app
from mqtool.cli.output import heading, iso_ms
from mqtool.errors import EXIT_USAGE

runner = CliRunner()
WIDTHS = (100, 80)
DROPPED = re.compile(r"not shown at (\d+) columns: (.*) \(--format json")
MQTOOL = [sys.executable, "-m", "mqtool"]


def run(*args, width: int | None = None, **env):
    environ = {"COLUMNS": str(width)} if width else {}
    environ.update(env)
    return runner.invoke(app, [str(a) for a in args], env=environ)


def dropped_columns(stderr: str) -> set[str]:
    found = set()
    for m in DROPPED.finditer(stderr):
        found.update(c.strip() for c in m.group(2).split(","))
    return found


def shows_whole(text: str, value) -> bool:
    """``value`` (a number, an id, a word or words) appears in ``text`` with no character cut off."""
    if value is None or value == "" or value == []:
        return True
    if isinstance(value, list):
        return all(shows_whole(text, v) for v in value)
    return all(w in words(text) if EDGE_RUN.fullmatch(w) else re.search(f"(?<!{EDGE})" + re.escape(w) + f"(?!{EDGE})", text) for w in str(value).split())


EDGE = r"[^\s(),;\[\]]"  # a value must not touch anything but spaces, brackets and separators
EDGE_RUN = re.compile(f"{EDGE}+")


@functools.lru_cache(maxsize=4)
def words(text: str) -> frozenset[str]:
    """The runs of ``text`` between spaces, brackets and separators: a word of such characters alone is
    shown whole exactly where it is one of them (the search above, once per text, not per value)."""
    return frozenset(EDGE_RUN.findall(text))


def assert_fits(text: str, width: int) -> None:
    """Every line fits, or it overflows with a word too long for any layout (run past the edge whole), or with a
    command holding a word wider than the line (kept whole, so that the terminal's own wrap pastes it as one)."""
    for line in text.splitlines():
        if len(line) > width:
            words = line.split()
            assert len(words[-1]) > width // 2 or (max(map(len, words)) > width and "`mqtool " in line), f"line of {len(line)} > {width} columns: {line!r}"


# ---- tables that never lie -------------------------------------------------------------------


@pytest.mark.parametrize("version, width", [("4.9.7", 100), ("5.3.3", 80)])
def test_dump_table_shows_every_value_whole(version, width):
    store = store_path(version, "clean-small")
    rows = json.loads(run("dump", store, "-f", "json", "-n", 450).stdout)  # three batches of the table
    table = run("dump", store, "-n", 450, width=width)
    assert table.exit_code == 0
    dropped = dropped_columns(table.stderr)  # the headings: the fields in words
    assert dropped < {"size", "uniq key", "tags", "stored", "keys", "queue offset"}
    assert_fits(table.stdout, width)
    text = table.stdout
    for row in rows:
        assert shows_whole(text, row["offset"]) and shows_whole(text, row["msg_id"]) and shows_whole(text, row["topic"])
        for column in {"queue_offset", "uniq_key", "keys", "tags", "size"}:
            if heading(column) not in dropped:
                assert shows_whole(text, row[column]), (column, row[column])
        if "stored" not in dropped:
            assert shows_whole(text, iso_ms(row["store_timestamp"]))


def test_dump_drops_columns_with_a_note_when_topics_are_short():
    """At 100 columns the 56-character msg ids of IPv6 hosts still fit beside offset, topic and
    queue (at 80 they do not: vertical records, tested above)."""
    width = 100
    m = manifest("4.9.7", "clean-small")
    store = store_path("4.9.7", "clean-small")
    table = run("dump", store, "--topic", "TopicTest", width=width)
    rows = json.loads(run("dump", store, "--topic", "TopicTest", "-f", "json").stdout)
    assert len(rows) == sum(x["topic"] == "TopicTest" for x in m["messages"])
    assert any(len(r["msg_id"]) == 56 for r in rows)
    assert "RECORD" not in table.stdout and "size" in dropped_columns(table.stderr)  # a table, not records
    header = table.stdout.splitlines()[0].split()
    assert header[:2] == ["offset", "queue"] and header[-1] == "topic"  # the topic last: a long one runs past the edge
    assert_fits(table.stdout, width)
    assert all(len(line) <= width for line in table.stdout.splitlines())
    for row in rows:
        assert shows_whole(table.stdout, row["msg_id"]) and shows_whole(table.stdout, row["offset"])


@pytest.mark.parametrize("width", (100, 60))
def test_dump_consumequeue_and_index_tables(width):
    store = store_path("5.3.3", "clean-small")
    for args in (("consumequeue", store), ("index", store)):
        rows = json.loads(run("dump", *args, "-f", "json", "-n", 300).stdout)
        table = run("dump", *args, "-n", 300, width=width)
        assert table.exit_code == 0 and rows
        dropped = dropped_columns(table.stderr)
        assert_fits(table.stdout, width)
        for row in rows:
            for column, value in row.items():
                if heading(column) not in dropped and column != "filler":
                    assert shows_whole(table.stdout, value), (column, value)


@pytest.mark.parametrize("name, width", [("clean-small", 80), ("crashed-small", 100)])
def test_info_table_shows_every_figure_whole(name, width):
    store = store_path("4.9.7", name)
    doc = json.loads(run("info", store, "-f", "json").stdout)
    table = run("info", store, width=width)
    assert table.exit_code == 0
    text = table.stdout
    assert_fits(text, width)
    for topic, t in doc["topics"].items():
        line = next(line for line in text.splitlines() if line.endswith(" " + topic))
        assert line.split()[:2] == [str(t["messages"]), str(t["queues"])]
    for q in doc["queues"]:
        assert any(line.split() == [str(q[k]) for k in ("queue_id", "min_offset", "max_offset", "messages", "files")] + [q["topic"]] for line in text.splitlines())
    assert shows_whole(text, doc["commitlog"]["max_offset"]) and shows_whole(text, doc["commitlog"]["scan_from"])
    for s in doc["commitlog"]["segments"]:
        assert shows_whole(text, s["name"] + ",") or shows_whole(text, s["name"])
    dropped = dropped_columns(table.stderr)
    for f in doc["index"]["files"]:
        assert shows_whole(text, f["name"]) and shows_whole(text, f["entries"])
        assert shows_whole(text, f"{f['begin_phy_offset']}..{f['end_phy_offset']}")
        assert "slots used" in dropped or shows_whole(text, f["hash_slot_count"])
    for key in ("physic_msg_timestamp", "logics_msg_timestamp", "index_msg_timestamp"):
        assert shows_whole(text, f"({doc['checkpoint'][key]})")


@pytest.fixture
def cut_store(tmp_path):
    """A copy of 4.9.7 crashed-small whose record in the middle lost its magic code: recovery cuts
    the log there and every later message is lost."""
    store = copy_store("4.9.7", "crashed-small", tmp_path)
    m = manifest("4.9.7", "crashed-small")
    victim = m["messages"][len(m["messages"]) // 2]
    seg = store / "commitlog" / f"{victim['commitLogOffset'] // (1 << 20) * (1 << 20):020d}"
    with open(seg, "r+b") as f:
        f.seek(victim["commitLogOffset"] % (1 << 20) + 4)
        f.write(bytes(4))
    return store, victim


@pytest.mark.parametrize("width", WIDTHS)
def test_recover_plan_table_shows_every_lost_message_whole(cut_store, width):
    store, victim = cut_store
    plan = json.loads(run("recover", store, "--dry-run", "-f", "json").stdout)
    lost = plan["lost"]["messages"]
    assert lost and plan["commitlog"]["valid_end"] == victim["commitLogOffset"] and lost[0]["offset"] > victim["commitLogOffset"]
    table = run("recover", store, "--dry-run", width=width)
    assert table.exit_code == 0
    text = table.stdout
    assert_fits(text, width)
    dropped = dropped_columns(table.stderr)
    for m in lost[:50]:  # the table lists 50, JSON all
        assert shows_whole(text, m["offset"]) and shows_whole(text, m["msg_id"]) and shows_whole(text, m["topic"])
        assert "uniq key" in dropped or shows_whole(text, m["uniq_key"])
        assert "queue offset" in dropped or shows_whole(text, m["queue_offset"])
    for q in plan["queues"]:
        if q["max_before"] != q["max_after"]:
            assert shows_whole(text, q["topic"]) and shows_whole(text, f"{q['max_before']} -> {q['max_after']}")
    for a in plan["actions"]:
        assert shows_whole(text, a["path"])


@pytest.mark.parametrize("width", WIDTHS)
def test_verify_findings_are_whole(width):
    store = store_path("4.9.7", "crashed-small")
    doc = json.loads(run("verify", store, "-f", "json").stdout)
    text = run("verify", store, width=width).stdout
    assert doc["findings"]
    for f in doc["findings"]:
        assert shows_whole(text, f["kind"]) and shows_whole(text, f["message"]) and shows_whole(text, f["file"])
    assert_fits(text, width)


def in_terminal(args, columns=100, env=None, timeout=300) -> str:
    """Run mqtool with stdout and stderr on a pseudo-terminal of ``columns`` x 40; its output."""
    return terminal_run(args, columns, env, timeout)[1]


def test_in_a_terminal_tables_fit_its_width_and_bold_headers_obey_no_color():
    store = store_path("5.3.3", "clean-small")
    shown = in_terminal(["dump", store, "--topic", "TopicTest", "-n", 30, "--no-progress"], columns=100)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "\x1b[1m" in shown and "not shown at 100 columns" in plain
    rows = json.loads(run("dump", store, "--topic", "TopicTest", "-n", 30, "-f", "json").stdout)
    assert all(shows_whole(plain, r["msg_id"]) for r in rows) and all(len(line) <= 100 for line in plain.splitlines() if not line.startswith("mqtool: "))
    assert "\x1b[" not in in_terminal(["dump", store, "--topic", "TopicTest", "-n", 30], columns=100, env={"NO_COLOR": "1"})


def test_progress_bars_are_cleared_before_findings():
    shown = in_terminal(["verify", store_path("4.9.7", "crashed-small"), "--progress", "--only", "index", "--only", "checkpoint"], columns=100)
    assert "WARNING" in shown
    for line in shown.split("\n"):
        visible = line.split("\r")[-1]  # what stays on screen after carriage returns
        assert not ("WARNING" in visible and "B/s" in visible), line


def test_data_written_to_a_file_leaves_the_progress_bar_alone(tmp_path):
    """``salvage --out FILE`` in a terminal: the bar stays drawn while rows go to the file (each
    write used to erase it), and is gone at the end; rows written to the terminal erase it first."""
    from mqtool.cli import terminal

    class Bar:
        cleared = 0

        def clear(self):
            Bar.cleared += 1

    class Screen(io.StringIO):
        def isatty(self):
            return True

    bar = Bar()
    terminal.show_bar(bar)
    try:
        terminal.data_stream(io.StringIO()).write("to a file\n")
        assert Bar.cleared == 0
        terminal.data_stream(Screen()).write("to the terminal\n")
        assert Bar.cleared == 1
    finally:
        terminal.hide_bar(bar)
    out = tmp_path / "rows.jsonl"
    shown = in_terminal(["salvage", store_path("4.9.7", "clean-small"), "--progress", "-f", "jsonl", "--out", out], columns=100)
    assert "salvaged" in shown and len(out.read_text().splitlines()) == len(manifest("4.9.7", "clean-small")["messages"])


# ---- the command line people expect ---------------------------------------------------------


def test_usage_errors_are_one_line_with_exit_2(tmp_path):
    store = store_path("4.9.7", "clean-small")
    cases = [
        ("dump", store, "--queue", "-1"),
        ("dump", store, "--from-offset", "-5"),
        ("dump", store, "--since", "2030-01-01", "--until", "2020-01-01"),
        ("dump", store, "--from-offset", "2000", "--to-offset", "1000"),
        ("dump", store, "--bogus"),
        ("dump", store, "--limit", "-1"),
        ("dump", "consumequeue", store, "--tag", "TagA"),
        ("dump", "consumequeue", store, "--key", "k", "--since", "0"),
        ("dump", "consumequeue", store, "--body", "hex"),
        ("dump", "index", store, "--uniq-key", "X"),
        ("dump", "index", store, "--topic", "TopicTest"),
        ("dump", "commitlog", store, "--follow"),
        ("dump", "checkpoint", store, "--limit", "3"),
        ("dump", store, "--msg-id", "C0A8016400002A9F0000000000000000", "--from-offset", "0"),
        ("info", store, "--broker-version", "abc"),
        ("info",),
        ("info", store, "--format", "yaml"),
        ("verify", store, "--jobs", "0"),
        ("recover", store, "--lost-limit", "-1"),
        ("rebuild-cq", store, "--queue", "-2"),
        ("nonsense",),
    ]
    for args in cases:
        result = run(*args)
        err = result.stderr.strip()
        assert result.exit_code == EXIT_USAGE, (args, result.output)
        assert "\n" not in err and err.startswith("mqtool: error: ") and "╭" not in err, (args, err)
        assert result.stdout == "", args


def test_limit_zero_prints_nothing():
    store = store_path("5.3.3", "clean-small")
    for kind in ((), ("consumequeue",), ("index",)):
        args = ("dump", *kind, store, "--limit", "0")
        assert run(*args).stdout == "" and run(*args, "-f", "jsonl").stdout == ""
        assert json.loads(run(*args, "-f", "json").stdout) == []


def test_global_options_after_the_command():
    store = store_path("5.3.3", "clean-small")
    loud = run("dump", store, "-n", "1")
    assert all("end of the commit log" in line or "not shown at" in line for line in loud.stderr.splitlines())
    quiet = run("dump", store, "-n", "5", "-q", "--topic", "TopicTest")
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout
    assert run("--quiet", "dump", store, "-n", "1", "--topic", "TopicTest").stderr == ""
    for args in (("info", store, "-V"), ("-V",), ("dump", "--version")):
        result = run(*args)
        assert result.exit_code == 0 and result.stdout.startswith("mqtool "), args
    assert "--install-completion" in run("--help").stdout


def test_help_shows_flags_as_flags_and_an_example_for_every_command():
    listing = run("--help").stdout.split("Commands:\n")[1].split("\n\n")[0]
    commands = [line.split()[0] for line in listing.splitlines() if not line.startswith("   ")]  # a summary's wrapped lines aside
    assert {"info", "dump", "verify", "recover", "restore"} <= set(commands)
    for command in commands:
        text = run(command, "--help", width=100).stdout
        assert "Example" in text and f"mqtool {command}" in text, command
        assert "<bool>" not in text and "╭" not in text, command
        assert re.search(r"-q, --quiet\s", text), command


def test_a_closed_pipe_exits_0_quietly():
    """``mqtool dump ... | head -1`` in every format, through a real pipe."""
    store = store_path("5.3.3", "clean-small")
    for command in (["dump", store, "--body", "base64"], ["info", store], ["verify", store]):
        for fmt in ("table", "json", "jsonl", "csv"):
            proc = subprocess.Popen(MQTOOL + [str(c) for c in command] + ["-f", fmt], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            first = proc.stdout.readline()
            proc.stdout.close()
            err = proc.stderr.read().decode()
            assert proc.wait(timeout=300) == 0 and first, (command, fmt)
            assert not re.search(r"Traceback|BrokenPipe|Broken pipe|Exception|mqtool: error", err), (command, fmt, err)


def test_pasted_commands_are_shell_quoted(tmp_path):
    parent = tmp_path / "on call" / "bröker a"
    parent.mkdir(parents=True)
    store = copy_store("5.3.3", "crashed-small", parent)
    plan_file = parent / "the plan.json"
    saved = run("recover", store, "--plan-out", plan_file)
    assert saved.exit_code == 0
    apply_cmd = shlex.split(saved.stderr.split("apply it with: ", 1)[1].splitlines()[0])
    assert apply_cmd[:2] == ["mqtool", "apply"] and Path(apply_cmd[2]) == plan_file
    applied = run(*apply_cmd[1:])
    assert applied.exit_code == 0 and not (store / "abort").exists(), applied.stderr
    restore_cmd = shlex.split(applied.stderr.split("undo with: ", 1)[1].splitlines()[0])
    assert restore_cmd[:2] == ["mqtool", "restore"] and " " in restore_cmd[2]
    assert run(*restore_cmd[1:]).exit_code == 0 and (store / "abort").exists()


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3"))
def test_info_without_consume_queues_lists_topics_from_the_commit_log(tmp_path, version):
    store = copy_store(version, "clean-small", tmp_path)
    for child in (store / "consumequeue").iterdir():
        subprocess.run(["rm", "-rf", str(child)], check=True)
    (store / "consumequeue").rmdir()
    m = manifest(version, "clean-small")
    counts = collections.Counter(x["topic"] for x in m["messages"])
    queues = collections.defaultdict(set)
    for x in m["messages"]:
        queues[x["topic"]].add(x["queueId"])
    doc = json.loads(run("info", store, "-f", "json").stdout)
    assert doc["topics_source"] == "commitlog" and doc["queues"] == []
    assert {t: v["messages"] for t, v in doc["topics"].items()} == dict(counts)
    assert {t: v["queues"] for t, v in doc["topics"].items()} == {t: len(q) for t, q in queues.items()}
    assert any("no consume queues" in n for n in doc["notes"])
    table = run("info", store, width=100).stdout
    assert "MISSING" in table and "from the commit log" in table
    for topic, count in counts.items():
        assert any(line.split()[:1] == [str(count)] and line.endswith(" " + topic) for line in table.splitlines())
