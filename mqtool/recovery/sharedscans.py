"""One command's plans under several candidate versions (``candidates.py``) share their scans: ``SharedScans.scanner`` records a
scan's batches (``BatchSpill``) and a later scan with the same arguments reads them back, giving the same plan. Past ``BUDGET``
bytes of spill, or under ``SHARED_MIN_BYTES`` of commit log, scans are walked again."""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from ..dispatch import spillrows
from ..dispatch.scanner import BatchSpill, DispatchBatch, DispatchCache, DispatchScanner, TopicTable, phase_scanner, read_spilled
from ..handoff import produced_in_thread
from ..store import Store
from ..store.commitlog import ScanEnd

BUDGET = 2 << 30  # bytes of spill, as ``DispatchCache``'s
SHARED_MIN_BYTES = 64 << 20  # commit log bytes below which scans are not shared


class _Recorded(NamedTuple):
    entries: tuple  # ``BatchSpill`` entries, in order
    end: ScanEnd
    records: int
    last_valid_offset: int
    skipped: tuple


class SharedScans:
    """The scans of one ``plan_under_candidates``; ``recording``: whether a scan may be asked for again."""

    def __init__(self, topics: TopicTable):
        self.topics = topics
        self.recording = True
        self.done: dict[tuple, _Recorded] = {}
        self.nbytes = 0
        self._spill = BatchSpill()

    @classmethod
    def worth_it(cls, store: Store, cache: DispatchCache | None) -> "SharedScans | None":
        """Shared scans for ``store``'s candidates, or None where its commit log is too small to gain."""
        cl = store.commitlog
        if not cl.segments or cl.end_of_files - cl.min_offset < SHARED_MIN_BYTES:
            return None
        return cls(topic_table(None, cache))

    def scanner(self, commitlog, start: int, stop: int | None, *, topics: TopicTable, shown=None, ahead: bool = False, **settings):
        """``phase_scanner(...)``, read back when a scan with the same arguments was recorded. ``ahead``
        only changes how it is walked; ``shown`` is shown the rows once, by the recorded scan."""
        key = (id(commitlog), start, stop, id(topics), id(shown), tuple(sorted((k, _frozen(v)) for k, v in settings.items())))
        recorded = self.done.get(key)
        if recorded is not None:
            return _Replay(recorded)
        live = phase_scanner(commitlog, start, stop, topics=topics, shown=shown, ahead=ahead, **settings)
        return _Recording(self, key, live) if self.recording and topics is self.topics else live

    def keep(self, batch: DispatchBatch, entries: list | None) -> list | None:
        """``entries`` with ``batch``'s spill entry (spilled now, unless it was: the apply cache then
        adopts it as it is); None once the scans give up."""
        if entries is None:
            return None
        size = spillrows.spill_size(len(batch), batch.keys.size, batch.queue_groups.keys.size)
        within = self.nbytes + size <= BUDGET
        if within and batch.spilled is None:
            with contextlib.suppress(OSError):
                batch.spilled = self._spill.write(batch)  # None: a key hash outside int32
        if not within or batch.spilled is None:  # over budget, unwritable or unpackable: scans are walked again
            self.recording = False
            return None
        self.nbytes += size
        entries.append(batch.spilled)
        return entries


def _frozen(value):
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


class _Recording:
    """A live scan whose batches are kept as they pass (``SharedScans.keep``); recorded once exhausted."""

    def __init__(self, scans: SharedScans, key: tuple, live: DispatchScanner):
        self.scans, self.key, self.live = scans, key, live

    def __iter__(self):
        entries: list | None = []
        for batch in self.live:
            entries = self.scans.keep(batch, entries)
            yield batch
        live = self.live
        if entries is not None:
            self.scans.done[self.key] = _Recorded(tuple(entries), live.end, live.records, live.last_valid_offset, tuple(live.skipped))

    def __getattr__(self, name: str):
        return getattr(self.live, name)  # ``end``, ``records``, ``last_valid_offset``, ``skipped``: the live scan's


class _Replay:
    """A recorded scan read back: its batches (a batch or two ahead, in a thread), end and counts."""

    def __init__(self, recorded: _Recorded):
        self.recorded = recorded
        self.end, self.records, self.last_valid_offset = recorded.end, recorded.records, recorded.last_valid_offset
        self.skipped = list(recorded.skipped)

    def __iter__(self):
        return produced_in_thread((read_spilled(entry) for entry in self.recorded.entries), "mqtool-shared-scan")


def scan_phase(scans: SharedScans | None, commitlog, start: int, stop: int | None, **settings):
    """``phase_scanner``, through ``scans`` when the plan shares them."""
    return (phase_scanner if scans is None else scans.scanner)(commitlog, start, stop, **settings)


def topic_table(scans: SharedScans | None, cache: DispatchCache | None) -> TopicTable:
    """The table a plan numbers its topics into: the shared scans', else the apply cache's, else a new one."""
    if scans is not None:
        return scans.topics
    return cache.topics if cache is not None else TopicTable()
