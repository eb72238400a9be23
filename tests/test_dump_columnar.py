"""``mqtool dump`` through the columnar core prints exactly what the record-by-record dump printed
(``dump_reference``): every fixture store, every format and body encoding, the filters, limits,
offsets, ``--msg-id`` and the end note; index lookups and ``--from-offset`` resync."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import manifest, run_loading, store_path
from dump_reference import reference_dump
from mqtool.cli import app
from mqtool.formats.hashing import java_string_hash
from mqtool.formats.index import index_key
from mqtool.store.records import MESSAGE_FIELDS, BodyEncoding, message_dict
from mqtool.scan.batches import MessageBatchBuilder
from mqtool.scan.text import BatchText, TextFormat
from mqtool.store import Store
from mqtool.store.fastscan import FastScan

runner = CliRunner()


CLASSIC = [("4.8.0", "clean-small"), ("4.8.0", "crashed-small"), ("4.9.7", "clean-small"), ("4.9.7", "crashed-small"),
           ("4.9.7", "retention-small"), ("4.9.7", "rewrite-clean"), ("4.9.7", "batch-small"), ("4.9.7", "config-real"),
           ("5.3.3", "clean-small"), ("5.3.3", "crashed-small"), ("5.3.3", "lmq-small"), ("5.3.3", "timer-small")]
OPTION = {"start": "--from-offset", "stop": "--to-offset", "msg_id": "--msg-id", "limit": "--limit", "topics": "--topic",
          "queue": "--queue", "since": "--since", "until": "--until", "key": "--key", "tag": "--tag", "uniq_key": "--uniq-key"}


def dump(path, fmt="table", body="none", decompress=False, extra=(), *, code=0, **options):
    args = ["dump", str(path), "-f", fmt, "--body", body, *(["--decompress"] if decompress else []), *extra]
    for name, value in options.items():
        for v in value if isinstance(value, list) else [value]:
            args += [OPTION[name], str(v)]
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    return result.stdout_bytes.decode(), result.stderr


def assert_same(path, fmt="table", body="none", decompress=False, extra=(), **options):
    if {"key", "uniq_key"} & set(options):  # the reference scans: so does the dump
        extra = ("--no-index", *extra)
    expected = reference_dump(path, fmt, body, decompress, **options)
    missed = "msg_id" in options and expected[0].strip() in ("", "[]")  # a --msg-id lookup that prints nothing exits 1
    got = dump(path, fmt, body, decompress, extra, code=1 if missed else 0, **options)
    assert got[0] == expected[0]
    assert got[1] == expected[1]
    return got


@pytest.mark.parametrize("version,name", CLASSIC)
def test_every_store_every_format(version, name):
    out, _ = assert_same(store_path(version, name), "jsonl")
    assert out.count("\n") > 100
    fmt = ["csv", "json"][CLASSIC.index((version, name)) % 2]
    assert_same(store_path(version, name), fmt, stop=1 << 20)


@pytest.mark.parametrize("version,name", [("4.8.0", "crashed-small"), ("5.3.3", "clean-small")])
def test_table(version, name):
    assert_same(store_path(version, name), "table", limit=450)


@pytest.mark.parametrize("body", ["utf8", "hex", "base64", "sha256"])
def test_every_body_encoding(body):
    for (version, name), fmt in zip([("4.8.0", "clean-small"), ("4.9.7", "crashed-small"), ("5.3.3", "clean-small")], ["jsonl", "csv", "json"]):
        assert_same(store_path(version, name), fmt, body, stop=3 << 20)
    assert_same(store_path("5.3.3", "clean-small"), "csv", body, decompress=True)
    assert_same(store_path("4.9.7", "clean-small"), "jsonl", body, decompress=True)


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7", "5.3.3"])
def test_filters_limits_offsets_and_msg_id(version):
    path = store_path(version, "clean-small")
    msgs = sorted(manifest(version, "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    probe = next(m for m in msgs if len(m["keys"]) >= 2 and m["tags"] and m["uniqKey"])
    t0 = msgs[len(msgs) // 3]["storeTimestamp"]
    cases = [
        dict(topics=[probe["topic"]]),
        dict(topics=["TopicTest", probe["topic"]], queue=2),
        dict(tag=probe["tags"]),
        dict(key=probe["keys"][1]),
        dict(uniq_key=probe["uniqKey"]),
        dict(topics=[probe["topic"]], key=probe["keys"][0], tag=probe["tags"]),
        dict(since=t0, until=msgs[len(msgs) // 2]["storeTimestamp"]),
        dict(start=msgs[5]["commitLogOffset"], stop=msgs[900]["commitLogOffset"]),
        dict(limit=1), dict(limit=37, tag=probe["tags"]),
        dict(msg_id=probe["msgId"]), dict(msg_id=probe["msgId"], topics=["no-such-topic"]),
        dict(topics=["no-such-topic"]),
    ]
    for options in cases:
        for fmt in ("jsonl", "json"):
            assert_same(path, fmt, **options)


def test_a_damaged_store_ends_with_the_same_note(store_copy):
    """A body whose CRC no longer matches (read on, ``crc_ok`` false) and a torn record (the stop note)."""
    store = store_copy("5.3.3", "crashed-small")
    msgs = sorted(manifest("5.3.3", "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    torn, flipped = msgs[-1], next(m for m in msgs[100:] if m["bodyLength"] > 16)
    segment = lambda m: store / "commitlog" / f"{m['commitLogOffset'] // (1 << 20) * (1 << 20):020d}"  # noqa: E731
    with Store.open(store) as s:
        body = s.commitlog.read_record(flipped["commitLogOffset"]).body
    with open(segment(flipped), "r+b") as f:
        pos = flipped["commitLogOffset"] % (1 << 20)
        f.seek(pos)
        at = pos + f.read(flipped["size"]).index(body)
        f.seek(at + 3)
        f.write(bytes([body[3] ^ 0x55]))
    with open(segment(torn), "r+b") as f:
        f.seek(torn["commitLogOffset"] % (1 << 20) + torn["size"] // 2)
        f.write(bytes(torn["size"] - torn["size"] // 2))  # the second half never reached the disk
    for fmt in ("jsonl", "csv"):
        out, err = assert_same(store, fmt)
        assert err.startswith(f"mqtool: stopped at offset {torn['commitLogOffset']}: ")
    assert sum(not json.loads(line)["crc_ok"] for line in dump(store, "jsonl")[0].splitlines()) == 1


def test_text_encoder_equals_json_and_csv_on_the_python_decoder_too():
    """The encoder on batches the builder's Python path made (the path for records the columns cannot decide)."""
    with Store.open(store_path("4.9.7", "clean-small")) as store:
        for force in (False, True):
            builder = MessageBatchBuilder("", legacy_properties=store.legacy_properties, delay_table=store.delay_table, body=BodyEncoding.utf8, columns=MESSAGE_FIELDS, force_python=force)
            walk = FastScan(store.commitlog, stop_on_crc=False, batch=500)
            for seg in walk:
                batch = builder.build(seg, seg.base_offset).select(list(MESSAGE_FIELDS))
                records = [store.commitlog.read_record(o) for o in batch.column("offset").to_pylist()]
                rows = [message_dict(r, BodyEncoding.utf8, legacy_properties=store.legacy_properties, delay_table=store.delay_table) for r in records]
                assert BatchText(MESSAGE_FIELDS, TextFormat.jsonl).encode(batch).tobytes().decode() == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
                assert BatchText(MESSAGE_FIELDS, TextFormat.jsonl).encode(batch.slice(7, 100)).tobytes().decode() == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[7:107])
                break
            assert builder.python_batches == (1 if force else 0)


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7", "5.3.3"])
def test_from_offset_inside_a_record_starts_at_the_next_record(version):
    path = store_path(version, "clean-small")
    msgs = sorted(manifest(version, "clean-small")["messages"], key=lambda m: m["commitLogOffset"])
    for i in (0, 17, 500):
        out, _ = dump(path, "jsonl", start=msgs[i]["commitLogOffset"] + 9, limit=3)
        assert [json.loads(line)["offset"] for line in out.splitlines()] == [m["commitLogOffset"] for m in msgs[i + 1 : i + 4]]
    # inside the blank at the end of the first segment: the next segment's first record
    first_next = next(m for m in msgs if m["commitLogOffset"] >= 1 << 20)
    before = max(m["commitLogOffset"] + m["size"] for m in msgs if m["commitLogOffset"] < 1 << 20)
    out, _ = dump(path, "jsonl", start=before + 3, limit=1)
    assert json.loads(out)["offset"] == first_next["commitLogOffset"] == 1 << 20


def colliding(key: str) -> str:
    """Another string with the same Java hashCode (``"Aa"`` and ``"BB"`` collide): the index cannot tell them apart."""
    a, b = key[-2], key[-1]
    other = key[:-2] + chr(ord(a) - 1) + chr(ord(b) + 31)
    assert java_string_hash(other) == java_string_hash(key) and other != key
    return other


@pytest.mark.parametrize("version", ["4.8.0", "4.9.7", "5.3.3"])
def test_key_lookups_through_the_index_equal_the_scan(version):
    """The index holds every record with the key except ROLLBACK ones (``IndexService.buildIndex``)."""
    path = store_path(version, "clean-small")
    msgs = manifest(version, "clean-small")["messages"]
    not_rollback = lambda row: row["transaction_type"] != "ROLLBACK"  # noqa: E731
    probes = [m for m in msgs if m["keys"]][:40:8] + [m for m in msgs if m["keys"] and m["sysFlag"] & 0xC == 0xC][:2]
    for m in probes:
        for options in (dict(topics=[m["topic"]], key=m["keys"][-1]), dict(topics=[m["topic"]], uniq_key=m["uniqKey"])):
            if options.get("uniq_key", "") is None:
                continue
            out, err = dump(path, "jsonl", **options)
            expected, _ = reference_dump(path, "jsonl", keep=not_rollback, **options)
            assert out == expected and "looked up through the index" in err
    # a key whose topic#key hashes like a real one: the chain names records, none of them match
    m = next(m for m in msgs if m["keys"] and len(m["keys"][-1]) > 2)
    fake = colliding(index_key(m["topic"], m["keys"][-1]))[len(m["topic"]) + 1 :]
    with Store.open(path) as store:
        assert any(list(f.chain(index_key(m["topic"], fake))) for f in store.index_files)
    out, err = dump(path, "jsonl", topics=[m["topic"]], key=fake)
    assert out == "" and "0 matching" in err


def test_key_lookups_fall_back_to_the_scan_and_say_why():
    crashed = store_path("4.9.7", "crashed-small")
    m = next(m for m in manifest("4.9.7", "crashed-small")["messages"] if m["keys"])
    out, err = dump(crashed, "jsonl", topics=[m["topic"]], key=m["keys"][0])
    assert out == reference_dump(crashed, "jsonl", topics=[m["topic"]], key=m["keys"][0])[0]
    assert err.splitlines()[0] == "mqtool: --key: the store was not shut down cleanly (abort file), its index may lag the commit log; scanning the commit log"
    out, err = dump(store_path("4.9.7", "clean-small"), "jsonl", key=m["keys"][0])
    assert err.splitlines()[0] == "mqtool: --key without --topic: the index is keyed by topic#key; scanning the commit log"


def test_help_lists_commands_without_importing_them():
    from mqtool.cli import LAZY_COMMANDS, load_command

    for name, (_module, _function, summary) in LAZY_COMMANDS.items():
        command = load_command(name)
        assert " ".join(line.strip() for line in command.help.split("\n\n")[0].splitlines()) == summary
    probe = ("import sys; from typer.testing import CliRunner; from mqtool.cli import app; out = CliRunner().invoke(app, ['--help']).stdout;"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numpy', 'pyarrow', 'rich', 'pydantic') or m.startswith('mqtool.cli.'))); print(out)")
    loaded, listing = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n", 1)
    assert loaded == "['mqtool.cli.coercion', 'mqtool.cli.state']"
    assert all(f"  {name} " in listing for name in LAZY_COMMANDS)


@pytest.mark.parametrize("command", [["dump", "{store}", "--msg-id", "{msgId}", "--format", "jsonl"], ["query", "msg-id", "{store}", "{msgId}", "--format", "jsonl"],
                                     ["query", "uniq-key", "{store}", "{topic}", "{uniqKey}", "--format", "jsonl"]])
def test_a_lookup_loads_no_compiled_code(command):
    """A lookup reads a few records: no compiled code, no numpy and no pydantic (typer's
    value conversion, ``mqtool/cli/coercion.py``) load for it."""
    path = store_path("5.3.3", "clean-small")
    probe = manifest("5.3.3", "clean-small")["messages"][7]
    argv = [a.format(store=path, **probe) for a in command]
    proc, loaded = run_loading(argv, ("mqtool.store._fastscan", "numpy", "pydantic"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[0])["offset"] == probe["commitLogOffset"]
    assert loaded == []
