"""LMQ multi-dispatch queues (reference §3.6) against the real 5.3.3 broker's ``lmq-small`` store, and the LMQ rule
that splits era E15 (5.1.1, 5.1.2) on copies of the real 5.1.4 broker's ``crashed-small``."""

from __future__ import annotations

import filecmp
import json
import shutil

import pytest
from typer.testing import CliRunner

from conftest import copy_store, manifest, store_path
from mqtool.cli import app
from mqtool.errors import EXIT_REFUSED
from mqtool.formats import checkpoint as cpfmt
from mqtool.formats import commitlog as clfmt
from mqtool.formats.dispatch import LMQ_SKIP_NONE, LMQ_SKIP_SYSTEM, NO_MULTI_DISPATCH, LmqOffsetThrows, multi_dispatch_targets
from mqtool.formats.properties import encode_properties
from mqtool.store import Store
from mqtool.store.rules import ERAS, BrokerVersion, VersionRules, era_of, rules_deciding
from mqtool.store.version import VersionGuess


def test_targets_equal_what_the_broker_wrote():
    m = manifest("5.3.3", "lmq-small")
    carrying = [msg for msg in m["messages"] if msg.get("lmq")]
    assert len(carrying) == 174
    with Store.open(store_path("5.3.3", "lmq-small")) as store:
        for msg in m["messages"]:
            record = store.commitlog.read_record(msg["commitLogOffset"])
            targets = multi_dispatch_targets(msg["topic"], msg["queueId"], record.property_map(), rule=LMQ_SKIP_SYSTEM)
            lmq = msg.get("lmq")
            expected = [(q, lmq["queueId"], o) for q, o, d in zip(lmq["queues"], lmq["queueOffsets"], lmq["dispatched"]) if d] if lmq else []
            assert targets == expected, msg["seq"]


def test_a_queue_offset_long_parse_long_refuses_throws_after_the_queues_before_it():
    """Before: a queue offset of ASCII digits past the long range was taken, and Unicode decimal
    digits, which ``Long.parseLong`` reads, were refused. The one ``parseLong`` reading decides now;
    where it throws, the broker has written the queues before it (``LmqOffsetThrows.written``)."""
    props = {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b", "INNER_MULTI_QUEUE_OFFSET": "7,9"}
    assert multi_dispatch_targets("T", 3, props, rule=LMQ_SKIP_SYSTEM) == [("%LMQ%a", 0, 7), ("%LMQ%b", 0, 9)]
    for offsets, want in (("7,٩", [("%LMQ%a", 0, 7), ("%LMQ%b", 0, 9)]),
                          ("7,-9223372036854775808", [("%LMQ%a", 0, 7), ("%LMQ%b", 0, -(1 << 63))])):
        assert multi_dispatch_targets("T", 3, {**props, "INNER_MULTI_QUEUE_OFFSET": offsets}, rule=LMQ_SKIP_SYSTEM) == want, offsets
    for offsets, value in (("7,99999999999999999999", "99999999999999999999"), ("7, 9", " 9")):  # %LMQ%a written, then the throw
        with pytest.raises(LmqOffsetThrows) as thrown:
            multi_dispatch_targets("T", 3, {**props, "INNER_MULTI_QUEUE_OFFSET": offsets}, rule=LMQ_SKIP_SYSTEM)
        assert (thrown.value.written, thrown.value.queue, thrown.value.value) == ([("%LMQ%a", 0, 7)], "%LMQ%b", value)


def test_the_records_each_release_leaves_out_of_the_lmq_queues():
    """Before: every 5.x release skipped %RETRY%, rmq_sys_ and SCHEDULE_TOPIC_XXXX records and queue names with
    "/", 5.2.0's ``MultiDispatchUtils``. ``checkMultiDispatchQueue``: 4.9.3-5.1.0 skip none, 5.1.1 %RETRY%, 5.1.2
    also rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX (and "/" names), 5.2.0 every rmq_sys_ topic."""
    props = {"INNER_MULTI_DISPATCH": "%LMQ%a,%LMQ%b/c", "INNER_MULTI_QUEUE_OFFSET": "7,9"}
    both, one = [("%LMQ%a", 0, 7), ("%LMQ%b/c", 0, 9)], [("%LMQ%a", 0, 7)]
    cases = {  # topic: {version: targets}
        "T": {"4.9.7": both, "5.0.0": both, "5.1.0": both, "5.1.1": both, "5.1.2": one, "5.1.4": one, "5.2.0": one, "5.3.3": one},
        "%RETRY%g": {"4.9.7": both, "5.0.0": both, "5.1.0": both, "5.1.1": [], "5.1.2": [], "5.3.3": []},
        "rmq_sys_wheel_timer": {"5.0.0": both, "5.1.1": both, "5.1.2": [], "5.3.3": []},
        "SCHEDULE_TOPIC_XXXX": {"5.1.0": both, "5.1.1": both, "5.1.2": [], "5.3.3": []},
        "rmq_sys_TRANS_HALF_TOPIC": {"5.1.1": both, "5.1.4": one, "5.2.0": [], "5.3.3": []},
    }
    for topic, by_version in cases.items():
        for version, want in by_version.items():
            rule = VersionRules(BrokerVersion.parse(version)).lmq_rule
            assert multi_dispatch_targets(topic, 3, props, rule=rule) == want, (topic, version)


def test_multi_dispatch_lists_split_as_java_string_split():
    """Before: the lists were split keeping trailing empty strings, so ``%LMQ%a,`` with ``7,``
    dispatched nowhere (the empty offset refused) and ``%LMQ%a,%LMQ%b,`` with ``7,9`` counted 3
    names against 2 offsets; Java's ``String.split`` drops trailing empties and the broker writes
    the entries."""
    for queues, offsets in (("%LMQ%a,%LMQ%b,", "7,9"), ("%LMQ%a,%LMQ%b", "7,9,,"), ("%LMQ%a,%LMQ%b,", "7,9,")):
        props = {"INNER_MULTI_DISPATCH": queues, "INNER_MULTI_QUEUE_OFFSET": offsets}
        assert multi_dispatch_targets("T", 3, props, rule=LMQ_SKIP_SYSTEM) == [("%LMQ%a", 0, 7), ("%LMQ%b", 0, 9)], (queues, offsets)
    assert multi_dispatch_targets("T", 3, {"INNER_MULTI_DISPATCH": ",,", "INNER_MULTI_QUEUE_OFFSET": ","}, rule=LMQ_SKIP_NONE) == []


def _rebuild(root, *extra):
    result = CliRunner().invoke(app, ["rebuild-cq", str(root), "--yes", *extra])
    assert result.exit_code == 0, result.output


def test_rebuild_cq_writes_the_lmq_queues_byte_identical(store_copy):
    original = store_path("5.3.3", "lmq-small") / "consumequeue"
    root = store_copy("5.3.3", "lmq-small")
    lmq = sorted(p.name for p in original.iterdir() if p.name.startswith("%LMQ%"))
    assert len(lmq) == 6
    for name in lmq:
        shutil.rmtree(root / "consumequeue" / name)
    _rebuild(root)
    compared = filecmp.dircmp(original, root / "consumequeue")
    assert sorted(p.name for p in (root / "consumequeue").iterdir()) == sorted(p.name for p in original.iterdir())
    for name in lmq:
        files = sorted(p.name for p in (original / name / "0").iterdir())
        match, mismatch, errors = filecmp.cmpfiles(original / name / "0", root / "consumequeue" / name / "0", files, shallow=False)
        assert (mismatch, errors) == ([], []) and match == files
    assert not compared.diff_files


def test_a_broker_config_without_multi_dispatch_writes_no_lmq_queue(store_copy, tmp_path):
    root = store_copy("5.3.3", "lmq-small")
    for p in (root / "consumequeue").iterdir():
        if p.name.startswith("%LMQ%"):
            shutil.rmtree(p)
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=false\nmappedFileSizeConsumeQueue=20000\n")
    _rebuild(root, "--broker-config", str(conf))
    assert not any(p.name.startswith("%LMQ%") for p in (root / "consumequeue").iterdir())


# ---- verify: the LMQ queues against the records ---------------------------------------------------

from mqtool.verify import Verification, VerifyOptions  # noqa: E402


def _cq_findings(root):
    with Store.open(root) as store:
        run = Verification(store, VerifyOptions(checks=("cq",)))
        findings = list(run.findings())
        return findings, run.summary


def _lmq_expected(queue: str) -> list[tuple[int, int, int]]:
    """(queue offset, commit log offset, size) of the manifest's messages dispatched to ``queue``."""
    out = []
    for msg in manifest("5.3.3", "lmq-small")["messages"]:
        lmq = msg.get("lmq")
        for q, o, d in zip(*(lmq[k] for k in ("queues", "queueOffsets", "dispatched"))) if lmq else ():
            if q == queue and d:
                out.append((o, msg["commitLogOffset"], msg["size"]))
    return sorted(out)


def test_verify_checks_the_lmq_queues_of_the_real_store():
    findings, summary = _cq_findings(store_path("5.3.3", "lmq-small"))
    assert findings == []
    total = sum(len(_lmq_expected(p.name)) for p in (store_path("5.3.3", "lmq-small") / "consumequeue").iterdir() if p.name.startswith("%LMQ%"))
    assert f"6 LMQ queue(s) checked against the records' INNER_MULTI_DISPATCH, {total} entries" in summary.notes



def test_lmq_queue_directories_are_read_as_the_broker_loads_them(store_copy):
    """Before: an LMQ queue directory was taken by Python's int after ``isdigit``: ``²`` or ``--1``
    ended verify as an internal error, ``2147483648`` (past the int range: the broker skips it) was
    taken as a queue. Now the one ``queue_id_of`` reading, as every other queue."""
    root = store_copy("5.3.3", "lmq-small")
    room = root / "consumequeue" / "%LMQ%chat-room-1"
    for name in ("²", "--1", "2147483648"):
        (room / name).mkdir()
    findings, summary = _cq_findings(root)
    assert findings == []
    assert any(line.startswith("6 LMQ queue(s) checked") for line in summary.notes)


def test_an_lmq_queue_directory_00_is_never_read_its_queue_0_is_empty(store_copy):
    """``%LMQ%chat-room-1/0`` renamed ``00``: the broker takes queue id 0 from the name but its queue reads and writes
    ``%LMQ%chat-room-1/0`` (``discover_queues``), so the queue is empty. Before, the store model read ``00`` as queue 0 and verify
    found nothing; now ``00`` is a ``cq-directory-unread`` warning and every entry the records owe the queue is missing, in ``0``."""
    root = store_copy("5.3.3", "lmq-small")
    (root / "consumequeue" / "%LMQ%chat-room-1" / "0").rename(root / "consumequeue" / "%LMQ%chat-room-1" / "00")
    expected = _lmq_expected("%LMQ%chat-room-1")
    findings, summary = _cq_findings(root)
    assert [(f.kind, f.file, f.offset, f.expected, f.found) for f in findings] == [
        ("cq-directory-unread", "consumequeue/%LMQ%chat-room-1/00", None, "consumequeue/%LMQ%chat-room-1/0", "00"),
        ("cq-entry-missing", "consumequeue/%LMQ%chat-room-1/0", expected[0][1], None, None)]
    assert findings[1].details == {"topic": "%LMQ%chat-room-1", "queue_id": 0, "first_queue_offset": 0, "last_queue_offset": len(expected) - 1,
                                   "count": len(expected)}
    assert any(line.startswith("6 LMQ queue(s) checked") for line in summary.notes)


def test_verify_finds_damaged_lmq_queues(store_copy):
    root = store_copy("5.3.3", "lmq-small")
    shutil.rmtree(root / "consumequeue" / "%LMQ%user_42")
    room = root / "consumequeue" / "%LMQ%chat-room-1" / "0" / "00000000000000000000"
    data = bytearray(room.read_bytes())
    data[20 * 2 + 8 : 20 * 2 + 12] = (999).to_bytes(4, "big")          # entry 2: wrong size
    n = len(_lmq_expected("%LMQ%chat-room-1"))
    data[20 * n : 20 * n + 20] = (10**9).to_bytes(8, "big") + (100).to_bytes(4, "big") + (0).to_bytes(8, "big")  # one entry past the end
    room.write_bytes(bytes(data))
    findings, _ = _cq_findings(root)
    by_kind = {}
    for f in findings:
        by_kind.setdefault(f.kind, []).append(f)
    lost = _lmq_expected("%LMQ%user_42")
    assert [(f.details["topic"], f.details["count"], f.offset) for f in by_kind["cq-entry-missing"]] == [("%LMQ%user_42", len(lost), lost[0][1])]
    room_entries = _lmq_expected("%LMQ%chat-room-1")
    [mismatch] = by_kind["cq-entry-mismatch"]
    assert (mismatch.details["queue_offset"], mismatch.offset, mismatch.found[1], mismatch.expected[1]) == (2, room_entries[2][1], 999, room_entries[2][2])
    [beyond] = by_kind["cq-entry-beyond-end"]
    assert (beyond.details["queue_offset"], beyond.offset) == (n, 10**9)
    assert set(by_kind) == {"cq-entry-missing", "cq-entry-mismatch", "cq-entry-beyond-end"}


def test_verify_reads_the_lmq_records_past_damage_the_broker_never_reads(store_copy):
    """Zeros in the first segment, before the one the broker's recovery scans from (damage seed 800187): the
    broker serves the records after them, and so do their LMQ entries. The LMQ check used to take where its own
    walk stopped for the log's end and call each later LMQ entry 'past the commit log's logical end' (128 of them,
    which repair then could not explain); it now reads the log the broker serves, as the queue check does."""
    root = store_copy("5.3.3", "lmq-small")
    segment = root / "commitlog" / f"{0:020d}"
    data = bytearray(segment.read_bytes())
    data[509217:574753] = bytes(574753 - 509217)
    segment.write_bytes(data)
    findings, _ = _cq_findings(root)
    lmq = [f for f in findings if (f.file or "").startswith("consumequeue/%LMQ%")]
    gone = {m["commitLogOffset"] for m in manifest("5.3.3", "lmq-small")["messages"] if 509217 - m["size"] < m["commitLogOffset"] < 574753}
    assert lmq and {f.kind for f in lmq} == {"cq-entry-dangling"} and {f.offset for f in lmq} <= gone


# ---- era E15 split by the LMQ rule: 5.1.1 (E15a) and 5.1.2 (E15b) ---------------------------------

LMQ_QUEUE = "%LMQ%e15"


def _cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def _tree(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _append_multi_dispatched(root, topic: str | None, *, like: str | None = None, confirm: bool = True, queue: str = LMQ_QUEUE,
                             offsets: str = "0"):
    """Append to a 5.1.4 store one record of ``topic`` carrying ``INNER_MULTI_DISPATCH`` = ``queue`` (``offsets``), made
    from the store's last record of ``like`` (default ``topic``: its delay properties and next queue offset kept; a
    topic the store lacks starts at queue offset 0), or no record when ``topic`` is None; and with ``confirm`` set the
    checkpoint's confirmPhyOffset to the last record's start, as 5.1.1+ write it (``CommitLog.setConfirmOffset``):
    the store's marks then leave E15a-E16 (5.1.1-5.1.4), else E14-E16."""
    with Store.open(root) as store:
        records = list(store.commitlog.scan())
    end = records[-1].offset + records[-1].total_size
    last_start = records[-1].offset
    if topic is not None:
        base = [r for r in records if r.topic_name == (like or topic)][-1]
        props = {**base.property_map(), "INNER_MULTI_DISPATCH": queue, "INNER_MULTI_QUEUE_OFFSET": offsets}
        fields = {**base._asdict(), "topic": topic.encode(), "phys_offset": end, "queue_offset": 0 if like else base.queue_offset + 1,
                  "properties": encode_properties(props, trailing_separator=base.properties.endswith(b"\x02"))}  # as written (§1.6)
        raw = clfmt.encode_message(fields)
        segment = root / "commitlog" / f"{end - end % (1 << 20):020d}"
        data = bytearray(segment.read_bytes())
        data[end % (1 << 20) : end % (1 << 20) + len(raw)] = raw
        segment.write_bytes(bytes(data))
        last_start = end
    if not confirm:
        return root
    path = root / "checkpoint"
    page = bytearray(path.read_bytes())
    page[: cpfmt.CHECKPOINT_FILE_SIZE] = cpfmt.encode_checkpoint(cpfmt.decode_checkpoint(page)._replace(confirm_phy_offset=last_start)).ljust(cpfmt.CHECKPOINT_FILE_SIZE, b"\0")
    path.write_bytes(bytes(page))
    return root


def test_e15_is_split_where_the_lmq_rule_changes():
    """Before: one era E15 held 5.1.1 and 5.1.2, whose ``checkMultiDispatchQueue`` differ (5.1.2 also skips
    rmq_sys_wheel_timer and SCHEDULE_TOPIC_XXXX, and ``multiDispatchLmqQueue`` queue names holding "/"), and the
    LMQ rule was no planning rule: a store of either was planned under one variant. Now E15a (5.1.1) and E15b
    (5.1.2) are eras, the LMQ rule decides between them and a store of either is planned under both."""
    assert [e.name for e in ERAS if e.name.startswith("E15")] == ["E15a", "E15b"]
    assert (era_of(BrokerVersion.parse("5.1.1")).name, era_of(BrokerVersion.parse("5.1.2")).name, era_of(BrokerVersion.parse("5.1.3")).name) == ("E15a", "E15b", "E16")
    assert rules_deciding(BrokerVersion.parse("5.1.1"), BrokerVersion.parse("5.1.2")) == ["lmq_rule"]
    assert rules_deciding(BrokerVersion.parse("5.1.0"), BrokerVersion.parse("5.1.1")) == ["writes_confirm_offset", "lmq_rule"]
    assert "lmq_rule" in rules_deciding(BrokerVersion.parse("5.1.4"), BrokerVersion.parse("5.2.0"))
    guess = VersionGuess.among([e for e in ERAS if e.name in ("E15a", "E15b")], [])
    assert (guess.version, guess.candidates, guess.label) == (None, (BrokerVersion(5, 1, 2), BrokerVersion(5, 1, 1)), "E15a-E15b (5.1.1-5.1.2)")
    for version in ("5.1.1", "5.1.2"):  # the era's representative is the release itself: the rule planned is its own
        era = era_of(BrokerVersion.parse(version))
        assert VersionRules(era.representative).lmq_rule == VersionRules(BrokerVersion.parse(version)).lmq_rule


@pytest.mark.parametrize("command", ["recover", "rebuild-cq"])
@pytest.mark.parametrize("topic", ["SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"])
def test_lmq_records_of_a_delay_or_timer_topic_refuse_until_the_release_is_given(tmp_path, command, topic):
    """A crashed 5.1.x store (abnormal recovery dispatches every record) with a multi-dispatched record of a delay or
    timer topic, its marks leaving E15a-E16: 5.1.1 writes that record's %LMQ% entry, 5.1.2-5.1.4 do not
    (``ConsumeQueue.checkMultiDispatchQueue`` @5.1.1/5.1.2). Before, the plan took one variant silently; now recover
    and rebuild-cq refuse (exit 4) naming the rule and the releases, and each given release plans its own."""
    like = None if topic == "SCHEDULE_TOPIC_XXXX" else "TopicTest"  # the fixture has no timer record
    root = _append_multi_dispatched(copy_store("5.1.4", "crashed-small", tmp_path), topic, like=like)
    with Store.open(root) as store:
        assert list(store.commitlog.scan())[-1].topic_name == topic
        label = store.version_guess.label
    before = _tree(root)
    code, out, err = _cli(command, root, "--dry-run")
    assert code == EXIT_REFUSED and out == "", err
    assert label == "E15a-E16 (5.1.1-5.1.4)"
    version = json.loads(_cli("info", root, "-f", "json")[1])["version"]
    assert [e["era"] for e in version["eras"]] == ["E15a", "E15b", "E16"] and "lmq_rule" in version["deciding_rules"]
    message = " ".join(err.split())
    assert "cannot tell which broker version wrote this store" in message
    assert "differs between E15b-E16 (5.1.2-5.1.4) and E15a (5.1.1)" in message and "rules: lmq_rule)" in message
    assert f"(queues.{LMQ_QUEUE}/0: null vs " in message  # the queue only 5.1.1 writes, named
    assert "pass --broker-version" in message and "5.1.2" in message and "5.1.1" in message
    assert _tree(root) == before
    plans = {}
    for given in ("5.1.1", "5.1.2", "5.1.4"):
        code, out, err = _cli(command, root, "--dry-run", "-f", "json", "--broker-version", given)
        assert code == 0, err
        plans[given] = json.loads(out)
    lmq = {given: [(q["queue_id"], q["added"], q["max_after"]) for q in plan["queues"] if q["topic"] == LMQ_QUEUE] for given, plan in plans.items()}
    assert lmq == {"5.1.1": [(0, 1, 1)], "5.1.2": [], "5.1.4": []}
    own = {given: [q for q in plan["queues"] if q["topic"] == topic] for given, plan in plans.items()}
    assert own["5.1.1"] == own["5.1.2"] == own["5.1.4"] and own["5.1.1"]  # the record's own queue entry: every release


@pytest.mark.parametrize("topic", [None, "TopicTest"])
def test_stores_whose_lmq_records_every_5_1_release_dispatches_go_ahead_naming_both_eras(tmp_path, topic):
    """No multi-dispatched record, or one of an ordinary topic (every 5.1.x writes its %LMQ% entry): the plans under
    5.1.1 and 5.1.2-5.1.4 are equal, so recover goes ahead and says it considered both."""
    root = _append_multi_dispatched(copy_store("5.1.4", "crashed-small", tmp_path), topic)
    code, out, err = _cli("recover", root, "--dry-run", "-f", "json")
    assert code == 0, err
    plan = json.loads(out)
    assert "considered E15b-E16 (5.1.2-5.1.4), E15a (5.1.1): the plans are equal" in plan["version_source"]
    assert [q["added"] for q in plan["queues"] if q["topic"] == LMQ_QUEUE] == ([1] if topic else [])


def test_a_broker_without_multi_dispatch_plans_once(tmp_path):
    """``enableMultiDispatch=false`` in the broker's config: the LMQ rule cannot change the plan and the record of
    the delay topic is planned under one set of rules, with no %LMQ% entry."""
    root = _append_multi_dispatched(copy_store("5.1.4", "crashed-small", tmp_path), "SCHEDULE_TOPIC_XXXX")
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=false\n")
    code, out, err = _cli("recover", root, "--dry-run", "-f", "json", "--broker-config", conf)
    assert code == 0, err
    plan = json.loads(out)
    assert plan["version_source"].startswith("detected: E15a-E16 (5.1.1-5.1.4), alike for this store")
    assert not [q for q in plan["queues"] if q["topic"] == LMQ_QUEUE]


def test_lmq_records_of_a_retry_topic_refuse_between_5_1_0_and_5_1_1(tmp_path):
    """The same rule one era earlier: 5.1.0 writes a %RETRY% record's %LMQ% entry, 5.1.1+ do not
    (``ConsumeQueue.checkMultiDispatchQueue`` @5.1.0/5.1.1). Without the confirmPhyOffset mark a 5.1.x store
    leaves E14-E16; before, it was planned under 5.1.4's variant alone."""
    retry = next(t for t in manifest("5.1.4", "crashed-small")["messages"] if t["topic"].startswith("%RETRY%"))["topic"]
    root = _append_multi_dispatched(copy_store("5.1.4", "crashed-small", tmp_path), retry, confirm=False)
    code, out, err = _cli("rebuild-cq", root, "--dry-run")
    message = " ".join(err.split())
    assert code == EXIT_REFUSED and "differs between E15b-E16 (5.1.2-5.1.4) and E14 (5.1.0)" in message and "lmq_rule" in message, err
    for given, added in (("5.1.0", [1]), ("5.1.1", [])):
        code, out, err = _cli("rebuild-cq", root, "--dry-run", "-f", "json", "--broker-version", given)
        assert code == 0, err
        assert [q["added"] for q in json.loads(out)["queues"] if q["topic"] == LMQ_QUEUE] == added


@pytest.mark.parametrize("queue", ["%LMQ%../../../outside", "%LMQ%a/0", "%LMQ%x/../TopicTest"])
def test_an_lmq_queue_name_that_is_no_directory_of_its_own_is_refused_where_the_broker_writes_it(tmp_path, queue):
    """4.9.3-5.1.1 do not skip LMQ queue names holding "/" (5.1.2+ do, rules §3.12): the broker joins them into
    ``consumequeue/<name>/0``, a path outside the store or beside another queue's files. Before: the plan placed
    such a queue and ``--yes`` stopped at "files written differ from the plan ... please report this". Now the
    plan is refused where that release writes the queue, naming it, and nothing is written; 5.1.2 plans it away."""
    root = _append_multi_dispatched(copy_store("5.1.4", "crashed-small", tmp_path / "s"), "TopicTest", queue=queue)
    before = _tree(tmp_path)
    for command in ("rebuild-cq", "recover"):
        code, out, err = _cli(command, root, "--yes", "--broker-version", "5.1.1")
        assert code == EXIT_REFUSED and "mqtool does not write there" in " ".join(err.split()) and repr(queue) in err, err
        assert _tree(tmp_path) == before
    code, out, err = _cli("rebuild-cq", root, "--dry-run", "-f", "json", "--broker-version", "5.1.2")
    assert code == 0 and not [q for q in json.loads(out)["queues"] if q["topic"] == queue], err


THREE = "%LMQ%a,%LMQ%b,%LMQ%c"


@pytest.mark.parametrize("version, name, given", [("4.9.7", "crashed-small", "4.9.7"), ("5.1.4", "crashed-small", None),
                                                 ("5.3.3", "lmq-small", None)])
def test_an_lmq_offset_list_with_a_bad_value_after_good_ones_is_refused(tmp_path, version, name, given):
    """A record whose ``INNER_MULTI_QUEUE_OFFSET`` holds a value ``Long.parseLong`` throws on after good ones, appended
    to a crashed store (abnormal recovery dispatches it). ``multiDispatchLmqQueue`` (``ConsumeQueue`` @4.9.3-5.3.3)
    writes the record's own entry, then %LMQ%a, then throws out of the recovery: the load fails and the broker refuses
    to start. Before: recover and rebuild-cq planned the record with no LMQ entry at all and went ahead; now both
    refuse (exit 4) naming the record and the value, changing nothing. Where the next start does not dispatch it
    (5.3.3 after a clean stop: normal recovery dispatches past the queues' end only, the reput starts at the log's
    end), recover goes ahead as the broker does. Fewer values than queues is no throw: the length check returns
    before any LMQ entry, and the plans go ahead without one. Multi-dispatch is on by ``--broker-config`` (or lmq-small's
    %LMQ% queues); without either, ``test_a_throw_only_multi_dispatch_makes_is_undecided_where_nothing_says_it_is_on``."""
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=true\n")
    pinned = ("--broker-config", conf, *(("--broker-version", given) if given else ()))
    root = _append_multi_dispatched(copy_store(version, name, tmp_path / "bad"), "TopicTest", confirm=False, queue=THREE, offsets="0,1x,2")
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
        crashed = store.abort_present
    assert record.property_map()["INNER_MULTI_QUEUE_OFFSET"] == "0,1x,2" and crashed == (name == "crashed-small")
    if not crashed:
        code, out, err = _cli("recover", root, "--dry-run", "-f", "json")
        assert code == 0 and not [q for q in json.loads(out)["queues"] if q["topic"] in ("%LMQ%a", "%LMQ%b", "%LMQ%c")], err
        (root / "abort").write_bytes(b"")
    before = _tree(root)
    for command in ("recover", "rebuild-cq"):
        code, out, err = _cli(command, root, "--yes", *pinned)
        message = " ".join(err.split())
        assert code == EXIT_REFUSED and out == "", err
        assert f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x'" in message, err
        assert "own entry and the 1 LMQ entry before it, then throws" in message and "refuses to start" in message, err
        assert _tree(root) == before

    short = _append_multi_dispatched(copy_store(version, name, tmp_path / "short"), "TopicTest", confirm=False, queue=THREE, offsets="0,1")
    (short / "abort").write_bytes(b"")
    for command in ("recover", "rebuild-cq"):
        code, out, err = _cli(command, short, "--dry-run", "-f", "json", *pinned)
        assert code == 0 and not [q for q in json.loads(out)["queues"] if q["topic"] in ("%LMQ%a", "%LMQ%b", "%LMQ%c")], err


def test_verify_expects_the_lmq_entries_the_broker_writes_before_an_offset_it_cannot_read(tmp_path):
    """The broker's dispatch of a record listing ``%LMQ%a,%LMQ%b,%LMQ%c`` at ``0,1x,2`` writes the %LMQ%a entry before
    ``Long.parseLong("1x")`` throws (``ConsumeQueue.multiDispatchLmqQueue`` @5.3.3). Before: verify expected no entry
    from that record and called the %LMQ%a entry dangling; now it expects exactly that one."""
    from mqtool.formats.dispatch import dispatch_request

    root = _append_multi_dispatched(copy_store("5.3.3", "lmq-small", tmp_path), "TopicTest", confirm=False, queue=THREE, offsets="0,1x,2")
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
        tags = dispatch_request(record).tags_code
        unit = record.offset.to_bytes(8, "big") + record.total_size.to_bytes(4, "big") + tags.to_bytes(8, "big", signed=True)
        size = store.consume_queue_file_size
    (root / "consumequeue" / "%LMQ%a" / "0").mkdir(parents=True)
    (root / "consumequeue" / "%LMQ%a" / "0" / f"{0:020d}").write_bytes(unit.ljust(size, b"\0"))
    findings, summary = _cq_findings(root)
    assert [f for f in findings if (f.file or "").startswith("consumequeue/%LMQ%")] == []
    assert any(line.startswith("7 LMQ queue(s) checked") for line in summary.notes), summary.notes


@pytest.mark.parametrize("version", ["4.4.0", "4.8.0"])
def test_a_broker_before_4_9_3_writes_no_lmq_entry(tmp_path, version):
    """Multi-dispatch is new in 4.9.3 (``enableMultiDispatch``, ``checkMultiDispatchQueue``; rules §3.12): an older
    broker dispatches a record carrying ``INNER_MULTI_DISPATCH`` to its own queue alone. Before, every era was
    multi-dispatched, and rebuild-cq planned a %LMQ% queue the broker never writes."""
    root = _append_multi_dispatched(copy_store(version, "crashed-small", tmp_path), "TopicTest", confirm=False)
    for given, added in ((None, []), (version, []), ("4.9.7", [1])):
        code, out, err = _cli("rebuild-cq", root, "--dry-run", "-f", "json", *(["--broker-version", given] if given else []))
        assert code == 0, err
        assert [q["added"] for q in json.loads(out)["queues"] if q["topic"] == LMQ_QUEUE] == added, given
    assert VersionRules(BrokerVersion.parse("4.9.2")).lmq_rule == NO_MULTI_DISPATCH != VersionRules(BrokerVersion.parse("4.9.3")).lmq_rule


def _verify_and_info(root, *args):
    """verify's JSON (its findings, its next start), its table's first line, and info's next start."""
    code, out, err = _cli("verify", root, "-f", "json", *args)
    assert code in (0, 1), err
    doc = json.loads(out)
    code, table, err = _cli("verify", root, *args)
    assert code in (0, 1), err
    code, info, err = _cli("info", root, "-f", "json", *args)
    assert code == 0, err
    first = " ".join(table.split("\nWARNING")[0].split("\nERROR")[0].split())
    return doc["findings"], doc["summary"]["next_start"], first, json.loads(info)["next_start"]


@pytest.mark.parametrize("crashed", [True, False])
def test_verify_and_info_say_an_lmq_dispatch_that_throws_stops_the_next_start(tmp_path, crashed):
    """The real 5.3.3 ``lmq-small`` with a record listing ``%LMQ%a,%LMQ%b,%LMQ%c`` at ``0,1x,2`` appended: with the abort
    file, abnormal recovery dispatches it inside ``DefaultMessageStore.load``, ``Long.parseLong("1x")`` throws
    (``ConsumeQueue.multiDispatchLmqQueue`` @5.3.3), the load fails and the broker refuses to start (recover refuses,
    exit 4). Before: verify's first line and info said the start keeps the log and drops nothing, and verify said nothing
    of the record. Now verify reports it at its offset and both lines say where the start stops. After a clean stop no
    start dispatches it (normal recovery dispatches past the queues' end only, the reput starts at the log's end)."""
    root = _append_multi_dispatched(copy_store("5.3.3", "lmq-small", tmp_path), "TopicTest", confirm=False, queue=THREE, offsets="0,1x,2")
    if crashed:
        (root / "abort").write_bytes(b"")
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
    findings, verified, first, info = _verify_and_info(root)
    throws = [f for f in findings if f["kind"] == "dispatch-throws"]
    assert [(f["offset"], f["severity"]) for f in throws] == [(record.offset, "error")], findings
    assert f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x'" in throws[0]["message"]
    assert "writes the record's own entry and the 1 LMQ entry before it, then throws" in throws[0]["message"]
    assert verified["logical_end"] == info["logical_end"] == record.offset + record.total_size
    if not crashed:
        assert verified["stall"] is None and info["stall"] is None
        assert throws[0]["message"].endswith("at its next start nothing dispatches it")
        return
    stall = (f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x', which Long.parseLong "
             "refuses: abnormal recovery dispatches it, and the load fails: the broker refuses to start")
    assert verified["stall"] == info["stall"] == stall
    end = record.offset + record.total_size
    line = f"the broker's next start keeps [0, {end}) and drops nothing (end of data at {end}); abnormal recovery scanning from 0; but "
    assert first == line + stall == verified["line"] == info["line"]
    assert _cli("recover", root, "--dry-run")[0] == EXIT_REFUSED


def _append_without_properties(root, extra: dict | None = None, kind: clfmt.TransactionType = clfmt.TransactionType.NOT_TYPE):
    """Append one record without properties (``propertiesLength`` 0): the store's last ordinary (``kind``) TopicTest record
    re-encoded with none (with ``extra``: its own and those), at the next queue offset of its queue. Returns it as read back."""
    with Store.open(root) as store:
        records = list(store.commitlog.scan())
    end = records[-1].offset + records[-1].total_size
    base = [r for r in records if r.topic_name == "TopicTest" and clfmt.transaction_type(r.sys_flag) == kind][-1]
    properties = encode_properties({**base.property_map(), **extra}, trailing_separator=base.properties.endswith(b"\x02")) if extra else b""
    raw = clfmt.encode_message({**base._asdict(), "phys_offset": end, "queue_offset": base.queue_offset + 1, "properties": properties})
    segment = root / "commitlog" / f"{end - end % (1 << 20):020d}"
    data = bytearray(segment.read_bytes())
    data[end % (1 << 20) : end % (1 << 20) + len(raw)] = raw
    segment.write_bytes(bytes(data))
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
    assert record.offset == end and record.topic_name == "TopicTest"
    assert record.property_map() == ({**base.property_map(), **extra} if extra else {})
    return record


@pytest.mark.parametrize("name, effect", [
    ("crashed-small", "abnormal recovery dispatches it, and the load fails: the broker refuses to start"),
    ("clean-small", "its start-up reput dispatches it and retries it forever: the broker's start never completes"),
])
def test_a_4_9_3_broker_with_multi_dispatch_throws_on_a_record_without_properties(tmp_path, name, effect):
    """4.9.3's ``checkMultiDispatchQueue`` tests ``prop == null && prop.isEmpty()`` (4.9.4: ``||``; rules §3.12) on the
    map ``checkMessageAndReturnSize`` leaves null for a record without properties: with ``enableMultiDispatch`` the
    NullPointerException leaves the dispatch before the record's own entry. On copies of the real 4.9.7 broker's
    stores (marks: E10-E12) with such a record appended: abnormal recovery fails the load (crashed), the start-up reput
    retries it forever and ``start()`` waits for it (clean). Before: mqtool planned the record's entry and said the start
    keeps the log. Now, given 4.9.3, recover/repair/rebuild-cq refuse and verify and info say where the start stops;
    given 4.9.7 they plan its entry; undecided, the plans refuse naming --broker-version and verify warns; without
    multi-dispatch (no config, no %LMQ% queue: the broker's default is off) nothing changes."""
    root = copy_store("4.9.7", name, tmp_path)
    record = _append_without_properties(root)
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=true\n")
    on = ("--broker-config", conf)
    before = _tree(root)
    for command in ("recover", "repair", "rebuild-cq"):
        code, out, err = _cli(command, root, "--yes", *on, "--broker-version", "4.9.3")
        message = " ".join(err.split())
        assert code == EXIT_REFUSED and out == "", err
        assert f"the record at {record.offset} has no properties, on which 4.9.3's checkMultiDispatchQueue throws a NullPointerException" \
            in message
        assert "writes nothing (not even the record's own entry), then throws" in message
        code, out, err = _cli(command, root, "--dry-run", *on)
        message = " ".join(err.split())
        assert code == EXIT_REFUSED and "cannot tell which broker version" in message and "pass --broker-version" in message, err
        assert f"the record at {record.offset} has no properties" in message and "4.9.3, 4.9.7" in message
        assert _tree(root) == before
    findings, verified, first, info = _verify_and_info(root, *on, "--broker-version", "4.9.3")
    assert [(f["offset"], f["severity"]) for f in findings if f["kind"] == "dispatch-throws"] == [(record.offset, "error")]
    stall = (f"the record at {record.offset} has no properties, on which 4.9.3's checkMultiDispatchQueue throws a NullPointerException "
             f"(enableMultiDispatch on): {effect}")
    assert verified["stall"] == info["stall"] == stall and first.endswith(f"; but {stall}"), first
    findings, verified, _, info = _verify_and_info(root, *on)
    assert [(f["offset"], f["severity"]) for f in findings if f["kind"] == "dispatch-throws"] == [(record.offset, "warning")]
    maybe = stall.replace(" (enableMultiDispatch on)", " (enableMultiDispatch on) (if the broker is 4.9.3: --broker-version decides)")
    assert verified["stall"] == info["stall"] == maybe  # every era the marks leave (E10-E12) starts alike
    for given in (("--broker-version", "4.9.7"), ()):
        args = (*on, *given) if given else ()
        code, out, err = _cli("rebuild-cq", root, "--dry-run", "-f", "json", *args)
        assert code == 0, err
        queues = [q for q in json.loads(out)["queues"] if q["topic"] == "TopicTest" and q["queue_id"] == record.queue_id]
        assert [q["max_after"] for q in queues] == [record.queue_offset + 1], queues  # its own entry planned
        findings, verified, _, info = _verify_and_info(root, *args)
        assert not [f for f in findings if f["kind"] == "dispatch-throws"] and verified["stall"] is None and info["stall"] is None


def test_missing_entries_the_next_start_would_rebuild_are_lost_where_a_dispatch_throws_first(tmp_path):
    """The real 4.9.7 ``crashed-small`` with a record without properties appended, under 4.9.3 with multi-dispatch on: its
    abnormal recovery's dispatch throws on that record (``checkMultiDispatchQueue`` @4.9.3) and the load fails, so the
    record's missing TopicTest entry is never rebuilt. Before: verify's ``cq-entry-missing`` was a warning saying the broker
    rebuilds it on its next start; now an error that says the start would, and why it does not (``lmq.with_stall``). Under
    4.9.7 the dispatch goes through and the warning stands."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    record = _append_without_properties(root)
    conf = tmp_path / "broker.conf"
    conf.write_text("enableMultiDispatch=true\n")
    for version, severity in (("4.9.3", "error"), ("4.9.7", "warning")):
        findings, verified, _, _ = _verify_and_info(root, "--broker-config", conf, "--broker-version", version)
        missing = [f for f in findings if f["kind"] == "cq-entry-missing"]
        found = [(f["offset"], f["severity"], f["details"]["rebuilt_by_broker"]) for f in missing]
        assert found == [(record.offset, severity, severity == "warning")]
        redispatch = "the abort file is present, so abnormal recovery re-dispatches every record from offset 0"
        if severity == "warning":
            assert verified["stall"] is None
            assert missing[0]["message"].endswith(f"the broker will rebuild them on its next start ({redispatch})")
        else:
            assert missing[0]["message"].endswith(f"the broker's next start would rebuild them ({redispatch}), but {verified['stall']}")
            assert verified["stall"].startswith(f"the record at {record.offset} has no properties")


def _first_lines(root, *args):
    """The next start's line of ``verify --only commitlog``, of ``verify --only index`` and of ``salvage`` (its stderr)."""
    lines = []
    for only in ("commitlog", "index"):
        code, table, err = _cli("verify", root, "--only", only, *args)
        assert code in (0, 1), err
        lines.append(" ".join(table.split("\nWARNING")[0].split("\nERROR")[0].split("\nSummary")[0].split()))
    code, _, err = _cli("salvage", root, "-f", "jsonl", "--out", root.parent / "salvaged.jsonl", *args)
    assert code == 0, err
    lines.append(next(line for line in err.splitlines() if "next start" in line).removeprefix("mqtool: "))
    return lines


def test_every_command_says_where_a_dispatch_that_throws_stops_the_next_start(tmp_path):
    """The real 5.3.3 ``lmq-small``, crashed, with a record listing ``%LMQ%a,%LMQ%b,%LMQ%c`` at ``0,1x,2`` appended:
    abnormal recovery's dispatch throws on it and the broker refuses to start. Before: verify's first line and info said
    so, but ``verify --only commitlog`` (or ``--only index``) and ``salvage``'s next-start line said the start keeps the
    log; now every one is the same line (``lmq.with_stall``)."""
    root = _append_multi_dispatched(copy_store("5.3.3", "lmq-small", tmp_path), "TopicTest", confirm=False, queue=THREE, offsets="0,1x,2")
    (root / "abort").write_bytes(b"")
    _, verified, first, info = _verify_and_info(root)
    assert verified["stall"] is not None and first == verified["line"] == info["line"]
    assert _first_lines(root) == [first] * 3


@pytest.mark.parametrize("config, stalls", [("enableMultiDispatch=false\n", True), ("", True),
                                            ("enableMultiDispatch=false\nbrokerRole=SLAVE\n", False),
                                            ("enableMultiDispatch=false\nlongPollingEnable=false\n", False)])
@pytest.mark.parametrize("queued", [True, False])
def test_4_9_x_reput_notify_throws_on_an_lmq_offset_list_whatever_multi_dispatch(tmp_path, config, stalls, queued):
    """4.9.3-4.9.8's reput calls ``notifyMessageArrive4MultiQueue`` after each record's dispatch (a master with
    ``longPollingEnable``: ``ReputMessageService.doReput`` @4.9.3, 4.9.7): it parses ``INNER_MULTI_QUEUE_OFFSET`` whatever
    ``enableMultiDispatch`` and whatever the transaction type, and ``run()`` retries a throw forever, so the start-up reput
    from the queues' max never ends. On copies of the real 4.9.7 ``clean-small`` with a record listing ``%LMQ%a,%LMQ%b,%LMQ%c``
    at ``0,1x,2`` appended after the queues' end (an ordinary one, ``queued``, or the last TopicTest record's copy, a
    transaction half message), no ``%LMQ%`` queue. Before: verify, info and salvage said the start keeps the log and
    verify found nothing; recover went ahead with multi-dispatch off, or for the half message (no consume queue
    dispatch). Now they say where the start stops and recover and repair refuse (exit 4), but on a slave or without long
    polling (no notify), where nothing changes."""
    lists = {"INNER_MULTI_DISPATCH": THREE, "INNER_MULTI_QUEUE_OFFSET": "0,1x,2"}
    root = copy_store("4.9.7", "clean-small", tmp_path)
    if queued:
        _append_without_properties(root, lists)
    else:
        _append_multi_dispatched(root, "TopicTest", confirm=False, queue=THREE, offsets="0,1x,2")
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
    assert clfmt.transaction_type(record.sys_flag) == (clfmt.TransactionType.NOT_TYPE if queued else clfmt.TransactionType.PREPARED)
    conf = tmp_path / "broker.conf"
    conf.write_text(config or "brokerIP1=10.0.0.1\n")
    args = ("--broker-version", "4.9.7", "--broker-config", conf)
    findings, verified, first, info = _verify_and_info(root, *args)
    throws = [(f["offset"], f["severity"], f["details"]["writes"]) for f in findings if f["kind"] == "dispatch-throws"]
    before = _tree(root)
    plans = [_cli(command, root, "--yes" if stalls else "--dry-run", *args) for command in ("recover", "repair")]
    assert _tree(root) == before
    if not stalls:
        assert throws == [] and verified["stall"] is None and info["stall"] is None
        assert [code for code, _, _ in plans] == [0, 0]
        return
    wrote = "the record's own entry" if queued else "no consume queue entry"
    assert throws == [(record.offset, "error", wrote)]
    stall = (f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x', which Long.parseLong "
             "refuses in the reput's long-polling notify (notifyMessageArrive4MultiQueue): its start-up reput dispatches it and retries "
             "it forever: the broker's start never completes")
    assert verified["stall"] == info["stall"] == stall and first == verified["line"] == info["line"] and first.endswith(f"; but {stall}")
    assert _first_lines(root, *args) == [first] * 3
    for code, out, err in plans:
        message = " ".join(err.split())
        assert code == EXIT_REFUSED and out == "" and f"the record at {record.offset} lists LMQ queue '%LMQ%b'" in message, err
        assert "the notify throws" in message, err
        assert message.endswith("to get past it, set longPollingEnable=false in broker.conf (the broker then reputs without the "
                                "notify) and pass it as --broker-config, or copy the messages out with `mqtool salvage`"), err


@pytest.mark.parametrize("version, given", [("4.9.7", "4.9.7"), ("5.1.4", None)])
def test_a_throw_only_multi_dispatch_makes_is_undecided_where_nothing_says_it_is_on(tmp_path, version, given):
    """A crashed copy of the real ``crashed-small`` (no ``%LMQ%`` queue) with a record listing ``%LMQ%a,%LMQ%b,%LMQ%c`` at
    ``0,1x,2`` appended: abnormal recovery's dispatch throws on it only where ``enableMultiDispatch`` is on (off by default
    in ``MessageStoreConfig``; recovery does not notify). The record is no evidence that it is: a broker with it on writes
    ``INNER_MULTI_QUEUE_OFFSET`` as numbers (``MultiDispatch.wrapMultiDispatch`` @4.9.3, 5.1.4), one with it off stores the
    client's own as sent. Before: recover refused saying the broker refuses to start while verify, info and salvage said
    the start keeps the log, without a finding. Now all say it is undecided and what decides (``--broker-config``):
    verify warns (the record's own missing entry too: the start that would rebuild it may stop there), the next start's
    line says it and recover refuses naming ``--broker-config``; given the config, each says the one answer. A broker.conf
    without the key says off (the default), as one with ``enableMultiDispatch=false``: before, it was undecided too and
    the refusal asked for the --broker-config already given. Refused with it on, the line gives the way past the record
    (the setting that avoids the throw, or ``mqtool salvage``): before, it gave none."""
    root = _append_multi_dispatched(copy_store(version, "crashed-small", tmp_path), "TopicTest", confirm=False, queue=THREE,
                                    offsets="0,1x,2")
    pinned = ("--broker-version", given) if given else ()
    with Store.open(root) as store:
        record = list(store.commitlog.scan())[-1]
        assert store.abort_present and not store.multi_dispatch_on
    stall = (f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x', which Long.parseLong "
             "refuses{}: abnormal recovery dispatches it, and the load fails: the broker refuses to start")
    for config, severity in ((None, "warning"), ("enableMultiDispatch=true\n", "error"), ("enableMultiDispatch=false\n", None),
                             ("brokerIP1=10.0.0.1\n", None)):
        conf = tmp_path / "broker.conf"
        conf.write_text(config or "")
        args = (*pinned, "--broker-config", conf) if config is not None else pinned
        findings, verified, first, info = _verify_and_info(root, *args)
        throws = [(f["offset"], f["severity"]) for f in findings if f["kind"] == "dispatch-throws"]
        missing = [f for f in findings if f["kind"] == "cq-entry-missing" and f["file"].startswith("consumequeue/TopicTest/")]
        code, _, err = _cli("recover", root, "--dry-run", *args)
        message = " ".join(err.split())
        if severity is None:
            assert throws == [] and verified["stall"] is None and info["stall"] is None and code == 0, err
            assert [f["severity"] for f in missing] == ["warning"] and "the broker will rebuild them" in missing[0]["message"]
            continue
        assert throws == [(record.offset, severity)]
        assert [f["severity"] for f in missing] == [severity] and missing[0]["message"].endswith(f", but {verified['stall']}")
        maybe = " (if enableMultiDispatch is on: --broker-config decides)" if config is None else ""
        assert verified["stall"] == info["stall"] == stall.format(maybe)
        assert _first_lines(root, *args) == [first] * 3 and first.endswith(f"; but {verified['stall']}")
        assert code == EXIT_REFUSED and f"the record at {record.offset} lists LMQ queue '%LMQ%b'" in message, err
        assert ("cannot tell whether the broker has enableMultiDispatch on" in message) == (config is None), err
        assert ("no --broker-config is given" in message and "enableMultiDispatch=true or false in it" in message) == (config is None), err
        assert message.endswith("to get past it, set enableMultiDispatch=false in broker.conf (the broker then gives it its own entry "
                                "alone, and no record its LMQ entries) and pass it as --broker-config, or copy the messages out with "
                                "`mqtool salvage`") == (config is not None), err


@pytest.mark.parametrize("queued_after", [False, True])
def test_4_9_x_reput_after_abnormal_recovery_notifies_the_records_after_the_last_it_queued(tmp_path, queued_after):
    """After abnormal recovery (which dispatches and notifies nothing it cannot), 4.9.3-4.9.8's ``start()`` reputs from
    the consume queues' max: past the last record recovery queued, so a transaction half message after it (no consume
    queue entry) is read by the reput, whose long-polling notify throws on its offset list whatever multi-dispatch
    (``notifyMessageArrive4MultiQueue`` @4.9.7). On the real 4.9.7 ``crashed-small`` with such a record appended: before,
    verify, info and salvage said the start keeps the log and recover went ahead; now all say the reput stops there and
    recover refuses. With an ordinary record appended after it, the reput starts past both: no stop, as before."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    lists = {"INNER_MULTI_DISPATCH": THREE, "INNER_MULTI_QUEUE_OFFSET": "0,1x,2"}
    record = _append_without_properties(root, lists, clfmt.TransactionType.PREPARED)
    if queued_after:
        _append_without_properties(root, {"KEYS": "after"})
    args = ("--broker-version", "4.9.7")
    findings, verified, first, info = _verify_and_info(root, *args)
    throws = [(f["offset"], f["severity"]) for f in findings if f["kind"] == "dispatch-throws"]
    code, _, err = _cli("recover", root, "--dry-run", *args)
    if queued_after:
        assert throws == [] and verified["stall"] is None and info["stall"] is None and code == 0, err
        return
    stall = (f"the record at {record.offset} lists LMQ queue '%LMQ%b' with INNER_MULTI_QUEUE_OFFSET value '1x', which Long.parseLong "
             "refuses in the reput's long-polling notify (notifyMessageArrive4MultiQueue): its start-up reput dispatches it and retries "
             "it forever: the broker's start never completes")
    assert throws == [(record.offset, "error")] and verified["stall"] == info["stall"] == stall
    assert _first_lines(root, *args) == [first] * 3 and first.endswith(f"; but {stall}")
    assert code == EXIT_REFUSED and "writes no consume queue entry, then the notify throws" in " ".join(err.split()), err
