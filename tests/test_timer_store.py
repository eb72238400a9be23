"""The 5.x timer store (reference §9) against the real broker's timer fixtures and their manifests."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import manifest, recovered, store_path
from mqtool.cli import app
from mqtool.formats import timer as fmt
from mqtool.scan.timer import timer_report
from mqtool.store import Store
from mqtool.store.timer import TimerStore

TIMER_STORES = ["timer-small", "timer-crashed"]


def _units_by_offset(m: dict) -> dict[int, tuple[dict, dict, dict]]:
    """timer log offset -> (message, its timer section, the unit) from the manifest's messages."""
    found = {}
    for message in m["messages"]:
        timer = message.get("timer")
        for unit in (timer or {}).get("timerLogUnits", ()):
            found[unit["timerLogOffset"]] = (message, timer, unit)
    return found


@pytest.mark.parametrize("name", TIMER_STORES)
def test_timer_log_units_equal_the_manifest(name):
    m = manifest("5.3.3", name)
    timer = TimerStore.open(store_path("5.3.3", name))
    units = list(timer.log.walk())
    assert len(units) == m["timer"]["timerlog"]["unitCount"] == len(_units_by_offset(m))
    listed = {u["offset"]: u for u in m["timer"]["timerlog"]["units"]}
    for unit in units:
        if unit.timer_log_offset in listed:
            e = listed[unit.timer_log_offset]
            assert (unit.size, unit.prev_pos, unit.magic, unit.curr_write_time_ms, unit.delay_time, unit.offset_py, unit.size_py, unit.hash_topic, unit.reserved) == (
                e["size"], e["prevPos"], e["magic"], e["currWriteTimeMs"], e["delayTime"], e["offsetPy"], e["sizePy"], e["hashTopic"], e["reserved"])
        message, _, e = _units_by_offset(m)[unit.timer_log_offset]
        assert (unit.offset_py, unit.size_py, unit.magic, unit.delivery_time) == (message["commitLogOffset"], message["size"], e["magic"], e["delayedTimeMs"])
    assert timer.log.end.clean and timer.log.end.offset == units[-1].timer_log_offset + fmt.UNIT_SIZE


@pytest.mark.parametrize("name", TIMER_STORES)
def test_fast_codecs_equal_the_construct_schemas(name):
    root = store_path("5.3.3", name)
    for path in sorted((root / "timerlog").iterdir()):
        data = path.read_bytes()
        for pos in range(0, len(data) - fmt.UNIT_SIZE + 1, fmt.UNIT_SIZE):
            if fmt.is_blank(data, pos):
                break
            parsed = fmt.TimerLogUnitStruct.parse(data[pos : pos + fmt.UNIT_SIZE])
            assert fmt.decode_unit(data, pos)[1:] == tuple(v for k, v in parsed.items() if not k.startswith("_"))
    page = (root / "config" / "timercheck").read_bytes()
    parsed = fmt.TimerCheckStruct.parse(page)
    assert tuple(fmt.decode_timer_check(page)) == tuple(v for k, v in parsed.items() if not k.startswith("_"))
    for slot in TimerStore.open(root).wheel_slots()[:20]:
        raw = (root / "timerwheel").read_bytes()[slot.slot * fmt.SLOT_SIZE : (slot.slot + 1) * fmt.SLOT_SIZE]
        assert tuple(slot[1:]) == tuple(v for k, v in fmt.WheelSlotStruct.parse(raw).items() if not k.startswith("_"))


@pytest.mark.parametrize("name", TIMER_STORES)
def test_wheel_and_timercheck_equal_the_manifest(name):
    m = manifest("5.3.3", name)["timer"]
    timer = TimerStore.open(store_path("5.3.3", name))
    slots = [(s.slot, s.time_slot * 1000, s.first_pos, s.last_pos, s.num, s.magic) for s in timer.wheel_slots()]
    assert slots == [(s["slot"], s["timeMs"], s["firstPos"], s["lastPos"], s["num"], s["magic"]) for s in m["timerwheel"]["nonEmptySlots"]]
    assert len(slots) == m["timerwheel"]["nonEmptySlotCount"]
    c, e = timer.check, m["timercheck"]
    assert (c.last_read_time_ms, c.last_timer_log_flush_pos, c.last_timer_queue_offset, c.master_timer_queue_offset, c.state_version, c.data_version_timestamp, c.data_version_counter) == (
        e["lastReadTimeMs"], e["lastTimerLogFlushPos"], e["lastTimerQueueOffset"], e["masterTimerQueueOffset"], e["dataVersionStateVersion"], e["dataVersionTimestamp"], e["dataVersionCounter"])


@pytest.mark.parametrize("name", TIMER_STORES)
def test_states_equal_what_the_broker_delivered(name):
    m = manifest("5.3.3", name)
    expected = _units_by_offset(m)
    with Store.open(store_path("5.3.3", name)) as store:
        report = timer_report(store, TimerStore.open(store.root))
    assert sum(r["state"] == "delivered" for r in report.rows) == len({t["wheelCommitLogOffset"] for _, t, _ in expected.values() if t["delivered"]}) > 0
    for row in report.rows:
        message, timer, unit = expected[row["timer_log_offset"]]
        state = "delivered" if timer["delivered"] else "rolled" if unit["magic"] & fmt.MAGIC_ROLL else "pending"
        assert row["state"] == state, row
        assert row["delivered_offset"] == (timer["delivery"]["commitLogOffset"] if timer["delivered"] else None)
        assert (row["offset"], row["real_topic"], row["real_queue_id"], row["uniq_key"]) == (message["commitLogOffset"], timer["realTopic"], int(timer["realQueueId"]), message.get("uniqKey"))


def test_a_unit_pointing_past_the_commit_log_end_is_lost(store_copy):
    """A stale timer log reference after a commit log truncation (apache/rocketmq#10668)."""
    root = store_copy("5.3.3", "timer-small")
    m = manifest("5.3.3", "timer-small")
    log = root / "timerlog" / "00000000000000000000"
    data = bytearray(log.read_bytes())
    past_end = m["commitLogMaxOffset"] + 1000
    data[52 + 28 : 52 + 36] = past_end.to_bytes(8, "big", signed=True)
    log.write_bytes(bytes(data))
    with Store.open(root) as store:
        rows = {r["timer_log_offset"]: r for r in timer_report(store, TimerStore.open(root)).rows}
    assert rows[52]["state"] == "lost" and rows[52]["offset"] == past_end
    assert rows[0]["state"] == "pending"


def test_dump_timer_cli(tmp_path):
    result = CliRunner().invoke(app, ["dump", "timer", str(store_path("5.3.3", "timer-small")), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == manifest("5.3.3", "timer-small")["timer"]["timerlog"]["unitCount"]
    for field in ("timer_log_offset", "magic", "offset", "delivery_time", "real_topic", "real_queue_id", "state"):
        assert field in rows[0]
    missing = CliRunner().invoke(app, ["dump", "timer", str(store_path("5.3.3", "clean-small"))])
    assert missing.exit_code == 3 and "no timer store" in missing.output


# ---- verify --only timer, on damaged copies ------------------------------------------------------

from mqtool.verify import Verification, VerifyOptions  # noqa: E402


def _timer_findings(root):
    with Store.open(root) as store:
        return [f for f in Verification(store, VerifyOptions(checks=("timer",))).findings()]


def _patch(path, at: int, value: int, width: int = 8) -> None:
    data = bytearray(path.read_bytes())
    data[at : at + width] = value.to_bytes(width, "big", signed=True)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name", TIMER_STORES)
def test_verify_timer_is_clean_on_the_real_stores(name):
    """Sound; ``timer-crashed``'s timer log holds units past timercheck's masterTimerQueueOffset, which the broker enqueues again."""
    found = [(f.kind, f.severity.value) for f in _timer_findings(store_path("5.3.3", name))]
    assert found == ([("timercheck-behind", "info")] if name == "timer-crashed" else [])


def test_verify_timer_finds_each_damage(store_copy):
    m = manifest("5.3.3", "timer-small")
    root = store_copy("5.3.3", "timer-small")
    log = root / "timerlog" / "00000000000000000000"
    past_end = m["commitLogMaxOffset"] + 4096
    _patch(log, 52 + 28, past_end)                 # unit 1 names an offset past the commit log end
    _patch(log, 104 + 28, 2709 + 1)                # unit 2 names an offset where its record does not start
    _patch(log, 52 * 100 + 12, 0x100, 4)           # unit 100's magic is invalid: the log ends there
    slot = next(s for s in m["timer"]["timerwheel"]["nonEmptySlots"])
    _patch(root / "timerwheel", slot["slot"] * 32 + 8, 13)  # a slot's first position is no unit
    _patch(root / "config" / "timercheck", 8, 10012 + 52 * 10)  # flushed further than the log holds
    findings = _timer_findings(root)
    found = {(f.kind, f.offset, f.severity.value) for f in findings}
    assert ("timer-reference", past_end, "error") in found
    assert ("timer-reference", 2709 + 1, "error") in found
    damaged = [f for f in findings if f.kind == "timer-log-damaged"]
    assert len(damaged) == 1 and damaged[0].details["timer_log_offset"] == 52 * 100
    wheel = [f for f in findings if f.kind == "timer-wheel"]
    assert any(f.details["slot"] == slot["slot"] and f.found == 13 for f in wheel)
    ahead = [f for f in findings if f.kind == "timercheck-ahead"]
    assert len(ahead) == 1 and ahead[0].found == 10012 + 52 * 10 and ahead[0].expected == "<= 5200"


def test_a_wheel_slot_holding_another_slots_time_is_never_read(store_copy):
    """Damage seed 4600303: bits flipped in a never-used slot gave it time 2^45 and first position 2.
    TimerWheel reads the slot of a time only at index time / precision % slots and only if it holds
    that time (getSlot, checkPhyPos, getAllNum), so the broker never reads it: verify says so (info),
    where it warned that the slot points at no unit, a warning no repair could remove. A slot that
    holds its own time but points at no unit stays a warning, where the broker is still to read it (its time from
    timercheck's lastReadTimeMs on); one the broker read already is an info too (``RecoveredWheel.reads``)."""
    root = store_copy("5.3.3", "timer-small")
    used = {s["slot"] for s in manifest("5.3.3", "timer-small")["timer"]["timerwheel"]["nonEmptySlots"]}
    free = next(i for i in range(1, 100) if i not in used)
    _patch(root / "timerwheel", free * 32, 1 << 45)  # its time: that of slot 2^45 % slots, not its own
    _patch(root / "timerwheel", free * 32 + 8, 2)  # its first position: no unit
    wheel = [f for f in _timer_findings(root) if f.kind == "timer-wheel"]
    assert [(f.severity.value, f.details["slot"], f.found) for f in wheel] == [("info", free, 1 << 45)]
    assert f"belongs in slot {(1 << 45) % (2 * fmt.SLOTS_TOTAL)}" in wheel[0].message
    _patch(root / "timerwheel", free * 32, free + 2 * fmt.SLOTS_TOTAL)  # a time this slot does hold, read long ago
    wheel = [f for f in _timer_findings(root) if f.kind == "timer-wheel"]
    assert [(f.severity.value, f.details["slot"], f.found, f.details.get("read")) for f in wheel] == [("info", free, 2, True)]
    wheels = 2 * fmt.SLOTS_TOTAL  # a time this slot holds, after lastReadTimeMs: still to read
    read_from = TimerStore.open(root).check.last_read_time_ms // manifest("5.3.3", "timer-small")["storeConfig"]["timerPrecisionMs"]
    _patch(root / "timerwheel", free * 32, (read_from // wheels + 1) * wheels + free)
    wheel = [f for f in _timer_findings(root) if f.kind == "timer-wheel"]
    assert [(f.severity.value, f.details["slot"], f.found) for f in wheel] == [("warning", free, 2)]


def test_verify_timer_refuses_a_wheel_of_the_wrong_size(store_copy):
    root = store_copy("5.3.3", "timer-small")
    with open(root / "timerwheel", "r+b") as f:
        f.truncate(1 << 20)
    wheel = [f for f in _timer_findings(root) if f.kind == "timer-wheel"]
    assert len(wheel) == 1 and wheel[0].severity.value == "error" and wheel[0].found == 1 << 20


@pytest.mark.parametrize("name", TIMER_STORES)
def test_info_shows_the_timer_store(name):
    m = manifest("5.3.3", name)
    result = CliRunner().invoke(app, ["info", str(store_path("5.3.3", name)), "--format", "json"])
    assert result.exit_code == 0, result.output
    timer = json.loads(result.stdout)["timer"]
    units = _units_by_offset(m)
    delivered = sum(1 for _, t, _ in units.values() if t["delivered"])
    assert timer["units"] == len(units) and timer["states"]["delivered"] == delivered
    assert timer["states"]["pending"] + timer["states"]["rolled"] == len(units) - delivered
    waiting = sorted(u["delayedTimeMs"] for _, t, u in units.values() if not t["delivered"])
    assert [d["delivery_time"] for d in timer["next_deliveries"]] == waiting[:5]
    assert sum(b["messages"] for b in timer["backlog_by_hour"]) == len(waiting)
    assert timer["timercheck"]["last_timer_queue_offset"] == m["timer"]["timercheck"]["lastTimerQueueOffset"]
    after = recovered("5.3.3", name)["timerAfterLoad"]  # the real broker's timer recovery: where it resumed, how many it had to enqueue
    behind = after["enqueueBehindMessages"]
    assert (timer["not_enqueued"], timer["queue_max_offset"]) == (behind, after["currQueueOffset"] + behind)


@pytest.mark.parametrize("name", TIMER_STORES)
def test_query_says_what_became_of_a_timer_message(name):
    """``query key STORE REAL_TOPIC KEY`` finds the timer message under rmq_sys_wheel_timer too, with its fate."""
    m = manifest("5.3.3", name)
    timers = [msg for msg in m["messages"] if msg.get("timer") and msg["keys"]]
    checked = 0
    for msg in timers[:: max(1, len(timers) // 12)]:
        timer = msg["timer"]
        result = CliRunner().invoke(app, ["query", "key", str(store_path("5.3.3", name)), timer["realTopic"], msg["keys"][0], "--format", "json"])
        assert result.exit_code == 0, result.output
        rows = [r for r in json.loads(result.stdout) if r["offset"] == msg["commitLogOffset"]]
        assert len(rows) == 1 and rows[0]["source"] == "timer", rows
        units = timer["timerLogUnits"]
        if timer["delivered"]:
            expected = ("delivered", timer["delivery"]["commitLogOffset"])
        elif units:
            expected = ("rolled" if units[-1]["magic"] & fmt.MAGIC_ROLL else "pending", None)
        else:
            expected = ("pending", None)  # not enqueued into the timer log yet
        assert (rows[0]["timer_state"], rows[0]["delivered_offset"]) == expected
        assert rows[0]["delivery_time"] == (units[-1]["delayedTimeMs"] if units else timer["timerOutMs"])
        checked += 1
    assert checked >= 10


def test_a_real_queue_id_the_broker_cannot_parse_is_no_queue_not_a_crash():
    """Before: a REAL_QID of "--1" or "²" passed the check (``lstrip("-").isdigit()``) and then
    made ``int`` raise, so one corrupt timer message ended dump, query, info and verify.
    ``Integer.parseInt``'s reading now decides: such a value is no queue id."""
    from mqtool.formats.dispatch import java_int_or_none  # what timer_report reads REAL_QID with

    assert [java_int_or_none(t) for t in ("3", "-1", "+2", "٣", None, "--1", "²", "", "1 ", "2147483648")] == [3, -1, 2, 3, None, None, None, None, None, None]


def test_a_timer_stores_verify_walks_the_commit_log_once(monkeypatch):
    """``timer-crashed``'s ``timercheck-behind`` says how many of the messages the broker enqueues again were delivered already or
    still have a unit (``scan.timer.delivered_again``). Before, that count walked the commit log twice more (from the message of
    the log's last unit for the queue's records, then all of it for their deliveries) after the timer check's own walk
    (``timer_report``); it is now taken from that walk. The count stays the manifest's: the 10 messages of queue offsets from
    timercheck's masterTimerQueueOffset on that have a unit or were delivered."""
    import mqtool.scan.timer as timer_scan

    walks = []

    class Counted(timer_scan.MessageScan):
        def __init__(self, store, **kw):
            walks.append(kw.get("stop"))  # a stop: the timer queue's redispatch, from the recovery's start (timer_queue_range)
            super().__init__(store, **kw)

    monkeypatch.setattr(timer_scan, "MessageScan", Counted)
    m = manifest("5.3.3", "timer-crashed")
    master = m["timer"]["timercheck"]["masterTimerQueueOffset"]
    again = sum(1 for msg in m["messages"] if (t := msg.get("timer")) and t["wheelQueueOffset"] >= master and (t["delivered"] or t["timerLogUnits"]))
    [behind] = _timer_findings(store_path("5.3.3", "timer-crashed"))
    assert f", {again} of them delivered already or still in the timer log, which it delivers a second time" in behind.message
    assert [stop for stop in walks if stop is None] == [None]


@pytest.mark.parametrize("checks", [None, ("commitlog", "timer")])
@pytest.mark.parametrize("name", ["timer-crashed", "timer-small-cut-before-recovery"])
def test_a_full_verify_gives_the_timer_check_the_commit_log_checks_walk(name, checks, store_copy, monkeypatch):
    """Issue #29. Before, a full ``verify`` walked the commit log for the commit log check (the cq and index checks on that walk,
    ``sharedwalk.py``) and then again for the timer check (``timer_report``'s scan from the min offset). The timer check now takes
    the commit log check's batches (``SharedWalk.timer_walk``), also where the cross-checks walk again (``timer-small`` zeroed
    from a timer message on to its first segment's end: the broker's recovery starts in the second and serves the log past the
    damage, which ``LogStream`` reads on and the timer check's walk never did), and without the cq and index checks
    (``--only commitlog,timer``, which walked twice until this stop: the shared walk was made for those checks alone; past such
    damage the timer check's walk goes on by itself). The findings, their order and the summary stay those of the timer check
    walking alone (no shared walk)."""
    import mqtool.scan.timer as timer_scan
    import mqtool.verify.verification as verification

    if name == "timer-crashed":
        root = store_path("5.3.3", name)
    else:
        root = store_copy("5.3.3", "timer-small")
        timers = [msg for msg in manifest("5.3.3", "timer-small")["messages"] if msg.get("timer")]
        cut = timers[len(timers) // 2]["commitLogOffset"]
        segment = root / "commitlog" / "00000000000000000000"
        assert cut < segment.stat().st_size
        _patch(segment, cut, 0, segment.stat().st_size - cut)
    walks = []

    class Counted(timer_scan.MessageScan):
        def __init__(self, store, **kw):
            # a walk of the log from its start, of its own (its scan on from where the records resume past damage: the same walk)
            walks.append(kw.get("walk") is None and kw.get("stop") is None and kw.get("start") is None)
            super().__init__(store, **kw)

    def verify() -> tuple[list[dict], dict, bool]:
        with Store.open(root) as store:
            v = Verification(store, VerifyOptions(checks=checks) if checks else VerifyOptions())
            findings = [f.as_dict() for f in v.findings()]
            summary = v.summary.as_dict()
        return findings, {k: summary[k] for k in summary if k not in ("elapsed_s", "throughput_bytes_per_s")}, v.cross_checks_shared

    monkeypatch.setattr(timer_scan, "MessageScan", Counted)
    findings, summary, cross_shared = verify()
    assert walks and not any(walks)
    assert cross_shared == (name == "timer-crashed" and checks is None)
    assert any(note.startswith("timer store: ") for note in summary["notes"])
    monkeypatch.setattr(verification, "SHARE_WALK", False)
    walks.clear()
    assert verify()[:2] == (findings, summary)
    assert walks.count(True) == 1


@pytest.mark.parametrize("walk", ["shared", "separate", "timer alone", "with the commit log check"])
def test_damage_before_the_recovery_start_loses_only_the_units_whose_records_it_holds(walk, store_copy, monkeypatch):
    """``timer-small`` with 20,000 bytes of its first segment zeroed from a timer message on: the broker's recovery starts in the
    second segment, never reads the zeros and keeps the log to its end, and its dequeue reads a unit's record wherever it lies
    below that end (``TimerMessageStore.getMessageByCommitOffset``; ``recoverAndRevise`` reads the timer log alone, 5.3.3).
    Before, the timer check's walk stopped at the zeros and called all 96 units from there on lost, ``timer-reference`` errors
    "past the commit log's logical end": now the damage is reported once (the commit log check), the units whose record lies in
    the zeros are the only ones lost, and every other unit keeps its state on the undamaged store, but for a delivered copy in
    the zeros (pending), on the shared walk, on a separate one, on the timer check's own and on the commit log check's alone."""
    import mqtool.verify.verification as verification

    width = 20_000
    with Store.open(store_path("5.3.3", "timer-small")) as store:
        sound = {row["timer_log_offset"]: row for row in timer_report(store, TimerStore.open(store.root)).rows}
    root = store_copy("5.3.3", "timer-small")
    segment = root / "commitlog" / "00000000000000000000"
    timers = [msg["commitLogOffset"] for msg in manifest("5.3.3", "timer-small")["messages"] if msg.get("timer")]
    first = [o for o in timers if o + width < segment.stat().st_size]
    cut = first[len(first) // 2]
    _patch(segment, cut, 0, width)
    zeroed = range(cut, cut + width)
    lost = {t: row for t, row in sound.items() if row["offset"] in zeroed}
    assert lost and any(cut + width <= row["offset"] < segment.stat().st_size for row in sound.values())  # served, in the segment
    if walk == "separate":
        monkeypatch.setattr(verification, "SHARE_WALK", False)
    checks = {"timer alone": ("timer",), "with the commit log check": ("commitlog", "timer")}.get(walk)
    with Store.open(root) as store:
        v = Verification(store, VerifyOptions(checks=checks) if checks else VerifyOptions())
        findings = list(v.findings())
        assert v.summary.next_start is None or v.summary.next_start.scan_from > cut + width
        rows = timer_report(store, TimerStore.open(store.root)).rows
    references = [f for f in findings if f.kind == "timer-reference"]
    assert sorted(f.offset for f in references) == sorted(row["offset"] for row in lost.values())
    assert not any((f.details or {}).get("past_end") for f in references)
    if walk != "timer alone":
        assert [f.offset for f in findings if f.kind == "damaged-range"] == [cut]
    for row in rows:
        before = sound[row["timer_log_offset"]]
        moved = before["state"] == "delivered" and before["delivered_offset"] in zeroed
        expected = "lost" if row["timer_log_offset"] in lost else "pending" if moved else before["state"]
        assert row["state"] == expected
    [note] = [n for n in v.summary.notes if n.startswith("timer store: ")]
    assert f"{len(lost)} lost" in note


@pytest.mark.parametrize("walk", ["shared", "separate", "timer alone"])
def test_a_dledger_stores_timer_walk_goes_on_past_damage_dledgers_recovery_keeps(walk, tmp_path, monkeypatch):
    """No fixture is a DLedger store with a timer store: a broker switched to DLedger keeps its classic commit log before the
    DLedger data (§15.5, ``test_dledger.mixed_store``), here 5.3.3 ``timer-small``'s, with its timer log, wheel and timercheck,
    then ``dledger-small``'s entries. A timer message's magic zeroed in the classic log: no recovery reads that log once
    DLedger data exist (``dledgerstart.walk_resume``), so the broker keeps it and serves the records after the damage. Before,
    the timer check's own walk went on past such damage on classic stores only: on this one it stopped there and called the
    128 units from it on lost, ``timer-reference`` errors "past the commit log's logical end"; now only the unit of the damaged
    record is lost and every other unit keeps its state on ``timer-small``, on each walk verify gives the timer check. In a full
    verify the timer check reads the cq and index checks' walk (``Verification._cross_check``: a DLedger log's commit log check
    feeds no shared walk); before, it walked the log once more."""
    import shutil

    from test_dledger import mixed_store

    import mqtool.scan.timer as timer_scan
    import mqtool.verify.verification as verification

    walks = []

    class Counted(timer_scan.MessageScan):
        def __init__(self, store, **kw):
            walks.append(kw.get("walk") is None and kw.get("stop") is None and kw.get("start") is None)  # from the log's start
            super().__init__(store, **kw)

    source = store_path("5.3.3", "timer-small")
    with Store.open(source) as store:
        sound = {row["timer_log_offset"]: row for row in timer_report(store, TimerStore.open(store.root)).rows}
    root = mixed_store(tmp_path, "5.3.3", "timer-small")[0]
    for part in ("timerlog", "config"):
        shutil.copytree(source / part, root / part)
    shutil.copyfile(source / "timerwheel", root / "timerwheel")
    timers = sorted(msg["commitLogOffset"] for msg in manifest("5.3.3", "timer-small")["messages"] if msg.get("timer"))
    cut = timers[len(timers) // 3]
    _patch(root / "commitlog" / f"{0:020d}", cut + 4, 0, 4)  # its magic code
    lost = {t for t, row in sound.items() if row["offset"] == cut}
    assert lost and sum(row["offset"] > cut for row in sound.values()) > 50
    if walk == "separate":
        monkeypatch.setattr(verification, "SHARE_WALK", False)
    monkeypatch.setattr(timer_scan, "MessageScan", Counted)
    with Store.open(root, version="5.3.3") as store:
        assert store.is_dledger
        v = Verification(store, VerifyOptions(checks=("timer",)) if walk == "timer alone" else VerifyOptions())
        findings = list(v.findings())
        assert walks.count(True) == (walk != "shared")
        rows = timer_report(store, TimerStore.open(store.root)).rows
    references = [f for f in findings if f.kind == "timer-reference"]
    assert [f.offset for f in references] == [cut] * len(lost)
    if walk != "timer alone":
        assert [f.offset for f in findings if f.kind == "damaged-range"] == [cut]
    assert {row["timer_log_offset"]: row["state"] for row in rows} == {t: "lost" if t in lost else row["state"] for t, row in sound.items()}


def test_a_walk_batch_holding_no_timer_message_and_no_delivery(monkeypatch):
    """The timer report's walk took a batch's rows carrying an identity it looks for with ``batch.take(list)``: an empty list is
    an Arrow null array, which ``take`` refuses (ArrowNotImplementedError), so a stretch of the commit log as long as a walk batch
    (32,768 records alone, about 8 MiB of records on ``verify``'s walk) with no timer message and no delivery in it ended
    ``verify``, ``info``, ``dump timer`` and ``query`` with a traceback. On batches of 7 records, many such, the report is the
    one of a single batch."""
    import mqtool.scan.timer as timer_scan

    class Small(timer_scan.MessageScan):
        def __init__(self, store, **kw):
            super().__init__(store, **{**kw, "batch": 7})

    with Store.open(store_path("5.3.3", "timer-small")) as store:
        whole = timer_report(store, TimerStore.open(store.root))
        monkeypatch.setattr(timer_scan, "MessageScan", Small)
        small = timer_report(store, TimerStore.open(store.root))
    assert (small.rows, small.deliveries, small.commitlog_end) == (whole.rows, whole.deliveries, whole.commitlog_end)
    assert small.queued.equals(whole.queued) and whole.queued.num_rows == len(whole.rows) > 0
