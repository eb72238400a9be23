"""``mqtool survivors``: every status against the real-broker fixtures' manifests (ids dropped, unknown
ids added, a message duplicated in a copied store, damaged copies)."""

from __future__ import annotations

import json
import os
import struct
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import FIXTURES, MAIN_VERSIONS, VERSIONS, manifest, recovered, store_path
from mqtool.cli import app
from mqtool.formats import commitlog as clfmt
from mqtool.store import Store
from test_salvage import SEGMENT, damage_flipped_body_byte, damage_torn_segment, damage_zeroed_range, messages

UNKNOWN = ["0A0000010000000000000000DEAD0001", "0A0000010000000000000000DEAD0002"]


def cli(*args, input: str | None = None):
    result = CliRunner().invoke(app, [str(a) for a in args], input=input)
    return result.exit_code, result.stdout, result.stderr


def survivors(store: Path, ids: list[str], *args, tmp: Path) -> tuple[int, list[dict], dict]:
    path = tmp / "ids.txt"
    path.write_text("\n".join(ids) + "\n", encoding="utf-8")
    code, out, err = cli("survivors", store, path, "--format", "jsonl", "--no-progress", *args)
    lines = [json.loads(line) for line in out.splitlines()]
    assert code in (0, 1) and "summary" in lines[-1], (code, err)
    return code, lines[:-1], lines[-1]["summary"]


def located(m: dict) -> dict:
    return {"offset": m["commitLogOffset"], "topic": m["topic"], "queue_id": m["queueId"], "queue_offset": m["queueOffset"], "store_timestamp": m["storeTimestamp"]}


def where(row: dict) -> dict:
    return {k: row[k] for k in ("offset", "topic", "queue_id", "queue_offset", "store_timestamp")}


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_ids_dropped_and_unknown(version, tmp_path):
    msgs = [m for m in messages(version) if m.get("uniqKey")]
    kept = [m for i, m in enumerate(msgs) if i % 10]
    code, rows, summary = survivors(store_path(version, "clean-small"), [m["uniqKey"] for m in kept] + UNKNOWN, tmp=tmp_path)
    assert code == 1
    assert [r["id"] for r in rows] == [m["uniqKey"] for m in kept] + UNKNOWN
    for row, m in zip(rows, kept):
        assert row["status"] == ("found" if m["dispatchToConsumeQueue"] else "found-not-consumable"), m["seq"]
        assert where(row) == located(m) and row["copies"] == 1 and row["consumable"] is m["dispatchToConsumeQueue"]
    assert [r["status"] for r in rows[len(kept):]] == ["missing", "missing"]
    expected = Counter("found" if m["dispatchToConsumeQueue"] else "found-not-consumable" for m in kept)
    assert (summary["found"], summary["found-not-consumable"], summary["missing"], summary["by"]) == (expected["found"], expected["found-not-consumable"], 2, "uniq-key")

    consumable = [m["uniqKey"] for m in kept if m["dispatchToConsumeQueue"]]
    code, rows, summary = survivors(store_path(version, "clean-small"), consumable, tmp=tmp_path)
    assert code == 0 and summary["all_survived"] and {r["status"] for r in rows} == {"found"}


def duplicate_last_dispatched(root: Path, version: str) -> dict:
    """Append a second copy of a dispatched message at the logical end (a producer retry: new
    offset, the queue's next offset) with its consume queue unit, as the broker would store it."""
    msgs = messages(version)
    m = next(x for x in reversed(msgs) if x["dispatchToConsumeQueue"] and x.get("uniqKey") and not x["topic"].startswith("%"))
    end = manifest(version, "clean-small")["commitLogMaxOffset"]
    with Store.open(root) as store:
        record = store.commitlog.read_record(m["commitLogOffset"])
        queue = store.consume_queue(m["topic"], m["queueId"])
        next_offset = queue.recover().max_offset
        file_size = queue.file_size
    raw = clfmt.encode_message(record._replace(phys_offset=end, queue_offset=next_offset))
    segment = 1 << 20
    with open(root / "commitlog" / f"{end - end % segment:020d}", "r+b") as f:
        f.seek(end % segment)
        f.write(raw)
    logical = next_offset * 20
    with open(root / "consumequeue" / m["topic"] / str(m["queueId"]) / f"{logical - logical % file_size:020d}", "r+b") as f:
        f.seek(logical % file_size)
        f.write(struct.pack(">qiq", end, len(raw), m["cqTagsCode"]))
    return m


@pytest.mark.parametrize("version", MAIN_VERSIONS)
def test_a_message_stored_twice_is_duplicated(version, store_copy, tmp_path):
    root = store_copy(version, "clean-small")
    dup = duplicate_last_dispatched(root, version)
    ids = [m["uniqKey"] for m in messages(version) if m.get("uniqKey") and m["dispatchToConsumeQueue"]]
    code, rows, summary = survivors(root, ids, tmp=tmp_path)
    assert code == 0  # duplicated and consumable counts as survived
    row = next(r for r in rows if r["id"] == dup["uniqKey"])
    assert (row["status"], row["copies"], row["consumable"]) == ("duplicated", 2, True)
    assert where(row) == located(dup)  # the first consumable copy
    assert summary["duplicated"] == 1 and summary["found"] == len(ids) - 1


@pytest.mark.parametrize("version,damage", [("5.3.3", damage_zeroed_range), ("5.3.3", damage_torn_segment), ("4.9.7", damage_zeroed_range),
                                           ("4.9.7", damage_torn_segment), ("4.9.7", damage_flipped_body_byte)])
def test_a_damaged_copy_sorts_ids_into_found_missing_and_past_damage(version, damage, store_copy, tmp_path):
    """Past damage the broker's next start reads (from the third-from-last segment; 5.3.2+: the newest at or
    below the consume queues' max, the last here) ids are past-damage; past damage before that segment,
    which it never reads and serves past, they are found, as salvage lists them live. Before, every id
    after the first damage was past-damage (5.3.3 and 4.9.7 with damage in the second segment)."""
    root = store_copy(version, "clean-small")
    msgs = messages(version)
    lost = damage(root, msgs)
    cut = min(lost)
    read = cut >= (4 if version == "5.3.3" else 2) * SEGMENT
    with_keys = [m for m in msgs if m.get("uniqKey")]
    code, rows, summary = survivors(root, [m["uniqKey"] for m in with_keys], tmp=tmp_path)
    assert code == 1
    for row, m in zip(rows, with_keys):
        if m["commitLogOffset"] in lost:
            assert row["status"] == "missing", m["seq"]
        elif m["commitLogOffset"] > cut and read:
            assert row["status"] == "past-damage" and where(row) == located(m) and row["consumable"] is False, m["seq"]
        else:
            assert row["status"] == ("found" if m["dispatchToConsumeQueue"] else "found-not-consumable"), m["seq"]
            assert where(row) == located(m) and row["consumable"] is m["dispatchToConsumeQueue"], m["seq"]
    assert summary["missing"] == sum(1 for m in with_keys if m["commitLogOffset"] in lost) > 0
    past = sum(1 for m in with_keys if m["commitLogOffset"] > cut and m["commitLogOffset"] not in lost)
    assert summary["past-damage"] == (past if read else 0) and past > 0
    assert summary["commitlog_end"] == (cut if read else manifest(version, "clean-small")["commitLogMaxOffset"])


def test_ids_found_only_past_damage(store_copy, tmp_path):
    """Every id found lies past the damage (damage run seed 4600046): no hit leads to a consume
    queue, which the consumability check took for a queue of no entries (exit 5, IndexError)."""
    root = store_copy("5.3.3", "crashed-small")
    msgs = sorted(manifest("5.3.3", "crashed-small")["messages"], key=lambda m: m["commitLogOffset"])
    first = root / "commitlog" / f"{0:020d}"
    data = bytearray(first.read_bytes())
    data[:8] = b"\xff" * 8  # the first record's TOTALSIZE and MAGICCODE: the abnormal recovery ends the log at 0
    first.write_bytes(bytes(data))
    ids = [m["uniqKey"] for m in msgs[10:13]]
    code, rows, summary = survivors(root, ids, tmp=tmp_path)
    assert code == 1
    assert [(r["id"], r["status"], r["consumable"]) for r in rows] == [(i, "past-damage", False) for i in ids]
    assert summary["commitlog_end"] == 0


def test_records_cut_off_by_a_rewrite_are_past_damage_or_missing(tmp_path):
    m = manifest("4.9.7", "rewrite-clean")
    stale = [x for x in m["stalePhase1Records"]["records"] if x.get("uniqKey")]
    live = [x for x in messages("4.9.7", "rewrite-clean") if x.get("uniqKey")]
    code, rows, summary = survivors(store_path("4.9.7", "rewrite-clean"), [x["uniqKey"] for x in live + stale], tmp=tmp_path)
    assert code == 1
    got = {r["id"]: r for r in rows}
    for x in live:
        assert got[x["uniqKey"]]["status"] == ("found" if x["dispatchToConsumeQueue"] else "found-not-consumable")
    for x in stale:
        assert got[x["uniqKey"]]["status"] == ("past-damage" if x["intactAtEnd"] else "missing"), x["seq"]
    assert summary["past-damage"] == sum(1 for x in stale if x["intactAtEnd"]) > 0


def test_offset_msg_ids_and_keys(tmp_path):
    msgs = messages("4.9.7")
    root = store_path("4.9.7", "clean-small")
    sample = msgs[::97]
    code, rows, summary = survivors(root, [m["msgId"].lower() for m in sample], tmp=tmp_path)
    assert summary["by"] == "msg-id"
    assert [(r["id"], r["offset"]) for r in rows] == [(m["msgId"], m["commitLogOffset"]) for m in sample]

    per_key = Counter(k for m in msgs for k in set(m.get("keys") or []))
    repeated = sorted({k for m in msgs for k in m.get("keys") or [] if m["keys"].count(k) > 1})  # a key twice in one record's KEYS
    keys = list(dict.fromkeys(sorted(per_key)[:40] + repeated[:5] + ["no-such-key"]))
    assert repeated
    code, rows, summary = survivors(root, keys, tmp=tmp_path)
    assert summary["by"] == "key" and code == 1
    assert [r["copies"] for r in rows] == [per_key[k] for k in keys[:-1]] + [0]
    assert rows[-1]["status"] == "missing" and {r["status"] for r in rows[:-1]} <= {"found", "found-not-consumable"}


def test_csv_and_jsonl_columns_and_stdin(tmp_path):
    msgs = [m for m in messages("4.9.7") if m.get("uniqKey")][:30]
    root = store_path("4.9.7", "clean-small")
    csv_file = tmp_path / "ids.csv"
    csv_file.write_text("seq,client_id\n" + "".join(f"{m['seq']},{m['uniqKey']}\n" for m in msgs))
    code, out, _ = cli("survivors", root, csv_file, "--column", "client_id", "--by", "uniq-key", "-f", "jsonl", "--no-progress")
    from_csv = [json.loads(line) for line in out.splitlines()][:-1]
    assert [r["offset"] for r in from_csv] == [m["commitLogOffset"] for m in msgs]
    jsonl = "".join(json.dumps({"msg": m["uniqKey"]}) + "\n" for m in msgs)
    code, out, _ = cli("survivors", root, "-", "--column", "msg", "-f", "jsonl", "--no-progress", input=jsonl)
    assert [json.loads(line) for line in out.splitlines()][:-1] == from_csv
    code, out, _ = cli("survivors", root, "-", "-f", "json", "--no-progress", input="\n".join(m["uniqKey"] for m in msgs))
    doc = json.loads(out)
    assert doc["ids"] == from_csv and doc["summary"]["ids"] == len(msgs)


def test_bad_input_and_usage(tmp_path):
    root = store_path("4.9.7", "clean-small")
    assert cli("survivors", root, tmp_path / "none.txt", "--no-progress")[0] == 3
    (tmp_path / "empty.txt").write_text("\n")
    assert cli("survivors", root, tmp_path / "empty.txt", "--no-progress")[0] == 3
    (tmp_path / "ids.txt").write_text(UNKNOWN[0] + "\nplain-key\n")
    assert cli("survivors", root, tmp_path / "ids.txt", "--no-progress")[0] == 2  # mixed forms: say --by
    assert cli("survivors", root, tmp_path / "ids.txt", "--by", "nonsense", "--no-progress")[0] == 2
    from mqtool.cli.survivors import ID_KINDS
    from mqtool.scan.survivors import IdKind

    assert ID_KINDS == tuple(kind.value for kind in IdKind)  # --by is checked before the kernels load
    code, out, err = cli("survivors", tmp_path / "no-store", tmp_path / "ids.txt", "--no-progress")
    assert code == 3 and "Traceback" not in err


def test_jsonl_lines_are_what_json_dumps_writes(tmp_path):
    msgs = messages("5.3.3")  # unicode topics; KEYS with quotes or backslashes as ids
    keys = sorted({k for m in msgs for k in m.get("keys") or []})[:50] + ['a "quoted" \\ key', "ключ-нет", "tab\there", "bell\x07and\x1fus"]
    path = tmp_path / "ids.txt"
    path.write_text("\n".join(keys) + "\n", encoding="utf-8")
    code, out, _ = cli("survivors", store_path("5.3.3", "clean-small"), path, "--by", "key", "-f", "jsonl", "--no-progress")
    lines = out.splitlines()
    assert len(lines) == len(keys) + 1
    assert all(line == json.dumps(json.loads(line), ensure_ascii=False) for line in lines)
    assert [json.loads(line)["id"] for line in lines[:-1]] == keys


def test_a_wrong_consume_queue_entry_makes_a_message_not_consumable(store_copy, tmp_path):
    root = store_copy("4.9.7", "clean-small")
    msgs = [m for m in messages("4.9.7") if m.get("uniqKey") and m["dispatchToConsumeQueue"]]
    victim = msgs[len(msgs) // 2]
    with Store.open(root) as store:
        file_size = store.consume_queue(victim["topic"], victim["queueId"]).file_size
    logical = victim["queueOffset"] * 20
    with open(root / "consumequeue" / victim["topic"] / str(victim["queueId"]) / f"{logical - logical % file_size:020d}", "r+b") as f:
        f.seek(logical % file_size + 8)
        f.write(struct.pack(">i", victim["size"] + 1))  # the unit's size no longer matches the record
    code, rows, summary = survivors(root, [m["uniqKey"] for m in msgs], tmp=tmp_path)
    assert code == 1
    assert [r["id"] for r in rows if r["status"] != "found"] == [victim["uniqKey"]]
    row = next(r for r in rows if r["id"] == victim["uniqKey"])
    assert (row["status"], row["consumable"]) == ("found-not-consumable", False) and where(row) == located(victim)


def test_the_id_matcher_agrees_with_arrow_on_every_value():
    import pyarrow as pa

    from mqtool.scan.survivors import IdMatcher

    msgs = messages("5.3.3")
    ids = [m["uniqKey"] for m in msgs[::3] if m.get("uniqKey")] + ["Tópico-主题-тема", ""]
    values = pa.array([m.get("uniqKey") for m in msgs] + ["Tópico-主题-тема", "", None, "x"], pa.string()).slice(1)
    exact = IdMatcher(ids)
    assert exact.exact
    rows, who = exact.match(values)
    expected = [(i, ids.index(v)) for i, v in enumerate(values.to_pylist()) if v in ids]
    assert list(zip(rows.tolist(), who.tolist())) == expected and len(expected) > 600
    exact.exact = False  # the path taken when two ids share a 64-bit hash
    rows, who = exact.match(values)
    assert list(zip(rows.tolist(), who.tolist())) == expected


# ---- consumable as after the broker's next start: the fixtures' recovered JSON ----------------

RECOVERED = sorted((p.parent.name.removeprefix("rocketmq-"), p.name.removesuffix(".recovered.json")) for p in FIXTURES.glob("rocketmq-*/*.recovered.json"))


def broker_served(version: str, name: str) -> set[str]:
    """offsetMsgIds of the records the broker's queues serve after its start (entries read FOUND in the
    recovered JSON), but those it wrote during the start itself (timer deliveries: never in the store)."""
    rec = recovered(version, name)
    written = {d["msgId"] for d in rec.get("timerDeliveriesDuringRecover", [])}
    return {m["msgId"] for q in rec["queues"] for e in q["entries"] if e["getStatus"] == "FOUND" for m in e["messages"] if "msgId" in m} - written


def queue_ends_before_load(version: str, name: str) -> dict:
    """(topic, queue id) -> where the last entry on disk before the broker's start leads (``maxPhyEnd``)."""
    return {(q["topic"], q["queueId"]): q["maxPhyEnd"] for q in recovered(version, name)["rawStateBeforeLoad"]["consumeQueues"]}


def survivors_by_msg_id(version: str, name: str, ids: list[str], tmp: Path) -> tuple[dict, dict, str]:
    path = tmp / "ids.txt"
    path.write_text("\n".join(ids) + "\n", encoding="utf-8")
    code, out, err = cli("survivors", store_path(version, name), path, "--by", "msg-id", "--format", "jsonl", "--no-progress")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code in (0, 1) and "summary" in lines[-1], (code, err)
    return {r["id"]: r for r in lines[:-1]}, lines[-1]["summary"], err


@pytest.mark.parametrize("version,name", RECOVERED)
def test_consumable_is_what_the_brokers_start_serves(version, name, tmp_path):
    """Every store the real broker was restarted on (every crashed one, DLedger included): the ids
    survivors calls consumable are exactly those whose records the broker's queues serve after its
    start (``.recovered.json``), asked with every acknowledged message and every record served."""
    served = broker_served(version, name)
    written = {d["msgId"] for d in recovered(version, name).get("timerDeliveriesDuringRecover", [])}
    ids = sorted({m["msgId"] for m in manifest(version, name)["messages"]} | served | written)
    rows, summary, err = survivors_by_msg_id(version, name, ids, tmp_path)
    assert {i for i, r in rows.items() if r["consumable"]} == served
    assert all(rows[i]["status"] == "missing" for i in written)  # the broker's own writes at start-up
    if recovered(version, name)["abortFilePresentBeforeLoad"]:
        assert summary["queue_view"].startswith("as after the broker's next start (abnormal recovery from ")
    assert f"consumable: judged against the consume queues {summary['queue_view']}" in err


def test_ids_whose_entries_the_dledger_recovery_loses_are_not_consumable(tmp_path):
    """5.3.3 ``dledger-crashed-cqloss``: the broker's abnormal recovery cuts the queues short and
    re-dispatches only from the committed position (fixtures/README.md), so acknowledged messages whose
    entries are on disk have none after its start. Before, survivors read the queues on disk: found,
    and its note said the recovery re-dispatches missing entries."""
    version, name = "5.3.3", "dledger-crashed-cqloss"
    served, ends = broker_served(version, name), queue_ends_before_load(version, name)
    msgs = manifest(version, name)["messages"]
    lost = [m for m in msgs if m["dispatchToConsumeQueue"] and m["msgId"] not in served and m["commitLogOffset"] < ends[(m["topic"], m["queueId"])]]
    assert lost
    rows, summary, err = survivors_by_msg_id(version, name, [m["msgId"] for m in msgs], tmp_path)
    assert {m["seq"]: (rows[m["msgId"]]["status"], rows[m["msgId"]]["consumable"]) for m in lost} == {m["seq"]: ("found-not-consumable", False) for m in lost}
    assert summary["found"] == len(served) and not summary["all_survived"]
    assert "re-dispatches" not in err and "as after the broker's next start (abnormal recovery" in err


def test_ids_the_abnormal_recovery_re_dispatches_are_consumable(tmp_path):
    """4.8.0 ``crashed-small``: records past their queue's last entry on disk, which the broker's
    abnormal recovery re-dispatches (their entries exist after its start), are found; before, the
    queues on disk made them found-not-consumable."""
    version, name = "4.8.0", "crashed-small"
    served, ends = broker_served(version, name), queue_ends_before_load(version, name)
    msgs = manifest(version, name)["messages"]
    redispatched = [m for m in msgs if m["msgId"] in served and m["commitLogOffset"] >= ends.get((m["topic"], m["queueId"]), 0)]
    assert redispatched
    rows, summary, _ = survivors_by_msg_id(version, name, [m["msgId"] for m in msgs], tmp_path)
    assert {m["seq"]: (rows[m["msgId"]]["status"], rows[m["msgId"]]["consumable"]) for m in redispatched} == {m["seq"]: ("found", True) for m in redispatched}
    assert summary["found"] == len(served)


def test_a_clean_store_is_judged_on_disk(tmp_path):
    """A clean shutdown's next start changes no queue: the queues on disk, and the view says so."""
    msgs = messages("5.3.3")
    rows, summary, err = survivors_by_msg_id("5.3.3", "clean-small", [m["msgId"] for m in msgs], tmp_path)
    assert summary["queue_view"].startswith("as on disk (the broker's next start, normal recovery from ") and "changes no consume queue" in summary["queue_view"]
    assert all(rows[m["msgId"]]["consumable"] is m["dispatchToConsumeQueue"] for m in msgs)


def test_a_clean_store_whose_queues_miss_the_last_records_is_judged_after_its_next_start(store_copy, tmp_path):
    """No abort file, but the queues end before the log (the last record's unit zeroed): the next start's
    normal recovery is planned, and 4.9.7's start-up reput from the queues' max offset dispatches the
    record again (§8.12; 5.3.2+ would not: it dispatches only records strictly after that offset, §8.5)."""
    root = store_copy("4.9.7", "clean-small")
    msgs = [m for m in messages("4.9.7") if m["dispatchToConsumeQueue"]]
    last = max(msgs, key=lambda m: m["commitLogOffset"])
    with Store.open(root) as store:
        file_size = store.consume_queue(last["topic"], last["queueId"]).file_size
    logical = last["queueOffset"] * 20
    with open(root / "consumequeue" / last["topic"] / str(last["queueId"]) / f"{logical - logical % file_size:020d}", "r+b") as f:
        f.seek(logical % file_size)
        f.write(bytes(20))
    path = tmp_path / "ids.txt"
    path.write_text(last["msgId"] + "\n", encoding="utf-8")
    code, out, err = cli("survivors", root, path, "--by", "msg-id", "--format", "jsonl", "--no-progress")
    row, summary = (json.loads(line) for line in out.splitlines())
    assert code == 0 and (row["status"], row["consumable"]) == ("found", True)
    assert summary["summary"]["queue_view"].startswith("as after the broker's next start (normal recovery from ")


def test_placed_units_pruned_to_the_spill_are_still_read(tmp_path, monkeypatch):
    """The recovery's placed units leave memory past ``PRUNE_EVERY`` (``QueueSim._prune``); survivors'
    plan keeps every file's (``keep_placed``), so the answer does not change."""
    from mqtool.recovery.queues import QueueSim

    monkeypatch.setattr(QueueSim, "PRUNE_EVERY", 4)
    version, name = "4.9.7", "crashed-small"
    rows, _, _ = survivors_by_msg_id(version, name, [m["msgId"] for m in manifest(version, name)["messages"]], tmp_path)
    assert {i for i, r in rows.items() if r["consumable"]} == broker_served(version, name)


def test_candidate_versions_whose_queues_differ_are_refused():
    """Undecided version, candidates' queues after the start differing for the ids: refused, not guessed."""
    from mqtool.recovery.planners import queues_after_start
    from mqtool.errors import Refused
    from mqtool.scan.survivors import IdKind, QueuesAfter, SurvivorSearch

    version, name = "4.9.7", "crashed-small"
    with Store.open(store_path(version, name)) as store:
        view = queues_after_start(store)
        assert len(view.candidates) > 1  # 4.9.7's marks leave several eras, alike here
        differing = QueuesAfter(view.view, [view.candidates[0], (view.candidates[1][0], {})])
        search = SurvivorSearch(store, [m["msgId"] for m in manifest(version, name)["messages"]], IdKind.msg_id, queues=differing)
        with pytest.raises(Refused, match="--broker-version"):
            list(search.rows())


def test_offset_msg_ids_of_a_store_expired_by_retention_are_read_as_msg_ids(tmp_path):
    """4.9.7 retention-small (the broker's expiry deleted all but the last 2 segments): the SRE's list of every offsetMsgId
    the producer got back, expired ones included. Before: the default refused ("657 of 2000 hex ids look like offsetMsgIds
    and the rest like UNIQ_KEYs: say which with --by"), though every id names an offset below the log's end. Now they are
    read as offsetMsgIds: each present message found where the manifest has it, each expired one missing, and one line says
    how many name offsets below the min offset."""
    m = manifest("4.9.7", "retention-small")
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(x["msgId"] + "\n" for x in m["messages"]))
    code, out, err = cli("survivors", store_path("4.9.7", "retention-small"), ids, "-f", "jsonl", "--no-progress")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and rows[-1]["summary"]["by"] == "msg-id"
    expected = [(x["msgId"], ("found" if x["dispatchToConsumeQueue"] else "found-not-consumable") if x["present"] else "missing",
                 x["commitLogOffset"] if x["present"] else None) for x in m["messages"]]
    assert [(r["id"], r["status"], r["offset"]) for r in rows[:-1]] == expected
    gone = sum(1 for x in m["messages"] if x["commitLogOffset"] < m["commitLogMinOffset"])
    assert gone == sum(1 for x in m["messages"] if not x["present"]) > 0
    assert f"{gone} offsetMsgId(s) name offsets below the commit log's min offset {m['commitLogMinOffset']}" in " ".join(err.split())


@pytest.mark.parametrize("damage", ["a cut segment", "an index link the start creates"])
def test_a_store_the_broker_refuses_to_start_on_is_judged_against_its_queues_on_disk(damage, store_copy, tmp_path):
    """Where no recovery can be planned because the broker refuses to start on a file (a commit log file of the wrong
    length; a dangling ``index/`` link whose target its start creates), survivors exited 3 with that refusal, though the
    docs say the queues on disk are judged then, the view saying why (``queues_after_start``, which caught only
    ``Refused``). Every id is found and judged as on disk."""
    root = store_copy("4.9.7", "crashed-small")
    if damage == "a cut segment":
        last = sorted((root / "commitlog").iterdir())[-1]
        os.truncate(last, 300000)
    else:
        (tmp_path / "mount").mkdir()
        os.symlink(tmp_path / "mount" / "99999999999999999", root / "index" / "99999999999999999")
    ids = [m["msgId"] for m in manifest("4.9.7", "crashed-small")["messages"][:20]]
    code, rows, summary = survivors(root, ids, "--by", "msg-id", "--broker-version", "4.9.7", tmp=tmp_path)
    assert summary["queue_view"].startswith("as on disk: the broker's next start cannot be planned ("), summary["queue_view"]
    assert code == 0 and [r["status"] for r in rows] == ["found"] * 20
