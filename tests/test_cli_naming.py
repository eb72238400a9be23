"""One name for one thing across the commands (issue #30): the store-time window is ``--since`` /
``--until`` for ``dump`` and ``query`` alike (``query``'s old ``--begin`` / ``--end`` still work,
unlisted), and a field every table shows has one heading (``queue``, ``queue offset``, ``stored``,
``msg_id``, ``uniq_key``) in ``dump``, ``salvage``, ``survivors``, ``query`` and ``stats``; JSON field
names do not change."""

from __future__ import annotations

import json
import re

import pytest
from conftest import copy_store, recovered, store_path
from typer.testing import CliRunner

from mqtool.cli import app

WIDE = {"COLUMNS": "400"}  # every column fits: no heading dropped


def invoke(*argv: str):
    return CliRunner().invoke(app, list(argv), env=WIDE)


def headings(table: str) -> list[str]:
    """The column headings of a horizontal table: its first line, split at runs of two spaces."""
    line = next(line for line in table.splitlines() if line.strip())
    return [h.strip() for h in re.split(r"\s{2,}", line.strip())]


@pytest.mark.parametrize("command", ["key", "uniq-key"])
def test_query_takes_since_until_as_dump_does_and_the_old_spelling_unlisted(command):
    doc = recovered("5.3.3", "config-real")
    kind = "KEYS" if command == "key" else "UNIQ_KEY"
    q = next(q for q in doc["queries"] if q["kind"] == kind and q["results"])
    last = max(r["storeTimestamp"] for r in q["results"])
    path = str(store_path("5.3.3", "config-real"))
    for since, until, code in ((0, last + 60_000, 0), (1, 2, 1)):  # every hit; none (long before the store)
        new = invoke("query", command, path, q["topic"], q["key"], "--since", str(since), "--until", str(until), "-f", "json")
        old = invoke("query", command, path, q["topic"], q["key"], "--begin", str(since), "--end", str(until), "-f", "json")
        assert new.exit_code == old.exit_code == code, new.output
        assert json.loads(new.stdout) == json.loads(old.stdout)
        assert len([r for r in json.loads(new.stdout) if r["error"] is None]) == (len(q["results"]) if code == 0 else 0)
    both = invoke("query", command, path, q["topic"], q["key"], "--since", "1", "--begin", "1")
    assert both.exit_code == 2 and "--begin is the old spelling of --since" in both.stderr
    shown = invoke("query", command, "--help").stdout
    assert "--since" in shown and "--until" in shown and "--begin" not in shown and "--end" not in shown


def test_tables_of_every_command_head_the_shared_fields_alike(tmp_path):
    path = str(store_path("5.3.3", "clean-small"))
    dump = headings(invoke("dump", path, "-n", "3").stdout)
    salvage = headings(invoke("salvage", path).stdout)
    stats = headings(invoke("stats", path).stdout.split("\n", 1)[1])  # below the title
    ids = tmp_path / "ids.txt"
    ids.write_text(json.loads(invoke("dump", path, "-n", "1", "-f", "json").stdout)[0]["uniq_key"] + "\n")
    survivors = headings(invoke("survivors", path, str(ids)).stdout)
    for shown in (dump, salvage, survivors):
        assert {"queue", "queue offset", "stored"} <= set(shown), shown
        assert not {"queue_id", "queue_offset", "store_timestamp"} & set(shown), shown
    assert "queue" in stats and "queue_id" not in stats
    assert {"msg id", "uniq key"} <= set(dump) & set(salvage)


@pytest.mark.parametrize(
    "argv",
    [
        ("dump", "consumequeue", "{s}/consumequeue/TopicTest/0"),
        ("dump", "index", "{s}/index"),
        ("dump", "timer", "{t}", "--limit", "3"),
        ("stats", "{s}", "--by", "hour"),
        ("query", "offset", "{s}", "TopicTest", "0", "0"),
        ("query", "time", "{s}", "TopicTest", "0", "0"),
    ],
)
def test_every_human_table_heads_its_columns_in_words(argv):
    """Before: these tables headed columns with JSON field names (``phys_offset``, ``tags_code``,
    ``last_store_time``, ``real_topic``) beside ``queue offset`` in the others; the headings are
    words now, as in every other table (the JSON field names do not change)."""
    s, t = store_path("5.3.3", "clean-small"), store_path("5.3.3", "timer-small")
    result = invoke(*(a.format(s=s, t=t) for a in argv))
    assert result.exit_code in (0, 1), result.output
    lines = result.stdout.splitlines()
    heads = [lines[k - 1] for k, line in enumerate(lines) if k and line.startswith("-") and set(line) <= {"-", " "}]
    assert heads, result.stdout
    for head in heads:
        assert "_" not in head, head


def test_recover_lists_lost_messages_under_the_headings_dump_uses(tmp_path):
    """A bad magic code three records from the end: the cut loses the two after it, listed."""
    from conftest import copy_store, manifest

    store = copy_store("5.3.3", "clean-small", tmp_path / "s")
    bad = manifest("5.3.3", "clean-small")["messages"][-3]["commitLogOffset"]
    segment = store / "commitlog" / f"{bad // (1 << 20) * (1 << 20):020d}"  # the fixture's 1 MiB segments
    with open(segment, "r+b") as f:
        f.seek(bad % (1 << 20) + 4)
        f.write(b"\x00\x00\x00\x01")
    shown = invoke("recover", str(store), "--dry-run").stdout
    lost = shown[shown.index("Lost by the cut: 2 message(s)"):].split("\n", 1)[1]
    assert headings(lost) == ["offset", "size", "queue", "queue offset", "stored", "crc", "msg id", "uniq key", "keys", "topic"]


def test_plans_and_info_name_checkpoint_fields_alike(tmp_path):
    """Before: `info` showed the checkpoint under the broker's names (``logicsMsgTimestamp``) and
    dates, the plan of `recover` the same field as ``logics_msg_timestamp`` with epoch
    milliseconds; the plan now uses info's names and shows the dates beside the numbers."""
    from mqtool.cli.output import iso_ms

    path = str(copy_store("4.9.7", "crashed-small", tmp_path / "store"))  # a plan looks for a live broker: not the shared fixture
    plan = json.loads(invoke("recover", path, "-f", "json").stdout)
    shown = invoke("recover", path).stdout
    rows = " ".join(shown[shown.index("\nCheckpoint\n") :].split("\n\n")[0].split())
    info = invoke("info", path).stdout
    changed = {k: v for k, v in plan["checkpoint"]["after"].items() if plan["checkpoint"]["before"][k] != v}
    assert changed
    for field, value in changed.items():
        name = field.split("_")[0] + "".join(w.title() for w in field.split("_")[1:])  # logics_msg_timestamp: logicsMsgTimestamp
        assert name in info and f"{name} " in rows and field not in rows
        assert f"{iso_ms(value)} ({value})" in rows


def test_survivors_summary_names_its_figures_in_words(tmp_path):
    """Before: the table's summary of `survivors` listed ``commitlog_end``, ``end_reason``,
    ``records_past_damage`` and ``all_survived`` (the JSON names) beside worded tables."""
    path = str(store_path("5.3.3", "clean-small"))
    ids = tmp_path / "ids.txt"
    ids.write_text(json.loads(invoke("dump", path, "-n", "1", "-f", "json").stdout)[0]["uniq_key"] + "\n")
    shown = invoke("survivors", path, str(ids)).stdout
    summary = [line.split("  ")[0] for line in shown[shown.index("\nSummary\n") :].splitlines()[2:] if line.strip()]
    assert {"commitlog end", "end reason", "records past damage", "all survived"} <= set(summary), summary
    assert not [k for k in summary if "_" in k]
    assert "commitlog_end" in json.loads(invoke("survivors", path, str(ids), "-f", "json").stdout)["summary"]
