"""Durable file operations for ``mqtool.apply``: every change on disk before the journal says so."""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import shutil
import stat
from pathlib import Path
from typing import Callable, Iterator

CHUNK = 1 << 22
WRITE_REFUSED = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS)  # what only a write is refused with
REFUSED = WRITE_REFUSED + (errno.EACCES, errno.EPERM)  # a write refused, the file's folder or the file system not writable
TMP_SUFFIX = ".mqtool-tmp"  # write_atomic's temporary file, beside the file or in its tmp_dir
Owner = tuple[int, int, int | None]  # uid, gid, permission bits (None: as created)


def shell_path(path) -> str:
    """``path`` as typed in a POSIX shell: quoted where needed, ``./`` before a relative one starting with ``-``."""
    text = str(path)
    return shlex.quote(f"./{text}" if text.startswith("-") else text)


def salvage_command(store) -> str:
    """The pasteable ``salvage`` a damage note gives: every readable message out before a ``--yes`` zeroes the cut."""
    return f"mqtool salvage {shell_path(store)} -f jsonl --body base64 --out FILE"


def fsync_path(path: Path) -> None:
    """fsync a file or directory (renames durable); a special file is never opened: its folder's fsync keeps it."""
    if special(os.stat(path).st_mode):
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


fsync_dir = fsync_path


def makedirs(path: Path, *, synced: set[Path] | None = None, like_parent: bool = False) -> list[Path]:
    """``mkdir -p`` fsyncing each new directory's parent (or adding it to ``synced``); ``like_parent``: owner and mode."""
    missing, p = [], Path(path)
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        if like_parent and set_owner(d, owner_of(d.parent)):
            fsync_path(d)
        fsync_dir(d.parent) if synced is None else synced.add(d.parent)
    return missing


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """A refused write (full, quota, read-only) said with the file it was writing, not a bare errno text."""
    try:
        yield
    except OSError as exc:
        raise named(exc, path) from None


def named(exc: OSError, path: Path) -> OSError:
    """``exc`` said with ``path`` where it is a write refused (``naming``) that names no file; else ``exc`` itself."""
    return exc if exc.filename is not None or exc.errno not in WRITE_REFUSED else OSError(exc.errno, exc.strerror, str(path))


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def left_unchanged(path: Path) -> Iterator[None]:
    """A write refused (``REFUSED``) while ``path`` was being replaced via a temporary file, said as ``path``'s, which is as it
    was (or still absent): not the temporary file's name, which the user never gave and which is removed."""
    before = _identity(path)
    try:
        yield
    except OSError as exc:
        if exc.errno not in REFUSED or _identity(path) != before:  # replaced after all: the error as it is
            raise
        reason = exc.strerror or os.strerror(exc.errno)
        raise OSError(exc.errno, f"{reason}; {'left unchanged' if before else 'not created'}", str(path)) from None


def special(mode: int) -> bool:
    """A FIFO, socket or device node: opened to be read, a FIFO waits for a writer and a device reads the device."""
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


A_DIRECTORY, A_SPECIAL, A_SOCKET = "a directory", "a FIFO, socket or device node", "a socket"


def not_a_file(path: Path) -> str | None:
    """What is at ``path`` where the broker finds no file it can read: ``A_DIRECTORY``, ``A_SOCKET``, ``A_SPECIAL``, or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return A_DIRECTORY if stat.S_ISDIR(mode) else A_SOCKET if stat.S_ISSOCK(mode) else A_SPECIAL if special(mode) else None


def copy_sparse(src: Path, dst: Path, copied: Callable[[int], None] | None = None) -> None:
    """Copy ``src`` to ``dst`` without zero blocks, fsynced; a ``special`` file made anew; a failed copy deleted."""
    st = os.stat(src)
    with deleted_on_failure(dst):
        if special(st.st_mode):
            Path(dst).unlink(missing_ok=True)
            os.mknod(dst, st.st_mode, st.st_rdev)
            return
        with naming(dst), open(src, "rb") as fin, open(dst, "wb") as fout:
            size = os.fstat(fin.fileno()).st_size
            for block in iter(lambda: fin.read(CHUNK), b""):
                if block.count(0) == len(block):
                    fout.seek(len(block), os.SEEK_CUR)
                else:
                    fout.write(block)
                if copied is not None:
                    copied(len(block))
            fout.truncate(size)
            fout.flush()
            os.fsync(fout.fileno())


def beside(path: Path) -> Path:
    """The temporary name of a file written in ``path``'s own folder, on its file system."""
    return path.with_name(path.name + TMP_SUFFIX)


def owner_of(path: Path) -> Owner:
    st = os.stat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def owner_for(target: Path) -> Owner:
    """The owner and mode for a file written in place of ``target``: its own, the folder's last file's, or the folder's."""
    with contextlib.suppress(FileNotFoundError):
        return owner_of(target)
    with os.scandir(target.parent) as entries:
        files = [e.name for e in entries if e.is_file(follow_symlinks=False) and not e.name.endswith(TMP_SUFFIX)]
    return owner_of(target.parent / max(files)) if files else (*owner_of(target.parent)[:2], None)


def set_owner(path: Path, owner: Owner | None) -> bool:
    """Give ``path`` ``owner``'s ids and bits (None: leave it), where allowed; True if anything changed."""
    if owner is None:
        return False
    uid, gid, mode = owner
    st = os.lstat(path)
    changed = False
    if (st.st_uid, st.st_gid) != (uid, gid):
        with contextlib.suppress(PermissionError):
            os.chown(path, uid, gid)  # clears set-user-ID bits: the mode after
            changed = True
    if mode is not None and stat.S_IMODE(os.lstat(path).st_mode) != mode:
        os.chmod(path, mode)
        changed = True
    return changed


def install(tmp: Path, target: Path, owner: Owner | None = None) -> None:
    """Put the fsynced ``tmp`` in place of ``target`` whole, with ``owner`` (rename, or a copy across file systems)."""
    if set_owner(tmp, owner):
        fsync_path(tmp)
    linked = os.path.islink(target) and os.path.isfile(target)
    target = Path(os.path.realpath(target)) if linked else target
    try:
        os.replace(tmp, target)
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
        with deleted_on_failure(beside(target)) as near:  # a full disk or a Ctrl-C leaves no partial copy in the store's folder
            copy_sparse(tmp, near)
            st = os.stat(tmp)
            set_owner(near, owner_of(tmp))
            os.utime(near, ns=(st.st_atime_ns, st.st_mtime_ns))
            fsync_path(near)
            os.replace(near, target)
        os.unlink(tmp)
    if linked:
        fsync_dir(target.parent)


def _raise(error: OSError) -> None:
    raise error


def copy_entry(src: Path, dst: Path) -> None:
    """Copy a tree or symlink as it is (owners, modes, mtimes), fsynced, via ``beside(dst)``; a failed copy is deleted."""
    part = beside(dst)
    remove_entry(part)  # what a killed copy left
    made = []  # each folder before what it holds
    try:
        for folder, dirs, files in os.walk(src, onerror=_raise) if not src.is_symlink() else [(src, [], [])]:
            here = part / os.path.relpath(folder, src)
            for name in ["", *(d for d in dirs if Path(folder, d).is_symlink()), *files]:  # "": the folder itself
                source, copy = Path(folder, name), here / name
                if source.is_symlink():
                    os.symlink(os.readlink(source), copy)
                elif source.is_dir():
                    os.mkdir(copy)
                else:
                    copy_sparse(source, copy)
                made.append(copy)
        for path in reversed(made):  # a folder after what it holds
            st = os.lstat(src / path.relative_to(part))
            with contextlib.suppress(PermissionError):  # an owner only root may give stays the runner's (``set_owner``)
                os.chown(path, st.st_uid, st.st_gid, follow_symlinks=False)
            if not path.is_symlink():
                os.chmod(path, stat.S_IMODE(st.st_mode))  # after the chown, which clears set-user-ID bits
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
                fsync_path(path)
        os.rename(part, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            remove_entry(part)
        raise
    fsync_dir(dst.parent)


def remove_entry(path: Path) -> None:
    """Delete a file, symlink or directory tree (nothing if absent), then fsync its folder."""
    if not os.path.lexists(path):
        return
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    fsync_dir(path.parent)


def link_or_copy(src: Path, dst: Path, *, synced: set[Path] | None = None, copied: Callable[[int], None] | None = None) -> str:
    """Make ``dst`` hold ``src``'s bytes by a hard link, else a sparse copy; durable once ``synced`` is fsynced."""
    makedirs(dst.parent, synced=synced)
    tmp = dst.with_name(dst.name + ".part")
    tmp.unlink(missing_ok=True)
    with deleted_on_failure(tmp):  # no partial copy left in the backup
        try:
            os.link(os.path.realpath(src), tmp)
            how = "link"
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            copy_sparse(src, tmp, copied)
            how = "copy"
        os.replace(tmp, dst)
    fsync_dir(dst.parent) if synced is None else synced.add(dst.parent)
    return how


def write_atomic(path: Path, data: bytes, tmp_dir: Path | None = None, owner: Owner | None = None) -> None:
    """Replace ``path`` with ``data``: write a temporary file, fsync, ``install`` it (with ``owner``), fsync the directory; a
    refused write is said as ``path``'s, left unchanged (``left_unchanged``)."""
    tmp_dir = tmp_dir or path.parent
    makedirs(tmp_dir)
    tmp = tmp_dir / (path.name + TMP_SUFFIX)
    with deleted_on_failure(tmp), left_unchanged(path):  # a full disk leaves no partial temporary file behind
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        install(tmp, path, owner)
    fsync_dir(path.parent)


def read_range(path: Path, start: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


def pwrite_all(fd: int, data, offset: int) -> None:
    """``os.pwrite`` of all of ``data`` at ``offset``, completing short writes or failing with the reason."""
    view = memoryview(data).cast("B")
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _overwrite(path: Path, start: int, end: int, piece: Callable[[int, int], bytes | memoryview]) -> None:
    """Overwrite ``[start, end)`` in place, ``piece(pos, n)`` giving the (up to CHUNK) bytes at ``pos``, then fsync."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for pos in range(start, end, CHUNK):
            pwrite_all(fd, piece(pos, min(CHUNK, end - pos)), pos)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_range(path: Path, start: int, data: bytes) -> None:
    """Overwrite ``data`` at ``start`` in place, then fsync."""
    view = memoryview(data)
    _overwrite(path, start, start + len(view), lambda pos, n: view[pos - start : pos - start + n])


def zero_range(path: Path, start: int, end: int) -> None:
    """Overwrite ``[start, end)`` with zeros in place, then fsync."""
    zeros = bytes(min(CHUNK, max(end - start, 0)))
    _overwrite(path, start, end, lambda pos, n: zeros[:n])


@contextlib.contextmanager
def deleted_on_failure(path: Path) -> Iterator[Path]:
    """A failed write of ``path`` (full disk, EIO, Ctrl-C) leaves no part-written regular file; its own error is said."""
    try:
        yield path
    except BaseException:
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
        raise


def remove(path: Path) -> bool:
    """Delete ``path`` and fsync its directory; False if it was already gone."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_dir(path.parent)
    return True
