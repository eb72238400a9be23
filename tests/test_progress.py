"""Progress of the long work (``mqtool/activity.py``): the plans' commit log scans and the verify a
recovery plan runs report the bytes they walk, an apply the batches it writes, a backup copied to another
file system and a restore the bytes they copy; the modifying commands draw them as bars on a terminal."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT, copy_store, stderr_on_a_terminal, store_path

from mqtool import activity
from mqtool.cli.progress import StageProgress
from mqtool.recovery import repair as rp
from mqtool.recovery.planners import PlanOptions, plan_rebuild_cq, plan_recover
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions


class Heard(list):
    """Every report, as (stage, delta, total)."""

    def __call__(self, stage: str, delta: int, total: int) -> None:
        self.append((stage, delta, total))

    def passes(self, stage: str) -> list[list[tuple[int, int]]]:
        """The scans of ``stage``, each a list of (delta, total), split where one begins (delta 0)."""
        out: list[list[tuple[int, int]]] = []
        for name, delta, total in self:
            if name != stage:
                continue
            if delta == 0 or not out:
                out.append([])
            out[-1].append((delta, total))
        return out


@pytest.mark.parametrize("version", ["3.2.6", "4.4.0", "4.9.7", "5.3.3"])
def test_a_recovery_plan_reports_its_scan_and_its_verify(version):
    heard = Heard()
    with Store.open(store_path(version, "crashed-small")) as store, activity.listening(heard):
        plan = rp.plan_with_verify_after(store, lambda walked: plan_recover(store, PlanOptions(mode="abnormal"), walked=walked))
    scans = heard.passes("recovery scan")
    assert scans, heard
    first = scans[0]
    cl = plan.commitlog
    assert first[0] == (0, store.commitlog.end_of_writes() - cl.scan_from)  # begun with its total
    assert sum(d for d, _ in first) == cl.valid_end - cl.scan_from  # and walked to the valid end
    assert heard.passes("verify commitlog")  # the verify after the plan (``verify_after``)
    for stage in ("verify commitlog", "verify cross-check"):
        for walk in heard.passes(stage):
            assert all(d > 0 for d, _ in walk) and sum(d for d, _ in walk) <= walk[0][1]


def test_each_candidate_versions_scan_begins_a_bar_of_its_own():
    """4.4.0's store is planned under several broker versions: each scan begins again at 0."""
    heard = Heard()
    with Store.open(store_path("4.4.0", "crashed-small")) as store, activity.listening(heard):
        assert store.version_guess.version is None
        plan_rebuild_cq(store, PlanOptions())
    scans = heard.passes("recovery scan")
    assert len(scans) >= 2 and all(walk[0][0] == 0 for walk in scans)
    totals = {walk[0][1] for walk in scans}
    assert all(sum(d for d, _ in walk) <= walk[0][1] for walk in scans) and len(totals) == 1


def test_nothing_is_reported_when_nobody_listens():
    assert activity.listener() is None and activity.reporter("recovery scan", 0, 10) is None
    heard = Heard()
    with activity.listening(heard):
        activity.listener("verify ")("commitlog", 5, 10)
        reached = activity.reporter("dispatch", 100, 300)
        reached(150)
        reached(150)  # nothing new
        reached(300)
    assert heard == [("verify commitlog", 5, 10), ("dispatch", 0, 200), ("dispatch", 50, 200), ("dispatch", 150, 200)]
    assert activity.listener() is None


@pytest.mark.parametrize("name", ["dledger-crashed", "dledger-small"])
def test_verify_of_a_dledger_log_reports_the_bytes_walked_since_its_last_report(name):
    """Before: each report was the bytes walked since the start, so a log of two data files drew
    its bar past its total (1,287,869 bytes walked, 2,335,546 reported, on 4.9.7 dledger-crashed)."""
    heard = Heard()
    with Store.open(store_path("4.9.7", name)) as store:
        run = Verification(store, VerifyOptions(checks=("commitlog",)), heard)
        list(run.findings())
        assert len(store.commitlog.segments) == 2
    assert len(heard) >= 2
    total = heard[0][2]
    assert sum(d for _, d, _ in heard) == run.commitlog.logical_end - store.commitlog.min_offset <= total


def test_stage_progress_starts_a_bar_when_the_stage_changes_or_begins_again():
    bars = StageProgress(enabled=False)
    bars("recovery scan", 0, 100)
    bars("recovery scan", 60, 100)
    assert (bars.stage, bars.done) == ("recovery scan", 60)
    bars("recovery scan", 0, 100)  # the next candidate's scan
    assert bars.done == 0
    bars("verify commitlog", 30, 200)
    assert (bars.stage, bars.done) == ("verify commitlog", 30)
    bars.close()
    assert bars.bar is None


def test_recover_draws_its_scans_on_the_terminal(tmp_path):
    """Before: `recover` printed nothing while it planned (on a large store, minutes of silence)."""
    store = copy_store("5.3.3", "crashed-small", tmp_path)
    shown, out = stderr_on_a_terminal(["recover", store, "--dry-run"], stdout_file=tmp_path / "plan.txt")
    assert "recovery scan:" in shown and "verify commitlog:" in shown and "B/s" in shown
    assert out.startswith("Plan: recover")
    assert "%|" not in stderr_on_a_terminal(["recover", store, "--dry-run", "-q"], stdout_file=tmp_path / "plan.txt")[0]
    assert "%|" not in stderr_on_a_terminal(["recover", store, "--dry-run"])[0]  # stdout into a pipe


def test_restore_reports_the_bytes_it_puts_back(tmp_path):
    """Before: `restore` put whole segments back (gigabytes, after a recovery that deleted them)
    with nothing on the terminal. Its bar counts every byte of the files and ranges it restores."""
    import hashlib

    from mqtool.apply import BackupSet, restore

    store = copy_store("4.9.7", "crashed-small", tmp_path)
    before = {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in store.rglob("*") if p.is_file()}
    backup = tmp_path / "backup"
    done = subprocess.run([sys.executable, "-m", "mqtool", "recover", str(store), "--yes", "-q", "--backup-dir", str(backup)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    heard = Heard()
    with activity.listening(heard):
        result = restore(BackupSet.open(backup))
    walk = heard.passes("restore")
    assert len(walk) == 1 and walk[0][0][0] == 0
    files = [BackupSet.open(backup).file_copy(rel).stat().st_size for rel in result["restored"] if "[" not in rel]
    ranges = [int(end) - int(start) for rel in result["restored"] if "[" in rel for start, end in [rel.rstrip("]").split("[")[1].split(":")]]
    assert sum(d for d, _ in walk[0]) == walk[0][0][1] == sum(files) + sum(ranges) > 0
    assert {p: hashlib.sha1(p.read_bytes()).hexdigest() for p in store.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("cached", [True, False])
def test_the_apply_reports_the_dispatch_it_writes(cached, tmp_path):
    """The queue and index files an apply writes come from the plan's own batches (no scan to report
    them: a bar of their own) or from a scan of the phase again (the scan's bar): either way each
    phase is reported once, to where its records end."""
    from mqtool.apply import apply_plan
    from mqtool.dispatch.scanner import DispatchCache

    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    cache = DispatchCache() if cached else None
    with Store.open(store_dir) as store:
        plan = plan_recover(store, cache=cache)
    heard = Heard()
    with activity.listening(heard):
        apply_plan(plan, tmp_path / "backup", cache=cache)
    stage = "writing queues and index" if cached else "recovery scan"
    walks = heard.passes(stage)
    assert len(walks) == len([p for p in plan.dispatch if p.consume_queues or p.index]) == 1
    assert {name for name, _, _ in heard} == {stage}
    assert sum(d for d, _ in walks[0]) == plan.commitlog.valid_end - plan.dispatch[0].start


def test_a_backup_copied_to_another_file_system_reports_its_bytes(tmp_path, monkeypatch):
    """A backup on the store's file system is hard links (nothing to show); on another one (`--backup-dir`
    on a second disk when the store's is full) whole segments are copied: a bar of their bytes."""
    import errno

    from mqtool import fileops
    from mqtool.apply import BackupSet, apply_plan

    store_dir = copy_store("4.9.7", "crashed-small", tmp_path)
    with Store.open(store_dir) as store:
        plan = plan_recover(store)
    heard = Heard()
    with monkeypatch.context() as m, activity.listening(heard):
        m.setattr(fileops.os, "link", lambda src, dst: (_ for _ in ()).throw(OSError(errno.EXDEV, "Invalid cross-device link")))
        backup = apply_plan(plan, tmp_path / "backup")
    walks = heard.passes("backup")
    copies = [ev for ev in BackupSet.open(tmp_path / "backup").journal.events() if ev.get("ev") == "backup-file"]
    assert copies and all(ev["how"] == "copy" for ev in copies)
    assert sum(d for walk in walks for d, _ in walk) == sum(ev["size"] for ev in copies) > 0
    assert all(sum(d for d, _ in walk) <= walk[0][1] for walk in walks)
    assert backup.summary()["files"]
