"""``mqtool salvage STORE``: every valid record with its ``status`` (``scan.salvage.SalvageScan``), past
the damage too; ``--to-store DIR`` also writes them to a new store (``apply.salvage_store``)."""

from __future__ import annotations

import contextlib
import enum
import os
import sys
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer

from ..errors import EXIT_FINDINGS, BadInput, UsageError
from ..fileops import named, naming
from ..store.records import MESSAGE_FIELDS, BodyEncoding
from ..store.store import SEGMENT_NAME, SEGMENT_SIZE
from .common import BrokerConfigOpt, BrokerVersionOpt, ProgressOpt, guarded, note, open_store, shell_path, silence_stdout
from .output import OutputFormat, emit_batches, emit_rows, with_body
from .progress import ByteProgress
from .state import State
from .store_state import warn_store_state

TABLE = ("offset", "status", "queue_id", "queue_offset", "store_timestamp", "size", "msg_id", "uniq_key", "topic")  # topic last: a long one runs past the edge
TABLE_OPTIONAL = ("size", "uniq_key", "msg_id", "queue_offset", "store_timestamp")  # left out first to fit the width (an IPv6 msg_id is 56 characters)
NEW_FIELDS = ("new_offset", "new_queue_offset")
FILE_WIDTH = 1 << 16  # a table written to --out FILE: no column left out, none folded
BATCH = 1 << 12  # records per batch, as dump's: larger batches raise the resident memory
DISPATCH = ("offset", "size", "topic", "queue_id", "queue_offset", "sys_flag", "store_timestamp", "tags_code", "keys", "uniq_key", "prepared_transaction_offset")


SalvageFormat = enum.Enum("SalvageFormat", {**{f.name: f.value for f in OutputFormat}, "parquet": "parquet"}, type=str)  # --format: dump's, and parquet


def _rows(batches, writer, store) -> Iterator[dict]:
    for batch in batches:
        for row in batch.to_pylist():
            if "properties" in row and row["properties"] is not None:
                row["properties"] = dict(row["properties"])
            if writer is not None:
                placed = _place(writer, store, row)
                row["new_offset"], row["new_queue_offset"] = (placed.offset, placed.queue_offset) if placed else (None, None)
            yield row


def _place(writer, store, row: dict):
    if row["status"] == "stale":
        return None  # stale records are never written to the new store
    raw = store.commitlog.read_bytes(row["offset"], row["size"])
    try:
        return writer.add(raw, **{k: row[k] for k in DISPATCH if k != "size"})
    except OSError as exc:  # a full disk named as the new store, not as the --out file (``salvage``) nor a bare "No space left"
        raise named(exc, writer.building) from None


def _parquet(batches, out: Path, writer, store) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def placed(batch):
        if writer is not None:
            places = [_place(writer, store, row) for row in batch.select(list(DISPATCH) + ["status"]).to_pylist()]
            batch = batch.append_column("new_offset", pa.array([p.offset if p else None for p in places], pa.int64()))
            batch = batch.append_column("new_queue_offset", pa.array([p.queue_offset if p else None for p in places], pa.int64()))
        return batch

    sink = None
    try:
        with contextlib.ExitStack() as closing:  # the writer closed first, then its file
            for batch in map(placed, batches):
                if sink is None:  # opened as the other formats' file is: its errors say ``FILE: Is a directory``, not pyarrow's wording
                    sink = pq.ParquetWriter(closing.enter_context(open(out, "wb")), batch.schema)
                    closing.callback(sink.close)
                sink.write_batch(batch)
            if sink is None:  # no record: the file all the same, with its columns (as jsonl's and csv's empty file)
                pq.write_table(pa.Table.from_batches([placed(batches.empty())]), closing.enter_context(open(out, "wb")))
    except BaseException:
        if sink is not None and not _has_footer(out):  # a full disk refused the footer, or a Ctrl-C cut a write of the writer's
            out.unlink(missing_ok=True)
            note(f"{out}: removed: the Parquet file was cut short before its footer, which every reader needs to open it")
        raise


def _has_footer(path: Path) -> bool:
    """Whether ``path`` ends in a whole Parquet footer (the metadata, its 4-byte length, ``PAR1``; the file begins with ``PAR1``
    too): without one no reader opens the file. Read from the bytes, not by pyarrow, which a pending Ctrl-C cancels."""
    with open(path, "rb") as f:
        size = f.seek(0, os.SEEK_END)
        if size < 12:
            return False
        f.seek(0)
        head = f.read(4)
        f.seek(size - 8)
        tail = f.read(8)
    return head == tail[4:] == b"PAR1" and int.from_bytes(tail[:4], "little") + 12 <= size


@guarded
def salvage(
    store_path: Annotated[Path, typer.Argument(metavar="STORE", help="The store to read (never modified).")],
    out: Annotated[Optional[Path], typer.Option("--out", "-o", metavar="FILE", help="Write the rows to this file (default: stdout; required for parquet).")] = None,
    to_store: Annotated[Optional[Path], typer.Option("--to-store", metavar="DIR", help="Also write a new store holding the salvaged messages into this new or empty directory.")] = None,
    include_stale: Annotated[bool, typer.Option("--include-stale", help="Also list stale records (overwritten history after the logical end; never written by --to-store).")] = False,
    body: Annotated[BodyEncoding, typer.Option("--body", help="How to show the stored body bytes.")] = BodyEncoding.none,
    format: Annotated[SalvageFormat, typer.Option("--format", "-f", help="Output format.")] = SalvageFormat.table,
    progress: ProgressOpt = None, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
) -> None:
    """Every valid message of the commit log with its status: live, past-damage (the broker would discard it), stale.

    \b
    Example:
      mqtool salvage /data/rocketmq/store --to-store /data/salvaged --out report.jsonl -f jsonl
    """
    if format is SalvageFormat.parquet and out is None:
        raise UsageError("--format parquet needs --out FILE")
    if not store_path.exists():
        raise BadInput(f"{store_path}: no such file or directory")
    with open_store(store_path, broker_config, broker_version) as store:
        warn_store_state(store.root)
        writer = None
        if to_store is not None:
            from ..apply.salvage_store import SalvageStoreWriter, check_target

            writer = SalvageStoreWriter(store, check_target(store, to_store))
            State.output_may_close = True  # a closed stderr drops the notes: the new store never depends on who reads them
        try:
            with naming(out) if out is not None else contextlib.nullcontext():  # the rows' file, where no other output was named
                scan, next_start = _salvage(store, writer, out, format, body, include_stale, progress)
            from ..verify.lmq import with_stall

            next_start = with_stall(store, next_start)  # where a record whose dispatch throws stops that start
            with naming(writer.building) if writer is not None else contextlib.nullcontext():
                new_store = writer.close() if writer is not None else None
        except BaseException:
            if out is not None and out.is_file():  # not a directory given for the file (exit 3, said once)
                if format is not SalvageFormat.parquet:
                    _cut_to_last_line(out)
                note(f"{shell_path(out)}: holds only the rows written before salvage stopped")
            if writer is not None:  # the paths quoted as a shell reads them: the one to delete is pasted
                left = f"(not at {shell_path(writer.target)}, which it is renamed to once whole): " if writer.building != writer.target else ""
                note(f"{shell_path(writer.building)}: the new store is incomplete {left}delete it, or run the salvage again, which replaces it")
            raise
    _report(scan.summary, new_store, include_stale, next_start)
    left_out = [p for p in store.problems if p.kind in (SEGMENT_SIZE, SEGMENT_NAME)]  # a wrong-length or misnamed segment Store.open left out
    for problem in left_out:
        note(f"not salvaged: {problem.message}, so none of its records are read")
    if scan.summary.damaged or left_out:
        raise typer.Exit(EXIT_FINDINGS)


def _cut_to_last_line(path: Path, chunk: int = 1 << 16) -> None:
    """Cut ``path`` back to the end of its last line, so a write refused part-way leaves no partial row."""
    with open(path, "r+b") as f:
        end = pos = f.seek(0, os.SEEK_END)
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            at = f.read(pos - start).rfind(b"\n")
            if at >= 0:
                pos = start + at + 1
                break
            pos = start
        if pos != end:
            f.truncate(pos)


def _salvage(store, writer, out: Path | None, format: SalvageFormat, body: BodyEncoding, include_stale: bool, progress: bool | None):
    """Scan and write the rows (and the new store's records); returns the finished scan and the broker's next start."""
    from ..scan.salvage import SalvageScan

    # a table decodes only the columns it shows (and those the new store's writer needs)
    shown = with_body(TABLE, body)
    columns = [c for c in MESSAGE_FIELDS if format is not SalvageFormat.table or c in shown or (writer is not None and c in DISPATCH)]
    with ByteProgress(store.commitlog.min_offset, store.commitlog.end_of_files, enabled=progress, desc="salvage") as bar:
        scan = SalvageScan(store, columns=columns, body=body, include_stale=include_stale, progress=bar.advance, batch=BATCH)
        if format is SalvageFormat.parquet:
            _parquet(scan, out, writer, store)
            return scan, scan.next_start
        fields = MESSAGE_FIELDS + ("status",) + (NEW_FIELDS if writer else ())
        table = TABLE[:-1] + (("new_offset",) if writer else ()) + shown[len(TABLE) - 1 :]
        fmt = OutputFormat(format.value)
        with open(out, "w", encoding="utf-8", newline="") if out is not None else contextlib.nullcontext(sys.stdout) as stream:
            if writer is None and fmt is not OutputFormat.table:  # the compiled text encoder: dump's speed
                emit_batches(((b, None) for b in scan), fmt, fields, out=stream)
            else:
                rows = _rows(scan, writer, store)
                try:
                    emit_rows(rows, fmt, fields, table, optional=TABLE_OPTIONAL, out=stream,
                              width=FILE_WIDTH if out is not None else None)  # a report file keeps every column
                except BrokenPipeError:
                    if writer is None:
                        raise
                    silence_stdout()  # the reader went away (`| head`): the new store is written to its end all the same
                    for _ in rows:
                        pass
    return scan, scan.next_start


def _report(summary, new_store, include_stale: bool, next_start) -> None:
    c = summary.counts
    cut = summary.cut
    note(next_start.line() if next_start is not None else
         f"the broker's recovery ends the commit log at {cut.offset} ({cut.reason}{': ' + cut.detail if cut.detail and not cut.is_clean else ''})")
    stale = sum(s.records for s in summary.stretches if s.status == "stale")
    note(f"salvaged {c['live'] + c['past-damage']} records: {c['live']} live, {c['past-damage']} past damage; {stale} stale records {'listed' if include_stale else 'not listed (--include-stale)'}")
    if summary.unread is not None:
        u = summary.unread
        note(f"no valid record in [{u.start}, {u.stop}): the broker's next start never reads it and serves the records around it; "
             f"{u.queue_entries} message(s) the consume queues point into it are lost")
    said = (summary.unread.start, summary.unread.stop) if summary.unread is not None else None
    for u in summary.unreadable:
        if (u.start, u.stop) != said:  # the range the line above names already
            note(f"no valid record in [{u.start}, {u.stop}){'; valid records resume after it' if u.resumed else ''}")
    for offset, size in summary.skipped:
        note(f"skipped the record at {offset} ({size} bytes): its body CRC does not match")
    if new_store is not None:
        n = new_store
        note(f"new store {n.path}: commit log [{n.min_offset}, {n.end_offset}), {n.records} records ({n.kept} at their original offsets, {n.moved} re-appended), "
             f"{n.consume_queue_entries} consume queue entries in {n.queues} queues, {n.index_files} index files; check it with `mqtool verify {shell_path(n.path)}`")
        for line in n.notes:
            note(line)
