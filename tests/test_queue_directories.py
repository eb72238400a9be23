"""A queue directory named otherwise than its queue id's decimal (``01``, ``+1``), read as the broker reads it.

``loadConsumeQueue`` (3.2.6-4.9.8; ``ConsumeQueueStore.load`` from 5.0.0) takes the queue id from the name
(``Integer.parseInt``), but the ``ConsumeQueue`` it makes reads and writes ``<topic>/<id>``: queue 1 is ``TopicTest/1``, empty
where that is missing, and ``01`` is never read (``verify``'s ``cq-directory-unread``). Each test renames or copies a queue
directory of the real 4.9.7 ``clean-small`` store, whose manifest holds what the broker wrote for each record."""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from conftest import copy_store, manifest
from test_load_strays import snapshot
from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_REFUSED
from mqtool.store import Store
from mqtool.verify import Verification, VerifyOptions


def _records(queue_id: int) -> list[tuple[int, int, int, int]]:
    """(queue offset, commit log offset, size, tags code) of the records the broker dispatched to TopicTest/``queue_id``."""
    return sorted((m["queueOffset"], m["commitLogOffset"], m["size"], m["cqTagsCode"]) for m in manifest("4.9.7", "clean-small")["messages"]
                  if m["topic"] == "TopicTest" and m["queueId"] == queue_id and m["dispatched"])


def _findings(root) -> list[dict]:
    with Store.open(root) as store:
        return [f.as_dict() for f in Verification(store, VerifyOptions(checks=("cq",))).findings()]


def _run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_queue_1_renamed_01_is_an_empty_queue_and_01_a_directory_the_broker_never_reads(tmp_path):
    """Before, the store model read ``01``'s files as queue 1: verify found nothing, dump and the store model served entries
    the broker never reads. Now queue 1 is ``TopicTest/1`` (missing: empty), ``01`` is one ``cq-directory-unread`` warning,
    and queue 1's records are ``cq-entry-missing`` from its first record on, in the file the broker would read them from."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "consumequeue" / "TopicTest" / "1").rename(root / "consumequeue" / "TopicTest" / "01")
    records = _records(1)
    with Store.open(root) as store:
        queues = [q for q in store.consume_queues if q.topic == "TopicTest"]
        assert [(q.queue_id, q.directory.name, q.files, list(q.entries())) for q in queues if q.queue_id == 1] == [(1, "1", [], [])]
        assert len(queues) == 4 and store.consume_queue("TopicTest", 1) is queues[1]
    unread, missing = _findings(root)
    assert unread == {
        "kind": "cq-directory-unread", "severity": "warning", "file": "consumequeue/TopicTest/01", "offset": None,
        "expected": "consumequeue/TopicTest/1", "found": "01",
        "message": "a consume queue directory the broker never reads: it takes queue id 1 of TopicTest from the name (Integer.parseInt) but "
                   "reads and writes that queue in consumequeue/TopicTest/1, which is missing (an empty queue), so the 1 file(s) here are "
                   "never served and no start rebuilds the queue from them; move it aside (or, if it holds that queue and "
                   "consumequeue/TopicTest/1 is missing, rename it)",
        "details": {"topic": "TopicTest", "queue_id": 1, "read_from": "consumequeue/TopicTest/1", "files": 1}}
    assert (missing["kind"], missing["file"], missing["offset"]) == ("cq-entry-missing", f"consumequeue/TopicTest/1/{0:020d}", records[0][1])
    details = missing["details"]
    assert (details["records"], details["first_queue_offset"], details["last_queue_offset"]) == (len(records), 0, len(records) - 1)
    assert "its consume queue directory is missing" in missing["message"]
    assert _run("verify", root).exit_code == EXIT_FINDINGS
    assert _run("dump", "consumequeue", root, "--topic", "TopicTest", "--queue", 1, "--format", "jsonl").stdout == ""
    refused = _run("dump", "consumequeue", root / "consumequeue" / "TopicTest" / "01" / f"{0:020d}")
    assert refused.exit_code == EXIT_BAD_INPUT
    assert refused.stderr.splitlines() == [f"mqtool: error: {root}/consumequeue/TopicTest/01: a queue directory the broker never reads: it takes "
                                           f"queue id 1 from the name but reads and writes that queue in {root}/consumequeue/TopicTest/1"]


def test_with_both_1_and_01_queue_1_is_read_from_1(tmp_path):
    """``01`` holding queue 2's files beside ``1``: the broker's queue 1 is ``TopicTest/1`` (both directories make a queue at that
    path, ``putConsumeQueue`` keeps one). Before, the store model listed two queues 1 (39 queues) and verify compared only one,
    naming nothing; now 38 queues, queue 1's entries are its records', and ``01`` is the one finding."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    shutil.copytree(root / "consumequeue" / "TopicTest" / "2", root / "consumequeue" / "TopicTest" / "01")
    with Store.open(root) as store:
        assert len(store.consume_queues) == 38
        queue = store.consume_queue("TopicTest", 1)
        assert [(e.queue_offset, e.phys_offset, e.size, e.tags_code) for e in queue.entries()] == _records(1)
    [unread] = _findings(root)
    assert (unread["kind"], unread["file"], unread["expected"], unread["details"]["files"]) == (
        "cq-directory-unread", "consumequeue/TopicTest/01", "consumequeue/TopicTest/1", 1)
    assert "reads and writes that queue in consumequeue/TopicTest/1, so the 1 file(s) here are never served" in unread["message"]
    dumped = _run("dump", "consumequeue", root, "--topic", "TopicTest", "--queue", 1, "--format", "jsonl").stdout
    rows = [json.loads(line) for line in dumped.splitlines()]
    assert [(r["queue_offset"], r["phys_offset"]) for r in rows] == [(q, p) for q, p, _, _ in _records(1)]


def test_dump_of_a_queue_folder_the_broker_never_reads_is_refused_in_one_line(tmp_path):
    """``dump consumequeue`` of ``TopicTest/+1`` or ``TopicTest/²``: before, ``+1`` was taken for a topic folder ("not a
    consumequeue folder"), and ``²`` (``isdigit``, refused by ``int``) ended as an internal error (exit 5). Now each is a queue
    folder the broker never reads: exit 3, one line saying why."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    topic = root / "consumequeue" / "TopicTest"
    (topic / "1").rename(topic / "+1")
    (topic / "²").mkdir()
    plus, superscript = _run("dump", "consumequeue", topic / "+1"), _run("dump", "consumequeue", topic / "²")
    assert (plus.exit_code, superscript.exit_code) == (EXIT_BAD_INPUT, EXIT_BAD_INPUT)
    assert plus.stderr.splitlines() == [f"mqtool: error: {topic}/+1: a queue directory the broker never reads: it takes queue id 1 from the name "
                                        f"but reads and writes that queue in {topic}/1"]
    assert superscript.stderr.splitlines() == [f"mqtool: error: {topic}/²: a queue directory the broker never reads: Integer.parseInt refuses its "
                                               "name: no queue is loaded from it"]


def test_a_file_at_a_queues_own_path_is_an_error_and_no_plan_is_made(tmp_path):
    """``TopicTest/1`` a file: the broker loads an empty queue 1 it cannot write (``MappedFile`` makes no file under a file), so
    the first entry it dispatches there stops the store taking any put. Before, verify said only that queue 1's directory is
    missing, and ``rebuild-cq`` planned queue 1's files under it (its ``--yes`` then failed in the apply, "Not a directory");
    now verify names the file (an error) and every write command refuses before planning, the store unchanged."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    queue = root / "consumequeue" / "TopicTest" / "1"
    shutil.rmtree(queue)
    queue.write_bytes(b"not a queue")
    before = snapshot(root)
    found = {f["kind"]: f for f in _findings(root)}
    blocked = found["cq-queue-path-not-a-directory"]
    assert (blocked["severity"], blocked["file"], blocked["details"]) == ("error", "consumequeue/TopicTest/1", {"topic": "TopicTest", "queue_id": 1})
    assert blocked["message"].startswith("a file where the broker reads and writes queue 1 of TopicTest's consume queue directory: it loads an "
                                         "empty queue, but cannot write the first entry it dispatches there")
    assert (found["cq-entry-missing"]["offset"], found["cq-entry-missing"]["details"]["records"]) == (_records(1)[0][1], len(_records(1)))
    for command in ("rebuild-cq", "recover", "repair"):
        refused = _run(command, root)
        assert refused.exit_code == EXIT_REFUSED, (command, refused.output)
        assert refused.stderr.splitlines()[-1].endswith("consumequeue/TopicTest/1: no directory, where the broker reads and writes queue 1 of "
                                                        "TopicTest: it cannot write that queue, nor can a plan; no plan is made on such a store: "
                                                        "move it aside and plan again"), (command, refused.stderr)
    assert snapshot(root) == before


def test_a_directory_01_beside_a_file_1_is_read_as_the_broker_reads_it(tmp_path):
    """``01`` holding queue 1's files beside a file ``1``: before, the store model made queue 1 at the file and every read
    command stopped on "not a directory" (exit 3); now queue 1 is none the store lists, and verify names both entries."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    topic = root / "consumequeue" / "TopicTest"
    (topic / "1").rename(topic / "01")
    (topic / "1").write_bytes(b"")
    with Store.open(root) as store:
        assert [q.queue_id for q in store.consume_queues if q.topic == "TopicTest"] == [0, 2, 3]
    found = {f["kind"]: f for f in _findings(root)}
    assert found["cq-queue-path-not-a-directory"]["file"] == "consumequeue/TopicTest/1"
    assert ("reads and writes that queue in consumequeue/TopicTest/1, which is no directory (an empty queue), so the 1 file(s) here are never "
            "served") in found["cq-directory-unread"]["message"]
    assert _run("verify", root).exit_code == EXIT_FINDINGS
