"""``mqtool salvage``: every valid record with its status, and ``--to-store``, against the real-broker fixtures.

Damage is made on copies (zeroed range, flipped body byte, torn segment); what must come out is
derived from the manifests (offsets, sizes, fields) and the recovered JSON (the broker's cut).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import MAIN_VERSIONS, VERSIONS, manifest, recovered, store_path
from mqtool.cli import app
from mqtool.cli.output import OutputFormat, emit_rows
from mqtool.store.records import MESSAGE_FIELDS, BodyEncoding
from mqtool.scan.messages import MessageScan
from mqtool.scan.salvage import SalvageScan
from mqtool.store import Store

SEGMENT = 1 << 20
FIELDS = {  # salvage / dump field -> manifest field
    "offset": "commitLogOffset", "size": "size", "topic": "topic", "queue_id": "queueId", "queue_offset": "queueOffset",
    "sys_flag": "sysFlag", "body_crc": "bodyCRC", "store_timestamp": "storeTimestamp", "born_timestamp": "bornTimestamp",
    "msg_id": "msgId", "tags": "tags", "keys": "keys", "body": "bodySha256", "properties": "properties",
}
NEW_STORE_FIELDS = ("topic", "queue_id", "sys_flag", "body_crc", "store_timestamp", "born_timestamp", "tags", "keys", "uniq_key", "properties")


def cli(*args):
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def salvage(path: Path, *args) -> tuple[int, list[dict]]:
    code, out, err = cli("salvage", path, "--format", "jsonl", "--no-progress", "--body", "sha256", *args)
    assert code in (0, 1), (code, err)
    return code, [json.loads(line) for line in out.splitlines()]


def messages(version: str, name: str = "clean-small") -> list[dict]:
    return sorted(manifest(version, name)["messages"], key=lambda m: m["commitLogOffset"])


def as_manifest(row: dict) -> dict:
    return {m: row[f] for f, m in FIELDS.items()}


def expected(m: dict) -> dict:
    e = {k: m.get(k) for k in FIELDS.values()}
    e["keys"] = m.get("keys") or []
    return e


def patch(root: Path, offset: int, data: bytes) -> None:
    with open(root / "commitlog" / f"{offset - offset % SEGMENT:020d}", "r+b") as f:
        f.seek(offset % SEGMENT)
        f.write(data)


def new_store_rows(path: Path) -> list[dict]:
    with Store.open(path) as store:
        scan = MessageScan(store, columns=["offset", "queue_offset", "uniq_key", "msg_id", *NEW_STORE_FIELDS])
        rows = [r for b in scan for r in b.to_pylist()]
        assert scan.end.is_clean
    for r in rows:
        r["properties"] = dict(r["properties"])
    return rows


@pytest.mark.parametrize("version", VERSIONS)
def test_a_clean_store_salvages_every_message_live(version):
    code, rows = salvage(store_path(version, "clean-small"))
    assert code == 0
    assert [as_manifest(r) for r in rows] == [expected(m) for m in messages(version)]
    assert {r["status"] for r in rows} == {"live"}


@pytest.mark.parametrize("version,name", [("4.8.0", "crashed-small"), ("4.9.7", "crashed-small"), ("5.3.3", "crashed-small")])
def test_the_live_records_end_where_the_broker_cut_the_crashed_log(version, name):
    code, rows = salvage(store_path(version, name))
    end = recovered(version, name)["commitLog"]["maxOffset"]
    assert code == 0
    live = [r for r in rows if r["status"] == "live"]
    assert live[-1]["offset"] + live[-1]["size"] == end
    acked = [m for m in messages(version, name) if m["commitLogOffset"] < end]
    assert [as_manifest(r) for r in live] == [expected(m) for m in acked]


def test_stale_records_after_a_rewritten_end_are_listed_only_on_request_and_never_written(tmp_path):
    root = store_path("4.9.7", "rewrite-clean")
    m = manifest("4.9.7", "rewrite-clean")
    stale = [r for r in m["stalePhase1Records"]["records"] if r["intactAtEnd"]]
    code, rows = salvage(root)
    assert code == 0 and {r["status"] for r in rows} == {"live"}
    assert [r["offset"] for r in rows] == [x["commitLogOffset"] for x in messages("4.9.7", "rewrite-clean")]
    code, rows = salvage(root, "--include-stale", "--to-store", tmp_path / "new")
    assert code == 0
    got = [(r["offset"], r["uniq_key"], r["msg_id"], r["body"]) for r in rows if r["status"] == "stale"]
    assert got == [(x["commitLogOffset"], x["uniqKey"], x["msgId"], x["bodySha256"]) for x in stale] and len(got) == m["stalePhase1Records"]["counts"]["beyondLogicalEnd"]
    assert all(r["new_offset"] is None for r in rows if r["status"] == "stale")
    assert [r["offset"] for r in new_store_rows(tmp_path / "new")] == [r["offset"] for r in rows if r["status"] == "live"]


def damage_zeroed_range(root: Path, msgs: list[dict]) -> set[int]:
    """4 KiB of zeros in the middle of the second segment: the records it touches are lost."""
    start = next(m for m in msgs if m["commitLogOffset"] >= SEGMENT + SEGMENT // 2)["commitLogOffset"]
    with open(root / "commitlog" / f"{SEGMENT:020d}", "rb") as f:
        f.seek(start - SEGMENT)
        before = f.read(4096)
    patch(root, start, bytes(4096))
    changed = start + max(i for i, b in enumerate(before) if b) + 1  # past the last byte the zeros really changed
    return {m["commitLogOffset"] for m in msgs if m["commitLogOffset"] < changed and m["commitLogOffset"] + m["size"] > start}


def damage_flipped_body_byte(root: Path, msgs: list[dict]) -> set[int]:
    """One flipped byte in the body of a record of the third segment: its CRC fails."""
    victim = next(m for m in msgs if m["commitLogOffset"] >= 2 * SEGMENT + SEGMENT // 3 and m["bodyLength"] > 100)
    with Store.open(root) as store:
        record = store.commitlog.read_record(victim["commitLogOffset"])
        body_at = victim["commitLogOffset"] + record.total_size - len(record.properties) - 2 - len(record.topic) - (2 if record.magic_version == 2 else 1) - len(record.body)
    at = body_at + len(record.body) // 2
    with open(root / "commitlog" / f"{at - at % SEGMENT:020d}", "r+b") as f:
        f.seek(at % SEGMENT)
        byte = f.read(1)
        f.seek(at % SEGMENT)
        f.write(bytes([byte[0] ^ 0x5A]))
    return {victim["commitLogOffset"]}


def damage_torn_segment(root: Path, msgs: list[dict]) -> set[int]:
    """The second half of the second segment never reached the disk (zeros), the rest did."""
    half = SEGMENT + SEGMENT // 2
    with open(root / "commitlog" / f"{SEGMENT:020d}", "r+b") as f:
        f.seek(SEGMENT // 2)
        f.write(bytes(SEGMENT // 2))
    return {m["commitLogOffset"] for m in msgs if SEGMENT <= m["commitLogOffset"] < 2 * SEGMENT and m["commitLogOffset"] + m["size"] > half}


@pytest.mark.parametrize("damage", [damage_zeroed_range, damage_flipped_body_byte, damage_torn_segment])
@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_salvage_past_damage_and_the_new_store_is_sound(version, damage, store_copy, tmp_path):
    root = store_copy(version, "clean-small")
    msgs = messages(version)
    lost = damage(root, msgs)
    cut = min(lost)
    new = tmp_path / "new store"
    code, rows = salvage(root, "--to-store", new)
    # the broker's next start reads the damage only from the segment it scans from (the third-from-last; 5.3.2+:
    # the newest at or below the consume queues' max, the last here): damage before it cuts nothing (issue #28)
    read = cut >= (4 if version == "5.3.3" else 2) * SEGMENT
    assert code == (1 if read or damage is damage_flipped_body_byte else 0)  # records lie past the damage, or one is skipped

    survivors = [m for m in msgs if m["commitLogOffset"] not in lost]
    assert [as_manifest(r) for r in rows] == [expected(m) for m in survivors]  # each exactly once, with its fields
    assert [r["status"] for r in rows] == ["live" if m["commitLogOffset"] < cut or not read else "past-damage" for m in survivors]

    code, out, err = cli("verify", new, "--format", "jsonl", "--no-progress")
    assert code == 0, out
    assert json.loads(out.splitlines()[-1])["summary"]["commitlog"]["records"] == len(survivors)
    copied = new_store_rows(new)
    by_new = {r["offset"]: r for r in copied}
    assert len(copied) == len(rows)
    next_queue_offset: dict[tuple[str, int], int] = {}
    for row, m in zip(rows, survivors):
        moved = by_new[row["new_offset"]]
        assert {k: moved[k] for k in NEW_STORE_FIELDS} == {k: row[k] for k in NEW_STORE_FIELDS}
        assert moved["queue_offset"] == row["new_queue_offset"]
        if row["status"] == "live" and m["commitLogOffset"] < cut:  # after damage the broker never reads, live records move up
            assert (row["new_offset"], row["new_queue_offset"]) == (m["commitLogOffset"], m["queueOffset"])
        if m["dispatchToConsumeQueue"]:  # contiguous queue offsets per queue
            key = (m["topic"], m["queueId"])
            assert row["new_queue_offset"] == next_queue_offset.get(key, row["new_queue_offset"])
            next_queue_offset[key] = row["new_queue_offset"] + 1
    if read:
        assert min(r["new_offset"] for r in rows if r["status"] == "past-damage") > max(r["new_offset"] for r in rows if r["status"] == "live")

    # a consumer reaches every dispatched message of the new store through its consume queue
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(m["uniqKey"] for m in survivors if m.get("uniqKey") and m["dispatchToConsumeQueue"]))
    code, out, err = cli("survivors", new, ids, "--format", "jsonl", "--no-progress")
    assert code == 0, out[-500:]


@pytest.mark.parametrize("version,name", [("4.8.0", "clean-small"), ("4.9.7", "retention-small")])
def test_the_new_store_of_an_old_or_expired_store_is_sound(version, name, tmp_path):
    new = tmp_path / "new"
    code, rows = salvage(store_path(version, name), "--to-store", new)
    assert code == 0
    with Store.open(store_path(version, name)) as store:
        min_offset = store.commitlog.min_offset
    with Store.open(new) as store:
        assert store.commitlog.min_offset == min_offset
    assert [r["offset"] for r in new_store_rows(new)] == [r["offset"] for r in rows] == [r["new_offset"] for r in rows]
    code, out, _ = cli("verify", new, "--format", "jsonl", "--no-progress")
    assert code == 0, out


@pytest.mark.parametrize("version", ["4.9.2", "4.9.7", "5.0.0"])
def test_the_new_store_of_a_batch_store_keeps_every_offset(version, tmp_path):
    """A batch that does not fit starts the next segment (the broker rolls the whole batch, reference §2.12):
    its first record was placed in the space left before it, and every live record after it was re-encoded
    at a new offset (4.9.7 batch-small: 430 of 800, their offsetMsgIds changed). Now the new store's
    commit log is the source's, byte for byte."""
    source = store_path(version, "batch-small")
    new = tmp_path / "new"
    code, rows = salvage(source, "--to-store", new)
    assert code == 0
    assert [(r["new_offset"], r["new_queue_offset"]) for r in rows] == [(r["offset"], r["queue_offset"]) for r in rows]
    assert [m["commitLogOffset"] for m in messages(version, "batch-small")] == [r["offset"] for r in rows]
    for segment in sorted((source / "commitlog").iterdir()):
        assert (new / "commitlog" / segment.name).read_bytes() == segment.read_bytes(), segment.name
    code, out, _ = cli("verify", new, "--format", "jsonl", "--no-progress")
    assert code == 0, out


def test_parquet_output_holds_the_same_rows(tmp_path):
    root = store_path("5.3.3", "clean-small")
    _, rows = salvage(root)
    out = tmp_path / "salvage.parquet"
    code, _, err = cli("salvage", root, "--format", "parquet", "--out", out, "--no-progress")
    assert code == 0, err
    table = pq.read_table(out)
    assert table.column("offset").to_pylist() == [r["offset"] for r in rows]
    assert table.column("status").to_pylist() == [r["status"] for r in rows]
    assert table.column("uniq_key").to_pylist() == [r["uniq_key"] for r in rows]


def test_parquet_of_no_message_is_a_file_with_the_columns(tmp_path):
    """Before: `salvage -f parquet --out FILE` on a commit log with no valid record exited 0 and wrote no
    FILE (jsonl and csv write an empty one): a script reading FILE next failed. It now holds no row and
    the columns of a salvage with messages (the 5.3.3 clean-small store's, with its zeroed copy)."""
    import shutil

    root = tmp_path / "zeroed"
    shutil.copytree(store_path("5.3.3", "clean-small"), root)
    for segment in (root / "commitlog").iterdir():
        segment.write_bytes(bytes(segment.stat().st_size))
    for store, out in ((store_path("5.3.3", "clean-small"), tmp_path / "full.parquet"), (root, tmp_path / "none.parquet")):
        code, _, err = cli("salvage", store, "-f", "parquet", "--body", "base64", "--to-store", tmp_path / f"new-{out.stem}", "--out", out)
        assert code == 0, err
    full, none = pq.read_table(tmp_path / "full.parquet"), pq.read_table(tmp_path / "none.parquet")
    assert full.num_rows == len(manifest("5.3.3", "clean-small")["messages"]) and none.num_rows == 0
    assert none.schema.equals(full.schema) and {"body", "status", "new_offset"} <= set(none.schema.names)


def test_a_table_written_to_a_file_keeps_every_column(tmp_path, monkeypatch):
    """At 80 columns the terminal table leaves out the message ids and sizes (said on stderr); a
    report written with ``--out`` is not read at that width and kept them all the same."""
    monkeypatch.setenv("COLUMNS", "80")
    root = store_path("4.9.7", "crashed-small")
    _, rows = salvage(root)
    out = tmp_path / "salvage.txt"
    code, _, err = cli("salvage", root, "--out", out, "--no-progress")
    assert code == 0 and "not shown" not in err, err
    cells = []
    for line in out.read_text().splitlines():
        if set(line) <= {"-", " "} and line:  # under a heading: the columns' spans
            spans = [m.span() for m in re.finditer("-+", line)]
        elif line and line.split()[0] != "offset":
            cells.append([line[a:b].strip() for a, b in spans])
    assert [c[6:8] for c in cells] == [[r["msg_id"], r["uniq_key"] or ""] for r in rows]
    code, shown, err = cli("salvage", root, "--no-progress")
    assert "not shown at 80 columns: size, uniq key, msg id" in err and "uniq key" not in shown.splitlines()[0]


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
@pytest.mark.parametrize("version,name,damaged", [("4.9.7", "rewrite-clean", False), ("5.3.3", "crashed-small", False), ("4.8.0", "clean-small", True)])
def test_the_text_formats_print_what_the_rows_print(version, name, damaged, fmt, store_copy):
    """JSON Lines, JSON and CSV come from the compiled text encoder, as ``dump``'s do: the bytes
    ``emit_rows`` writes for the rows as dicts, past damage and stale records included."""
    root = store_copy(version, name)
    if damaged:
        target = messages(version, name)[2 * len(messages(version, name)) // 3]  # where the broker's next start reads it (issue #28)
        patch(root, target["commitLogOffset"], bytes(4096))
    code, out, err = cli("salvage", root, "--format", fmt, "--include-stale", "--body", "base64", "--no-progress")
    assert code == (1 if damaged else 0), err
    with Store.open(root) as store:
        scan = SalvageScan(store, columns=list(MESSAGE_FIELDS), body=BodyEncoding.base64, include_stale=True)
        rows = [{**r, "properties": dict(r["properties"])} for b in scan for r in b.to_pylist()]
    reference = io.StringIO()
    emit_rows(rows, OutputFormat(fmt), MESSAGE_FIELDS + ("status",), out=reference)
    assert out == reference.getvalue()
    assert {r["status"] for r in rows} >= ({"live", "past-damage"} if damaged else {"live"})
    assert name != "rewrite-clean" or "stale" in {r["status"] for r in rows}


def test_refusals_and_bad_input(tmp_path, store_copy):
    root = store_copy("4.9.7", "clean-small")
    assert cli("salvage", root, "--to-store", root / "salvaged", "--no-progress")[0] == 4
    assert not (root / "salvaged").exists()
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    assert cli("salvage", root, "--to-store", full, "--no-progress")[0] == 4
    assert cli("salvage", root, "--format", "parquet", "--no-progress")[0] == 2
    assert cli("salvage", tmp_path / "nothing", "--no-progress")[0] == 3


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_out_that_is_a_directory_is_one_error_line(tmp_path, fmt):
    """``--out DIR``: exit 3 and one line naming it (before: first a note that DIR "holds only the rows
    written before salvage stopped", though nothing was written to it)."""
    code, _, err = cli("salvage", store_path("4.9.7", "clean-small"), "-f", fmt, "--out", tmp_path, "--no-progress")
    [line] = err.splitlines()
    assert code == 3 and line == f"mqtool: error: {tmp_path}: Is a directory"  # parquet too: not pyarrow's "Failed to open local file"
    assert list(tmp_path.iterdir()) == []
    missing = tmp_path / "gone" / f"out.{fmt}"
    code, _, err = cli("salvage", store_path("4.9.7", "clean-small"), "-f", fmt, "--out", missing, "--no-progress")
    assert code == 3 and err.splitlines() == [f"mqtool: error: {missing}: No such file or directory"]


def test_every_file_and_directory_of_the_new_store_is_made_durable(tmp_path, monkeypatch):
    """Before: ``--to-store`` fsynced the segments, queue files and queue directories, but not the
    copied ``config/*.json``, nor ``config/``, ``commitlog/``, ``consumequeue/`` and its topics'
    directories, whose entries name them: a power cut after a salvage that said it was done could
    lose segments or whole queues."""
    from mqtool.apply import salvage_store, writers

    synced = set()
    for module in (salvage_store, writers):
        monkeypatch.setattr(module, "fsync_path", synced.add)
        monkeypatch.setattr(module, "fsync_dir", synced.add)
    new = tmp_path / "new"
    code, _ = salvage(store_path("5.3.3", "config-real"), "--to-store", new)
    assert code == 0
    dirs = {p for p in new.rglob("*") if p.is_dir()}  # files written under another name are fsynced before their rename
    configs = set((new / "config").iterdir())
    assert {new / "config", new / "commitlog", new / "consumequeue"} <= dirs and configs
    built = tmp_path / "new.mqtool-partial"  # built there, then renamed to ``new`` (its parent synced after): the same inodes
    synced = {new / p.relative_to(built) if p.is_relative_to(built) else p for p in synced}
    assert dirs | configs | {new, tmp_path} <= synced, sorted(map(str, (dirs | configs) - synced))


def test_a_body_crc_failure_the_broker_never_reads_exits_1_with_nothing_past_damage(store_copy):
    """README's exit 1 of ``salvage`` for a record that fails its body CRC: one in the first segment of a 4.9.7
    ``clean-small``, before the segment its normal recovery scans from, cuts nothing, yet that record is not salvaged."""
    root = store_copy("4.9.7", "clean-small")
    msgs = messages("4.9.7")
    victim = next(m for m in msgs if m["commitLogOffset"] < SEGMENT and m["bodyLength"] > 100 and "[" not in m["bornHost"] + m["storeHost"])
    patch(root, victim["commitLogOffset"] + 96 + 100, b"\x00\xff")  # two body bytes (IPv4 hosts: the body starts at 96)
    code, out, err = cli("salvage", root, "--format", "jsonl", "--no-progress")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and {r["status"] for r in rows} == {"live"} and len(rows) == len(msgs) - 1
    assert f"skipped the record at {victim['commitLogOffset']} ({victim['size']} bytes): its body CRC does not match" in err
