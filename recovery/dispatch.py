"""Dispatch a range of the commit log: what the broker's consume queue and index dispatchers
receive for each record (reference §3.2-§3.5, §6.5), a segment batch at a time.

``DispatchScanner`` drives the compiled walk (``mqtool.store.fastscan``) and the compiled
dispatch (``fastdispatch.dispatch_rows``), maps topic bytes to names exactly (fingerprints are
checked byte for byte), and hands every record the fast path cannot decide to
``formats.dispatch.dispatch_request``. Two scan disciplines:

- ``recovery``: the recovery loop (§8.3): CRC checked, the first invalid record ends the scan,
  including a SCHEDULE_TOPIC_XXXX record whose DELAY is not an int (``Integer.parseInt`` throws);
- ``reput``: ``ReputMessageService.doReput`` (§8.12): no CRC, a length mismatch is skipped, any
  other failure skips to the next segment (master behaviour).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from typing import Iterator, Mapping

import numpy as np

from ..formats import commitlog as clfmt
from ..formats.dispatch import SCHEDULE_TOPIC, dispatch_request
from ..formats.errors import CorruptRecord, FormatError
from ..formats.hashing import index_key_hash
from ..formats.properties import PropertyKey
from ..store.commitlog import CommitLog, ScanEnd, StopReason
from ..store.fastscan import FastScan
from . import fastdispatch as fd

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def java_parse_int(text: str) -> int:
    """``Integer.parseInt(text)``: optional sign, Unicode decimal digits, int32 range; raises
    ``ValueError`` otherwise (unlike Python's ``int``, no spaces or underscores)."""
    digits = text[1:] if text[:1] in "+-" and len(text) > 1 else text
    if not digits or any(unicodedata.decimal(ch, None) is None for ch in digits):
        raise ValueError(text)
    value = int("".join(str(unicodedata.decimal(ch)) for ch in digits))
    value = -value if text[0] == "-" else value
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(text)
    return value


class TopicTable:
    """Topic ids for topic byte strings; two byte strings that decode to the same Java string
    (malformed UTF-8 replaced by U+FFFD) share an id, as they share a queue in the broker."""

    def __init__(self):
        self.names: list[str] = []
        self._by_name: dict[str, int] = {}
        self._by_fp: dict[int, tuple[bytes, int]] = {}

    def id_of(self, raw: bytes) -> int:
        name = raw.decode("utf-8", "replace")
        tid = self._by_name.get(name)
        if tid is None:
            tid = self._by_name[name] = len(self.names)
            self.names.append(name)
        return tid

    def id_for_fp(self, fp: int, raw: bytes) -> int | None:
        """The id for fingerprint ``fp`` of ``raw``; None if the fingerprint is taken by other bytes."""
        known = self._by_fp.get(fp)
        if known is None:
            tid = self.id_of(raw)
            self._by_fp[fp] = (raw, tid)
            return tid
        return known[1] if known[0] == raw else None


@dataclass
class DispatchBatch:
    """Dispatch requests of consecutive valid records of one segment (arrays, one row each)."""

    base_offset: int
    fields: np.ndarray  # (n, fd.N_FIELDS) int64
    keys: np.ndarray  # index key hashes, rows point into it with F_KEY_START/F_KEY_COUNT
    topic_ids: np.ndarray  # int32

    def __len__(self) -> int:
        return self.fields.shape[0]

    def column(self, col: int) -> np.ndarray:
        return self.fields[:, col]

    @property
    def offsets(self) -> np.ndarray:
        """Where each record was found (commit log offset)."""
        return self.fields[:, fd.F_POS] + self.base_offset

    @property
    def phys(self) -> np.ndarray:
        return self.fields[:, fd.F_PHYS]

    @property
    def sizes(self) -> np.ndarray:
        return self.fields[:, fd.F_SIZE]

    @property
    def to_consume_queue(self) -> np.ndarray:
        """NOT_TYPE and COMMIT records only (``CommitLogDispatcherBuildConsumeQueue``)."""
        tran = self.fields[:, fd.F_SYS_FLAG] & clfmt.TRANSACTION_TYPE_MASK
        return (tran == clfmt.TransactionType.NOT_TYPE) | (tran == clfmt.TransactionType.COMMIT)

    @property
    def to_index(self) -> np.ndarray:
        """Everything but ROLLBACK (``IndexService.buildIndex``)."""
        tran = self.fields[:, fd.F_SYS_FLAG] & clfmt.TRANSACTION_TYPE_MASK
        return tran != clfmt.TransactionType.ROLLBACK

    def head(self, n: int) -> "DispatchBatch":
        if n >= len(self):
            return self
        key_end = int(self.fields[n - 1, fd.F_KEY_START] + self.fields[n - 1, fd.F_KEY_COUNT]) if n else 0
        return DispatchBatch(self.base_offset, self.fields[:n], self.keys[:key_end], self.topic_ids[:n])


@dataclass
class DispatchOptions:
    """What decides a record's dispatch request besides its bytes."""

    delay_table: Mapping[int, int]
    legacy_properties: bool = False
    index_enable: bool = True

    @property
    def delay_ms(self) -> np.ndarray:
        return fd.delay_array(dict(self.delay_table))


@dataclass
class DispatchScanner:
    """Iterate ``DispatchBatch`` es over ``[start, stop)``; then ``end`` tells where and why it stopped.

    ``last_valid_offset`` is the start of the last valid record seen (-1 if none): the broker's
    ``lastValidMsgPhyOffset`` (5.x writes it to the checkpoint's confirmPhyOffset).
    """

    commitlog: CommitLog
    start: int
    stop: int | None
    options: DispatchOptions
    discipline: str = "recovery"  # or "reput"
    check_crc: bool = True
    topics: TopicTable = field(default_factory=TopicTable)
    end: ScanEnd | None = None
    last_valid_offset: int = -1
    records: int = 0
    skipped: list[ScanEnd] = field(default_factory=list)  # reput: what it skipped over

    def __iter__(self) -> Iterator[DispatchBatch]:
        delay_ms = self.options.delay_ms
        pos = self.start
        while True:
            scan = FastScan(
                self.commitlog,
                pos,
                self.stop,
                check_crc=self.check_crc and self.discipline == "recovery",
                stop_on_crc=True,
            )
            bad: ScanEnd | None = None
            for seg in scan:
                batch, bad = self._dispatch(seg, delay_ms)
                if len(batch):
                    self.records += len(batch)
                    self.last_valid_offset = int(batch.offsets[-1])
                    yield batch
                if bad is not None:
                    break
            end = bad or scan.end
            if self.discipline == "recovery" or end.is_clean or end.reason == StopReason.SEGMENT_END and self._at_stop(end.offset):
                self.end = end
                return
            nxt = self._reput_resume(end)
            if nxt is None:
                self.end = end
                return
            self.skipped.append(end)
            pos = nxt

    def _at_stop(self, offset: int) -> bool:
        return self.stop is not None and offset >= self.stop

    def _reput_resume(self, end: ScanEnd) -> int | None:
        """Where ``doReput`` continues after a record it cannot dispatch."""
        if end.reason == StopReason.LENGTH_MISMATCH and end.total_size:
            nxt = end.offset + end.total_size
        else:
            index = self.commitlog.segment_index(end.offset)
            if index is None or index + 1 >= len(self.commitlog.segments):
                return None
            nxt = self.commitlog.segments[index + 1].base_offset
        return None if self._at_stop(nxt) else nxt

    # ---- one segment batch ----------------------------------------------------------------

    def _dispatch(self, seg, delay_ms) -> tuple[DispatchBatch, ScanEnd | None]:
        rows = seg.rows
        n = rows.shape[0]
        out = np.empty((n, fd.N_FIELDS), dtype=np.int64)
        keys = np.empty(max(64, n * 4), dtype=np.int64)
        done, fill = 0, 0
        while done < n:
            done, fill = fd.dispatch_rows(
                seg.array, rows, done, self.options.legacy_properties, fd.SCHEDULE_TOPIC_BYTES, delay_ms, self.options.index_enable, out, keys, fill
            )
            if done < n:
                keys = np.concatenate([keys, np.empty(keys.shape[0], dtype=np.int64)])
        keys = keys[:fill]
        bad = None
        fallback = np.flatnonzero(out[:, fd.F_FLAGS] & fd.FLAG_FALLBACK)
        if fallback.size:
            out, keys, bad = self._fallback(seg, out, keys, fallback)
        topic_ids = self._topic_ids(seg.array, out)
        return DispatchBatch(seg.base_offset, out, keys, topic_ids), bad

    def _topic_ids(self, array: np.ndarray, out: np.ndarray) -> np.ndarray:
        if out.shape[0] == 0:
            return np.empty(0, dtype=np.int32)
        fps = out[:, fd.F_TOPIC_FP]
        uniq, first, inverse = np.unique(fps, return_index=True, return_inverse=True)
        tpos, tlen = out[:, fd.F_TOPIC_POS], out[:, fd.F_TOPIC_LEN]
        ids = []
        exact = fd.same_topics(array, tpos, tlen, first, inverse)
        for fp, f in zip(uniq.tolist(), first.tolist()):
            raw = bytes(array[tpos[f] : tpos[f] + tlen[f]])
            tid = self.topics.id_for_fp(fp, raw) if exact else None
            if tid is None:
                exact = False
                break
            ids.append(tid)
        if exact:
            return np.asarray(ids, dtype=np.int32)[inverse]
        # a fingerprint collision (never seen in practice): map record by record
        return np.asarray([self.topics.id_of(bytes(array[p : p + l])) for p, l in zip(tpos.tolist(), tlen.tolist())], dtype=np.int32)

    def _fallback(self, seg, out, keys, rows_idx) -> tuple[np.ndarray, np.ndarray, ScanEnd | None]:
        """Decide the flagged records with the Python decoder and splice their keys in."""
        array, base = seg.array, seg.base_offset
        replaced: dict[int, np.ndarray] = {}
        bad, n = None, out.shape[0]
        for r in rows_idx.tolist():
            pos = int(out[r, fd.F_POS])
            record = clfmt.decode_record(array, pos, base, array.shape[0])
            try:
                request = self._request(record)
            except CorruptRecord as exc:
                bad, n = ScanEnd(base + pos, StopReason.CORRUPT, exc.reason, record.total_size), r
                break
            indexed = self.options.index_enable and request.to_index
            replaced[r] = np.asarray([index_key_hash(k) for k in request.index_keys()] if indexed else [], dtype=np.int64)
            out[r, fd.F_TAGS] = request.tags_code
            out[r, fd.F_FLAGS] = 0
        out = out[:n]
        key_end = int(out[-1, fd.F_KEY_START] + out[-1, fd.F_KEY_COUNT]) if n else 0
        pieces, cursor = [], 0
        for r, new in sorted(replaced.items()):
            start = int(out[r, fd.F_KEY_START])
            pieces += [keys[cursor:start], new]
            cursor = start + int(out[r, fd.F_KEY_COUNT])
            out[r, fd.F_KEY_COUNT] = new.size
        pieces.append(keys[cursor:key_end])
        if n:
            counts = out[:, fd.F_KEY_COUNT]
            out[:, fd.F_KEY_START] = np.cumsum(counts) - counts
        return out, np.concatenate(pieces), bad

    def _request(self, record: clfmt.CommitLogRecord):
        props = record.property_map(legacy=self.options.legacy_properties)
        delay = props.get(PropertyKey.DELAY)
        if record.topic_name == SCHEDULE_TOPIC and delay is not None:
            try:
                java_parse_int(delay)
            except ValueError:
                raise CorruptRecord(record.offset, f"DELAY property {delay!r} is not an int (Integer.parseInt throws)") from None
        try:
            return dispatch_request(record, self.options.delay_table, legacy_properties=self.options.legacy_properties)
        except FormatError as exc:  # pragma: no cover - guarded by the check above
            raise CorruptRecord(record.offset, exc.reason) from None


# ---- dispatch phases (shared by planning and apply) ---------------------------------------

TAGS_DELIVERY_TIME = "delivery-time"
TAGS_HASH = "tags-hash"  # 4.9.2-4.9.8 abnormal recovery: the delay table is not loaded yet


def phase_scanner(
    commitlog: CommitLog,
    start: int,
    stop: int | None,
    *,
    discipline: str,
    tags: str,
    delay_table: Mapping[int, int],
    legacy_properties: bool,
    index_enable: bool,
    check_crc: bool,
    topics: TopicTable | None = None,
) -> DispatchScanner:
    options = DispatchOptions({} if tags == TAGS_HASH else delay_table, legacy_properties, index_enable)
    return DispatchScanner(commitlog, start, stop, options, discipline, check_crc, topics or TopicTable())


def after_phys(batch: DispatchBatch, threshold: int | None) -> DispatchBatch:
    """Only records whose PHYSICALOFFSET is > ``threshold`` (5.3.2+ normal recovery dispatch)."""
    if threshold is None or len(batch) == 0:
        return batch
    keep = batch.phys > threshold
    if keep.all():
        return batch
    idx = np.flatnonzero(keep)
    fields = batch.fields[idx].copy()
    counts = fields[:, fd.F_KEY_COUNT]
    starts = batch.fields[idx, fd.F_KEY_START]
    keys = np.concatenate([batch.keys[s : s + c] for s, c in zip(starts.tolist(), counts.tolist())]) if idx.size else batch.keys[:0]
    fields[:, fd.F_KEY_START] = np.cumsum(counts) - counts
    return DispatchBatch(batch.base_offset, fields, keys, batch.topic_ids[idx])


def queue_groups(batch: DispatchBatch, names: list[str]) -> Iterator[tuple[str, int, np.ndarray]]:
    """``(topic, queue id, row indexes)`` of the records each consume queue receives, in order."""
    eligible = np.flatnonzero(batch.to_consume_queue)
    if eligible.size == 0:
        return
    key = (batch.topic_ids[eligible].astype(np.int64) << 32) | (batch.fields[eligible, fd.F_QUEUE_ID] & 0xFFFFFFFF)
    order = np.argsort(key, kind="stable")
    rows = eligible[order]
    bounds = np.flatnonzero(np.diff(key[order])) + 1
    for group in np.split(rows, bounds):
        first = group[0]
        yield names[batch.topic_ids[first]], int(batch.fields[first, fd.F_QUEUE_ID]), group
