"""Resynchronisation in pure Python: ``fastscan.scan_start``'s rule without loading numba.

Where a scan asked to begin at ``offset`` begins (``dump --from-offset`` inside a record): at
``offset`` when a record or an end-of-file blank decodes there (``decode_record``: the checks of
``CommitLog.checkMessageAndReturnSize``, which ``fastscan.walk_segment`` applies), otherwise at the
first later position where the log can be resumed (reference §8.9, the broker never zeroes what it
cuts): a message record whose magic, size chain and self-describing PHYSICALOFFSET agree for
``chain`` records (fewer where the chain meets a blank record, zeros or the segment end), or an
end-of-file blank whose TOTALSIZE is exactly the bytes left in its segment; the next segment's
start when the rest of a segment holds none; ``offset`` itself when nothing can be resumed.

The candidates come from ``mmap.find`` of the magic codes (both message magics share the prefix
``DA A3 20``), so the search runs at memory speed over zeros and bodies. It stops after ``window``
bytes or ``MAX_CANDIDATES`` candidates that fail and hands over to the compiled search
(``fastscan.scan_start``, from ``offset``: same rule, same answer). Which engine, and the window,
is the engine policy's (``mqtool.cli.engine.resync_window``; version detection keeps ``WINDOW``); tests hold the two equal on every
fixture and on damaged copies, offset by offset.
"""

from __future__ import annotations

from ..formats import commitlog as fmt
from ..formats.errors import FormatError
from .commitlog import CommitLog
from .mappedfile import MappedFile

CHAIN = 3  # records that must chain after a candidate (``fastscan.RESYNC_CHAIN``; a test holds them equal)
MAX_CANDIDATES = 4096  # candidates that fail before the compiled search takes over (magic bytes inside bodies)
WINDOW = 8 << 20  # bytes searched here before the compiled search takes over (``engine.resync_window``)
_MESSAGE_MAGICS = {(m & 0xFFFFFFFF).to_bytes(4, "big") for m in fmt.MESSAGE_MAGICS}
_MESSAGE_PREFIX = next(iter(_MESSAGE_MAGICS))[:3]
_BLANK = (fmt.BLANK_MAGIC & 0xFFFFFFFF).to_bytes(4, "big")
assert all(m[:3] == _MESSAGE_PREFIX for m in _MESSAGE_MAGICS)


class _Exhausted(Exception):
    """The pure-Python search gave up (window or candidate budget spent)."""


def scan_start(commitlog: CommitLog, offset: int, *, window: int | None = WINDOW, chain: int = CHAIN) -> int:
    """``fastscan.scan_start(commitlog, offset, chain)``, searched here for up to ``window`` bytes
    (None: no limit), by the compiled search past it (0: at once)."""
    if window != 0:
        try:
            return python_scan_start(commitlog, offset, window=window, chain=chain)
        except _Exhausted:
            pass
    from .fastscan import scan_start as compiled_scan_start  # numba: only past the window

    return compiled_scan_start(commitlog, offset, chain)


def python_scan_start(commitlog: CommitLog, offset: int, *, window: int | None = None, chain: int = CHAIN) -> int:
    """The pure-Python engine; raises ``_Exhausted`` when ``window`` bytes did not settle it."""
    index = commitlog.segment_index(offset)
    if index is None:
        return offset
    budget = [MAX_CANDIDATES]
    for i in range(index, len(commitlog.segments)):
        seg = commitlog.segments[i]
        pos = offset - seg.base_offset if i == index else 0
        with MappedFile(seg.path, seg.base_offset) as mf:
            buf, end = mf.buf, mf.size
            if i == index:
                try:
                    fmt.decode_record(buf, pos, seg.base_offset, end)
                    return offset  # a record or a blank starts here
                except FormatError:
                    pass
            stop = end if window is None else min(end, pos + window)
            found = find_record_start(buf, pos, stop, seg.base_offset, chain, budget)
        if found >= 0:
            return seg.base_offset + found
        if stop < end:
            raise _Exhausted
        if window is not None:
            window -= end - pos
    return offset


def find_record_start(buf, start: int, stop: int, base: int, chain: int, budget: list[int]) -> int:
    """``fastscan.find_record_start``: the first position in ``[start, stop)`` of ``buf`` (one
    segment's bytes, at commit log offset ``base``) where the log can be resumed, or -1.
    ``budget[0]`` counts down the message candidates examined (``_Exhausted`` at 0)."""
    end = len(buf)
    limit = min(stop, end - 8 + 1)
    p = start
    while p < limit:
        message = _next(buf, _MESSAGE_PREFIX, p, limit)
        before = message if message >= 0 else limit
        blank = _next(buf, _BLANK, p, before)  # only up to the message candidate: blanks are rare
        while blank >= 0:
            if int.from_bytes(buf[blank : blank + 4], "big", signed=True) == end - blank:
                return blank
            blank = _next(buf, _BLANK, blank + 1, before)
        if message < 0:
            return -1
        if buf[message + 4 : message + 8] in _MESSAGE_MAGICS:
            if chain_holds(buf, message, base, chain):
                return message
            budget[0] -= 1
            if budget[0] <= 0:
                raise _Exhausted
        p = message + 1
    return -1


def chain_holds(buf, p: int, base: int, chain: int) -> bool:
    """``fastscan.chain_holds``: the record at ``p`` decodes, its PHYSICALOFFSET is ``base + p``,
    and so for the records after it, ``chain`` in all (fewer at a blank, zeros or the end)."""
    end = len(buf)
    q = p
    for i in range(chain):
        if q >= end:
            return i > 0
        if i > 0 and end - q >= 8 and buf[q + 4 : q + 8] == _BLANK:
            return True
        try:
            record = fmt.decode_record(buf, q, base, end)
        except FormatError:
            return i > 0 and not any(buf[q : min(q + 8, end)])  # walk_segment's END_ZEROS
        if isinstance(record, fmt.BlankRecord) or record.phys_offset != base + q:
            return False
        q += record.total_size
    return True


def _next(buf, magic: bytes, start: int, limit: int) -> int:
    """The first ``p`` in ``[start, limit)`` whose MAGICCODE bytes begin with ``magic``, or -1."""
    found = buf.find(magic, start + 4, limit + 3 + len(magic))
    return found - 4 if found >= 0 else -1
