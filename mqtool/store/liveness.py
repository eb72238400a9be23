"""Is anything using this store? (reference §14): the ``lock`` file's POSIX lock, and ``/proc/<pid>/fd`` and ``maps``."""

from __future__ import annotations

import fcntl
import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..formats.markers import LOCK_FILE

_FLOCK = "hhqqi"  # struct flock on Linux: l_type, l_whence, l_start, l_len, l_pid


@dataclass(frozen=True)
class StoreUser:
    pid: int
    how: str  # "lock" | "open" | "mapped"
    path: str
    command: str


def lock_holder(store_root: Path) -> int | None:
    """PID of the process holding a lock on ``<root>/lock`` (None: not locked or no lock file)."""
    path = Path(store_root) / LOCK_FILE
    try:
        if (mode := os.stat(path).st_mode) and (stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):  # never opened
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO there: opened without waiting for a writer
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        result = fcntl.fcntl(fd, fcntl.F_GETLK, query)
        l_type, _, _, _, pid = struct.unpack(_FLOCK, result[: struct.calcsize(_FLOCK)])
        return pid if l_type != fcntl.F_UNLCK else None
    except OSError:
        return None
    finally:
        os.close(fd)


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(raw.decode("utf-8", "replace").replace("\0", " ").split())  # one line: an argument may hold newlines (`python -c`)
    return text if len(text) <= 120 else text[:117] + "..."


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def processes_using(paths: Iterable[Path]) -> list[StoreUser]:
    """Processes with a file under any of ``paths`` open (``/proc/*/fd``) or mapped (``/proc/*/maps``)."""
    roots = tuple(sorted({os.path.realpath(p) for p in paths}))
    me = os.getpid()
    users: list[StoreUser] = []
    try:
        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return users
    for pid in pids:
        if pid == me:
            continue
        found: set[tuple[str, str]] = set()
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if _under(target, roots):
                    found.add((target, "open"))
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                text = maps.read()
            for line in text.split("\n") if any(r in text for r in roots) else ():  # most map nothing of it
                parts = line.split(None, 5)
                if len(parts) == 6:
                    target = parts[5].strip().removesuffix(" (deleted)")
                    if _under(target, roots):
                        found.add((target, "mapped"))
        except OSError:
            pass
        if found:
            command = _command(pid)
            users += [StoreUser(pid, how, path, command) for path, how in sorted(found)]
    return users


def store_users(store_root: Path, extra_dirs: Iterable[Path] = ()) -> list[StoreUser]:
    """Every sign that the store is in use: the lock holder first, then open or mapped files."""
    users = []
    holder = lock_holder(store_root)
    if holder is not None:
        users.append(StoreUser(holder, "lock", str(Path(store_root) / LOCK_FILE), _command(holder)))
    users += processes_using([Path(store_root), *extra_dirs])
    return users
