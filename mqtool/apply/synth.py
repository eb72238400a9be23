"""Write realistic synthetic broker stores: ``python -m mqtool.apply.synth OUT [options]``.

The message mix, write rules and profiles ``4.8``, ``4.9`` and ``5`` are described in docs/reading.md
("Synthetic stores"); consume queues and index files are written by ``writers``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..formats import checkpoint as cpfmt, commitlog as clfmt
from ..formats.dispatch import DEFAULT_DELAY_TABLE, SCHEDULE_TOPIC, DispatchRequest, consume_queue_tags_code
from ..formats.hashing import body_crc
from ..formats.properties import PropertyKey, encode_properties, split_keys
from ..store.mappedfile import offset_file_name
from .writers import ConsumeQueueWriter, IndexWriterService

PROFILES = ("4.8", "4.9", "5")
LONG_TOPIC = ("synth_long_topic_" + "abcdefghijklmnopqrstuvwxyz0123456789-_" * 4)[:127]
RETRY_TOPIC_V2 = "%RETRY%synth_group_" + "x" * 170
TAGS = ("TagA", "TagB", "TagC", "tag_with-long-name.v2")
STORE_HOST_V4 = bytes([192, 168, 1, 100])
STORE_HOST_V6 = bytes.fromhex("fd000000000000000000000000001001")
WORDS = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt".split()


def parse_size(text: str) -> int:
    text = text.strip().lower()
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:], 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


@dataclass
class SynthSpec:
    out: Path
    profile: str = "4.9"
    seed: int = 1
    messages: int | None = 2000
    total_bytes: int | None = None
    message_size: int | None = None  # exact TOTALSIZE of every record (None: the mixed sizes)
    segment_size: int = 1 << 20
    cq_file_size: int = 1000 * 20
    hash_slot_num: int = 1000
    index_num: int = 4000
    consume_queues: bool = True
    index: bool = True
    crashed: bool = False
    start_timestamp: int = 1_795_000_000_000


class MessageMix:
    """Deterministic stream of message field dicts (everything but the offsets)."""

    def __init__(self, spec: SynthSpec):
        self.spec = spec
        self.rng = random.Random(spec.seed)
        retry = RETRY_TOPIC_V2 if spec.profile == "5" else "%RETRY%synth_group"
        self.topics = ["TopicTest", "orders_eu-west-1", LONG_TOPIC, "Tópico-主题-тема", retry]
        self.counter = 0
        self.last_prepared: int | None = None
        self.pid = self.rng.randrange(1 << 16)
        self.loader = self.rng.randrange(-(1 << 31), 1 << 31)
        self.blob = " ".join(self.rng.choice(WORDS) for _ in range(40_000)).encode()

    def _body(self, size: int) -> bytes:
        """``size`` bytes of text cut from a fixed pseudo-random blob (cheap, compressible)."""
        if size > len(self.blob):
            return (self.blob * (size // len(self.blob) + 1))[:size]
        start = self.rng.randrange(len(self.blob) - size + 1)
        return self.blob[start : start + size]

    def _uniq_key(self, born_ms: int) -> str:
        self.counter = (self.counter + 1) & 0xFFFF
        diff = born_ms % (30 * 86_400_000)
        raw = bytes([10, 1, 2, 3]) + self.pid.to_bytes(2, "big") + (self.loader & 0xFFFFFFFF).to_bytes(4, "big")
        return (raw + diff.to_bytes(4, "big") + self.counter.to_bytes(2, "big")).hex().upper()

    def next(self, seq: int, store_ts: int) -> dict:
        rng, spec = self.rng, self.spec
        topic = rng.choice(self.topics)
        queue_id = rng.randrange(4)
        sys_flag = (clfmt.SysFlag.BORNHOST_V6 if rng.random() < 0.15 else 0) | (clfmt.SysFlag.STOREHOST_V6 if rng.random() < 0.10 else 0)
        born_ms = store_ts - rng.randrange(1, 50)
        props: dict[str, str] = {}
        if rng.random() < 0.8:
            props[PropertyKey.TAGS] = rng.choice(TAGS)
        keys = [rng.choice(("order", "user", "k")) + f"-{seq % 997}-{i}" for i in range(rng.randrange(4))]
        if keys:
            props[PropertyKey.KEYS] = " ".join(keys)
        if rng.random() < 0.9:
            props[PropertyKey.UNIQ_KEY] = self._uniq_key(born_ms)
        props["CLUSTER"] = "SynthCluster"
        props["trace-ü"] = f"значение-{seq}"
        reconsume = rng.randrange(1, 17) if topic.startswith("%RETRY%") else 0
        prepared_offset = 0
        roll = rng.random()
        if roll < 0.05:
            sys_flag |= clfmt.TransactionType.PREPARED
            props[PropertyKey.TRAN_MSG] = "true"
        elif roll < 0.08 and self.last_prepared is not None:
            sys_flag |= clfmt.TransactionType.COMMIT
            prepared_offset = self.last_prepared
            props[PropertyKey.TRAN_MSG] = "true"
        elif roll < 0.10 and self.last_prepared is not None:
            sys_flag |= clfmt.TransactionType.ROLLBACK
            props[PropertyKey.TRAN_MSG] = "true"
        elif roll < 0.15:
            level = rng.randrange(1, 19)
            props[PropertyKey.REAL_TOPIC], props[PropertyKey.REAL_QID] = topic, str(queue_id)
            props[PropertyKey.DELAY] = str(level)
            topic, queue_id = SCHEDULE_TOPIC, level - 1
        topic_bytes = topic.encode()
        magic = clfmt.MESSAGE_MAGIC_V2 if spec.profile == "5" and len(topic) > 127 else clfmt.MESSAGE_MAGIC_V1
        prop_bytes = encode_properties(props, trailing_separator=spec.profile != "4.9")
        if spec.message_size is not None:
            size = spec.message_size - clfmt.message_length(magic, sys_flag, 0, len(topic_bytes), len(prop_bytes))
            body = self._body(max(size, 0))
        else:
            pick = rng.random()
            size = 0 if pick < 0.08 else rng.randrange(16, 1024) if pick < 0.7 else rng.randrange(1024, 8192) if pick < 0.95 else rng.randrange(8192, 24576)
            body = self._body(size)
            if size >= 4096 and rng.random() < 0.5:
                body = zlib.compress(body)
                sys_flag |= clfmt.SysFlag.COMPRESSED | (0 if spec.profile == "4.8" else 0x300)
        return {
            "magic_code": magic, "body_crc": body_crc(body) if body else 0, "queue_id": queue_id,
            "flag": rng.randrange(-(1 << 31), 1 << 31) if rng.random() < 0.3 else 0, "sys_flag": int(sys_flag), "born_timestamp": born_ms,
            "born_host_address": bytes.fromhex("20010db8" + "%024x" % rng.getrandbits(96)) if sys_flag & clfmt.SysFlag.BORNHOST_V6 else bytes([10, 0, rng.randrange(256), rng.randrange(1, 255)]),
            "born_host_port": rng.randrange(1024, 65536), "store_timestamp": store_ts,
            "store_host_address": STORE_HOST_V6 if sys_flag & clfmt.SysFlag.STOREHOST_V6 else STORE_HOST_V4, "store_host_port": 10911,
            "reconsume_times": reconsume, "prepared_transaction_offset": prepared_offset,
            "body": body, "topic": topic_bytes, "properties": prop_bytes, "_topic": topic, "_props": props,
        }


class CommitLogWriter:
    """Append records to segments, closing each with the end-of-file blank the profile writes."""

    def __init__(self, directory: Path, segment_size: int, legacy_blank: bool, base: int = 0):
        self.directory, self.segment_size, self.legacy_blank, self.pos = directory, segment_size, legacy_blank, 0
        self.scratch = bytearray()  # the broker's reusable msgStoreItemMemory (for <4.9.1 blanks)
        self.base = base  # the first segment's offset (a store whose older segments expired)
        directory.mkdir(parents=True, exist_ok=True)
        self.file = open(directory / offset_file_name(base), "wb")

    def offset_for(self, length: int, original: int | None = None) -> int:
        """Where a record of ``length`` bytes goes, rolling the segment first if it must, or if ``original`` is the next segment's
        start (a batch that does not fit rolls whole, reference §2.12)."""
        remaining = self.segment_size - self.pos
        rolls = original == self.base + self.segment_size and remaining >= clfmt.END_FILE_MIN_BLANK_LENGTH
        if rolls or length + clfmt.END_FILE_MIN_BLANK_LENGTH > remaining:
            blank = clfmt.encode_blank(remaining)
            if self.legacy_blank:
                fill = bytes(self.scratch[8:remaining])
                blank += fill + bytes(remaining - 8 - len(fill))
            self.file.write(blank)
            self._close_segment()
            self.base += self.segment_size
            self.pos = 0
            self.file = open(self.directory / offset_file_name(self.base), "wb")
        return self.base + self.pos

    def write(self, raw: bytes) -> None:
        self.file.write(raw)
        self.pos += len(raw)
        if self.legacy_blank:
            self.scratch[: len(raw)] = raw

    def _close_segment(self) -> None:
        self.file.truncate(self.segment_size)
        self.file.close()

    def close(self) -> int:
        self._close_segment()
        return self.base + self.pos


def build_store(spec: SynthSpec) -> dict:
    """Write a store under ``spec.out`` (which must not exist); returns a small summary."""
    out = Path(spec.out)
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    mix = MessageMix(spec)
    log = CommitLogWriter(out / "commitlog", spec.segment_size, legacy_blank=spec.profile == "4.8")
    cq = ConsumeQueueWriter(out / "consumequeue", spec.cq_file_size) if spec.consume_queues else None
    index = IndexWriterService(out / "index", spec.hash_slot_num, spec.index_num) if spec.index else None
    queue_offsets: dict[tuple[str, int], int] = {}
    store_ts = spec.start_timestamp
    seq = 0
    while (spec.messages is None or seq < spec.messages) and (spec.total_bytes is None or log.base + log.pos < spec.total_bytes):
        store_ts += mix.rng.randrange(0, 3)
        m = mix.next(seq, store_ts)
        topic, props = m.pop("_topic"), m.pop("_props")
        tran = clfmt.transaction_type(m["sys_flag"])
        dispatched = tran in (clfmt.TransactionType.NOT_TYPE, clfmt.TransactionType.COMMIT)
        key = (topic, m["queue_id"])
        m["queue_offset"] = queue_offsets.get(key, 0) if dispatched else 0
        length = clfmt.message_length(m["magic_code"], m["sys_flag"], len(m["body"]), len(m["topic"]), len(m["properties"]))
        m["phys_offset"] = log.offset_for(length)
        raw = clfmt.encode_message(m)
        log.write(raw)
        if tran is clfmt.TransactionType.PREPARED:
            mix.last_prepared = m["phys_offset"]
        if dispatched:
            queue_offsets[key] = m["queue_offset"] + 1
        request = DispatchRequest(topic, m["queue_id"], m["phys_offset"], len(raw), consume_queue_tags_code(topic, props, store_ts, DEFAULT_DELAY_TABLE),
                                  store_ts, m["queue_offset"], tuple(split_keys(props.get(PropertyKey.KEYS))), props.get(PropertyKey.UNIQ_KEY),
                                  m["sys_flag"], m["prepared_transaction_offset"])
        if cq is not None and dispatched:
            cq.put_request(request)
        if index is not None:
            index.put_request(request)
        seq += 1
    end = log.close()
    if cq is not None:
        cq.close(fsync=False)
    if index is not None:
        index.close()
    index_full_ts = index.full_end_timestamp if index is not None else 0
    (out / "checkpoint").write_bytes(cpfmt.encode_checkpoint(cpfmt.StoreCheckpoint(store_ts, store_ts, index_full_ts)).ljust(4096, b"\0"))
    (out / "lock").write_bytes(b"lock")
    if spec.crashed:
        (out / "abort").write_bytes(str(os.getpid()).encode() if spec.profile == "5" else b"")
    if spec.profile == "5":
        (out / "abort.bak").write_bytes(b"")
    config = out / "config"
    config.mkdir(exist_ok=True)
    topics = sorted({t for t, _ in queue_offsets})
    (config / "topics.json").write_text(json.dumps({"topicConfigTable": {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}
                                                                         for t in topics}}, indent=2))
    (config / "consumerOffset.json").write_text(json.dumps({"offsetTable": {f"{t}@synth_consumer": {str(q): o // 2 for (tt, q), o in queue_offsets.items()
                                                                                                    if tt == t} for t in topics}}, indent=2))
    return {"store": str(out), "messages": seq, "commitlog_end": end, "segments": end // spec.segment_size + 1}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mqtool.apply.synth", description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path, help="directory to create")
    p.add_argument("--profile", choices=PROFILES, default="4.9")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--messages", type=int, default=None, help="how many messages (default 2000 unless --bytes)")
    p.add_argument("--bytes", dest="total_bytes", metavar="BYTES", type=parse_size, default=None, help="stop once the commit log holds this much, e.g. 2g")
    p.add_argument("--message-size", type=parse_size, default=None, help="exact record size (default: a realistic mix)")
    p.add_argument("--segment-size", type=parse_size, default=parse_size("1m"))
    p.add_argument("--cq-file-size", type=int, default=1000 * 20)
    p.add_argument("--hash-slots", dest="hash_slot_num", metavar="HASH_SLOTS", type=int, default=1000)
    p.add_argument("--index-num", type=int, default=4000)
    p.add_argument("--no-cq", dest="consume_queues", action="store_false")
    p.add_argument("--no-index", dest="index", action="store_false")
    p.add_argument("--crashed", action="store_true", help="leave an abort file, as after kill -9")
    spec = SynthSpec(**vars(p.parse_args(argv)))
    if spec.messages is None and spec.total_bytes is None:
        spec.messages = 2000
    try:
        summary = build_store(spec)
    except (FileExistsError, OSError, ValueError) as exc:
        print(f"mqtool.apply.synth: error: {exc}", file=sys.stderr)
        return 3
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
