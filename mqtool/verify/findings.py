"""What ``mqtool verify`` reports: findings with a stable JSON shape, and the run summary.

A ``Finding`` names one problem (or one noteworthy fact) at one place: its ``kind`` (from
``KINDS``), ``severity``, ``file``, ``offset``, ``expected``/``found``, ``message`` and
``details``, as docs/verify.md describes them. Only ``error`` and ``warning`` findings make
``verify`` exit 1."""

from __future__ import annotations

import enum
import pickle
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Iterator, Mapping


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def fails(self) -> bool:
        """Whether a finding of this severity makes the store unsound (exit code 1)."""
        return self is not Severity.INFO


# kind -> one-line description (docs/verify.md lists the same kinds)
KINDS: dict[str, str] = {
    # commit log
    "segment-gap": "a commit log segment is missing between two others",
    "segment-size": "a commit log file's length differs from the segment size (the broker refuses to start; 3.2.6-4.4.0 and 4.9.2 leave it and every later file out)",
    "segment-name": "a commit log file's name is not a multiple of the segment size",
    "segment-empty-last": "the last commit log file is empty (4.5.0-5.1.2 except 4.9.2 refuse to start; 5.1.3+ delete it)",
    "stray-entry": "an entry of commitlog/ that is no segment (a directory, a symlink, another name) and that the broker's load lists: it refuses to start on it, or loads otherwise",
    "dledger-stray-entry": "an entry of a DLedger data/ or index/ folder that is no file of it (a directory, a symlink, another name): DLedger's MmapFileList.load refuses to start on it, or loads it",
    "crc-mismatch": "a message body's CRC differs from the stored BODYCRC",
    "property-crc-mismatch": "the 5.2+ __CRC32# property differs from the record's CRC",
    "phys-offset-mismatch": "a record's PHYSICALOFFSET field is not its own position",
    "damaged-range": "bytes where a record should start hold no valid record, and valid records follow",
    "half-message": "the last record is cut short or inconsistent (a torn write)",
    "data-after-end": "non-zero bytes after the logical end that hold no valid record",
    "stale-records": "valid-looking records after the logical end or a blank, older than the log: never read",
    "stale-after-blank": "leftover bytes after an end-of-file blank record (normal before 4.9.1)",
    "blank-size": "an end-of-file blank record whose TOTALSIZE is not the bytes left in the segment",
    # DLedger commit log (reference §15)
    "dledger-entry": ("a DLedger entry header breaks a rule of DLedger's recovery (magic, size, pos, index, term, body): data and index "
                      "are truncated there (before the file the recovery starts from: kept, the whole record inside served)"),
    "dledger-record": "the message record inside a DLedger entry is damaged where DLedger's recovery keeps the entry (it checks entry headers only): the message is lost",
    "dledger-index": "DLedger's index/ disagrees with the entries (the broker rewrites or truncates it on its next start)",
    "dledger-checkpoint": "DLedger's checkpoint (committedIndex, endIndex) disagrees with the last entry",
    # consume queues
    "cq-file-gap": "a consume queue file is missing between two others",
    "cq-file-size": "a consume queue file of another length than the consume queue file size: the broker refuses to load it",
    "cq-queue-path-not-a-directory": "a file where a queue's directory belongs (<topic>/<id>): an empty queue the broker cannot write",
    "cq-directory-unread": "a directory of a topic's queues the broker takes a queue id from but never reads (01, +1): that queue is <topic>/<id>",
    "cq-topic-stray-entry": ("an entry of a topic's folder under consumequeue/ named by no queue id (a file or a directory): 3.2.6's "
                             "loadConsumeQueue throws on it and the broker refuses to start; 4.0.0+ skip it"),
    "cq-stray-entry": "an entry of a queue's folder that is no consume queue file (a directory, a symlink, another name): the broker refuses to start on it, or loads otherwise",
    "cq-invalid-unit": "a consume queue unit the broker treats as the end of the queue, with entries after it",
    "cq-entry-mismatch": "a consume queue entry disagrees with the record it points to",
    "cq-entry-dangling": "a consume queue entry points where no record of its queue starts",
    "cq-entry-beyond-end": "consume queue entries point at or past the commit log's logical end",
    "cq-entry-missing": "records of a queue have no consume queue entry",
    "dispatch-throws": "the broker's dispatch of a record throws (an LMQ offset Long.parseLong refuses; 4.9.3: no properties)",
    "cq-filler-tail": "a consume queue ends with a filler unit: from 4.5.0 the broker's dispatch skips the queue's new messages until the log passes the filler's offset + 2 GiB",
    # index
    "index-header": "an index file header disagrees with its entries",
    "index-chain": "an index hash chain or slot is inconsistent (prev pointers, slot heads, counts)",
    "index-entry-mismatch": "an index entry's hash or time does not match the record it points to",
    "index-entry-dangling": "index entries point where no record starts",
    "index-entry-beyond-end": "index entries point at or past the commit log's logical end",
    "index-keys-missing": "keys the broker would have indexed are in no index file",
    "index-file-size": "an index file's length does not match the index geometry",
    "index-stray-entry": "an entry of index/ that is no index file mqtool reads (a directory, a dangling symlink, a name Long.parseLong rejects): IndexService.load skips it, or cannot map it (5.1.0+ refuse to start; before, the later index files are left out)",
    "index-file-dropped": "an index file the broker will delete on its next (abnormal) start",
    # timer store (5.x)
    "timer-log-damaged": "the timer log holds an invalid unit where the broker's timer recovery stops and truncates",
    "timer-reference": "a timer log unit names a commit log record that is not its timer message (stale after a truncation)",
    "timer-wheel": "the timer wheel file's size or a slot's timer log positions are inconsistent",
    "timer-file-size": "a timer log file of another length than the others: TimerLog.load's MappedFileQueue.load refuses it (5.x)",
    "timer-stray-entry": "an entry of timerlog/ that is no timer log file (a directory, a symlink, another name): TimerLog.load's MappedFileQueue.load refuses to start on it (5.x), or loads otherwise",
    "timercheck-ahead": "config/timercheck says more was enqueued or flushed than the timer log and its queue hold",
    "timercheck-missing": "no config/timercheck beside the timer store: the broker enqueues its timer queue again from its min offset",
    "timercheck-empty": "config/timercheck is empty or its offsets are zeros: the broker reads them as 0, as without the file",
    "timercheck-behind": "the timer log holds units of messages from timercheck's masterTimerQueueOffset on: the broker enqueues them "
                         "again",
    # checkpoint, abort, config
    "checkpoint-missing": "no checkpoint file",
    "not-a-file": "a file the broker opens by name (checkpoint, lock, timerwheel, config/timercheck) is a directory (one it maps, a special "
                  "file): it refuses to start",
    "checkpoint-size": "the checkpoint file is not 4096 bytes",
    "checkpoint-ahead": "the checkpoint says data was flushed that the commit log does not hold",
    "checkpoint-empty": "the checkpoint holds no timestamps although the commit log has data",
    "abort-present": "the last run did not shut down cleanly; the broker will run abnormal recovery",
    "config-unreadable": "a config/*.json file does not decode (the broker falls back to its .bak)",
    "consumer-offset-range": "a consumer offset lies outside its queue's [min, max] offsets",
}


@dataclass(frozen=True)
class Finding:
    kind: str
    severity: Severity
    message: str
    file: str | None = None
    offset: int | None = None
    expected: Any = None
    found: Any = None
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")

    def as_dict(self) -> dict[str, Any]:
        """The documented JSON object of a finding (every key of ``FINDING_FIELDS``, in that order)."""
        out = {name: getattr(self, name) for name in FINDING_FIELDS}
        out["severity"], out["details"] = self.severity.value, dict(self.details)
        return out


FINDING_FIELDS = ("kind", "severity", "file", "offset", "expected", "found", "message", "details")


def replay_spilled(file: IO[bytes]) -> Iterator[Finding]:
    """The findings a check spilled to ``file`` in pickled chunks (lists), in order."""
    file.seek(0)
    while True:
        try:
            chunk = pickle.load(file)
        except EOFError:
            return
        yield from chunk


class FindingSink:
    """A check whose findings wait (``emit``) until the caller drains them (``take``)."""

    joined = declined = 0  # batches the join took / reported record by record (``CrossChecks.feed``)

    def emit(self, finding: Finding) -> None:
        self._out.append(finding)

    def take(self) -> list[Finding]:
        out, self._out = self._out, []
        return out


def _of(severity: Severity) -> Callable[..., Finding]:
    """``error``, ``warning``, ``info``: ``(kind, message, **Finding's other fields)``, a finding of that severity."""
    return lambda kind, message, **kw: Finding(kind, severity, message, **kw)


error, warning, info = map(_of, Severity)


@dataclass
class Summary:
    """Totals of one run; ``as_dict`` is the ``summary`` object of the JSON output."""

    store: str | None = None
    version: str | None = None
    checks: tuple[str, ...] = ()
    records: int = 0
    bytes: int = 0
    segments: int = 0
    logical_end: int | None = None
    end_reason: str | None = None
    consume_queues: int = 0
    consume_queue_entries: int = 0
    index_files: int = 0
    index_entries: int = 0
    elapsed_s: float = 0.0
    by_severity: dict[str, int] = field(default_factory=lambda: {s.value: 0 for s in Severity})
    by_kind: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    next_start: Any = None  # ``store.nextstart.NextStart``: what the broker's next start keeps and drops

    def count(self, finding: Finding) -> None:
        self.by_severity[finding.severity.value] += 1
        self.by_kind[finding.kind] = self.by_kind.get(finding.kind, 0) + 1

    @property
    def sound(self) -> bool:
        return self.by_severity[Severity.ERROR.value] == 0 and self.by_severity[Severity.WARNING.value] == 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store, "version": self.version, "checks": list(self.checks), "sound": self.sound,
            "next_start": None if self.next_start is None else self.next_start.as_dict(),
            "commitlog": {"records": self.records, "bytes": self.bytes, "segments": self.segments, "logical_end": self.logical_end,
                          "end_reason": self.end_reason},
            "consume_queues": {"queues": self.consume_queues, "entries": self.consume_queue_entries},
            "index": {"files": self.index_files, "entries": self.index_entries},
            "findings": dict(self.by_severity),
            "findings_by_kind": dict(sorted(self.by_kind.items())),
            "elapsed_s": round(self.elapsed_s, 3),
            "throughput_bytes_per_s": round(self.bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0),
            "notes": list(self.notes),
        }
