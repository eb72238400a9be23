"""One answer to "what will the broker's next start do" (issue #28): ``info``, ``verify``, ``recover``,
``repair`` and ``salvage`` report the same recovery mode, logical end and dropped messages
(``store/nextstart.py``), and ``verify`` leads with it.

The damaged stores are copies of real-broker fixtures damaged here; every expectation comes from
the fixture's manifest or recovered JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import MAIN_VERSIONS, VERSIONS, copy_store, manifest, recovered, store_path
from mqtool.cli import app

SEGMENT = 1 << 20
HEADER = 96  # bytes before the body of a record with IPv4 hosts (reference §2.1)


def cli(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


def next_starts(root: Path, *given: str) -> dict[str, dict]:
    """``next_start`` as each command's JSON reports it (salvage: its line on stderr, checked
    against the others'), and verify's first table line; ``given``: options every command gets."""
    got = {}
    code, out, err = cli("info", root, "-f", "json", *given)
    assert code == 0, err
    got["info"] = json.loads(out)["next_start"]
    code, out, err = cli("verify", root, "-f", "json", "--no-progress", *given)
    got["verify"] = json.loads(out)["summary"]["next_start"]
    assert got["verify"]["logical_end"] == json.loads(out)["summary"]["commitlog"]["logical_end"]
    for command in ("recover", "repair"):
        code, out, err = cli(command, root, "--dry-run", "-f", "json", *given)
        assert code == 0, err
        got[command] = json.loads(out)["next_start"]
    code, out, err = cli("salvage", root, "-f", "jsonl", "--no-progress", *given)
    assert f"mqtool: {got['info']['line']}\n" in err, err
    got["salvage"] = got["info"]
    return got


def one_answer(root: Path, *given: str) -> dict:
    got = next_starts(root, *given)
    first = got["info"]
    assert all(doc == first for doc in got.values()), got
    return first


def verify_first_line(root: Path, monkeypatch, *given: str) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # one line, not wrapped
    code, out, err = cli("verify", root, "--no-progress", *given)
    return out.splitlines()[0]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_a_zeroed_first_segment_is_never_read_by_the_next_start(tmp_path, version, monkeypatch):
    """Normal recovery scans from the third-from-last segment: segment 0 all zeros ends nothing
    (not "logical end 0"), the log is kept to its end and nothing is dropped."""
    root = copy_store(version, "clean-small", tmp_path)
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.write(bytes(SEGMENT))
    doc = manifest(version, "clean-small")
    ns = one_answer(root)
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == ("normal", doc["commitLogMaxOffset"], 0)
    assert ns["scan_from"] == (4 if version == "5.3.3" else 2) * SEGMENT  # 5.3.2+: the newest segment at or below the CQ max
    assert verify_first_line(root, monkeypatch) == ns["line"]
    code, out, _ = cli("verify", root, "-f", "json", "--no-progress")
    findings = json.loads(out)["findings"]
    assert not any(f["kind"].endswith("-beyond-end") for f in findings)  # nothing points past an end at 0
    assert [f["details"]["read_by_broker_recovery"] for f in findings if f["kind"] == "damaged-range"] == [False]
    code, out, _ = cli("salvage", root, "-f", "jsonl", "--no-progress")
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["status"] for r in rows} == {"live"}
    assert [r["offset"] for r in rows] == sorted(m["commitLogOffset"] for m in doc["messages"] if m["commitLogOffset"] >= SEGMENT)


def body_in_third_segment(root: Path, doc: dict) -> tuple[dict, Path, int]:
    """A message of the third segment with a body of more than 200 bytes (IPv4 hosts), its segment file, and the
    position in that file of its body's 101st byte."""
    victim = next(m for m in doc["messages"] if m["commitLogOffset"] > 2 * SEGMENT + SEGMENT // 10 and m["bodyLength"] > 200
                  and "[" not in m["bornHost"] + m["storeHost"])
    at = victim["commitLogOffset"] + HEADER + 100
    return victim, root / "commitlog" / f"{at // SEGMENT * SEGMENT:020d}", at % SEGMENT


def flip_body_in_third_segment(root: Path, doc: dict) -> dict:
    """``body_in_third_segment``'s byte flipped (its body CRC fails); the message."""
    victim, segment, at = body_in_third_segment(root, doc)
    with open(segment, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ 0xFF]))
    return victim


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_a_bad_crc_in_the_third_from_last_segment_is_where_the_next_start_cuts(tmp_path, version, monkeypatch):
    """Before 5.3.2 the broker's normal recovery reads the third-from-last segment with
    checkCRCOnRecover: it keeps the log up to the record whose body was flipped and drops it and
    everything after. From 5.3.2 it starts at the consume queues' max (rules-by-version 2.1), in
    the last segment here: it never reads the flipped record and keeps the whole log."""
    root = copy_store(version, "clean-small", tmp_path)
    doc = manifest(version, "clean-small")
    victim = flip_body_in_third_segment(root, doc)
    dropped = sum(1 for m in doc["messages"] if m["commitLogOffset"] >= victim["commitLogOffset"])
    given = ("--broker-version", version)  # 5.3.1 and 5.3.3 leave the same marks and start in different places
    ns = one_answer(root, *given)
    line = verify_first_line(root, monkeypatch, *given)
    assert line == ns["line"]
    if version == "5.3.3":
        assert (ns["mode"], ns["logical_end"], ns["dropped_messages"], ns["scan_from"]) == ("normal", doc["commitLogMaxOffset"], 0, 4 * SEGMENT)
        return
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == ("normal", victim["commitLogOffset"], dropped)
    assert line == ns["line"]
    assert line.startswith(f"the broker's next start keeps [0, {victim['commitLogOffset']}) and drops {dropped} messages after it "
                           f"(crc mismatch at {victim['commitLogOffset']})")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_crashed_store_is_recovered_abnormally_to_where_the_broker_ended_it(version, monkeypatch):
    ns = one_answer(store_path(version, "crashed-small"))
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == ("abnormal", recovered(version, "crashed-small")["commitLog"]["maxOffset"], 0)
    assert verify_first_line(store_path(version, "crashed-small"), monkeypatch) == ns["line"]


@pytest.mark.parametrize("version", ["4.5.1", "4.9.7"])
def test_a_record_zeroed_from_inside_its_body_ends_the_log_for_its_crc_in_every_command(tmp_path, version, monkeypatch):
    """Zeros from inside a record's body to its segment's end (pages a crash lost): the record fails both its body
    CRC and its length. ``checkMessageAndReturnSize`` checks the CRC as it reads the body, before the length, so
    the broker's recovery ends there for the CRC. Before: verify, whose own walk judges the length first, said
    "half message" where info, recover and repair said "crc mismatch" (damage seed 12600100)."""
    root = copy_store(version, "clean-small", tmp_path)
    victim, segment, at = body_in_third_segment(root, manifest(version, "clean-small"))
    with open(segment, "r+b") as f:
        f.seek(at)
        f.write(bytes(SEGMENT - at))
    ns = one_answer(root, "--broker-version", version)
    assert (ns["logical_end"], ns["reason"]) == (victim["commitLogOffset"], f"crc mismatch at {victim['commitLogOffset']}")
    assert verify_first_line(root, monkeypatch, "--broker-version", version) == ns["line"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_clean_store_drops_nothing(version, monkeypatch):
    ns = one_answer(store_path(version, "clean-small"))
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == ("normal", manifest(version, "clean-small")["commitLogMaxOffset"], 0)
    assert verify_first_line(store_path(version, "clean-small"), monkeypatch) == ns["line"]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_dump_and_stats_read_the_records_the_next_start_keeps_past_damage_it_never_reads(tmp_path, version):
    """Segment 0 zeroed: the broker keeps and serves every record after it, so ``dump`` and ``stats``
    read on past the zeros (saying so) instead of ending the log at 0."""
    root = copy_store(version, "clean-small", tmp_path)
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.write(bytes(SEGMENT))
    kept = sorted(m["commitLogOffset"] for m in manifest(version, "clean-small")["messages"] if m["commitLogOffset"] >= SEGMENT)
    code, out, err = cli("dump", root, "-f", "jsonl")
    assert code == 0 and [json.loads(line)["offset"] for line in out.splitlines()] == kept
    assert "where the broker's next start scans from, so it never reads it" in err
    code, out, err = cli("stats", root, "-f", "json")
    assert code == 0 and sum(r["messages"] for r in json.loads(out) if "period" not in r) == len(kept)


@pytest.mark.parametrize("version", MAIN_VERSIONS)
@pytest.mark.parametrize("name", ["dledger-small", "dledger-crashed"])
def test_a_dledger_store_has_the_same_next_start_in_every_command(version, name, monkeypatch):
    """A DLedger store (reference §15.4): the entry walk of ``DLedgerMmapFileStore.recover`` ends the
    log where the broker's recovered JSON does, and every command says so in the same words."""
    root = store_path(version, name)
    ns = one_answer(root)
    want = recovered(version, name)
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == (want["recoveryMode"], want["commitLog"]["maxOffset"], 0)
    assert verify_first_line(root, monkeypatch) == ns["line"]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_a_broken_dledger_entry_is_where_the_next_start_cuts(tmp_path, version, monkeypatch):
    """An entry whose magic is broken ends ``DLedgerMmapFileStore.recover``'s walk: the data are
    truncated at that entry's position and every later message is dropped."""
    root = copy_store(version, "dledger-small", tmp_path)
    doc = manifest(version, "dledger-small")
    victim = next(m["dledgerEntry"] for m in doc["messages"] if m["dledgerEntry"]["pos"] > SEGMENT + SEGMENT // 4)
    with open(root / "dledger-n0" / victim["file"], "r+b") as f:
        f.seek(victim["filePosition"])
        f.write(b"\x00\x00\x00\x09")  # magic
    dropped = sum(1 for m in doc["messages"] if m["dledgerEntry"]["pos"] >= victim["pos"])  # its own message too
    ns = one_answer(root)
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == ("normal", victim["pos"], dropped)
    assert verify_first_line(root, monkeypatch) == ns["line"]


def test_a_dledger_data_stray_refuses_before_a_cut_consume_queue_file_in_every_command(tmp_path, monkeypatch):
    """DLedger's ``MmapFileList.load`` (``DLedgerCommitLog.load``) runs before ``loadConsumeQueue``: with a stray file in
    ``data/`` and a consume queue file cut short, the start is refused for the stray. Before, ``recover``'s and ``repair``'s
    plans named the queue file (their plan's refusal left DLedger's load out) while the other commands named the stray
    (damage oracle seed 14010474)."""
    root = copy_store("5.3.3", "dledger-crashed", tmp_path)
    (root / "dledger-n0" / "data" / "README").write_bytes(b"")
    queue_file = max((p for p in (root / "consumequeue").rglob("0" * 20) if p.stat().st_size), key=lambda p: p.stat().st_size)
    with open(queue_file, "r+b") as f:
        f.truncate(1000)
    ns = one_answer(root, "--broker-version", "5.3.3")
    assert ns["line"].startswith("the broker's next start refuses to start: dledger-n0/data/README: a file named by no offset"), ns["line"]
    assert verify_first_line(root, monkeypatch, "--broker-version", "5.3.3") == ns["line"]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_salvage_says_how_many_messages_a_zeroed_range_the_next_start_never_reads_loses(tmp_path, version):
    """Segment 0 zeroed: the broker serves the records after it, and ``salvage`` says where the
    range is and how many queued messages were in it (their consume queue entries point there)."""
    root = copy_store(version, "clean-small", tmp_path)
    with open(root / "commitlog" / f"{0:020d}", "r+b") as f:
        f.write(bytes(SEGMENT))
    lost = sum(1 for m in manifest(version, "clean-small")["messages"] if m["commitLogOffset"] < SEGMENT and m["dispatchToConsumeQueue"])
    code, out, err = cli("salvage", root, "-f", "jsonl", "--no-progress")
    assert (f"mqtool: no valid record in [0, {SEGMENT}): the broker's next start never reads it and serves the records around it; "
            f"{lost} message(s) the consume queues point into it are lost\n") in err, err


@pytest.mark.parametrize("version, refuses", [("4.4.0", False), ("4.5.1", True), ("4.9.2", False), ("4.9.7", True), ("5.3.3", True)])
def test_a_consume_queue_file_cut_short_is_where_a_refusing_broker_stops_in_every_command(tmp_path, version, refuses, monkeypatch):
    """``MappedFileQueue.load`` refuses a consume queue file of the wrong length, as it refuses such a
    commit log file, in 4.5.0-4.9.1 and 4.9.3+ (rules §2.13), so those brokers do not start; 3.2.6-4.4.0
    and 4.9.2 leave the file out and start. Every command says so in the same words, with what the
    start keeps once ``recover`` writes the file at full size: the broker's own recovery of the store."""
    root = copy_store(version, "crashed-small", tmp_path)
    queue_file = max((p for p in (root / "consumequeue").rglob("0" * 20) if p.stat().st_size), key=lambda p: p.stat().st_size)
    full = queue_file.stat().st_size
    with open(queue_file, "r+b") as f:
        f.truncate(1000)
    ns = one_answer(root, "--broker-version", version)
    assert (ns["mode"], ns["logical_end"], ns["dropped_messages"]) == ("abnormal", recovered(version, "crashed-small")["commitLog"]["maxOffset"], 0)
    named = f"{queue_file.relative_to(root)}: 1000 bytes, not {full}"
    refusal = f"the broker's next start refuses to start: {named}, which `mqtool recover` fixes; with that file fixed, it keeps [0, {ns['logical_end']})"
    assert ns["line"].startswith(refusal) == refuses, ns["line"]
    assert verify_first_line(root, monkeypatch, "--broker-version", version) == ns["line"]


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_the_walk_up_to_a_record_agrees_with_the_next_starts_end(tmp_path, version):
    """``end_before`` (what ``query msg-id`` / ``offset`` and ``dump --msg-id`` ask) walks the next start's scan only
    up to the record asked about: a record is cut off exactly when it is in the scanned range and does not end by
    the logical end the full walk gives, and the compiled walk (two segments at a time) stops there too."""
    from mqtool.store import Store
    from mqtool.store.commitlog import StopReason
    from mqtool.store.nextstart import end_before, next_start
    from mqtool.store.summary import compiled_end

    root = copy_store(version, "clean-small", tmp_path)
    doc = manifest(version, "clean-small")
    victim = flip_body_in_third_segment(root, doc)
    with Store.open(root, version=version) as store:
        ns = next_start(store)
        cut = victim["commitLogOffset"] if version == "4.9.7" else doc["commitLogMaxOffset"]
        assert ns.logical_end == cut
        messages = sorted(doc["messages"], key=lambda m: m["commitLogOffset"])
        at_cut = next(i for i, m in enumerate(messages) if m["commitLogOffset"] >= victim["commitLogOffset"])
        probes = messages[::97] + messages[at_cut - 2 : at_cut + 3] + messages[-2:]
        kinds = set()
        for m in probes:
            offset, size = m["commitLogOffset"], m["size"]
            kept = offset < ns.scan_from or offset + size <= cut
            kinds.add("before the start" if offset < ns.scan_from else "walked, kept" if kept else "cut off")
            found = end_before(store, offset, size)
            assert (found is None) == kept, (offset, found)
            if found is not None:
                assert (found.end.offset, found.end.reason, found.eras) == (cut, StopReason.CRC, "")
            if offset >= ns.scan_from:
                _, walked = compiled_end(store, ns.scan_from, workers=2, stop=offset + size)
                assert (walked.reason == StopReason.LIMIT) == kept and (kept or walked.offset == cut), (offset, walked)
        assert kinds == ({"before the start", "walked, kept", "cut off"} if version == "4.9.7" else {"before the start", "walked, kept"})


def test_check_crc_on_recover_false_is_one_answer(tmp_path):
    """``checkCRCOnRecover=false`` in broker.conf: the broker's recovery (``checkMessageAndReturnSize`` with
    ``checkCRC`` false) reads past a body whose CRC fails and keeps the log to its end. Before, ``recover``
    and ``verify`` said so, but ``info`` and ``salvage`` (and the lookups, ``nextstart.end_before``) walked
    with CRCs checked and cut the log at that record (``summary.logical_end``)."""
    root = copy_store("4.9.7", "clean-small", tmp_path / "store")
    doc = manifest("4.9.7", "clean-small")
    victim = flip_body_in_third_segment(root, doc)
    conf = tmp_path / "broker.conf"
    conf.write_text("checkCRCOnRecover=false\n")
    ns = one_answer(root, "--broker-config", conf)
    assert (ns["logical_end"], ns["dropped_messages"]) == (doc["commitLogMaxOffset"], 0)
    after = next(m for m in doc["messages"] if m["commitLogOffset"] > victim["commitLogOffset"])
    code, out, err = cli("query", "msg-id", root, after["msgId"], "-f", "json", "--broker-config", conf)
    assert code == 0 and json.loads(out)[0]["offset"] == after["commitLogOffset"], err
    assert one_answer(root)["logical_end"] == victim["commitLogOffset"]  # checked by default
