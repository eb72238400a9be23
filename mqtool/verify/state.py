"""The checkpoint, the abort marker and ``config/*.json`` against the data (reference §7, §8, §1.4).

What the broker's next start would redo by itself (``store.redispatch``) decides whether missing
consume queue entries are a warning (rebuilt) or an error (lost).
"""

from __future__ import annotations

from typing import Iterator

from ..formats import checkpoint as cpfmt
from ..formats import config as cfgfmt
from ..store import Store
from ..store.rules import VersionRules
from ..store.store import A_DEVICE_CONFIG, A_FIFO, MISSING, NOT_A_FILE
from ..store.version import eras_label
from ..store import offsets
from ..store.nextstart import abort_refusal, bak_refusal, checkpoint_refusal, loading_eras, opened_first_refusal
from ..store.redispatch import abnormal_recovery_start, dispatching_recovery
from .findings import Finding, error, info, warning


def checkpoint_findings(store: Store, last_timestamp: int | None, records: int) -> Iterator[Finding]:
    path = store.path("checkpoint")
    if (why := checkpoint_refusal(store, "")) is not None:
        yield error("not-a-file", f"{why} and the broker refuses to start; `mqtool repair` moves it out", file="checkpoint")
        return
    if not path.is_file():
        yield warning(
            "checkpoint-missing",
            "no checkpoint file: the broker starts with every timestamp at 0, so an abnormal recovery would rescan from the first segment",
            file="checkpoint")
        return
    if store.checkpoint_size_problem is not None:
        yield warning("checkpoint-size", store.checkpoint_size_problem, file="checkpoint", expected=cpfmt.CHECKPOINT_FILE_SIZE,
                      found=path.stat().st_size)
    cp = store.checkpoint or cpfmt.StoreCheckpoint(0, 0, 0)
    if last_timestamp is None:
        return
    if records and cp.physic_msg_timestamp == 0 and cp.logics_msg_timestamp == 0:
        yield warning(
            "checkpoint-empty",
            "the checkpoint holds no timestamps although the commit log has messages: an abnormal recovery would rescan from the first segment",
            file="checkpoint", expected="the store time of flushed messages", found=0)
    yield from checkpoint_ahead_findings(cp, last_timestamp)


def checkpoint_ahead_findings(cp: cpfmt.StoreCheckpoint, last_timestamp: int) -> Iterator[Finding]:
    """``checkpoint-ahead``: a timestamp of ``cp`` later than the last valid message (also of the checkpoint a recovery
    persists: ``recovery.repair.predict_after_recovery``)."""
    for name, value in (("physicMsgTimestamp", cp.physic_msg_timestamp), ("logicsMsgTimestamp", cp.logics_msg_timestamp)):
        if value > last_timestamp:
            yield warning(
                "checkpoint-ahead",
                f"the checkpoint's {name} {value} is later than the last valid message (stored at {last_timestamp}): messages the "
                "broker had flushed are no longer in the commit log (lost writes, or a log cut short)", file="checkpoint",
                expected=f"<= {last_timestamp}", found=value, details={"field": name})


def opened_first_findings(store: Store) -> Iterator[Finding]:
    """``not-a-file``: a file the broker opens before it loads the commit log that it cannot use (``nextstart.opened_first_refusal``;
    a config file's: ``config_findings``)."""
    if store.root is not None and (refusal := opened_first_refusal(store)) is not None:
        yield error("not-a-file", f"{refusal[1]}: the broker refuses to start; `mqtool repair` moves it out", file=refusal[0])


def abort_findings(store: Store) -> Iterator[Finding]:
    if not store.abort_present:
        return
    start, why, bound = abnormal_recovery_start(store)
    end = store.commitlog.end_of_files
    pid = store.abort.pid
    runs = (f"abnormal recovery (recoverAbnormally) from offset {start} ({why}), re-dispatching every record after it"
            if dispatching_recovery(store) == "abnormal" else  # a DLedger broker before 5.2.0 (rules §8.4)
            f"DLedgerCommitLog's recovery as after a clean stop (from offset {start}: {why}), re-dispatching nothing")
    present = f"the abort file is present{f' (broker pid {pid})' if pid else ''}: the last run did not shut down cleanly"
    if store.abort.directory:  # File.exists(); a clean shutdown's File.delete removes only an empty one
        present = "abort is a directory, which the broker's File.exists() finds too: a clean shutdown removes it only if it is empty"
    if store.abort.special:  # File.exists() too; mqtool's recovery does not remove it (``planparts.unwritable_checkpoint``)
        present = "abort is a FIFO, socket or device node, which the broker's File.exists() finds too"
    if store.abort.unusable:
        if (refusal := abort_refusal(store)) is not None:
            yield error("not-a-file", refusal, file="abort")
    yield warning(
        "abort-present",
        f"{present}, so the next start runs {runs}",
        file="abort", details={"recovery_start_offset": start, "checkpoint_bound": bound, "bytes_to_rescan": max(end - start, 0)})


def config_findings(store: Store) -> Iterator[Finding]:
    """``config-unreadable`` of each config file (``config_file_findings``), then ``consumer_offset_findings``."""
    if not store.path("config").is_dir():
        return
    for name in cfgfmt.CONFIG_FILES:
        yield from config_file_findings(store, name)
    yield from consumer_offset_findings(store)


def config_file_findings(store: Store, name: str, without: frozenset[str] = frozenset()) -> Iterator[Finding]:
    """``config-unreadable``: config file ``name`` where the broker passes it over (``Store.load_config``; ``without``: the files
    of the two taken as moved out, as ``repair`` moves a FIFO), if the store's eras load it (``nextstart.loading_eras``); an
    error where its ``.bak`` fails the start too (``nextstart.bak_refusal``)."""
    if not (eras := loading_eras(store, name)):
        return
    loaded, shown = store.load_config(name, without=without), f"config/{name}"
    if (fifo := loaded.fifo) is not None:
        yield error("config-unreadable", f"{fifo}: {A_FIFO}, so the broker's start hangs where it loads {name}; "
                    "`mqtool repair` moves it out", file=fifo, found=A_FIFO)
        return
    table = cfgfmt.CONFIG_FILES[name]
    if (kept := cfgfmt.NULL_TABLE_KEPT.get(name)) and loaded.doc is not None and loaded.doc.get(table, {}) is None:
        yield error("config-unreadable", f"{loaded.source}: its {table!r} is null, which {kept}", file=loaded.source, found=None)
    problem, refusal = loaded.problems.get(shown, MISSING), bak_refusal(store, name, eras, without)
    if refusal is not None:  # ConfigManager.loadBak catches the throw: false
        problem = refusal[2]
        bak = f"is {NOT_A_FILE} either" if refusal[0] == NOT_A_FILE else f"cannot be read either ({refusal[0]})"
        yield error("config-unreadable", f"{shown}: {problem}; its {name}.bak {bak}, so ConfigManager.load returns false and "
                    f"the broker refuses to start{refusal[1]}", file=shown, found=problem)
    elif problem != MISSING:
        fallback = (f"the broker loads {name}.bak instead" if loaded.doc is not None
                    else f"its {name}.bak is missing or unreadable too, so the broker starts with an empty table")
        level = warning if loaded.doc is not None else error
        if problem == A_DEVICE_CONFIG and (in_place := [e for e in eras if VersionRules(e.representative).config_persisted_in_place]):
            fallback += (f"; the broker of {eras_label(in_place)} then persists the table into the device and empties {name}.bak "
                         "(MixAll.string2File writes in place), so its next start loads an empty table; `mqtool repair` moves it out")
            level = error if len(in_place) == len(eras) else level
        yield level("config-unreadable", f"{shown}: {problem}; {fallback}", file=shown, found=problem)


def consumer_offset_findings(store: Store, ranges: dict | None = None) -> Iterator[Finding]:
    """``consumer-offset-range``: the committed offsets ``mqtool offsets`` places (``store.offsets``; their lag, which
    reads every unit behind them, is not asked: it is no finding, and this runs after the walk, on one core). ``ranges``:
    (topic, queue id) -> ``QueueRange`` (None: no file) to place them against instead of the queue on disk, as after a
    recovery (``recovery.repair.predict_after_recovery``)."""
    if store.config_file("consumerOffset.json") is None:
        return
    try:
        _, rows = offsets.consumer_offsets(store, cache=None if ranges is None else dict(ranges), lag=False)
    except (ValueError, TypeError, AttributeError) as exc:
        yield warning("config-unreadable", f"config/consumerOffset.json: unexpected shape ({exc})", file="config/consumerOffset.json")
        return
    for r in sorted(rows, key=lambda r: (r["topic"], r["group"], r["queue_id"])):
        topic, group, queue_id, offset = r["topic"], r["group"], r["queue_id"], r["offset"]
        where = f"consumer group {group} on {topic}/{queue_id}"
        common = dict(file="config/consumerOffset.json", found=offset, details={"topic": topic, "group": group, "queue_id": queue_id})
        low, high = r["queue_min_offset"], r["queue_max_offset"]
        if r["relation"] == offsets.NO_QUEUE:
            yield info("consumer-offset-range", f"{where} has offset {offset} but the store has no such consume queue", expected="an existing queue", **common)
        elif r["relation"] == offsets.BEYOND_MAX:
            yield warning("consumer-offset-range", f"{where} is at offset {offset}, beyond the queue's max offset {high}: the broker "
                          "answers OFFSET_OVERFLOW and moves it back, so messages written meanwhile may be skipped or consumed twice",
                          expected=f"<= {high}", **common)
        elif r["relation"] == offsets.BELOW_MIN:
            yield info("consumer-offset-range", f"{where} is at offset {offset}, below the queue's min offset {low} (the messages in "
                       "between expired): the broker answers OFFSET_TOO_SMALL and moves it to the min", expected=f">= {low}", **common)
