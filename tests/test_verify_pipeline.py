"""The cross-checks' thread beside the commit log check's walk (``mqtool/handoff.py``,
``verify/sharedwalk.py``): work done in order, its failure raised in the walking thread, and no
thread left behind however the run ends. (That its findings equal the inline run's, on every
fixture and damaged copy, is held by ``test_verify_joins.py``.)"""

from __future__ import annotations

import threading

import pytest

from conftest import FIXTURES, manifest, python_lock_calls
import mqtool.verify.verification as verify_module
from mqtool.formats import commitlog as cl
from mqtool.store import Store
from mqtool import handoff
from mqtool.verify import Verification, VerifyOptions, crosscheck, logstream

STORE = FIXTURES / "rocketmq-4.9.7" / "clean-small"


def check_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("mqtool-verify")]


@pytest.fixture(autouse=True)
def two_cpus(monkeypatch):
    monkeypatch.setattr(verify_module, "usable_cpus", lambda: 2)
    yield
    assert check_threads() == []


def test_a_stage_does_its_work_in_order_and_raises_its_failure_where_items_are_put():
    done = []

    def work(item):
        if item == 7:
            raise ValueError("item 7")
        done.append(item)

    stage = handoff.Stage(work, 2, "mqtool-verify-test")
    for item in range(5):
        stage.put(item)
    stage.drain()
    assert done == list(range(5))
    with pytest.raises(ValueError, match="item 7"):
        for item in range(5, 100):
            stage.put(item)
        stage.drain()
    assert done == [0, 1, 2, 3, 4, 5, 6]  # nothing after the failure
    stage.close()
    assert not stage.thread.is_alive()


def test_items_produced_in_a_thread_come_in_order_with_the_failure_and_stop_when_left():
    made, closed = [], []

    def items(fail_at=None):
        try:
            for i in range(50):
                if i == fail_at:
                    raise ValueError(f"item {i}")
                made.append(i)
                yield i
        finally:
            closed.append(threading.current_thread().name)

    assert list(handoff.produced_in_thread(items(), "mqtool-verify-produce")) == list(range(50))
    with pytest.raises(ValueError, match="item 7"):
        list(handoff.produced_in_thread(items(fail_at=7), "mqtool-verify-produce"))
    made.clear(), closed.clear()
    consumed = handoff.produced_in_thread(items(), "mqtool-verify-produce", depth=2)
    assert [next(consumed) for _ in range(3)] == [0, 1, 2]
    consumed.close()  # left early: the thread ends and the generator's cleanup runs in it
    assert closed == ["mqtool-verify-produce"]
    assert len(made) <= 3 + 2 + 1  # no more than depth ahead (and the one in hand)


def test_the_walking_thread_waits_on_no_python_lock_a_ctrl_c_could_leave_held():
    """Before: Ctrl-C during ``verify`` hung it in about one run of ten (``Stage.close`` joined a
    checks thread waiting for an item already put). The caller waited in ``queue.Queue``, whose
    ``threading.Condition`` a KeyboardInterrupt can leave with its lock released under the other
    thread, or held; ``PagesAhead.at`` took a Condition too. The caller's side of each hand-off now
    waits only in C (``SimpleQueue.get``, ``Thread.join``), where an interrupt is all or nothing."""
    import mmap

    import numpy as np

    from mqtool.store.fastscan import PagesAhead

    stage = handoff.Stage(lambda item: sum(range(item % 500)), 1, "mqtool-verify-test")
    segment = mmap.mmap(-1, 8 * PagesAhead.STEP)
    ahead = PagesAhead(segment, np.frombuffer(segment, dtype=np.uint8), 0, len(segment))
    produced = handoff.produced_in_thread(iter(range(200)), "mqtool-verify-produce", depth=1)
    taken = [next(produced)]  # the threads started (Thread.start waits on an Event, once)
    try:
        with python_lock_calls() as entered:
            for i in range(2000):
                stage.put(i)
                stage.idle()
                ahead.at(i * 4096)
                if i % 100 == 0:
                    stage.drain()
            taken += [next(produced) for _ in range(199)]
    finally:
        produced.close()
        ahead.close()
        stage.close()
    assert taken == list(range(200))
    assert entered == set()  # no function of threading.py or queue.py: no Python-level lock


def test_verify_jobs_waits_for_the_pool_on_no_python_lock_a_ctrl_c_could_leave_held():
    """Before: ``verify --jobs 2`` took each segment's report from ``Pool.imap``'s iterator, which
    waits on a ``threading.Condition`` over a plain lock; a Ctrl-C landing in it can leave the lock
    released under the pool's result thread, or held, and the pool's ``terminate`` (the ``with``
    block's end) then joins that thread forever. The reports now come through a ``SimpleQueue``."""
    from mqtool.verify.commitlog import CommitLogCheck, segment_reports

    with Store.open(STORE) as store:
        tasks = CommitLogCheck(store, jobs=2).tasks()
        serial = [r.base for r in segment_reports(tasks, 1, None)]
        reports = segment_reports(tasks, 2, None)
        taken = [next(reports)]  # the pool started
        with python_lock_calls(("threading.py", "queue.py", "pool.py")) as entered:
            taken += [next(reports) for _ in range(len(tasks) - 1)]
        assert next(reports, None) is None  # the pool ended
    assert len(tasks) > 2 and [r.base for r in taken] == serial  # in segment order
    assert entered == set()  # no function of threading.py, queue.py or the pool's: no Python-level lock


def test_a_ctrl_c_reaching_the_pool_workers_leaves_them_to_the_parent():
    """Before: Ctrl-C during ``verify --jobs 2`` reached the pool's workers too (the terminal
    signals the whole process group): each printed "Process ForkPoolWorker-N:" and a traceback
    beside mqtool's one line, and a worker interrupted alone lost its task, so the parent waited
    for its report forever. The workers ignore SIGINT; the parent stops and terminates them."""
    import subprocess
    import sys
    import textwrap

    from conftest import ROOT

    script = textwrap.dedent(f"""
        import os, signal
        from mqtool.store import Store
        from mqtool.verify import commitlog

        analyze = commitlog.analyze_segment

        def interrupted_worker(task, *args):
            os.kill(os.getpid(), signal.SIGINT)  # as the terminal's Ctrl-C reaches every process
            return analyze(task, *args)

        commitlog.analyze_segment = interrupted_worker
        with Store.open({str(STORE)!r}) as store:
            tasks = commitlog.CommitLogCheck(store, jobs=2).tasks()
            print(len(tasks), len(list(commitlog.segment_reports(tasks, 2, None))))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    count, reports = done.stdout.split()
    assert int(count) > 2 and reports == count
    assert done.stderr == "" and done.returncode == 0


def test_a_failing_check_in_the_thread_fails_the_run_in_the_caller(monkeypatch):
    calls = []
    feed = crosscheck.CrossChecks.feed

    def failing(self, batch, columns=None):
        calls.append(threading.current_thread().name)
        if len(calls) == 3:
            raise RuntimeError("check failed")
        return feed(self, batch, columns)

    monkeypatch.setattr(crosscheck.CrossChecks, "feed", failing)
    monkeypatch.setattr(logstream, "BATCH", 64)  # many batches
    with Store.open(STORE) as store, pytest.raises(RuntimeError, match="check failed"):
        list(Verification(store, VerifyOptions()).findings())
    assert calls[:3] == ["mqtool-verify-check"] * 3


def test_a_run_stopped_early_leaves_no_thread(monkeypatch, store_copy):
    """A consumer that stops at the first finding (a CRC failure, yielded while the walk and the
    checks' thread are both under way)."""
    monkeypatch.setattr(logstream, "BATCH", 64)
    root = store_copy("4.9.7", "clean-small")
    victim = [m for m in sorted(manifest("4.9.7", "clean-small")["messages"], key=lambda m: m["commitLogOffset"]) if m["bodyLength"] > 8][100]
    segment = root / "commitlog" / f"{0:020d}"
    at = victim["commitLogOffset"] + cl.header_size(victim["sysFlag"]) + victim["bodyLength"] // 2  # a body byte
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 1]))
    with Store.open(root) as store:
        run = Verification(store, VerifyOptions())
        findings = run.findings()
        first = next(findings)
        assert (first.kind, first.offset) == ("crc-mismatch", victim["commitLogOffset"])
        assert check_threads()  # the checks' thread is at work
        findings.close()


def test_the_chains_last_batches_are_checked_while_the_next_start_is_settled(monkeypatch):
    """The walk hands its last batch over and goes on to end the commit log check and settle the
    next start while the checks finish (``SharedWalk.result`` waits for them). Before, ``end`` waited
    for them at the chain's end, the commit log check's own end after it, one core idle each time."""
    from mqtool.verify.sharedwalk import SharedWalk

    monkeypatch.setattr(logstream, "BATCH", 64)  # many batches
    messages = [m for m in manifest("4.9.7", "clean-small")["messages"] if m["putStatus"] == "PUT_OK"]
    records, queued = len(messages), sum(1 for m in messages if m["dispatchToConsumeQueue"])
    settled, last_batch_saw_it = threading.Event(), []
    settle, check = Verification._settle_next_start, SharedWalk._check

    def settle_and_say(self, walked, dispatched=None):
        settle(self, walked, dispatched)
        settled.set()

    def check_the_last_after_settling(self, batch):
        if self.outcome.records + batch[2].shape[0] == records:
            last_batch_saw_it.append(settled.wait(5))
        check(self, batch)

    monkeypatch.setattr(Verification, "_settle_next_start", settle_and_say)
    monkeypatch.setattr(SharedWalk, "_check", check_the_last_after_settling)
    with Store.open(STORE) as store:
        run = Verification(store, VerifyOptions())
        findings = list(run.findings())
    assert run.cross_checks_threaded and last_batch_saw_it == [True]
    assert findings == [] and run.summary.records == records and run.summary.consume_queue_entries == queued
