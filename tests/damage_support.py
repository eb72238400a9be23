"""Random damage to copies of the real-broker fixtures, and one damage run as a user makes it
(issue #11, #28): shared by ``tests/test_damage_random.py`` and ``bench/damage_run.py``.

A run damages a copy 1-3 times (bit flips, cut files, zeroed ranges, garbage appended, stray
files, deleted files, consume queue files cut; with ``LOST_PAGES`` and ``DISK_FAULTS`` also zeroed
tails, emptied files, misdirected pages, files grown with zeros), runs ``repair --yes`` and ``verify``, then
``mqtool restore`` of the repair's backup, and sorts the outcome: a traceback, a hang (the
per-command timeout), an undocumented exit code, a store not sound after the repair beyond the
truly lost data, a restore that does not give back the damaged copy byte for byte, or ok.
"""

from __future__ import annotations

import json
import os
import hashlib
import random
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from conftest import FIXTURES, copy_store, manifest, other_file_system
from repair_support import Hang, cli, mqtool, tree as store_tree
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_REFUSED
from mqtool.recovery.repair import expected_after, triage
from mqtool.verify import Finding, Severity

DAMAGES = ("bit-flips", "cut-file", "zeroed-range", "garbage-appended", "stray-file", "deleted-file", "cut-queue-file")
# with the pages a crash loses (``damage_run.py --lost-pages``): a file's tail, or a directory's last files, read as zeros
LOST_PAGES = DAMAGES + ("zeroed-tail",)
# the faults of a disk or a crash the others do not make (``damage_run.py --disk-faults``): a file left empty (created,
# or its data not yet flushed, when the machine stopped; half the time its directory's newest file), a page written where
# another page of the file belongs (a misdirected write: the bytes of elsewhere in the file), a file grown with zeros
DISK_FAULTS = ("emptied-file", "misdirected-page", "zero-extended")
# files cut at a random length (``damage_run.py --cut-files``): a commit log segment (any: before the last, the
# broker's recovery must still read on past it) or a consume queue file
CUT_FILES = ("cut-log-file",)
# what an operator's hands do to a store's layout (``damage_run.py --layout-faults``): a single file (checkpoint, abort,
# lock, config/timercheck, timerwheel, a config/*.json or its .bak) replaced by a directory or a FIFO; a commit log
# segment, a consume queue folder or index/ moved to another file system and linked back (half the time then cut); a
# FIFO in a queue folder or a stray folder
LAYOUT_FAULTS = ("file-replaced", "linked-elsewhere", "special-file")
DOCUMENTED = {EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_REFUSED}
# Every fixture store (each version's classic, crashed, retention, rewritten, DLedger, timer, LMQ,
# batch and real-config stores): `repair` leaves every undamaged one sound.
KINDS = tuple(sorted((d.parent.name.removeprefix("rocketmq-"), d.name) for d in FIXTURES.glob("rocketmq-*/*") if d.is_dir()))
# each command in a fresh process, as a user runs it (``bench/damage_run.py``), or in this one (the tests: the same
# exit codes and output without a process's start-up, hundreds of commands)
FRESH_PROCESS = False

def store_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != "lock" and p.stat().st_size > 0)


def damage(root: Path, rng: random.Random, kinds: tuple[str, ...] = DAMAGES) -> str:
    """Apply one random damage of ``kinds`` to the store at ``root``; returns what was done. A part of
    the store (its top directory or file: ``commitlog``, ``consumequeue``, ``dledger-n0``, ``timerlog``,
    ...) is chosen first, then a file in it: queues outnumber the rest."""
    kind = rng.choice(kinds)
    if kind in LAYOUT_FAULTS:
        return layout_fault(root, rng, kind)
    files = store_files(root)
    if kind == "cut-queue-file":
        files = [p for p in files if p.relative_to(root).parts[0] == "consumequeue"] or files
    if kind == "cut-log-file":
        files = [p for p in files if p.relative_to(root).parts[0] in ("commitlog", "consumequeue")] or files
    if kind == "misdirected-page":
        files = [p for p in files if p.stat().st_size >= 2 * 4096] or files
    part = rng.choice(sorted({p.relative_to(root).parts[0] for p in files}))
    target = rng.choice([p for p in files if p.relative_to(root).parts[0] == part])
    rel = target.relative_to(root)
    size = target.stat().st_size
    data = bytearray(target.read_bytes())
    if kind == "bit-flips":
        n = rng.randint(1, 8)
        for _ in range(n):
            pos = rng.randrange(min(size, rng.choice([64, 4096, size])))
            data[pos] ^= 1 << rng.randrange(8)
        target.write_bytes(data)
        return f"{n} bit flips in {rel}"
    if kind in ("cut-file", "cut-queue-file", "cut-log-file"):
        cut = rng.randrange(size)
        if kind == "cut-queue-file" and rng.random() < 0.5:
            cut -= cut % 20  # at an entry boundary, as a file system losing its last pages does
        target.write_bytes(data[:cut])
        return f"{rel} cut to {cut} bytes"
    if kind == "zeroed-range":
        start = rng.randrange(size)
        end = min(size, start + rng.choice([8, 100, 4096, 65536]))
        data[start:end] = bytes(end - start)
        target.write_bytes(data)
        return f"{rel} zeroed [{start}, {end})"
    if kind == "zeroed-tail":  # the file keeps its length, its last pages read zeros; half the time its directory's later files too
        start = rng.randrange(size)
        target.write_bytes(bytes(data[:start]) + bytes(size - start))
        later = [p for p in files if p.parent == target.parent and p.name > target.name] if rng.random() < 0.5 else []
        for p in later:
            p.write_bytes(bytes(p.stat().st_size))
        return f"{rel} zeroed from {start} to its end" + (f", and the {len(later)} later files of its directory" if later else "")
    if kind == "emptied-file":
        if rng.random() < 0.5:
            target = max(p for p in files if p.parent == target.parent)
            rel = target.relative_to(root)
        target.write_bytes(b"")
        return f"{rel} left empty"
    if kind == "misdirected-page":
        page = 4096 if size >= 2 * 4096 else max(1, size // 2)
        src, dst = rng.sample(range(size // page), 2) if size // page >= 2 else (0, 0)
        data[dst * page : dst * page + page] = data[src * page : src * page + page]
        target.write_bytes(data)
        return f"page {src} of {rel} written over its page {dst} ({page} bytes)"
    if kind == "zero-extended":
        n = rng.choice([4096, size, rng.randrange(1, size + 1)])
        target.write_bytes(bytes(data) + bytes(n))
        return f"{rel} grown by {n} zero bytes"
    if kind == "garbage-appended":
        n = rng.choice([1, 20, 1000, 5000])
        target.write_bytes(bytes(data) + rng.randbytes(n))
        return f"{n} garbage bytes appended to {rel}"
    if kind == "stray-file":
        where = rng.choice([d for d in (root / "commitlog", root / "index") if d.is_dir()] + [target.parent])
        stray = where / rng.choice(["core.1234", "00000000000000000000.tmp", "README", ".nfs0001"])
        stray.write_bytes(rng.randbytes(rng.choice([0, 10, 4096])))
        return f"stray file {stray.relative_to(root)}"
    target.unlink()
    return f"{rel} deleted"


def second_disk(root: Path) -> Path:
    """The folder on another file system (``conftest.other_file_system``) that ``layout_fault`` moves ``root``'s parts to."""
    return Path(other_file_system(root) or root.parent) / f"mqtool-second-disk-{hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]}"


def layout_fault(root: Path, rng: random.Random, kind: str) -> str:
    """One ``LAYOUT_FAULTS`` damage to the store at ``root``; returns what was done. Never opens a FIFO."""
    if kind == "file-replaced":
        names = ["checkpoint", "abort", "lock", "config/timercheck", "timerwheel"]
        names += sorted(str(p.relative_to(root)) for p in (root / "config").glob("*.json*") if p.is_file())
        rel = rng.choice([n for n in names if (root / n).is_file()] + ["abort", "lock"])
        target = root / rel
        if target.is_dir() and not target.is_symlink():  # an earlier fault of this copy replaced it by a directory
            return f"{rel} left a directory"
        target.unlink(missing_ok=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        if rng.random() < 0.5:
            os.mkfifo(target)
            return f"{rel} replaced by a FIFO"
        target.mkdir()
        if rng.random() < 0.5:
            (target / "copy").write_bytes(rng.randbytes(20))
        return f"{rel} replaced by a directory"
    if kind == "linked-elsewhere":
        parts = [p for p in store_files(root) if p.relative_to(root).parts[0] == "commitlog" and p.parent == root / "commitlog"]
        parts += [p for p in (root / "consumequeue").glob("*/*") if p.is_dir() and not p.is_symlink()]
        parts += [root / "index"] if (root / "index").is_dir() and not (root / "index").is_symlink() else []
        parts = [p for p in parts if not p.is_symlink()]
        if not parts:
            return "nothing to link elsewhere"
        target = rng.choice(parts)
        rel = target.relative_to(root)
        moved = second_disk(root) / str(rel).replace("/", "_")
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(target, moved)
        target.symlink_to(moved, target_is_directory=moved.is_dir())
        files = sorted(p for p in ([moved] if moved.is_file() else moved.rglob("*")) if p.is_file() and p.stat().st_size)
        if files and rng.random() < 0.5:
            cut_one = rng.choice(files)
            cut = rng.randrange(cut_one.stat().st_size)
            os.truncate(cut_one, cut)
            return f"{rel} moved to another file system and linked back, {cut_one.name} there cut to {cut} bytes"
        return f"{rel} moved to another file system and linked back"
    queues = [p for p in (root / "consumequeue").glob("*/*") if p.is_dir()]
    if queues and rng.random() < 0.5:
        where = rng.choice(queues)
    else:
        where = rng.choice([d for d in (root, root / "commitlog", root / "consumequeue", root / "index") if d.is_dir()]) / "old"
        where.mkdir(exist_ok=True)
    fifo = where / rng.choice(["fifo", "00000000000000000000", "core.pipe"])
    if fifo.exists() or fifo.is_symlink():
        fifo = where / "pipe"
    os.mkfifo(fifo)
    return f"FIFO {fifo.relative_to(root)}"


def damage_copy(version: str, name: str, seed: int, dest: Path, kinds: tuple[str, ...] = DAMAGES) -> tuple[Path, list[str]]:
    """A copy of fixture ``version/name`` under ``dest`` with 1-3 random damages of ``kinds`` drawn from ``seed``."""
    rng = random.Random(seed)
    root = copy_store(version, name, dest)
    return root, [damage(root, rng, kinds) for _ in range(rng.randint(1, 3))]


def first_damage(pristine: Path, damaged: Path) -> int | None:
    """The first commit log offset (classic segments or DLedger data files) whose byte the damage
    changed: a file deleted or cut short counts from where its bytes are gone. None: the log is whole."""
    from mqtool.store import Store

    with Store.open(pristine) as store:
        segments = [(seg.base_offset, seg.path.relative_to(pristine)) for seg in store.commitlog.segments]
    for base, rel in segments:
        if not (damaged / rel).is_file():  # deleted, or a folder or FIFO now (never opened)
            return base
        a, b = (pristine / rel).read_bytes(), (damaged / rel).read_bytes()
        n = min(len(a), len(b))
        if a[:n] != b[:n]:
            page = 0
            while a[page : page + 4096] == b[page : page + 4096]:
                page += 4096
            return base + next(i for i in range(page, min(page + 4096, n)) if a[i] != b[i])
        if n < len(a):
            return base + n
    return None


def survivors(root: Path, version: str, ids: list[str], dest: Path) -> dict[str, tuple]:
    """``mqtool survivors`` of these UNIQ_KEYs: id -> (status, queue id, queue offset)."""
    ids_file = dest / "ids.txt"
    ids_file.write_text("".join(f"{i}\n" for i in ids))
    _, stdout, _ = run("survivors", root, ids_file, "--by", "uniq-key", "--format", "jsonl", "--broker-version", version, timeout=120)
    return {d["id"]: (d["status"], d.get("queue_id"), d.get("queue_offset")) for d in map(json.loads, stdout.splitlines()) if "id" in d}


def kept_messages(messages: list[dict], cut: int | None) -> list[str]:
    """The UNIQ_KEYs of the messages wholly before ``cut`` (None: all), each written once: an id with
    another copy (a batch's, a retry's) may count that copy, after the cut."""
    copies = Counter(m.get("uniqKey") for m in messages)
    return [m["uniqKey"] for m in messages if m.get("uniqKey") and copies[m["uniqKey"]] == 1 and (cut is None or m["commitLogOffset"] + m["size"] <= cut)]


_REPAIRED_FIXTURES: dict[tuple[str, str], dict[str, tuple]] = {}


def repaired_fixture(version: str, name: str, dest: Path) -> dict[str, tuple]:
    """What ``survivors`` says of every message of the undamaged fixture once ``repair --yes`` ran
    on it (a crashed store's recovery rebuilds its queues): the baseline of ``damage_run``."""
    if (version, name) not in _REPAIRED_FIXTURES:
        work = dest / "undamaged"
        root = copy_store(version, name, work)
        run("repair", root, "--yes", "--format", "json", "--broker-version", version, "--backup-dir", work / "backup", timeout=120)
        ids = [m["uniqKey"] for m in manifest(version, name)["messages"] if m.get("uniqKey")]
        _REPAIRED_FIXTURES[(version, name)] = survivors(root, version, ids, work)
    return _REPAIRED_FIXTURES[(version, name)]


def tree(root: Path) -> dict[str, str]:
    """The store's bytes and layout (``repair_support.tree``) but the lock file (the broker's, never changed by mqtool)."""
    return store_tree(root, but=("lock",), links=True)


def beyond_lost(findings: list[dict]) -> list[str]:
    """The failing findings of ``verify --format jsonl`` that are not lost data, as one line each:
    those ``repair``'s own triage (``recovery.repair.triage``) would still fix, and those it does
    not call lost data (no lost record to show for them). A consumer offset outside its queue is
    neither: the broker corrects it at the consumer's next pull, and the config-real fixtures hold
    such offsets on purpose."""
    fields = ("kind", "message", "file", "offset", "expected", "found", "details")
    failing = [Finding(**{**{k: f[k] for k in fields}, "severity": Severity(f["severity"])}) for f in findings if f["severity"] != "info"]
    return [f"{e.kind} {e.file or ''} {e.offset}" for e in expected_after(triage(failing)) if not e.lost_data and e.kind != "consumer-offset-range"]


@dataclass
class Outcome:
    """One damage run: ``problem`` is None (ok) or one of ``PROBLEMS``; ``detail`` says what."""

    store: str
    seed: int
    damages: list[str]
    problem: str | None = None
    detail: str = ""
    repair_rc: int | None = None
    refused: str | None = None  # "version" or "unplanned": a documented refusal (``damage_run``)
    steps: list[str] = field(default_factory=list)


PROBLEMS = ("traceback", "hang", "exit-code", "not-sound", "survivor", "restore", "next-start")
UNPLANNED_RECOVERY = "mqtool does not plan that recovery"  # recovery.logkinds: past a TOTALSIZE mismatch, 3.2.6 and 4.0.0-4.3.1 abnormal


class Stop(Exception):
    def __init__(self, problem: str, detail: str):
        super().__init__(problem, detail)
        self.problem, self.detail = problem, detail


def filler_tails(root: Path) -> list[str]:
    """Queues whose last unit is a filler: ``ConsumeQueue.recover`` then sets ``maxPhysicOffset`` to 2147483647
    (from 4.5.0) and the broker's dispatch skips the queue's new messages, which no ``verify`` of the files shows.
    Up to 4.4.0 it is the filler's offset, below every new message (rules §3.2, §3.4): no harm where no era the
    store may be from is 4.5.0 or later (seed 14005936, a 3.2.6 store)."""
    from mqtool.store import Store

    with Store.open(root) as store:
        tails = []
        if not store.eras_where("cq_dedup_by_end"):
            return tails
        for queue in store.consume_queues:
            end = queue.recover().max_offset
            if end and queue.read_entry(end - 1).is_filler:
                tails.append(f"filler-tail {queue.topic}/{queue.queue_id} {end - 1}")
        return tails


def early_deletions(root: Path) -> list[str]:
    """Consume queue files (a queue's last aside) that the broker's clean-up would delete while messages they
    point at are still in the log: ``MappedFileQueue.deleteExpiredFileByOffset`` destroys a file once its last
    unit's offset is below the log's min offset, which moves a segment at a time, so a file whose last unit
    lies in an earlier segment than one of its entries goes before that entry's message (as a filler at 0 ending
    it did; ``recovery.repair.CutSegment``)."""
    import numpy as np

    from mqtool.formats import consumequeue as cqfmt
    from mqtool.store import Store

    with Store.open(root) as store:
        segment, early = store.commitlog.file_size, []
        for queue in store.consume_queues:
            for base, path in queue.files[:-1]:
                units = queue.units(path)
                phys = units["phys_offset"]
                valid = (phys >= 0) & (units["size"] > 0)  # an entry or a filler
                entries = valid & ~cqfmt.is_filler(phys, units["size"], units["tags_code"])
                if units.shape[0] and valid[-1] and np.any(entries & (phys // segment > phys[-1] // segment)):
                    early.append(f"early-deletion {queue.topic}/{queue.queue_id} {path.name}")
        return early


def next_starts_agree(root: Path, given: tuple[str, ...], timeout: int) -> None:
    """``info``, ``verify``, ``recover``, ``repair`` and ``salvage`` (its line on stderr) say the same of the broker's
    next start (``store.nextstart``), each that answers (a command that cannot plan the store refuses or says why)."""
    said = {}
    _, _, stderr = run("salvage", root, "--format", "jsonl", "--out", os.devnull, "--no-progress", *given, timeout=timeout)
    said.update(("salvage", line.removeprefix("mqtool: ")) for line in stderr.splitlines() if line.startswith("mqtool: the broker's next start"))
    for command, extra in (("info", ()), ("verify", ("--no-progress",)), ("recover", ("--dry-run",)), ("repair", ("--dry-run",))):
        rc, stdout, _ = run(command, root, "--format", "json", *extra, *given, timeout=timeout)
        if rc in (EXIT_OK, EXIT_FINDINGS) and stdout.strip():
            doc = json.loads(stdout)
            found = (doc.get("summary") or {}).get("next_start") if command == "verify" else doc.get("next_start")
            if found is not None:
                said[command] = found["line"]
    if len(set(said.values())) > 1:
        raise Stop("next-start", "; ".join(f"{c}: {line}" for c, line in said.items()))


def fixture_conf(version: str, name: str, dest: Path) -> Path:
    """The fixture broker's own settings (its manifest's ``storeConfig``) as a broker.conf: what a user passes as
    ``--broker-config`` where ``repair`` refuses to guess one (a lone cut timer log file's ``mappedFileSizeTimerLog``)."""
    conf = dest / "broker.conf"
    conf.write_text("".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}\n" for k, v in manifest(version, name)["storeConfig"].items()))
    return conf


def run(*args, timeout: int) -> tuple[int, str, str]:
    """``mqtool ARGS``: in a fresh process with ``FRESH_PROCESS`` (the bench), else in this one (``repair_support.cli``)."""
    try:
        proc = mqtool(*map(str, args), timeout=timeout) if FRESH_PROCESS else cli(*args, timeout=timeout)
    except (subprocess.TimeoutExpired, Hang):
        raise Stop("hang", f"mqtool {args[0]}: no answer in {timeout} s") from None
    except Exception as exc:  # noqa: BLE001 - what a process prints as a traceback
        raise Stop("traceback", f"mqtool {args[0]}: {type(exc).__name__}: {exc}") from exc
    if "Traceback" in proc.stderr:
        raise Stop("traceback", f"mqtool {args[0]}: {proc.stderr[-1500:]}")
    if proc.returncode not in DOCUMENTED:
        raise Stop("exit-code", f"mqtool {args[0]}: exit {proc.returncode}: {proc.stderr[-800:]}")
    return proc.returncode, proc.stdout, proc.stderr


def damage_run(version: str, name: str, seed: int, dest: Path, *, timeout: int = 120, restore: bool = True, version_given: bool = True,
               kinds: tuple[str, ...] = DAMAGES, survivors_kept: bool = False, readers: bool = False) -> Outcome:
    """Damage a copy, ``repair --yes`` it, ``verify`` it, ``restore`` the repair and compare. With
    ``version_given`` false, repair is not told the fixture's broker version (a user who does not know
    it): it may refuse (exit 4) naming the versions that decide, with the store unchanged; what it
    repairs is verified under the fixture's version, the broker that will run on it. ``readers``: the
    read-only commands run on the damaged copy first; ``survivors_kept``: the messages before the first
    damaged byte of the log must fare in ``mqtool survivors`` as on the repaired undamaged fixture."""
    root, what = damage_copy(version, name, seed, dest, kinds)
    out = Outcome(f"{version}/{name}", seed, what)
    damaged = tree(root)
    cut = first_damage(FIXTURES / f"rocketmq-{version}" / name, root) if survivors_kept else None
    backup = dest / "backup"
    try:
        # the fixture's version given: a store whose damage leaves eras that plan apart is refused without it
        # (exit 4, naming the versions): the right answer, but not what this run measures
        given = ("--broker-version", version)
        if readers:  # the read-only commands on the damaged copy: a documented exit code, never a traceback
            for command in (("info",), ("stats",), ("offsets",), ("salvage", "--format", "jsonl", "--out", os.devnull), ("dump", "--limit", "20")):
                run(command[0], root, *command[1:], timeout=timeout)
            next_starts_agree(root, given, timeout)
        told = given if version_given else ()
        rc, stdout, stderr = run("repair", root, "--yes", "--format", "json", "--backup-dir", backup, *told, timeout=timeout)
        if rc == EXIT_REFUSED and "pass --broker-config" in stderr:  # a size only broker.conf tells: the user passes it
            if tree(root) != damaged:
                raise Stop("restore", f"repair refused but left the store changed: {stderr.strip()[-300:]}")
            conf = ("--broker-config", fixture_conf(version, name, dest))
            given, told = given + conf, told + conf
            rc, stdout, stderr = run("repair", root, "--yes", "--format", "json", "--backup-dir", backup, *told, timeout=timeout)
        out.repair_rc = rc
        if rc == EXIT_BAD_INPUT:
            return out  # the store cannot be read at all (the one-line error is the answer)
        # refusals the README documents, each with the store unchanged: the version undecided (without
        # --broker-version), and a TOTALSIZE mismatch 3.2.6 reads past, or a 4.0.0-4.3.1 abnormal recovery (rules §2.2, §2.7)
        out.refused = "version" if rc == EXIT_REFUSED and not version_given and "--broker-version" in stderr else (
            "unplanned" if rc == EXIT_REFUSED and UNPLANNED_RECOVERY in stderr else None)
        if out.refused:
            if tree(root) != damaged:
                raise Stop("restore", f"repair refused but left the store changed: {stderr.strip()[-300:]}")
            return out
        if rc == EXIT_REFUSED:
            raise Stop("exit-code", f"repair --yes refused: {stderr.strip()[-500:]}")
        out.steps = [s["step"] for s in json.loads(stdout)["steps"]]
        vrc, stdout, _ = run("verify", root, "--format", "jsonl", *given, timeout=timeout)
        findings = [json.loads(line) for line in stdout.splitlines()][:-1]
        failing = [f for f in findings if f["severity"] != "info"]
        if (vrc == EXIT_OK) != (not failing):
            raise Stop("exit-code", f"verify exit {vrc} with {len(failing)} failing finding(s)")
        left = beyond_lost(findings) + filler_tails(root) + early_deletions(root)
        if left:
            raise Stop("not-sound", "; ".join(left[:3]) + (f" (+{len(left) - 3})" if len(left) > 3 else ""))
        lost = [f for f in failing if f["kind"] != "consumer-offset-range"]  # verify's warning, not lost data (``beyond_lost``)
        if bool(lost) != (rc == EXIT_FINDINGS):
            raise Stop("exit-code", f"repair exit {rc} but verify reports {len(lost)} finding(s) of lost data")
        # the messages wholly before the first damaged byte of the log fare as on the repaired undamaged fixture:
        # found and consumable at the same queue offsets (damage elsewhere, to queues, index or files, takes none of them)
        kept = kept_messages(manifest(version, name)["messages"], cut) if survivors_kept else []
        if kept:
            baseline, now = repaired_fixture(version, name, dest), survivors(root, version, kept, dest)
            changed = [f"{i}: {baseline.get(i)} -> {now.get(i)}" for i in kept if baseline.get(i) != now.get(i)]
            if changed:
                raise Stop("survivor", f"{len(changed)} message(s) before the first damage at {cut} fare otherwise: {'; '.join(changed[:2])}")
        if restore and backup.exists():
            run("restore", backup, "--yes", timeout=timeout)
            after = tree(root)
            if after != damaged:
                diff = sorted(k for k in set(after) | set(damaged) if after.get(k) != damaged.get(k))
                raise Stop("restore", f"not byte-identical after restore: {', '.join(diff[:4])}")
    except Stop as stop:
        out.problem, out.detail = stop.problem, stop.detail
    finally:
        shutil.rmtree(second_disk(root), ignore_errors=True)
    return out
