"""Where the broker's commit log recovery starts scanning (reference §8.4, §8.5), abnormal or normal."""

from __future__ import annotations

import weakref
from typing import NamedTuple

from ..formats import checkpoint as cpfmt
from ..formats import commitlog as fmt
from .commitlog import STORE_TS_POSITION, CommitLog
from .mappedfile import MappedFile
from .rules import VersionRules
from .store import Store

_MAGIC = fmt.HEADER_LAYOUTS[(False, False)].offset_of("magic_code")


class ScanStart(NamedTuple):
    index: int  # segment index (0 when there is no segment)
    offset: int
    rule: str  # why this segment, in words


_HEAD_TIMES: "weakref.WeakKeyDictionary[CommitLog, dict]" = weakref.WeakKeyDictionary()


def first_record_store_time(commitlog: CommitLog, index: int, accept_v2: bool, skip: int = 0) -> int | None:
    """STORETIMESTAMP of segment ``index``'s first record (after ``skip`` bytes) as ``isMappedFileMatchedRecover`` reads it."""
    known = _HEAD_TIMES.setdefault(commitlog, {})
    if (index, accept_v2, skip) not in known:
        known[index, accept_v2, skip] = _read_head_time(commitlog, index, accept_v2, skip)
    return known[index, accept_v2, skip]


def _read_head_time(commitlog: CommitLog, index: int, accept_v2: bool, skip: int) -> int | None:
    seg = commitlog.segments[index]
    with MappedFile(seg.path, seg.base_offset) as mf:
        head = bytes(mf.buf[skip : skip + STORE_TS_POSITION[True] + 8])
    if len(head) < STORE_TS_POSITION[False] + 8:
        return None
    magic = int.from_bytes(head[_MAGIC : _MAGIC + 4], "big", signed=True)
    if magic != fmt.MESSAGE_MAGIC_V1 and not (accept_v2 and magic == fmt.MESSAGE_MAGIC_V2):
        return None
    sys_flag = int.from_bytes(head[fmt.SYS_FLAG_POSITION : fmt.SYS_FLAG_POSITION + 4], "big", signed=True)
    pos = STORE_TS_POSITION[bool(sys_flag & fmt.SysFlag.BORNHOST_V6)]
    if len(head) < pos + 8:
        return None
    return int.from_bytes(head[pos : pos + 8], "big", signed=True)


def abnormal_bound(store: Store, index_safe: bool | None = None) -> tuple[int, str]:
    """The checkpoint time an abnormal start file is matched against, with its words (``index_safe``: the index's too)."""
    cp = store.checkpoint or cpfmt.StoreCheckpoint(0, 0, 0)
    if (store.config.message_index_safe if index_safe is None else index_safe) and store.config.message_index_enable:
        return cp.min_timestamp_index, "min(physic, logics, index) timestamps - 3 s"
    return cp.min_timestamp, "min(physic, logics) timestamps - 3 s"


def matched_start(commitlog: CommitLog, first: int, bound: int, what: str, *, accept_v2: bool, skip: int = 0, files: str = "segment") -> ScanStart | None:
    """``isMappedFileMatchedRecover``: newest segment down to ``first`` whose first record's time is in (0, ``bound``]."""
    for index in range(len(commitlog.segments) - 1, first - 1, -1):
        ts = first_record_store_time(commitlog, index, accept_v2, skip=skip)
        if ts is not None and ts != 0 and ts <= bound:
            return ScanStart(index, commitlog.segments[index].base_offset, f"newest {files} whose first record (stored {ts}) is not newer than the checkpoint's {what} = {bound}")
    return None


def max_queue_phys_offset(store: Store) -> int:
    """``recoverConsumeQueue``'s result: the largest ``offset + size`` of any queue's last valid unit (-1: none)."""
    return max((q.recover().max_phys_offset for q in store.consume_queues), default=-1)


def log_recovery_mode(store: Store, rules: VersionRules, mode: str | None = None) -> str:
    """The classic log's recovery: ``mode``, but normal under a 4.5.0-5.1.4 DLedger broker without DLedger data (§8.4)."""
    mode = mode or ("abnormal" if store.abort_present else "normal")
    return "normal" if mode == "abnormal" and store.is_dledger and not rules.dledger_abnormal_redispatch else mode


def recovery_start(store: Store, rules: VersionRules, *, mode: str | None = None, index_safe: bool | None = None,
                   max_cq_phys_offset: int | None = None, segments: list | None = None) -> ScanStart:
    """Where ``DefaultMessageStore.recover`` scans from; ``mode``, ``index_safe``, queue max and ``segments`` overridable."""
    cl, segments = store.commitlog, store.commitlog.segments if segments is None else segments
    if not segments:
        return ScanStart(0, 0, "no commit log segment")
    if log_recovery_mode(store, rules, mode) == "abnormal":
        bound, what = abnormal_bound(store, index_safe)
        found = matched_start(cl, 0, bound, what, accept_v2=rules.accepts_v2_magic)
        return found or ScanStart(0, segments[0].base_offset, f"no segment's first record is older than the checkpoint's {what} = {bound}: from the first segment")
    if not rules.normal_start_from_cq_max:
        index = max(0, len(segments) - 3)
        return ScanStart(index, segments[index].base_offset, "third-from-last segment (normal recovery)")
    if max_cq_phys_offset is None:
        max_cq_phys_offset = max_queue_phys_offset(store)
    for index in range(len(segments) - 1, 0, -1):
        if segments[index].base_offset <= max_cq_phys_offset:
            return ScanStart(index, segments[index].base_offset, f"newest segment starting at or below the consume queues' max physical offset {max_cq_phys_offset} (5.3.2+)")
    return ScanStart(0, segments[0].base_offset, f"no later segment starts at or below the consume queues' max physical offset {max_cq_phys_offset} (5.3.2+)")
