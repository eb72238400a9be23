"""What an on-call engineer reads in a table cell, a plan line and a time column, and the broker.conf values refused
as bad input (stop 50's audit of table.py, cli/output.py, cli/query.py, cli/repair.py's plan, store/config.py)."""

from __future__ import annotations

import csv
import io
import itertools
import json
from datetime import datetime, timezone

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, store_path
from mqtool.cli import app

runner = CliRunner()


def run(*args, columns=100):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})


def _body_rewritten(tmp_path, bait: bytes):
    """A copy of 4.9.7 ``clean-small`` whose first message's body starts with ``bait`` (its CRC no longer matches)."""
    first = min(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    store = copy_store("4.9.7", "clean-small", tmp_path / "s")
    segment = store / "commitlog" / "00000000000000000000"
    body = json.loads(run("dump", store, "-n", "1", "--body", "utf8", "-f", "jsonl").stdout)["body"].encode()
    data = segment.read_bytes()
    at = data.index(body, first["commitLogOffset"], first["commitLogOffset"] + first["size"])
    segment.write_bytes(data[:at] + bait + data[at + len(bait):])
    return store


@pytest.mark.parametrize("columns", [100, 40])  # a row, and vertical records
def test_a_body_holding_newlines_stays_one_line_of_its_cell(tmp_path, columns):
    """A body holding ``\\n-[ RECORD 2 ]---\\ntopic | Forged``: ``dump --body utf8`` drew its lines into the table as they
    are, a record separator and a row no record has. A table cell shows a newline written out (``\\n``); JSON keeps it."""
    bait = b"x\n-[ RECORD 2 ]---\ntopic | Forged\n"
    store = _body_rewritten(tmp_path, bait)
    assert json.loads(run("dump", store, "-n", "1", "--body", "utf8", "-f", "jsonl").stdout)["body"].startswith(bait.decode())
    rows = list(csv.DictReader(io.StringIO(run("dump", store, "-n", "1", "--body", "utf8", "-f", "csv").stdout)))
    assert rows[0]["body"].startswith(bait.decode())
    res = run("dump", store, "-n", "1", "--body", "utf8", columns=columns)
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert sum(line.startswith("-[ RECORD") for line in lines) == (columns == 40)  # the one record's banner, vertical
    values = [line.lstrip(" |") for line in lines if line.startswith(" ")]  # a row's continuation, a record's value
    assert not [v for v in values if v.startswith(("-[ RECORD", "topic | Forged"))], res.stdout
    assert "x\\n-[" in res.stdout and "Forged\\n" in res.stdout


@pytest.mark.parametrize("setting", ["maxHashSlotNum=0", "maxHashSlotNum=-5", "maxIndexNum=0", "maxIndexNum=-1"])
def test_an_index_size_no_broker_can_write_is_one_line_of_bad_input(tmp_path, setting):
    """``--broker-config`` with ``maxHashSlotNum=0`` was silently not used (the index read by its files' geometry, exit 0);
    with ``-5`` (and ``maxIndexNum`` given) verify ended in "internal error: ValueError: negative dimensions", exit 5;
    ``maxIndexNum`` likewise. Now refused as the impossible file sizes are: one line, exit 3."""
    key, value = setting.split("=")
    other = "maxIndexNum=4000" if key == "maxHashSlotNum" else "maxHashSlotNum=1000"
    conf = tmp_path / "broker.conf"
    conf.write_text(f"brokerName=broker-a\n{setting}\n{other}\n")
    res = run("verify", store_path("4.9.7", "clean-small"), "--broker-config", conf)
    assert (res.exit_code, res.stdout) == (3, "")
    assert res.stderr.startswith(f"mqtool: error: broker config: {key}='{value}' is an impossible index size: "
                                 "a broker given it can write no index entry")
    assert res.stderr.count("\n") == 1


def test_query_time_at_0_shows_the_time_asked():
    """``query time STORE TopicTest 0 0``'s table showed its ``timestamp`` (the TIME asked, 0 in the JSON) as ``-``, which reads
    as no time at all; it is the epoch, the time the answer (the queue's first entry, 4.x nearest) was looked up for."""
    store = store_path("4.9.7", "clean-small")
    doc = json.loads(run("query", "time", store, "TopicTest", 0, 0, "-f", "json").stdout)[0]
    assert (doc["timestamp"], doc["queue_offset"]) == (0, doc["queue_min_offset"])
    res = run("query", "time", store, "TopicTest", 0, 0, columns=60)
    assert res.exit_code == 0, res.output
    rows = dict(line.split(" | ", 1) for line in res.stdout.splitlines() if " | " in line)
    rows = {k.strip(): v for k, v in rows.items()}
    assert rows["timestamp"] == "1970-01-01T00:00:00.000Z"
    stored = datetime.fromtimestamp(doc["message_store_timestamp"] / 1000, timezone.utc)
    assert rows["message store timestamp"] == stored.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    assert rows["queue offset"] == str(doc["queue_offset"])


@pytest.mark.parametrize("columns", [80, 100])
def test_the_plans_scan_line_never_ends_in_a_bare_no(columns):
    """At 80 columns ``recover``'s plan of 4.9.7 ``crashed-small`` read ``scan  from 0: no``, the rest of the rule on the lines
    below, like a yes/no answer: the apostrophes of "segment's ... checkpoint's" were taken for shell quotes, making the
    words between them one word that could not follow "no". An apostrophe inside a word quotes nothing."""
    store = store_path("4.9.7", "crashed-small")
    plan = json.loads(run("recover", store, "--dry-run", "-f", "json").stdout)["commitlog"]
    assert plan["scan_rule"].startswith("no segment's first record is older than the checkpoint's")
    lines = run("recover", store, "--dry-run", columns=columns).stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("scan "))
    indent = len(lines[at]) - len(lines[at][4:].lstrip())
    row = [lines[at], *itertools.takewhile(lambda line: line[:indent].isspace(), lines[at + 1:])]
    assert " ".join(line[indent:] for line in row) == f"from {plan['scan_from']}: {plan['scan_rule']}"
    assert all(len(line) <= columns for line in row), row
    assert f"from {plan['scan_from']}: no segment's first record" in lines[at]
    assert not any(line.endswith((" no", ": no")) for line in row), row
