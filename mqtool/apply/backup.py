"""Backups, the apply journal, and ``restore`` (docs/recovery.md, "Backup directory"): every byte apply overwrites or deletes is
backed up durably first; ``restore`` undoes the journal in reverse, mtimes included. ``.mqtool-pending`` names an unfinished
apply's backup, ``.mqtool-repair`` that of a ``repair`` whose stages are not all applied."""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import re
import shlex
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .. import activity
from ..errors import BadInput, Refused
from ..formats.markers import LOCK_FILE
from ..fileops import (TMP_SUFFIX, beside, copy_entry, copy_range_sparse, copy_sparse, deleted_on_failure, fsync_dir, install, left_unchanged,
                       link_or_copy, makedirs, naming, owner_for, put_range, read_range, remove, remove_entry, shell_path, write_atomic)

BACKUP_FORMAT = "mqtool-backup/1"
PENDING_MARKER = ".mqtool-pending"
REPAIR_MARKER = ".mqtool-repair"
STAGING_DIR = ".mqtool-staging"
BACKUPS_DIR = ".mqtool-backups"
RESERVE = "reserve"  # the room the backup's own records take once the store changes, taken before it does (``BackupSet.create``)
RESTORE_ROOM = 2 * 4096  # what the reserve keeps once the apply is complete: a restore's journal events and its pending marker
WIDEST = 2**63 - 1  # no size, offset, time or id a journal event or manifest holds is wider


def staging_path(store_root: Path, final: Path) -> Path:
    """Where a store file is written before its rename: the staging directory (``MappedFileQueue.load`` lists the file's own)."""
    return Path(store_root) / STAGING_DIR / _flat(os.path.relpath(final, store_root), 20)


def work_path(store_root: Path, target: Path) -> Path:
    """Where a file replacing ``target`` is written before ``install``: the staging directory, or beside it across a mount."""
    tmp = staging_path(store_root, target)
    makedirs(tmp.parent)
    return tmp if os.stat(tmp.parent).st_dev == os.stat(target.parent).st_dev else beside(target)


def default_backup_dir(store_root: Path, command: str) -> Path:
    """``<store>-<UTC time to the millisecond>-<command>`` beside the store, the second and its milliseconds from one clock
    reading, so that names sort as the applies ran."""
    seconds, millis = divmod(int(time.time() * 1000), 1000)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f"{millis:03d}"
    root = store_root.resolve()
    return root.parent / BACKUPS_DIR / f"{root.name}-{stamp}-{command}"


def refuse_backup_inside(root: Path, backup_dir: Path) -> None:
    """A backup directory in the store (or the store itself) is refused: its files would be the broker's."""
    inside = Path(backup_dir).resolve()
    if inside == root.resolve() or root.resolve() in inside.parents:
        raise Refused(f"{backup_dir}: the backup directory is inside the store {root}, where its files would be the broker's "
                      "(a directory in commitlog/ or a queue's stops the broker's start); nothing was changed: give a --backup-dir outside the store")


def _flat(rel: str, digits: int = 16) -> str:
    """A store path as one file name: its hash, then its own name."""
    import hashlib  # here: OpenSSL's start-up is for the commands that write

    return f"{hashlib.sha1(rel.encode()).hexdigest()[:digits]}-{Path(rel).name}"


def new_manifest(store_root: Path, plan_doc: dict, step: str | None = None, plan_file: Path | None = None) -> dict:
    """The manifest of a new backup set for an apply of ``plan_doc`` (``BackupSet.create``); ``plan_file``: the saved plan
    ``mqtool apply`` read it from (``finish_command`` names it)."""
    return {
        "format": BACKUP_FORMAT,
        "store": str(Path(store_root).resolve()),
        "command": "repair" if step else plan_doc.get("command"),
        **({"step": step} if step else {}),
        **({"plan_file": str(Path(plan_file).resolve())} if plan_file is not None else {}),
        "created_ms": int(time.time() * 1000),
        # ``applied_after``: the monotonic clock within a boot (a stepped wall clock cannot reorder it), else ``created_ms``
        "boot_id": boot_id(),
        "monotonic_ns": time.monotonic_ns(),
        "complete": False,
        "plan": plan_doc,
    }


def manifest_bytes(manifest: dict) -> bytes:
    """``manifest`` as ``manifest.json`` holds it: a key a line, and the plan's as ``--plan-out`` saves it (``readable_json``:
    a queue, action or file a line); older backups' (``indent=1``) are read alike, by ``json.loads``."""
    from ..recovery.plans import PLAN_LEVELS, readable_json  # the plan model: only where an apply writes (``verify`` reads backups)

    return readable_json(manifest, PLAN_LEVELS + 1).encode()


def final_manifest_size(manifest: dict, paths: list[str]) -> int:
    """The bytes of ``manifest`` as ``BackupSet.finish`` rewrites it, every state of ``paths`` at its widest."""
    return len(manifest_bytes({**manifest, "complete": True, "after": dict.fromkeys(paths, [WIDEST, WIDEST])}))


def take_room(reserve: Path, size: int) -> None:
    """``reserve`` made a file of ``size`` bytes allocated on its disk (``posix_fallocate``), fsynced."""
    fd = os.open(reserve, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def keep_room(reserve: Path, size: int) -> None:
    """``reserve`` cut to ``size`` bytes if it holds more."""
    with contextlib.suppress(OSError):
        if os.stat(reserve).st_size > size:
            os.truncate(reserve, size)


def with_room(reserve: Path, need: int, write: Callable, where: Path | None = None):
    """``write()``, retried on ENOSPC/EDQUOT while ``reserve`` gives back ``need`` bytes (``BackupSet.create`` took them)."""
    while True:
        try:
            return write()
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not _give_back(reserve, need, where):
                raise


def _give_back(reserve: Path, need: int, where: Path | None) -> bool:
    """``need`` bytes and a block of ``reserve`` given back to its disk; False if it holds none, or is on another disk than ``where``."""
    try:
        st = os.stat(reserve)
        if st.st_size == 0 or (where is not None and os.stat(where).st_dev != st.st_dev):
            return False
        os.truncate(reserve, max(0, st.st_size - need - st.st_blksize))
    except OSError:
        return False
    return True


class Journal:
    """Append-only JSON lines, each fsynced before the change it announces; a torn last line is ignored and cut off before the
    next append (``events`` stops at the first unreadable line). A refused append is cut off too and names the journal's path."""

    def __init__(self, path: Path):
        self.path = path
        self._read: list[dict] = []  # the events of the whole lines before ``_end``, read once (``events``)
        self._end = 0  # ``append`` cuts nothing before it: only a torn line after the last newline

    def append(self, *events: dict) -> None:
        """``events`` appended whole; a disk full for them, the room taken from the backup's ``RESERVE`` (``with_room``)."""
        if not events:
            return
        created = not self.path.exists()
        with naming(self.path), open(self.path, "a+b", buffering=0) as f:
            end = f.seek(0, os.SEEK_END)
            if end and (f.seek(end - 1), f.read(1))[1] != b"\n":
                f.seek(0)
                end = f.read().rfind(b"\n") + 1
                f.truncate(end)
            data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events).encode("utf-8")
            with_room(self.path.parent / RESERVE, len(data), functools.partial(self._write, f, end, data))
        if created:  # the directory entry too: without it a power cut can lose the whole journal
            fsync_dir(self.path.parent)

    @staticmethod
    def _write(f, end: int, data: bytes) -> None:
        """``data`` appended to the journal ``f`` and fsynced, or the journal cut back to ``end``."""
        lines = memoryview(data)
        try:
            while lines:  # a write(2) the disk fills during writes part, then the next one fails
                lines = lines[f.write(lines):]
            os.fsync(f.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                f.truncate(end)
            raise

    def events(self) -> list[dict]:
        """The events up to the first line that is none (a torn or empty last line). Lines read are kept and only later bytes read
        again, as the journal is only appended to; a journal shorter than what was read is read again from its start."""
        try:
            with open(self.path, "rb") as f:
                if f.seek(0, os.SEEK_END) < self._end:
                    self._read, self._end = [], 0
                f.seek(self._end)
                data = f.read()
        except FileNotFoundError:
            self._read, self._end = [], 0
            return []
        *lines, last = data.split(b"\n")  # bytes: a line torn inside a character, or holding U+2028, is one line
        for line in lines:
            try:
                self._read.append(json.loads(line))
            except ValueError:  # JSON or UTF-8: an empty line, or one damaged since (read again next time, with what follows)
                return list(self._read)
            self._end += len(line) + 1
        try:  # the line after the last newline, not kept: torn (cut by ``append`` before it writes), or whole but for that newline
            return [*self._read, json.loads(last)]
        except ValueError:
            return list(self._read)


def read_manifest(directory: Path) -> dict:
    """The manifest of the backup set in ``directory`` (not its journal); ``BadInput`` if missing or not mqtool's."""
    try:
        manifest = json.loads((Path(directory) / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInput(f"{directory}: not an mqtool backup (no manifest.json)") from None
    except ValueError as exc:  # JSON or UTF-8
        raise BadInput(f"{directory}/manifest.json: unreadable ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != BACKUP_FORMAT or not isinstance(manifest.get("store"), str):
        raise BadInput(f"{directory}: not an {BACKUP_FORMAT} backup")
    return manifest


@dataclass
class BackupSet:
    dir: Path
    store_root: Path
    manifest: dict
    journal: Journal
    _files: set[str] = field(default_factory=set)
    _ranges: set[tuple[str, int, int]] = field(default_factory=set)
    _created: set[str] = field(default_factory=set)
    _done: set[int] = field(default_factory=set)
    _dirs: set[str] = field(default_factory=set)
    _moved: set[str] = field(default_factory=set)  # directories and symlinks moved into the backup (``move_entry``)
    _restoring: set[str] = field(default_factory=set)  # files a restore began writing kept ranges back into (``restore-range``)
    made: list[Path] | None = None  # the directories ``create`` made, deepest first (None: not known, ``open``)

    @classmethod
    def create(cls, directory: Path, store_root: Path, plan_doc: dict, step: str | None = None, reserve: int = 0,
               plan_file: Path | None = None) -> "BackupSet":
        """A new backup set in ``directory`` for an apply of ``plan_doc``; ``step``: the ``repair`` stage it is (its manifest's
        ``command`` is then ``repair``); ``reserve``: the bytes its records take once the store changes, taken now;
        ``plan_file``: the saved plan it was read from (``mqtool apply``)."""
        directory = Path(directory)
        if directory.exists() and any(directory.iterdir()) and not cls.unused(directory):
            raise BadInput(f"{directory}: backup directory exists and is not empty; nothing was changed: give a new or empty --backup-dir")
        # a new folder is made under a temporary name, renamed once its manifest is there: a kill leaves no manifest-less folder
        top = directory.parent if step and not directory.parent.exists() else directory
        building = top if top.exists() else top.with_name(top.name + TMP_SUFFIX)
        inner, manifest, made = building / directory.relative_to(top), new_manifest(store_root, plan_doc, step, plan_file), []
        try:
            if building != top:
                shutil.rmtree(building, ignore_errors=True)  # an earlier kill's
            made = [top / d.relative_to(building) if d == building or building in d.parents else d for d in makedirs(inner)]
            write_atomic(inner / "manifest.json", manifest_bytes(manifest))
            if reserve:
                take_room(inner / RESERVE, reserve)
            if building != top:
                os.rename(building, top)
                fsync_dir(top.parent)
        except BaseException as exc:  # OSError, or Ctrl-C before the manifest is there
            if building != top:
                shutil.rmtree(building, ignore_errors=True)
            for d in made:  # the directories made for it, deepest first: a backup that could not start leaves none
                with contextlib.suppress(OSError):
                    d.rmdir()
            said = Path(exc.filename) if isinstance(exc, OSError) and exc.filename is not None else None
            if said is not None and building != top and (said == building or building in said.parents):
                exc.filename = str(top / said.relative_to(building))  # the folder asked for, not its temporary name
            raise
        return cls(directory, store_root.resolve(), manifest, Journal(directory / "journal.jsonl"), made=made)

    @staticmethod
    def unused(directory: Path) -> bool:
        """A backup set whose apply was killed before it changed anything (no journal event)."""
        names = {p.name for p in directory.iterdir()}
        return names <= {"manifest.json", "journal.jsonl", "manifest.json.mqtool-tmp", RESERVE} and not Journal(directory / "journal.jsonl").events()

    @classmethod
    def open(cls, directory: Path, manifest: dict | None = None) -> "BackupSet":
        """The backup set in ``directory``: its manifest (``read_manifest``, unless given) and its journal's events."""
        directory = Path(directory)
        manifest = read_manifest(directory) if manifest is None else manifest
        backup = cls(directory, Path(manifest["store"]), manifest, Journal(directory / "journal.jsonl"))
        paths = {"backup-file": backup._files, "create": backup._created, "create-dir": backup._dirs, "move-entry": backup._moved,
                 "restore-range": backup._restoring}
        for ev in backup.journal.events():
            kind = ev.get("ev")
            if kind in paths:
                paths[kind].add(ev["path"])
            elif kind == "backup-range":
                backup._ranges.add((ev["path"], ev["start"], ev["end"]))
            elif kind == "step-done":
                backup._done.add(ev["index"])
        return backup

    # -- paths --

    def file_copy(self, rel: str) -> Path:
        """Backups live in one flat directory (one fsync covers a batch); the journal maps names."""
        return self.dir / "files" / _flat(rel)

    def range_copy(self, rel: str, start: int, end: int) -> Path:
        return self.dir / "ranges" / f"{_flat(rel)}@{start}-{end}"

    @property
    def complete(self) -> bool:
        return any(ev.get("ev") == "complete" for ev in self.journal.events())

    @property
    def restored(self) -> bool:
        """A restore ran (then the store holds the backed-up bytes, not what the apply left)."""
        return self.restored_ms is not None

    @property
    def restored_ms(self) -> int | None:
        """When the last restore of this backup finished (epoch ms), None if none did."""
        times = [ev.get("ms", 0) for ev in self.journal.events() if ev.get("ev") == "restored"]
        return times[-1] if times else None

    @property
    def restore_interrupted(self) -> bool:
        """A restore of this backup started and did not finish (``restore`` finishes it)."""
        events = [ev.get("ev") for ev in self.journal.events() if ev.get("ev") in ("restore-started", "restored")]
        return bool(events) and events[-1] == "restore-started"

    def discard(self) -> None:
        """Remove the backup of an apply that changed nothing: what it holds, and the directories made
        for it; a directory given empty (``--backup-dir``: a mount point, its permissions) stays."""
        if self.made is None:
            shutil.rmtree(self.dir, ignore_errors=True)
            return
        for p in self.dir.iterdir() if self.dir.is_dir() else ():
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)
        for d in self.made:
            with contextlib.suppress(OSError):
                d.rmdir()

    def step_done(self, index: int) -> bool:
        return index in self._done

    # -- recording --

    def backup_file(self, rel: str) -> Path | None:
        """Keep the current bytes of ``rel`` (once); the copy, None if there is nothing to keep."""
        return self.backup_files([rel])[rel]

    def backup_files(self, rels: list[str]) -> dict[str, Path | None]:
        """``backup_file`` of many files with one fsync per directory and one journal write."""
        result, events, synced = {}, [], set()
        copied = _bytes_progress("backup", lambda: sum(self._size(rel) for rel in rels if rel not in self._files and rel not in self._created))
        for rel in rels:
            copy = self.file_copy(rel)
            src = self.store_root / rel
            if rel in self._files:
                result[rel] = copy
            elif rel in self._created or not src.exists():
                result[rel] = None  # created by this apply, or absent: nothing original to keep
            else:
                st = src.stat()
                how = link_or_copy(src, copy, synced=synced, copied=copied)  # a copy to another file system: minutes for a segment
                events.append({"ev": "backup-file", "path": rel, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "how": how,
                               "uid": st.st_uid, "gid": st.st_gid, "mode": stat.S_IMODE(st.st_mode)})
                result[rel] = copy
        for d in sorted(synced, key=lambda p: len(p.parts), reverse=True):
            fsync_dir(d)
        self.journal.append(*events)
        self._files.update(e["path"] for e in events)
        return result

    def _size(self, rel: str) -> int:
        try:
            return (self.store_root / rel).stat().st_size
        except OSError:  # absent: nothing to keep
            return 0

    def moved_copy(self, rel: str) -> Path:
        return self.dir / "moved" / _flat(rel)

    def move_entry(self, rel: str) -> None:
        """Move a stray directory or symlink of the store into the backup by a rename, logged first (``restore`` renames it back);
        across file systems copied in (``copy_entry``), then deleted. Run again after a kill, it finishes the move."""
        src, dst = self.store_root / rel, self.moved_copy(rel)
        if not os.path.lexists(src):
            return
        makedirs(dst.parent)
        if rel not in self._moved:
            self.journal.append({"ev": "move-entry", "path": rel})
            self._moved.add(rel)
        if not os.path.lexists(dst):
            try:
                os.rename(src, dst)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                self.journal.append({"ev": "move-entry", "path": rel, "how": "copy"})
                copy_entry(src, dst)
        remove_entry(src)  # the copied entry's original; nothing after a rename
        fsync_dir(dst.parent)
        fsync_dir(src.parent)

    def backup_range(self, rel: str, start: int, end: int) -> None:
        if (rel, start, end) in self._ranges or rel in self._created:  # a file this apply created has nothing original to keep
            return
        copy = self.range_copy(rel, start, end)
        makedirs(copy.parent)
        st = (self.store_root / rel).stat()
        with_room(self.dir / RESERVE, end - start, lambda: self._keep_range(rel, start, end, copy))  # on a disk the store's writes filled since
        self.journal.append({"ev": "backup-range", "path": rel, "start": start, "end": end, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
        self._ranges.add((rel, start, end))

    def _keep_range(self, rel: str, start: int, end: int, copy: Path) -> None:
        """``copy`` made durably of ``rel``'s bytes ``[start, end)``, as sparse as they are (a cut of a preallocated segment is
        mostly holes), via a temporary file: a kill leaves no part-written copy under its name, a refused one is said as ``copy``'s
        (``left_unchanged``), as ``link_or_copy``'s are."""
        tmp = beside(copy)
        with left_unchanged(copy):
            copy_range_sparse(self.store_root / rel, start, end, tmp)
        os.replace(tmp, copy)
        fsync_dir(copy.parent)

    def note_creates(self, rels: list[str]) -> None:
        """Log that files are about to be created (``restore`` deletes them); one that exists is backed up."""
        todo = [r for r in rels if r not in self._created and r not in self._files]
        self.backup_files([r for r in todo if (self.store_root / r).exists()])
        new = [r for r in todo if not (self.store_root / r).exists()]
        self.journal.append(*({"ev": "create-dir", "path": d} for d in self._missing_dirs(new)), *({"ev": "create", "path": r} for r in new))
        self._created.update(new)

    def _missing_dirs(self, rels: list[str]) -> list[str]:
        """The directories creating ``rels`` makes (not yet logged), parents first."""
        out: dict[str, None] = {}
        for rel in rels:
            for parent in reversed(Path(rel).parents[:-1]):
                d = str(parent)
                if d not in out and d not in self._dirs and not (self.store_root / d).is_dir():
                    out[d] = None
        self._dirs.update(out)
        return list(out)

    def mark_step(self, index: int, op: str, path: str, final: list[str] = ()) -> None:
        """Step ``index`` done; ``final``: the files no later step changes, whose state now is what the apply leaves."""
        event = {"ev": "step-done", "index": index, "op": op, "path": path}
        if final:
            event["after"] = {rel: self.state_of(rel) for rel in final}
        self.journal.append(event)
        self._done.add(index)

    def note_lock_state(self) -> None:
        """The ``lock`` file's state as the apply starts (once): a broker started since rewrites it."""
        if not any(ev.get("ev") == "lock" for ev in self.journal.events()):
            self.journal.append({"ev": "lock", "state": self.state_of(LOCK_FILE)})

    def touched(self) -> list[str]:
        return sorted(self._files | self._created | self._moved | {p for p, _, _ in self._ranges})

    def state_of(self, rel: str) -> list[int] | None:
        """(size, mtime_ns) of a store file now, None if it does not exist."""
        try:
            st = (self.store_root / rel).stat()
        except FileNotFoundError:
            return None
        return [st.st_size, st.st_mtime_ns]

    def finish(self) -> None:
        """Mark the apply complete, recording every touched file's state first (``changed_since_apply``); the final manifest and
        journal event take their room from the ``RESERVE`` on a full disk."""
        self.manifest["after"] = {rel: self.state_of(rel) for rel in self.touched()}
        self.manifest["complete"] = True
        data = manifest_bytes(self.manifest)
        with_room(self.dir / RESERVE, len(data), lambda: write_atomic(self.dir / "manifest.json", data))
        self.journal.append({"ev": "complete"})
        keep_room(self.dir / RESERVE, RESTORE_ROOM)  # the rest back to the disk: a restore's own records are all it is kept for

    def before_states(self) -> dict[str, list[int] | None]:
        """(size, mtime_ns) of every touched file when the apply first touched it (None: absent)."""
        out: dict[str, list[int] | None] = {}
        for ev in self.journal.events():
            kind, rel = ev.get("ev"), ev.get("path")
            if rel in out:
                continue
            if kind == "create":
                out[rel] = None
            elif kind in ("backup-file", "backup-range") and "mtime_ns" in ev:
                out[rel] = [ev["size"], ev["mtime_ns"]]
        return out

    def changed_since_apply(self) -> list[str]:
        """Touched files holding neither what the apply left nor what it found, and ``lock`` if written since."""
        events = self.journal.events()
        after = self.manifest.get("after") or {}
        if not self.manifest.get("complete"):
            after = {rel: state for ev in events if ev.get("ev") == "step-done" for rel, state in (ev.get("after") or {}).items()}
        before = self.before_states()
        started = any(ev.get("ev") == "restore-started" for ev in events)
        lock = next((ev for ev in events if ev.get("ev") == "lock"), None)
        changed = [LOCK_FILE] if lock is not None and LOCK_FILE not in after and self.state_of(LOCK_FILE) != lock["state"] else []
        for rel, state in after.items():
            now = self.state_of(rel)
            if now == state or (started and self._left_by_a_restore(rel, before, now)):
                continue
            changed.append(rel)
        return changed

    def _left_by_a_restore(self, rel: str, before: dict[str, list[int] | None], now: list[int] | None) -> bool:
        """``rel`` as a cut-short restore leaves it: as found, ranges written back (or being written: ``restore-range``, a
        restore stopped inside one), or deleted (``_make_room``)."""
        if rel in before and now == before[rel]:
            return True
        if rel in self._restoring and now is not None and before.get(rel) is not None and now[0] == before[rel][0]:
            return True
        return (now is None and rel in self._files) or self._ranges_put_back(rel, before.get(rel), now)

    def missing_copies(self) -> list[str]:
        """The store paths whose kept bytes this backup no longer holds (a copy deleted or cut, a moved entry gone, a journal line
        lost): ``restore`` would stop half done at the first."""
        missing = []
        for ev in self.journal.events():
            kind, rel = ev.get("ev"), ev.get("path")
            if kind == "backup-file":
                with contextlib.suppress(OSError):
                    if (size := self.file_copy(rel).stat().st_size) == ev.get("size", size):
                        continue
            elif kind == "backup-range":
                if self.range_copy(rel, ev["start"], ev["end"]).is_file():
                    continue
            elif kind != "move-entry" or os.path.lexists(self.moved_copy(rel)) or os.path.lexists(self.store_root / rel):
                continue
            missing.append(rel)
        touched = set(self.touched())  # a complete apply's manifest names every file its journal lists: lines lost with the journal
        return list(dict.fromkeys([*missing, *(rel for rel in self.manifest.get("after") or {} if rel not in touched)]))

    def _ranges_put_back(self, rel: str, before: list[int] | None, now: list[int] | None) -> bool:
        """A file only ranges of which were backed up holds them again (a restore stopped before the mtime)."""
        ranges = [(s, e) for p, s, e in self._ranges if p == rel]
        if not ranges or rel in self._files or before is None or now is None or now[0] != before[0]:
            return False
        return all(read_range(self.store_root / rel, s, e) == self.range_copy(rel, s, e).read_bytes() for s, e in ranges)

    # -- summary --

    def summary(self) -> dict:
        files = sorted(self._files)
        # a repair's stage made before manifests named their step: the step its directory is named for
        step = self.manifest.get("step") or (self.dir.name[3:] if restore_target(self.dir) != self.dir else None)
        return {
            "backup": str(self.dir),
            "store": str(self.store_root),
            "command": "repair" if step else self.manifest.get("command"),
            "step": step,
            "complete": self.complete,
            "restored_ms": self.restored_ms,
            "files": files,
            "ranges": [{"path": p, "start": s, "end": e} for p, s, e in sorted(self._ranges)],
            "created": sorted(self._created),
            "bytes": sum(self.file_copy(p).stat().st_size for p in files if self.file_copy(p).exists())
            + sum(e - s for _, s, e in self._ranges),
        }


# ---- the pending and repair markers -----------------------------------------------------------


def write_pending(store_root: Path, backup_dir: Path, marker: str = PENDING_MARKER) -> None:
    """``marker`` in the store names ``backup_dir``, durably (``write_atomic``)."""
    write_atomic(store_root / marker, str(Path(backup_dir).resolve()).encode())


def read_pending(store_root: Path, marker: str = PENDING_MARKER) -> Path | None:
    """The backup ``marker`` names (the pending apply's by default), None without one."""
    path = store_root / marker
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8").strip()
    return Path(text) if text else None


STAGE_NAME = re.compile(r"\d\d-[a-z-]+")  # a repair's stage directory: 01-recover, 02-rebuild-cq


def repair_stages(backup: Path) -> list[Path]:
    """The stage backup sets (``NN-name``) of a ``repair`` backup directory, in the order applied."""
    if not backup.is_dir() or (backup / "manifest.json").exists():
        return []
    return sorted(p for p in backup.iterdir() if STAGE_NAME.fullmatch(p.name) and p.is_dir() and (p / "manifest.json").is_file())


def boot_id() -> str | None:
    """This boot's id (Linux; None elsewhere): ``time.monotonic_ns`` readings compare only within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def applied_after(a: dict, a_name: str, b: dict, b_name: str) -> bool:
    """Whether backup ``a`` was made after ``b``: by the monotonic clock within one boot, else wall clock and name."""
    if a.get("boot_id") is not None and a.get("boot_id") == b.get("boot_id") and "monotonic_ns" in a and "monotonic_ns" in b:
        return a["monotonic_ns"] > b["monotonic_ns"]
    return (a.get("created_ms") or 0, a_name) > (b.get("created_ms") or 0, b_name)


def newest_first(backups: dict[Path, dict] | list[Path]) -> list[Path]:
    """Backup folders, the last made first (``applied_after``); an unreadable one is taken for the oldest."""
    if not isinstance(backups, dict):
        backups = {p: _first_manifest(p) for p in backups}

    def compare(a: Path, b: Path) -> int:
        return -1 if applied_after(backups[a], a.name, backups[b], b.name) else 1 if applied_after(backups[b], b.name, backups[a], a.name) else 0

    return sorted(backups, key=functools.cmp_to_key(compare))


def _first_manifest(path: Path) -> dict:
    try:
        return read_manifest((repair_stages(path) or [path])[0])
    except (BadInput, OSError):
        return {}


def later_backups(backup_dir: Path, sets: list[BackupSet] | None = None) -> list[Path]:
    """The unrestored backups of the same store applied after ``backup_dir`` that touched a file it touched, newest first (its
    repair's later stages, backups beside it or in the default folder): restoring ``backup_dir`` alone would overwrite them."""
    backup_dir = Path(backup_dir).resolve()
    own = repair_stages(backup_dir) or [backup_dir]
    sets = sets or [BackupSet.open(p) for p in own]
    store = sets[0].manifest.get("store")
    first = sets[0]  # stages are in the order applied
    touched = set().union(*(s.touched() for s in sets))
    folders = [backup_dir.parent]
    if backup_dir in repair_stages(backup_dir.parent):  # a stage: its repair's later stages, and the backups beside the repair
        folders.append(backup_dir.parent.parent)
    if store:
        folders.append(Path(store).parent / BACKUPS_DIR)
    found: dict[Path, dict] = {}
    for folder in dict.fromkeys(f.resolve() for f in folders):  # the store's default folder is often the backup's own
        for child in sorted(folder.iterdir()) if folder.is_dir() else ():
            for path in repair_stages(child) or [child]:
                path = path.resolve()
                if path in own or path in found or path.name.endswith(TMP_SUFFIX) or not (path / "manifest.json").is_file():
                    continue  # a folder still being built (killed before its rename) changed nothing
                try:  # the manifest first; the journal only of a later backup of the same store
                    manifest = read_manifest(path)
                    same = store and os.path.realpath(manifest["store"]) == os.path.realpath(store)  # resolved again: a symlink made since
                    if not (same and applied_after(manifest, path.name, first.manifest, first.dir.name)):
                        continue
                    other = BackupSet.open(path, manifest)
                    if not other.restored and touched & set(other.touched()):
                        found[path] = manifest
                except (BadInput, OSError, ValueError):  # unreadable: none this restore can tell was later
                    continue
    return newest_first(found)


@dataclass(frozen=True)
class StoppedRepair:
    """A ``repair`` that stopped before its last stage (``REPAIR_MARKER``): its stages done and the one cut short."""

    backup: Path
    done: tuple[str, ...]
    stopped_in: str | None
    broker_version: str | None = None  # the ``--broker-version`` the repair was run with, if any
    broker_config: str | None = None  # and its ``--broker-config``


def stopped_repair(store_root: Path) -> StoppedRepair | None:
    """The repair ``REPAIR_MARKER`` names, if any of its stages is still in the store (begun, not restored)."""
    backup = read_pending(store_root, REPAIR_MARKER)
    if backup is None:
        return None
    done, stopped_in, given, config = [], None, None, None
    for stage in repair_stages(backup):
        try:
            opened = BackupSet.open(stage)
        except BadInput:
            continue
        plan = opened.manifest.get("plan") or {}
        if given is None and plan.get("version_source") == "given":
            given = plan.get("broker_version")
        config = config or (plan.get("options") or {}).get("broker_config")
        if opened.restored or not opened.journal.events():
            continue
        if opened.complete:
            done.append(stage.name)
        else:
            stopped_in = stage.name
    return StoppedRepair(backup, tuple(done), stopped_in, given, config) if done or stopped_in else None


def clear_repair_mark(store_root: Path, *, unless_applied: bool = False) -> None:
    """Remove ``REPAIR_MARKER``; with ``unless_applied``, only when none of its stages is left in the store."""
    if not unless_applied or stopped_repair(store_root) is None:
        remove(Path(store_root) / REPAIR_MARKER)


def applied_backup(plan_doc: dict, store_root: Path) -> Path | None:
    """The complete, unrestored backup of an apply of ``plan_doc`` in the default backups folder, or None."""
    folder = store_root.resolve().parent / BACKUPS_DIR
    for directory in sorted(folder.glob(f"{store_root.resolve().name}-*"), reverse=True) if folder.is_dir() else ():
        try:  # the journal of a backup of this very plan only
            manifest = read_manifest(directory)
            if manifest.get("plan") != plan_doc:
                continue
            backup = BackupSet.open(directory, manifest)
        except (BadInput, OSError, ValueError):
            continue
        if backup.complete and backup.restored_ms is None:
            return directory
    return None


def leftover_temporaries(store_root: Path) -> list[Path]:
    """The staging directory and ``*.mqtool-tmp`` an interrupted mqtool can leave in a store."""
    root = Path(store_root)
    found = sorted(p for p in root.glob("*" + TMP_SUFFIX) if p.is_file())
    staging = root / STAGING_DIR
    return ([staging] if staging.is_dir() else []) + found


def remove_leftovers(store_root: Path) -> list[Path]:
    """Delete ``leftover_temporaries`` when no apply is pending on the store; returns them."""
    if read_pending(store_root) is not None:
        return []
    found = leftover_temporaries(store_root)
    for p in found:
        shutil.rmtree(p) if p.is_dir() else remove(p)
    if found:
        fsync_dir(store_root)
    return found


def restore_target(backup_dir: Path) -> Path:
    """What to restore to finish an interrupted restore of ``backup_dir``: a repair's stage with its repair."""
    backup_dir = Path(backup_dir)
    parent = backup_dir.parent
    if not STAGE_NAME.fullmatch(backup_dir.name) or (parent / "manifest.json").exists():  # the folder listed only for a stage's name
        return backup_dir
    stages = [p.name for p in parent.iterdir() if p.is_dir()] if parent.is_dir() else []
    return parent if all(STAGE_NAME.fullmatch(name) for name in stages) else backup_dir


def undo_command(backup_dir: Path | str) -> str:
    """The one command that undoes ``backup_dir``: ``restore`` of its whole repair for a stage (``restore_target``)."""
    return f"mqtool restore {shell_path(restore_target(Path(backup_dir)))} --yes"


def finish_command(store: Path | str, manifest: dict) -> str:
    """The command finishing on ``store`` the apply backed up with ``manifest``: ``mqtool apply PLAN`` again for a saved plan
    still there (which finishes it and nothing more: a plan command re-run plans anew and applies that too), ``repair`` for a
    repair's stage, else the plan's command, with the options the next run needs again (``--broker-version``,
    ``--broker-config``, queues, ``--full-scan``)."""
    plan_file = manifest.get("plan_file")
    if plan_file and os.path.isfile(plan_file):
        return f"mqtool apply {shell_path(plan_file)} --yes"
    plan = manifest.get("plan") or {}
    options, command = plan.get("options") or {}, manifest.get("command") or plan.get("command")
    own = {"rebuild-cq": {"topic": options.get("topic"), "queue": options.get("queue_id"),
                          "respect_topic_config": options.get("respect_topic_config")}, "truncate-dirty": {"full_scan": options.get("full_scan")}}
    own = own.get(command, {})
    version = plan.get("broker_version") if plan.get("version_source") == "given" else None
    return rerun_command(command, store, **own, broker_config=options.get("broker_config"), broker_version=version)


def rerun_command(command: str, store: Path | str, **flags) -> str:
    """``mqtool COMMAND STORE --flag value ... --yes``, shell-quoted; True flags alone, None or False ones left out."""
    words = [f"--{name.replace('_', '-')}" + ("" if value is True else f" {shlex.quote(str(value))}") for name, value in flags.items()
             if value is not None and value is not False]
    return " ".join(["mqtool", command, shell_path(store), *words, "--yes"])


def moved_from(store_root: Path, backup: Path) -> Path | None:
    """Where the store was when the apply in ``backup`` began, if it has moved since; else None."""
    stages = repair_stages(Path(backup))
    try:
        was = Path(read_manifest(stages[0] if stages else backup)["store"])
    except (BadInput, OSError):
        return None
    with contextlib.suppress(OSError):  # the old path gone: moved
        if os.path.samefile(was, store_root):
            return None
    return was


def interrupted_apply_ways(store_root: Path, pending: Path) -> str:
    """How to go on from the apply interrupted in ``store_root`` (backup ``pending``): the command that finishes it
    (``finish_command``) or undoes it; with the backup gone, how to plan again; a moved store first."""
    if Path(pending).exists():
        was = moved_from(store_root, Path(pending))
        try:  # a repair's stage made before its manifest named it: its repair's
            manifest = {**read_manifest(pending), **({"command": "repair"} if restore_target(Path(pending)) != Path(pending) else {})}
        except (BadInput, OSError):
            manifest = None
        again = f"run `{finish_command(was or store_root, manifest)}`" if manifest else "run the command again with --yes"
        return f"{'' if was is None else moved_line(was) + ', then '}{again} to finish it, or undo it with: {undo_command(pending)}"
    return (f"its backup {pending} is gone (deleted or moved: put it back to finish or undo that apply), so the apply can be neither "
            f"finished nor undone and the store holds what it had done; to plan again on the store as it is, remove "
            f"{shell_path(Path(store_root) / PENDING_MARKER)}")


def clear_pending(store_root: Path) -> None:
    remove(store_root / PENDING_MARKER)
    staging = store_root / STAGING_DIR
    if staging.exists():
        shutil.rmtree(staging)
        fsync_dir(store_root)


# ---- restore ------------------------------------------------------------------------------------


def changed_by_others(backups: list[BackupSet]) -> list[str]:
    """Files something else changed since these applies, each against the latest unrestored apply touching it."""
    latest: dict[str, bool] = {}  # each file: changed since the latest apply that touched it
    for backup in reversed(backups):
        if not backup.restored:
            others = set(backup.changed_since_apply())
            for rel in [*backup.touched(), *sorted(others - set(backup.touched()))]:  # the lock file, untouched
                latest.setdefault(rel, rel in others)
    return [rel for rel, changed in latest.items() if changed]


def refuse_changed(changed: list[str], command: str | None = "repair") -> None:
    """Refuse a restore that would discard what something other than mqtool wrote since ``command`` applied."""
    if changed:
        named = [f"{rel} (written by every broker start)" if rel == LOCK_FILE else rel for rel in changed]
        shown = ", ".join(named[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        later = "" if LOCK_FILE in changed else "if a later mqtool command whose backup is in another folder made them, restore that backup first; else "
        raise Refused(
            f"{len(changed)} file(s) changed after the {command or 'apply'} by something other than mqtool ({shown}); "
            "restoring would discard those changes: "
            f"{later}pass --force to restore anyway"
        )


def moved_line(was: Path, what: str = "apply") -> str:
    """What an unfinished apply (or ``repair``) on a store moved since it began (``moved_from``) asks first."""
    return f"the store was at {shell_path(was)} when that {what} began (moved or renamed since): move it back there"


def refuse_moved(root: Path) -> None:
    """Before any change: a store moved or renamed since its backup was made is no longer where restore puts files back."""
    if not root.is_dir():
        raise BadInput(f"{root}: the store this backup belongs to does not exist (moved or renamed since?): restore puts files back at "
                       "that path only: move the store back there, then restore")


def refuse_incomplete(backups: list[BackupSet]) -> None:
    """Before any change: a backup that lost kept bytes (``missing_copies``) cannot give the store back."""
    for backup in backups:
        if missing := ([] if backup.restored else backup.missing_copies()):
            shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
            raise BadInput(f"{backup.dir}: the backup no longer holds what it kept of {len(missing)} file(s) ({shown}): its copies or "
                           "journal.jsonl deleted or cut since it was made; nothing was restored by this run: put the backup's files back "
                           "and run the restore again")


def unfinished_restore_line(pending: Path) -> str:
    """What a stopped restore of ``pending`` left, and the ``restore`` that finishes it."""
    return (f"a restore on this store was interrupted (backup {shell_path(pending)}): the store is partly restored; "
            f"finish it with: {undo_command(pending)}")


def restore(backup: BackupSet, *, force: bool = False) -> dict:
    """Undo every journal event in reverse (bytes and mtimes back, created files deleted), after freeing the room the originals
    need (``_make_room``). Idempotent; refuses when something else changed the files the apply left, unless ``force``."""
    root = backup.store_root
    refuse_moved(root)
    refuse_incomplete([backup])
    if not force and not backup.restored:
        refuse_changed(backup.changed_since_apply(), backup.manifest.get("command"))
    pending = read_pending(root)
    ours = pending is not None and pending.resolve() == backup.dir.resolve()
    earlier = leftover_temporaries(root) if pending is None or ours else []  # what an earlier run left
    backup.journal.append({"ev": "restore-started"})
    if pending is None:  # cut short, the restore is then said by ``info`` and refused as an apply to finish
        with_room(backup.dir / RESERVE, len(str(backup.dir.resolve()).encode()), functools.partial(write_pending, root, backup.dir), root)
        ours = True
    for p in earlier:  # first: on a full disk their room is the restore's
        shutil.rmtree(p) if p.is_dir() else remove(p)
    restored = []
    events = list(reversed(backup.journal.events()))
    deleted = _make_room(backup, events)

    def total() -> int:  # the bytes put back: whole segments a recovery deleted can be gigabytes
        size = sum(ev["end"] - ev["start"] for ev in events if ev.get("ev") == "backup-range")
        for ev in events:
            if ev.get("ev") == "backup-file":
                with contextlib.suppress(OSError):  # the copy is missing: restore says so when it reaches it
                    size += backup.file_copy(ev["path"]).stat().st_size
        return size

    put_back = _bytes_progress("restore", total)
    for ev in events:
        kind, rel = ev.get("ev"), ev.get("path")
        target = root / rel if rel else None
        if kind == "backup-file":
            makedirs(target.parent, like_parent=True)
            tmp = work_path(root, target)
            with deleted_on_failure(tmp), left_unchanged(target):  # beside the file on another disk: the broker would list it
                _put_back(backup.file_copy(rel), tmp, ev.get("how"), put_back)
                _set_mtime(tmp, ev.get("mtime_ns"))
                kept = (ev["uid"], ev["gid"], ev["mode"]) if "uid" in ev else owner_for(target)  # else a journal before owners were kept
                install(tmp, target, kept)
            remove(beside(target))  # what an ``install`` across file systems that was killed left
            fsync_dir(target.parent)
            restored.append(rel)
        elif kind == "backup-range":
            if target.exists():
                backup.journal.append({"ev": "restore-range", "path": rel})  # stopped inside it, the restore is still ours to finish
                with left_unchanged(target):  # refused before a byte was written (an immutable file): said so
                    put_range(backup.range_copy(rel, ev["start"], ev["end"]), target, ev["start"])  # its zeros holes again
                _set_mtime(target, ev.get("mtime_ns"))
                restored.append(f"{rel}[{ev['start']}:{ev['end']}]")
                if put_back is not None:
                    put_back(ev["end"] - ev["start"])
        elif kind == "move-entry":
            moved = backup.moved_copy(rel)
            if not os.path.lexists(moved):  # a kill before the rename or the copy's own moved nothing
                continue
            if ev.get("how") == "copy":  # copied from another file system: what is there is its original, whole or part-deleted
                remove_entry(target)
                makedirs(target.parent, like_parent=True)
                copy_entry(moved, target)
                restored.append(rel)
            elif not os.path.lexists(target):
                makedirs(target.parent, like_parent=True)
                try:
                    os.rename(moved, target)
                except OSError as exc:
                    if exc.errno != errno.EXDEV:
                        raise
                    copy_entry(moved, target)  # the backup moved to another disk since
                fsync_dir(target.parent)
                restored.append(rel)
        elif kind == "create-dir":  # the files created in it deleted first (``_make_room``)
            try:
                target.rmdir()  # only when empty: anything else put there stays
            except (FileNotFoundError, OSError):
                continue
            fsync_dir(target.parent)
    if ours:  # this restore's marker (``pending`` None: it wrote one)
        clear_pending(root)
        remove_leftovers(root)  # this restore's own staging, and what an earlier run left
        fsync_dir(root)
    backup.journal.append({"ev": "restored", "ms": int(time.time() * 1000)})
    remove(backup.dir / RESERVE)  # the room kept for this restore's records
    clear_repair_mark(root, unless_applied=True)  # the last stage of a stopped repair undone: so is the repair
    return {"backup": str(backup.dir), "store": str(root), "restored": restored, "deleted": deleted, "temporaries_removed": [str(p.relative_to(root)) for p in earlier]}


def _make_room(backup: BackupSet, events: list[dict]) -> list[str]:
    """Delete the store files the apply created or replaced whole (their originals are whole in the backup; a symlink stays), so a
    restore on a full disk has room. Returns the created files deleted."""
    root, deleted = backup.store_root, []
    for ev in events:
        kind, rel = ev.get("ev"), ev.get("path")
        if kind == "create" or (kind == "backup-file" and "uid" in ev and not (root / rel).is_symlink()):
            remove(beside(root / rel))
            if remove(root / rel) and kind == "create":
                deleted.append(rel)
    return deleted


def _put_back(copy: Path, tmp: Path, how: str | None, copied) -> None:
    """The kept ``copy`` at ``tmp``: a hard link where the backup made one (``how`` "link"), else a copy."""
    if how == "link":
        tmp.unlink(missing_ok=True)
        try:
            os.link(copy, tmp)
            if copied is not None:  # put back whole: the restore's bar counts every file it restores (``total``)
                copied(tmp.stat().st_size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):  # the backup moved to another disk
                raise
    copy_sparse(copy, tmp, copied)


def _bytes_progress(stage: str, total: Callable[[], int]):
    """A function told the bytes copied (``activity``: one bar of ``total()`` bytes), or None."""
    if activity.listener() is None:
        return None
    reached, done = None, 0

    def copied(n: int) -> None:
        nonlocal reached, done
        if reached is None:
            reached = activity.reporter(stage, 0, total())
        done += n
        reached(done)

    return copied


def _set_mtime(path: Path, mtime_ns: int | None) -> None:
    """Give a restored file the mtime it had when it was backed up (its atime stays)."""
    if mtime_ns is not None:
        os.utime(path, ns=(os.stat(path).st_atime_ns, mtime_ns))
