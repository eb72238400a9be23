"""Read-only memory maps of store files (the offline counterpart of ``MappedFile``)."""

from __future__ import annotations

import mmap
import os
import pwd
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import EXIT_BAD_INPUT, BadInput, BadStoreFile
from ..fileops import not_a_file, special

OFFSET_NAME = re.compile(r"^\d{20}$")
"""File-queue files are named by their first byte offset, 20 zero-padded digits (§1.2)."""
OFFSET, QUEUE_ID = "offset", "queue id"  # what a folder's load reads an entry's name as (``StrayEntry.named_by``)


def offset_file_name(offset: int) -> str:
    """The name of the file-queue file starting at ``offset`` (``OFFSET_NAME``)."""
    return f"{offset:020d}"


def open_read_only(path: Path) -> int:
    """A read-only descriptor of a store file; an unopenable or special file is one line of error."""
    try:
        if special(os.stat(path).st_mode):
            raise BadInput(f"{path}: a FIFO, socket or device node, not a file: mqtool never opens one; move it out of the store")
        return os.open(path, os.O_RDONLY)
    except PermissionError:
        raise BadInput(f"{path}: permission denied") from None
    except FileNotFoundError:
        raise BadStoreFile(f"{path}: file disappeared while reading the store") from None
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror}") from None


class MappedFile:
    """One store file mapped read-only; ``buf`` slices and unpacks (no view outlives ``close``); empty for 0 bytes."""

    __slots__ = ("path", "base_offset", "size", "_map")

    def __init__(self, path: Path, base_offset: int = 0, *, sequential: bool = False):
        self.path = path if isinstance(path, Path) else Path(path)  # Path(a Path) parses it again
        self.base_offset = base_offset
        fd = open_read_only(self.path)
        try:
            self.size = os.fstat(fd).st_size
            self._map = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ) if self.size else None
        except (OSError, ValueError) as exc:
            raise BadInput(f"{self.path}: cannot map file: {exc}") from None
        finally:
            os.close(fd)
        if sequential and self._map is not None:
            self._map.madvise(mmap.MADV_SEQUENTIAL)

    @property
    def buf(self):
        return self._map if self._map is not None else b""

    def close(self) -> None:
        """Unmap now, or, while a numpy view still exports the buffer, when the last view dies."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass
            self._map = None

    def __enter__(self) -> "MappedFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def offset_named_files(directory: Path) -> list[tuple[int, Path]]:
    """``(first offset, path)`` of the 20-digit-named regular files in ``directory``, sorted."""
    return folder_entries(directory)[0]


def _is_offset_named_file(e: os.DirEntry) -> bool:
    return bool(OFFSET_NAME.match(e.name)) and e.is_file()


def folder_entries(directory: Path, read=_is_offset_named_file, entries: list[os.DirEntry] | None = None
                   ) -> tuple[list[tuple[int, Path]], list["StrayEntry"]]:
    """One listing of a mapped file queue folder: the files mqtool reads (``read``) and the other entries (``StrayEntry``)."""
    from ..formats.dispatch import java_int_or_none

    if entries is None:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            return [], []
        except NotADirectoryError:
            raise BadInput(f"{directory}: not a directory") from None
        except PermissionError:
            raise BadInput(f"{directory}: permission denied") from None
    last = entries[-1].name if entries else None
    files, strays = [], []
    for e in entries:
        if read(e):
            files.append((int(e.name), Path(e.path)))
            continue
        try:
            length = os.stat(e.path).st_size
        except OSError:  # a dangling symlink: File.length() is 0
            length = 0
        strays.append(StrayEntry(Path(e.path), e.is_dir(), length, java_int_or_none(e.name, 64), e.name == last))
    return sorted(files), strays


# a dangling symlink in a mapped file queue folder (``StrayEntry.unmounted``) reads 0 bytes: refused, left out or deleted by the
# load, a started broker writes new data at its offset (rules §2.13); in ``index/`` only the keys its file held are lost
UNMOUNTED = "its data may be on a disk that is not mounted"


def unmounted_text(path: Path) -> str:
    """``UNMOUNTED`` of a dangling link at ``path``, with what a start without it does and the way out."""
    overwritten = "" if path.parent.name == "index" else ", and a broker that starts without it writes new data at its offset"
    return f"{UNMOUNTED}{overwritten}: mount the disk, or remove the link yourself if that data is truly gone"


@dataclass(frozen=True)
class StrayEntry:
    """An entry ``MappedFileQueue.load`` lists that mqtool does not read: ``is_dir``, ``length``, ``offset`` as Java sees them."""

    path: Path
    is_dir: bool
    length: int
    offset: int | None
    last: bool  # the last entry of the folder by name (``doLoad``'s ``i == files.size() - 1``)
    named_by: str = OFFSET  # what its folder's load reads its name as: OFFSET (a mapped file queue's file) or QUEUE_ID

    @property
    def target(self) -> str | None:
        """Where a dangling symlink points (None: no symlink, or one to something there)."""
        return os.readlink(self.path) if self.path.is_symlink() and not self.path.exists() else None

    @property
    def created(self) -> str | None:
        """The path ``IndexService.load`` creates through this entry (``created_through``), or None."""
        return created_through(self.path)

    @property
    def creator(self) -> str | None:
        """Who ``IndexService.load`` runs as and whether they can create this link's target (``link_creator``), or None."""
        if self.target is None or not os.path.isdir(folder := os.path.dirname(os.path.realpath(self.path))):
            return None
        who, can = link_creator(self.path)
        return f"the broker, taken to run as {who}, {'can' if can else 'cannot'} write in {folder}"

    @property
    def unmounted(self) -> str | None:
        """Why no command may move this entry out (``UNMOUNTED``: a dangling symlink, maybe to an unmounted disk), or None."""
        return f"{self.what}: {unmounted_text(self.path)}" if self.target is not None and self.named_as_file else None

    @property
    def named_as_file(self) -> bool:
        """Named as a file of its folder (20 digits): an entry of a mapped file queue folder, not of a topic's."""
        return self.named_by == OFFSET and bool(OFFSET_NAME.match(self.path.name))

    @property
    def what(self) -> str:
        link = self.path.is_symlink()
        if self.is_dir:
            return "a symlink to a directory" if link else "a directory"
        if (target := self.target) is not None:  # named: a disk not mounted is mounted, not moved out
            return f"a dangling symlink to {target}"
        if self.named_as_file:  # named as a file of the folder, not read as one: a FIFO, socket or device node
            return f"{'a symlink to ' if link else ''}{not_a_file(self.path) or 'a file mqtool cannot stat'}"
        named = f"named by no {self.named_by}" if self.offset is None else f"named {self.offset}, not by 20 digits"
        return f"{'a symlink to a file' if link else 'a file'} {named}"


def created_through(path: Path) -> str | None:
    """The path ``RandomAccessFile`` creates through the dangling symlink ``path``, or None (``link_creator``)."""
    real = os.path.realpath(path)
    creates = os.path.islink(path) and not os.path.lexists(real) and os.path.isdir(os.path.dirname(real))
    return real if creates and link_creator(path)[1] else None


def link_creator(path: Path) -> tuple[str, bool]:
    """(who, whether they can create its target) for the dangling symlink ``path``, the broker as the store's owner."""
    owner, folder = os.stat(path.parent.parent), os.path.dirname(os.path.realpath(path))
    who = f"the store's owner (uid {owner.st_uid}, gid {owner.st_gid})"
    if owner.st_uid == os.geteuid():
        return who, os.access(folder, os.W_OK | os.X_OK)
    if os.statvfs(folder).f_flag & os.ST_RDONLY:
        return who, False
    if owner.st_uid == 0:
        return who, True
    try:
        groups = set(os.getgrouplist(pwd.getpwuid(owner.st_uid).pw_name, owner.st_gid))
    except KeyError:  # no such user here (the store of another machine): its group alone
        groups = {owner.st_gid}
    st = os.stat(folder)
    bits = st.st_mode >> 6 if st.st_uid == owner.st_uid else st.st_mode >> 3 if st.st_gid in groups else st.st_mode
    return who, bits & 0o3 == 0o3


# what a load does with an entry (``load_effect``); CREATED: ``IndexService.load`` creates a dangling symlink's target
SKIPPED, DELETED, LEFT_OUT, REFUSED, LOADED, CREATED = "skipped", "deleted", "left out", "refused", "loaded", "created"
# the loads ``load_effect`` models: mapped file queues, the index, DLedger's folders, a topic's queue folders
MAPPED_FILE_QUEUE, INDEX_SERVICE, MMAP_FILE_LIST = "MappedFileQueue.load", "IndexService.load", "MmapFileList.load"
LOAD_CONSUME_QUEUE = "DefaultMessageStore.loadConsumeQueue"


def load_effect(entry: StrayEntry, file_size: int | None, rules, loader: str = MAPPED_FILE_QUEUE) -> str:
    """What the broker of ``rules`` does with ``entry`` at load (rules §2.13) by ``loader``."""
    if loader == LOAD_CONSUME_QUEUE:
        return SKIPPED if rules.queue_id_parse_caught else REFUSED
    if loader == INDEX_SERVICE:
        if entry.offset is None:
            return SKIPPED
        if entry.created is not None:
            return CREATED
        if entry.is_dir or not entry.path.exists():
            return REFUSED if rules.index_load_failure_refuses else LEFT_OUT
        return LOADED
    if loader == MMAP_FILE_LIST:
        return REFUSED if entry.length != file_size or entry.offset is None else LOADED
    if entry.is_dir and rules.load_skips_directories:
        return SKIPPED
    if entry.length == 0 and entry.last and rules.zero_length_last_file_deleted:
        return DELETED
    if entry.length != file_size:
        return LEFT_OUT if rules.wrong_length_file_ignored else REFUSED
    return REFUSED if entry.offset is None else LOADED


def last_listed(path: Path, files, strays) -> bool:
    """Whether ``path`` is its folder listing's last entry, which 5.1.3+ ``doLoad`` deletes when empty (rules §2.13)."""
    return all(p.name <= path.name for _, p in files) and all(s.path.name < path.name for s in strays)


def stray_after(path: Path, files, strays) -> StrayEntry | None:
    """The first of ``strays`` sorting after ``path`` when it is the last of ``files`` (what keeps it from ``last_listed``), or None."""
    if any(p.name > path.name for _, p in files):
        return None
    return next((s for s in strays if s.path.name > path.name), None)


def wrong_length_files(files, strays, file_size: int | None) -> list[tuple[int, Path, int, bool]]:
    """``(base, path, size, last)`` of ``files`` whose length is not ``file_size`` (rules §2.13); ``last``: ``last_listed``."""
    sizes = [(base, path, path.stat().st_size) for base, path in files]
    return [(base, path, size, last_listed(path, files, strays)) for base, path, size in sizes if size != file_size]


def stray_entries(directory: Path) -> list[StrayEntry]:
    """The entries of ``directory`` the broker lists (``File.listFiles``) that mqtool does not read as its files."""
    return folder_entries(directory)[1] if os.path.isdir(directory) else []


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror}") from None


SIGBUS_LINE = ("mqtool: error: ", "a store file", " could not be read through its memory map (SIGBUS: the file shrank while mapped, "
               "or its filesystem is full, e.g. a full tmpfs); ")  # before the file's path (``_sigbus.pyx``), the subject without one
SIGBUS_NEXT = "check the disk and run the command again"
_sigbus_handled = False
_sigbus_next = SIGBUS_NEXT  # what the line ends with now (``sigbus_says``)
_sigbus_blank = ""  # written before the line: a terminal's erase of a progress bar's line (``exit_on_sigbus``)


def sigbus_handled() -> bool:
    """Whether ``exit_on_sigbus`` was installed in this process (or the one it was forked from)."""
    return _sigbus_handled


def _install_sigbus(next_step: str, worker: bool = False) -> None:
    global _sigbus_next
    from ._sigbus import install

    before, subject, after = SIGBUS_LINE
    install(f"{_sigbus_blank}{before}".encode(), subject.encode(), f"{after}{next_step}\n".encode(), EXIT_BAD_INPUT, worker)
    _sigbus_next = next_step


def exit_on_sigbus(*, worker: bool = False, erase_line: bool = False) -> None:
    """A SIGBUS made one stderr line naming the mapped file and exit 3 by a compiled handler (``_sigbus.pyx``); ``worker``: sent to
    the parent; ``erase_line``: stderr is a terminal whose line may hold a progress bar, blanked first (as a Ctrl-C's line is).
    Called again (a command run again in the same process), installed anew: ``SIGBUS_NEXT`` and this call's ``erase_line``."""
    global _sigbus_handled, _sigbus_blank
    _sigbus_blank = "\r\x1b[K" if erase_line else ""
    _install_sigbus(SIGBUS_NEXT, worker)
    _sigbus_handled = True


def sigbus_next(message: str = SIGBUS_NEXT) -> None:
    """From now on a SIGBUS's line ends with ``message``: what state a writing command leaves the store in, and what to run."""
    if _sigbus_handled:
        _install_sigbus(message)


@contextmanager
def sigbus_says(message: str):
    """Within the block a SIGBUS's line ends with ``message`` (a writing command says what state the store is in and what to
    run); after it, with what it ended with before."""
    if not _sigbus_handled:
        yield
        return
    outer = _sigbus_next
    _install_sigbus(message)
    try:
        yield
    finally:
        _install_sigbus(outer)


def inferred_file_size(sizes) -> int:
    """A mapped file queue's size without configuration: the commonest of ``sizes``; on a tie a power of two, then larger."""
    counts = Counter(sizes)
    return max(counts, key=lambda s: (counts[s], s > 0 and s & (s - 1) == 0, s))
