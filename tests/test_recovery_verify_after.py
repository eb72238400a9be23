"""``recover``'s ``verify_after`` (what ``verify`` still reports after the broker's recovery) without
verify's cq or index check where the recovery settles it (``repair.settled_checks``): the same list
as with every check, on crashed copies of the real-broker fixtures whose consume queues and index
are lost, or whose index files all go; and the full run wherever a queue or a kept index file
could leave a finding."""

from __future__ import annotations

import os
import shutil

import pytest
from conftest import VERSIONS, copy_store, manifest

from mqtool.formats import checkpoint as cpfmt
from mqtool.formats import commitlog as clfmt
from mqtool.recovery import repair as rp
from mqtool.recovery.planners import PlanOptions, plan_recover
from mqtool.store import Store

BODY_CRC = clfmt.HEADER_LAYOUTS[(False, False)].offset_of("body_crc")


def lose_queues_and_index(root, *, bad_config: bool = True):
    """What the bench's crashed copy is: no consume queues, no index, a zeroed checkpoint, an
    abort file; with ``bad_config`` also an unreadable config file without a .bak, so the list
    is not empty (lost data verify keeps reporting)."""
    shutil.rmtree(root / "consumequeue", ignore_errors=True)
    shutil.rmtree(root / "index", ignore_errors=True)
    (root / "checkpoint").write_bytes(bytes(cpfmt.CHECKPOINT_FILE_SIZE))
    (root / "abort").write_bytes(b"")
    if bad_config:
        (root / "config").mkdir(exist_ok=True)
        (root / "config" / "consumerOffset.json").write_text("{not json")
        (root / "config" / "consumerOffset.json.bak").unlink(missing_ok=True)
    return root


def both(root, version):
    with Store.open(root, version=version) as store:
        plan = plan_recover(store, PlanOptions(mode="abnormal"))
        settled = rp.cross_checks_settled(store, plan)
        fast = rp.verify_after(store, plan)
        full = rp.verify_after(store, plan, every_check=True)
    return plan, settled, fast, full


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ("clean-small", "crashed-small"))
def test_without_queues_and_index_the_cross_checks_are_settled_and_the_list_is_the_same(version, name, tmp_path):
    root = lose_queues_and_index(copy_store(version, name, tmp_path))
    plan, settled, fast, full = both(root, version)
    assert settled
    assert [p.start for p in plan.dispatch if p.consume_queues and p.index][0] == plan.commitlog.min_offset
    assert fast == full
    kinds = [(e.kind, e.lost_data, e.fixed_by) for e in fast]
    assert ("config-unreadable", True, None) in kinds


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3"))
def test_a_damaged_record_in_the_middle_gives_the_same_list(version, tmp_path):
    """The recovery cuts at a flipped body byte; verify's commit log check still runs in full."""
    root = lose_queues_and_index(copy_store(version, "clean-small", tmp_path), bad_config=False)
    messages = manifest(version, "clean-small")["messages"]
    victim = messages[len(messages) // 2]
    size = manifest(version, "clean-small")["storeConfig"]["mappedFileSizeCommitLog"]
    offset = victim["commitLogOffset"]
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[offset % size + BODY_CRC] ^= 0x01  # the stored BODYCRC no longer matches the body
    seg.write_bytes(data)
    plan, settled, fast, full = both(root, version)
    assert settled and plan.commitlog.valid_end == offset
    assert fast == full


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ("clean-small", "crashed-small"))
def test_with_queues_kept_a_recovery_that_drops_every_index_file_settles_the_index_check(version, name, tmp_path):
    """An abnormal exit with a zeroed checkpoint: the broker deletes every index file (all newer
    than indexMsgTimestamp) and re-indexes from the first segment, while the consume queues stay.
    Without the index check, the list is the one every check gives; the check itself reports."""
    root = copy_store(version, name, tmp_path)
    (root / "checkpoint").write_bytes(bytes(cpfmt.CHECKPOINT_FILE_SIZE))
    (root / "abort").write_bytes(b"")
    with Store.open(root, version=version) as store:
        plan = plan_recover(store, PlanOptions(mode="abnormal"))
        assert rp.settled_checks(store, plan) == {"index"} and not rp.cross_checks_settled(store, plan)
        assert {f.action for f in plan.index.files} == {"delete", "create"}
        findings, _ = rp.verify_findings(store)
        fast = rp.verify_after(store, plan)
        full = rp.verify_after(store, plan, every_check=True)
    assert any(f.kind.startswith("index-") for f in findings)
    assert fast == full


@pytest.mark.parametrize("version", VERSIONS)
def test_queues_or_a_kept_index_file_run_every_check(version, tmp_path):
    root = copy_store(version, "crashed-small", tmp_path)
    with Store.open(root, version=version) as store:
        plan = plan_recover(store, PlanOptions())
        assert store.consume_queues and not rp.cross_checks_settled(store, plan)
    shutil.rmtree(root / "consumequeue")
    with Store.open(root, version=version) as store:  # the index files the checkpoint covers are kept
        plan = plan_recover(store, PlanOptions())
        kept = [f.name for f in plan.index.files if f.action in ("keep", "append")]
        assert not kept or not rp.cross_checks_settled(store, plan)


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3"))
@pytest.mark.parametrize("lose", (True, False))
@pytest.mark.parametrize("damaged", (False, True))
def test_verify_on_the_plans_walk_gives_the_list_verify_after_the_plan_gives(version, lose, damaged, tmp_path, monkeypatch):
    """``plan_with_verify_after`` shows the plan's scan to verify's commit log check (only where
    the cross checks may be settled: queues and index lost), which walks on from where the scan
    stopped; its ``verify_after`` is the one ``verify_after`` computes after the plan on a walk of
    its own, whole and with a flipped body CRC (the recovery's walk stops there, verify's goes on)."""
    root = copy_store(version, "crashed-small", tmp_path)
    if lose:
        lose_queues_and_index(root)
    if damaged:
        messages = manifest(version, "crashed-small")["messages"]
        offset = messages[len(messages) // 3]["commitLogOffset"]
        with Store.open(root, version=version) as store:
            size = store.commitlog.file_size
        seg = root / "commitlog" / f"{offset // size * size:020d}"
        data = bytearray(seg.read_bytes())
        data[offset % size + BODY_CRC] ^= 0x01
        seg.write_bytes(data)
    calls = []
    real = rp.verify_findings

    def spy(store, checks=rp.CHECKS, *, walked=None, **given):  # ``given``: what else the plan offers verify (``dispatched``)
        calls.append((checks, sum(r.records for r in walked.values()) if walked is not None else None))
        return real(store, checks, walked=walked, **given)

    monkeypatch.setattr(rp, "verify_findings", spy)
    with Store.open(root, version=version) as store:
        plan = rp.plan_with_verify_after(store, lambda walked: plan_recover(store, PlanOptions(mode="abnormal"), walked=walked))
    with Store.open(root, version=version) as store:
        alone = rp.verify_after(store, plan_recover(store, PlanOptions(mode="abnormal")))
        settled = rp.settled_checks(store, plan)
    assert list(plan.verify_after) == alone
    assert len(calls) == 2  # one after the plan, one for ``alone``
    checks, walked_records = calls[0]
    if lose:
        assert checks == rp.LOCAL_CHECKS
        if damaged:  # the scan's walk of the last sub-batch may go on past the cut, as verify's does
            assert walked_records >= plan.dispatch[0].records
        else:
            assert walked_records == plan.dispatch[0].records  # every record the plan's scan took
        assert ("config-unreadable", True, None) in [(e.kind, e.lost_data, e.fixed_by) for e in alone]
    else:  # the queues kept: verify runs on its own walk, without the index check where every index file goes
        assert calls[0] == (tuple(c for c in rp.CHECKS if c not in settled), None) and "cq" not in settled
    if damaged:
        assert plan.commitlog.valid_end == offset  # the recovery cuts at the flipped CRC (verify's finding there goes with the cut)


def _bak_a_directory(root):
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "delayOffset.json.bak").mkdir()


def _topics_a_directory(root):
    (root / "config" / "topics.json").unlink()
    (root / "config" / "topics.json").mkdir()


def _topics_a_directory_and_a_cut(root):
    """A crash (abort, a flipped body CRC four fifths in: ``_a_cut``): the recovery cuts there and every queue loses its entries
    after it, so committed offsets that were in range lie past the queues' new max offsets."""
    _topics_a_directory(root)
    _a_cut(root)


def _delay_offsets_malformed_beside_a_fifo_bak(root):
    """4.9.2+ loads delayOffset.json after the store, so the FIFO .bak refuses no recovery; verify stops at it, and once
    repair moves it out, reports the malformed file the broker then passes over to an empty table."""
    (root / "config" / "delayOffset.json").write_text("{not json")
    (root / "config" / "delayOffset.json.bak").unlink(missing_ok=True)
    os.mkfifo(root / "config" / "delayOffset.json.bak")


def _both_fifos(name):
    """``name`` and its .bak both FIFOs: the broker's start hangs in the file's open (``MixAll.file2String``) and never reaches
    the .bak; repair moves both out, and the broker then reads neither (``ConfigManager.loadBak`` returns true: an empty
    table), so verify reports nothing of them. Loaded after the store (4.9.2+ delayOffset.json, 5.x timermetrics): no refusal."""
    def damage(root):
        for path in (root / "config" / name, root / "config" / f"{name}.bak"):
            path.unlink(missing_ok=True)
            os.mkfifo(path)
    return damage


def _a_fifo_beside_its_bak(name):
    """``name`` a FIFO beside its intact .bak: verify, after ``recover --yes`` too, stops at the FIFO (the broker's start
    hangs in its open); once repair moves it out, the broker loads the .bak and verify reports nothing of either."""
    def damage(root):
        (root / "config" / name).unlink()
        os.mkfifo(root / "config" / name)
    return damage


@pytest.mark.parametrize("version, fixture, damage, unmasked", [
    ("4.9.7", ("4.9.7", "crashed-small"), _bak_a_directory, []),  # config-unreadable, error: quarantine of the .bak
    ("4.9.7", ("4.9.7", "config-real"), _topics_a_directory, []),  # config-unreadable, warning: quarantine of the directory
    ("4.9.7", ("4.9.7", "config-real"), _topics_a_directory_and_a_cut, []),  # and consumer-offset-range against the cut queues
    ("4.9.7", ("4.9.7", "config-real"), _delay_offsets_malformed_beside_a_fifo_bak,
     [("config-unreadable", "error", "config/delayOffset.json", None)]),  # the file the FIFO .bak hid
    ("4.9.7", ("4.9.7", "config-real"), _both_fifos("delayOffset.json"), []),  # the .bak the FIFO hid is moved out too
    ("4.9.7", ("4.9.7", "config-real"), _a_fifo_beside_its_bak("delayOffset.json"), []),  # the .bak it hid is read: sound
    ("5.3.3", ("5.3.3", "timer-crashed"), _both_fifos("timermetrics"), []),
    ("5.3.3", ("5.3.3", "crashed-small"), lambda root: (root / "index" / "99999999999999999").mkdir(), []),  # index-stray-entry
    ("5.3.3", ("5.3.3", "timer-crashed"), lambda root: (root / "timerlog" / "99999999999999999999").write_bytes(bytes(100)), []),
])
def test_the_table_says_what_repair_fixes_and_what_verify_reports_after_it(version, fixture, damage, unmasked, tmp_path):
    """``recover``'s "After this, `verify` will still report" table: a row repair's file fixes remove (a config file's
    .bak or a directory moved out, an index/ or timerlog/ entry) names its step in "fixed by", and verify reports, after
    ``recover --yes`` every row, after ``repair --yes`` the rows without one and what a FIFO moved out hid (``unmasked``),
    which ``repair``'s own table lists. Before: config-unreadable, index-stray-entry, timer-file-size and a timerwheel's length
    had no "fixed by" (index-stray-entry left out: the index check was taken as settled), and repair's table listed the config
    file and the wheel it fixes; consumer-offset-range was placed against today's queues, not the recovered ones, and neither
    table had the file beside a FIFO .bak. (A timerwheel of the wrong length now has ``recover`` refuse, as the broker does:
    ``test_single_files``.)"""
    import json

    from test_load_strays import run

    def rows(found):  # what fails (the tables list no info); a consumer offset's message names its queue's max offset
        return sorted((f["kind"], f["severity"], f["file"], f["message"] if f["kind"] == "consumer-offset-range" else None)
                      for f in found if f["severity"] != "info")

    root = copy_store(*fixture, tmp_path)
    copy = shutil.copytree(root, tmp_path / "copy", symlinks=True)
    damage(root)
    damage(copy)
    table = json.loads(run("recover", root, "--broker-version", version, "--format", "json").stdout)["verify_after"]
    assert any(e["fixed_by"] in ("quarantine", "resize-segment") for e in table), table
    remaining = json.loads(run("repair", root, "--broker-version", version, "--format", "json").stdout)["remaining"]
    assert rows(remaining) == sorted(rows(e for e in table if not e["fixed_by"]) + unmasked)
    assert run("recover", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b1").exit_code == 0
    after = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["findings"]
    assert rows(after) == rows(table)
    assert any(f["kind"] == "consumer-offset-range" for f in after) == (fixture[1] == "config-real")
    assert run("repair", copy, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b2").exit_code in (0, 1)
    after = json.loads(run("verify", copy, "--broker-version", version, "--format", "json").stdout)["findings"]
    assert rows(after) == rows(remaining)


def test_repairs_table_places_consumer_offsets_against_the_queues_its_rebuild_makes(tmp_path):
    """A consume queue missing (4.9.7 config-real's TopicTest/1, on which a committed offset, 86, lies past the queue's 78
    records): ``repair`` rebuilds the queue after the recovery, and its "will still report" table places the consumer offsets
    against the queue ends that rebuild makes, as verify after ``repair --yes`` reports them. Before: against the queues the
    recovery alone leaves (no TopicTest/1: an info row, left out), so the warning on TopicTest/1 that verify then reports was
    missing."""
    import json

    from test_load_strays import run

    def rows(found):
        return sorted((f["kind"], f["severity"], f["file"], f["message"]) for f in found if f["severity"] != "info")

    root = copy_store("4.9.7", "config-real", tmp_path)
    shutil.rmtree(root / "consumequeue" / "TopicTest" / "1")
    plan = json.loads(run("repair", root, "--broker-version", "4.9.7", "--format", "json").stdout)
    assert "rebuild-cq" in [s["step"] for s in plan["steps"]]
    assert any(" on TopicTest/1 " in e["message"] for e in plan["remaining"] if e["kind"] == "consumer-offset-range")
    assert run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "b").exit_code in (0, 1)
    after = json.loads(run("verify", root, "--broker-version", "4.9.7", "--format", "json").stdout)["findings"]
    assert rows(after) == rows(plan["remaining"])


def _a_cut(root):
    """A crash four fifths in: a flipped body CRC there, and the abort file."""
    made = manifest("4.9.7", "config-real")
    offset, size = made["messages"][len(made["messages"]) * 4 // 5]["commitLogOffset"], made["storeConfig"]["mappedFileSizeCommitLog"]
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[offset % size + BODY_CRC] ^= 0x01
    seg.write_bytes(data)
    (root / "abort").write_bytes(b"")


@pytest.mark.parametrize("crash", (None, _a_cut))
def test_repairs_table_reads_the_bak_beside_a_consumer_offsets_fifo_it_moves_out(crash, tmp_path):
    """4.9.7 config-real's consumerOffset.json a FIFO beside its intact .bak (offsets half the file's): the broker's start hangs
    in its load, so ``recover`` refuses and ``repair`` plans the recovery once it has moved the FIFO out; the broker then loads
    the .bak, whose offsets verify after ``repair --yes`` places against the queues the recovery leaves (cut by a crash too),
    as ``repair``'s "will still report" table does (``Store.moved_out``). Before: that table was empty."""
    import json

    from test_load_strays import run

    def rows(found):
        return sorted((f["kind"], f["severity"], f["file"], f["message"]) for f in found if f["severity"] != "info")

    root = copy_store("4.9.7", "config-real", tmp_path)
    if crash is not None:
        crash(root)
    (root / "config" / "consumerOffset.json").unlink()
    os.mkfifo(root / "config" / "consumerOffset.json")
    assert run("recover", root, "--broker-version", "4.9.7", "--format", "json").exit_code == 3
    plan = json.loads(run("repair", root, "--broker-version", "4.9.7", "--format", "json").stdout)
    assert [s["step"] for s in plan["steps"]] == ["quarantine"] and plan["recover"] is None
    assert any(e["kind"] == "consumer-offset-range" for e in plan["remaining"])
    assert run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "b").exit_code in (0, 1)
    after = json.loads(run("verify", root, "--broker-version", "4.9.7", "--format", "json").stdout)["findings"]
    assert rows(after) == rows(plan["remaining"])


def _crashed_after_its_checkpoint(version, tmp_path):
    """A copy of ``crashed-small`` (abort file) whose checkpoint is later than every record, so the abnormal recovery of 3.2.6-5.3.1
    scans the last segment alone, and a consumerOffset.json committing every queue's message count."""
    import json
    from collections import Counter

    made = manifest(version, "crashed-small")
    root = copy_store(version, "crashed-small", tmp_path)
    counts = Counter((m["topic"], m["queueId"]) for m in made["messages"])
    table = {}
    for (topic, queue_id), n in counts.items():
        table.setdefault(f"{topic}@oracle_cg", {})[queue_id] = n
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "consumerOffset.json").write_text(json.dumps({"offsetTable": table}))
    later = max(m["storeTimestamp"] for m in made["messages"]) + 10_000
    cp = cpfmt.decode_checkpoint((root / "checkpoint").read_bytes())
    (root / "checkpoint").write_bytes(cpfmt.encode_checkpoint(cp._replace(physic_msg_timestamp=later, logics_msg_timestamp=later)))
    return root


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3", "4.4.0", "3.2.6"))
@pytest.mark.parametrize("lose", ("folder", "entries"))
def test_repairs_table_places_consumer_offsets_against_the_rebuild_after_a_crash(version, lose, tmp_path):
    """A crashed store (``crashed-small``: abort file) whose checkpoint is later than every record, so the abnormal recovery
    scans the last segment alone, with a body CRC flipped there (the recovery cuts at it), TopicTest/1's consume queue lost
    (its folder) or cut to 10 entries, and a consumerOffset.json committing every queue's message count: ``repair`` rebuilds
    TopicTest/1 after the recovery, and its table places the offsets against the queues the recovery cuts and the rebuild
    ends at the cut, as verify reports them after ``repair --yes``."""
    import json

    from test_load_strays import run

    def rows(found):
        return sorted((f["kind"], f["severity"], f["file"], f["message"]) for f in found if f["severity"] != "info")

    made = manifest(version, "crashed-small")
    root = _crashed_after_its_checkpoint(version, tmp_path)
    offset, size = made["messages"][len(made["messages"]) * 19 // 20]["commitLogOffset"], made["storeConfig"]["mappedFileSizeCommitLog"]
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[offset % size + BODY_CRC] ^= 0x01
    seg.write_bytes(data)
    queue = root / "consumequeue" / "TopicTest" / "1"
    if lose == "folder":
        shutil.rmtree(queue)
    else:
        first = queue / f"{0:020d}"
        first.write_bytes(first.read_bytes()[:10 * 20])
    plan = json.loads(run("repair", root, "--broker-version", version, "--format", "json").stdout)
    assert [s["step"] for s in plan["steps"]][:2] == ["recover", "rebuild-cq"]
    assert plan["recover"]["commitlog"]["valid_end"] == offset
    assert any(" on TopicTest/1 " in e["message"] for e in plan["remaining"] if e["kind"] == "consumer-offset-range")
    assert run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b").exit_code in (0, 1)
    after = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["findings"]
    assert rows(after) == rows(plan["remaining"])


def _tables_and_verify_after(root, version, tmp_path):
    """``recover``'s and ``repair``'s tables of ``root``, and verify's findings after each with ``--yes`` (repair on a copy)."""
    import json

    from test_load_strays import run

    copy = shutil.copytree(root, tmp_path / "copy", symlinks=True)
    table = json.loads(run("recover", root, "--broker-version", version, "--format", "json").stdout)["verify_after"]
    remaining = json.loads(run("repair", root, "--broker-version", version, "--format", "json").stdout)["remaining"]
    assert run("recover", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b1").exit_code in (0, 1)
    after_recover = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["findings"]
    assert run("repair", copy, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b2").exit_code in (0, 1)
    after_repair = json.loads(run("verify", copy, "--broker-version", version, "--format", "json").stdout)["findings"]
    return table, after_recover, remaining, after_repair


def _rows(found):
    return sorted((f["kind"], f["severity"], f["file"], f["offset"], f["message"]) for f in found if f["severity"] != "info")


def _where(found):
    """``_rows`` without the message: a predicted row says what it foresees in words of its own."""
    return [row[:4] for row in _rows(found)]


@pytest.mark.parametrize("version, segment", [(v, "kept") for v in ("4.9.7", "5.3.3", "4.4.0", "3.2.6")]
                         + [(v, "deleted") for v in ("4.9.7", "5.3.3", "3.2.6")])  # (4.4.0's second segment is its last)
def test_the_tables_after_a_crash_whose_recovery_scans_the_last_segment(version, segment, tmp_path):
    """``_crashed_after_its_checkpoint`` (its second segment deleted too: the recovery never reads it): ``recover``'s table equals
    verify after ``recover --yes``, ``repair``'s verify after ``repair --yes``. Before: ``recover``'s listed checkpoint-ahead for
    logicsMsgTimestamp, which the recovery rewrites, and left out the index-keys-missing of the records before its start, whose
    index file it deletes (``IndexService.load``) and does not re-index."""
    root = _crashed_after_its_checkpoint(version, tmp_path)
    if segment == "deleted":
        size = manifest(version, "crashed-small")["storeConfig"]["mappedFileSizeCommitLog"]
        (root / "commitlog" / f"{size:020d}").unlink()
    table, after_recover, remaining, after_repair = _tables_and_verify_after(root, version, tmp_path)
    assert any(f["kind"] == "index-keys-missing" and f["offset"] == 0 for f in after_recover)
    assert _rows(table) == _rows(after_recover)
    assert _rows(remaining) == _rows(after_repair)


@pytest.mark.parametrize("version", ("4.9.7", "5.3.3", "4.4.0", "3.2.6"))
def test_the_tables_say_what_they_leave_out_where_the_start_after_the_recovery_reads_damage(version, tmp_path):
    """``_crashed_after_its_checkpoint`` with TopicTest/1's queue folder lost and a body CRC flipped half-way into the second segment.
    3.2.6-5.3.1's recovery scans the last segment alone, and, the abort file gone, their next start scans from the third-last
    segment left (4.9.7's third of four, 3.2.6's first of three), reads the flipped CRC and cuts the log there: ``repair``'s
    rebuild of TopicTest/1 ends there too, and the tables list what verify reports after ``--yes`` before that cut, with a
    ``not-predicted`` row at it for what verify finds from there on (4.4.0 has two segments: the CRC is in the last, where the
    recovery itself cuts; 5.3.3 starts from the consume queues' max offset). ``recover``'s row for TopicTest/1's missing entries,
    which it re-dispatches from its start on, names the records before that start, in the queue file the recovery creates (verify's
    row there says it in its own words). Before: no such rows;
    the CRC row said the next start does not read it; repair's table placed TopicTest/1's committed offset against the rebuild
    of the whole log (max 140, not 61); a recovery's cut (4.4.0) left physicMsgTimestamp's row judged against the log's last message."""
    made = manifest(version, "crashed-small")
    size = made["storeConfig"]["mappedFileSizeCommitLog"]
    root = _crashed_after_its_checkpoint(version, tmp_path)
    offset = next(m["commitLogOffset"] for m in made["messages"] if m["commitLogOffset"] >= size + size // 2)
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[offset % size + BODY_CRC] ^= 0x01
    seg.write_bytes(data)
    shutil.rmtree(root / "consumequeue" / "TopicTest" / "1")
    table, after_recover, remaining, after_repair = _tables_and_verify_after(root, version, tmp_path)
    cut = version in ("4.9.7", "3.2.6")
    for rows in (table, remaining):
        assert [(e["offset"], e["lost_data"]) for e in rows if e["kind"] == "not-predicted"] == ([(offset, True)] if cut else [])

    def before_cut(found):
        return [f for f in found if f["kind"] != "not-predicted" and (not cut or f["offset"] is None or f["offset"] < offset)]

    def of_topic_test_1(f):
        return f["kind"].startswith("cq-") and " of TopicTest/1 " in f["message"]

    said = [e["fixed_by"] for e in table if of_topic_test_1(e) and "re-dispatches it from" in e["message"]]
    assert said == ["rebuild-cq"]
    assert _rows(e for e in before_cut(table) if not of_topic_test_1(e)) == _rows(f for f in before_cut(after_recover)
                                                                                    if not of_topic_test_1(f))
    assert _where(before_cut(table)) == _where(before_cut(after_recover))
    assert _rows(before_cut(remaining)) == _rows(before_cut(after_repair))
    assert any(" on TopicTest/1 " in f["message"] for f in before_cut(after_repair) if f["kind"] == "consumer-offset-range")


def _cut_queue(root, version):
    """TopicTest/1's queue file cut to its first 10 entries (a whole number of units): the broker loads the short file
    (``ConsumeQueue.recover`` ends at its last unit) and its recovery, scanning the last segment alone, dispatches the queue's
    records there at the write position 10, not at their QUEUEOFFSET (117..): ``putMessagePositionInfo`` only logs "[BUG]logic
    queue order maybe wrong" (reference §5.10)."""
    first = root / "consumequeue" / "TopicTest" / "1" / f"{0:020d}"
    first.write_bytes(first.read_bytes()[:10 * 20])


def _a_middle_segment_and_a_queue_lost(root, version):
    """The second segment deleted and TopicTest/1's queue folder with it: the recovery (of the last segment) creates the queue
    with fillers up to its first record there, and ``repair`` rebuilds it from the whole log, where the broker's dispatch
    writes the records after the deleted segment's at the write position, not their QUEUEOFFSET: the broker does not renumber
    the records, and neither does the rebuild, so verify then reports each of those entries (lost data: records before them are gone)."""
    size = manifest(version, "crashed-small")["storeConfig"]["mappedFileSizeCommitLog"]
    (root / "commitlog" / f"{size:020d}").unlink()
    shutil.rmtree(root / "consumequeue" / "TopicTest" / "1")


def _cut_queue_and_damage_the_next_start_reads(root, version):
    """``_cut_queue`` and a body CRC flipped half-way into the second segment, which the start after 4.9.7's recovery (from
    the third-last segment) reads and cuts the log at: once the recovery is applied, verify takes every record after it for
    lost, TopicTest/1 (with rows past it) for a queue of lost data, and ``repair`` rebuilds no queue."""
    _cut_queue(root, version)
    made = manifest(version, "crashed-small")
    size = made["storeConfig"]["mappedFileSizeCommitLog"]
    offset = next(m["commitLogOffset"] for m in made["messages"] if m["commitLogOffset"] >= size + size // 2)
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    data[offset % size + BODY_CRC] ^= 0x01
    seg.write_bytes(data)


@pytest.mark.parametrize("version, damage", [(v, d) for v in ("4.9.7", "5.3.3", "3.2.6")
                                             for d in (_cut_queue, _a_middle_segment_and_a_queue_lost)]
                         + [("4.9.7", _cut_queue_and_damage_the_next_start_reads)])
def test_the_tables_list_the_entries_a_dispatch_writes_away_from_their_queue_offset(version, damage, tmp_path):
    """``_crashed_after_its_checkpoint`` with a queue damaged (``damage``): ``recover``'s table equals verify after ``recover --yes``,
    ``repair``'s verify after ``repair --yes``, and ``repair``'s on the recovered store verify after its ``--yes`` (kind, severity,
    file, offset; before the start after the recovery cuts the log, where it does). Before: ``recover``'s table left out the
    cq-entry-mismatch rows of the entries its dispatch writes at the write position of a cut queue (23 on 4.9.7), and named no file
    for the missing entries of a queue whose folder is lost; verify took those entries, after the first, for damaged QUEUEOFFSET
    fields no rebuild mends, so ``repair``'s table on the recovered store listed them (22) where its rebuild mends them; ``repair``'s
    tables left out the rows of the entries its rebuild writes after a deleted segment (59); and with damage the next start reads,
    ``repair``'s table predicted a rebuild of TopicTest/1 (max offset 61 for its committed offset) that its ``--yes`` does not make
    (verify: 33)."""
    root = _crashed_after_its_checkpoint(version, tmp_path)
    damage(root, version)
    cut = None
    if damage is _cut_queue_and_damage_the_next_start_reads:
        made = manifest(version, "crashed-small")
        size = made["storeConfig"]["mappedFileSizeCommitLog"]
        cut = next(m["commitLogOffset"] for m in made["messages"] if m["commitLogOffset"] >= size + size // 2)

    def before_cut(found):
        return [f for f in found if f["kind"] != "not-predicted" and (cut is None or f["offset"] is None or f["offset"] < cut)]

    table, after_recover, remaining, after_repair = _tables_and_verify_after(root, version, tmp_path)
    assert _where(before_cut(table)) == _where(before_cut(after_recover))
    assert _where(before_cut(remaining)) == _where(before_cut(after_repair))
    assert any(f["kind"] == "cq-entry-mismatch" for f in (after_repair if damage is _a_middle_segment_and_a_queue_lost else after_recover))
    import json

    from test_load_strays import run

    again = json.loads(run("repair", root, "--broker-version", version, "--format", "json").stdout)["remaining"]
    assert run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b3").exit_code in (0, 1)
    after = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["findings"]
    assert _where(before_cut(again)) == _where(before_cut(after))
    assert _rows(e for e in before_cut(remaining) if e["kind"] == "consumer-offset-range") == _rows(
        f for f in before_cut(after_repair) if f["kind"] == "consumer-offset-range")
