"""The one resynchronisation of a scan asked to begin inside a record (reference §8.9; ``_fastscan``)."""

from __future__ import annotations

from ..formats.dledger import ENTRY_HEADER_SIZE
from ._fastscan import find_record_start, resume_at
from .commitlog import CommitLog
from .mappedfile import MappedFile

RESYNC_CHAIN = 3  # records that must chain after a resynchronisation candidate


def record_start(commitlog: CommitLog, offset: int) -> int:
    """Where ``--from-offset offset`` reads from: the min offset, that offset at a record start, else ``scan_start``."""
    from ..formats.errors import FormatError

    offset = max(offset, commitlog.min_offset)
    try:  # a record (or end-of-file blank) starts there: nothing to search
        commitlog.read_record(offset)
        return offset
    except (FormatError, LookupError):
        return scan_start(commitlog, offset)


def record_start_note(asked: int, start: int, min_offset: int) -> str | None:
    """What ``dump`` and Spark say when ``--from-offset asked`` reads from ``start`` instead; None when it does not."""
    if start == max(asked, min_offset):
        return None
    return f"--from-offset {asked} is not a record start; reading from the next record at {start}"


def scan_start(commitlog: CommitLog, offset: int) -> int:
    """Where a scan asked to begin at ``offset`` begins (the module's rule)."""
    found = resume_after(commitlog, offset)
    return offset if found is None else found


def resume_after(commitlog: CommitLog, offset: int, chain: int = RESYNC_CHAIN, *, entries: bool = True) -> int | None:
    """The first position at or after ``offset`` where the log can be resumed (``entries``: DLedger entries, §15.2), or None."""
    entry_file = getattr(commitlog, "is_entry_file", lambda seg: False)
    for _, seg, pos in commitlog.segments_from(offset):
        with MappedFile(seg.path, seg.base_offset) as mf:
            if entry_file(seg) and not entries:
                found = find_record_start(mf.buf, pos, mf.size, seg.base_offset, 0, blanks=False)
            elif entry_file(seg):
                found = find_record_start(mf.buf, max(pos - ENTRY_HEADER_SIZE, 0), mf.size, seg.base_offset, 0, entries=True, blanks=False)
                found += ENTRY_HEADER_SIZE if found >= 0 else 0
            else:
                found = resume_at(mf.buf, pos, seg.base_offset, chain)
        if found >= 0:
            return seg.base_offset + found
    return None
