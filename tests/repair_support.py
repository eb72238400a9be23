"""Helpers shared by the repair tests (recovery plans, apply, CLI): broker-side views of a store
computed the way the broker computes them, and byte-level snapshots of store trees."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
from pathlib import Path

from mqtool.formats.commitlog import CommitLogRecord
from mqtool.formats.errors import FormatError
from mqtool.store import Store, StoreConfig, query_offsets

ROOT = Path(__file__).resolve().parent.parent


def fixture_config(manifest_doc: dict) -> StoreConfig:
    """The broker configuration a fixture was written with (its manifest's storeConfig)."""
    c = manifest_doc["storeConfig"]
    return StoreConfig(
        commitlog_file_size=c["mappedFileSizeCommitLog"],
        consume_queue_file_size=c["mappedFileSizeConsumeQueue"],
        hash_slot_num=c["maxHashSlotNum"],
        index_num=c["maxIndexNum"],
    )


def broker_query(store: Store, topic: str, key: str, end: int) -> list[int]:
    """``DefaultMessageStore.queryMessage``: IndexService.queryOffset (newest file first, at most
    64), offsets sorted, those the commit log cannot serve dropped; collisions kept."""
    out = []
    for offset in sorted(query_offsets(store.index_files, topic, key)):
        if offset >= end:
            continue
        try:
            record = store.commitlog.read_record(offset)
        except (FormatError, LookupError):
            continue
        if isinstance(record, CommitLogRecord):
            out.append(offset)
    return out


def queue_view(store: Store) -> dict[tuple[str, int], tuple[int, int]]:
    """Per queue (min offset, max offset) as the broker computes them at load (§5.7, §5.9)."""
    v5 = store.version is not None and store.version.major >= 5
    view = {}
    for q in store.consume_queues:
        r = q.recover()
        view[(q.topic, q.queue_id)] = (q.corrected_min_offset(store.commitlog.min_offset, r.end, v5=v5), r.max_offset)
    return view


def queue_entries(store: Store, topic: str, queue_id: int, lo: int, hi: int) -> list[tuple[int, int, int, int]]:
    entries = []
    for e in store.consume_queue(topic, queue_id).entries(lo):
        if e.queue_offset >= hi:
            break
        entries.append((e.queue_offset, e.phys_offset, e.size, e.tags_code))
    return entries


def tree(root: Path, but: tuple[str, ...] = (), links: bool = False) -> dict[str, str]:
    """sha1 of every file under ``root`` (the byte-level state of a store) but those named in ``but``. ``links``: a
    symlink also by its target path (a linked folder's files by their bytes), an empty folder and a special file (a
    FIFO: never opened) by their type (the damage oracle's layout faults)."""
    root, found = Path(root), {}
    if not links:
        return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file() and p.name not in but}
    for folder, dirs, files in os.walk(root, followlinks=True):
        for name in dirs + files:
            p = Path(folder, name)
            rel, mode = str(p.relative_to(root)), p.lstat().st_mode
            if name in but:
                continue
            if stat.S_ISLNK(mode):
                found[rel + " ->"] = os.readlink(p)
                mode = p.stat().st_mode if p.exists() else mode
            if stat.S_ISREG(mode):
                found[rel] = hashlib.sha1(p.read_bytes()).hexdigest()
            elif stat.S_ISDIR(mode) and not any(p.iterdir()):
                found[rel] = "empty folder"
            elif not stat.S_ISDIR(mode) and not stat.S_ISLNK(mode):
                found[rel] = f"special file {stat.S_IFMT(mode):o}"
    return dict(sorted(found.items()))


def mqtool(*args: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Run the CLI in a subprocess (as a user would): for the tests of the process itself (a kill, a signal)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "mqtool", *map(str, args)], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=ROOT)


class Hang(BaseException):
    """A ``cli`` command still running after its ``timeout`` (raised in it by SIGALRM; not an ``Exception``,
    which the CLI would report as an internal error)."""


def cli(*args, env: dict | None = None, timeout: int | None = None) -> subprocess.CompletedProcess:
    """``mqtool ARGS`` in this process (typer's CliRunner): the exit code, stdout and stderr ``mqtool()`` gives,
    without a process's start-up and imports (a tenth of a second a command), for the tests not about the process.
    An exception the CLI lets out is raised, not an exit code; ``timeout``: ``Hang`` after that many seconds."""
    import signal
    import threading

    from typer.testing import CliRunner

    from mqtool.cli import app

    def hang(signum, frame):
        raise Hang(f"mqtool {args[0]}: no answer in {timeout} s")

    alarm = timeout is not None and threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGALRM, hang) if alarm else None
    if alarm:
        signal.alarm(timeout)
    try:
        result = CliRunner().invoke(app, [str(a) for a in args], env=env, catch_exceptions=False)
    finally:
        if alarm:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def put_time_delay_tags(version: str, topic: str) -> bool:
    """Rules file §2.15: the 3.2.6 master writes a SCHEDULE_TOPIC_XXXX entry's tags code at put time
    from the clock read before the put lock, not from the record's STORETIMESTAMP, so the broker's
    delivery time can be a few ms off what any reader or rebuild computes from the record."""
    from mqtool.formats.dispatch import SCHEDULE_TOPIC
    from mqtool.store.rules import BrokerVersion, VersionRules

    return topic == SCHEDULE_TOPIC and VersionRules(BrokerVersion.parse(version)).delay_tags_from_pre_lock_time


def assert_tags_code(version: str, topic: str, found: int, broker: int) -> None:
    """``found`` is the broker's tags code, or (§2.15, 3.2.6 delay entries) within 1 s of it: 1-3 ms on the fixture."""
    if put_time_delay_tags(version, topic):
        assert abs(found - broker) <= 1000, (found, broker)
    else:
        assert found == broker


class Killed(BaseException):
    """A process killed at a durability point (``every_kill_point``)."""


def every_kill_point(monkeypatch, tmp_path: Path, fresh, plan_of, original: dict, final: dict, state=tree, step: int = 1) -> int:
    """Apply ``plan_of(store)`` to a ``fresh(name)`` copy killed at its first, second, ... durability point
    (``step``: at every step-th, from the first) until an apply runs through; each killed one is then undone
    (``restore``: ``original`` back) or finished (``resume_pending``, as the same command again does: ``final``),
    in turn, as ``state(store)`` tells (``tree``: the store's files). Returns the points reached."""
    import mqtool.apply.executor as executor
    from mqtool.apply import BackupSet, apply_plan, read_pending, restore, resume_pending

    point, killed = 1 - step, 0
    while True:
        point += step
        store_dir = fresh(f"s{point}")
        plan = plan_of(store_dir)
        calls = {"n": 0}

        def die(label, target=point):
            calls["n"] += 1
            if calls["n"] == target:
                raise Killed(label)

        monkeypatch.setattr(executor, "durability_point", die)
        try:
            apply_plan(plan, tmp_path / f"b{point}")
        except Killed:
            pass
        else:
            monkeypatch.setattr(executor, "durability_point", lambda label: None)  # for the caller's applies after
            return point  # every point has been exercised
        monkeypatch.setattr(executor, "durability_point", lambda label: None)
        assert read_pending(store_dir) is not None
        killed += 1
        if killed % 2:  # undo the half-done apply
            restore(BackupSet.open(tmp_path / f"b{point}"))
            assert state(store_dir) == original
        else:  # finish it, as re-running the command does
            resume_pending(store_dir)
            assert state(store_dir) == final


def index_rebuild_rewrites_every_file(monkeypatch) -> None:
    """``rebuild-index`` planned to rewrite every index file, as before it left alone those already holding its bytes
    (``OriginalFiles.holds`` says no file does): for tests in which it stands for any later apply that rewrites the
    index file an earlier apply (a recover) wrote, whose rebuild is those very bytes."""
    from mqtool.store.originals import OriginalFiles

    monkeypatch.setattr(OriginalFiles, "holds", lambda self, path, position, data: False)


def damage_index_entry(root: Path, number: int = 7) -> Path:
    """One bit of entry ``number``'s phy offset flipped in the store's first index file (fixture geometry, 1000 slots): a
    file ``rebuild-index`` rewrites, the others it leaves alone."""
    from mqtool.formats import index as ixfmt

    first = sorted((root / "index").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[ixfmt.entry_position(1000, number) + 5] ^= 0x01
    first.write_bytes(data)
    return first
