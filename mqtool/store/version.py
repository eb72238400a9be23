"""Which broker version wrote a store, from what its files show (overridable by the user).

The on-disk format barely changed from 4.0 to 5.3, but the writers left version marks:

- a V2 magic record (2-byte topic length) exists only from 5.1.0;
- 5.x writes the broker PID into ``abort`` and leaves ``abort.bak``; it creates ``compaction/``,
  ``timerlog/``, ``timerwheel``, ``batchconsumequeue/``;
- 4.9.1-4.9.x write properties without the final ``\\x02``; 4.0-4.9.0 and 5.x end with it;
- before 4.9.1 an end-of-file blank is followed by stale bytes, from 4.9.1 by untouched zeros.

Detection returns a representative version of the family it recognises (4.8.0 for
"4.0-4.9.0", 4.9.7 for "4.9.1-4.9.8", 5.3.3 for "5.x"), with the evidence. Pass
``--broker-version`` when the exact version matters (recovery rules changed in 5.3.2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple, TYPE_CHECKING

from ..errors import UnknownStoreVersion
from ..formats import commitlog as clfmt
from ..formats.errors import FormatError
from ..formats.markers import ABORT_BACKUP_FILE
from .mappedfile import MappedFile

if TYPE_CHECKING:  # pragma: no cover
    from .store import Store


class BrokerVersion(NamedTuple):
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @classmethod
    def parse(cls, text: str) -> "BrokerVersion":
        try:
            parts = [int(p) for p in text.strip().split(".")]
        except ValueError:
            raise UnknownStoreVersion(f"broker version {text!r} is not of the form X.Y.Z") from None
        parts += [0] * (3 - len(parts))
        version = cls(*parts[:3])
        if not (MIN_SUPPORTED <= version <= MAX_SUPPORTED):
            raise UnknownStoreVersion(
                f"broker version {version} is not supported (mqtool reads stores of {MIN_SUPPORTED} to {MAX_SUPPORTED}.x)"
            )
        return version


MIN_SUPPORTED = BrokerVersion(4, 0, 0)
MAX_SUPPORTED = BrokerVersion(5, 3, 99)
LEGACY_4 = BrokerVersion(4, 8, 0)
MODERN_4 = BrokerVersion(4, 9, 7)
V5 = BrokerVersion(5, 3, 3)
FAMILY_LABELS = {LEGACY_4: "4.0-4.9.0", MODERN_4: "4.9.1-4.9.8", V5: "5.x"}


@dataclass
class VersionGuess:
    """The detected (or given) version. ``version`` is None when the evidence leaves several
    families: ``candidates`` then lists their representatives (commands that need a version
    plan under each, see ``recovery.candidates.plan_under_candidates``)."""

    version: BrokerVersion | None
    label: str
    evidence: list[str] = field(default_factory=list)
    given: bool = False
    candidates: tuple[BrokerVersion, ...] = ()

    def __str__(self) -> str:
        if self.given:
            return f"{self.version} (given)"
        return self.label if self.version is None else f"{self.label} (detected)"


def _take(scan, limit: int) -> list:
    records = []
    for record in scan:
        records.append(record)
        if len(records) >= limit:
            break
    return records


def _first_records(store: "Store", evidence: list[str], limit: int = 64):
    """Up to ``limit`` valid records of the first segment that has any. When a segment's first
    record is damaged, the records after the damage are read instead (``resync.scan_start``)."""
    for segment in store.commitlog.segments:
        scan = store.commitlog.scan(segment.base_offset, segment.end_offset)
        records = _take(scan, limit)
        if not records and scan.end is not None and not scan.end.is_clean:
            from .resync import scan_start  # pure Python near the damage, compiled past ``resync.WINDOW``

            resumed = scan_start(store.commitlog, segment.base_offset)
            if segment.base_offset < resumed < segment.end_offset:
                records = _take(store.commitlog.scan(resumed, segment.end_offset), limit)
                if records:
                    evidence.append(f"no valid record at {segment.base_offset}; records from {resumed} read instead")
        if records:
            return records
    return []


def _blank_tail(store: "Store") -> bytes | None:
    """The 56 bytes after the end-of-file blank record of the first segment that has one."""
    from .fastscan import FastScan, scan_start  # compiled walk; imported lazily (numba start-up)

    for segment in store.commitlog.segments[:-1]:
        scan = FastScan(store.commitlog, segment.base_offset, segment.end_offset, check_crc=False)
        for _ in scan:
            pass
        if not scan.blanks and scan.end is not None and not scan.end.is_clean:
            resumed = scan_start(store.commitlog, scan.end.offset)
            if scan.end.offset < resumed < segment.end_offset:
                scan = FastScan(store.commitlog, resumed, segment.end_offset, check_crc=False)
                for _ in scan:
                    pass
        if scan.blanks:
            with MappedFile(segment.path) as mf:
                pos = scan.blanks[0] - segment.base_offset + 8
                return bytes(mf.buf[pos : pos + 56])
    return None


def check_first_record(store: "Store") -> None:
    """Refuse commit logs that hold no RocketMQ record at all (DLedger data files, pre-4.0
    stores, other files). A damaged first record is not refused: the records after it are
    found (``resync.scan_start``) and the damage is ``verify``'s finding."""
    for segment in store.commitlog.segments[:1]:
        with MappedFile(segment.path, segment.base_offset) as mf:
            head = bytes(mf.buf[:8])
            if not any(head):
                return
            try:
                clfmt.decode_record(mf.buf, 0, segment.base_offset, mf.size)
                return
            except FormatError as exc:
                reason = exc.reason
        from .resync import scan_start  # pure Python near the damage, compiled past ``resync.WINDOW``

        if scan_start(store.commitlog, segment.base_offset) != segment.base_offset:
            return
        raise UnknownStoreVersion(
            f"{segment.path}: first record is not a RocketMQ 4.x/5.x message ({reason}) and no valid record follows; "
            "DLedger commit logs and pre-4.0 stores are not supported"
        )


def _five_in_config(store: "Store") -> str | None:
    """5.x config managers write ``dataVersion.stateVersion`` (4.x ones do not: ``config-real`` fixtures).
    A file is parsed only when its text (or its ``.bak``'s) could hold that key: it names it, or
    escapes an ASCII letter and so could spell it (fastjson's parser costs more to load than the rest)."""
    for name in ("topics.json", "subscriptionGroup.json", "consumerOffset.json", "delayOffset.json"):
        if not _may_name_state_version(store, name):
            continue
        doc = store.config_file(name)
        if not isinstance(doc, dict):
            continue
        if isinstance(doc.get("dataVersion"), dict) and "stateVersion" in doc["dataVersion"]:
            return f"config/{name} has dataVersion.stateVersion (5.x managers)"
    return None


_ESCAPED_LETTER = re.compile(rb"\\(?:u00|x)[4-7][0-9A-Fa-f]")


def _may_name_state_version(store: "Store", name: str) -> bool:
    """Whether ``config/NAME`` or its ``.bak`` (``Store.config_file`` reads the first that parses)
    could hold a ``stateVersion`` key: neither can when neither text contains the word or an escaped
    ASCII letter (the only escapes of ``formats.fastjson`` that yield a letter: ``\\uXXXX``, ``\\xXX``)."""
    for candidate in (store.path("config", name), store.path("config", name + ".bak")):
        try:
            text = candidate.read_bytes()
        except OSError:  # missing (or unreadable: config_file skips it too)
            continue
        if b"stateVersion" in text or _ESCAPED_LETTER.search(text):
            return True
    return False


def detect_version(store: "Store") -> VersionGuess:
    evidence: list[str] = []
    five = []
    root = store.root
    if root is not None:
        if store.abort is not None and store.abort.pid is not None:
            five.append(f"abort file holds a PID ({store.abort.pid})")
        if (root / ABORT_BACKUP_FILE).exists():
            five.append("abort.bak exists")
        for name in ("compaction", "timerlog", "timerwheel", "batchconsumequeue"):
            if (root / name).exists():
                five.append(f"{name} exists")
        cp = store.checkpoint
        if cp is not None and (cp.master_flushed_offset or cp.confirm_phy_offset):
            five.append("checkpoint holds masterFlushedOffset/confirmPhyOffset (5.x)")
        config_mark = _five_in_config(store)
        if config_mark:
            five.append(config_mark)
    records = _first_records(store, evidence)
    if any(r.magic_code == clfmt.MESSAGE_MAGIC_V2 for r in records):
        five.append("V2 magic records (5.1.0+)")
    if five:
        return VersionGuess(V5, FAMILY_LABELS[V5], evidence + five)
    with_props = [r for r in records if r.properties_length > 0]
    candidates = [LEGACY_4, MODERN_4, V5]
    if with_props:
        trailing = sum(r.properties.endswith(b"\x02") for r in with_props)
        if trailing == 0:
            evidence.append("properties end without \\x02 (4.9.1-4.9.x writer)")
            return VersionGuess(MODERN_4, FAMILY_LABELS[MODERN_4], evidence)
        evidence.append("properties end with \\x02 (4.0-4.9.0 or 5.x writer)")
        candidates = [LEGACY_4, V5]
    tail = _blank_tail(store)
    if tail is not None:
        if any(tail):
            evidence.append("stale bytes after an end-of-file blank (writer before 4.9.1)")
            return VersionGuess(LEGACY_4, FAMILY_LABELS[LEGACY_4], evidence)
        evidence.append("zeros after an end-of-file blank (writer 4.9.1+)")
        candidates = [c for c in candidates if c != LEGACY_4]
        if len(candidates) == 1:
            return VersionGuess(candidates[0], FAMILY_LABELS[candidates[0]], evidence)
    if store.abort is not None and store.abort.pid is None:
        evidence.append("the abort file is empty (4.x; 5.3.3 writes its PID)")
    evidence.append("no end-of-file blank record to read the writer's marks from" if tail is None else "")
    label = " or ".join(FAMILY_LABELS[c] for c in candidates)
    return VersionGuess(None, label, [e for e in evidence if e] or ["not enough data to tell"], candidates=tuple(candidates))
