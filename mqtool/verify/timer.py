"""``verify``'s timer store check (5.x, reference §9): the timer log, the wheel and ``config/timercheck``
against each other and against the commit log, as ``TimerMessageStore.recoverAndRevise`` and
``TimerWheel`` read them. Kinds ``timer-log-damaged``, ``timer-reference`` (apache/rocketmq#10668),
``timer-wheel``, ``timercheck-ahead``, ``timer-file-size`` and ``timer-stray-entry``, as docs/verify.md describes them."""

from __future__ import annotations

import bisect
import functools
from collections import Counter

from typing import TYPE_CHECKING, Callable, Iterator

from ..formats import timer as fmt
from ..store import Store
from ..store.nextstart import NextStart, refused_by
from ..store.timer import TimerStore, chain_break, recovered_wheel, timer_eras
from ..store.mappedfile import stray_after
from ..store.store import empty_not_last
from .commitlog import relative, stray_finding
from .findings import Finding, error, info, warning

if TYPE_CHECKING:
    from ..scan.timer import Resume, TimerReport, TimerWalk

WHEEL_FILE_SIZE = fmt.WHEEL_FILE_SIZE


def timer_findings(store: Store, start: NextStart | None = None, walked: TimerWalk | None = None) -> Iterator[Finding]:
    """The findings; the generator's return value is a one-line summary (None without a timer store). ``start``: the broker's
    next start, where the caller has it (else ``nextstart.next_start``); ``walked``: the timer store's ``scan.timer.TimerWalk``
    fed the commit log check's walk (``sharedwalk.SharedWalk.timer_walk``), else the report walks the log itself."""
    timer = walked.timer if walked is not None else TimerStore.open(store.root)
    if timer is None:
        return None
    yield from _load_findings(store)
    from ..scan.timer import timer_report, timer_resume  # pyarrow: only where there is a timer store

    report = timer_report(store, timer, walked)
    end = report.log_end
    if start is None:
        from ..store.nextstart import next_start

        start = next_start(store)
    resume = timer_resume(store, report, timer.check, start)
    again = functools.cache(lambda: _again(store, report, resume, timer.check))  # a commit log scan: only for an info that says it
    if not end.clean and resume.requeued:
        yield info("timer-log-damaged", f"timer log stops at offset {end.offset}: {end.reason}; the broker's timer recovery truncates it "
                   f"there, {_resumes(resume)} and enqueues the later messages again{again()}: nothing lost", file="timerlog",
                   details={"timer_log_offset": end.offset, "requeued": True})
    elif not end.clean:
        yield error("timer-log-damaged", f"timer log stops at offset {end.offset}: {end.reason}; the broker's timer recovery truncates it there",
                    file="timerlog", details={"timer_log_offset": end.offset})
    yield from _reference_findings(store, report)
    yield from _wheel_findings(store, timer, report)
    checked = list(_check_findings(store, timer, report, resume, again))
    yield from checked
    if end.clean and resume.requeued and resume.master and timer.check is not None and not any(
            (f.details or {}).get("requeued") for f in checked):
        yield _behind(resume, timer.check, again)
    states = Counter(row["state"] for row in report.rows)
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    return f"timer store: {len(report.rows)} timer log units ({counts or 'none'}), log end {report.log_end.offset}"


def _load_findings(store: Store) -> Iterator[Finding]:
    """``timer-file-size`` for each file of ``timerlog/`` of another length than the others, ``timer-stray-entry`` for each
    entry that is no timer log file (``Store.timer_log_listing``):
    ``TimerLog.load`` is a ``MappedFileQueue.load`` (``mappedfile.load_effect``), and ``BrokerController.initialize``
    (5.0.0-5.3.3) fails the start on its false; weighed over the 5.x eras the store may be from (no older broker
    loads the folder)."""
    eras, listing = timer_eras(store.version_guess.eras), store.timer_log_listing
    if not eras or listing is None:
        return
    for _, path, size, last in listing.wrong_lengths:
        yield _wrong_length(store, eras, listing, path, size, last)
    for entry, file_size, later in listing.strays:
        yield stray_finding(store, "timer-stray-entry", entry, file_size, later, "timer log file", "timerlog/", eras=eras)


def _wrong_length(store: Store, eras, listing, path, size: int, last: bool) -> Finding:
    """``timer-file-size``: a timer log file of another length than ``mappedFileSizeTimerLog`` (``TimerLogListing.file_size``:
    broker.conf's, else the other files', else its default where a lone file shows a cut), which ``TimerLog.load``'s
    ``MappedFileQueue.load`` refuses in every 5.x release (``nextstart.refused_by``); an empty one, the folder's last entry, only
    5.0.0-5.1.2 refuse: 5.1.3+ delete it (an info where every era of ``eras`` does)."""
    where = {"file": relative(store, path), "expected": listing.file_size, "found": size}
    after = empty_not_last(stray_after(path, listing.files, listing.entries), eras) if size == 0 else ""
    who = refused_by(store, size == 0 and last, eras)
    if who is None:
        return info("timer-file-size", f"{path.name} is an empty last timer log file: the broker deletes it at start "
                    "(MappedFileQueue.doLoad, 5.1.3+)", **where)
    like = {"others": "like the other timer log files", "config": "(mappedFileSizeTimerLog, of the broker config or its default)",
            "default": "(mappedFileSizeTimerLog's default: its bytes show a cut; --broker-config gives the configured size)"}
    like = like[listing.size_from]
    message = (f"{path.name} is {size} bytes, not {listing.file_size} {like}{after}: the broker refuses "
               f"to start (TimerLog.load's MappedFileQueue.load: \"length not matched\"){who}{listing.fixed_by}")
    return (error if not who else warning)("timer-file-size", message, **where)


def _reference_findings(store: Store, report: TimerReport) -> Iterator[Finding]:
    min_offset = store.commitlog.min_offset
    for row in report.rows:
        if row["state"] != "lost":
            continue
        where = {"timer_log_offset": row["timer_log_offset"], "size": row["size"]}
        if row["offset"] < min_offset:
            yield info("timer-reference", f"timer log unit at {row['timer_log_offset']} names offset {row['offset']}, before the commit log's min offset {min_offset} (expired)",
                       file="timerlog", offset=row["offset"], details=where)
        elif row["offset"] >= report.commitlog_end:
            yield error("timer-reference", f"timer log unit at {row['timer_log_offset']} names offset {row['offset']}, past the commit log's "
                        f"logical end {report.commitlog_end}: its dequeue reads nothing there and drops the timer, or, once new messages fill "
                        "that offset, an unrelated one it retries forever (apache/rocketmq#10668)",
                        file="timerlog", offset=row["offset"], expected=f"< {report.commitlog_end}", found=row["offset"], details={**where, "past_end": True})
        else:
            yield error("timer-reference", f"timer log unit at {row['timer_log_offset']}: no {fmt.TIMER_TOPIC} record of {row['size']} bytes at offset {row['offset']}",
                        file="timerlog", offset=row["offset"], details=where)


def _wheel_findings(store: Store, timer: TimerStore, report: TimerReport) -> Iterator[Finding]:
    if timer.wheel_path is None:
        yield _missing_wheel(report)
        return
    size = timer.wheel_size
    if size and size != WHEEL_FILE_SIZE:
        yield error("timer-wheel", f"timerwheel is {size} bytes; the broker expects {WHEEL_FILE_SIZE} and refuses to start", file="timerwheel", expected=WHEEL_FILE_SIZE, found=size)
        return
    units = {row["timer_log_offset"]: (row["delivery_time"], row["prev_pos"]) for row in report.rows}
    start = timer.log.files[0][0] if timer.log.files else 0  # before it: units of a deleted first file, gone
    slots = timer.wheel_slots()
    read = [slot for slot in slots if slot.is_read]
    end = report.log_end.offset
    bases, listing = [base for base, _ in timer.log.files], store.timer_log_listing
    revised = recovered_wheel(read, units, end, bases, timer.check, listing.file_size if listing is not None else None)
    # after the last unit of a file before the last: its end-of-file blank and what follows (units cut off with the file's
    # tail, which a repair ends with a blank there), where no unit the broker walks starts: gone
    ordered, tails = sorted(units), []
    for a, b in zip(bases, bases[1:]):
        i = bisect.bisect_left(ordered, b)
        tails.append((ordered[i - 1] + fmt.UNIT_SIZE if i and ordered[i - 1] >= a else a, b))
    for slot in slots:
        home = slot.time_slot % (2 * fmt.SLOTS_TOTAL)
        held = {"slot": slot.slot, "first_pos": slot.first_pos, "last_pos": slot.last_pos, "num": slot.num}  # each finding's details
        if not slot.is_read:
            # TimerWheel reads the slot of a time only where that time lies and only if it holds that time
            # (getSlot, checkPhyPos, getAllNum: index = time / precision % slots): the broker never reads this one
            yield info("timer-wheel", f"wheel slot {slot.slot} holds time {slot.time_slot}, which belongs in slot {home}: the broker never "
                       "reads it (TimerWheel.getSlot); damage it ignores", file="timerwheel", found=slot.time_slot,
                       details={**held, "unread": True})
            continue
        bad = [p for p in (slot.first_pos, slot.last_pos) if p != -1 and p not in units]
        last = revised.last_pos[slot.slot]
        if bad == [slot.last_pos] and slot.last_pos >= end and last != slot.last_pos and chain_break(last, units, start) is None:
            yield info("timer-wheel", f"wheel slot {slot.slot} (time {slot.time_slot}) ends at timer log offset {slot.last_pos}, past the "
                       f"timer log's end {report.log_end.offset}: the broker's recovery moves its lastPos back to its last unit before "
                       "that end (TimerWheel.checkPhyPos, recoverAndRevise) and enqueues the later units' messages again "
                       "(reviseQueueOffset): nothing lost", file="timerwheel", found=slot.last_pos,
                       details={**held, "revised": True})
            continue
        if bad and not revised.reads(slot):
            yield info("timer-wheel", f"wheel slot {slot.slot} (time {slot.time_slot}) points at timer log offset {bad[0]}, where no valid "
                       "unit starts: the broker read the slot already (its time is before timercheck's lastReadTimeMs) and never reads "
                       "it again (TimerMessageStore.dequeue); damage it ignores", file="timerwheel", found=bad[0],
                       details={**held, "read": True})
        elif bad:
            gone = min(bad) < start
            cut_off = any(a <= p < b for p in bad for a, b in tails)
            yield warning("timer-wheel", f"wheel slot {slot.slot} (time {slot.time_slot}) points at timer log offset {bad[0]}, where no valid unit starts"
                          + (f" (before the timer log's first file at {start}: its units are gone)" if gone else "")
                          + (" (after its file's last unit: the units there are gone)" if cut_off else ""),
                          file="timerwheel", expected="a unit position", found=bad[0],
                          details={**held, "past_end": min(bad) + fmt.UNIT_SIZE > report.log_end.offset, "before_start": gone,
                                   **({"cut_off": True} if cut_off else {})})
        elif revised.reads(slot) and (broken := chain_break(last, units, start)) is not None:
            yield _broken_chain(slot, *broken, any(a <= broken[1] < b for a, b in tails), held)


def _broken_chain(slot: fmt.WheelSlot, unit: int, pos: int, cut_off: bool, held: dict) -> Finding:
    """A slot not yet read whose first and last units are whole but whose chain from the ``lastPos`` the broker's start leaves
    (``recovered_wheel``) names a position where no unit starts (``chain_break``): units of a file's cut tail in the middle
    of it. ``TimerMessageStore.dequeue`` reads the blank or zeros there as a unit of prevPos 0 (5.0.0-5.3.3): ``repair``
    relinks the chain over the lost units (details: the slot's, ``held``, and ``chain_broken_at``: the unit naming the position)."""
    return warning("timer-wheel", f"wheel slot {slot.slot} (time {slot.time_slot}): its unit at timer log offset {unit} names {pos} as the "
                   "previous unit of its time, where no valid unit starts" + (" (after its file's last unit: the units there are gone)"
                   if cut_off else "") + ": TimerMessageStore.dequeue reads what lies there as a unit (a blank or zeros: prevPos 0, so "
                   "it goes on at unit 0 and delivers its message again) and never reaches the slot's units before it",
                   file="timerwheel", expected="a unit position", found=pos,
                   details={**held, "chain_broken_at": unit})


def _missing_wheel(report: TimerReport) -> Finding:
    """No ``timerwheel`` beside a timer log or checkpoint: ``TimerWheel``'s constructor creates an empty one and
    ``recoverAndRevise`` only revises slots that exist, so the pending units' slots are gone and the broker never
    delivers them (an error); without pending units the broker just starts an empty wheel and nothing is lost (an
    info: nothing to repair, damage seed 8800108)."""
    pending = sum(row["state"] == "pending" for row in report.rows)
    if pending:
        return error("timer-wheel", f"timerwheel is missing: the broker starts an empty wheel and never delivers the {pending} pending timer message(s) of the timer log",
                     file="timerwheel", expected=WHEEL_FILE_SIZE, found=None, details={"pending": pending})
    return info("timer-wheel", "timerwheel is missing (no timer message is pending): the broker starts an empty wheel, nothing is lost", file="timerwheel", expected=WHEEL_FILE_SIZE, found=None)


def _behind(resume: Resume, check: fmt.TimerCheck, again: Callable[[], str]) -> Finding:
    """``timercheck-behind``: a timer log that ends cleanly with units of messages from timercheck's ``masterTimerQueueOffset``
    on (a crash between two checkpoint flushes): ``TimerMessageStore.recover`` takes that offset, the lesser (5.0.0-5.3.3), and
    ``enqueue`` writes each of those messages a second unit (or puts a due one straight to ``dequeuePutQueue``), so the
    broker delivers it twice, as the real 5.3.3 broker's start on ``timer-crashed`` did (its timer log's unit count)."""
    return info("timercheck-behind", f"the timer log holds units of messages from timercheck's masterTimerQueueOffset "
                f"{check.master_timer_queue_offset} on: the broker's timer recovery resumes {fmt.TIMER_TOPIC} there, before the "
                f"message of the log's last unit (TimerMessageStore.recover takes the lesser of the two){_raised(resume)} and "
                f"enqueues the later messages again{again()}", file="config/timercheck", found=check.master_timer_queue_offset,
                details={"requeued": True})


def _again(store: Store, report: TimerReport, resume: Resume, check: fmt.TimerCheck | None) -> str:
    """The clause a ``requeued`` info adds where some of the messages enqueued again were delivered already, or, resumed from
    timercheck's ``masterTimerQueueOffset``, still have their unit in the timer log (``scan.timer.delivered_again``): the
    broker delivers them a second time. A slave (``StoreConfig.slave``) delivers none: ``BrokerController.start`` sets
    ``shouldRunningDequeue`` only for brokerId 0, which a SLAVE's never is (``BrokerStartup``), and without it
    ``TimerMessageStore.isRunningDequeue`` is false and ``putMessageToTimerWheel`` sends nothing due to ``dequeuePutQueue``
    (5.0.0-5.3.3). Nor does a slave enqueue them all: ``isRunningEnqueue`` is false for a slave without ``shouldRunningDequeue``
    once ``currQueueOffset`` reaches timercheck's ``masterTimerQueueOffset`` (0 without ``check``), the offset it last synced
    from its master (``SlaveSynchronize.syncTimerCheckPoint``), so it goes on only as that offset moves."""
    if store.config.slave:
        master = check.master_timer_queue_offset if check is not None else 0
        n = max(min(master, resume.queue_end if resume.queue_end is not None else master) - resume.offset, 0)
        synced, wait = f"masterTimerQueueOffset {master}, the one it last synced from its master", "until it syncs a later one"
        return ((f", which a slave does only for the {n} before {synced}, where its enqueue stops {wait}" if n
                 else f", which a slave does not: its enqueue stops at {synced}, {wait}")
                + " (TimerMessageStore.isRunningEnqueue), delivering none (brokerRole=SLAVE: TimerMessageStore.isRunningDequeue is false)")
    from ..scan.timer import delivered_again

    n = delivered_again(store, report, resume.offset)
    why = "delivered already or still in the timer log" if resume.master else "delivered already (their slots were read)"
    return f", {n} of them {why}, which it delivers a second time" if n else ""


def _raised(resume: Resume) -> str:
    """What a resume below the queue's min offset adds: where the enqueue goes on instead."""
    if resume.raised_from is None:
        return ""
    return (f", below the queue's min offset {resume.offset}, where it goes on (TimerMessageStore.enqueue raises it, 5.0.0+; "
            "recover, 5.3.2+)")


def _resumes(resume: Resume) -> str:
    """Where a ``requeued`` info says the broker's enqueue resumes: at timercheck's ``masterTimerQueueOffset``, or after the unit."""
    if resume.master:
        value = resume.offset if resume.raised_from is None else resume.raised_from
        master = (f"timercheck's masterTimerQueueOffset {value}" if resume.checked
                  else f"masterTimerQueueOffset {value} (config/timercheck is missing: TimerCheckpoint reads 0)")
        return (f"resumes {fmt.TIMER_TOPIC} at {master}, before the message of the log's "
                f"last unit (TimerMessageStore.recover takes the lesser of the two){_raised(resume)}")
    return f"resumes {fmt.TIMER_TOPIC} after the message of the log's last unit (reviseQueueOffset){_raised(resume)}"


def _resumes_at(resume: Resume) -> str:
    """Where the broker resumes, said where no ``requeued`` info holds."""
    why = ("timercheck's masterTimerQueueOffset, the lesser" if resume.master else "after the message of the log's last unit, "
           "which the queue lost (reviseQueueOffset)" if resume.after_unit else "timercheck's lastTimerQueueOffset: reviseQueueOffset "
           "reads no message of the log's last unit")
    said = resume.offset if resume.raised_from is None else resume.raised_from
    return f"{said} ({why}){_raised(resume)}"


def _zero_check(store: Store, resume: Resume, again: Callable[[], str], check: fmt.TimerCheck | None) -> Finding:
    """``timercheck-missing`` without ``config/timercheck``, ``timercheck-empty`` where it is empty or its four offsets are zeros:
    ``TimerCheckpoint``'s constructor (5.0.0-5.3.3) reads the file only where it exists, and maps a 4 KiB page of it, which
    extends a shorter one with zeros; either way every offset reads 0 and ``recover`` resumes the enqueue at 0, the lesser."""
    if check is None:
        kind, size = "timercheck-missing", None
        said = " is missing: its offsets read 0 (TimerCheckpoint reads the file only where it exists)"
    else:
        kind, size = "timercheck-empty", (store.root / "config" / "timercheck").stat().st_size
        said = (" is empty: its offsets read 0 (TimerCheckpoint maps a 4 KiB page of it, zeros past its end)" if not size
                else f"'s offsets are all 0 ({size} bytes), as they read without the file")
    return info(kind, f"config/timercheck{said}, so the broker's timer recovery resumes {fmt.TIMER_TOPIC} at masterTimerQueueOffset 0, "
                f"the lesser (TimerMessageStore.recover){_raised(resume)}, and enqueues the {resume.queue_end - resume.offset} messages "
                f"from there again{again()}", file="config/timercheck", expected="a timer checkpoint", found=size,
                details={"requeued": True, "from": resume.offset})


def _check_findings(store: Store, timer: TimerStore, report: TimerReport, resume: Resume, again: Callable[[], str]) -> Iterator[Finding]:
    check = timer.check
    if check is None or not any(check[:4]):
        if resume.queue_end is not None and resume.queue_end > resume.offset:
            yield _zero_check(store, resume, again, check)
        return
    end = report.log_end.offset
    if check.last_timer_log_flush_pos > end:
        where = {"file": "config/timercheck", "expected": f"<= {end}", "found": check.last_timer_log_flush_pos}
        message = f"timercheck says the timer log was flushed to {check.last_timer_log_flush_pos}, but it ends at {end}"
        if resume.requeued:
            yield info("timercheck-ahead", message + f": the broker's timer recovery {_resumes(resume)} and enqueues the later messages "
                       f"again, the cut units' too{again()}: nothing lost",
                       details={"requeued": True}, **where)
        else:
            past = f", past the queue's end {resume.queue_end} (5.3.2+: at that end)" if resume.past_end else ""
            yield warning("timercheck-ahead", message + f": the broker's timer recovery resumes {fmt.TIMER_TOPIC} at {_resumes_at(resume)}"
                          f"{past}, so the cut units' messages before that are not enqueued again", **where)
    max_offset = resume.queue_end
    if max_offset is None or check.last_timer_queue_offset <= max_offset:
        return
    message = (f"timercheck says {check.last_timer_queue_offset} timer messages were enqueued, but {fmt.TIMER_TOPIC} queue 0 ends at "
               f"{max_offset}")
    where = {"file": "config/timercheck", "expected": f"<= {max_offset}", "found": check.last_timer_queue_offset}
    eras = timer_eras(store.version_guess.eras)
    clamping = [e for e in eras if e in store.eras_where("clamps_timer_queue_offset")]
    if resume.requeued:
        yield info("timercheck-ahead", message + f": the broker's timer recovery {_resumes(resume)}, not there{again()}: nothing skipped",
                   details={"requeued": True}, **where)
    elif not resume.past_end:  # recover: currQueueOffset = min(it, masterTimerQueueOffset), 5.0.0-5.3.3
        yield info("timercheck-ahead", message + f": the broker's timer recovery resumes at its masterTimerQueueOffset "
                   f"{check.master_timer_queue_offset}, the lesser (TimerMessageStore.recover){_raised(resume)}: nothing skipped", **where)
    elif eras and clamping == eras:
        yield info("timercheck-ahead", message + ": the broker's timer recovery resumes at the queue's end (TimerMessageStore.recover "
                   "clamps it, 5.3.2+): nothing skipped", details={"clamped": True}, **where)
    else:
        there = "there" if resume.offset == check.last_timer_queue_offset else f"at {_resumes_at(resume)}"
        yield warning("timercheck-ahead", message + f": 5.0.0-5.3.1 resume the enqueue {there} (TimerMessageStore.recover) and never "
                      "enqueue the timer messages the queue gets before it reaches it" + ("; 5.3.2+ clamp it to the queue's end" if clamping
                                                                                           else ""), **where)
