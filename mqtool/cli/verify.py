"""``mqtool verify STORE``: is this store sound, and exactly where is it not? (read-only)"""

from __future__ import annotations

import enum
import itertools
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..errors import EXIT_FINDINGS, UsageError
from ..fileops import salvage_command
from ..table import cell_len
from ..verify import CHECKS, FINDING_FIELDS, Summary, VerifyOptions
from .common import BrokerConfigOpt, BrokerVersionOpt, FormatOpt, ProgressOpt, guarded, note, open_store, shell_path, silence_stdout
from .output import OutputFormat, Screen, emit_rows
from .progress import StageProgress
from .store_state import warn_store_state

Check = enum.Enum("Check", {c: c for c in CHECKS}, type=str)
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def escape(text: str) -> str:
    """rich's markup escape; rich loaded only for the table output (not for json, jsonl or csv)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def _render_finding(console: Screen, f: dict[str, Any]) -> None:
    where = " ".join(x for x in (f"offset {f['offset']}" if f["offset"] is not None else "", f["file"] or "") if x)
    # too long for the line: on the next, indented as the message (a path wrapped to column 0 read as another finding)
    gap = " " if cell_len(f"{f['severity']:7} {f['kind']} {where}") <= console.width else "\n" + " " * 8
    console.print(f"[{SEVERITY_STYLE[f['severity']]}]{f['severity'].upper():7}[/] [bold]{f['kind']}[/]{gap}{escape(where)}")
    console.print(f"        {escape(f['message'])}")


def _counted(count: int, word: str, words: str = "") -> str:
    """``1 record``, ``2 records`` (``words``: the plural when it is not ``word`` + s)."""
    return f"{count} {word if count == 1 else words or word + 's'}"


def _render_summary(console: Screen, s: dict[str, Any], root: Path | None, window: str = "", unfinished: list[str] = ()) -> None:
    """The summary; on a store that is not sound, the commands that plan what to do next, or finish or undo an interrupted apply,
    restore or ``repair`` (``unfinished``; even with ``-q``), a ``salvage`` first where the next start drops messages. ``window``:
    the commit log range checked, which the verdict holds for."""
    cl, checks = s["commitlog"], s["checks"]
    rate = s["throughput_bytes_per_s"] / 1e6
    # the figures of the checks that ran (``--only cq`` reads no index file: "0 files" would say there is none)
    segments = f" in {_counted(cl['segments'], 'segment')}" if "commitlog" in checks else ""
    cq, ix = s["consume_queues"], s["index"]
    queues = [f"consume queues: {_counted(cq['queues'], 'queue')}, {_counted(cq['entries'], 'entry', 'entries')}"] if "cq" in checks else []
    index = [f"index: {_counted(ix['files'], 'file')}, {_counted(ix['entries'], 'entry', 'entries')}"] if "index" in checks else []
    walked = {"commitlog", "cq", "index"} & set(checks)  # the checks that walk the commit log
    console.print(
        f"[bold]Summary[/] {escape(shell_path(s['store'])) if s['store'] else ''} (broker {escape(s['version'] or '?')}; checks: {', '.join(checks)}"
        + (f"; commit log {window} only)\n" if window else ")\n")
        + (f"  commit log: {_counted(cl['records'], 'record')}, {cl['bytes']} bytes{segments}; logical end {cl['logical_end']} ({cl['end_reason']})\n" if walked else "")
        + (f"  {'; '.join(queues + index)}\n" if queues or index else "")
        + f"  elapsed {s['elapsed_s']:.2f} s, {rate:.1f} MB/s"
    )
    counts = s["findings"]
    kinds = ", ".join(f"{k}: {n}" for k, n in s["findings_by_kind"].items())
    errors, warnings = (_counted(counts[k], k) for k in ("error", "warning"))
    console.print(f"  findings: {errors}, {warnings}, {counts['info']} info" + (f" ({escape(kinds)})" if kinds else ""))
    for n in s["notes"]:
        console.print(f"  note: {escape(n)}")
    verdict = "sound in the range checked" if window else "the store is sound"  # a range is not the store: said what it holds for
    console.print(f"  [bold green]{verdict}[/]" if s["sound"] else "  [bold red]the store is NOT sound[/]")
    for line in unfinished:
        console.print(f"  next: {escape(line)}")
    if not s["sound"] and root is not None and not unfinished:
        store = escape(shell_path(root))
        if dropped := (s["next_start"] or {}).get("dropped_messages"):  # recover --yes zeroes them: saved first or lost
            console.print(f"  first: `{escape(salvage_command(root))}` saves what is readable of the {dropped} "
                          "message(s) the broker's next start drops (`recover` and `repair` zero them with --yes)")
        console.print(f"  next: `mqtool recover {store}` shows what the broker's next start will do, `mqtool repair {store}` "
                      "what makes the store sound (plans: nothing changes without --yes)")


def _emit(findings, fmt: OutputFormat, summary: Summary, root: Path | None, window: str = "", unfinished: list[str] = ()) -> None:
    out = sys.stdout
    if fmt is OutputFormat.table:
        console, findings, held = Screen(out), iter(findings), []  # the next-start line leads: findings are held until it is known
        while summary.next_start is None and (finding := next(findings, None)) is not None:  # known at the end if ever
            held.append(finding)
        if summary.next_start is not None:
            console.print(f"[bold]{escape(summary.next_start.line())}[/]")
        for finding in itertools.chain(held, findings):
            _render_finding(console, finding.as_dict())
        _render_summary(console, summary.as_dict(), root, window, unfinished)
    elif fmt is OutputFormat.json:
        out.write('{"findings": [')
        for i, finding in enumerate(findings):
            out.write(("\n" if i == 0 else ",\n") + json.dumps(finding.as_dict(), ensure_ascii=False))
        out.write('\n], "summary": ' + json.dumps(summary.as_dict(), ensure_ascii=False) + "}\n")
    elif fmt is OutputFormat.jsonl:
        for finding in findings:
            out.write(json.dumps(finding.as_dict(), ensure_ascii=False) + "\n")
        out.write(json.dumps({"summary": summary.as_dict()}, ensure_ascii=False) + "\n")
    else:
        emit_rows((f.as_dict() for f in findings), fmt, FINDING_FIELDS, out=out)
        note(json.dumps(summary.as_dict(), ensure_ascii=False))
    out.flush()


@guarded
def verify(
    store: Annotated[Path, typer.Argument(metavar="STORE", help="A store directory (or a commitlog folder, or one segment).", show_default=False)],
    only: Annotated[Optional[list[Check]], typer.Option("--only", metavar="CHECK", help="Run only this check: commitlog, cq, index, checkpoint or timer (repeatable).")] = None,
    from_offset: Annotated[Optional[int], typer.Option("--from-offset", min=0, metavar="OFFSET", help="Check the commit log from this offset (and only the entries pointing there).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", min=0, metavar="OFFSET", help="Stop before this commit log offset.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, metavar="N", help="Processes for the commit log check (segments in parallel).")] = 1,
    keep_going: Annotated[bool, typer.Option("--keep-going", help="After damage, resynchronise and check the rest of the log; count the valid records after each damaged range.")] = False,
    fmt: FormatOpt = OutputFormat.table, broker_config: BrokerConfigOpt = None, broker_version: BrokerVersionOpt = None,
    progress: ProgressOpt = None,
) -> None:
    """Check every CRC and every cross-file reference of a store; report each problem and where it is.

    Checks: commitlog (every record: magic, lengths, body CRC, PHYSICALOFFSET, 5.x property CRC,
    blank records, segment sequence, what lies after the logical end), cq (every consume queue
    entry against its record, and records missing from their queue), index (chains, headers,
    every entry against its record, missing keys), checkpoint (checkpoint, abort file,
    config/*.json, consumer offsets), timer (5.x timer log, wheel and timercheck). Exit codes:
    0 sound, 1 findings, 3 bad input.

    \b
    Example:
      mqtool verify /data/rocketmq/store --jobs 2 --keep-going --format jsonl
    """
    if from_offset is not None and to_offset is not None and to_offset <= from_offset:
        raise UsageError("--to-offset must be greater than --from-offset")
    checks = tuple(c.value for c in only) if only else CHECKS
    options = VerifyOptions(checks=checks, from_offset=from_offset, to_offset=to_offset, jobs=jobs, keep_going=keep_going)
    with open_store(store, broker_config, broker_version) as opened:
        unfinished = warn_store_state(opened.root)[1]
        from ..verify.verification import Verification

        bars = StageProgress(progress)
        run = Verification(opened, options, bars)

        def findings():
            yield from run.findings()
            bars.close()  # before the summary is printed

        checked = findings()
        try:
            window = "" if from_offset is None and to_offset is None else f"[{from_offset or 0}, {'end' if to_offset is None else to_offset})"
            _emit(checked, fmt, run.summary, opened.root, window, unfinished)
        except BrokenPipeError:  # `| head`: the reader is gone, the verdict is still the exit code: checked to the end, unsaid
            silence_stdout()
            for _ in checked:
                pass
        finally:
            bars.close()
    if not run.summary.sound:
        raise typer.Exit(EXIT_FINDINGS)
