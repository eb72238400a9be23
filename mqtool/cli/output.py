"""Rendering for every command: one streaming implementation per output format.

Data goes to stdout, messages and progress to stderr. The default format is ``table`` for
every command, whether stdout is a terminal or not; ``json`` (one array or document),
``jsonl`` (one object per line) and ``csv`` are for machines.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime, timezone
from enum import Enum
from typing import Any, Iterable, Sequence

from rich.console import Console
from rich.table import Table

TABLE_BATCH = 200

stderr = Console(stderr=True, highlight=False, soft_wrap=True)


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


def data_console(out) -> Console:
    """A console for data on ``out``: the terminal's width, or 400 columns when piped, so offsets
    and message ids are never folded or cut."""
    return Console(file=out, highlight=False, width=None if out.isatty() else 400)


def kv_table(title: str, rows: Sequence[tuple[str, Any]]) -> Table:
    """A titled two-column key/value table (``-`` for None)."""
    table = Table(title=title, show_header=False, box=None, title_justify="left", title_style="bold")
    table.add_column("key", style="dim")
    table.add_column("value")
    for k, v in rows:
        table.add_row(k, "-" if v is None else str(v))
    return table


def titled_table(title: str, columns: Sequence[str], wrapped: frozenset[str] = frozenset()) -> Table:
    """A titled table with a bold header; only ``wrapped`` columns may fold their text."""
    table = Table(title=title, box=None, title_justify="left", title_style="bold", header_style="bold", pad_edge=False)
    for c in columns:
        table.add_column(c, overflow="fold", no_wrap=c not in wrapped)
    return table


def iso_ms(ms: int | None) -> str:
    """Epoch milliseconds as an ISO-8601 UTC string (``-`` for 0/None)."""
    if not ms:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _json_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


def emit_rows(
    rows: Iterable[dict[str, Any]],
    fmt: OutputFormat,
    fields: Sequence[str],
    table_columns: Sequence[str] | None = None,
    *,
    title: str | None = None,
    out=None,
) -> int:
    """Stream ``rows`` in ``fmt``; returns how many were written.

    ``fields`` fixes the CSV header and column order; the table shows ``table_columns``
    (default: all fields), in batches so memory stays bounded.
    """
    out = out or sys.stdout
    count = 0
    if fmt is OutputFormat.jsonl:
        for row in rows:
            out.write(_json_line(row) + "\n")
            count += 1
    elif fmt is OutputFormat.json:
        out.write("[")
        for row in rows:
            out.write(("\n" if count == 0 else ",\n") + _json_line(row))
            count += 1
        out.write("\n]\n" if count else "]\n")
    elif fmt is OutputFormat.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(fields)
        for row in rows:
            writer.writerow([_cell(row.get(f)) for f in fields])
            count += 1
    else:
        columns = list(table_columns or fields)
        console = data_console(out)
        batch: list[dict[str, Any]] = []

        def flush(first: bool) -> None:
            table = Table(title=title if first else None, show_header=first, header_style="bold", box=None, pad_edge=False)
            for c in columns:
                table.add_column(c, no_wrap=True, overflow="ellipsis", max_width=48)
            for row in batch:
                table.add_row(*(_cell(_table_value(c, row.get(c))) for c in columns))
            console.print(table)
            batch.clear()

        first = True
        for row in rows:
            batch.append(row)
            count += 1
            if len(batch) >= TABLE_BATCH:
                flush(first)
                first = False
        if batch or first:
            flush(first)
    out.flush()
    return count


def _table_value(column: str, value: Any) -> Any:
    if column.endswith("timestamp") and isinstance(value, int):
        return iso_ms(value)
    if isinstance(value, list):
        return " ".join(map(str, value))
    return value


def emit_document(doc: dict[str, Any], fmt: OutputFormat, render_table, out=None) -> None:
    """A single document (``info``, a plan, a summary): JSON as is, or a human rendering."""
    out = out or sys.stdout
    if fmt in (OutputFormat.json, OutputFormat.jsonl):
        out.write(json.dumps(doc, ensure_ascii=False, indent=None if fmt is OutputFormat.jsonl else 2) + "\n")
    elif fmt is OutputFormat.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["key", "value"])
        for key, value in _flatten(doc):
            writer.writerow([key, _cell(value)])
    else:
        render_table(data_console(out), doc)
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
