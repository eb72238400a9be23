"""Rendering for every command, one streaming implementation per output format: rows through ``emit_rows``, documents through
``emit_document``; tables laid out by ``table.py`` (long single-word columns last)."""

from __future__ import annotations

import functools
import itertools
import json
import re
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Iterable, Sequence

from . import terminal
from ..table import BOLD, RESET, YELLOW, Layout, Table, line_spans, visible, wrap

# what rich does something with in a text: markup, tabs, the control characters it strips
_RICH_RENDERS = re.compile(r"[\[\t\x07\x08\x0b\x0c\r]")

TABLE_BATCH = 200


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


def kv_table(title: str, rows: Sequence[tuple[str, Any]]) -> Table:
    """A titled two-column key/value table (``-`` for None)."""
    table = Table(("key", "value"), title=title, header=False)
    for k, v in rows:
        table.add_row(k, "-" if v is None else str(v))
    return table


def titled_table(title: str, columns: Sequence[str], *, optional: Sequence[str] = (), fold: Sequence[str] = (),
                 rows: Iterable[Sequence] = ()) -> Table:
    """A titled table of ``rows``; ``optional`` columns dropped to fit, ``fold`` ones may break a long word."""
    table = Table(columns, title=title, optional=optional, fold=fold)
    for row in rows:
        table.add_row(*row)
    return table


class Screen:
    """What a document renderer prints to: ``Table`` objects laid out to the width, text wrapped at spaces."""

    def __init__(self, out):
        self.out, self.width, self.color = terminal.data_stream(out), terminal.width(), terminal.color(out)
        self._console, self.printed = None, False

    @property
    def console(self):
        """The rich console for text (rich imported on the first text printed, not for tables)."""
        if self._console is None:
            # no styling at all without colour: rich's no_color alone still writes bold (NO_COLOR, TERM=dumb, a pipe)
            self._console = terminal.data_console(file=self.out, highlight=False, emoji=False, width=self.width, no_color=not self.color,
                                                  force_terminal=self.color)  # no emoji codes: ":x:" in a path is a path
        return self._console

    def print(self, obj: Table | str = "", *, markup: bool = True) -> None:
        """A ``Table``, or text (rich markup allowed)."""
        if isinstance(obj, Table):
            if self.printed and obj.title:
                self.out.write("\n")  # a blank line between titled tables
            print_table(self.out, obj, self.width, self.color)
        elif not _RICH_RENDERS.search(obj := visible(obj)):  # a finding's group name or key: its escape sequences written out
            self._write_wrapped(obj)  # what rich would print, without importing it
        else:
            self._print_rich(obj, markup=markup)
        self.printed = True

    def note(self, text: str) -> None:
        """``note: text``, "note:" in yellow, wrapped as any text (without rich)."""
        self.printed = True
        self._write_wrapped(f"note: {text}", lead=YELLOW + "note:" + RESET if self.color else None)

    def _write_wrapped(self, text: str, lead: str | None = None) -> None:
        """``text`` wrapped at spaces as ``_print_rich`` wraps it; ``lead`` replaces the first word (styled)."""
        lines = []
        for line in text.split("\n"):
            indent = line[: len(line) - len(line.lstrip(" "))]
            lines += [indent + line[start:end] if k else line[:end] for k, (start, end) in enumerate(line_spans(line, self.width))]
        if lead is not None:
            lines[0] = lead + lines[0][len(lines[0].split(" ", 1)[0]) :]
        self.out.write("\n".join(lines) + "\n")

    def _print_rich(self, text: str, *, markup: bool = True, **kwargs) -> None:
        from rich.text import Text

        styled = self.console.render_str(text, markup=markup, highlight=False)
        for line in styled.split("\n", allow_blank=True):
            plain = line.plain
            indent = plain[: len(plain) - len(plain.lstrip(" "))]
            for k, (start, end) in enumerate(line_spans(plain, self.width)):
                piece = line[start:end] if k else line[:end]
                self.console.print(Text(indent) + piece if k else piece, soft_wrap=True, **kwargs)


def print_table(out, table: Table, width: int, color: bool, keep: Layout | None = None, *, first_record: int = 1) -> Layout:
    """Write ``table`` (its title unless ``keep``, the layout printed before) and return its layout."""
    layout = table.layout(width, keep=keep)
    if layout.dropped and (keep is None or keep.dropped != layout.dropped):
        out.flush()
        terminal.note(f"not shown at {width} columns: {', '.join(layout.dropped)} (--format json shows every field)")
    lines = []
    if keep is None and table.title:
        lines += [BOLD + t + RESET if color else t for t in wrap(table.title, width)]
    new_header = keep is None or keep.columns != layout.columns or keep.widths != layout.widths
    if keep is not None and new_header and not layout.vertical:
        lines.append("")
    lines += table.render(layout, width=width, color=color, show_header=new_header, first_record=first_record)
    if lines:
        out.write("\n".join(lines) + "\n")
    return layout


def iso_ms(ms: int | None, *, zero_unset: bool = True) -> str:
    """Epoch milliseconds as ISO-8601 UTC (``-`` for None, and for 0 unless ``zero_unset`` is False)."""
    if ms is None or (not ms and zero_unset):
        return "-"
    second, milli = divmod(ms, 1000)
    try:
        return f"{_iso_second(second)}.{milli:03d}Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


@functools.lru_cache(maxsize=1 << 12)
def _iso_second(second: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS`` of an epoch second, UTC (a table's rows share their seconds)."""
    return datetime.fromtimestamp(second, timezone.utc).replace(tzinfo=None).isoformat(timespec="seconds")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (dict, list)) else str(value)


# Table headings shorter than the JSON field name; any other field is headed by its name in words (``msg_id``: "msg id").
HEADERS = {"queue_id": "queue", "store_timestamp": "stored"}


def heading(field: str, headers: dict[str, str] = HEADERS) -> str:
    """The table heading of ``field``: ``headers``' name for it, else its words (``_`` as spaces)."""
    return headers.get(field) or field.replace("_", " ")


def emit_rows(rows: Iterable[dict[str, Any]], fmt: OutputFormat, fields: Sequence[str], table_columns: Sequence[str] | None = None, *,
              title: str | None = None, optional: Sequence[str] = (), fold: Sequence[str] = (), headers: dict[str, str] | None = None,
              asked_times: Sequence[str] = (), out=None, width: int | None = None) -> int:
    """Stream ``rows`` in ``fmt``; returns how many were written. ``fields``: CSV header and order; ``table_columns``,
    ``optional`` (dropped to fit) and ``fold`` shape the table; ``asked_times``: time columns holding a user-given time."""
    out = terminal.data_stream(out)
    count = 0
    rows = iter(rows)  # its first row read before anything is written: a path it refuses leaves no "[" or CSV header
    first = next(rows, None)
    rows = itertools.chain(() if first is None else (first,), rows)
    if fmt is OutputFormat.jsonl:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
    elif fmt is OutputFormat.json:
        out.write("[")
        for row in rows:
            out.write(("\n" if count == 0 else ",\n") + json.dumps(row, ensure_ascii=False))
            count += 1
        out.write("\n]\n" if count else "]\n")
    elif fmt is OutputFormat.csv:
        import csv  # only for csv (not in a lookup's start-up)

        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(fields)
        for row in rows:
            writer.writerow([_cell(row.get(f)) for f in fields])
            count += 1
    else:  # TABLE_BATCH rows at a time, each batch in the previous one's layout where it fits
        width, color, layout, headers = width or terminal.width(), terminal.color(out), None, {**HEADERS, **(headers or {})}
        columns = list(table_columns or fields)
        shown, left_out_first, folded = ([heading(c, headers) for c in names] for names in (columns, optional, fold))
        table = Table(shown, title=title, optional=left_out_first, fold=folded)
        timed = [c.endswith(("timestamp", "_time")) for c in columns]  # epoch ms: a date people read
        asked = [c in asked_times for c in columns]
        while batch := list(itertools.islice(rows, TABLE_BATCH)):
            for row in batch:
                table.add_row(*(_cell(_table_value(row.get(c), t, a)) for c, t, a in zip(columns, timed, asked)))
            layout = print_table(out, table, width, color, layout, first_record=count + 1)
            count += len(batch)
            table.rows.clear()
    out.flush()
    return count


def with_body(columns: Sequence[str], body: str) -> tuple[str, ...]:
    """A message table's ``columns``, with ``body`` last when ``--body`` asks for it (a long one runs past the edge)."""
    return tuple(columns) if body == "none" else (*columns, "body")


def _table_value(value: Any, timed: bool, asked: bool) -> Any:
    if timed and isinstance(value, int):
        return iso_ms(value, zero_unset=not asked)
    return " ".join(map(str, value)) if isinstance(value, list) else value


def text_encoder(fields: Sequence[str], fmt: OutputFormat):
    """The compiled text encoder (``scan.text.BatchText``) of ``fields`` in ``fmt``: each row as ``emit_rows`` writes it."""
    from ..scan.text import BatchText, TextFormat

    return BatchText(fields, TextFormat(fmt.value))


def emit_batches(items: Iterable, fmt: OutputFormat, fields: Sequence[str], encoder=None, out=None) -> int:
    """Write (batch, text) pairs as JSON Lines, JSON or CSV, as ``emit_rows`` would; returns the rows written."""
    out = terminal.data_stream(out)
    if fmt is OutputFormat.csv:
        import csv

        csv.writer(out, lineterminator="\n").writerow(fields)
    out.flush()
    raw = out.buffer
    if fmt is OutputFormat.json:
        raw.write(b"[")
    encoder = encoder or text_encoder(fields, fmt)
    count = 0
    for b, text in items:
        if text is None:
            text = encoder.encode(b)
        if fmt is OutputFormat.json and count == 0 and len(text):
            text = text[1:]  # the first item has no comma before it
        out.clear_bars()  # a progress bar on the same terminal: erased before the rows
        raw.write(memoryview(text))
        count += b.num_rows
    if fmt is OutputFormat.json:
        raw.write(b"\n]\n" if count else b"]\n")
    raw.flush()
    return count


def emit_document(doc: dict[str, Any], fmt: OutputFormat, render_table) -> None:
    """A single document (``info``, a plan, a summary): JSON as is, or a human rendering."""
    out = terminal.data_stream()
    if fmt in (OutputFormat.json, OutputFormat.jsonl):
        out.write(json.dumps(doc, ensure_ascii=False, indent=None if fmt is OutputFormat.jsonl else 2) + "\n")
    elif fmt is OutputFormat.csv:
        import csv

        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["key", "value"])
        for key, value in _flatten(doc):
            writer.writerow([key, _cell(value)])
    else:
        render_table(Screen(out), doc)
    out.flush()


def _flatten(doc: Any, prefix: str = ""):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        for i, v in enumerate(doc):
            yield from _flatten(v, f"{prefix}[{i}]")
    else:
        yield prefix, doc
