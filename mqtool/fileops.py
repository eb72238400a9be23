"""Durable file operations for ``mqtool.apply``: every change on disk before the journal says so."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import shlex
import shutil
import stat
import sys
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
    """Copy ``src`` to ``dst`` without zero blocks (``_copy_blocks``), fsynced; a ``special`` file made anew; a failed copy deleted."""
    st = os.stat(src)
    with deleted_on_failure(dst):
        if special(st.st_mode):
            Path(dst).unlink(missing_ok=True)
            os.mknod(dst, st.st_mode, st.st_rdev)
            return
        with naming(dst), open(src, "rb") as fin, open(dst, "wb") as fout:
            size = os.fstat(fin.fileno()).st_size
            _copy_blocks(fin.fileno(), 0, size, fout.fileno(), 0, punch=False, copied=copied)
            fout.truncate(size)
            os.fsync(fout.fileno())


def copy_range_sparse(src: Path, start: int, end: int, dst: Path) -> None:
    """``src``'s bytes ``[start, end)`` as the new file ``dst``, without zero blocks, fsynced; a failed copy deleted."""
    with deleted_on_failure(dst), naming(dst), open(src, "rb") as fin, open(dst, "wb") as fout:
        end = max(start, min(end, os.fstat(fin.fileno()).st_size))
        _copy_blocks(fin.fileno(), start, end, fout.fileno(), 0, punch=False)
        fout.truncate(end - start)
        os.fsync(fout.fileno())


def put_range(src: Path, dst: Path, at: int) -> None:
    """``src``'s bytes written over ``dst`` from ``at`` in place, its zero blocks made holes in ``dst`` (``punch``), then fsync:
    a restore gives back a preallocated segment's holes, not gigabytes of written zeros."""
    with open(src, "rb") as fin:
        fd = os.open(dst, os.O_WRONLY)
        try:
            _copy_blocks(fin.fileno(), 0, os.fstat(fin.fileno()).st_size, fd, at, punch=True)
            os.fsync(fd)
        finally:
            os.close(fd)


def _copy_blocks(fin: int, start: int, end: int, fout: int, at: int, *, punch: bool, copied: Callable[[int], None] | None = None) -> None:
    """``fin``'s ``[start, end)`` written at ``at`` of ``fout``, a ``CHUNK`` at a time (``copied`` told each): ``fin``'s holes
    not read (``SEEK_DATA``), and ``fout``'s file-system blocks that would hold only zeros not written: left unwritten in a
    new file, ``punch``ed where ``fout`` holds other bytes."""
    block = max(os.fstat(fout).st_blksize, 512)
    step = max(block, CHUNK // block * block)
    pos = at
    while pos < at + end - start:
        upto = min(at + end - start, (pos // step + 1) * step)  # ``fout``'s chunks aligned to its blocks
        src_pos, n = pos - at + start, upto - pos
        chunk = b"" if _data_from(fin, src_pos) >= src_pos + n else os.pread(fin, n, src_pos).ljust(n, b"\0")
        run_start, zeros = pos, not chunk or chunk.count(0) == n
        if not zeros:  # runs of data blocks and of zero blocks
            edges = [pos, *range((pos // block + 1) * block, upto, block), upto]
            for lo, hi in zip(edges, edges[1:]):
                zero = chunk.count(0, lo - pos, hi - pos) == hi - lo
                if zero != zeros and lo > run_start:
                    _write_or_punch(fout, chunk, pos, run_start, lo, zeros, punch)
                    run_start = lo
                zeros = zero
        _write_or_punch(fout, chunk, pos, run_start, upto, zeros, punch)
        if copied is not None:
            copied(n)
        pos = upto


def _data_from(fd: int, pos: int) -> int:
    """Where data starts at or after ``pos`` in ``fd`` (``SEEK_DATA``; its size when none): ``pos`` where holes are not told."""
    try:
        return os.lseek(fd, pos, os.SEEK_DATA)
    except OSError as exc:
        return os.fstat(fd).st_size if exc.errno == errno.ENXIO else pos
    except AttributeError:  # no SEEK_DATA here
        return pos


def _write_or_punch(fd: int, chunk: bytes, chunk_at: int, lo: int, hi: int, zeros: bool, punch: bool) -> None:
    """``[lo, hi)`` of ``fd``: ``chunk``'s bytes written, or zeros: nothing (a new file's unwritten bytes) or a hole punched."""
    if not zeros:
        pwrite_all(fd, memoryview(chunk)[lo - chunk_at : hi - chunk_at], lo)
    elif punch and hi > lo and not punch_hole(fd, lo, hi):
        pwrite_all(fd, bytes(hi - lo), lo)


FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE = 1, 2  # <linux/falloc.h>


@functools.cache
def _fallocate() -> Callable | None:
    """Linux's ``fallocate(2)`` from the C library (Python has only ``posix_fallocate``), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    call.argtypes, call.restype = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64), ctypes.c_int
    return call


def punch_hole(fd: int, start: int, end: int) -> bool:
    """``[start, end)`` of ``fd`` made zeros by giving its whole blocks back to the disk (``FALLOC_FL_PUNCH_HOLE``, the size kept);
    False where the file system cannot (nothing changed: the caller writes the zeros)."""
    if end <= start:
        return True
    call = _fallocate()
    if call is None:
        return False
    if call(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, start, end - start) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
        return False
    raise OSError(err, os.strerror(err))


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
    with deleted_on_failure(tmp), left_unchanged(dst):  # no partial copy left in the backup; a refused copy said as ``dst``'s
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
    """Make ``[start, end)`` zeros in place, its whole blocks holes (``punch_hole``; else zeros written), then fsync: a cut of a
    preallocated segment writes no gigabytes of zeros."""
    fd = os.open(path, os.O_WRONLY)
    try:
        punched = punch_hole(fd, start, end)
        if punched:
            os.fsync(fd)
    finally:
        os.close(fd)
    if not punched:
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
