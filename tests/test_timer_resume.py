"""Where 5.x's timer recovery resumes enqueuing rmq_sys_wheel_timer and who delivers again (``scan.timer.timer_resume``,
``_again``), against the real broker's 5.3.3 timer stores: a slave's role, the queue's min offset, a missing
``config/timercheck`` and the queue as ``DefaultMessageStore.load``'s recovery leaves it before the timer store loads."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, recovered, store_path
from mqtool.cli import app

SEGMENT = 1048576  # the fixtures' commit log segment size
SIZES = ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum", "mappedFileSizeTimerLog")


def findings(root, *args) -> list[dict]:
    result = CliRunner().invoke(app, ["verify", str(root), "--format", "json", *map(str, args)])
    assert "Traceback" not in result.output, result.output
    return json.loads(result.stdout)["findings"]


def timers(name: str) -> list[dict]:
    return [msg for msg in manifest("5.3.3", name)["messages"] if msg.get("timer")]


def cut_last_timer_file(root, cut: int) -> None:
    """The last timer log file of ``timer-small`` cut at ``cut`` and padded back with zeros (a lost unflushed tail)."""
    last = root / "timerlog" / "00000000000000008192"
    os.truncate(last, cut)
    os.truncate(last, 8192)


@pytest.mark.parametrize("role, acting", [("SLAVE", False), ("ASYNC_MASTER", False), ("SLAVE", True)])
def test_a_slave_delivers_none_of_the_messages_it_enqueues_again(tmp_path, role, acting):
    """5.3.3 ``timer-small``'s last timer log file cut at 1560: the broker enqueues the messages after the last whole unit's
    again, one of them delivered already, which a master delivers a second time. A slave (brokerRole=SLAVE, so brokerId > 0:
    ``BrokerStartup``) never gets ``shouldRunningDequeue`` (``BrokerController.start``: brokerId == 0), so
    ``TimerMessageStore.isRunningDequeue`` is false and it delivers nothing. Before, verify said the one was delivered a
    second time whatever the role in --broker-config. A slave that may act as master (enableSlaveActingMaster: it dequeues
    while it has the group's least brokerId alive, ``BrokerController.startService``) is counted as a master. Nor does a slave
    enqueue every later message: ``isRunningEnqueue`` stops it at timercheck's masterTimerQueueOffset, the one it last synced from
    its master; before, verify said it enqueues the later messages again, all of them."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    config = manifest("5.3.3", "timer-small")["storeConfig"]
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={config[k]}\n" for k in SIZES) + f"brokerRole={role}\nbrokerId={int(role == 'SLAVE')}\n"
                    + f"enableSlaveActingMaster={str(acting).lower()}\ntotalReplicas=2\n")
    at = 8192 + 1560 // 52 * 52
    queued = {u["timerLogOffset"]: m["timer"]["wheelQueueOffset"] for m in timers("timer-small") for u in m["timer"]["timerLogUnits"]}
    delivered = sum(m["timer"]["delivered"] for m in timers("timer-small") if m["timer"]["wheelQueueOffset"] > queued[at - 52])
    cut_last_timer_file(root, 1560)
    [ahead] = [f for f in findings(root, "--broker-version", "5.3.3", "--broker-config", conf)
               if f["kind"] == "timercheck-ahead" and f["details"] == {"requeued": True}]
    master = f"{delivered} of them delivered already (their slots were read), which it delivers a second time"
    synced = manifest("5.3.3", "timer-small")["timer"]["timercheck"]["masterTimerQueueOffset"]
    upto = synced - queued[at - 52] - 1  # a slave's enqueue stops at the masterTimerQueueOffset it synced (isRunningEnqueue)
    slave = (f"which a slave does only for the {upto} before masterTimerQueueOffset {synced}, the one it last synced from its master, "
             "where its enqueue stops until it syncs a later one (TimerMessageStore.isRunningEnqueue), delivering none (brokerRole=SLAVE: "
             "TimerMessageStore.isRunningDequeue is false)")
    assert delivered == 1 and upto > 0
    dequeues = role != "SLAVE" or acting
    assert (master in ahead["message"], slave in ahead["message"]) == (dequeues, not dequeues), ahead["message"]


def test_the_enqueue_resumes_at_the_timer_queues_min_offset_where_timercheck_is_below_it(tmp_path):
    """5.3.3 ``timer-small`` with its first commit log segment deleted (the timer queue's min offset moves to its first
    message in the second, ``correctMinOffset``), timercheck's masterTimerQueueOffset at 50 and the last timer log file cut:
    ``recover`` takes the master offset, below the queue's min offset, and ``TimerMessageStore.enqueue`` raises it to that
    min before it reads (every 5.x release; ``recover`` itself from 5.3.2). Before, verify said the enqueue resumes at 50."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    (root / "commitlog" / "00000000000000000000").unlink()
    with open(root / "config" / "timercheck", "r+b") as f:  # masterTimerQueueOffset at 24
        f.seek(24)
        f.write((50).to_bytes(8, "big"))
    cut_last_timer_file(root, 1560)
    kept = [m for m in timers("timer-small") if m["commitLogOffset"] >= SEGMENT]
    low = min(m["timer"]["wheelQueueOffset"] for m in kept)
    at = 8192 + 1560 // 52 * 52
    again = sum(m["timer"]["delivered"] or any(u["timerLogOffset"] < at for u in m["timer"]["timerLogUnits"]) for m in kept)
    [ahead] = [f for f in findings(root, "--broker-version", "5.3.3") if f["kind"] == "timercheck-ahead"]
    assert low > 50 and ahead["details"] == {"requeued": True}
    assert (f"resumes rmq_sys_wheel_timer at timercheck's masterTimerQueueOffset 50, before the message of the log's last unit "
            f"(TimerMessageStore.recover takes the lesser of the two), below the queue's min offset {low}, where it goes on "
            f"(TimerMessageStore.enqueue raises it, 5.0.0+; recover, 5.3.2+) and enqueues the later messages again, the cut units' "
            f"too, {again} of them delivered already or still in the timer log") in ahead["message"], ahead["message"]


def test_without_timercheck_the_broker_enqueues_the_whole_timer_queue_again(tmp_path):
    """5.3.3 ``timer-small`` without ``config/timercheck``: ``TimerCheckpoint``'s constructor reads the file only where it
    exists, so masterTimerQueueOffset is 0 and ``recover`` resumes there (the lesser), enqueuing every message of the
    queue again: those delivered already and those with a unit still in the timer log are delivered a second time. Before,
    verify said nothing (the store sound) and, with the log damaged, that the enqueue resumed after the last unit's message."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    (root / "config" / "timercheck").unlink()
    every = timers("timer-small")
    again = sum(m["timer"]["delivered"] or bool(m["timer"]["timerLogUnits"]) for m in every)
    [missing] = [f for f in findings(root, "--broker-version", "5.3.3") if f["kind"] == "timercheck-missing"]
    assert (missing["severity"], missing["details"]) == ("info", {"requeued": True, "from": 0})
    assert (f"resumes rmq_sys_wheel_timer at masterTimerQueueOffset 0, the lesser (TimerMessageStore.recover), and enqueues the "
            f"{len(every)} messages from there again, {again} of them delivered already or still in the timer log, which it "
            "delivers a second time") in missing["message"], missing["message"]


@pytest.mark.parametrize("kept", [120, None])
@pytest.mark.parametrize("abort, version, ahead", [(True, "5.3.1", None), (True, "5.3.3", None), (False, "5.3.1", "warning")])
def test_the_timer_queue_a_crash_recovery_rebuilds_is_read_whole(tmp_path, abort, version, ahead, kept):
    """5.3.3 ``timer-crashed`` (abort file present) with rmq_sys_wheel_timer queue 0 cut to ``kept`` entries, timercheck's queue
    offsets at 126: ``BrokerController`` loads the message store before the timer store, and its abnormal recovery
    re-dispatches every record from where it scans, rebuilding the queue's lost tail, so ``TimerMessageStore.recover`` reads
    137 entries and resumes at 126, as the real broker did on the store (``timerAfterLoad``). Before, verify warned that
    5.0.0-5.3.1 wait past the queue's end (and that 5.3.2+ clamp to it); without the abort file a 5.3.1 start dispatches
    nothing, and the warning stands. The same with the queue's folder gone (``kept`` None), which that recovery makes anew."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    queue = root / "consumequeue" / "rmq_sys_wheel_timer" / "0" / "00000000000000000000"
    if kept is None:
        shutil.rmtree(queue.parent)
    else:
        data = bytearray(queue.read_bytes())
        data[kept * 20:] = bytes(len(data) - kept * 20)
        queue.write_bytes(bytes(data))
    if not abort:
        (root / "abort").unlink()
    assert recovered("5.3.3", "timer-crashed")["timerAfterLoad"]["currQueueOffset"] == 126
    found = [f["severity"] for f in findings(root, "--broker-version", version) if f["kind"] == "timercheck-ahead"]
    assert found == ([ahead] if ahead else [])


@pytest.mark.parametrize("content", [b"", bytes(4096), bytes(20)], ids=["empty", "zeros", "short"])
def test_an_empty_or_zeroed_timercheck_reads_as_a_missing_one(tmp_path, content):
    """5.3.3 ``timer-small`` with ``config/timercheck`` empty, all zeros or 20 bytes of zeros: ``TimerCheckpoint``'s constructor
    (5.0.0-5.3.3) maps a 4 KiB page of the file, extending a shorter one with zeros, and reads its offsets as it does for a
    file that exists: all 0, as without the file, so ``recover`` resumes at masterTimerQueueOffset 0, the lesser, and enqueues
    the whole timer queue again. Before, verify said nothing: the store sound."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    (root / "config" / "timercheck").write_bytes(content)
    every = timers("timer-small")
    again = sum(m["timer"]["delivered"] or bool(m["timer"]["timerLogUnits"]) for m in every)
    [empty] = [f for f in findings(root, "--broker-version", "5.3.3") if f["kind"] == "timercheck-empty"]
    assert (empty["severity"], empty["found"], empty["details"]) == ("info", len(content), {"requeued": True, "from": 0})
    assert (f"resumes rmq_sys_wheel_timer at masterTimerQueueOffset 0, the lesser (TimerMessageStore.recover), and enqueues the "
            f"{len(every)} messages from there again, {again} of them delivered already or still in the timer log, which it "
            "delivers a second time") in empty["message"], empty["message"]


def test_an_undamaged_crashed_timer_store_delivers_the_messages_past_timerchecks_master_offset_twice(tmp_path):
    """5.3.3 ``timer-crashed`` as the real broker left it: its timer log ends cleanly with units of the messages from
    timercheck's masterTimerQueueOffset on, the checkpoint flushed before them; ``TimerMessageStore.recover`` resumes at that
    offset, the lesser (``timerAfterLoad``), and ``enqueue`` gives each of those messages a second unit: the real broker's
    start added a unit per message enqueued (``timerAfterShutdown``), so those with a unit already are delivered twice. Before,
    verify said so only where the log was damaged."""
    done = recovered("5.3.3", "timer-crashed")
    resumed = done["timerAfterLoad"]["currQueueOffset"]
    units = [done[k]["timerlog"]["unitCount"] for k in ("timerBeforeLoad", "timerAfterShutdown")]
    enqueued = [t for t in timers("timer-crashed") if t["timer"]["wheelQueueOffset"] >= resumed]
    twice = sum(t["timer"]["delivered"] or bool(t["timer"]["timerLogUnits"]) for t in enqueued)
    assert units[1] - units[0] == len(enqueued) and 0 < twice < len(enqueued)
    [behind] = [f for f in findings(store_path("5.3.3", "timer-crashed"), "--broker-version", "5.3.3") if f["kind"] == "timercheck-behind"]
    assert (behind["severity"], behind["found"], behind["details"]) == ("info", resumed, {"requeued": True})
    assert (f"from timercheck's masterTimerQueueOffset {resumed} on: the broker's timer recovery resumes rmq_sys_wheel_timer there, "
            "before the message of the log's last unit "
            f"(TimerMessageStore.recover takes the lesser of the two) and enqueues the later messages again, {twice} of them delivered "
            "already or still in the timer log, which it delivers a second time") in behind["message"], behind["message"]


@pytest.mark.parametrize("kept", [120, None])
def test_info_counts_the_timer_messages_not_yet_enqueued_from_where_verify_resumes(tmp_path, kept):
    """5.3.3 ``timer-crashed`` with timercheck's lastTimerQueueOffset at 50 and rmq_sys_wheel_timer queue 0 cut to ``kept``
    entries (or as it is): ``recover`` resumes at the lesser of the offset after the log's last unit's message and
    masterTimerQueueOffset (126, as the real broker did), never at lastTimerQueueOffset, on the queue the abnormal recovery
    rebuilt first (137 entries). Before, info counted from lastTimerQueueOffset on the queue's files as they are."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    with open(root / "config" / "timercheck", "r+b") as f:  # lastTimerQueueOffset at 16
        f.seek(16)
        f.write((50).to_bytes(8, "big"))
    if kept is not None:
        queue = root / "consumequeue" / "rmq_sys_wheel_timer" / "0" / "00000000000000000000"
        data = bytearray(queue.read_bytes())
        data[kept * 20:] = bytes(len(data) - kept * 20)
        queue.write_bytes(bytes(data))
    after = recovered("5.3.3", "timer-crashed")["timerAfterLoad"]
    result = CliRunner().invoke(app, ["info", str(root), "--broker-version", "5.3.3", "--format", "json"])
    timer = json.loads(result.stdout)["timer"]
    ends = after["enqueueBehindMessages"] + after["currQueueOffset"]
    assert (timer["queue_max_offset"], timer["not_enqueued"]) == (ends, after["enqueueBehindMessages"])


def test_a_slave_enqueues_nothing_past_the_master_offset_it_synced(tmp_path):
    """5.3.3 ``timer-crashed`` on a slave (brokerRole=SLAVE): ``recover`` resumes at timercheck's masterTimerQueueOffset (126, as
    the real broker did), and a slave's ``isRunningEnqueue`` is false from that offset on, the one it last synced from its master,
    so it enqueues none of the later messages again until it syncs a later one, and delivers none. Before, verify said a slave
    enqueues the later messages again."""
    config = manifest("5.3.3", "timer-crashed")["storeConfig"]
    conf = tmp_path / "broker.conf"
    conf.write_text("".join(f"{k}={config[k]}\n" for k in SIZES) + "brokerRole=SLAVE\nbrokerId=1\n")
    resumed = recovered("5.3.3", "timer-crashed")["timerAfterLoad"]["currQueueOffset"]
    [behind] = [f for f in findings(store_path("5.3.3", "timer-crashed"), "--broker-version", "5.3.3", "--broker-config", conf)
                if f["details"].get("requeued")]
    assert (f"enqueues the later messages again, which a slave does not: its enqueue stops at masterTimerQueueOffset {resumed}, the one "
            "it last synced from its master, until it syncs a later one (TimerMessageStore.isRunningEnqueue), delivering none "
            "(brokerRole=SLAVE: TimerMessageStore.isRunningDequeue is false)") in behind["message"], behind["message"]


def test_info_says_a_missing_timercheck_reads_as_zeros(tmp_path):
    """5.3.3 ``timer-crashed`` without ``config/timercheck``: info's timer section counts every queued timer message as not yet
    enqueued (``TimerCheckpoint`` reads 0) and now says why in a row of its own; before, it showed no timercheck row at all."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    (root / "config" / "timercheck").unlink()
    shown = CliRunner().invoke(app, ["info", str(root), "--broker-version", "5.3.3"], env={"COLUMNS": "100"}).stdout
    section = shown[shown.index("Timer store"):]
    assert "config/timercheck  missing: the broker reads its offsets as 0 (see verify)" in section, section
    assert "lastTimerQueueOffset" not in section
