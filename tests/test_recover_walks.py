"""``recover``'s plan (without --yes) on a crashed store walks its commit log once for the plan (the recovery scan,
``recover._scan``) and once for what ``verify`` still reports after it (``verify_after``), which walks on from where the plan's
walk stopped (``walkedchain``). The next start's stall in that verify (``lmq.stall_throw``: a record whose dispatch throws in
the range the next start re-dispatches) is read off the plan's recovery scan, which dispatched every record of that range; it
scanned the log a third time. Where verify runs every check, the cq check's stall takes that one. The plans are those the
scans give."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import mqtool.recovery.repair as repair
import mqtool.verify.verification as verification
from conftest import ALL_VERSIONS, copy_store, without_timings
from mqtool.cli import app
from test_recovery_verify_after import lose_queues_and_index

LMQ_DISPATCH = [v for v in ALL_VERSIONS if tuple(map(int, v.split("."))) >= (4, 9, 3)]  # a stall to scan for (LMQ's dispatch, rules §3.12)
# without --broker-version: the stores whose candidates plan alike (4.9.x's plan apart: its delay quirk, its LMQ rule)
CASES = [(v, True) for v in LMQ_DISPATCH] + [(v, False) for v in LMQ_DISPATCH if not v.startswith("4.")]


def _plan(root, *args) -> tuple[int, object, str]:
    result = CliRunner().invoke(app, ["recover", str(root), "--format", "json", *args])
    return result.exit_code, without_timings(result.stdout), result.stderr


def _plan_scanning_for_throws(root, monkeypatch, *args) -> tuple[int, str, str]:
    """``_plan`` with the stall scan always run (the plan's recovery scan not offered to ``verify_after``)."""
    with monkeypatch.context() as m:
        m.setattr(repair, "plan_dispatched", lambda store, walked: None, raising=False)
        return _plan(root, *args)


@pytest.mark.parametrize("version,given", CASES, ids=[f"{v}-{'given' if g else 'candidates'}" for v, g in CASES])
def test_a_crashed_stores_plan_walks_its_log_twice(version, given, tmp_path, log_walk_starts, monkeypatch):
    """The bench's crashed copy (no consume queues, no index, a zeroed checkpoint, an abort file): the recovery scan, verify's
    walk on past it, and no stall scan; the plan is byte for byte the one the scan gives. Without --broker-version each
    candidate's plan scans (``candidates``: a store this small shares no scan), and verify still does not."""
    root = lose_queues_and_index(copy_store(version, "crashed-small", tmp_path))
    args = ("--broker-version", version) if given else ()
    planned = _plan(root, *args)
    assert planned[0] == 4 and "refused without --yes" in planned[2]  # the plan, shown
    scans = log_walk_starts.count("_walk")
    assert log_walk_starts == ["_walk"] * scans + ["analyze_segment"] and (scans == 1 or not given)
    log_walk_starts.clear()
    assert _plan_scanning_for_throws(root, monkeypatch, *args) == planned
    assert log_walk_starts == ["_walk"] * scans + ["analyze_segment", "_walk"]


def test_where_records_may_throw_the_next_starts_stall_is_still_scanned_for(tmp_path, log_walk_starts, monkeypatch):
    """An LMQ store (records with INNER_MULTI_DISPATCH) made the bench's crashed copy: the plan's scan saw records that may
    throw in the range the next start re-dispatches, so the stall scan runs as before, with the same plan."""
    root = lose_queues_and_index(copy_store("5.3.3", "lmq-small", tmp_path))
    planned = _plan(root)
    assert planned[0] == 4 and "refused without --yes" in planned[2]
    assert log_walk_starts == ["_walk", "analyze_segment", "_walk"]
    assert _plan_scanning_for_throws(root, monkeypatch) == planned


def test_where_records_may_throw_the_entries_the_next_start_rebuilds_take_its_stall(tmp_path, log_walk_starts, monkeypatch):
    """That LMQ store with the broker's multi-dispatch on (its broker.conf given): ``verify_after`` runs every check, and the cq
    check's stall (the entries the next start rebuilds, ``ConsumeQueueCheck.stall``) scanned the log a fourth time, to the end
    the next start's stall was scanned to; it now takes that one (``Verification.settled_stall``), with the same plan."""
    root = lose_queues_and_index(copy_store("5.3.3", "lmq-small", tmp_path))
    config = tmp_path / "broker.conf"
    config.write_text("enableMultiDispatch=true\n")
    planned = _plan(root, "--broker-config", config)
    assert planned[0] == 4 and "refused without --yes" in planned[2]
    assert log_walk_starts == ["_walk", "analyze_segment", "_walk"]
    log_walk_starts.clear()
    with monkeypatch.context() as m:
        m.setattr(verification.Verification, "stalled_at", property(lambda self: None, lambda self, value: None), raising=False)
        assert _plan(root, "--broker-config", config) == planned
    assert log_walk_starts == ["_walk", "analyze_segment", "_walk", "_walk"]
