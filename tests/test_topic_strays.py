"""Entries of a topic's folder under ``consumequeue/`` named by no queue id (a directory, a file): 3.2.6's
``DefaultMessageStore.loadConsumeQueue`` parses every entry's name with ``Integer.parseInt`` and does not catch its
``NumberFormatException``, so ``load`` fails and the broker does not start; 4.0.0+ catch it and skip the entry
(``mappedfile.load_effect``'s ``LOAD_CONSUME_QUEUE``, ``VersionRules.queue_id_parse_caught``). ``verify``'s
``cq-topic-stray-entry`` and first line, ``repair``'s quarantine, undone byte for byte by ``restore``."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import copy_store
from test_load_strays import repaired_and_restored, run, verified

from mqtool.errors import EXIT_FINDINGS, EXIT_OK
from mqtool.store.mappedfile import LOAD_CONSUME_QUEUE, QUEUE_ID, REFUSED, SKIPPED, StrayEntry, load_effect
from mqtool.store.rules import BrokerVersion, VersionRules

STRAYS = ("consumequeue/TopicTest/abc", "consumequeue/orders_eu-west-1/notes.txt")


def with_strays(root):
    """A directory ``abc`` (holding a file) and a file ``notes.txt`` beside the queues of two topics."""
    (root / STRAYS[0]).mkdir()
    (root / STRAYS[0] / "00000000000000000000").write_bytes(b"\x01" * 20)
    (root / STRAYS[1]).write_text("moved here by hand\n")
    return root


def topic_strays(findings: list[dict]) -> dict[str, dict]:
    return {f["file"]: f for f in findings if f["kind"] == "cq-topic-stray-entry"}


@pytest.mark.parametrize("version, effect", [("3.2.6", REFUSED), ("4.0.0", SKIPPED), ("4.9.7", SKIPPED), ("5.0.0", SKIPPED), ("5.3.3", SKIPPED)])
def test_load_effect_by_release(tmp_path, version, effect):
    """``loadConsumeQueue`` @8abef783 (3.2.6) calls ``Integer.parseInt`` bare; @rocketmq-4.0.0-incubating and 4.9.7, and
    ``ConsumeQueueStore.load`` @5.0.0 and 5.3.3, catch ``NumberFormatException`` and ``continue``."""
    entry = StrayEntry(tmp_path / "abc", True, 4096, None, False, QUEUE_ID)
    assert load_effect(entry, None, VersionRules(BrokerVersion.parse(version)), LOAD_CONSUME_QUEUE) == effect


def test_3_2_6_refuses_to_start_on_a_topic_entry_named_by_no_queue_id(tmp_path):
    """Before, mqtool took every release to skip such an entry: verify found nothing (exit 0) and its first line said the
    next start keeps the log."""
    root = copy_store("3.2.6", "clean-small", tmp_path)
    assert run("verify", root, "--broker-version", "3.2.6").exit_code == EXIT_OK
    with_strays(root)
    code, out, findings = verified(root, "3.2.6")
    line = " ".join(out.split("\n")[:8])
    assert code == EXIT_FINDINGS
    assert " ".join(line.split()).startswith(
        "the broker's next start refuses to start: consumequeue/TopicTest/abc: a directory, which DefaultMessageStore.loadConsumeQueue "
        "lists: Integer.parseInt of its name throws NumberFormatException, caught only by DefaultMessageStore.load, which fails; "
        "`mqtool repair` moves it out; with that file fixed, it keeps [0, ")
    found = topic_strays(findings)
    assert sorted(found) == sorted(STRAYS)
    assert {f["severity"] for f in found.values()} == {"error"}
    assert found[STRAYS[1]]["message"].startswith("notes.txt is a file named by no queue id in topic orders_eu-west-1's folder: the broker of "
                                                  "E0 (3.2.6) refuses to start")
    doc = json.loads(run("verify", root, "--broker-version", "3.2.6", "--format", "json").stdout)
    next_start = doc["summary"]["next_start"]
    assert next_start["logical_end"] == 5127456 and next_start["reason"].startswith("consumequeue/TopicTest/abc: a directory, which ")


def test_undecided_between_3_2_6_and_later_names_3_2_6(tmp_path):
    """Without index/ the 3.2.6 fixture leaves E0 and later eras: the refusal names E0, and the finding is a warning."""
    root = with_strays(copy_store("3.2.6", "clean-small", tmp_path))
    shutil.rmtree(root / "index")
    shown = run("verify", root)
    findings = json.loads(run("verify", root, "--format", "json").stdout)["findings"]
    assert "which fails (as E0 (3.2.6) brokers do); `mqtool repair` moves it out" in " ".join(shown.stdout.split())
    assert {f["severity"] for f in topic_strays(findings).values()} == {"warning"}


def test_repair_moves_them_out_and_restore_puts_them_back(tmp_path):
    """Before, ``repair`` planned nothing for them (it passed over every topic folder entry named by no queue id) and the
    broker's start still failed on them."""
    root = with_strays(copy_store("3.2.6", "clean-small", tmp_path))
    planned = run("repair", root, "--broker-version", "3.2.6", "--format", "json")
    moved = [a["path"] for a in json.loads(planned.stdout)["files"]["actions"] if a["op"] == "quarantine"]
    assert sorted(moved) == sorted(STRAYS)
    repaired_and_restored(root, "3.2.6", tmp_path / "backup", [root / s for s in STRAYS])


@pytest.mark.parametrize("version", ["4.0.0", "4.9.7"])
def test_4_x_skips_them(tmp_path, version):
    """4.0.0+ skip such an entry: nothing changes (no refusal, no finding, nothing for repair to move)."""
    root = copy_store(version, "clean-small", tmp_path)
    (root / "consumequeue" / "TopicTest" / "abc").mkdir()
    (root / "consumequeue" / "TopicTest" / "notes.txt").write_text("moved here by hand\n")
    code, out, findings = verified(root, version)
    assert code == EXIT_OK and "refuses" not in out.split("\n")[0] and not topic_strays(findings)
    assert "consumequeue/TopicTest/abc" not in run("repair", root, "--broker-version", version, "--format", "json").stdout
