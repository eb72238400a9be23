"""The compiled walk of DLedger data files (reference §15.2, §15.4): entries around records.

``walk_entries`` applies ``DLedgerMmapFileStore.recover``'s entry checks (magic 1, ``size`` =
body length + 48, ``pos`` = the entry's own offset, index = previous + 1, term never
decreasing) and then ``fastscan.walk_segment`` (every check of ``decode_record``) to the record
inside, which must fill the body exactly. Rows are ``walk_segment`` rows: positions are those of
the records (entry + 48), so every consumer of ``FastScan`` reads DLedger data unchanged. Field
positions come from the construct schema (``formats.dledger``).
"""

from __future__ import annotations

from ..jit import numba
import numpy as np

from ..formats import dledger as dfmt
from . import fastscan as fs
from .words import be32, be64, signed32

HEADER = dfmt.ENTRY_HEADER_SIZE
_L = dfmt.ENTRY_HEADER_LAYOUT
POS_MAGIC = _L.offset_of("magic")
POS_SIZE = _L.offset_of("size")
POS_INDEX = _L.offset_of("index")
POS_TERM = _L.offset_of("term")
POS_POS = _L.offset_of("pos")
POS_BODY_SIZE = _L.offset_of("body_size")
ENTRY_MAGIC = dfmt.ENTRY_MAGIC
BLANK_MAGIC = dfmt.BLANK_MAGIC

# ``state`` slots: the previous entry's index and term (index -1: none seen yet), and why an
# entry was refused (``ENTRY_*``: the walk's code is then ``END_CORRUPT``/``END_TRUNCATED``).
ST_INDEX, ST_TERM, ST_WHY = 0, 1, 2
ENTRY_OK, ENTRY_MAGIC_BAD, ENTRY_SIZE_BAD, ENTRY_POS_BAD, ENTRY_INDEX_BAD, ENTRY_TERM_BAD, ENTRY_BODY_BAD = range(7)
ENTRY_REASONS = {
    ENTRY_MAGIC_BAD: "entry magic is not 1",
    ENTRY_SIZE_BAD: "entry size is not body length + 48",
    ENTRY_POS_BAD: "entry pos is not its own offset",
    ENTRY_INDEX_BAD: "entry index is not the previous + 1",
    ENTRY_TERM_BAD: "entry term is lower than the previous",
    ENTRY_BODY_BAD: "entry body is not exactly one message record",
}


@numba.njit(cache=True, nogil=True)
def walk_entries(buf, pos, stop, check_crc, stop_on_crc, out, base, state):
    """Walk entries from ``pos`` while ``pos < stop``; one ``out`` row per valid record.

    Returns ``walk_segment``'s ``(count, pos, code, detail)`` with ``pos`` an entry position:
    ``OK_BLANK`` at the end-of-file blank (or when an entry ends exactly at the file end), the
    entry that failed otherwise (``state[ST_WHY]`` says which header rule, 0 for the record).
    """
    end = buf.shape[0]
    count = 0
    capacity = out.shape[0]
    state[ST_WHY] = ENTRY_OK
    while True:
        if pos >= stop:
            return count, pos, fs.END_LIMIT, 0
        if pos >= end:
            return count, pos, fs.OK_BLANK, 0
        if count >= capacity:
            return count, pos, fs.END_CAPACITY, 0
        if end - pos < 8:
            zero = True
            for i in range(pos, end):
                if buf[i] != 0:
                    zero = False
            return count, pos, fs.END_ZEROS if zero else fs.END_TRUNCATED, 0
        magic = signed32(be32(buf, pos + POS_MAGIC))
        size = signed32(be32(buf, pos + POS_SIZE))
        if magic == BLANK_MAGIC:
            return count, pos, fs.OK_BLANK, size
        if magic == 0 and size == 0:
            return count, pos, fs.END_ZEROS, 0
        if magic != ENTRY_MAGIC:
            state[ST_WHY] = ENTRY_MAGIC_BAD
            return count, pos, fs.END_CORRUPT, 0
        if end - pos < HEADER:
            return count, pos, fs.END_TRUNCATED, 0
        body_size = signed32(be32(buf, pos + POS_BODY_SIZE))
        if size <= HEADER - 4 or size != body_size + HEADER:
            state[ST_WHY] = ENTRY_SIZE_BAD
            return count, pos, fs.END_CORRUPT, 0
        if be64(buf, pos + POS_POS) != base + pos:
            state[ST_WHY] = ENTRY_POS_BAD
            return count, pos, fs.END_CORRUPT, 0
        index = be64(buf, pos + POS_INDEX)
        term = be64(buf, pos + POS_TERM)
        if state[ST_INDEX] >= 0 and index != state[ST_INDEX] + 1:
            state[ST_WHY] = ENTRY_INDEX_BAD
            return count, pos, fs.END_CORRUPT, 0
        if state[ST_INDEX] >= 0 and term < state[ST_TERM]:
            state[ST_WHY] = ENTRY_TERM_BAD
            return count, pos, fs.END_CORRUPT, 0
        if pos + size > end:
            return count, pos, fs.END_TRUNCATED, 0
        n, nxt, code, detail = fs.walk_segment(buf, pos + HEADER, pos + size, check_crc, stop_on_crc, out[count : count + 1])
        if n != 1:
            if code == fs.END_LIMIT or code == fs.OK_BLANK:
                state[ST_WHY] = ENTRY_BODY_BAD
                code = fs.END_CORRUPT
            return count, pos, code, detail
        if nxt != pos + size:
            state[ST_WHY] = ENTRY_BODY_BAD
            return count, pos, fs.END_CORRUPT, 0
        state[ST_INDEX] = index
        state[ST_TERM] = term
        count += 1
        pos = nxt


@numba.njit(cache=True, nogil=True)
def find_entry_start(buf, start, stop, base):
    """The first position in ``[start, stop)`` where an entry describes itself (magic 1, ``pos``
    = its own offset, ``size`` = body length + 48) or an end-of-file blank whose size is exactly
    the bytes left; -1 when there is none. Where a split of a data file resumes."""
    end = buf.shape[0]
    limit = min(stop, end - 8 + 1)
    for p in range(start, limit):
        if buf[p + 3] == 1 and buf[p] == 0 and buf[p + 1] == 0 and buf[p + 2] == 0:
            if p + HEADER <= end and be64(buf, p + POS_POS) == base + p:
                size = signed32(be32(buf, p + POS_SIZE))
                if size > HEADER - 4 and size == signed32(be32(buf, p + POS_BODY_SIZE)) + HEADER:
                    return p
        elif buf[p] == 0xFF and buf[p + 1] == 0xFF and buf[p + 2] == 0xFF and buf[p + 3] == 0xFF:
            if signed32(be32(buf, p + POS_SIZE)) == end - p:
                return p
    return -1


class EntryWalker:
    """``FastScan``'s walk for a DLedger commit log: ``walk_entries`` with the index/term state
    carried from file to file; a segment below ``divided_offset`` (the classic commit log of a
    mixed store, §15.5) is walked as records."""

    def __init__(self, divided_offset: int = 0):
        self.divided_offset = divided_offset
        self.state = np.array([-1, -1, 0], dtype=np.int64)

    def __call__(self, array, pos, stop, check_crc, stop_on_crc, out, base):
        if base < self.divided_offset:
            return fs.walk_segment(array, pos, stop, check_crc, stop_on_crc, out)
        return walk_entries(array, pos, stop, check_crc, stop_on_crc, out, base, self.state)

    def reason(self) -> str:
        return ENTRY_REASONS.get(int(self.state[ST_WHY]), "")
