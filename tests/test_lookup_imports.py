"""A lookup is its imports (issue #12: one lookup <= 0.3 s on a 2 GiB store; it reads a few records):
none of numpy, the compiled walk, pyarrow, construct, rich or tqdm loads for one, in JSON or in the table (ASCII
cells), and its answer is the manifest's message."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import manifest, run_loading, store_path

HEAVY = ("numpy", "mqtool.store._fastscan", "pyarrow", "construct", "rich", "tqdm", "pydantic")
VERSION, STORE = "5.3.3", "clean-small"
PROBE = manifest(VERSION, STORE)["messages"][7]  # queue offset 0 of its queue: the time lookup's answer too
LOOKUPS = {
    "query-offset": ["query", "offset", "{store}", "{topic}", "{queueId}", "{queueOffset}"],
    "query-msg-id": ["query", "msg-id", "{store}", "{msgId}"],
    "query-uniq-key": ["query", "uniq-key", "{store}", "{topic}", "{uniqKey}"],
    "query-key": ["query", "key", "{store}", "{topic}", "{key}"],
    "query-time": ["query", "time", "{store}", "{topic}", "{queueId}", "{storeTimestamp}"],
    "dump-msg-id": ["dump", "{store}", "--msg-id", "{msgId}"],
}


def run_lookup(argv: list[str]) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``mqtool argv`` in a fresh interpreter, and the heavy packages it had loaded at exit."""
    return run_loading(argv, HEAVY, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"}, packages=True)


@pytest.mark.parametrize("name", LOOKUPS)
def test_a_json_lookup_loads_nothing_heavy_and_answers_the_manifest(name):
    argv = [a.format(store=store_path(VERSION, STORE), key=PROBE["keys"][0], **PROBE) for a in LOOKUPS[name]]
    proc, heavy = run_lookup([*argv, "--format", "json"])
    assert proc.returncode == 0, proc.stderr
    assert heavy == []
    rows = json.loads(proc.stdout)
    if name == "query-time":
        assert (rows[0]["queue_offset"], rows[0]["message_offset"]) == (PROBE["queueOffset"], PROBE["commitLogOffset"])
    else:
        assert PROBE["commitLogOffset"] in [r["offset"] for r in rows]


@pytest.mark.parametrize("name", ["query-offset", "query-msg-id", "dump-msg-id"])
def test_a_table_lookup_with_ascii_cells_loads_nothing_heavy(name):
    argv = [a.format(store=store_path(VERSION, STORE), key=PROBE["keys"][0], **PROBE) for a in LOOKUPS[name]]
    proc, heavy = run_lookup(argv)
    assert proc.returncode == 0, proc.stderr
    assert heavy == []
    assert PROBE["msgId"] in proc.stdout


def test_a_table_with_wide_cells_still_measures_them_with_rich():
    """The ASCII shortcut of ``table.cell_len`` is exact; anything else is rich's measure."""
    from rich.cells import cell_len as rich_cell_len

    from mqtool.table import cell_len

    for text in ["", "abc 123", "~!@#$%^&*()_+{}|:<>?", "Tópico-主题-тема", "a\tb", "\x1b[1m", "e\u0301", "🙂 ok"]:
        assert cell_len(text) == rich_cell_len(text), text


@pytest.mark.parametrize("command", ["query", "dump"])
def test_a_lookup_on_a_4x_store_with_configs_parses_none_of_them(command):
    """Version detection reads ``config/*.json`` only for ``dataVersion.stateVersion`` (5.x): a 4.9.7
    broker's files do not name it, so fastjson's parser is not loaded; nor are the batch queues or DLedger."""
    probe = manifest("4.9.7", "config-real")["messages"][-1]  # the first segments expired
    store = str(store_path("4.9.7", "config-real"))
    argv = ["query", "msg-id", store, probe["msgId"]] if command == "query" else ["dump", store, "--msg-id", probe["msgId"]]
    probed = ("mqtool.formats.fastjson", "mqtool.store.batchconsumequeue", "mqtool.store.dledger")
    proc, loaded = run_loading([*argv, "-f", "json"], probed, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert loaded == []
    assert [r["offset"] for r in json.loads(proc.stdout)] == [probe["commitLogOffset"]]


@pytest.mark.parametrize("spelling", ["stateVersion", "\\u0073tateVersion", "st\\x61teVersion"])
def test_a_config_that_could_name_state_version_is_still_parsed(tmp_path, spelling):
    """The 5.x config mark, however fastjson lets the key be spelt, on a 4.9.7 store's copy (its
    topics.json given a ``dataVersion.stateVersion``): only 5.x eras are left, from that file."""
    from mqtool.store import Store

    from conftest import copy_store

    root = copy_store("4.9.7", "config-real", tmp_path)
    with Store.open(root) as store:
        assert "has dataVersion.stateVersion" not in " ".join(store.version_guess.evidence)
    path = root / "config" / "topics.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["dataVersion"] = {**doc.get("dataVersion", {}), "KEY": 1}
    path.write_text(json.dumps(doc).replace('"KEY"', f'"{spelling}"'), encoding="utf-8")
    with Store.open(root) as store:
        assert "config/topics.json has dataVersion.stateVersion: E13-E18 (5.0.0-5.3.3)" in store.version_guess.evidence
        assert min(e.name for e in store.version_guess.eras) == "E13"
