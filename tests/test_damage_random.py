"""Randomized damage (issue #11, #28): each seed damages a copy of a real-broker fixture 1-3 times
(``damage_support``: bit flips, cut files, zeroed ranges, garbage appended, stray files, deleted
files, cut consume queue files), then runs ``info``, ``verify``, ``dump``, ``recover`` and
``repair`` as a user would, with a timeout: no traceback, only documented exit codes, and
``repair --yes`` ends in a store that ``verify`` passes or whose only findings are lost data
(commit log damage the recovery does not cut). ``bench/damage_run.py`` runs the same at scale.

The seeds are fixed and printed; ``MQTOOL_DAMAGE_SEEDS=N`` adds N more (printed too, so a
failure can be replayed with ``MQTOOL_DAMAGE_SEED=S``). Below them, the failure classes the
damage run found, each on the damage that showed it.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from conftest import copy_store, manifest
from damage_support import (CUT_FILES, DAMAGES, DISK_FAULTS, KINDS, LAYOUT_FAULTS, LOST_PAGES, beyond_lost, damage, damage_run, fixture_conf, kept_messages,
                            repaired_fixture, run, survivors, tree)
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_REFUSED
from mqtool.formats import dledger as dfmt
from mqtool.store.timer import TimerStore

FIXED_SEEDS = list(range(6))
TIMEOUT = 120


def seeds() -> list[int]:
    if os.environ.get("MQTOOL_DAMAGE_SEED"):
        return [int(os.environ["MQTOOL_DAMAGE_SEED"])]
    extra = int(os.environ.get("MQTOOL_DAMAGE_SEEDS", "0"))
    return FIXED_SEEDS + list(range(1000, 1000 + extra))


def repaired_findings(root, version: str | None = None, name: str | None = None) -> tuple[int, list[dict]]:
    """``repair --yes`` (exit code) and then ``verify``'s findings, checked as every run checks them. Without
    --broker-version first: where the store's marks leave eras whose stages plan apart, repair refuses (exit 4),
    naming the versions, and leaves the store as it was; then ``version`` (the fixture's) is given. Where it refuses
    to guess a size only broker.conf tells, fixture ``name``'s (``fixture_conf``) is given."""
    before, given = tree(root), ()
    rc, out, err = run("repair", root, "--yes", "--format", "json", timeout=TIMEOUT)
    if rc == EXIT_REFUSED and name is not None and "pass --broker-config" in err:
        assert tree(root) == before, err
        given = ("--broker-config", fixture_conf(version, name, root.parent))
        rc, out, err = run("repair", root, "--yes", "--format", "json", *given, timeout=TIMEOUT)
    if rc == EXIT_REFUSED and version is not None and "pass --broker-version" in err:
        assert tree(root) == before, err
        given += ("--broker-version", version)
        rc, out, err = run("repair", root, "--yes", "--format", "json", *given, timeout=TIMEOUT)
    if rc == EXIT_BAD_INPUT:
        return rc, []
    assert rc in (EXIT_OK, EXIT_FINDINGS), err
    assert all(s["why"] for s in json.loads(out)["steps"])  # the plan is printed before it is applied
    vrc, out, _ = run("verify", root, "--format", "jsonl", *given, timeout=TIMEOUT)
    findings = [json.loads(line) for line in out.splitlines()][:-1]
    failing = [f for f in findings if f["severity"] != "info"]
    assert (vrc == EXIT_OK) == (not failing)
    # repair exits 1 for lost data only: a consumer offset outside its queue is verify's warning, not lost data
    assert (rc == EXIT_FINDINGS) == any(f["kind"] != "consumer-offset-range" for f in failing)
    return rc, findings


@pytest.mark.parametrize("seed", seeds())
def test_random_damage(seed, tmp_path):
    rng = random.Random(seed)
    version, name = KINDS[(seed * 7) % len(KINDS)]  # 7 is prime to the number of kinds: every kind within len(KINDS) seeds
    root = copy_store(version, name, tmp_path / "x y")  # a path with a space
    what = [damage(root, rng) for _ in range(rng.randint(1, 3))]
    print(f"seed {seed}: {version}/{name}: {'; '.join(what)}")
    run("info", root, timeout=TIMEOUT)
    run("verify", root, "--format", "jsonl", timeout=TIMEOUT)
    run("dump", root, "--limit", "50", timeout=TIMEOUT)
    run("recover", root, "--format", "json", timeout=TIMEOUT)
    _, findings = repaired_findings(root, version, name)
    left = beyond_lost(findings)
    assert not left, f"seed {seed} ({what}): after repair --yes verify reports more than lost data: {left[:3]}"


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_dledger_index_units_that_disagree_are_rewritten_from_the_entries(tmp_path, version):
    """DLedgerMmapFileStore.recover (reference §15.4) rewrites every index unit from the first one
    that disagrees with its entry: after ``repair`` the units are the broker's bytes again."""
    from mqtool.recovery.planners import plan_recover
    from mqtool.recovery.repair import plan_with_verify_after
    from mqtool.store import Store

    root = copy_store(version, "dledger-crashed", tmp_path)
    index = root / "dledger-n0" / "index" / "00000000000000000000"
    original = index.read_bytes()
    data = bytearray(original)
    data[100 * dfmt.INDEX_UNIT_SIZE : 130 * dfmt.INDEX_UNIT_SIZE] = bytes(30 * dfmt.INDEX_UNIT_SIZE)
    data[200 * dfmt.INDEX_UNIT_SIZE + 9] ^= 0x40  # a flipped bit in unit 200's pos
    index.write_bytes(data)
    with Store.open(root) as store:
        plan = plan_with_verify_after(store, lambda walked: plan_recover(store, walked=walked))
    rewrites = [a for a in plan.actions if a.op == "write-dledger-index"]
    assert [(a.path, a.start) for a in rewrites] == [("dledger-n0/index/00000000000000000000", 100 * dfmt.INDEX_UNIT_SIZE)]
    assert not [e for e in plan.verify_after if e.kind == "dledger-index"]
    rc, findings = repaired_findings(root)
    # info alone: the broker's own quirk its recovery repeats (the record ending an index file indexed twice)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    assert index.read_bytes() == original


def test_dledger_index_units_are_taken_by_position_not_by_their_index_field(tmp_path):
    """Damage seed 3000084: a bit set in the term of the unit after the last entry. DLedger reads the
    unit of entry i at i * 32 (``DLedgerMmapFileStore.recover``, reference §15.4), whatever its index
    field says; mqtool keyed the units by that field, so the stray unit (index field 0) replaced unit
    0: the rewrite started at unit 0, not at the unit that disagrees, and the stray unit was not
    counted, so it was not zeroed and ``repair`` left it. The recovery rewrites the units from unit 24 and leaves the stray unit
    (``MmapFileList.truncateOffset`` moves the write position only); ``repair``'s ``zero-dledger-units`` zeroes it."""
    from mqtool.recovery.planners import plan_recover
    from mqtool.recovery.repair import plan_with_verify_after
    from mqtool.store import Store

    root = copy_store("4.9.7", "dledger-small", tmp_path)
    index = root / "dledger-n0" / "index" / "00000000000000000000"
    original = index.read_bytes()
    units = len(original) // dfmt.INDEX_UNIT_SIZE
    written = next(i for i in range(units) if not any(original[i * dfmt.INDEX_UNIT_SIZE : (i + 1) * dfmt.INDEX_UNIT_SIZE]))
    data = bytearray(original)
    data[24 * dfmt.INDEX_UNIT_SIZE + 9] ^= 0x40  # unit 24's pos
    data[written * dfmt.INDEX_UNIT_SIZE + 24] = 0x01  # the term of the unit after the last entry
    index.write_bytes(data)
    with Store.open(root) as store:
        plan = plan_with_verify_after(store, lambda walked: plan_recover(store, walked=walked))
    assert [(a.op, a.start, a.end) for a in plan.actions if a.path == "dledger-n0/index/00000000000000000000"] == [
        ("write-dledger-index", 24 * dfmt.INDEX_UNIT_SIZE, written * dfmt.INDEX_UNIT_SIZE),
    ]
    assert [(e.kind, e.fixed_by) for e in plan.verify_after if e.kind == "dledger-index"] == [("dledger-index", "zero-dledger-units")]
    rc, findings = repaired_findings(root)
    assert rc == EXIT_OK and not findings
    assert index.read_bytes() == original


def test_checkpoint_rewritten_from_the_last_record_when_the_first_is_damaged(tmp_path):
    """A deleted checkpoint and a damaged first record: the commit log check stops at the damage,
    but the rewritten checkpoint holds the store time of the log's last message (the value verify's
    checkpoint check compares it with), not zero: ``repair`` leaves only the lost record."""
    from mqtool.formats import checkpoint as cpfmt

    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "checkpoint").unlink()
    first = root / "commitlog" / "00000000000000000000"
    data = bytearray(first.read_bytes())
    data[6] ^= 0x02  # the first record's magic code
    first.write_bytes(data)
    rc, findings = repaired_findings(root)
    assert rc == EXIT_FINDINGS and not beyond_lost(findings)
    assert "checkpoint-empty" not in {f["kind"] for f in findings}
    cp = cpfmt.decode_checkpoint((root / "checkpoint").read_bytes())
    assert cp.physic_msg_timestamp == cp.logics_msg_timestamp == manifest("4.9.7", "clean-small")["messages"][-1]["storeTimestamp"]


def test_an_index_file_rebuilt_from_a_negative_store_timestamp_is_named_in_digits(tmp_path):
    """Damage seed 14000774 (``--lost-pages --disk-faults --no-version``): a bit flip made the first record's
    STORETIMESTAMP negative (no CRC covers it). The rebuilt index file was named after it, "-2922749980414112152490",
    a name ``list_index_files`` passes over, so verify found no index after repair. A negative time now names the
    file as time 0: digits, which the store model and the broker's name-sorted load both read."""
    from mqtool.store.index import list_index_files

    root = copy_store("4.9.7", "clean-small", tmp_path)
    first = root / "commitlog" / "00000000000000000000"
    data = bytearray(first.read_bytes())
    stored = manifest("4.9.7", "clean-small")["messages"][0]["storeTimestamp"]
    at = data.index(stored.to_bytes(8, "big"), 0, 100)  # the first record's STORETIMESTAMP (it has KEYS: it opens the index)
    data[at] |= 0x80  # now negative
    first.write_bytes(data)
    for path in (root / "index").iterdir():  # the index lost: repair rebuilds it from the log
        path.unlink()
    rc, findings = repaired_findings(root, "4.9.7")
    assert rc == EXIT_OK and findings == [], findings
    assert [p.name for p in list_index_files(root / "index")] == ["19700101000000000"]
    assert sorted(p.name for p in (root / "index").iterdir()) == ["19700101000000000"]


def test_timer_units_of_messages_the_recovery_cut_are_lost_data(tmp_path):
    """A damaged record at the start of the last segment: the broker's recovery cuts the log there,
    and the timer log still names the timer messages after the cut (the broker retries them
    forever): ``repair`` reports them, and the timercheck counts that include them, as lost data."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    last = root / "commitlog" / "00000000000001048576"
    data = bytearray(last.read_bytes())
    data[6] ^= 0x02  # magic code of the segment's first record
    last.write_bytes(data)
    rc, findings = repaired_findings(root)
    refs = [f for f in findings if f["kind"] == "timer-reference" and f["severity"] == "error"]
    assert rc == EXIT_FINDINGS and refs and not beyond_lost(findings)
    assert all(f["offset"] >= 1048576 and f["details"]["past_end"] for f in refs)


def test_wheel_slots_with_units_on_both_sides_of_a_timer_log_cut_are_revised_not_lost(tmp_path):
    """A timer log cut short: slots whose units all lie past the cut are cleared by ``repair``; slots with units on both sides
    still name a unit past the cut as lastPos, but TimerMessageStore.recover revises them (checkPhyPos finds lastPos past the
    log's end, recoverAndRevise(minFirst, false) sets it to the slot's last unit it walks), so they are no lost data; nor is
    timercheck's flush position past the cut (reviseQueueOffset enqueues the cut units' messages again): repair ends sound."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    log = root / "timerlog" / "00000000000000000000"
    log.write_bytes(log.read_bytes()[:3088])
    end = 3088 // 52 * 52  # the unit the cut crosses ends the log
    both_sides = {s.slot for s in TimerStore.open(root).wheel_slots() if s.is_read and s.first_pos < end <= s.last_pos}
    rc, findings = repaired_findings(root, "5.3.3", "timer-crashed")
    wheel = [f for f in findings if f["kind"] == "timer-wheel"]
    assert rc == EXIT_OK and both_sides and not beyond_lost(findings)
    assert {(f["severity"], f["details"].get("requeued")) for f in findings if f["kind"] == "timercheck-ahead"} == {("info", True)}
    assert {(f["severity"], f["details"]["slot"], f["details"].get("revised")) for f in wheel} == {("info", s, True) for s in both_sides}


def test_a_record_cut_inside_its_body_ends_recovery_at_its_crc_before_its_length(tmp_path):
    """A segment cut inside a record's body and padded by ``repair``: the record's TOTALSIZE then
    disagrees with its zeroed fields too, but checkMessageAndReturnSize checks the body CRC as it
    reads the body, before the length (reference §3.1): 4.2.0's abnormal recovery stops there
    (-1) instead of advancing by TOTALSIZE, so ``repair`` plans that cut and ends sound."""
    from mqtool.recovery.planners import plan_recover
    from mqtool.store import Store

    root = copy_store("4.2.0", "crashed-small", tmp_path)
    segment = root / "commitlog" / "00000000000001048576"
    with open(segment, "r+b") as f:
        f.truncate(341347)  # inside the body of the record at 1376994
        f.truncate(1048576)  # as repair's resize-segment pads it
    with Store.open(root) as store:
        plan = plan_recover(store)
    assert (plan.commitlog.valid_end, plan.commitlog.end_reason.split()[0]) == (1376994, "crc")
    rc, findings = repaired_findings(root)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"]


def test_wheel_slots_of_a_deleted_timer_log_file_are_lost_data(tmp_path):
    """The first timer log file deleted: the broker loads the files left, and TimerMessageStore.recover
    revises only the slots of the units it walks (recoverAndRevise), so slots still name units of the
    deleted file: those timer messages are never delivered. ``repair`` reports them as lost data; those of slots the broker
    read already (before timercheck's lastReadTimeMs), which it never reads again, are infos (``details.read``)."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    (root / "timerlog" / "00000000000000000000").unlink()
    rc, findings = repaired_findings(root)
    wheel = [f for f in findings if f["kind"] == "timer-wheel"]
    failing = [f for f in wheel if f["severity"] != "info"]
    assert rc == EXIT_FINDINGS and failing and not beyond_lost(findings)
    assert all(f["details"]["before_start"] and f["found"] < 8192 for f in failing)
    assert {f["details"].get("read") for f in wheel if f not in failing} == {True}


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
@pytest.mark.parametrize("change", ["cut", "cut-in-its-first-unit", "grown"])
def test_a_lone_dledger_index_file_of_the_wrong_length_is_resized(tmp_path, version, change):
    """DLedger's ``MmapFileList.load`` refuses an index file of another length than it maps: a file cut
    inside a unit is padded to DLedger's default index file size (the recovery then rewrites its units
    from the entries), one with bytes appended after its last unwritten unit is trimmed back. Before, a
    file cut inside its first unit (20 bytes) made the plan seek before the file's start (exit 5)."""
    root = copy_store(version, "dledger-crashed", tmp_path)
    index = root / "dledger-n0" / "index" / "00000000000000000000"
    data = index.read_bytes()
    index.write_bytes({"cut": data[:10000], "cut-in-its-first-unit": data[:20]}.get(change, data + bytes(range(1, 101))))
    rc, out, _ = run("repair", root, "--dry-run", "--format", "json", timeout=TIMEOUT)
    (step,) = [s for s in json.loads(out)["steps"] if s["step"] == "resize-segment"]
    assert step["paths"] == ["dledger-n0/index/00000000000000000000"]
    rc, findings = repaired_findings(root)
    assert not [f for f in findings if f["severity"] != "info"], findings
    assert index.stat().st_size == (len(data) if change == "grown" else 32 * 5 * 1024 * 1024)
    if change == "grown":
        assert index.read_bytes() == data


def test_units_after_a_damaged_timer_log_unit_are_enqueued_again(tmp_path):
    """Bit flips in a timer log unit (its size and magic): the broker's timer recovery truncates the
    timer log there (deleting the later file) and ``reviseQueueOffset`` resumes rmq_sys_wheel_timer after the
    message of the unit before it, enqueuing the later messages again; ``repair`` clears the wheel slots
    whose units all lay after the damage (their new units would name themselves), and the store ends sound
    but for the damage itself, an info (``details.requeued``)."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    log = root / "timerlog" / "00000000000000000000"
    data = bytearray(log.read_bytes())
    data[20 * 52 + 3] ^= 0x10  # unit 20's size
    data[20 * 52 + 9] ^= 0x01  # and its magic
    log.write_bytes(data)
    rc, findings = repaired_findings(root)
    damaged = [f for f in findings if f["kind"] == "timer-log-damaged"]
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"]
    assert [(f["details"]["timer_log_offset"], f["details"].get("requeued")) for f in damaged] == [(20 * 52, True)]


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_a_deleted_dledger_index_file_is_created_from_the_entries(tmp_path, version):
    """DLedgerMmapFileStore.recover with no index file: no unit matches, so the walk starts at the
    first data file and ``indexFileList.append`` maps a new index file (DLedger's default size,
    which ``DLedgerCommitLog`` does not set) and writes every unit from its entry: ``repair``
    creates it with the broker's unit bytes, and ``restore`` deletes it again."""
    root = copy_store(version, "dledger-crashed", tmp_path / "s")
    index = root / "dledger-n0" / "index" / "00000000000000000000"
    original = index.read_bytes()
    written = len(original.rstrip(b"\0"))
    index.unlink()
    rc, findings = repaired_findings(root)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    assert index.stat().st_size == 32 * 5 * 1024 * 1024
    with open(index, "rb") as f:
        assert f.read(len(original)) == original[:written] + bytes(len(original) - written)


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_info_of_a_dledger_store_whose_data_files_are_empty(tmp_path, version):
    """Damage seed 14002988 (``--cut-files --lost-pages --disk-faults``): every DLedger data file left empty.
    ``info`` failed (exit 5) reading the first entry of a file that holds none, then the state of an entry walk
    that never started; it reports no entry, and where the walk ends: where DLedger's recovery walk ends, as the next
    start's line says (info once walked records and said the walk never started, under a line keeping up to the last file)."""
    root = copy_store(version, "dledger-crashed", tmp_path / "s")
    for path in (root / "dledger-n0" / "data").iterdir():
        path.write_bytes(b"")
    rc, out, err = run("info", root, "--format", "json", timeout=TIMEOUT)
    assert rc == EXIT_OK, err
    doc = json.loads(out)["dledger"]
    assert (doc["entries"], doc["first_index"], doc["last_index"], doc["last_term"]) == (0, None, -1, None)
    last = max(int(p.name) for p in (root / "dledger-n0" / "data").iterdir())
    assert (doc["end_offset"], doc["end_reason"]) == (last, "blank-in-last-segment")
    assert f"keeps [0, {last})" in " ".join(run("verify", root, timeout=TIMEOUT)[1].split())


@pytest.mark.parametrize("store,seed", [("4.9.7/dledger-crashed", 113), ("5.3.3/timer-small", 134), ("4.4.0/retention-small", 99), ("4.2.0/crashed-small", 321),
                                        ("5.3.3/crashed-small", 443), ("5.3.3/timer-small", 494), ("5.3.3/timer-crashed", 1078),
                                        ("4.9.2/retention-small", 1143), ("4.9.7/dledger-small", 1149), ("4.0.0/clean-small", 3017),
                                        ("5.3.3/timer-crashed", 3013), ("4.9.7/clean-small", 3350), ("4.8.0/clean-small", 3297),
                                        ("5.3.3/dledger-crashed", 1254), ("5.3.3/dledger-crashed-cqloss", 3010), ("5.3.3/timer-small", 3239),
                                        ("4.2.0/crashed-small", 3291), ("4.9.2/retention-small", 6093), ("4.4.0/crashed-small", 6128),
                                        ("5.3.3/timer-crashed", 808), ("5.3.3/config-real", 1567),
                                        ("4.2.0/cqext-small", 1850), ("5.3.3/timer-crashed", 1888), ("4.9.2/crashed-small", 20132),
                                        ("4.5.1/clean-small", 60265), ("5.0.0/clean-small", 100243),
                                        ("5.3.3/dledger-crashed-cqloss", 200380), ("4.9.7/dledger-crashed", 700060),
                                        ("5.3.3/config-real", 1200817), ("4.9.2/config-real", 2000491),
                                        ("5.1.4/clean-small", 2200757), ("5.3.3/clean-small", 4800051),
                                        ("4.2.0/clean-small", 8800114), ("5.3.3/timer-crashed", 8800108)])
def test_damage_runs_that_failed_before(store, seed, tmp_path):
    """113: DLedger's checkpoint deleted; repair writes a new one, and restore must delete it again (the
    apply notes the file it creates). 134: timerwheel deleted with timer messages pending; their deliveries
    are lost data (the broker starts an empty wheel), not something repair leaves unexplained. 99, 321: a
    segment grown by appended bytes ties (or outnumbers nothing) with the good ones: the segment size
    inferred from the files is the power of two, so the grown file is the one of the wrong length. 443: a bit flip
    in a record's PHYSICALOFFSET: the dispatch trusts the field, so the record's index entries point where it claims
    to be, part of that lost record (a rebuild writes them there again). 494: garbage appended to a timer log
    file: the timer log is a mapped file queue as the commit log is, and the grown file is trimmed. 1078: the
    timerwheel cut short: TimerWheel refuses a wheel of the wrong length, so it is padded with empty slots. 1143:
    the only segment left cut short: its name (3 MiB) is a multiple of the segment size, 1 MiB, the largest power
    of two dividing it, and the segment is padded to that. 1149: a DLedger record with a bad body CRC and a deleted
    queue: DLedger's recovery checks no CRC and keeps the log past it, so rebuild-cq dispatches on past it too. 3017,
    3013: a bit flip in a record's QUEUEOFFSET: the entry is where the broker's dispatch appends the record, so the
    damaged field is lost data and no rebuild is planned. 3350: a middle segment deleted and a queue cut: the rebuilt
    queue appends the records after the gap right after those before it, as the broker does (lost data, not a fault).
    3297: the first segment cut short and the index damaged: the rebuilt index goes on past the zeros, as doReput does.
    1254, 3010: the DLedger index file deleted: the broker's recovery creates it and writes every unit from its entry. 3239:
    the first timer log file deleted: the wheel slots naming its units are lost data. 3291: a 4.2.0 segment cut inside
    a record's body: its CRC fails before its length disagrees, so the abnormal recovery stops there. 6093: the two
    segments left, one cut and one grown: no size divides both names, the size is the power of two that does. 6128: a
    bit flip in a STORETIMESTAMP (no CRC covers it) names a new index file in a year past 9999. 808: a timer log
    unit's fields zeroed but its size and (flag) magic: TimerMessageStore.recoverAndRevise keeps it, and the dequeue
    finds no message at the offset it names and drops it: its timer message is lost data. 1567: a flipped TOTALSIZE
    in a record before the segment the broker's recovery scans from, and the index damaged: the rebuilt index holds
    the records the broker serves after it (the scan resumes where the log does, not TOTALSIZE further on). 1850:
    the same past zeros in the first segment (not to the next segment). 1888: the timer log cut: config/timercheck
    counts units that are gone, lost data. 20132: eight bytes of a record's TOPIC zeroed: no consume queue directory
    can be named after a topic with NUL bytes, so the broker's dispatch fails for it and the record is lost data
    (was exit 5: the rebuild tried to create the directory). 60265, 100243: zeros in a segment before the one the
    broker's recovery scans from: the rebuilt queues hold the records the broker serves after them, as the rebuilt
    index does (doReput would skip to the next segment and leave those records without queue entries). 200380: the
    tail of a DLedger data file zeroed inside an entry's record: DLedger's recovery checks entry headers only and keeps
    that entry, so verify reports the message in it as lost data, not a cut the recovery never makes. 700060: every
    DLedger data file deleted: DLedgerCommitLog recovers the (empty) classic commit log instead (was exit 5). 1200817:
    bits flipped in a record's QUEUEID (2 to -1610612734): the rebuild writes its entry in TopicTest/-1610612734, as
    the broker's dispatch would, and the broker loads that directory (Integer.parseInt takes the sign): verify used to
    skip it and call the entry missing. 2000491: both segments grown by appended bytes (1 and 20): no size seen divides
    both names, and the size is the power of two that does, though every file is larger (repair used to quarantine the
    first segment, its name no multiple of 1048596). 2200757: a record with a flipped PHYSICALOFFSET after a damaged
    range the broker never reads (it lies before the recovery's start segment): the broker serves the record, but
    verify's commit log check stopped at that range, so the field's damage went unreported and the keys the broker's
    buildIndex skips for it (the field below the index's end) were called fixable. 4800051: a record's QUEUEID and
    QUEUEOFFSET flipped (536870915, 2^60 + 3): the position QUEUEOFFSET * 20 wraps around a Java long, and the rebuild wrote
    the entry off the unit grid where fillPreBlank rounds up to a whole unit; verify called the entry a fixable mismatch,
    where the broker wrote it where no read of that queue offset finds it: lost data. 8800114: a record's QUEUEOFFSET
    flipped to 2^61 + 44, whose position wraps around to a negative Java long: the 4.2.0+ dispatch skips it as written
    already (the rebuild does too), but verify compared the unwrapped field with the write position and called the
    record a missing entry of a queue file named at 4.6e19, where it is lost data. 8800108: the timer log damaged in
    its first unit and the timerwheel deleted: nothing is pending, the broker starts an empty wheel and loses nothing,
    so the missing wheel is an info; as a warning it stood after repair, which has nothing to do for it."""
    version, name = store.split("/")
    out = damage_run(version, name, seed, tmp_path)
    assert out.problem is None, (out.damages, out.detail)


@pytest.mark.parametrize("store,seed,lost_pages", [("4.9.2/retention-small", 7000128, False), ("5.3.3/dledger-crashed-cqloss", 6400030, True),
                                                   ("5.3.1/clean-small", 14004934, True)])
def test_disk_fault_runs_that_failed_before(store, seed, lost_pages, tmp_path):
    """Runs of ``damage_run.py --disk-faults`` (the damages with emptied files, misdirected pages, files grown with
    zeros; ``lost_pages``: with ``--lost-pages`` too), with the survivors oracle. 7000128: a queue file deleted in a
    store whose recovery dispatches that queue's last record anew: the records before it get their entries back from
    repair's rebuild (``test_records_before_a_queue_the_recovery_dispatched_anew_get_their_entries``). 6400030: the
    lone DLedger index file left empty: repair failed (exit 5, its size inferred as 0); DLedger's ``MmapFileList.load``
    refuses it in every version, so it is quarantined and the broker's recovery writes the index anew. 14004934: a
    segment left empty (its messages lost, so no rebuild of their queues: it would renumber them) and the offset bytes
    of an entry before it zeroed: the entry pointed where no record starts and its record, before any damage of the
    log, had no entry, so its message was not consumable; repair's ``mend-units`` writes the record's entry at its
    QUEUEOFFSET."""
    version, name = store.split("/")
    out = damage_run(version, name, seed, tmp_path, kinds=(LOST_PAGES if lost_pages else DAMAGES) + DISK_FAULTS, survivors_kept=True)
    assert out.problem is None, (out.damages, out.detail)


@pytest.mark.parametrize("store,seed,given", [("4.9.7/clean-small", 9400025, True), ("4.9.7/rewrite-clean", 9400076, True), ("4.4.0/clean-small", 10400137, True),
                                              ("3.2.6/crashed-small", 14005936, False), ("5.3.3/dledger-crashed-cqloss", 14011195, False)])
def test_cut_file_runs_that_failed_before(store, seed, given, tmp_path):
    """Runs of ``damage_run.py --cut-files --lost-pages --disk-faults``. 9400025, 9400076: a segment before the last
    cut, and damage in a later one where the broker's recovery cuts the log. The cut's queue entries became fillers
    with entries after them; the recovery then cut those later entries, and the fillers ended their queues
    (``filler_tails``): from 4.5.0 the broker's dispatch would skip those queues' new messages. verify's
    ``cq-filler-tail`` has repair rebuild the queues, which end before the fillers. 10400137: a segment deleted and
    a bit flip in the size of an entry before it, in a queue with entries into the deleted segment: no rebuild (it
    would renumber the queue), so the entry stayed and its message, before any damage of the log, was not
    consumable; repair's ``mend-units`` writes the record's size in place. 14005936 (``--no-version``): a 3.2.6
    store's queues end with the fillers of a cut segment's lost records, which up to 4.4.0 skip nothing: the
    oracle's ``filler_tails`` had flagged them as the 4.5.0+ harm (the tool's verify, era-aware, did not). 14011195
    (``--no-version``): a DLedger index page zeroed before the last entry and a stale page copied past it: the
    recovery's rewrite fills the zeroed units, so the stale ones after the last entry then follow on from them; the
    truncation, which counted units from the first and stopped at the zeroed stretch, left them, and verify after
    repair found them (``dledger-index``)."""
    version, name = store.split("/")
    out = damage_run(version, name, seed, tmp_path, kinds=LOST_PAGES + DISK_FAULTS + CUT_FILES, survivors_kept=True, version_given=given)
    assert out.problem is None, (out.damages, out.detail)


@pytest.mark.parametrize("store,seed", [("5.3.3/clean-small", 14020011), ("5.1.4/crashed-small", 14020008)])
def test_layout_fault_runs(store, seed, tmp_path):
    """Runs of ``damage_run.py --layout-faults``, with the survivors oracle and the restore compared by links and file
    types. 14020011: two consume queue folders moved to another file system and linked back, each with a file there
    cut, and ``lock`` a FIFO. 14020008: ``abort`` a FIFO, which the broker's ``File.exists()`` finds: an abnormal start
    (``test_abort_directory_is_an_abnormal_start``)."""
    version, name = store.split("/")
    out = damage_run(version, name, seed, tmp_path, kinds=DAMAGES + LAYOUT_FAULTS, survivors_kept=True)
    assert out.problem is None, (out.damages, out.detail)
    assert any("linked back" in d or "FIFO" in d for d in out.damages), out.damages


@pytest.mark.parametrize("at_base", [False, True], ids=["fillPreBlank", "cut-segment"])
@pytest.mark.parametrize("version,flagged", [("4.4.0", False), ("4.9.7", True), ("5.3.3", True)])
def test_a_queue_ending_with_a_filler_is_found_from_4_5_0_and_rebuilt(version, flagged, at_base, tmp_path):
    """``fillPreBlank`` writes fillers before a queue's first entry; a crash between them and the entry leaves
    fillers as the queue's last units. From 4.5.0 ``ConsumeQueue.recover`` then sets ``maxPhysicOffset`` to the
    filler's offset + size (2147483647), and the dispatch skips the queue's new messages; up to 4.4.0 it is the
    filler's offset, 0, and nothing is skipped. So for repair's filler at a cut segment's base (``at_base``):
    ``maxPhysicOffset`` is that base + 2147483647."""
    from mqtool.formats import consumequeue as cqfmt
    from mqtool.store import Store

    root = copy_store(version, "clean-small", tmp_path / "s")
    with Store.open(root) as store:
        queue = max(store.consume_queues, key=lambda q: q.recover().max_offset)
        last = queue.recover().max_offset - 1
        path = dict(queue.files)[last * cqfmt.ENTRY_SIZE - last * cqfmt.ENTRY_SIZE % queue.file_size]
        phys = queue.read_entry(last).phys_offset
    filler = cqfmt.filler_at(phys - phys % SEGMENT if at_base else 0)
    with open(path, "r+b") as f:
        f.seek(last * cqfmt.ENTRY_SIZE % queue.file_size)
        f.write(cqfmt.ENTRY.pack(*filler))
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", version, timeout=TIMEOUT)
    tails = [f for f in map(json.loads, out.splitlines()) if f.get("kind") == "cq-filler-tail"]
    assert [(f["details"]["topic"], f["details"]["queue_id"], f["details"]["queue_offset"]) for f in tails] == ([(queue.topic, queue.queue_id, last)] if flagged else [])
    assert all(f"maxPhysicOffset to {filler[0] + cqfmt.FILLER_SIZE}," in f["message"] for f in tails) and (filler[0] > 0) == at_base
    rc, findings = repaired_findings(root, version)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    with Store.open(root) as store:
        rebuilt = store.consume_queue(queue.topic, queue.queue_id)
        assert rebuilt.recover().max_offset == last + 1 and not rebuilt.read_entry(last).is_filler  # the record's entry again


@pytest.mark.parametrize("version", ["4.4.0", "4.9.7"])
def test_a_filler_unit_inside_a_segment_is_an_entry_a_read_cannot_pass(version, tmp_path):
    """A unit of a filler's size and tags code whose offset is inside a segment: a consumer's read of it,
    ``MappedFile.selectMappedBuffer(pos, 2147483647)``, overflows ``pos + size`` and throws (only pos 0, a
    segment's base, returns null and is passed), so the queue is stuck there. Before: read as a filler, it
    was nothing up to 4.4.0 and a ``cq-filler-tail`` warning from 4.5.0. Now an entry pointing where no
    record starts, and repair rebuilds the queue without it."""
    from mqtool.formats import consumequeue as cqfmt
    from mqtool.store import Store

    root = copy_store(version, "clean-small", tmp_path / "s")
    with Store.open(root) as store:
        queue = max(store.consume_queues, key=lambda q: q.recover().max_offset)
        end = queue.recover().max_offset
        inside = queue.read_entry(end - 1).phys_offset + 16
        path = dict(queue.files)[end * cqfmt.ENTRY_SIZE - end * cqfmt.ENTRY_SIZE % queue.file_size]
    with open(path, "r+b") as f:
        f.seek(end * cqfmt.ENTRY_SIZE % queue.file_size)
        f.write(cqfmt.ENTRY.pack(inside, cqfmt.FILLER_SIZE, 0))
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", version, timeout=TIMEOUT)
    found = [f for f in map(json.loads, out.splitlines()) if f.get("severity") in ("error", "warning")]
    assert [(f["kind"], f["offset"], f["details"]["queue_offset"]) for f in found] == [("cq-entry-dangling", inside, end)], found
    rc, findings = repaired_findings(root, version)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    with Store.open(root) as store:
        assert store.consume_queue(queue.topic, queue.queue_id).recover().max_offset == end


SEGMENT = 1 << 20  # the fixtures' commit log segment size


@pytest.mark.parametrize("version", ["4.0.0", "4.9.7", "5.3.3"])
@pytest.mark.parametrize("which,byte,bit", [("a queue's first record", 20, 6), ("a later record", 27, 6)])
def test_a_damaged_queue_offset_field_is_lost_data_not_a_queue_fault(tmp_path, version, which, byte, bit):
    """A bit flipped in a record's QUEUEOFFSET (outside the body CRC: every recovery keeps the record): its consume
    queue entry is where the broker's dispatch appends it (``putMessagePositionInfo``, reference §5.10), and a rebuild
    writes it there again. verify reports the record's field as damaged, and repair rebuilds nothing (it used to rebuild
    the queue, to the same bytes, and leave the same finding)."""
    root = copy_store(version, "clean-small", tmp_path)
    messages = [m for m in manifest(version, "clean-small")["messages"] if m.get("dispatched")]
    target = next(m for m in messages if m["queueOffset"] == (0 if byte == 20 else 10))
    segment = root / "commitlog" / f"{target['commitLogOffset'] // SEGMENT * SEGMENT:020d}"
    data = bytearray(segment.read_bytes())
    data[target["commitLogOffset"] % SEGMENT + byte] ^= 1 << bit
    segment.write_bytes(data)
    queue = root / "consumequeue" / target["topic"] / str(target["queueId"])
    before = {p.name: p.read_bytes() for p in queue.iterdir()}
    _, out, _ = run("verify", root, "--format", "jsonl", timeout=TIMEOUT)
    [found] = [f for f in map(json.loads, out.splitlines()[:-1]) if f["kind"] == "cq-entry-mismatch"]
    assert found["offset"] == target["commitLogOffset"] and found["details"]["record_damaged"]
    assert found["found"] == target["queueOffset"] and found["expected"] == target["queueOffset"] ^ (1 << (8 * (27 - byte) + bit))
    rc, findings = repaired_findings(root)
    assert rc == EXIT_FINDINGS and not beyond_lost(findings)
    assert {p.name: p.read_bytes() for p in queue.iterdir()} == before


@pytest.mark.parametrize("version", ["4.9.2", "5.0.0"])
def test_a_damaged_queue_offset_after_expired_segments_is_lost_data_not_a_queue_fault(tmp_path, version):
    """The same for a queue's first record left after retention deleted the segments before it (damage seed 600106:
    QUEUEOFFSET 33 flipped to 2^60 + 33): its entry follows the queue's expired entries, as the broker appended it.
    verify used to take the entry for a fault (no previous record of the queue was seen), and repair rebuilt the queue
    from that field: every entry moved to a file named for queue offset 2^60 + 33 (its Java long overflow, at that)."""
    root = copy_store(version, "retention-small", tmp_path)
    present = [m for m in manifest(version, "retention-small")["messages"] if m.get("present") and m.get("dispatched")]
    target = next(m for m in sorted(present, key=lambda m: m["commitLogOffset"]) if m["queueOffset"] > 0)
    segment = root / "commitlog" / f"{target['commitLogOffset'] // SEGMENT * SEGMENT:020d}"
    data = bytearray(segment.read_bytes())
    data[target["commitLogOffset"] % SEGMENT + 20] ^= 1 << 4  # QUEUEOFFSET's bit 60
    segment.write_bytes(data)
    queue = root / "consumequeue" / target["topic"] / str(target["queueId"])
    before = {p.name: p.read_bytes() for p in queue.iterdir()}
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", version, timeout=TIMEOUT)
    [found] = [f for f in map(json.loads, out.splitlines()[:-1]) if f["kind"] == "cq-entry-mismatch"]
    assert (found["offset"], found["found"], found["expected"]) == (target["commitLogOffset"], target["queueOffset"], target["queueOffset"] + (1 << 60))
    assert found["details"]["record_damaged"]
    rc, findings = repaired_findings(root, version)
    assert rc == EXIT_FINDINGS and not beyond_lost(findings)
    assert {p.name: p.read_bytes() for p in queue.iterdir()} == before


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7"])
def test_the_rebuilt_index_goes_on_past_zeros_before_the_recovery_start(tmp_path, version):
    """The first segment zeroed from a record on (pages a crash lost) and the index damaged: the rebuild dispatches as a
    master's ``doReput`` does, which skips an illegal magic code (the zeros) to the next segment (reference §8.12,
    rules §2.12), so the records after the zeros keep their index keys (the rebuild used to stop at the zeros)."""
    root = copy_store(version, "clean-small", tmp_path)
    cut = next(m["commitLogOffset"] for m in manifest(version, "clean-small")["messages"] if m["commitLogOffset"] > SEGMENT // 2)
    first = root / "commitlog" / "00000000000000000000"
    data = first.read_bytes()
    first.write_bytes(data[:cut] + bytes(len(data) - cut))  # at a record's first byte: the zeros read as the end of data
    index = sorted((root / "index").iterdir())[-1]
    index.write_bytes(bytes(index.stat().st_size))  # the newest index file zeroed
    rc, findings = repaired_findings(root)
    assert rc == EXIT_FINDINGS and not beyond_lost(findings)
    assert not [f for f in findings if f["kind"].startswith("index-")], findings


def _queue_offset_lowered(version: str, tmp_path):
    """A copy of ``version``'s clean-small whose record of queue offset 12 says 4 (a bit flip in QUEUEOFFSET, which
    no CRC covers) and whose queue is cut to 20 entries: a rebuild dispatches that queue again."""
    root = copy_store(version, "clean-small", tmp_path)
    target = next(m for m in manifest(version, "clean-small")["messages"] if m.get("dispatched") and m["queueOffset"] == 12)
    segment = root / "commitlog" / f"{target['commitLogOffset'] // SEGMENT * SEGMENT:020d}"
    data = bytearray(segment.read_bytes())
    data[target["commitLogOffset"] % SEGMENT + 27] ^= 0x08
    segment.write_bytes(data)
    queue = root / "consumequeue" / target["topic"] / str(target["queueId"]) / "00000000000000000000"
    queue.write_bytes(queue.read_bytes()[: 20 * 20])
    return root, target


@pytest.mark.parametrize("version", ["4.4.0", "4.9.7"])
def test_a_queue_offset_field_below_its_place_is_lost_data_after_a_rebuild(tmp_path, version):
    """A record's QUEUEOFFSET lowered by a bit flip (12 to 4) and its queue cut short: rebuild-cq dispatches the
    queue again, and ``putMessagePositionInfo`` (4.2.0+, rules ``cq_repeat_guard``) skips the record ("Build consume
    queue repeatedly", reference §5.10) and appends the later ones a queue offset lower. verify reports the skipped
    record and those after it as the record's damage (lost data), so repair ends there instead of rebuilding the
    queue again and again. 4.4.0's marks leave E3a-E5, E7: every era left has the guard, so repair goes ahead."""
    root, target = _queue_offset_lowered(version, tmp_path)
    rc, findings = repaired_findings(root)
    assert rc == EXIT_FINDINGS and not beyond_lost(findings)
    skipped = [f for f in findings if f["kind"] == "cq-entry-missing" and f["offset"] == target["commitLogOffset"]]
    assert [(f["found"], f["expected"], f["details"]["record_damaged"]) for f in skipped] == [(4, 12, True)]


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_a_zero_length_segment_before_the_last_is_quarantined_not_padded(tmp_path, version):
    """A commit log segment before the last left empty (its data never reached the disk: ``damage_run --disk-faults``):
    the broker refuses to load it (rules §2.13, ``MappedFileQueue.load``). It holds nothing, as a deleted segment
    does; padded with zeros (as repair did) it read as the end of the written data, and the broker's normal
    recovery, which scans the last three segments, deleted the two after it with their messages. Quarantined, the
    messages after it fare as on the repaired undamaged fixture."""
    root = copy_store(version, "clean-small", tmp_path)
    (root / "commitlog" / f"{2 * SEGMENT:020d}").write_bytes(b"")
    rc, findings = repaired_findings(root, version)
    assert rc == EXIT_FINDINGS and not beyond_lost(findings)
    messages = manifest(version, "clean-small")["messages"]
    before = set(kept_messages(messages, 3 * SEGMENT))
    after = [i for i in kept_messages(messages, None) if i not in before]  # those wholly in the two segments after it
    baseline, now = repaired_fixture(version, "clean-small", tmp_path), survivors(root, version, after, tmp_path)
    assert after and {i: now.get(i) for i in after} == {i: baseline[i] for i in after}


def test_a_recovery_planned_after_the_file_fixes_says_what_its_cut_throws_away(tmp_path):
    """A segment before the last two cut short after a zeroed record: repair pads it with zeros (the broker refuses to
    load it; its records do not reach the cut, so no end-of-file blank goes there), and only then plans the broker's
    recovery, which cuts the log at the zeroed record and deletes the two segments after it. The plan shown before
    --yes could not list those messages; the recovery's DAMAGE note (the count it throws away) is said when it is
    planned, before it is applied (it was said nowhere)."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    segment = root / "commitlog" / f"{2 * SEGMENT:020d}"
    messages = manifest("4.9.7", "clean-small")["messages"]
    zeroed = min((m for m in messages if m["commitLogOffset"] >= 2 * SEGMENT), key=lambda m: m["commitLogOffset"])
    data = segment.read_bytes()
    segment.write_bytes(bytes(zeroed["size"]) + data[zeroed["size"] : 5000])
    # the valid ones after the zeroed record: before the cut, and in the segments after it
    thrown = [m for m in messages if 2 * SEGMENT + zeroed["size"] <= m["commitLogOffset"] and m["commitLogOffset"] + m["size"] <= 2 * SEGMENT + 5000 or m["commitLogOffset"] >= 3 * SEGMENT]
    rc, _, err = run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup", timeout=TIMEOUT)
    assert rc == EXIT_OK and f"throws away the {len(thrown)} valid message(s)" in err, err


@pytest.mark.parametrize("version,change", [("4.9.7", "grown"), ("5.3.3", "cut"), ("4.4.0", "grown")])
def test_a_consume_queue_file_of_the_wrong_length_is_found_and_rewritten(tmp_path, version, change):
    """A consume queue file grown by a page of zeros (a file system's misdirected extension, ``damage_run
    --disk-faults``) or cut past its data: ``MappedFileQueue.load`` refuses a file of the wrong length (rules §2.13:
    4.5.0+ brokers do not start, 4.4.0 leaves the queue's files out). Every entry still read as before, so verify
    called the store sound and repair left it; now verify reports ``cq-file-size``, and repair writes the file at full
    size (the recovery's rewrite of the queue, else the rebuild), with the same entries."""
    root = copy_store(version, "clean-small", tmp_path)
    queue = root / "consumequeue" / "TopicTest" / "1" / f"{0:020d}"
    original = queue.read_bytes()
    queue.write_bytes(original + bytes(4096) if change == "grown" else original[: len(original.rstrip(b"\0")) + 20 * 7])
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", version, timeout=TIMEOUT)
    assert [(f["kind"], f["found"], f["expected"]) for f in map(json.loads, out.splitlines()[:-1]) if f["severity"] != "info"] == [
        ("cq-file-size", queue.stat().st_size, len(original))
    ]
    rc, findings = repaired_findings(root, version)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    assert queue.read_bytes() == original


@pytest.mark.parametrize("version,severity", [("4.4.0", "info"), ("4.9.7", "error"), ("5.3.3", "info")])
def test_an_empty_last_consume_queue_file_is_an_error_only_where_the_broker_refuses_it(tmp_path, version, severity):
    """A zero-length last consume queue file (created, its data never flushed, when the machine stopped): 4.5.0-4.9.1
    and 4.9.3-5.1.2 brokers refuse to start on it, 5.1.3+ delete it and 3.2.6-4.4.0 leave it out (rules §2.13). It
    holds nothing, so where the broker starts on it ``cq-file-size`` is an ``info``, the next start says nothing of it
    and repair leaves the store to the broker; before, an error everywhere."""
    root = copy_store(version, "clean-small", tmp_path)
    empty = root / "consumequeue" / "TopicTest" / "0" / f"{20000:020d}"
    empty.touch()
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", version, timeout=TIMEOUT)
    found = [f for f in map(json.loads, out.splitlines()[:-1]) if f["kind"] == "cq-file-size"]
    assert [(f["severity"], f["file"]) for f in found] == [(severity, str(empty.relative_to(root)))]
    assert ("refuses to start" in json.loads(out.splitlines()[-1])["summary"]["next_start"]["line"]) == (severity == "error")
    rc, findings = repaired_findings(root, version)
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings


def test_an_lmq_queue_file_of_the_wrong_length_is_found_and_rewritten(tmp_path):
    """An LMQ queue file grown by a page of zeros: the broker loads LMQ queues as it loads every consume queue
    (``MappedFileQueue.load`` refuses the file), yet verify called the store sound (its size check passed LMQ queues
    over with their entries, which ``lmq.py`` checks); now ``cq-file-size``, and repair writes the file at full size."""
    root = copy_store("5.3.3", "lmq-small", tmp_path)
    queue = root / "consumequeue" / "%LMQ%chat-room-1" / "0" / f"{0:020d}"
    original = queue.read_bytes()
    queue.write_bytes(original + bytes(4096))
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", "5.3.3", timeout=TIMEOUT)
    assert [(f["kind"], f["file"]) for f in map(json.loads, out.splitlines()[:-1]) if f["severity"] != "info"] == [
        ("cq-file-size", str(queue.relative_to(root)))
    ]
    rc, findings = repaired_findings(root, "5.3.3")
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    assert queue.read_bytes() == original


def test_stores_whose_files_are_all_empty_are_read_and_repaired(tmp_path):
    """Every commit log segment left empty (the last two of 4.9.2's retention store), and the lone DLedger index file
    of a DLedger store: no size can be inferred from a zero-length file. ``info`` failed on the first (exit 5,
    a segment size of 0), repair on the second (exit 5); now the empty segment before the last is quarantined and
    the DLedger index file too (DLedger's ``MmapFileList.load`` refuses it: ``DLedgerMmapFileStore.load`` exits)."""
    root = copy_store("4.9.2", "retention-small", tmp_path / "a")
    for segment in (root / "commitlog").iterdir():
        segment.write_bytes(b"")
    assert run("info", root, timeout=TIMEOUT)[0] == EXIT_OK
    rc, findings = repaired_findings(root, "4.9.2")
    assert rc in (EXIT_OK, EXIT_FINDINGS) and not beyond_lost(findings)
    root = copy_store("4.9.7", "dledger-small", tmp_path / "b")
    (root / "dledger-n0" / "index" / f"{0:020d}").write_bytes(b"")
    rc, findings = repaired_findings(root, "4.9.7")
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    assert (root / "dledger-n0" / "index" / f"{0:020d}").stat().st_size > 0


@pytest.mark.parametrize("change", ["cut", "grown", "emptied"])
def test_a_dledger_data_file_of_the_wrong_length_is_repaired(tmp_path, change):
    """A DLedger data file cut short, grown with zeros or left empty: DLedger's ``MmapFileList.load`` refuses it and
    ``DLedgerMmapFileStore.load`` exits, and mqtool could not read the store either, so repair refused it (exit 3).
    As for commit log segments, repair pads a short file with zeros, trims a grown one and quarantines an empty
    one, then plans the broker's recovery; what the damage took is lost data and ``restore`` gives the copy back. An emptied
    last file leaves nothing verify can see: the data end at DLedger's end-of-file blank in the file before, no data after the
    end (verify used to call that blank's 8-byte header "non-zero bytes after the last entry"), so the repaired store is sound."""
    root = copy_store("5.3.3", "dledger-small", tmp_path)
    data = root / "dledger-n0" / "data" / f"{SEGMENT:020d}"
    original = data.read_bytes()
    data.write_bytes({"cut": original[:300000], "grown": original + bytes(4096), "emptied": b""}[change])
    damaged = tree(root)
    assert run("info", root, timeout=TIMEOUT)[0] == EXIT_BAD_INPUT  # the store model reads no such store
    rc, _, err = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "backup", timeout=TIMEOUT)
    assert rc == (EXIT_FINDINGS if change == "cut" else EXIT_OK), err
    _, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", "5.3.3", timeout=TIMEOUT)
    assert not beyond_lost([json.loads(line) for line in out.splitlines()][:-1])
    assert run("restore", tmp_path / "backup", "--yes", timeout=TIMEOUT)[0] == EXIT_OK and tree(root) == damaged


def test_records_before_a_queue_the_recovery_dispatched_anew_get_their_entries(tmp_path):
    """4.9.2's normal recovery dispatches again from the consume queues' max (rules §2.11), the log's last record: with
    its queue's file deleted, ``putMessagePositionInfo`` creates the queue with fillers up to that record's queue offset
    (``fillPreBlank``). The queue's earlier records in the log were never dispatched to it, not skipped as "Build
    consume queue repeatedly": repair's rebuild gives them their entries, where the broker first wrote them. verify
    called them lost data (``record_damaged``), and repair left 41 records unconsumable (damage seed 7000128)."""
    root = copy_store("4.9.2", "retention-small", tmp_path)
    present = [m for m in manifest("4.9.2", "retention-small")["messages"] if m.get("present") and m.get("dispatched")]
    last = max(present, key=lambda m: m["commitLogOffset"])
    first = min(m["queueOffset"] for m in present if (m["topic"], m["queueId"]) == (last["topic"], last["queueId"]))
    queue = root / "consumequeue" / last["topic"] / str(last["queueId"]) / f"{0:020d}"
    original = queue.read_bytes()
    queue.unlink()
    rc, findings = repaired_findings(root, "4.9.2")
    assert rc == EXIT_OK and not [f for f in findings if f["severity"] != "info"], findings
    rebuilt = queue.read_bytes()
    assert rebuilt[first * 20 : (last["queueOffset"] + 1) * 20] == original[first * 20 : (last["queueOffset"] + 1) * 20] and first < last["queueOffset"]


def test_a_rebuild_the_broker_version_decides_is_refused_and_the_recovery_undone(tmp_path):
    """The same damage on 4.0.0's clean-small, whose marks leave E1-E5, E7: a 4.0.0-4.1.0 broker appends the record's
    entry in place (no repeat guard), a 4.2.0+ one skips it. The recovery stage plans alike under every era, the
    queue rebuild after it does not: repair refuses (exit 4) naming the rule, and undoes the recovery stage it had
    applied. With ``--broker-version 4.0.0`` the rebuild appends the entry where the broker does: only the record's
    own entry is left as lost data. (Before: the rebuild was planned under the newest era alone and skipped it.)"""
    root, target = _queue_offset_lowered("4.0.0", tmp_path)
    before = tree(root)
    rc, _, err = run("repair", root, "--yes", timeout=TIMEOUT)
    assert rc == EXIT_REFUSED and "cq_repeat_guard" in err and "the changes were undone" in err, err
    assert tree(root) == before
    rc, _, err = run("repair", root, "--yes", "--broker-version", "4.0.0", timeout=TIMEOUT)
    assert rc == EXIT_FINDINGS, err
    rc, out, _ = run("verify", root, "--format", "jsonl", "--broker-version", "4.0.0", timeout=TIMEOUT)
    failing = [json.loads(line) for line in out.splitlines()][:-1]
    assert [(f["kind"], f["offset"], f["found"], f["expected"]) for f in failing if f["severity"] != "info"] == [
        ("cq-entry-mismatch", target["commitLogOffset"], 12, 4)  # the entry at queue offset 12; the field says 4
    ]


@pytest.mark.parametrize("version", ["3.2.6", "4.0.0", "4.4.0", "4.9.7", "5.3.3"])
def test_an_entry_whose_offset_bytes_are_damaged_in_a_queue_with_lost_records_is_written_again(tmp_path, version):
    """As seed 14004934, by hand, in each era: the third segment left empty (its messages lost: their queues are not
    rebuilt, which would renumber them) and the offset bytes of an entry before it zeroed. ``repair`` writes that
    entry again from its record: the bytes the real broker wrote, and the message is consumable."""
    root = copy_store(version, "clean-small", tmp_path / "s")
    segment = sorted((root / "commitlog").iterdir())[2]
    lost_from, lost_to = int(segment.name), int(segment.name) + segment.stat().st_size
    messages = [m for m in manifest(version, "clean-small")["messages"] if m.get("uniqKey") and m["topic"] != "SCHEDULE_TOPIC_XXXX"]
    lost_queues = {(m["topic"], m["queueId"]) for m in messages if lost_from <= m["commitLogOffset"] < lost_to}
    m = next(m for m in messages if (m["topic"], m["queueId"]) in lost_queues and 1 << 16 <= m["commitLogOffset"] < lost_from)
    unit = root / "consumequeue" / m["topic"] / str(m["queueId"]) / "00000000000000000000"
    original = unit.read_bytes()
    at = m["queueOffset"] * 20
    assert int.from_bytes(original[at : at + 8], "big") == m["commitLogOffset"]
    unit.write_bytes(original[:at] + bytes(6) + original[at + 6 :])
    segment.write_bytes(b"")
    rc, _, err = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup", timeout=TIMEOUT)
    assert rc == EXIT_FINDINGS and "mend-units" in err, err  # lost data remains: the emptied segment's messages
    assert unit.read_bytes()[at : at + 20] == original[at : at + 20]
    assert survivors(root, version, [m["uniqKey"]], tmp_path)[m["uniqKey"]] == ("found", m["queueId"], m["queueOffset"])


@pytest.mark.parametrize("version,name,segment,topic,queue,units", [
    ("5.3.3", "crashed-small", "00000000000001048576", "%RETRY%oracle_consumer_group_with_a_very_long", "1", range(0, 3)),
    ("4.2.0", "cqext-small", "00000000000002097152", "TopicTest", "0", range(34, 37)),
])
def test_a_run_of_entries_astray_is_written_again_entry_by_entry(tmp_path, version, name, segment, topic, queue, units):
    """Three consecutive entries' offset bytes zeroed in a queue with lost records. 5.3.3: a later record
    repeats the first one's QUEUEOFFSET (the dispatch skips it): it is not one of the run, and the entry stays
    its first record's. 4.2.0 with ``consumequeue_ext/``: the third entry now points at offset 0, a record of
    another queue, and each entry keeps its ext address (mqtool makes none). Each entry is written again as the
    real broker wrote it; before this stop, the three messages stayed unconsumable."""
    root = copy_store(version, name, tmp_path / "s")
    directory = next(p for p in (root / "consumequeue").iterdir() if p.name.startswith(topic)) / queue
    unit = directory / "00000000000000000000"
    original = unit.read_bytes()
    damaged = bytearray(original)
    for k in units:
        damaged[k * 20 : k * 20 + 6] = bytes(6)
    unit.write_bytes(bytes(damaged))
    (root / "commitlog" / segment).write_bytes(b"")
    rc, _, err = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup", timeout=TIMEOUT)
    assert rc == EXIT_FINDINGS and "mend-units" in err, err
    assert unit.read_bytes()[units.start * 20 : units.stop * 20] == original[units.start * 20 : units.stop * 20]
