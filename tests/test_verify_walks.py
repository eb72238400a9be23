"""Issue #29: a full ``verify`` walks the commit log once. The commit log check's walk (``CommitLogCheck``, or a DLedger log's
``DLedgerLogCheck``) feeds the cq and index checks (``sharedwalk.SharedWalk``), the timer check, and what the LMQ and batch
consume queue checks hold their queues against (``Verification._riders``); the findings are those of the checks walking
alone (``verification.SHARE_WALK`` off)."""

from __future__ import annotations

import pytest

import mqtool.verify.verification as verification
from conftest import ALL_VERSIONS, store_path
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions

DLEDGER = [("4.9.7", "dledger-small"), ("4.9.7", "dledger-crashed"), ("5.3.3", "dledger-small"), ("5.3.3", "dledger-crashed"),
           ("5.3.3", "dledger-crashed-cqloss")]


def _verify(root, checks=None) -> tuple[list[dict], dict, bool]:
    with Store.open(root) as store:
        run = Verification(store, VerifyOptions(checks=checks) if checks else VerifyOptions())
        findings = [f.as_dict() for f in run.findings()]
        summary = run.summary.as_dict()
    return findings, {k: v for k, v in summary.items() if k not in ("elapsed_s", "throughput_bytes_per_s")}, run.cross_checks_shared


@pytest.mark.parametrize("version,name", [("4.9.7", "dledger-small"), ("5.3.3", "dledger-small")])
def test_a_dledger_stores_verify_walks_its_log_once(version, name, log_walk_starts):
    """Before, the DLedger check walked the data files and the cq and index checks walked the log again (``LogStream``):
    two walks from the first file. Now the DLedger check's walk of each file feeds them inline (``SharedWalk.entry_rows``)."""
    findings, summary, shared = _verify(store_path(version, name))
    assert log_walk_starts == ["analyze_data_file"]
    assert shared
    assert summary["consume_queues"]["entries"] > 0 and summary["index"]["entries"] > 0


def test_an_lmq_stores_verify_walks_its_log_once(log_walk_starts):
    """Before, the LMQ check walked the log on its own (``MessageScan`` over a ``LogStream``) after the commit log check's
    walk; now what the LMQ queues are owed rides the cq check's walk (``lmq.LmqExpected``)."""
    findings, summary, shared = _verify(store_path("5.3.3", "lmq-small"))
    assert log_walk_starts == ["analyze_segment"]
    assert shared and findings == []
    assert summary["notes"] == ["6 LMQ queue(s) checked against the records' INNER_MULTI_DISPATCH, 323 entries"]


@pytest.mark.parametrize("checks", [None, ("cq",), ("commitlog", "timer"), ("cq", "index")], ids=["full", "cq", "commitlog,timer", "cq,index"])
@pytest.mark.parametrize("version,name", [*DLEDGER, ("5.3.3", "lmq-small")])
def test_the_shared_walk_finds_what_the_checks_walking_alone_find(version, name, checks, monkeypatch):
    """The findings, their order and the summary of each check reading the one walk equal those of each walking the log
    itself; on damage DLedger's recovery keeps (the walk goes on past it, ``SharedWalk.entry_end``) the cross-checks walk
    again, as before."""
    root = store_path(version, name)
    shared = _verify(root, checks)
    monkeypatch.setattr(verification, "SHARE_WALK", False)
    alone = _verify(root, checks)
    assert shared[:2] == alone[:2]
    assert not alone[2]


def test_past_a_damaged_record_dledger_keeps_the_cross_checks_walk_again(store_copy, monkeypatch):
    """A record inside a sound entry damaged (its TOTALSIZE one more): DLedger's recovery keeps the entry and the log after
    it, and ``LogStream`` walks on from the next entry, its batches sized anew. The shared walk does not follow that
    (``SharedWalk.entry_end``): the cross-checks walk again, and the findings are those of the checks walking alone."""
    from conftest import manifest

    e = manifest("5.3.3", "dledger-small")["messages"][300]["dledgerEntry"]
    root = store_copy("5.3.3", "dledger-small")
    with open(root / "dledger-n0" / e["file"], "r+b") as f:
        f.seek(e["filePosition"] + 48)
        f.write((e["bodySize"] + 1).to_bytes(4, "big"))
    shared = _verify(root)
    assert not shared[2]
    assert [f["kind"] for f in shared[0] if f["kind"].startswith("dledger-record")] == ["dledger-record"]
    monkeypatch.setattr(verification, "SHARE_WALK", False)
    assert _verify(root)[:2] == shared[:2]


def _verify_scanning_for_throws(root, monkeypatch) -> tuple[list[dict], dict]:
    """``_verify`` with the stall scan ``lmq.stall_throw`` always run (the shared walk's dispatch not offered)."""
    from mqtool.verify.sharedwalk import SharedWalk

    with monkeypatch.context() as m:
        m.setattr(SharedWalk, "stood", property(lambda self: None, lambda self, value: None), raising=False)  # nothing offered
        return _verify(root)[:2]


@pytest.mark.parametrize("version", [v for v in ALL_VERSIONS if tuple(map(int, v.split("."))) >= (4, 9, 2)])  # LMQ's dispatch
def test_a_crashed_stores_verify_walks_its_log_once(version, log_walk_starts, monkeypatch):
    """Before, where the next start re-dispatches (an abort file), saying where it stops (``lmq.stall_throw``: a record whose
    dispatch throws) scanned the log again from where it re-dispatches (``DispatchScanner._walk``), after the walk had
    dispatched every record. Now the walk's dispatch says that no record there can throw (none with multi-dispatch
    properties, none without properties): no scan, and the findings and the summary's next start are those the scan gives."""
    root = store_path(version, "crashed-small")
    findings, summary, shared = _verify(root)
    assert log_walk_starts == ["analyze_segment"] and shared
    log_walk_starts.clear()
    assert _verify_scanning_for_throws(root, monkeypatch) == (findings, summary)
    assert log_walk_starts == ["analyze_segment", "_walk"]


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_entries_the_next_start_rebuilds_are_said_without_a_second_walk(version, store_copy, log_walk_starts, monkeypatch):
    """A crashed store whose queue directory is lost: the cq check says the next start rebuilds its entries unless a record
    whose dispatch throws stops it first (``ConsumeQueueCheck.stall``), which scanned the log again; now it reads the walk's
    dispatch too, with the same findings."""
    import shutil

    root = store_copy(version, "crashed-small")
    shutil.rmtree(root / "consumequeue" / "TopicTest" / "0")
    findings, summary, shared = _verify(root)
    assert log_walk_starts == ["analyze_segment"] and shared
    missing = [f for f in findings if f["kind"] == "cq-entry-missing"]
    assert len(missing) == 1 and "will rebuild them on its next start" in missing[0]["message"]
    assert _verify_scanning_for_throws(root, monkeypatch) == (findings, summary)


def test_where_records_may_throw_the_next_starts_stall_is_still_scanned_for(store_copy, log_walk_starts, monkeypatch):
    """An LMQ store (records with INNER_MULTI_DISPATCH) made crashed by an abort file: the walk's dispatch saw records that may
    throw in the range the next start re-dispatches, so the stall scan runs as before, with the same findings."""
    root = store_copy("5.3.3", "lmq-small")
    (root / "abort").write_bytes(b"")
    findings, summary, shared = _verify(root)
    assert log_walk_starts == ["analyze_segment", "_walk"] and shared
    assert _verify_scanning_for_throws(root, monkeypatch) == (findings, summary)


def _verify_scanning_for_the_cq_checks_stall(root, monkeypatch) -> tuple[list[dict], dict]:
    """``_verify`` with the cq check's stall (``ConsumeQueueCheck.stall``) scanned for anew, not taken from the next start's."""
    with monkeypatch.context() as m:
        m.setattr(verification.Verification, "stalled_at", property(lambda self: None, lambda self, value: None), raising=False)
        return _verify(root)[:2]


def test_entries_the_next_start_rebuilds_past_records_that_may_throw_take_its_stall(store_copy, log_walk_starts, monkeypatch):
    """An LMQ store made crashed by an abort file, one queue directory lost: where the next start stops (a record whose dispatch
    throws) was scanned for twice, to settle the next start and for the cq check's entries it rebuilds (``ConsumeQueueCheck
    .stall``), to the same end; the cq check now takes the next start's, with the same findings."""
    import shutil

    root = store_copy("5.3.3", "lmq-small")
    (root / "abort").write_bytes(b"")
    shutil.rmtree(root / "consumequeue" / "TopicTest" / "0")
    findings, summary, shared = _verify(root)
    assert log_walk_starts == ["analyze_segment", "_walk"] and shared
    missing = [f for f in findings if f["kind"] == "cq-entry-missing"]
    assert len(missing) == 1 and "will rebuild them on its next start" in missing[0]["message"]
    log_walk_starts.clear()
    assert _verify_scanning_for_the_cq_checks_stall(root, monkeypatch) == (findings, summary)
    assert log_walk_starts == ["analyze_segment", "_walk", "_walk"]
