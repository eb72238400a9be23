"""Which broker version wrote a store, from its files' marks (docs/versions.md) or ``--broker-version``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING

from ..errors import BadStoreFile, UnknownStoreVersion
from ..formats import commitlog as clfmt
from ..formats import index as ixfmt
from ..formats.errors import FormatError
from ..formats.markers import ABORT_BACKUP_FILE
from ..formats.properties import PropertyKey, parse_properties, split_keys
from .index import query_offsets
from .mappedfile import MappedFile
from .rules import ALL_ERAS, ERAS, LAST_RELEASE, BrokerVersion, Era, eras_between, era_of, planning_key

if TYPE_CHECKING:  # pragma: no cover
    from .store import Store

__all__ = ["BrokerVersion", "VersionGuess", "detect_version", "check_first_record", "eras_label"]


def eras_label(eras) -> str:
    """``E3a-E5, E7 (4.2.0-4.5.2, 4.7.0)``: consecutive eras joined into runs."""
    ordered = sorted(eras, key=lambda e: e.index)
    runs: list[list[Era]] = []
    for e in ordered:
        if runs and runs[-1][-1].index + 1 == e.index:
            runs[-1].append(e)
        else:
            runs.append([e])
    names = ", ".join(r[0].name if len(r) == 1 else f"{r[0].name}-{r[-1].name}" for r in runs)
    releases = ", ".join(str(r[0].first) if r[0].first == r[-1].last else f"{r[0].first}-{r[-1].last}" for r in runs)
    return f"{names} ({releases})"


@dataclass
class VersionGuess:
    """The detected or given version: ``eras`` allowed; ``version`` None while several remain, then ``candidates``."""

    version: BrokerVersion | None
    label: str
    evidence: list[str] = field(default_factory=list)
    given: bool = False
    candidates: tuple[BrokerVersion, ...] = ()
    eras: tuple[Era, ...] = ()

    def __str__(self) -> str:
        if self.given:
            return f"{self.version} (given)" if self.version <= LAST_RELEASE else f"{self.version} (given; rules of {LAST_RELEASE})"
        return self.label if self.version is None else f"{self.label} (detected)"

    @classmethod
    def of(cls, version: BrokerVersion, *, given: bool = False, evidence=(), eras=None) -> "VersionGuess":
        era = era_of(version)
        label = str(version) if given else str(era)
        return cls(version, label, list(evidence), given=given, candidates=(version,), eras=tuple(eras or (era,)))

    @classmethod
    def among(cls, eras, evidence) -> "VersionGuess":
        """The guess for the eras the marks leave (one or several)."""
        eras = sorted(eras, key=lambda e: e.index)
        if len(eras) == 1:
            return cls.of(eras[0].representative, evidence=evidence)
        keys: dict[tuple, BrokerVersion] = {}
        for e in reversed(eras):  # newest first: the representative of each planning-rule set is its newest era's
            keys.setdefault(planning_key(e.representative), e.representative)
        candidates = tuple(keys.values())
        # one set of planning rules: plan under it (the readers' other rules are the newest era's)
        return cls(candidates[0] if len(candidates) == 1 else None, eras_label(eras), list(evidence), candidates=candidates, eras=tuple(eras))


def _first_records(store: "Store", evidence: list[str], limit: int = 64):
    """Up to ``limit`` valid records of the first segment with any, after its damage if need be (``scan_start``)."""
    for segment in store.commitlog.segments:
        scan = store.commitlog.scan(segment.base_offset, segment.end_offset)
        records = list(islice(scan, limit))
        if not records and not scan.end.is_clean:  # no record: the scan ran to its end
            from .resync import scan_start

            resumed = scan_start(store.commitlog, segment.base_offset)
            if segment.base_offset < resumed < segment.end_offset:
                records = list(islice(store.commitlog.scan(resumed, segment.end_offset), limit))
                if records:
                    evidence.append(f"no valid record at {segment.base_offset}; records from {resumed} read instead")
        if records:
            return records
    return []


def check_first_record(store: "Store") -> None:
    """Refuse commit logs without any RocketMQ record (a damaged first record is ``verify``'s finding)."""
    for segment in store.commitlog.segments[:1]:
        with MappedFile(segment.path, segment.base_offset) as mf:
            if not any(mf.buf[:8]):
                return
            try:
                clfmt.decode_record(mf.buf, 0, segment.base_offset, mf.size)
                return
            except FormatError as exc:
                reason = exc.reason
        from .resync import scan_start

        if scan_start(store.commitlog, segment.base_offset) != segment.base_offset:
            return
        raise UnknownStoreVersion(f"{segment.path}: first record is not a RocketMQ message ({reason}) and no valid record follows; "
                                  "a DLedger store is read from its store directory (dledger-<id>/data/), not from its data files")


def _config_marks(store: "Store") -> list[tuple[str, frozenset]]:
    """What ``dataVersion`` in ``config/topics.json`` (or ``subscriptionGroup.json``) says (§7.1): ``stateVersion`` from 5.0.0,
    the ``timestatmp`` typo in 3.2.6/4.0.0; the text is searched, parsed only where fastjson escapes could spell a key."""
    for name in ("topics.json", "subscriptionGroup.json"):
        for candidate in (store.path("config", name), store.path("config", name + ".bak")):
            try:
                text = candidate.read_bytes() if candidate.is_file() else b""  # a FIFO there: never opened, as load_config
            except OSError:
                continue
            if _ESCAPED_LETTER.search(text):
                doc = store.load_config(name, by_chars=False).doc
                version = doc.get("dataVersion") if isinstance(doc, dict) else None
                keys = set(version) if isinstance(version, dict) else set()
            elif b"dataVersion" in text:
                keys = {k for k in ("stateVersion", "timestatmp", "timestamp") if k.encode() in text}
            else:
                continue
            marks = [(f"config/{name} has dataVersion.stateVersion", eras_between("E13", "E18")) if "stateVersion" in keys
                     else (f"config/{name} has dataVersion without stateVersion", eras_between("E0", "E12"))]
            if "timestatmp" in keys:
                marks.append((f"config/{name} spells dataVersion.timestatmp", eras_between("E0", "E1")))
            elif "timestamp" in keys:
                marks.append((f"config/{name} has dataVersion.timestamp", eras_between("E2", "E18")))
            return marks
    return []


_ESCAPED_LETTER = re.compile(rb"\\(?:u00|x)[4-7][0-9A-Fa-f]")


def _index_files(store: "Store") -> list:
    """The index files, none where they cannot be read (``BadStoreFile``: no file shows the geometry, ``Store.unreadable_index``)."""
    try:
        return store.index_files
    except (OSError, FormatError, ValueError, BadStoreFile):
        return []


def _index_slot_marks(store: "Store") -> list[tuple[str, frozenset]]:
    """``hashSlotCount`` counts every put before 4.7.1, only new slots after (§5.2): a collision tells them apart."""
    for f in _index_files(store):
        entries = f.header.index_count - 1
        if entries <= 0:
            continue
        end = ixfmt.slot_position(f.geometry.hash_slot_num)  # the end of the slots
        if f.size < end:
            continue
        import numpy as np  # only where the marks before it leave both sides of 4.7.1

        used = int(np.count_nonzero(np.frombuffer(f._mf.buf[ixfmt.HEADER_SIZE:end], dtype=">i4")))
        if used >= entries:
            continue  # no collision: both rules give the same count
        if f.header.hash_slot_count == used:
            return [(f"index {f.name}: hashSlotCount counts used slots (4.7.1+)", eras_between("E8", "E18"))]
        if f.header.hash_slot_count == entries:
            return [(f"index {f.name}: hashSlotCount counts every put (before 4.7.1)", eras_between("E0", "E7"))]
    return []


KEYS_ONLY_RECORDS = 8  # records with KEYS but no UNIQ_KEY indexed that make a 3.2.6 mark (``_index_key_marks``)


def _index_key_marks(store: "Store", records) -> list[tuple[str, frozenset]]:
    """Whether the index holds UNIQ_KEY entries (§4.2: 4.0.0+), on indexed NOT_TYPE records (seed 900992)."""
    files = _index_files(store)
    if not files:
        return []
    without = []  # records whose KEYS are indexed but not their UNIQ_KEY
    for r in records:
        if r.transaction_type is not clfmt.TransactionType.NOT_TYPE:
            continue
        props = parse_properties(r.properties, legacy=True)
        uniq, keys = props.get(PropertyKey.UNIQ_KEY), split_keys(props.get(PropertyKey.KEYS))
        if not uniq or not keys:
            continue
        topic = r.topic_name
        if not all(r.offset in query_offsets(files, topic, k) for k in keys):
            continue
        if r.offset in query_offsets(files, topic, uniq):
            return [(f"index holds the UNIQ_KEY of the record at {r.offset} (4.0.0+)", eras_between("E1", "E18"))]
        without.append(r.offset)
        if len(without) == KEYS_ONLY_RECORDS:
            break
    if len(without) >= 2:  # one UNIQ_KEY lost to damaged index entries is no mark; several records agreeing are
        return [(f"index holds the KEYS but not the UNIQ_KEY of {len(without)} record(s) from {without[0]} (3.2.6)", frozenset({ERAS[0]}))]
    return []


def _record_marks(records) -> list[tuple[str, frozenset]]:
    marks = []
    if any(r.magic_code == clfmt.MESSAGE_MAGIC_V2 for r in records):
        marks.append(("V2 magic records", eras_between("E14", "E18")))
    if any(r.sys_flag & (clfmt.SysFlag.BORNHOST_V6 | clfmt.SysFlag.STOREHOST_V6) for r in records):
        marks.append(("IPv6 hosts", eras_between("E6", "E18")))
    with_props = [r for r in records if r.properties_length > 0 and not r.sys_flag & clfmt.SysFlag.INNER_BATCH]
    if with_props:
        trailing = sum(r.properties.endswith(b"\x02") for r in with_props)
        client_verbatim = eras_between("E0", "E5") | {ERAS[8]}  # the client's string as sent (§1.5)
        if trailing == len(with_props):
            marks.append(("properties end with \\x02", ALL_ERAS - eras_between("E10", "E16")))
        elif trailing == 0:
            marks.append(("properties end without \\x02", client_verbatim | eras_between("E10", "E16")))
        else:
            marks.append(("properties end with and without \\x02 (the clients' strings as sent)", client_verbatim))
        marks.append(("properties hold CLUSTER (added by the broker)", ALL_ERAS - client_verbatim) if any(b"CLUSTER\x01" in r.properties for r in with_props)
                     else ("properties without CLUSTER (the client's string as sent)", client_verbatim))
    return marks


def _file_marks(store: "Store") -> list[tuple[str, frozenset]]:
    """The files and checkpoint fields only some eras write (§6.1-§6.4, §8.1, §8.2)."""
    five, root, marks = eras_between("E13", "E18"), store.root, []
    if store.abort is not None and not store.abort.unusable and not store.abort.device:
        if store.abort.pid is not None:
            marks.append((f"abort file holds a PID ({store.abort.pid})", five))
        elif store.abort.content.strip():  # neither 4.x's empty file nor 5.x's PID: damage, which would otherwise outvote every later mark
            marks.append((f"the abort file holds {len(store.abort.content)} bytes that are no PID: damaged, not a mark", ALL_ERAS))
    if (root / ABORT_BACKUP_FILE).exists():
        marks.append(("abort.bak exists", five))
    for name, eras in (("timerlog", five), ("timerwheel", five), ("batchconsumequeue", five), ("compaction", eras_between("E14", "E18"))):
        if (root / name).exists():
            marks.append((f"{name} exists", eras))
    if (root / "lock").is_file():  # a directory is no broker's (``nextstart.open_refusal``)
        marks.append(("lock file exists", eras_between("E3a", "E18")))
    cp = store.checkpoint
    if cp is not None:
        marks += _checkpoint_marks(cp, store.commitlog)
    return marks


def _checkpoint_marks(cp, commitlog) -> list[tuple[str, frozenset]]:
    """5.1.1+ ``confirmPhyOffset``, 5.0.0+ ``masterFlushedOffset`` (§8.2): a mark only where a record boundary."""
    marks = []
    end = commitlog.end_of_files
    for name, value, eras in (("confirmPhyOffset", cp.confirm_phy_offset, eras_between("E15a", "E18")),
                              ("masterFlushedOffset", cp.master_flushed_offset, eras_between("E13", "E18"))):
        if 0 < value <= end and _record_boundary(commitlog, value):
            return marks + [(f"checkpoint holds {name}", eras)]
        if value:
            marks.append((f"checkpoint's {name} {value} is no record boundary of the commit log (0, {end}]: damaged, not a mark", ALL_ERAS))
    return marks


def _record_boundary(commitlog, offset: int) -> bool:
    """A record or blank starts at ``offset`` (``store.resync``'s rule), or the data ends there (zeros, or no more files)."""
    if offset in (commitlog.min_offset, commitlog.end_of_files):
        return True
    try:
        if not any(commitlog.read_bytes(offset, 8)):
            return True
    except LookupError:  # in a gap between segments
        return False
    from .resync import resume_after  # the compiled resync

    return resume_after(commitlog, offset, chain=1) == offset


def _missing_file_marks(store: "Store") -> list[tuple[str, frozenset]]:
    """5.x starts leave ``abort.bak`` and the wheel (§6.3, §8.1): a store with ``lock`` but neither is older."""
    root, abort, marks = store.root, store.abort, []
    if abort is not None and not abort.unusable and not abort.device and abort.pid is None and not abort.content.strip():
        marks.append(("the abort file is empty", ALL_ERAS - eras_between("E13", "E18")))
    if (root / "lock").is_file() and not (root / ABORT_BACKUP_FILE).exists() and not (root / "timerwheel").exists():
        marks.append(("neither abort.bak nor timerwheel beside the lock file", eras_between("E0", "E12")))
    return marks


def _blank_marks(store: "Store") -> list[tuple[str, frozenset]]:
    """After the first end-of-file blank: stale bytes before 4.9.1, zeros after (§1.12), judged on 56 bytes."""
    from .fastscan import FastScan, scan_start

    for segment in store.commitlog.segments[:-1]:
        scan = FastScan(store.commitlog, segment.base_offset, segment.end_offset, check_crc=False)
        for _ in scan:
            pass
        if not scan.blanks and not scan.end.is_clean:
            resumed = scan_start(store.commitlog, scan.end.offset)
            if scan.end.offset < resumed < segment.end_offset:
                scan = FastScan(store.commitlog, resumed, segment.end_offset, check_crc=False)
                for _ in scan:
                    pass
        if scan.blanks:
            if any(store.commitlog.read_bytes(scan.blanks[0], 64)[8:]):  # the 56 bytes after the blank, in its segment
                return [("stale bytes after an end-of-file blank", eras_between("E0", "E9"))]
            return [("zeros after an end-of-file blank", eras_between("E10", "E18"))]
    return []


def _splits(eras: set, last: str) -> bool:
    """Whether ``eras`` hold eras up to ``last`` and after it: only then can a mark of that boundary narrow them."""
    boundary = ERAS[[e.name for e in ERAS].index(last)].index
    return any(e.index <= boundary for e in eras) and any(e.index > boundary for e in eras)


def detect_version(store: "Store") -> VersionGuess:
    """The eras the store's marks allow, the costlier marks looked at only while they can decide."""
    evidence: list[str] = []
    eras = set(ALL_ERAS)
    seen = False

    def narrow(marks) -> None:
        nonlocal eras, seen
        for text, allowed in marks:
            seen = True
            left = eras & allowed
            if left:
                eras = left
                evidence.append(f"{text}: {eras_label(allowed)}")
            else:
                evidence.append(f"{text}: set aside, it contradicts the marks before it")

    if store.root is not None:
        narrow(_file_marks(store))
        narrow(_config_marks(store))
    records = _first_records(store, evidence)
    narrow(_record_marks(records))
    if _splits(eras, "E9"):
        narrow(_blank_marks(store))
    if store.root is not None and _splits(eras, "E7"):
        narrow(_index_slot_marks(store))
    if store.root is not None and _splits(eras, "E0"):
        narrow(_index_key_marks(store, records))
    if store.root is not None:
        narrow(_missing_file_marks(store))  # last: a file that is there, or holds something, outweighs one that is not
    if not seen:
        evidence.append("no version marks in the store")
    return VersionGuess.among(eras, evidence)


def given_source(store: "Store", marks: VersionGuess | None = None) -> str:
    """"given", or words saying the store's marks leave no era of that version (its rules are followed)."""
    marks = marks or detect_version(store)
    era = store.rules.era
    if era in marks.eras or not marks.evidence or marks.evidence == ["no version marks in the store"]:
        return "given"
    return f"given; the store's marks leave {marks.label}, not {era}: its rules are followed as given"
