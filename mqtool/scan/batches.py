"""Arrow batches of messages built column-wise from the compiled walk's rows, equal to ``records.message_dict``."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from ..formats import commitlog as fmt
from ..formats.dispatch import DEFAULT_DELAY_TABLE, SCHEDULE_TOPIC, consume_queue_tags_code
from ..formats.errors import CorruptRecord
from ..formats.msgid import format_host
from ..formats.properties import PropertyKey
from ..store.records import BodyEncoding, encode_body, inflate_body, message_dict, sys_flag_names
from ..store import fastscan as fs
from . import _kernels as kernels, compute
from .schema import MESSAGE_SCHEMA, TIMESTAMP

_LAYOUTS = {combo: fmt.HEADER_LAYOUTS[(bool(combo & 1), bool(combo & 2))] for combo in range(4)}
_V6_SHIFT = 4  # SysFlag.BORNHOST_V6 is bit 4, STOREHOST_V6 bit 5: (sys_flag >> 4) & 3 picks the layout
assert int(fmt.SysFlag.BORNHOST_V6) == 1 << _V6_SHIFT and int(fmt.SysFlag.STOREHOST_V6) == 2 << _V6_SHIFT
MAX_MS = (1 << 63) // 1000 - 1  # larger epoch milliseconds do not fit a TIMESTAMP (microseconds)
_SCHEDULE = SCHEDULE_TOPIC.encode()
_LIST_OF_STRINGS = MESSAGE_SCHEMA.field("keys").type
_BODY_MODES = {BodyEncoding.base64: kernels.BODY_BASE64, BodyEncoding.hex: kernels.BODY_HEX, BodyEncoding.utf8: kernels.BODY_UTF8}
_MAX_INT32 = (1 << 31) - 1


def _offsets_widths(layout, names) -> tuple[np.ndarray, np.ndarray]:
    """Where ``names`` lie in ``layout`` and their widths (a field ends where the next begins)."""
    ends = dict(zip(layout.names, [*(layout.offsets[n] for n in layout.names[1:]), layout.size]))
    offsets = np.array([layout.offsets[f] for f in names], dtype=np.int64)
    return offsets, np.array([ends[f] for f in names], dtype=np.int64) - offsets


# header fields gathered in one pass: those before the born host (every layout) and after it
# where each layout has its host addresses, indexed by the layout number ((sys_flag >> 4) & 3)
_HOST_AT = {name: np.array([_LAYOUTS[combo].offset_of(name) for combo in range(4)], dtype=np.int64) for name in ("born_host_address", "store_host_address")}
_HEAD = ("sys_flag", "born_timestamp", "phys_offset", "body_crc", "queue_id", "flag", "queue_offset", "magic_code")
_TAIL = ("store_timestamp", "reconsume_times", "prepared_transaction_offset")
_FIELDS = {(combo, names): _offsets_widths(_LAYOUTS[combo], names) for combo in range(4) for names in (_HEAD, _TAIL)}


def _strings(offsets: np.ndarray, data: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """A string array from int32 offsets and UTF-8 bytes (``valid``: a bool mask, None = no nulls)."""
    bitmap, nulls = compute.validity(valid)
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _span_strings(array: np.ndarray, starts: np.ndarray, lengths: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    offsets, data = kernels.gather_spans(array, starts, lengths)
    return _strings(offsets, data, valid)


def _utf8_ok(arr: pa.Array) -> bool:
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _hosts(array: np.ndarray, pos: np.ndarray, at: np.ndarray, wide: np.ndarray) -> pa.Array:
    """``ip:port`` of the host at ``pos + at`` (16 bytes where ``wide``) by ``kernels.format_hosts``; v4-mapped by Python."""
    offsets, data, mapped = kernels.format_hosts(array, pos, at, wide)
    if mapped.any():
        redo = np.flatnonzero(mapped)
        texts = [format_host(bytes(array[p : p + 16]), int.from_bytes(bytes(array[p + 16 : p + 20]), "big", signed=True)).encode() for p in (pos[redo] + at[redo]).tolist()]
        offsets, data = _splice(offsets, data, redo, texts)
    return _strings(offsets.astype(np.int32), data)


def _splice(offsets: np.ndarray, data: np.ndarray, redo: np.ndarray, texts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's text (``offsets``, ``data``) with rows ``redo`` replaced by ``texts``."""
    row_offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=row_offsets[1:])
    return kernels.splice_rows(offsets, data, redo, row_offsets, np.frombuffer(b"".join(texts), dtype=np.uint8))


def _timestamps(ms: np.ndarray) -> pa.Array:
    ok = np.abs(ms) <= MAX_MS
    return compute.numbers(np.where(ok, ms, 0) * 1000, TIMESTAMP, ok)


PROPERTY_COLUMNS = frozenset({"properties", "tags", "keys", "uniq_key", "tags_code"})
FLAG_COLUMNS = frozenset({"sys_flag_names", "transaction_type"})


def projected_schema(columns) -> pa.Schema:
    """The ``messages`` schema restricted to ``columns`` (None: all), in the schema's order."""
    if columns is None:
        return MESSAGE_SCHEMA
    unknown = set(columns) - set(MESSAGE_SCHEMA.names)
    if unknown:
        raise ValueError(f"unknown message columns: {', '.join(sorted(unknown))}")
    return pa.schema([f for f in MESSAGE_SCHEMA if f.name in set(columns)])


class MessageBatchBuilder:
    """Builds ``messages`` batches for one broker's store (as ``message_dict``), only of ``columns`` when given."""

    def __init__(self, broker: str, *, legacy_properties: bool = False, delay_table=DEFAULT_DELAY_TABLE, body: BodyEncoding = BodyEncoding.none, decompress: bool = False, columns=None, force_python: bool = False):
        self.broker = broker
        self.legacy = legacy_properties
        self.delay_table = delay_table
        self.body = BodyEncoding(body)
        self.decompress = decompress  # inflate compressed bodies before encoding them (``message_dict``)
        self.schema = projected_schema(columns)
        self.names = frozenset(self.schema.names)
        self.force_python = force_python
        self.python_batches = 0  # batches that needed the Python decoder (for tests and metrics)

    # ---- the column path ----------------------------------------------------------------------

    def build(self, batch: fs.SegmentBatch, split_start: int) -> pa.RecordBatch:
        array, rows = batch.array, batch.rows
        n = len(rows)
        pos = np.ascontiguousarray(rows[:, fs.COL_POS])
        if not self.force_python:
            columns = self._columns(array, rows, pos, batch.base_offset)
            if columns is not None:
                return self._finish(columns, n, split_start)
        self.python_batches += 1
        return self._python(array, pos, batch.base_offset, split_start)

    def _columns(self, array: np.ndarray, rows: np.ndarray, pos: np.ndarray, base: int) -> dict | None:
        n = len(pos)
        need = self.names
        c: dict[str, pa.Array | np.ndarray] = {}

        head = dict(zip(_HEAD, kernels.gather_fields(array, pos, *_FIELDS[0, _HEAD])))
        sys_flag = head["sys_flag"]
        c["offset"] = pos + base
        c["size"] = rows[:, fs.COL_SIZE].astype(np.int32)
        c["crc_ok"] = rows[:, fs.COL_CRC_OK] != 0
        c["sys_flag"] = sys_flag.astype(np.int32)
        c["body_length"] = rows[:, fs.COL_BODY_LEN].astype(np.int32)
        c.update((name, head[name]) for name in ("born_timestamp", "phys_offset", "queue_offset"))
        c.update((name, head[name].astype(np.int32)) for name in ("body_crc", "queue_id", "flag"))
        c["magic_version"] = np.where(head["magic_code"] == fmt.MESSAGE_MAGIC_V2, 2, 1).astype(np.int32)

        # fields behind the host addresses: per address-width layout
        combos = (sys_flag >> _V6_SHIFT) & 3
        present = np.flatnonzero(np.bincount(combos, minlength=4))  # not np.unique: it imports numpy.ma to ask if combos is masked
        store_ts, reconsume, prepared = np.empty((3, n), np.int64)
        for combo in present.tolist():
            idx = None if len(present) == 1 else np.flatnonzero(combos == combo)
            at = pos if idx is None else np.ascontiguousarray(pos[idx])
            sel = slice(None) if idx is None else idx
            store_ts[sel], reconsume[sel], prepared[sel] = kernels.gather_fields(array, at, *_FIELDS[combo, _TAIL])
        born_wide, store_wide = (combos & 1) != 0, (combos & 2) != 0
        store_at = _HOST_AT["store_host_address"][combos]
        if "born_host" in need:
            c["born_host"] = _hosts(array, pos, _HOST_AT["born_host_address"][combos], born_wide)
        if "store_host" in need:
            c["store_host"] = _hosts(array, pos, store_at, store_wide)
        if "msg_id" in need:
            c["msg_id"] = _strings(*kernels.format_msg_ids_rows(array, pos, store_at, store_wide, fmt.PHYS_OFFSET_POSITION))
        c["store_timestamp"] = store_ts
        c["reconsume_times"] = reconsume.astype(np.int32)
        c["prepared_transaction_offset"] = prepared

        if need & FLAG_COLUMNS:
            flags, inverse = np.unique(sys_flag, return_inverse=True)
            inverse = inverse.ravel()
            c["sys_flag_names"] = compute.take(pa.array([sys_flag_names(int(f)) for f in flags], _LIST_OF_STRINGS), inverse)
            c["transaction_type"] = compute.take(pa.array([fmt.transaction_type(int(f)).name for f in flags], pa.string()), inverse)
        if "body" in need:
            c["body"] = self._bodies(array, rows, sys_flag, pos + base)
        if not need & (PROPERTY_COLUMNS | {"topic"}):
            return c

        # topic and properties
        topic_start = np.ascontiguousarray(rows[:, fs.COL_TOPIC])
        props_start = np.ascontiguousarray(rows[:, fs.COL_PROPS])
        topic_len = props_start - fs.PROPS_LEN - topic_start
        topic = _span_strings(array, topic_start, topic_len)
        if not _utf8_ok(topic):
            return None
        c["topic"] = topic
        if not need & PROPERTY_COLUMNS:
            return c
        props_len = pos + rows[:, fs.COL_SIZE] - props_start
        counts, name_s, name_l, value_s, value_l, special, fallback = kernels.parse_properties(
            array, props_start, props_len, self.legacy, kernels.KEY_TAGS, kernels.KEY_KEYS, kernels.KEY_UNIQ, kernels.KEY_DELAY
        )
        if fallback.any():
            return None
        if "properties" in need:
            names = _span_strings(array, name_s, name_l)
            values = _span_strings(array, value_s, value_l)
            if not (_utf8_ok(names) and _utf8_ok(values)):
                return None
            map_offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(counts, out=map_offsets[1:])
            c["properties"] = pa.MapArray.from_arrays(compute.numbers(map_offsets, pa.int32()), names, values)
        elif not (kernels.spans_are_utf8(array, name_s, name_l) and kernels.spans_are_utf8(array, value_s, value_l)):
            return None  # the same records go to the Python decoder whichever columns are asked for

        def value_spans(which: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            return kernels.item_spans(np.ascontiguousarray(special[:, which]), value_s, value_l)

        if need & {"tags", "tags_code"}:
            tag_s, tag_l, has_tags = value_spans(0)
            c["tags"] = _span_strings(array, tag_s, tag_l, has_tags)
            if "tags_code" in need:
                c["tags_code"] = self._tags_codes(array, tag_s, tag_l, special, value_s, value_l, topic_start, topic_len, store_ts)
        if "uniq_key" in need:
            uniq_s, uniq_l, has_uniq = value_spans(2)
            c["uniq_key"] = _span_strings(array, uniq_s, uniq_l, has_uniq)
        if "keys" in need:
            keys_s, keys_l, _ = value_spans(1)
            key_counts, piece_s, piece_l = kernels.split_on_spaces(array, keys_s, keys_l)
            key_offsets = np.zeros(n + 1, dtype=np.int32)
            np.cumsum(key_counts, out=key_offsets[1:])
            c["keys"] = pa.ListArray.from_arrays(compute.numbers(key_offsets, pa.int32()), _span_strings(array, piece_s, piece_l), type=_LIST_OF_STRINGS)
        return c

    def _tags_codes(self, array, tag_s, tag_l, special, value_s, value_l, topic_start, topic_len, store_ts) -> pa.Array:
        """``consume_queue_tags_code``: the TAGS hash; the delivery time for a delayed record."""
        codes = kernels.java_hash_spans(array, tag_s, tag_l)
        delayed = np.flatnonzero((special[:, 3] >= 0) & (topic_len == len(_SCHEDULE)))
        if len(delayed) == 0:
            return compute.numbers(codes, pa.int64())
        valid = np.ones(len(codes), dtype=bool)
        for i in delayed.tolist():
            if bytes(array[topic_start[i] : topic_start[i] + topic_len[i]]) != _SCHEDULE:
                continue
            d = special[i, 3]
            properties = {PropertyKey.DELAY: bytes(array[value_s[d] : value_s[d] + value_l[d]]).decode()}
            if tag_s[i] >= 0:
                properties[PropertyKey.TAGS] = bytes(array[tag_s[i] : tag_s[i] + tag_l[i]]).decode()
            try:
                codes[i] = consume_queue_tags_code(SCHEDULE_TOPIC, properties, int(store_ts[i]), self.delay_table)
            except CorruptRecord:
                valid[i] = False
        return compute.numbers(codes, pa.int64(), valid)

    def _bodies(self, array: np.ndarray, rows: np.ndarray, sys_flag: np.ndarray, offsets: np.ndarray) -> pa.Array:
        """``encode_body`` per body: base64, hex, UTF-8 by ``kernels.body_text``; the rest by ``encode_body``."""
        if self.body is BodyEncoding.none:
            return pa.nulls(len(rows), pa.string())
        starts, lengths = rows[:, fs.COL_BODY], rows[:, fs.COL_BODY_LEN]
        python_rows = np.zeros(len(rows), dtype=np.bool_)
        if self.decompress:
            python_rows |= (sys_flag & int(fmt.SysFlag.COMPRESSED)) != 0
        mode = _BODY_MODES.get(self.body)
        if mode is None:
            python_rows[:] = True
            mode = kernels.BODY_UTF8
        text_offsets, data = kernels.body_text(array, np.ascontiguousarray(starts), np.ascontiguousarray(lengths), mode, python_rows)
        redo = np.flatnonzero(python_rows)
        if len(redo):
            texts = [encode_body(self._raw_body(array, int(starts[i]), int(lengths[i]), int(sys_flag[i]), int(offsets[i])), self.body).encode() for i in redo.tolist()]
            text_offsets, data = _splice(text_offsets, data, redo, texts)
        if text_offsets[-1] > _MAX_INT32:  # more text than one Arrow string array holds
            return pa.array([encode_body(self._raw_body(array, int(s), int(n), int(f), int(o)), self.body) for s, n, f, o in zip(starts, lengths, sys_flag, offsets)], pa.string())
        return _strings(text_offsets.astype(np.int32), data)

    def _raw_body(self, array: np.ndarray, start: int, length: int, flag: int, offset: int) -> bytes:
        raw = array.data[start : start + max(length, 0)].tobytes()
        return inflate_body(raw, flag, offset) if self.decompress else raw

    def _finish(self, c: dict, n: int, split_start: int) -> pa.RecordBatch:
        if "broker" in self.names:
            raw = self.broker.encode()
            c["broker"] = _strings(np.arange(n + 1, dtype=np.int32) * len(raw), np.frombuffer(raw * n, dtype=np.uint8))
        c.update((name, _timestamps(c[ms])) for name, ms in (("born_time", "born_timestamp"), ("store_time", "store_timestamp")) if name in self.names)
        c["split_start"] = np.full(n, split_start, dtype=np.int64)
        c["split_edge"] = np.zeros(n, dtype=bool)
        c["split_skipped"] = pa.nulls(n, MESSAGE_SCHEMA.field("split_skipped").type)
        c["filtered_out"] = np.zeros(n, dtype=bool)
        arrays = [c[f.name] if isinstance(c[f.name], pa.Array) else compute.numbers(c[f.name], f.type) for f in self.schema]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    # ---- the Python decoder (exact for every record; slow) -------------------------------------

    def _python(self, array: np.ndarray, pos: np.ndarray, base: int, split_start: int) -> pa.RecordBatch:
        end = array.shape[0]
        rows = []
        for p in pos.tolist():
            record = fmt.decode_record(array, p, base, end)
            d = message_dict(record, self.body, decompress=self.decompress, legacy_properties=self.legacy, delay_table=self.delay_table)
            d["properties"] = list(d["properties"].items())
            rows.append(d)
        c = {name: pa.array([r[name] for r in rows], MESSAGE_SCHEMA.field(name).type) for name in self.names if rows and name in rows[0]}
        c.update((name, np.array([r[name] for r in rows], dtype=np.int64)) for name in ("born_timestamp", "store_timestamp"))
        return self._finish(c, len(rows), split_start)


def with_edges(batch: pa.RecordBatch, first: bool, last: bool, skipped: Sequence[int] = ()) -> pa.RecordBatch:
    """Mark ``batch``'s first and/or last row as its split's edge, the last carrying ``split_skipped``."""
    if not (first or last) or batch.num_rows == 0:
        return batch
    edge = np.zeros(batch.num_rows, dtype=bool)
    edge[0] |= first
    edge[-1] |= last
    i = batch.schema.get_field_index("split_edge")
    if i >= 0:
        batch = batch.set_column(i, batch.schema.field(i), compute.numbers(edge, pa.bool_()))
    i = batch.schema.get_field_index("split_skipped")
    if last and skipped and i >= 0:
        values = pa.array([None] * (batch.num_rows - 1) + [list(skipped)], batch.schema.field(i).type)
        batch = batch.set_column(i, batch.schema.field(i), values)
    return batch
