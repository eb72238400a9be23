"""``mqtool query`` against the real broker: every KEYS / UNIQ_KEY lookup of every fixture's recovered
JSON (made by the broker's own ``queryMessage``), and ``getOffsetInQueueByTime``'s rules on the
fixtures' queues (their entries' store times as the broker read them)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import copy_store, manifest, recovered, store_path
from test_next_start import flip_body_in_third_segment
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.formats.hashing import java_string_hash
from mqtool.store import Store
from mqtool.store.lookup import KEY, UNIQ_KEY, query_message, queue_range, queue_range_and_offset_by_time

# Every fixture with queries in its recovered JSON, except the DLedger stores (no commitlog/: the
# store model does not read DLedger entries yet).
QUERIED = [
    ("3.2.6", "crashed-small"),  # no UNIQ_KEY index: a UNIQ_KEY lookup finds nothing, not even after the index's last entry
    ("4.0.0", "crashed-small"),
    ("4.2.0", "crashed-small"),
    ("4.2.0", "cqext-small"),
    ("4.4.0", "crashed-small"),
    ("4.4.0", "retention-small"),
    ("4.5.1", "crashed-small"),
    ("4.8.0", "crashed-small"),
    ("4.9.2", "batch-small"),
    ("4.9.2", "config-real"),
    ("4.9.2", "crashed-small"),
    ("4.9.2", "retention-small"),
    ("4.9.7", "batch-small"),
    ("4.9.7", "config-real"),
    ("4.9.7", "crashed-small"),
    ("4.9.7", "retention-small"),
    ("4.9.7", "rewrite-clean"),
    ("4.9.7", "dledger-small"),
    ("5.0.0", "batch-small"),
    ("5.0.0", "config-real"),
    ("5.0.0", "crashed-small"),
    ("5.0.0", "retention-small"),
    ("5.1.4", "crashed-small"),
    ("5.3.1", "crashed-small"),
    ("5.3.3", "config-real"),
    ("5.3.3", "crashed-small"),
    ("5.3.3", "dledger-small"),
    ("5.3.3", "lmq-small"),
    ("5.3.3", "timer-crashed"),
    ("5.3.3", "timer-small"),
]


@pytest.mark.parametrize("version,name", QUERIED)
def test_every_key_and_uniq_key_returns_the_brokers_offsets(version, name):
    doc = recovered(version, name)
    # After its restart, the timer store of timer-crashed delivered due messages: records the broker
    # wrote after loading (past afterLoad.commitLogMaxOffset), not in the files we read.
    written_after_load = doc["afterLoad"]["commitLogMaxOffset"] if name == "timer-crashed" else None
    compared = 0
    with Store.open(store_path(version, name)) as store:
        for q in doc["queries"]:
            kind = UNIQ_KEY if q["kind"] == "UNIQ_KEY" else KEY
            want = sorted(r["commitLogOffset"] for r in q["results"])
            if written_after_load is not None:
                want = [o for o in want if o < written_after_load]
            result = query_message(store, q["topic"], q["key"], kind, q["maxNum"])
            got = sorted(f.offset for f in result.found if f.record is not None)
            assert got == want, (q["kind"], q["topic"], q["key"])
            for f in result.found:
                if f.record is not None:
                    assert f.key_matches, (q["key"], f.offset)
            compared += 1
    assert compared == len(doc["queries"]) > 0


def test_duplicates_the_broker_returns_are_returned():
    doc = recovered("4.9.7", "crashed-small")
    dup = next(q for q in doc["queries"] if len(q["results"]) != len({r["commitLogOffset"] for r in q["results"]}))
    with Store.open(store_path("4.9.7", "crashed-small")) as store:
        result = query_message(store, dup["topic"], dup["key"], UNIQ_KEY if dup["kind"] == "UNIQ_KEY" else KEY, dup["maxNum"])
    offsets = [f.offset for f in result.found]
    assert len(offsets) > len(set(offsets))


def _colliding(key: str) -> str:
    """Another key with the same Java hash: the last two chars (a, b) become (a - 1, b + 31)."""
    a, b = ord(key[-2]), ord(key[-1])
    other = key[:-2] + chr(a - 1) + chr(b + 31)
    assert other != key and java_string_hash(other) == java_string_hash(key)
    return other


def test_hash_collisions_are_shown_and_flagged():
    doc = recovered("4.9.7", "config-real")
    q = next(q for q in doc["queries"] if q["kind"] == "KEYS" and q["results"] and q["key"].isascii())
    other = _colliding(q["key"])
    with Store.open(store_path("4.9.7", "config-real")) as store:
        result = query_message(store, q["topic"], other, KEY, 64)
    readable = [f for f in result.found if f.record is not None]
    assert sorted(f.offset for f in readable) == sorted(r["commitLogOffset"] for r in q["results"])
    assert all(f.key_matches is False for f in readable)
    assert all(f.error for f in result.found if f.record is None)  # e.g. into the expired segment
    assert result.matches == []
    res = CliRunner().invoke(app, ["query", "key", str(store_path("4.9.7", "config-real")), q["topic"], other, "--format", "json"])
    assert res.exit_code == 1
    rows = json.loads(res.stdout)
    assert [r["key_matches"] for r in rows if r["error"] is None] == [False] * len(q["results"])
    assert "hash collisions" in res.stderr


def test_cli_key_json_rows_and_exit_codes():
    doc = recovered("5.3.3", "config-real")
    q = next(q for q in doc["queries"] if q["kind"] == "KEYS" and len(q["results"]) > 1)
    path = str(store_path("5.3.3", "config-real"))
    res = CliRunner().invoke(app, ["query", "key", path, q["topic"], q["key"], "--format", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    expired = [r for r in rows if r["error"] is not None]  # hits into the segment the broker's expiry deleted
    assert all(r["error"].startswith("expired") and r["key_matches"] is None for r in expired)
    rows = [r for r in rows if r["error"] is None]
    assert [r["offset"] for r in rows] == [r["commitLogOffset"] for r in q["results"]]
    for row, want in zip(rows, q["results"]):
        assert row["key_matches"] is True and row["source"] == "index"
        assert (row["msg_id"], row["uniq_key"], row["store_timestamp"], row["size"]) == (want["msgId"], want["uniqKey"], want["storeTimestamp"], want["size"])
        assert row["keys"] == want["keys"]
    res = CliRunner().invoke(app, ["query", "key", path, q["topic"], "no-such-key-anywhere", "--format", "json"])
    assert res.exit_code == 1 and json.loads(res.stdout) == []
    res = CliRunner().invoke(app, ["query", "key", path + "-missing", q["topic"], q["key"]])
    assert res.exit_code == 3


def test_uniq_key_max_defaults_to_32_and_caps_at_64():
    doc = recovered("4.9.7", "config-real")
    q = next(q for q in doc["queries"] if q["kind"] == "UNIQ_KEY" and q["results"])
    path = str(store_path("4.9.7", "config-real"))
    res = CliRunner().invoke(app, ["query", "uniq-key", path, q["topic"], q["key"], "-f", "jsonl"])
    assert res.exit_code == 0
    assert [json.loads(line)["offset"] for line in res.stdout.splitlines()] == [r["commitLogOffset"] for r in q["results"]]


def test_without_index_the_lookup_scans_and_says_so(store_copy):
    path = store_copy("4.9.7", "config-real")
    shutil.rmtree(path / "index")
    doc = recovered("4.9.7", "config-real")
    q = next(q for q in doc["queries"] if q["kind"] == "KEYS" and len(q["results"]) > 2)
    res = CliRunner().invoke(app, ["query", "key", str(path), q["topic"], q["key"], "-f", "json"])
    assert res.exit_code == 0
    assert "no index file" in res.stderr
    rows = json.loads(res.stdout)
    # the broker's answer, less the records whose segment its expiry deleted (it skips them too)
    assert sorted(r["offset"] for r in rows) == sorted(r["commitLogOffset"] for r in q["results"])
    assert {r["source"] for r in rows} == {"scan"}


def test_msg_id_and_queue_offset_read_the_records_the_broker_serves():
    doc = recovered("5.3.3", "config-real")
    path = str(store_path("5.3.3", "config-real"))
    queue = next(q for q in doc["queues"] if q["maxOffset"] - q["minOffset"] > 2)
    entry = next(e for e in queue["entries"] if e["getStatus"] == "FOUND" and e["queueOffset"] >= queue["minOffset"])
    msg = entry["messages"][0]
    res = CliRunner().invoke(app, ["query", "offset", path, queue["topic"], str(queue["queueId"]), str(entry["queueOffset"]), "-f", "json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert (row["status"], row["offset"], row["msg_id"], row["store_timestamp"]) == ("FOUND", msg["commitLogOffset"], msg["msgId"], msg["storeTimestamp"])
    assert (row["queue_min_offset"], row["queue_max_offset"]) == (queue["minOffset"], queue["maxOffset"])
    res = CliRunner().invoke(app, ["query", "msg-id", path, msg["msgId"], "-f", "json"])
    assert res.exit_code == 0
    (row,) = json.loads(res.stdout)
    assert (row["offset"], row["uniq_key"], row["size"]) == (msg["commitLogOffset"], msg["uniqKey"], msg["size"])
    res = CliRunner().invoke(app, ["query", "offset", path, queue["topic"], str(queue["queueId"]), str(queue["maxOffset"] + 5), "-f", "json"])
    assert res.exit_code == 1 and json.loads(res.stdout)[0]["status"] == "OFFSET_OVERFLOW_BADLY"
    res = CliRunner().invoke(app, ["query", "msg-id", path, "XYZ"])
    assert res.exit_code == 2


# ---- getOffsetInQueueByTime -----------------------------------------------------------------------

TIMED = [("4.9.7", "batch-small"), ("4.9.7", "config-real"), ("4.9.7", "retention-small"), ("5.3.3", "config-real"), ("5.3.3", "lmq-small"), ("5.3.3", "timer-small")]


def _queue_times(queue: dict) -> list[tuple[int, int]]:
    """(queue offset, store time) of the entries the broker served in [min, max)."""
    return [
        (e["queueOffset"], e["messages"][0]["storeTimestamp"])
        for e in queue["entries"]
        if e["getStatus"] == "FOUND" and e["messages"] and queue["minOffset"] <= e["queueOffset"] < queue["maxOffset"]
    ]


def _probe_times(times: list[int]) -> set[int]:
    first, last = times[0], times[-1]
    probes = {first, last, first - 1, first - 86_400_000, last + 1, last + 86_400_000}
    for a, b in zip(times, times[1:]):
        if b - a > 2:
            probes.update({a + 1, b - 1, (a + b) // 2})
        if a == b:
            probes.add(a)
    return probes


@pytest.mark.parametrize("version,name", TIMED)
def test_time_lookup_follows_the_brokers_rule(version, name):
    doc = recovered(version, name)
    checked = 0
    with Store.open(store_path(version, name)) as store:
        for queue in doc["queues"]:
            entries = _queue_times(queue)
            if not entries:
                continue
            times = [t for _, t in entries]
            assert times == sorted(times)
            for t in sorted(_probe_times(times)):
                rng, got = queue_range_and_offset_by_time(store, queue["topic"], queue["queueId"], t)
                assert rng == queue_range(store, queue["topic"], queue["queueId"])  # query time: one recovery for both
                if version.startswith("5"):
                    # BoundaryType.LOWER: the first entry stored at or after t; after the last: max
                    want = next((o for o, ts in entries if ts >= t), queue["maxOffset"])
                    assert got == want, (queue["topic"], queue["queueId"], t)
                else:
                    at = dict(entries)
                    if t in times:  # an equal time: one of the entries stored at t
                        assert at.get(got) == t, (queue["topic"], queue["queueId"], t)
                    elif t < times[0]:
                        assert got == entries[0][0]
                    elif t > times[-1]:
                        assert got == entries[-1][0]
                    else:  # between two entries: the nearer, the earlier on a tie
                        left = max((o, ts) for o, ts in entries if ts < t)
                        right = min((o, ts) for o, ts in entries if ts > t)
                        want = right[0] if t - left[1] > right[1] - t else left[0]
                        assert got == want, (queue["topic"], queue["queueId"], t)
                checked += 1
    assert checked > 50


def test_time_lookup_cli():
    doc = recovered("5.3.3", "config-real")
    queue = next(q for q in doc["queues"] if len(_queue_times(q)) > 3)
    entries = _queue_times(queue)
    path = str(store_path("5.3.3", "config-real"))
    res = CliRunner().invoke(app, ["query", "time", path, queue["topic"], str(queue["queueId"]), str(entries[1][1]), "-f", "json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert row["queue_offset"] == next(o for o, ts in entries if ts >= entries[1][1])
    assert row["rule"] == "5.x BoundaryType.LOWER"
    assert row["message_store_timestamp"] == entries[1][1] or row["message_store_timestamp"] >= entries[1][1]


# ---- lookups against the end the broker's next start gives the log ----------------------------------

SEGMENT = 1 << 20  # clean-small's segment size


def _cut_store(tmp_path, version: str) -> tuple[str, dict, list[dict]]:
    """A copy of ``clean-small`` with one body byte flipped in a record of its third segment (the
    third-from-last, where a 4.x normal recovery starts): the broker's next start ends the log at that
    record, and every record after it lies past the end, as records a crash left past a cut do."""
    root = copy_store(version, "clean-small", tmp_path)
    doc = manifest(version, "clean-small")
    return str(root), flip_body_in_third_segment(root, doc), doc["messages"]


def _query(*args) -> tuple[int, list[dict], str]:
    res = CliRunner().invoke(app, [*args, "-f", "json"])
    return res.exit_code, json.loads(res.stdout) if res.stdout.strip() else [], res.stderr


def test_msg_id_and_dump_serve_no_record_past_the_next_starts_end(tmp_path):
    """4.9.7 normal recovery scans from the third-from-last segment with checkCRCOnRecover: it ends the log
    at the flipped record, and ``viewMessage`` on the restarted broker finds nothing at or after it (its
    ``selectMappedBuffer`` stops at the truncated read position). Before, ``query msg-id`` and ``dump
    --msg-id`` read those records as they lie and answered them found (exit 0)."""
    path, victim, messages = _cut_store(tmp_path, "4.9.7")
    cut = victim["commitLogOffset"]
    words = f"past the log's end: the broker's next start ends the log at {cut} (crc mismatch) and serves nothing after it"
    for gone in (victim, messages[-1]):
        code, rows, err = _query("query", "msg-id", path, gone["msgId"])
        assert code == 1
        assert [(r["offset"], r["error"], r.get("msg_id")) for r in rows] == [(gone["commitLogOffset"], words, None)]
        assert err == f"mqtool: offset {gone['commitLogOffset']}: {words}\n"
        code, rows, err = _query("dump", path, "--msg-id", gone["msgId"])
        assert (code, rows) == (1, [])
        assert err == f"mqtool: no message at offset {gone['commitLogOffset']} of --msg-id: {words}\n"
    walked = max((m for m in messages if 2 * SEGMENT <= m["commitLogOffset"] < cut), key=lambda m: m["commitLogOffset"])
    for kept in (messages[0], walked):  # before the scan's start segment; in the walked range, before the cut
        for argv in (("query", "msg-id", path, kept["msgId"]), ("dump", path, "--msg-id", kept["msgId"])):
            code, rows, err = _query(*argv)
            assert code == 0, err
            want = (kept["commitLogOffset"], kept["msgId"], kept["storeTimestamp"])
            assert [(r["offset"], r["msg_id"], r["store_timestamp"]) for r in rows] == [want]


def _keys_across(messages: list[dict], cut: int) -> list[tuple[tuple[str, str], list[dict]]]:
    """Each (topic, KEYS entry) the index holds with records on both sides of ``cut`` (at most the 64 hits
    ``queryMessage`` returns), and those records."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for m in messages:
        for k in m["keys"] if m["indexed"] else []:
            by_key.setdefault((m["topic"], k), []).append(m)
    offsets = {tk: [x["commitLogOffset"] for x in ms] for tk, ms in by_key.items()}
    return [(tk, ms) for tk, ms in by_key.items() if len(ms) <= 64 and min(offsets[tk]) < cut <= max(offsets[tk])]


def test_key_lookups_serve_no_record_past_the_next_starts_end(tmp_path, monkeypatch):
    """``queryMessage`` reads each index hit with ``lookMessageByOffset``, which after the next start's truncation maps
    nothing past the end it gives the log (``selectMappedBuffer``): the hit is skipped. ``query key`` / ``uniq-key``
    show such a hit with the end in ``error`` and no message fields (exit 1 when nothing else matches), through the
    index or, without one, the scan; the next start's walk runs once, up to the furthest hit's end. Before,
    the records after the flipped one were answered found (exit 0)."""
    from mqtool.store import summary

    path, victim, messages = _cut_store(tmp_path, "4.9.7")
    cut = victim["commitLogOffset"]
    words = f"past the log's end: the broker's next start ends the log at {cut} (crc mismatch) and serves nothing after it"
    spanning = _keys_across(messages, cut)
    assert len(spanning) > 5
    walks = []
    real = summary.logical_end
    monkeypatch.setattr(summary, "logical_end", lambda store, start, stop=None: walks.append(stop) or real(store, start, stop))
    with Store.open(path) as store:
        for i, ((topic, key), ms) in enumerate(spanning):
            found = query_message(store, topic, key, KEY)
            served = sorted(x["commitLogOffset"] for x in ms if x["commitLogOffset"] < cut)
            assert sorted(f.offset for f in found.found if f.record is not None) == served
            assert {f.error for f in found.found if f.record is None} == {words}
            if i == 0:
                assert walks == [max(x["commitLogOffset"] + x["size"] for x in ms)]
        assert len(walks) == 1  # the end found answers every later lookup of the Store (``nextstart._walk_end``)
    monkeypatch.undo()
    (topic, key), ms = spanning[0]
    code, rows, _ = _query("query", "key", path, topic, key)
    assert code == 0
    assert sorted((r["offset"], r.get("msg_id"), r["error"]) for r in rows) == sorted(
        (x["commitLogOffset"], None, words) if x["commitLogOffset"] >= cut else (x["commitLogOffset"], x["msgId"], None) for x in ms)
    walked = max((m for m in messages if 2 * SEGMENT <= m["commitLogOffset"] < cut and m["uniqKey"]), key=lambda m: m["commitLogOffset"])
    gone = max((m for m in messages if m["uniqKey"] and m["indexed"]), key=lambda m: m["commitLogOffset"])
    for index in (True, False):
        if not index:
            shutil.rmtree(f"{path}/index")
        for kept in (messages[0], walked):  # before the scan's start segment; in the walked range, before the cut
            code, rows, _ = _query("query", "uniq-key", path, kept["topic"], kept["uniqKey"])
            assert (code, [(r["offset"], r["msg_id"]) for r in rows]) == (0, [(kept["commitLogOffset"], kept["msgId"])])
        code, rows, err = _query("query", "uniq-key", path, gone["topic"], gone["uniqKey"])
        assert (code, [(r["offset"], r.get("msg_id"), r["error"]) for r in rows]) == (1, [(gone["commitLogOffset"], None, words)])
        assert err.endswith(f"mqtool: no message of topic {gone['topic']} has UNIQ_KEY {gone['uniqKey']}\n")


def test_dump_key_through_the_index_leaves_out_records_past_the_next_starts_end(tmp_path):
    """``dump --topic T --key K`` / ``--uniq-key U`` through the index serve what ``query key`` serves: a record past the
    end the broker's next start gives the log is left out, as ``dump --msg-id`` leaves it out, one stderr line saying
    where the log ends. Before, the records after the flipped one were printed as served."""
    path, victim, messages = _cut_store(tmp_path, "4.9.7")
    cut = victim["commitLogOffset"]
    words = f"past the log's end: the broker's next start ends the log at {cut} (crc mismatch) and serves nothing after it"
    (topic, key), ms = _keys_across(messages, cut)[0]
    kept = sorted(x["commitLogOffset"] for x in ms if x["commitLogOffset"] < cut)
    code, rows, err = _query("dump", path, "--topic", topic, "--key", key)
    assert (code, [r["offset"] for r in rows]) == (0, kept)
    assert err == (f"mqtool: {len(ms) - len(kept)} matching message(s) {words}\n"
                   f"mqtool: looked up through the index: {len(ms)} offsets, {len(kept)} matching messages\n")
    gone = max((m for m in messages if m["uniqKey"] and m["indexed"]), key=lambda m: m["commitLogOffset"])
    code, rows, err = _query("dump", path, "--topic", gone["topic"], "--uniq-key", gone["uniqKey"])
    assert (code, rows) == (0, [])
    assert err.startswith(f"mqtool: 1 matching message(s) {words}\nmqtool: looked up through the index: 1 offsets, 0 matching messages\n")
    walked = max((m for m in messages if 2 * SEGMENT <= m["commitLogOffset"] < cut and m["uniqKey"]), key=lambda m: m["commitLogOffset"])
    code, rows, err = _query("dump", path, "--topic", walked["topic"], "--uniq-key", walked["uniqKey"])
    assert (code, [r["msg_id"] for r in rows]) == (0, [walked["msgId"]])
    assert err == "mqtool: looked up through the index: 1 offsets, 1 matching messages\n"


def test_lookups_on_a_log_written_over_a_cut_answer_as_the_restarted_broker():
    """4.9.7 ``rewrite-clean``: a crash cut the log, the broker wrote over the cut and stopped cleanly; past the new
    end lie intact stale records, and the queues still hold entries pointing at them. Restarted, the broker
    (its recovered JSON) ends the log at the same place; ``truncateDirtyLogicFiles`` removed every entry pointing
    at or after that end (§5.8), so ``getMessage`` answers OFFSET_OVERFLOW_ONE at the queue's new max offset and
    _BADLY after it; an entry kept before the end whose bytes run past it is MESSAGE_WAS_REMOVING; and
    ``viewMessage`` maps nothing past the end. Before, ``query offset`` answered FOUND (exit 0) for the removed
    entries and ``query msg-id`` served the stale records."""
    path = str(store_path("4.9.7", "rewrite-clean"))
    doc, broker = manifest("4.9.7", "rewrite-clean"), recovered("4.9.7", "rewrite-clean")
    end = broker["commitLog"]["maxOffset"]
    words = f"past the log's end: the broker's next start ends the log at {end} ("
    new_max = {(q["topic"], q["queueId"]): q["maxOffset"] for q in broker["queues"]}
    beyond = doc["consumeQueueEntriesBeyondLogicalEnd"]["entries"]
    removed = [e for e in beyond if e["phyOffset"] >= end]
    assert len(removed) > 30
    for e in removed:
        queue_max = new_max[(e["topic"], e["queueId"])]
        code, (row,), err = _query("query", "offset", path, e["topic"], str(e["queueId"]), str(e["queueOffset"]))
        assert code == 1 and row.get("msg_id") is None
        assert row["status"] == ("OFFSET_OVERFLOW_ONE" if e["queueOffset"] == queue_max else "OFFSET_OVERFLOW_BADLY"), e
        assert row["error"].startswith(words)
        assert row["error"].endswith(f"and serves nothing after it; it truncates this queue to max offset {queue_max}")
        assert err == f"mqtool: {e['topic']}/{e['queueId']} queue offset {e['queueOffset']}: {row['error']}\n"
    served = {(q["topic"], q["queueId"], x["queueOffset"]): x for q in broker["queues"] for x in q["entries"]}
    straddling = [e for e in beyond if e["phyOffset"] < end < e["phyOffset"] + e["size"]]
    last = [(t, i, m - 1) for (t, i), m in new_max.items() if m > 0]  # each queue's last entry the broker serves: nearest the end
    for key in {*last, *((e["topic"], e["queueId"], e["queueOffset"]) for e in straddling)}:
        entry = served[key]
        if any(m.get("decodeFailed") for m in entry.get("messages", [])):
            continue  # the broker serves stale bytes no client decodes (FOUND); mqtool reads no record there
        code, (row,), _ = _query("query", "offset", path, *map(str, key))
        assert row["status"] == entry["getStatus"], key
        assert row.get("offset") == (entry["messages"][0]["commitLogOffset"] if entry["getStatus"] == "FOUND" else None)
    assert straddling and {served[e["topic"], e["queueId"], e["queueOffset"]]["getStatus"] for e in straddling} == {"MESSAGE_WAS_REMOVING"}
    stale = [r for r in doc["stalePhase1Records"]["records"] if r["commitLogOffset"] >= end]
    assert len(stale) > 50
    for r in stale:
        code, rows, err = _query("query", "msg-id", path, r["msgId"])
        assert code == 1 and [(x["offset"], x.get("msg_id")) for x in rows] == [(r["commitLogOffset"], None)]
        assert rows[0]["error"].startswith(words) and err == f"mqtool: offset {r['commitLogOffset']}: {rows[0]['error']}\n"


def test_a_normal_start_before_4_3_2_keeps_the_queue_entries_past_the_end(tmp_path):
    """3.2.6-4.3.1 normal recovery truncates no consume queue (rules-by-version 2.4): an entry pointing past the end
    stays in its queue, and ``getMessage`` maps nothing for it (MESSAGE_WAS_REMOVING); 4.3.2+ cut it (OFFSET_OVERFLOW_ONE
    at the queue's new max). 4.2.0 ``clean-small`` leaves both eras: the answer is the newest's and names the others.
    Before, the entry counted as FOUND (exit 0)."""
    path, victim, messages = _cut_store(tmp_path, "4.2.0")
    cut = victim["commitLogOffset"]
    gone = min((m for m in messages if m["dispatchToConsumeQueue"] and m["commitLogOffset"] >= cut), key=lambda m: m["commitLogOffset"])
    where = (gone["topic"], str(gone["queueId"]), str(gone["queueOffset"]))
    words = f"past the log's end: the broker's next start ends the log at {cut} (crc mismatch) and serves nothing after it"
    code, (row,), err = _query("query", "offset", path, *where, "--broker-version", "4.2.0")
    assert (code, row["status"], row["error"], row.get("msg_id")) == (1, "MESSAGE_WAS_REMOVING", words, None)
    assert err == f"mqtool: {gone['topic']}/{gone['queueId']} queue offset {gone['queueOffset']}: {words}\n"
    code, (row,), _ = _query("query", "offset", path, *where)
    assert (code, row["status"], row.get("msg_id")) == (1, "OFFSET_OVERFLOW_ONE", None)
    assert row["error"] == (f"{words}; it truncates this queue to max offset {gone['queueOffset']}; "
                            "E3a-E3b (4.2.0-4.3.1) brokers keep the entry (MESSAGE_WAS_REMOVING): --broker-version decides")


def test_a_cut_only_some_eras_left_read_is_a_cut_that_names_them(tmp_path):
    """5.3.2+ normal recovery starts at the newest segment at or below the consume queues' max (rules-by-version 2.1),
    after the flipped record: a 5.3.3 broker keeps and serves every record. 5.2.0-5.3.1 start at the third-from-last
    segment and cut the log there. ``clean-small``'s marks leave both: the lookup says the record is not served,
    naming the eras whose start cuts it; ``--broker-version`` decides."""
    path, victim, messages = _cut_store(tmp_path, "5.3.3")
    after = messages[-1]
    code, rows, _ = _query("query", "msg-id", path, after["msgId"], "--broker-version", "5.3.3")
    assert (code, [r["msg_id"] for r in rows]) == (0, [after["msgId"]])
    where = (after["topic"], str(after["queueId"]), str(after["queueOffset"]))
    code, (row,), _ = _query("query", "offset", path, *where, "--broker-version", "5.3.3")
    assert (code, row["status"], row["msg_id"]) == (0, "FOUND", after["msgId"])
    cut = victim["commitLogOffset"]
    words = f"past the log's end: the broker's next start ends the log at {cut} (crc mismatch) and serves nothing after it"
    code, rows, _ = _query("query", "msg-id", path, after["msgId"], "--broker-version", "5.3.1")
    assert (code, [(r["error"], r.get("msg_id")) for r in rows]) == (1, [(words, None)])
    code, rows, err = _query("query", "msg-id", path, after["msgId"])
    undecided = f"{words} (the next start of E17 (5.2.0-5.3.1) brokers; the others serve it: --broker-version decides)"
    assert (code, [(r["error"], r.get("msg_id")) for r in rows]) == (1, [(undecided, None)])
    code, (row,), _ = _query("query", "offset", path, *where)
    assert (code, row["status"], row.get("msg_id")) == (1, "OFFSET_OVERFLOW_BADLY", None)
    assert row["error"].startswith(undecided)


def test_msg_id_past_a_dledger_stores_next_start_end_is_not_served(tmp_path):
    """A DLedger store (reference §15.4): an entry whose magic is broken ends ``DLedgerMmapFileStore.recover``'s
    walk, which truncates the data there; the messages of that entry and after it are not served."""
    root = copy_store("4.9.7", "dledger-small", tmp_path)
    messages = manifest("4.9.7", "dledger-small")["messages"]
    victim = next(m["dledgerEntry"] for m in messages if m["dledgerEntry"]["pos"] > SEGMENT + SEGMENT // 4)
    with open(root / "dledger-n0" / victim["file"], "r+b") as f:
        f.seek(victim["filePosition"])
        f.write(b"\x00\x00\x00\x09")  # magic
    gone = next(m for m in messages if m["dledgerEntry"]["pos"] == victim["pos"])
    kept = max((m for m in messages if m["dledgerEntry"]["pos"] < victim["pos"]), key=lambda m: m["commitLogOffset"])
    code, rows, err = _query("query", "msg-id", str(root), gone["msgId"])
    assert code == 1 and [r.get("msg_id") for r in rows] == [None]
    assert f"past the log's end: the broker's next start ends the log at {victim['pos']} (corrupt record)" in rows[0]["error"]
    code, rows, _ = _query("query", "msg-id", str(root), kept["msgId"])
    assert (code, [r["msg_id"] for r in rows]) == (0, [kept["msgId"]])


def test_offset_in_an_empty_or_missing_queue_is_no_message_in_queue(tmp_path):
    """``getMessage`` (3.2.6-5.3.3) answers NO_MESSAGE_IN_QUEUE when the queue's max offset is 0, asked
    before the range, and ``findConsumeQueue`` creates a queue that has no folder: the 5.3.3 broker's
    recovered manifest lists SCHEDULE_TOPIC_XXXX/12 with min and max offset 0, no folder on disk. Before,
    mqtool answered NO_MATCHED_LOGIC_QUEUE, a status the broker never gives."""
    doc = recovered("5.3.3", "config-real")
    path = str(store_path("5.3.3", "config-real"))
    (empty,) = [q for q in doc["queues"] if q["maxOffset"] == 0]
    assert not (store_path("5.3.3", "config-real") / "consumequeue" / empty["topic"] / str(empty["queueId"])).exists()
    for queue_offset in (0, 3):
        code, (row,), _ = _query("query", "offset", path, empty["topic"], str(empty["queueId"]), str(queue_offset))
        assert (code, row["status"], row["queue_min_offset"], row["queue_max_offset"]) == (1, "NO_MESSAGE_IN_QUEUE", 0, 0)
    copy = tmp_path / "store"  # a queue whose one file holds no unit yet: loaded, max offset 0
    shutil.copytree(path, copy)
    some = next((copy / "consumequeue").glob("*/*/00000000000000000000"))
    empty = copy / "consumequeue" / "TopicWithNoMessage" / "0"
    empty.mkdir(parents=True)
    (empty / some.name).write_bytes(bytes(some.stat().st_size))
    code, (row,), _ = _query("query", "offset", str(copy), "TopicWithNoMessage", "0", "0")
    assert (code, row["status"], row["queue_max_offset"]) == (1, "NO_MESSAGE_IN_QUEUE", 0)


def test_a_lookup_on_a_crashed_store_maps_each_segments_head_once(monkeypatch):
    """Before: `query msg-id` on a crashed store settled the abnormal recovery's start under each candidate version,
    each time mapping every segment from the newest back to its first record (15 maps of a 5-segment store, 3000 of a
    thousand-segment one); each segment's head is read once per store now, the answer the same."""
    import mqtool.store.startfile as startfile

    store = store_path("4.9.7", "crashed-small")
    opened = []

    class Counting(startfile.MappedFile):
        def __init__(self, path, *args, **kwargs):
            opened.append(path)
            super().__init__(path, *args, **kwargs)

    monkeypatch.setattr(startfile, "MappedFile", Counting)
    message = manifest("4.9.7", "crashed-small")["messages"][5]
    done = CliRunner().invoke(app, ["query", "msg-id", str(store), message["msgId"], "--format", "json"])
    assert done.exit_code == 0, done.stderr
    assert message["msgId"] in done.stdout
    assert opened and len(opened) == len(set(opened)), opened
