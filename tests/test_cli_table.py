"""The table layout rules of ``mqtool/table.py`` on rows taken from a real-broker manifest, and
text printed without rich as rich prints it (``output.Screen``)."""

from __future__ import annotations

import io

import pytest
from rich.cells import cell_len

from conftest import manifest
from mqtool.cli.output import _RICH_RENDERS, Screen
from mqtool.table import Table, line_spans, wrap

COLUMNS = ("offset", "topic", "queue", "keys", "uniqKey", "msgId")


def message_table(messages, optional=("uniqKey", "keys")) -> Table:
    table = Table(COLUMNS, title="messages", optional=optional)
    for m in messages:
        table.add_row(m["commitLogOffset"], m["topic"], m["queueId"], " ".join(m["keys"]), m["uniqKey"], m["msgId"])
    return table


def rendered(table: Table, width: int) -> tuple[list[str], list[str]]:
    layout = table.layout(width)
    return table.render(layout, width=width), layout.dropped


def short_topic_messages():
    return [m for m in manifest("4.9.7", "clean-small")["messages"] if m["topic"] == "TopicTest" and len(m["msgId"]) == 32][:40]


def test_wide_enough_shows_everything_aligned():
    messages = short_topic_messages()
    lines, dropped = rendered(message_table(messages), 200)
    assert dropped == [] and lines[0].split() == list(COLUMNS)
    for line, m in zip(lines[2:], messages):
        assert line.split()[0] == str(m["commitLogOffset"]) and line.endswith(m["msgId"])
        assert line.split()[:3] == [str(m["commitLogOffset"]), m["topic"], str(m["queueId"])]


def test_narrower_drops_optional_columns_in_order_then_goes_vertical():
    messages = short_topic_messages()
    table = message_table(messages)
    lines, dropped = rendered(table, 80)
    assert dropped == ["uniqKey"] and all(cell_len(line) <= 80 for line in lines)
    lines, dropped = rendered(table, 62)
    assert dropped == ["uniqKey", "keys"] and lines[0].split() == ["offset", "topic", "queue", "msgId"]
    lines, _ = rendered(table, 45)  # a msgId fits a record's 35-column value, not beside the rest
    assert lines[0].startswith("-[ RECORD 1 ]") and f"msgId   | {messages[0]['msgId']}" in lines
    assert sum(line.startswith("-[ RECORD") for line in lines) == len(messages)


def test_keys_wrap_at_spaces_never_inside_a_word():
    messages = [m for m in short_topic_messages() if len(m["keys"]) >= 3]
    lines, _ = rendered(message_table(messages, optional=()), 90)
    text = "\n".join(lines)
    for m in messages:
        for key in m["keys"]:
            assert f" {key}" in text or f"{key} " in text


def test_a_word_too_long_for_any_layout_runs_past_the_edge_whole():
    messages = manifest("4.9.7", "clean-small")["messages"]
    long_topic = max((m["topic"] for m in messages), key=len)
    table = Table(("offset", "queue", "topic"))
    for m in messages[:50]:
        table.add_row(m["commitLogOffset"], m["queueId"], m["topic"])
    lines, _ = rendered(table, 80)
    assert not lines[0].startswith("-[ RECORD")  # a table: the long topic is last
    assert any(line.endswith(" " + long_topic) for line in lines)
    assert all(cell_len(line) <= 80 for line in lines if long_topic not in line)


def test_cjk_cells_count_two_columns():
    topic = next(m["topic"] for m in manifest("4.9.7", "clean-small")["messages"] if "主题" in m["topic"])
    table = Table(("topic", "n"))
    table.add_row(topic, 1)
    table.add_row("x", 22)
    lines, _ = rendered(table, 80)
    assert cell_len(lines[2]) == cell_len(lines[3])  # the number column lines up


def test_wrap_and_line_spans():
    assert wrap("aa bb cc", 5) == ["aa bb", "cc"]
    assert wrap("C0A8016400002A9F0000000000000000 x", 10) == ["C0A8016400002A9F0000000000000000", "x"]
    line = "    one two three four"
    assert [line[a:b] for a, b in line_spans(line, 13)] == ["one two", "three", "four"]


TEXTS = [
    "No changes.", "", "one\n\ntwo", "  restore /data/rocketmq/store/commitlog/00000000000004194304 (a long path that must wrap at the spaces around it)",
    "`mqtool repair` also makes the fixes the broker never makes (the rows with 'fixed by').", "主题 Tópico тема " * 12, "x" * 150 + " tail",
    "... and 12 more listed with --format json", "note: the steps after the recovery are planned again on the recovered store when applied",
]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("columns", [40, 100])
@pytest.mark.parametrize("color", [False, True])
def test_plain_text_prints_as_rich_prints_it(columns, color, monkeypatch):
    """A text rich would change nothing in (no markup, tab or control character; emoji codes are off)
    is wrapped without importing rich: the same bytes; and ``note`` is the yellow-markup note."""
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    outs = []
    for way in ("_write_wrapped", "_print_rich"):
        out = _Terminal() if color else io.StringIO()
        screen = Screen(out)
        for text in TEXTS:
            assert not _RICH_RENDERS.search(text)
            getattr(screen, way)(text)
        if way == "_write_wrapped":
            screen.note(TEXTS[-1][len("note: "):])
        else:
            screen._print_rich(f"[yellow]note:[/yellow] {TEXTS[-1][len('note: '):]}", highlight=False)
        outs.append(out.getvalue())
    assert outs[0] == outs[1]
    assert ("\x1b[33mnote:" in outs[0]) is color
    for text in ("[bold]x[/]", "a\tb", "carriage\rreturn"):
        assert _RICH_RENDERS.search(text)  # these still go through rich
    plain = io.StringIO()
    Screen(plain)._print_rich("party :smile: time")  # no emoji codes: a path may hold such a word
    assert plain.getvalue() == "party :smile: time\n" and not _RICH_RENDERS.search("party :smile: time")


def test_times_are_exact_to_the_millisecond_in_every_year():
    """``iso_ms`` (a table's times) by integer arithmetic: what ``timedelta`` gives, in every year
    datetime can show, before 1970 too; where the float it was computed from lost the last
    millisecond (after the year 2128), it is still exact; past year 9999, the number itself."""
    import random
    from datetime import datetime, timedelta, timezone

    from mqtool.cli.output import iso_ms

    epoch, rng = datetime(1970, 1, 1, tzinfo=timezone.utc), random.Random(5)
    lowest, highest = -62135596800000, 253402300799999  # 0001-01-01 and the last millisecond of 9999
    values = [1, -1, 999, -1000, 1795237472882, 85916839313282, lowest, highest] + [rng.randrange(lowest, highest) for _ in range(20000)]
    for ms in values:
        exact = epoch + timedelta(milliseconds=ms)
        assert iso_ms(ms) == exact.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    assert iso_ms(85916839313282) == "4692-08-05T20:41:53.282Z"
    assert (iso_ms(0), iso_ms(None), iso_ms(highest + 1)) == ("-", "-", str(highest + 1))


def test_a_table_known_to_go_vertical_from_its_header_lays_out_as_if_measured(monkeypatch):
    """``Table._surely_vertical`` skips measuring the cells only where measuring would go
    vertical too: every width from 10 to 220, for the manifest's messages under several column
    sets (the optional ones last, first, or none; a long last column), the same layout and lines."""
    messages = manifest("5.3.3", "clean-small")["messages"][:60]
    long_names = ("commit_log_offset", "topic", "queue_id", "keys_of_the_message", "unique_key", "message_id")
    tables = [message_table(messages), message_table(messages, optional=()), message_table(messages, optional=("offset", "topic"))]
    renamed = Table(long_names, optional=("keys_of_the_message",))
    for row in tables[0].rows:
        renamed.add_row(*row)
    tables.append(renamed)
    widths = range(10, 221)
    hits = sum(t._surely_vertical(w) for t in tables for w in widths)
    shortcut = [[(t.layout(w), t.render(t.layout(w), width=w)) for w in widths] for t in tables]
    monkeypatch.setattr(Table, "_surely_vertical", lambda self, width: False)
    measured = [[(t.layout(w), t.render(t.layout(w), width=w)) for w in widths] for t in tables]
    assert shortcut == measured
    vertical = sum(layout.vertical for laid in measured for layout, _ in laid)
    assert 0 < hits < vertical < len(tables) * len(widths)  # some vertical layouts found by measuring only


def test_a_findings_table_whose_paths_run_past_the_edge_stays_a_table(tmp_path):
    """Before: in the plan of `recover` on a 3.2.6 store with a segment cut short, the table of the
    61 findings `verify` will still report turned into vertical records at 100 columns, because
    its last column (the file) held a 166-character path and 64-character ones that a vertical
    record could hold; now the paths longer than half the width run past the edge whole and every
    finding is one line."""
    from typer.testing import CliRunner

    from conftest import copy_store
    from mqtool.cli import app

    store = copy_store("3.2.6", "crashed-small", tmp_path / "s")
    with open(store / "commitlog" / "00000000000002097152", "r+b") as f:
        f.truncate(167066)
    shown = CliRunner().invoke(app, ["recover", str(store), "--dry-run"], env={"COLUMNS": "100"}).stdout
    findings = shown[shown.index("After this, `verify` will still report"):].splitlines()
    count = int(findings[0].split("report ")[1].split()[0])
    assert findings[1].split()[:3] == ["kind", "severity", "offset"] and findings[1].split()[-1] == "file"
    rows = findings[3 : 3 + count]
    assert "RECORD" not in shown and all(row.split()[-1].startswith(("consumequeue/", "commitlog/")) for row in rows)
    assert all(len(row) <= 100 or len(row.split()[-1]) > 40 for row in rows)


@pytest.mark.parametrize("columns, shown", [(100, False), (120, True)])
def test_the_line_under_recovers_findings_table_holds_without_its_fixed_by_column(tmp_path, columns, shown):
    """Before: at 100 columns the "will still report" table of `recover` on 5.3.3's dledger-crashed-cqloss dropped its
    optional "fixed by" column (the file paths take the room), and the line under it still pointed at "the rows with
    'fixed by'". The line now says how many rows repair's steps remove, by step, with or without the column."""
    from typer.testing import CliRunner

    from conftest import copy_store
    from mqtool.cli import app

    store = copy_store("5.3.3", "dledger-crashed-cqloss", tmp_path / "s")
    shown_text = CliRunner().invoke(app, ["recover", str(store), "--dry-run"], env={"COLUMNS": str(columns)}).stdout
    lines = shown_text[shown_text.index("After this, `verify` will still report 6"):].splitlines()
    assert ("fixed by" in lines[1]) == shown
    said = " ".join(lines[9:11])
    assert said.startswith("`mqtool repair` also makes the fixes the broker never makes, which remove 6 of these rows (rebuild-cq: 6).")
    assert "'fixed by'" not in shown_text


def test_wrap_keeps_a_quoted_path_with_spaces_on_one_line():
    """Before: `mqtool: undo with: mqtool restore '/data/rocket mq/.mqtool-backups/...' --yes` broke
    inside the quotes on a narrow terminal, and the command copied from it named no backup."""
    line = "mqtool: undo with: mqtool restore '/data/rocket mq/.mqtool-backups/store-20261130T050632390-recover' --yes"
    assert wrap(line, 60) == ["mqtool: undo with: mqtool restore", "'/data/rocket mq/.mqtool-backups/store-20261130T050632390-recover'", "--yes"]
    assert wrap("""a 'b'"'"'c d' e""", 3) == ["a", """'b'"'"'c d'""", "e"]  # shlex.quote of a path holding a quote
    assert wrap("it's a b", 4) == ["it's", "a b"]  # a lone quote quotes nothing
