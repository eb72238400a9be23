"""Entries of a mapped file queue folder that are no file of it (a directory, a symlink, a file of another
name), which the broker's ``MappedFileQueue.load`` lists (``File.listFiles``) and mqtool's reading passes
over (``mappedfile.load_effect``, rules §2.13): ``verify``'s ``stray-entry``/``cq-stray-entry``, the next
start's refusal, and ``repair``'s quarantine, undone byte for byte by ``restore``."""

from __future__ import annotations

import json
import os

import pytest
from conftest import copy_store, manifest, recovered
from repair_support import tree
from typer.testing import CliRunner

from mqtool.cli import app
from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK, EXIT_REFUSED
from mqtool.store.mappedfile import DELETED, LEFT_OUT, LOADED, REFUSED, SKIPPED, StrayEntry, load_effect
from mqtool.store.rules import BrokerVersion, VersionRules

runner = CliRunner()
SEGMENT = 1048576  # the fixtures' commit log segment size


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def verified(root, version: str) -> tuple[int, list[str], list[dict]]:
    """verify's exit code, its first lines (the next start) and its findings."""
    shown = run("verify", root, "--broker-version", version)
    doc = run("verify", root, "--broker-version", version, "--format", "json")
    return shown.exit_code, shown.stdout, json.loads(doc.stdout)["findings"]


def strays(findings: list[dict]) -> dict[str, dict]:
    return {f["file"]: f for f in findings if f["kind"] in ("stray-entry", "cq-stray-entry")}


def snapshot(root) -> dict[str, tuple]:
    """Every entry under ``root``: a file's bytes, a symlink's target, a directory (not followed)."""
    out, hashes = {}, tree(root)  # every file hashed once (before: the whole store again for each file)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", hashes.get(rel))
    return out


def repaired_and_restored(root, version: str, backup, moved) -> None:
    """``repair --yes`` moves every path of ``moved`` out and leaves a store ``verify`` calls sound, whose next
    start refuses nothing; ``restore`` of its backup gives every entry back as it was (bytes, links, directories)."""
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", backup)
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert not any(os.path.lexists(p) for p in moved)
    code, out, _ = verified(root, version)
    assert code == EXIT_OK and "refuses" not in out.split("\n")[0]
    restored = run("restore", backup, "--yes")
    assert restored.exit_code == EXIT_OK, restored.stderr
    assert snapshot(root) == damaged


@pytest.mark.parametrize("version, name, effects", [
    # a directory: File.length() is not the segment size before 5.1.0, which skips it
    ("4.4.0", {"is_dir": True, "length": 4096, "offset": None, "last": False}, (LEFT_OUT, REFUSED, LEFT_OUT, REFUSED, SKIPPED, SKIPPED)),
    # a file of the segment length that Long.parseLong cannot read: NumberFormatException, no load catches it
    ("4.4.0", {"is_dir": False, "length": SEGMENT, "offset": None, "last": False}, (REFUSED,) * 6),
    # a numeric name of another width, of the segment length: loaded at that offset
    ("4.4.0", {"is_dir": False, "length": SEGMENT, "offset": 1048576, "last": False}, (LOADED,) * 6),
    # a dangling symlink, the folder's last entry: zero length, deleted from 5.1.3
    ("4.4.0", {"is_dir": False, "length": 0, "offset": None, "last": True}, (LEFT_OUT, REFUSED, LEFT_OUT, REFUSED, REFUSED, DELETED)),
])
def test_load_effect_by_era(tmp_path, version, name, effects):
    """``MappedFileQueue.load``/``doLoad`` at 4.4.0, 4.5.1, 4.9.2, 4.9.7, 5.1.0, 5.3.3 (git show rocketmq-all-<v>:store/...)."""
    entry = StrayEntry(tmp_path / "x", **name)
    found = tuple(load_effect(entry, SEGMENT, VersionRules(BrokerVersion.parse(v))) for v in ("4.4.0", "4.5.1", "4.9.2", "4.9.7", "5.1.0", "5.3.3"))
    assert found == effects


def test_directory_in_commitlog_refused_by_4_9_7(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    assert run("verify", root, "--broker-version", "4.9.7").exit_code == EXIT_OK
    (root / "commitlog" / "backup").mkdir()
    (root / "commitlog" / "backup" / "00000000000000000000").write_bytes(b"old")
    code, out, findings = verified(root, "4.9.7")
    assert code == EXIT_FINDINGS
    first = " ".join(out.split("\n")[:3]).replace("\n", " ")
    assert first.startswith("the broker's next start refuses to start: commitlog/backup: a directory, which MappedFileQueue.load lists:")
    f = strays(findings)["commitlog/backup"]
    assert (f["kind"], f["severity"], f["offset"], f["expected"]) == ("stray-entry", "error", None, SEGMENT)
    assert "refuses to start" in f["message"]


def test_directory_in_commitlog_skipped_by_5_3_3(tmp_path):
    """5.1.0+ ``doLoad`` skips a directory: an info, and the next start as without it."""
    root = copy_store("5.3.3", "clean-small", tmp_path)
    before = run("verify", root, "--broker-version", "5.3.3").stdout.split("\n")[0]
    (root / "commitlog" / "backup").mkdir()
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_OK and out.split("\n")[0] == before
    assert strays(findings)["commitlog/backup"]["severity"] == "info"


def test_directory_before_segments_loads_otherwise_on_4_4_0(tmp_path):
    """4.4.0 leaves a wrong-length entry and every later one out and starts: a directory sorting before
    the segments hides them all (an error, not a refusal); one after them changes nothing."""
    root = copy_store("4.4.0", "clean-small", tmp_path)
    (root / "commitlog" / "+backup").mkdir()  # '+' sorts before the digits
    (root / "commitlog" / "zz").mkdir()
    code, out, findings = verified(root, "4.4.0")
    found = strays(findings)
    assert code == EXIT_FINDINGS and "refuses" not in out.split("\n")[0]
    assert found["commitlog/+backup"]["severity"] == "error" and "every later segment out" in found["commitlog/+backup"]["message"]
    assert found["commitlog/zz"]["severity"] == "info"


@pytest.mark.parametrize("name", [".nfs000001", ".mqtool-x", "old"])
def test_misnamed_segment_length_file_refused_in_every_era(tmp_path, name):
    """A copy of a segment under another name: ``Long.parseLong`` throws in ``MappedFile.init`` (every era)."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "commitlog" / name).write_bytes((root / "commitlog" / "00000000000000000000").read_bytes())
    for version in ("4.4.0", "4.9.2", "4.9.7"):
        code, out, findings = verified(root, version)
        assert code == EXIT_FINDINGS and f"refuses to start: commitlog/{name}: a file named by no offset" in out.replace("\n", " ")
        assert strays(findings)[f"commitlog/{name}"]["severity"] == "error"


def test_wrong_width_name_is_loaded_by_the_broker(tmp_path):
    """A segment renamed to its offset without the zero padding: every broker loads it there, mqtool
    reads no such segment, so the store is not sound."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    last = sorted((root / "commitlog").iterdir())[-1]
    last.rename(last.with_name(str(int(last.name))))
    code, _, findings = verified(root, "4.9.7")
    f = strays(findings)[f"commitlog/{int(last.name)}"]
    assert code == EXIT_FINDINGS and f["severity"] == "error" and f"at offset {int(last.name)}" in f["message"]


def test_a_fifo_named_as_a_segment_is_said_as_one(tmp_path):
    """A FIFO where the last segment was (README's exit 3: never opened): ``File.length`` reads 0, so 4.9.7's
    ``MappedFileQueue.load`` refuses the start. Before, every command called it "a file named 4194304, not by 20
    digits", of a name that is 20 digits."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    last = sorted((root / "commitlog").iterdir())[-1]
    last.unlink()
    os.mkfifo(last)
    code, out, findings = verified(root, "4.9.7")
    said = f"commitlog/{last.name}: a FIFO, socket or device node, which MappedFileQueue.load lists: "
    assert code == EXIT_FINDINGS and f"refuses to start: {said}" in " ".join(out.split())
    assert strays(findings)[f"commitlog/{last.name}"]["message"].startswith(f"{last.name} is a FIFO, socket or device node in commitlog/")
    recovered_ = run("recover", root, "--broker-version", "4.9.7")
    assert recovered_.exit_code == EXIT_BAD_INPUT and said in " ".join(recovered_.stderr.split())


def test_dangling_symlink_in_a_queue_folder(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    queue = next(p for p in sorted((root / "consumequeue").glob("*/*")) if p.is_dir())
    os.symlink("/nonexistent", queue / "00000000000006000000")
    code, out, findings = verified(root, "4.9.7")
    rel = str((queue / "00000000000006000000").relative_to(root))
    f = strays(findings)[rel]
    assert code == EXIT_FINDINGS and (f["kind"], f["severity"], f["found"]) == ("cq-stray-entry", "error", 0)
    assert "refuses to start" in out.replace("\n", " ")


def test_repair_quarantines_and_restore_puts_back(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    sound = tree(root)
    (root / "commitlog" / "backup").mkdir()
    (root / "commitlog" / "backup" / "kept").write_bytes(b"kept")
    os.symlink("/nonexistent", root / "commitlog" / "zz")
    os.symlink("00000000000000000000", root / "commitlog" / "alias")  # a symlink to a segment, under another name
    queue = next(p for p in sorted((root / "consumequeue").glob("*/*")) if p.is_dir())
    (queue / "old").mkdir()
    repaired_and_restored(root, "4.9.7", tmp_path / "bk", (root / "commitlog" / "backup", root / "commitlog" / "zz", queue / "old"))
    assert run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "bk2").exit_code == EXIT_OK
    assert tree(root) == sound  # the segments untouched: only the entries moved out


def test_queue_folder_the_broker_skips_is_left_alone(tmp_path):
    """``loadConsumeQueue`` passes over a folder whose name ``Integer.parseInt`` rejects: repair does not touch it."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    topic = next(p for p in sorted((root / "consumequeue").iterdir()) if p.is_dir())
    (topic / "old").mkdir()
    (topic / "old" / "notes").write_bytes(b"x")
    (topic / "old" / "sub").mkdir()
    assert run("verify", root, "--broker-version", "4.9.7").exit_code == EXIT_OK
    shown = run("repair", root, "--broker-version", "4.9.7", "--format", "json")
    assert "old" not in json.dumps(json.loads(shown.stdout).get("steps"))


# ---- index/: IndexService.load (4.x-5.3.3), DLedger's data/ and index/: MmapFileList.load ----------------


def index_strays(findings: list[dict]) -> dict[str, dict]:
    return {f["file"]: f for f in findings if f["kind"] in ("index-stray-entry", "dledger-stray-entry")}


@pytest.mark.parametrize("is_dir, offset, effects", [
    (True, 20990101000000000, (LEFT_OUT, LEFT_OUT, REFUSED, REFUSED)),  # IOException: load returns false, checked from 5.1.0
    (True, None, (SKIPPED,) * 4),  # NumberFormatException caught
    (False, None, (SKIPPED,) * 4),
])
def test_index_load_effect_by_era(tmp_path, is_dir, offset, effects):
    """``IndexService.load`` and ``DefaultMessageStore.load`` at 4.5.1, 5.0.0, 5.1.0, 5.3.3."""
    from mqtool.store.mappedfile import INDEX_SERVICE

    entry = StrayEntry(tmp_path / "x", is_dir, 4096, offset, False)
    found = tuple(load_effect(entry, None, VersionRules(BrokerVersion.parse(v)), INDEX_SERVICE) for v in ("4.5.1", "5.0.0", "5.1.0", "5.3.3"))
    assert found == effects


def test_numbered_directory_in_index_refused_by_5_3_3_and_repaired(tmp_path):
    root = copy_store("5.3.3", "clean-small", tmp_path)
    (root / "index" / "20990101000000000").mkdir()
    (root / "index" / "20990101000000000" / "kept").write_bytes(b"kept")
    os.symlink("/nonexistent", root / "index" / "20990101000000001")
    (root / "index" / "notes").mkdir()  # Long.parseLong throws: skipped by every release
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS
    assert " ".join(out.split("\n")[:3]).startswith(
        "the broker's next start refuses to start: index/20990101000000000: a directory, which IndexService.load lists:")
    found = index_strays(findings)
    assert (found["index/20990101000000000"]["kind"], found["index/20990101000000000"]["severity"]) == ("index-stray-entry", "error")
    assert found["index/20990101000000001"]["severity"] == "error"
    assert found["index/notes"]["severity"] == "info"
    repaired_and_restored(root, "5.3.3", tmp_path / "bk", [root / "index" / n for n in ("20990101000000000", "20990101000000001")])
    assert (root / "index" / "notes").is_dir()  # a name IndexService.load skips: left alone


def test_numbered_directory_before_index_files_leaves_them_out_on_4_9_7(tmp_path):
    """Up to 5.0.0 ``DefaultMessageStore.load`` ignores ``IndexService.load``'s false: the broker starts without
    the index files after the entry (an error, no refusal); mqtool reads no more than it loads."""
    from mqtool.store.index import list_index_files

    root = copy_store("4.9.7", "clean-small", tmp_path)
    files = list_index_files(root / "index")
    assert files
    (root / "index" / "1").mkdir()  # sorts before the yyyyMMddHHmmssSSS names
    assert list_index_files(root / "index") == []
    code, out, findings = verified(root, "4.9.7")
    f = index_strays(findings)["index/1"]
    assert code == EXIT_FINDINGS and "refuses" not in out.split("\n")[0]
    assert f["severity"] == "error" and f"starts without the {len(files)} index file" in f["message"]
    (root / "index" / "1").rmdir()
    (root / "index" / "99999999999999999").mkdir()  # after them: the load ends there, nothing is left out
    code, _, findings = verified(root, "4.9.7")
    assert code == EXIT_OK and index_strays(findings)["index/99999999999999999"]["severity"] == "info"
    assert list_index_files(root / "index") == files


@pytest.mark.parametrize("folder", ["data", "index"])
def test_dledger_folder_directory_refused_and_repaired(tmp_path, folder):
    """DLedger's ``MmapFileList.load`` has no directory skip in any release: ``File.length`` of one is not the
    file size, the load returns false and ``DLedgerMmapFileStore.load`` exits."""
    root = copy_store("5.3.3", "dledger-small", tmp_path)
    member = next(root.glob("dledger-*"))
    (member / folder / "old").mkdir()
    (member / folder / "old" / "kept").write_bytes(b"kept")
    rel = f"{member.name}/{folder}/old"
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS
    assert " ".join(out.split("\n")[:3]).startswith(f"the broker's next start refuses to start: {rel}: a directory, which MmapFileList.load lists:")
    f = index_strays(findings)[rel]
    assert (f["kind"], f["severity"]) == ("dledger-stray-entry", "error")
    repaired_and_restored(root, "5.3.3", tmp_path / "bk", [member / folder / "old"])


# ---- timerlog/: TimerLog.load's MappedFileQueue.load (5.x), BrokerController.initialize fails on its false ----------------


def timer_strays(findings: list[dict]) -> dict[str, dict]:
    return {f["file"]: f for f in findings if f["kind"] == "timer-stray-entry"}


def test_misnamed_timer_log_file_refused_and_repaired(tmp_path):
    """A copy of a timer log file under another name: ``MappedFile.init``'s ``Long.parseLong`` throws in
    ``TimerLog.load`` (5.0.0-5.3.3), which ``BrokerController.initialize`` does not survive; a directory is
    skipped from 5.1.0 (an info), refused before."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    assert run("verify", root, "--broker-version", "5.3.3").exit_code == EXIT_OK
    log = root / "timerlog"
    (log / ".nfs0001").write_bytes((log / "00000000000000000000").read_bytes())
    (log / "old").mkdir()
    (log / "old" / "kept").write_bytes(b"kept")
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS
    assert " ".join(out.split("\n")[:3]).startswith(
        "the broker's next start refuses to start: timerlog/.nfs0001: a file named by no offset, which MappedFileQueue.load lists:")
    found = timer_strays(findings)
    assert (found["timerlog/.nfs0001"]["severity"], found["timerlog/.nfs0001"]["expected"]) == ("error", 8192)
    assert found["timerlog/old"]["severity"] == "info"
    (log / ".nfs0001").unlink()
    code, out, findings = verified(root, "5.0.0")
    assert code == EXIT_FINDINGS and " ".join(out.split("\n")[:2]).startswith(
        "the broker's next start refuses to start: timerlog/old: a directory, which MappedFileQueue.load lists:")
    assert timer_strays(findings)["timerlog/old"]["severity"] == "error"
    code, _, findings = verified(root, "4.9.7")  # no 4.x broker loads timerlog/
    assert not timer_strays(findings)
    (log / ".nfs0001").write_bytes((log / "00000000000000000000").read_bytes())
    repaired_and_restored(root, "5.0.0", tmp_path / "bk", [log / ".nfs0001", log / "old"])


# ---- a mixed DLedger store's commitlog/: DLedgerCommitLog.load is CommitLog.load (super.load(), 4.5.0-5.3.3) ----------------


def test_first_load_dledger_store_reports_classic_strays_and_repair_restores(tmp_path):
    """A broker switched to DLedger before its first entry (an empty ``dledger-n0/data``): the classic folder's
    directory and dangling symlink are the classic store's ``stray-entry`` and refusal; repair and restore as there."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "dledger-n0" / "data").mkdir(parents=True)
    assert run("verify", root, "--broker-version", "4.9.7").exit_code == EXIT_OK
    (root / "commitlog" / "backup").mkdir()
    (root / "commitlog" / "backup" / "kept").write_bytes(b"kept")
    os.symlink("/nonexistent", root / "commitlog" / "zz")
    code, out, findings = verified(root, "4.9.7")
    assert code == EXIT_FINDINGS
    assert " ".join(out.split("\n")[:3]).startswith("the broker's next start refuses to start: commitlog/backup: a directory, which MappedFileQueue.load lists:")
    found = strays(findings)
    assert (found["commitlog/backup"]["kind"], found["commitlog/backup"]["severity"]) == ("stray-entry", "error")
    assert (found["commitlog/zz"]["severity"], found["commitlog/zz"]["found"]) == ("error", 0)
    repaired_and_restored(root, "4.9.7", tmp_path / "bk", [root / "commitlog" / n for n in ("backup", "zz")])


def test_mixed_dledger_store_reports_classic_left_out_files(tmp_path):
    """A mixed store with DLedger data after the classic log (``test_dledger.mixed_store``): a directory in
    ``commitlog/`` refused by 4.9.7 (skipped by 5.3.3: an info) and a short classic segment (``segment-size``)
    refused by every era, each named by the next start as on a classic store."""
    from test_dledger import mixed_store

    root = mixed_store(tmp_path)[0]
    (root / "commitlog" / "backup").mkdir()
    code, out, findings = verified(root, "4.9.7")
    assert code == EXIT_FINDINGS
    assert " ".join(out.split("\n")[:3]).startswith("the broker's next start refuses to start: commitlog/backup: a directory, which MappedFileQueue.load lists:")
    assert (strays(findings)["commitlog/backup"]["kind"], strays(findings)["commitlog/backup"]["severity"]) == ("stray-entry", "error")
    code, out, findings = verified(root, "5.3.3")
    assert "refuses" not in out.split("\n")[0] and strays(findings)["commitlog/backup"]["severity"] == "info"
    os.truncate(root / "commitlog" / "00000000000001048576", 1000)
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS and " ".join(out.split("\n")[:2]).startswith(
        "the broker's next start refuses to start: 00000000000001048576: 1000 bytes, not 1048576 like the other segments")
    [f] = [f for f in findings if f["kind"] == "segment-size"]
    assert (f["file"], f["severity"], f["expected"], f["found"]) == ("commitlog/00000000000001048576", "error", SEGMENT, 1000)


# ---- files of the wrong length: timerlog/ (5.x) and a zero-length last file with an entry after it (5.1.3+) ----------------


def first_line(out: str) -> str:
    return " ".join(out.split("\n")[:6])


def test_short_timer_log_file_refused_and_repaired(tmp_path):
    """A timer log file cut by a disk fault: ``TimerLog.load``'s ``MappedFileQueue.load`` refuses it ("length not
    matched", 5.0.0-5.3.3 ``doLoad``) and ``BrokerController.initialize`` fails; no 4.x broker loads ``timerlog/``."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    last = root / "timerlog" / "00000000000000008192"
    os.truncate(last, 5000)
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS
    assert first_line(out).startswith("the broker's next start refuses to start: timerlog/00000000000000008192: 5000 bytes, not 8192; "
                                      "`mqtool repair` fixes it; with that file fixed, it keeps [0, 1980397)")
    f = next(f for f in findings if f["kind"] == "timer-file-size")
    assert (f["file"], f["severity"], f["expected"], f["found"]) == ("timerlog/00000000000000008192", "error", 8192, 5000)
    planned = json.loads(run("recover", root, "--broker-version", "5.0.0", "--format", "json").stdout)
    assert planned["next_start"]["line"].startswith("the broker's next start refuses to start: timerlog/00000000000000008192: 5000 bytes")
    assert not [f for f in verified(root, "4.9.7")[2] if f["kind"] == "timer-file-size"]
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert last.stat().st_size == 8192
    code, out, _ = verified(root, "5.3.3")
    assert code == EXIT_OK and "refuses" not in out.split("\n")[0]
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged


def test_short_timer_log_file_before_the_last_gets_a_blank(tmp_path):
    """Padded with zeros only, a short timer log file before the last would stop ``recoverAndRevise`` (a unit of size
    0) and its ``truncateDirtyFiles`` would delete the later file: repair ends it with ``TimerLog.append``'s blank at the
    unit the cut crosses, as the broker ends a full file (the fixture's own blank at 8164), and the later units stay."""
    from mqtool.formats import timer as tfmt
    from mqtool.store.timer import TimerStore

    root = copy_store("5.3.3", "timer-small", tmp_path)
    units = manifest("5.3.3", "timer-small")["timer"]["timerlog"]
    first = root / "timerlog" / "00000000000000000000"
    own = units["blanks"][0]  # the broker's: int32 bytes left, int64 0, int32 BLANK_MAGIC_CODE
    blank = first.read_bytes()[own["position"]:own["position"] + tfmt.BLANK_SIZE]
    assert int.from_bytes(blank[:4], "big") == own["sizeField"] == 8192 - own["position"]
    os.truncate(first, 5000)
    assert " ".join(verified(root, "5.3.3")[1].split("\n")[:2]).startswith(
        "the broker's next start refuses to start: timerlog/00000000000000000000: 5000 bytes, not 8192")
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == EXIT_FINDINGS, applied.stderr  # lost data: the units after byte 4992, which wheel slots name
    cut = 5000 // tfmt.UNIT_SIZE * tfmt.UNIT_SIZE
    assert first.read_bytes()[cut:cut + tfmt.BLANK_SIZE] == (8192 - cut).to_bytes(4, "big") + blank[4:] and first.stat().st_size == 8192
    walked = [u.timer_log_offset for u in TimerStore.open(root).log.walk()]
    second = units["files"][1]  # the later file's units, as the broker wrote them
    assert walked == [*range(0, cut, tfmt.UNIT_SIZE), *range(8192, 8192 + second["units"] * tfmt.UNIT_SIZE, tfmt.UNIT_SIZE)]
    failing = [f for f in verified(root, "5.3.3")[2] if f["severity"] != "info"]
    assert failing and all(f["kind"] == "timer-wheel" and f["details"].get("cut_off") for f in failing)  # slots of the units cut off


def test_wheel_slots_of_a_cut_tail_before_the_last_timer_log_file_are_cleared(tmp_path):
    """A timer log file before the last cut short and ended with a blank: the slots whose units were all in its cut tail
    still name the blank or zeros there, which recover never revises (no unit of their time is walked, and checkPhyPos
    only looks past the log's end); at their time dequeue would read prevPos 0 there and deliver unit 0's message again.
    ``repair`` clears exactly those slots (as clear-wheel-slots does for the last file), leaves every slot with no unit in
    the tail (those with units on both sides: ``test_wheel_slots_whose_chain_crosses_a_cut_tail_are_reported_and_relinked``), and
    ``restore`` gives the wheel back byte for byte."""
    from mqtool.formats import timer as tfmt
    from mqtool.store.timer import TimerStore

    root = copy_store("5.3.3", "timer-small", tmp_path)
    first = root / "timerlog" / "00000000000000000000"
    cut, size = 5000 // tfmt.UNIT_SIZE * tfmt.UNIT_SIZE, first.stat().st_size
    before = {s.slot: s for s in TimerStore.open(root).wheel_slots() if s.is_read}
    in_tail = {i for i, s in before.items() if cut <= s.first_pos <= s.last_pos < size}
    through_tail = {i for i, c in _slot_chains(root).items() if any(cut <= p < size for p in c)} - in_tail  # some relinked
    os.truncate(first, 5000)
    damaged = snapshot(root)
    planned = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    assert not [f for f in planned["remaining"] if f["kind"] == "timer-wheel" and any(f"slot {i} " in f["message"] for i in in_tail)]
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == EXIT_FINDINGS, applied.stderr
    after = {s.slot: s for s in TimerStore.open(root).wheel_slots() if s.is_read}
    assert in_tail and {i: s for i, s in after.items() if i not in through_tail} == {
        i: s for i, s in before.items() if i not in in_tail | through_tail}
    assert not [f for f in verified(root, "5.3.3")[2] if f["kind"] == "timer-wheel" and f["details"]["slot"] in in_tail]
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK and snapshot(root) == damaged


def _slot_chains(root) -> dict[int, list[int]]:
    """Each read wheel slot's units as ``TimerMessageStore.dequeue`` follows them (lastPos, then each prevPos), in log order."""
    from mqtool.store.timer import TimerStore

    timer = TimerStore.open(root)
    units = {u.timer_log_offset: u for u in timer.log.walk()}
    chains = {}
    for slot in (s for s in timer.wheel_slots() if s.is_read):
        chain, pos = [], slot.last_pos
        while pos in units and pos not in chain:
            chain.append(pos)
            pos = units[pos].prev_pos
        chains[slot.slot] = chain[::-1] if pos == -1 else None  # None: the walk meets a position where no unit starts
    return chains


@pytest.mark.parametrize("first_pass", ["first-file", "later-file"])
def test_wheel_slots_whose_chain_crosses_a_cut_tail_are_reported_and_relinked(tmp_path, first_pass):
    """A timer log file before the last cut short and ended with a blank (as ``repair`` pads it): a slot whose units lie
    before the cut, in the cut tail and after it in the later file was not reported, and repair left it: the unit after the
    cut names a unit of the tail as its prevPos, where ``TimerMessageStore.dequeue`` reads the blank or zeros (prevPos 0) and
    goes on at unit 0, never reaching the slot's units before the cut. Now verify reports it and repair relinks it over the
    lost units, as do the slots ending in the tail that the broker's recover does not revise (its first ``recoverAndRevise``
    starting at the later file, from timercheck's flush position): every chain is then the slot's units left, in order.
    The slots the broker's dequeue has read already (before timercheck's lastReadTimeMs) it never reads again: left alone."""
    from mqtool.formats import timer as tfmt

    from mqtool.store.timer import TimerStore

    root = copy_store("5.3.3", "timer-small", tmp_path)
    first = root / "timerlog" / "00000000000000000000"
    size = first.stat().st_size
    cut = 5000 // tfmt.UNIT_SIZE * tfmt.UNIT_SIZE
    whole = _slot_chains(root)
    left = {i: [p for p in c if not cut <= p < size] for i, c in whole.items()}
    # the slots the broker's dequeue has not read yet: of times from timercheck's lastReadTimeMs on (over timerPrecisionMs)
    timer = TimerStore.open(root)
    read_from = timer.check.last_read_time_ms // manifest("5.3.3", "timer-small")["storeConfig"]["timerPrecisionMs"]
    due = {s.slot for s in timer.wheel_slots() if s.is_read and s.time_slot >= read_from}
    crossing = {i for i, c in whole.items() if c[0] < cut and any(cut <= p < size for p in c) and c[-1] >= size}
    ending_in_tail = {i for i, c in whole.items() if c[0] < cut <= c[-1] < size}
    read, crossing, ending_in_tail = (crossing | ending_in_tail) - due, crossing & due, ending_in_tail & due
    if first_pass == "later-file":  # lastTimerLogFlushPos a file past the log: recover's first pass starts at the later file
        with open(root / "config" / "timercheck", "r+b") as f:
            f.seek(8)
            f.write((3 * size).to_bytes(8, "big"))
    with open(first, "r+b") as f:  # cut, then padded with an end-of-file blank at the unit the cut crosses
        f.truncate(5000)
        f.truncate(size)
        f.seek(cut)
        f.write(tfmt.encode_blank(size - cut))
    assert crossing and ending_in_tail and read and {i for i, c in _slot_chains(root).items() if c is None} >= crossing | read
    findings = [f for f in verified(root, "5.3.3")[2] if f["kind"] == "timer-wheel"]
    broken = {f["details"]["slot"]: f for f in findings if "chain_broken_at" in f["details"]}
    assert set(broken) == crossing and all(f["severity"] == "warning" and cut <= f["found"] < size for f in broken.values())
    wheel = (root / "timerwheel").read_bytes()
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == EXIT_FINDINGS, applied.stderr  # lost data: slots naming units of the tail the broker revises itself
    chains = _slot_chains(root)
    assert all(chains[i] == left[i] for i in crossing)
    assert all(chains[i] is None and (root / "timerwheel").read_bytes()[i * 32:i * 32 + 32] == wheel[i * 32:i * 32 + 32] for i in read)
    wheel = (root / "timerwheel").read_bytes()
    last = {i: int.from_bytes(wheel[i * 32 + 16:i * 32 + 24], "big") for i in ending_in_tail}
    if first_pass == "later-file":  # the broker's recover never walks their units: relinked to their last unit left
        assert all(chains[i] == left[i] and last[i] == left[i][-1] for i in ending_in_tail)
    else:  # its first pass walks them and moves their lastPos back itself (recoverAndRevise): left as they are
        assert all(last[i] == whole[i][-1] for i in ending_in_tail)
    after = [f for f in verified(root, "5.3.3")[2] if f["kind"] == "timer-wheel"]
    assert not [f for f in after if f["details"]["slot"] in crossing or "chain_broken_at" in f["details"]]
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK and snapshot(root) == damaged


def test_a_slot_whose_last_unit_is_the_first_cut_off_the_last_timer_log_file_is_relinked(tmp_path):
    """The last timer log file cut at a unit, and recover's first pass starting at that file (timercheck's flush position a
    file past the log): a slot not yet read whose units lie before that file but its last, the first unit cut off, keeps
    that lastPos, the log's new end, which checkPhyPos passes over (it looks for lastPos > end) and no walk revises. The
    broker enqueues the cut unit's message again there (reviseQueueOffset), naming the slot's lastPos, itself, as its
    previous unit (doEnqueue): that slot's dequeue never ends. Repair left it (it cleared only slots whose units were all
    cut); now its lastPos is its last unit left, as recoverAndRevise would have set it walking that unit."""
    from mqtool.store.timer import TimerStore

    root = copy_store("5.3.3", "timer-small", tmp_path)
    last = root / "timerlog" / "00000000000000008192"
    size = last.stat().st_size
    timer = TimerStore.open(root)
    read_from = timer.check.last_read_time_ms // manifest("5.3.3", "timer-small")["storeConfig"]["timerPrecisionMs"]
    due = {s.slot for s in timer.wheel_slots() if s.is_read and s.time_slot >= read_from}
    slot, chain = next((i, c) for i, c in sorted(_slot_chains(root).items()) if i in due and len(c) > 1 and c[-2] < size <= c[-1])
    with open(root / "config" / "timercheck", "r+b") as f:
        f.seek(8)
        f.write((3 * size).to_bytes(8, "big"))
    os.truncate(last, chain[-1] - size)
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code in (EXIT_OK, EXIT_FINDINGS), applied.stderr
    wheel = (root / "timerwheel").read_bytes()
    assert int.from_bytes(wheel[slot * 32 + 16:slot * 32 + 24], "big") == chain[-2] and _slot_chains(root)[slot] == chain[:-1]
    assert not [f for f in verified(root, "5.3.3")[2] if f["kind"] == "timer-wheel" and f["details"]["slot"] == slot]
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK and snapshot(root) == damaged


@pytest.mark.parametrize("version, severity", [("5.1.1", "error"), ("5.3.3", "info")])
def test_empty_last_timer_log_file(tmp_path, version, severity):
    """An empty last timer log file: 5.0.0-5.1.2 refuse it, 5.1.3+ ``doLoad`` delete it, but only as the folder's last
    entry: a directory after it (skipped from 5.1.0) leaves it to the length rule, and 5.1.3+ refuse too."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    (root / "timerlog" / "00000000000000016384").write_bytes(b"")
    _, out, findings = verified(root, version)
    f = next(f for f in findings if f["kind"] == "timer-file-size")
    assert (f["file"], f["severity"], f["found"]) == ("timerlog/00000000000000016384", severity, 0)
    assert ("refuses to start: timerlog/00000000000000016384: 0 bytes, not 8192" in first_line(out)) == (severity == "error")
    (root / "timerlog" / "old").mkdir()
    code, out, findings = verified(root, version)
    assert code == EXIT_FINDINGS and next(f for f in findings if f["kind"] == "timer-file-size")["severity"] == "error"
    assert first_line(out).startswith("the broker's next start refuses to start: timerlog/00000000000000016384: 0 bytes, not 8192"
                                      + (" (5.1.3+ delete an empty file only as the folder's last entry, and old, a directory, sorts "
                                         "after it)"
                                         if version == "5.3.3" else ";"))
    repaired_and_restored(root, version, tmp_path / "bk", [root / "timerlog" / "00000000000000016384"])


@pytest.mark.parametrize("entry", ["directory", "dangling symlink", "file"])
def test_empty_last_segment_with_an_entry_after_it_refused_by_5_1_4(tmp_path, entry):
    """5.1.3+ ``doLoad`` deletes an empty file only when it is the listing's last (``i == files.size() - 1``): with any
    entry sorting after it, even a directory it skips, the empty file meets the length rule and the start is refused."""
    root = copy_store("5.1.4", "clean-small", tmp_path)
    empty = root / "commitlog" / "00000000000005242880"
    empty.write_bytes(b"")
    code, out, findings = verified(root, "5.1.4")
    assert code == EXIT_OK and next(f for f in findings if f["kind"] == "segment-empty-last")["severity"] == "info"
    after = root / "commitlog" / "zz"
    make = {"directory": after.mkdir, "dangling symlink": lambda: os.symlink("/nonexistent", after), "file": lambda: after.write_bytes(b"")}
    make[entry]()
    code, out, findings = verified(root, "5.1.4")
    assert code == EXIT_FINDINGS
    assert first_line(out).startswith("the broker's next start refuses to start: 00000000000005242880: a zero-length last commit log file "
                                      f"(5.1.3+ delete an empty file only as the folder's last entry, and zz, a {entry}")
    assert next(f for f in findings if f["kind"] == "segment-empty-last")["severity"] == "error"
    recovered = run("recover", root, "--broker-version", "5.1.4")
    assert recovered.exit_code != EXIT_OK and "refuses to start on this store" in recovered.stderr
    repaired_and_restored(root, "5.1.4", tmp_path / "bk", [empty])


@pytest.mark.parametrize("version, severity, refused", [("4.4.0", "info", False), ("4.9.7", "error", True)])
def test_empty_last_segment_with_an_entry_after_it_on_4_x(tmp_path, version, severity, refused):
    """4.x as its own rules say, the entry after it or not: 3.2.6-4.4.0 leave the empty file out and start (nothing
    after it is lost), 4.5.0-4.9.1 and 4.9.3+ refuse it."""
    root = copy_store(version, "clean-small", tmp_path)
    (root / "commitlog" / "00000000000005242880").write_bytes(b"")
    os.symlink("/nonexistent", root / "commitlog" / "zz")
    _, out, findings = verified(root, version)
    assert next(f for f in findings if f["kind"] == "segment-empty-last")["severity"] == severity
    refusal = "the broker's next start refuses to start: 00000000000005242880: a zero-length last commit log file"
    assert first_line(out).startswith(refusal) == refused
    assert "(5.1.3+" not in first_line(out)


def test_empty_last_queue_file_with_an_entry_after_it(tmp_path):
    """The same rule in a consume queue's folder (``loadConsumeQueue``'s ``MappedFileQueue.load``): `recover` rewrites the
    queue (the empty file deleted), after which the dangling symlink is the folder's last, zero-length entry, which
    5.1.3+ delete."""
    root = copy_store("5.3.3", "clean-small", tmp_path)
    queue = root / "consumequeue" / "TopicTest" / "0"
    (queue / "00000000000000020000").write_bytes(b"")
    _, _, findings = verified(root, "5.3.3")
    assert next(f for f in findings if f["kind"] == "cq-file-size")["severity"] == "info"
    os.symlink("/nonexistent", queue / "zz-link")
    code, out, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS
    assert first_line(out).startswith("the broker's next start refuses to start: consumequeue/TopicTest/0/00000000000000020000: 0 bytes, "
                                      "not 20000 (5.1.3+ delete an empty file only as the folder's last entry, and zz-link, a dangling "
                                      "symlink to /nonexistent, sorts after it), which `mqtool recover` fixes")
    assert next(f for f in findings if f["kind"] == "cq-file-size")["severity"] == "error"
    assert run("recover", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk").exit_code == EXIT_OK
    assert not (queue / "00000000000000020000").exists()
    assert verified(root, "5.3.3")[0] == EXIT_OK


@pytest.mark.parametrize("version, folder", [("4.9.7", "commitlog"), ("5.3.3", "commitlog"), ("4.9.7", "consumequeue/TopicTest/0")])
def test_a_dangling_symlinked_segment_is_refused_naming_its_target(tmp_path, version, folder):
    """Before: the last file of ``commitlog/`` (or a consume queue's) of ``clean-small`` as a symlink into a disk not mounted
    was quarantined by ``repair --yes`` (4.9.7 refuses to start on it; 5.3.3 passes over it, which verify called an info
    and recover planned past), after which the broker's next start writes new data at its offset. ``MappedFileQueue.load``
    reads a dangling link's ``File.length()`` as 0 (4.9.7: refused; 5.3.3 ``doLoad``: deleted as the last entry). Now
    verify (an error), info's notes, recover and repair (refused, exit 4, nothing changed) name the link and its target
    and say to mount the disk or remove the link."""
    root = copy_store(version, "clean-small", tmp_path)
    last = sorted((root / folder).iterdir())[-1]
    rel, target = f"{folder}/{last.name}", tmp_path / "unmounted" / last.name
    last.unlink()
    os.symlink(target, last)
    said = f"a dangling symlink to {target}"
    way_out = "its data may be on a disk that is not mounted, and a broker that starts without it writes new data at its offset: " \
              "mount the disk, or remove the link yourself if that data is truly gone"
    code, _, findings = verified(root, version)
    f = strays(findings)[rel]
    assert code == EXIT_FINDINGS and f["severity"] == "error" and said in f["message"] and f["message"].endswith(way_out)
    notes = json.loads(run("info", root, "--broker-version", version, "--format", "json").stdout)["notes"]
    assert any(said in n and n.endswith(way_out) for n in notes)
    damaged = snapshot(root)
    for command in (("recover",), ("recover", "--yes"), ("repair",), ("repair", "--yes")):
        refused = run(*command, root, "--broker-version", version, "--backup-dir", tmp_path / "bk")
        assert refused.exit_code == EXIT_REFUSED and refused.stderr == f"mqtool: error: {rel}: {said}: {way_out}\n"
    assert snapshot(root) == damaged and not (tmp_path / "bk").exists()


def timer_size_conf(tmp_path, name: str) -> str:
    """A broker.conf with the fixture's ``mappedFileSizeTimerLog`` (its manifest's storeConfig)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"mappedFileSizeTimerLog={manifest('5.3.3', name)['storeConfig']['mappedFileSizeTimerLog']}\n")
    return str(conf)


@pytest.mark.parametrize("cut", [52 * 100 + 30, 52 * 100])
def test_lone_cut_timer_log_file_refused_and_repaired(tmp_path, cut):
    """Before: the timer log's file size was inferred from the other files, so the only file of ``timerlog/`` (5.3.3
    ``timer-crashed``) cut by a disk fault, inside a unit or at a unit's end, was taken as it was: no ``timer-file-size``,
    a next start said to keep the store, which ``TimerLog.load``'s ``MappedFileQueue.load`` refuses ("length not
    matched", 5.0.0-5.3.3). Now broker.conf's ``mappedFileSizeTimerLog`` (``--broker-config``) is the size; without it a
    file whose bytes show a cut (a torn unit; a unit with no room for ``TimerLog.append``'s blank after it) is held to the
    default, 100 MiB (``MessageStoreConfig`` 5.0.0-5.3.3)."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    only = root / "timerlog" / "00000000000000000000"
    units = only.read_bytes()[:52 * 100]
    os.truncate(only, cut)
    code, out, findings = verified(root, "5.3.3")
    f = next(f for f in findings if f["kind"] == "timer-file-size")
    assert code == EXIT_FINDINGS and (f["severity"], f["expected"], f["found"]) == ("error", 100 * 1024 * 1024, cut)
    assert first_line(out).startswith(f"the broker's next start refuses to start: timerlog/00000000000000000000: {cut} bytes, not 104857600;")
    assert f["message"].endswith("`mqtool repair` fixes it given --broker-config")
    refused = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "guessed")
    assert refused.exit_code == EXIT_REFUSED and "pass --broker-config" in refused.stderr and only.stat().st_size == cut  # no guess written
    conf = timer_size_conf(tmp_path, "timer-crashed")
    shown = run("verify", root, "--broker-version", "5.3.3", "--broker-config", conf)
    findings = json.loads(run("verify", root, "--broker-version", "5.3.3", "--broker-config", conf, "--format", "json").stdout)["findings"]
    f = next(f for f in findings if f["kind"] == "timer-file-size")
    assert (f["severity"], f["expected"], f["found"]) == ("error", 8192, cut)
    assert first_line(shown.stdout).startswith(f"the broker's next start refuses to start: timerlog/00000000000000000000: {cut} bytes, not 8192;")
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--broker-config", conf, "--backup-dir", tmp_path / "bk")
    assert applied.exit_code in (EXIT_OK, EXIT_FINDINGS), applied.stderr
    data = only.read_bytes()
    assert len(data) == 8192 and not any(data[52 * 100:]) and data[:52 * 100] == units
    after = json.loads(run("verify", root, "--broker-version", "5.3.3", "--broker-config", conf, "--format", "json").stdout)["findings"]
    assert not [f for f in after if f["kind"] in ("timer-file-size", "timer-reference", "timer-log-damaged")]
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged


def test_lone_cut_timer_log_file_next_start_names_broker_config(tmp_path):
    """Before: with a lone cut timer log file and no broker.conf, the next start's line (verify's first line, info's and the
    plans' ``next_start``, salvage's stderr) said '`mqtool repair` fixes it', and that repair refused (exit 4) asking for
    --broker-config, which verify's own finding named. The line names it too, the same in every command."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    os.truncate(root / "timerlog" / "00000000000000000000", 52 * 100 + 30)
    line = json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert line.startswith("the broker's next start refuses to start: timerlog/00000000000000000000: 5230 bytes, not 104857600; "
                           "`mqtool repair` fixes it given --broker-config; with that file fixed, it keeps")
    for command in ("info", "recover"):  # repair refuses without it (exit 4)
        shown = run(command, root, "--broker-version", "5.3.3", "--format", "json")
        assert json.loads(shown.stdout)["next_start"]["line"] == line, command
    salvaged = run("salvage", root, "--broker-version", "5.3.3", "-f", "jsonl", "--out", tmp_path / "out.jsonl")
    assert f"mqtool: {line}" in salvaged.stderr


def test_a_broker_config_given_as_a_pipe_is_read_once_by_repair(tmp_path):
    """Before: ``repair --broker-config <(ssh broker cat broker.conf)`` read the pipe once for the file fixes and again to
    open the store, which found it empty ('no setting mqtool reads is there'): the plan resized the lone cut timer log file
    to broker.conf's 8192 while its next start said 'not 104857600' (the default). Now a run reads each config once."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    os.truncate(root / "timerlog" / "00000000000000000000", 52 * 100 + 30)
    conf = timer_size_conf(tmp_path, "timer-crashed")
    from_file = run("repair", root, "--broker-version", "5.3.3", "--broker-config", conf, "--format", "json")
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, open(conf, "rb").read())
        os.close(write_end)
        from_pipe = run("repair", root, "--broker-version", "5.3.3", "--broker-config", f"/dev/fd/{read_end}", "--format", "json")
    finally:
        os.close(read_end)
    assert "no setting mqtool reads" not in from_pipe.stderr, from_pipe.stderr
    planned = json.loads(from_pipe.stdout)
    assert planned["next_start"] == json.loads(from_file.stdout)["next_start"]
    assert planned["next_start"]["line"].startswith("the broker's next start refuses to start: timerlog/00000000000000000000: "
                                                    "5230 bytes, not 8192;")


def test_every_timer_log_file_cut_alike_is_held_to_the_configured_size(tmp_path):
    """Both files of 5.3.3 ``timer-small``'s ``timerlog/`` cut to one length: the files agree, so only broker.conf's
    ``mappedFileSizeTimerLog`` tells they are short, and the broker refuses the first."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    for path in (root / "timerlog").iterdir():
        os.truncate(path, 5000)
    conf = timer_size_conf(tmp_path, "timer-small")
    shown = run("verify", root, "--broker-version", "5.3.3", "--broker-config", conf)
    findings = json.loads(run("verify", root, "--broker-version", "5.3.3", "--broker-config", conf, "--format", "json").stdout)["findings"]
    assert sorted((f["file"], f["expected"], f["found"]) for f in findings if f["kind"] == "timer-file-size") == [
        ("timerlog/00000000000000000000", 8192, 5000), ("timerlog/00000000000000008192", 8192, 5000)]
    assert first_line(shown.stdout).startswith("the broker's next start refuses to start: timerlog/00000000000000000000: 5000 bytes, not 8192;")


def test_short_last_timer_log_file_cut_inside_a_unit(tmp_path):
    """Before: the last timer log file cut inside a unit (20 bytes of the unit at 1560 of 5.3.3 ``timer-small``'s second
    file: its size and magic whole) was padded with zeros after the cut, so the broker's ``recoverAndRevise`` read the torn
    unit as valid (size 52, a magic ``isMagicOK`` passes) and kept it, naming offset 0: verify called it a lost
    ``timer-reference``, and ``reviseQueueOffset``, reading that unit, could not find its message and fell back to the
    timer checkpoint, past the cut units' messages. Now repair pads with zeros from the unit's start: the timer recovery
    ends at the last whole unit, whose message is the one before the cut unit's in ``rmq_sys_wheel_timer``, so the broker
    enqueues the cut units' messages again; and it clears the wheel slots whose units were all cut, where those units
    would go again, each naming itself as its previous unit."""
    from mqtool.formats import timer as tfmt
    from mqtool.store.timer import TimerStore

    root = copy_store("5.3.3", "timer-small", tmp_path)
    m = manifest("5.3.3", "timer-small")
    last = root / "timerlog" / "00000000000000008192"
    torn = 1560
    os.truncate(last, torn + 20)
    _, out, findings = verified(root, "5.3.3")
    assert first_line(out).startswith("the broker's next start refuses to start: timerlog/00000000000000008192: 1580 bytes, not 8192;")
    assert not [f for f in findings if f["kind"] == "timer-reference"]
    ahead = next(f for f in findings if f["kind"] == "timercheck-ahead")  # the log ends where its last whole unit does
    assert (ahead["found"], ahead["expected"]) == (10012, f"<= {8192 + torn}")
    planned = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    ops = [(a["op"], a["path"], a["start"], a["end"]) for a in planned["files"]["actions"]]
    assert ops[:2] == [("resize", "timerlog/00000000000000008192", 1580, 8192), ("zero-range", "timerlog/00000000000000008192", torn, 1580)]
    # the slots whose units were all cut: the broker's recover leaves them naming where its re-enqueued units go (doEnqueue's
    # prev pos = the slot's last pos = the new unit's own position, so that slot's dequeue never ends): cleared
    cut_slots = sorted(s["slot"] for s in m["timer"]["timerwheel"]["nonEmptySlots"] if s["firstPos"] >= 8192 + torn)
    assert cut_slots and sorted(i for _, path, a, b in ops[2:] for i in range(a // 32, b // 32) if path == "timerwheel") == cut_slots
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == EXIT_OK, applied.stderr  # timercheck-ahead, slots with units both sides of the cut: infos
    assert last.stat().st_size == 8192 and not any(last.read_bytes()[torn:])
    wheel = (root / "timerwheel").read_bytes()
    assert not any(any(wheel[i * 32:(i + 1) * 32]) for i in cut_slots)
    log = TimerStore.open(root).log
    walked = [u.timer_log_offset for u in log.walk()]
    assert walked[-1] == 8192 + torn - tfmt.UNIT_SIZE and (log.end.offset, log.end.reason) == (8192 + torn, "zeros")
    findings = verified(root, "5.3.3")[2]
    assert not [f for f in findings if f["kind"] in ("timer-reference", "timer-file-size", "timer-log-damaged")]
    assert not [f for f in findings if f["kind"] == "timer-wheel" and f["details"]["slot"] in cut_slots]
    assert run("restore", tmp_path / "bk", "--yes").exit_code == EXIT_OK and snapshot(root) == damaged
    queued = {u["timerLogOffset"]: msg["queueOffset"] for msg in m["messages"] if msg.get("timer") for u in msg["timer"]["timerLogUnits"]}
    assert queued[8192 + torn] == queued[walked[-1]] + 1  # in rmq_sys_wheel_timer queue 0


@pytest.mark.parametrize("last_message", ["readable", "lost"])
def test_timercheck_ahead_of_a_cut_timer_log_is_lost_only_where_the_broker_cannot_enqueue_the_cut_units_again(tmp_path, last_message):
    """The last timer log file cut at a unit: timercheck's flush position lies past the log's end. Before, verify said
    ``timercheck-ahead`` as a warning and repair counted it lost data, though ``TimerMessageStore.recover``'s
    ``reviseQueueOffset`` reads the message of the log's last unit and the enqueue resumes rmq_sys_wheel_timer right after
    it (the cut units' messages follow it there, as the broker queued them), enqueuing the cut units again. Now it is an
    info (``details.requeued``); it stays a warning where that message cannot be read (its unit names no record), where
    the broker takes timercheck's queue offset instead and skips the cut units' messages."""
    from mqtool.formats import timer as tfmt

    root = copy_store("5.3.3", "timer-small", tmp_path)
    m = manifest("5.3.3", "timer-small")
    last = root / "timerlog" / "00000000000000008192"
    cut = 1560
    os.truncate(last, cut)
    os.truncate(last, last.stat().st_size + 8192 - cut)  # padded with zeros, as repair pads a short last file
    queued = {u["timerLogOffset"]: msg["queueOffset"] for msg in m["messages"] if msg.get("timer") for u in msg["timer"]["timerLogUnits"]}
    assert queued[8192 + cut] == queued[8192 + cut - tfmt.UNIT_SIZE] + 1  # where the broker resumes: the first cut unit's message
    if last_message == "lost":
        with open(last, "r+b") as f:  # the last unit's offsetPy, past the commit log
            f.seek(cut - tfmt.UNIT_SIZE + 28)
            f.write((1 << 40).to_bytes(8, "big"))
    findings = verified(root, "5.3.3")[2]
    [ahead] = [f for f in findings if f["kind"] == "timercheck-ahead" and f["file"] == "config/timercheck" and f["found"] == 10012]
    assert ahead["expected"] == f"<= {8192 + cut}"
    assert (ahead["severity"], ahead["details"]) == (("info", {"requeued": True}) if last_message == "readable" else ("warning", {}))
    resumed = f"resumes rmq_sys_wheel_timer at {m['timer']['timercheck']['lastTimerQueueOffset']} (timercheck's lastTimerQueueOffset: "
    assert (resumed in ahead["message"]) == (last_message == "lost"), ahead["message"]  # the warning says where the broker resumes
    planned = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    lost = [e for e in planned["remaining"] if e["kind"] == "timercheck-ahead" and e["lost_data"]]
    assert len(lost) == (last_message == "lost")


def test_wheel_slots_the_broker_read_already_are_neither_lost_nor_cleared(tmp_path):
    """5.3.3 ``timer-small``'s first timer log file cut at 3500: slot 399709's units all lay in the cut tail, but its time is
    before timercheck's ``lastReadTimeMs``, where ``recover`` starts ``currReadTimeMs`` and ``dequeue`` never goes back. Before,
    verify warned its units were gone (``cut_off``, counted lost) and repair cleared it; now both take ``RecoveredWheel.reads``:
    an info (``details.read``), and the slot is left as it is; the slots still to read are cleared as before."""
    from mqtool.store.timer import TimerStore

    root = copy_store("5.3.3", "timer-small", tmp_path)
    timer = TimerStore.open(root)
    read_from = timer.check.last_read_time_ms // manifest("5.3.3", "timer-small")["storeConfig"]["timerPrecisionMs"]
    cut, size = 3500 // 52 * 52, 8192
    in_tail = {s.slot: s.time_slot < read_from for s in timer.wheel_slots() if s.is_read and cut <= s.first_pos <= s.last_pos < size}
    assert True in in_tail.values() and False in in_tail.values()
    os.truncate(root / "timerlog" / "00000000000000000000", 3500)
    findings = verified(root, "5.3.3")[2]
    done = {i for i, read in in_tail.items() if read}
    shown = [f for f in findings if f["kind"] == "timer-wheel" and f["details"]["slot"] in done]
    assert shown and {(f["severity"], f["details"].get("read"), f["details"].get("cut_off")) for f in shown} == {("info", True, None)}
    planned = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    cleared = {i for a in planned["files"]["actions"] if a["path"] == "timerwheel" and a["op"] == "zero-range"
               for i in range(a["start"] // 32, a["end"] // 32)}
    assert cleared == {i for i, read in in_tail.items() if not read}
    assert not [e for e in planned["remaining"] if e["kind"] == "timer-wheel" and any(f"slot {i} " in e["message"] for i in done)]


def test_a_damaged_timer_log_unit_is_requeued_and_the_slots_after_it_cleared(tmp_path):
    """A unit of 5.3.3 ``timer-small``'s timer log with a bad magic: ``recoverAndRevise`` truncates the log there, and
    ``reviseQueueOffset`` reads the message of the unit before it, so the enqueue resumes rmq_sys_wheel_timer right after that
    message, the damaged unit's message being the next (as the broker queued them), and enqueues it and the later ones again.
    Before, verify said ``timer-log-damaged`` as an error and repair counted it and the slots of the units after it lost;
    now it is an info (``details.requeued``, the rule of ``timercheck-ahead``), and repair clears the slots whose units all
    lie past the damage (their re-enqueued units would each name itself, as after a cut last file), so nothing is lost."""
    from mqtool.formats import timer as tfmt

    root = copy_store("5.3.3", "timer-small", tmp_path)
    m = manifest("5.3.3", "timer-small")
    at = 8192 + 1560
    with open(root / "timerlog" / "00000000000000008192", "r+b") as f:
        f.seek(at - 8192 + 12)
        f.write((0x12345).to_bytes(4, "big"))
    queued = {u["timerLogOffset"]: msg["queueOffset"] for msg in m["messages"] if msg.get("timer") for u in msg["timer"]["timerLogUnits"]}
    assert queued[at] == queued[at - tfmt.UNIT_SIZE] + 1
    findings = verified(root, "5.3.3")[2]
    [damaged] = [f for f in findings if f["kind"] == "timer-log-damaged"]
    assert (damaged["severity"], damaged["details"]) == ("info", {"timer_log_offset": at, "requeued": True})
    again = sum(msg["timer"]["delivered"] for msg in m["messages"] if msg.get("timer") and msg["timer"]["wheelQueueOffset"] > queued[at - tfmt.UNIT_SIZE])
    assert again == 1 and "again, 1 of them delivered already (their slots were read), which it delivers a second time" in damaged["message"]
    after = sorted(s["slot"] for s in m["timer"]["timerwheel"]["nonEmptySlots"] if s["firstPos"] >= at)
    planned = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    cleared = sorted(i for a in planned["files"]["actions"] if a["path"] == "timerwheel" and a["op"] == "zero-range"
                     for i in range(a["start"] // 32, a["end"] // 32))
    assert after and cleared == after and not [e for e in planned["remaining"] if e["lost_data"]]
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "bk")
    assert applied.exit_code == EXIT_OK, applied.stderr


@pytest.mark.parametrize("version, severity, master", [("5.3.3", "info", True), ("5.3.1", "warning", True), (None, "warning", True),
                                                      ("5.3.1", "info", False)])
def test_timercheck_queue_offset_past_the_timer_queue_is_clamped_from_5_3_2(tmp_path, version, severity, master):
    """timercheck's lastTimerQueueOffset and masterTimerQueueOffset past rmq_sys_wheel_timer queue 0's end, and the log's last
    unit naming no message (``reviseQueueOffset`` fails): ``TimerMessageStore.recover`` resumes the enqueue there in
    5.0.0-5.3.1, never enqueuing the timer messages the queue gets before it reaches it, and clamps it to the queue's end from
    5.3.2 (rules §8.1). Before, verify warned in every release; now 5.3.2+ is an info (``details.clamped``), and a store
    that could be either says which releases clamp. Every release resumes at the lesser of the two offsets: with
    masterTimerQueueOffset left within the queue, nothing is skipped either (an info, where it warned)."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    ends = {q["topic"]: q["maxOffset"] for q in manifest("5.3.3", "timer-small")["queues"] if q["queueId"] == 0}
    ahead = ends["rmq_sys_wheel_timer"] + 8
    with open(root / "config" / "timercheck", "r+b") as f:  # lastTimerQueueOffset at 16, masterTimerQueueOffset at 24
        f.seek(16)
        f.write(ahead.to_bytes(8, "big") * (2 if master else 1))
    last = root / "timerlog" / "00000000000000008192"
    end = manifest("5.3.3", "timer-small")["timerRuntimeBeforeShutdown"]["timerLogMaxOffset"]
    with open(last, "r+b") as f:  # the last unit's offsetPy, past the commit log
        f.seek(end - 8192 - 52 + 28)
        f.write((1 << 40).to_bytes(8, "big"))
    args = ("verify", root, "--format", "json") + (("--broker-version", version) if version else ())
    findings = json.loads(run(*args).stdout)["findings"]
    [f] = [f for f in findings if f["kind"] == "timercheck-ahead"]
    assert (f["severity"], f["found"], f["expected"]) == (severity, ahead, f"<= {ends['rmq_sys_wheel_timer']}")
    assert f["details"] == ({"clamped": True} if severity == "info" and master else {})
    assert ("masterTimerQueueOffset" in f["message"]) == (not master)
    assert ("5.3.2+ clamp it" in f["message"]) == (version is None)


def test_a_requeued_info_resumes_at_timerchecks_master_queue_offset_where_it_is_lower(tmp_path):
    """5.3.3 ``timer-crashed``'s timer log holds units for rmq_sys_wheel_timer messages past timercheck's masterTimerQueueOffset,
    which ``TimerMessageStore.recover`` takes over the offset right after the message of the log's last unit (``currQueueOffset =
    min(...)``, 5.0.0-5.3.3): the real broker's start on it resumed there (``timerAfterLoad``). With the unit at 6760 damaged,
    verify said the enqueue resumes after the message of the unit before it; it resumes at the master offset, further back, and
    the messages from there whose units stay in the log, or which were delivered, are each delivered a second time."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    timers = [msg["timer"] for msg in manifest("5.3.3", "timer-crashed")["messages"] if msg.get("timer")]
    resumed = recovered("5.3.3", "timer-crashed")["timerAfterLoad"]["currQueueOffset"]
    at = 6760
    with open(root / "timerlog" / "00000000000000000000", "r+b") as f:
        f.seek(at + 12)
        f.write((0x100).to_bytes(4, "big"))
    queued = {u["timerLogOffset"]: t["wheelQueueOffset"] for t in timers for u in t["timerLogUnits"]}
    assert resumed < queued[at - 52] + 1
    in_log = {t["wheelQueueOffset"] for t in timers if any(u["timerLogOffset"] < at for u in t["timerLogUnits"])}
    again = sum(t["delivered"] or t["wheelQueueOffset"] in in_log for t in timers if t["wheelQueueOffset"] >= resumed)
    [damaged] = [f for f in verified(root, "5.3.3")[2] if f["kind"] == "timer-log-damaged"]
    assert (damaged["severity"], damaged["details"]) == ("info", {"timer_log_offset": at, "requeued": True})
    assert again and (f"resumes rmq_sys_wheel_timer at timercheck's masterTimerQueueOffset {resumed}, before the message of the log's "
                      f"last unit (TimerMessageStore.recover takes the lesser of the two) and enqueues the later messages again, {again} "
                      "of them delivered already or still in the timer log, which it delivers a second time") in damaged["message"]


@pytest.mark.parametrize("version, severity", [("5.3.1", "warning"), (None, "warning"), ("5.3.3", "info")])
def test_a_timer_queue_that_lost_its_tail_is_resumed_past_its_end_before_5_3_2(tmp_path, version, severity):
    """5.3.3 ``timer-small``'s rmq_sys_wheel_timer queue 0 cut to 180 entries: ``reviseQueueOffset`` reads the message of the timer
    log's last unit, searches the queue back for it in vain and keeps the queue offset stored in it (191), so ``recover``
    resumes at 192, past the queue's end: 5.0.0-5.3.1 wait there and never enqueue the timer messages the queue gets before it
    reaches it, 5.3.2+ clamp it to the queue's end (rules §8.1). Before, verify said the enqueue resumes after that message,
    nothing skipped, in every release."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    queue = root / "consumequeue" / "rmq_sys_wheel_timer" / "0" / "00000000000000000000"
    data = bytearray(queue.read_bytes())
    data[180 * 20:] = bytes(len(data) - 180 * 20)
    queue.write_bytes(bytes(data))
    args = ("verify", root, "--format", "json") + (("--broker-version", version) if version else ())
    [f] = [f for f in json.loads(run(*args).stdout)["findings"] if f["kind"] == "timercheck-ahead"]
    assert (f["severity"], f["expected"], f["details"]) == (severity, "<= 180", {"clamped": True} if severity == "info" else {})
    assert ("5.0.0-5.3.1 resume the enqueue there" in f["message"]) == (severity == "warning")
    assert ("5.3.2+ clamp it" in f["message"]) == (version is None)


@pytest.mark.parametrize("version, fixture, folder, entry, after", [
    ("5.1.0", ("5.1.4", "crashed-small"), "index", "99999999999999999", "DefaultMessageStore.load fails on index/ only after it"),
    ("5.3.3", ("5.3.3", "crashed-small"), "index", "99999999999999999", "DefaultMessageStore.load fails on index/ only after it"),
    ("5.0.0", ("5.0.0", "crashed-small"), "index", "99999999999999999", None),  # up to 5.0.0 DefaultMessageStore.load ignores it
    ("5.3.3", ("5.3.3", "timer-crashed"), "timerlog", "99999999999999999999", "it loads timerlog/ after it"),
])
def test_recover_before_an_index_or_timer_refusal_after_the_recovery(tmp_path, version, fixture, folder, entry, after):
    """5.1.0+ ``DefaultMessageStore.load`` calls ``recover`` even when ``IndexService.load`` returned false (@5.1.0, 5.3.3; up
    to 5.0.0 its false is ignored), and 5.x ``TimerMessageStore.load`` runs after ``messageStore.load``: a start refused on
    index/ or timerlog/ runs the recovery first. ``recover``'s plan says so, as for 4.9.2+'s delayOffset.json (before: no
    note); its writes stand, and verify's line after them is the plan's."""
    root = copy_store(*fixture, tmp_path)
    if folder == "index":
        (root / "index" / entry).mkdir()
    else:
        (root / "timerlog" / entry).write_bytes(bytes(100))
    plan = json.loads(run("recover", root, "--broker-version", version, "--format", "json").stdout)
    line, fixed = plan["next_start"]["line"], "; with that file fixed, it "
    assert line.startswith(f"the broker's next start refuses to start: {folder}/{entry}: ") is (after is not None), line
    assert plan["notes"] == ([] if after is None else [
        f"the broker's own next start runs this recovery too, then refuses ({after}): these writes stand either way, and the refusal "
        f"stays until that entry of {folder}/ is fixed"])
    assert plan["actions"]
    assert run("recover", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "b1").exit_code == EXIT_OK
    _, out, _ = verified(root, version)
    keeps = line.split(" keeps ", 1)[1].split(" and ")[0]
    said = line.split(fixed)[0] + fixed if after else "the broker's next start "
    assert first_line(out).startswith(f"{said}keeps {keeps}")


@pytest.mark.parametrize("cut", [52, 1560, None])
def test_a_requeued_info_says_the_timer_messages_delivered_already_are_delivered_again(tmp_path, cut):
    """5.3.3 ``timer-small``'s last timer log file cut at ``cut`` (None: whole, timercheck's lastTimerQueueOffset past its
    queue). ``reviseQueueOffset`` resumes rmq_sys_wheel_timer after the message of the log's last unit and the broker enqueues
    every later one again, those whose slots were read and which were delivered too: each is delivered a second time (due,
    straight to ``dequeuePutQueue``). Before, the ``requeued`` infos said only "enqueues the later messages again: nothing
    lost"; now they say how many of them were delivered already (the manifest's ``delivered`` past that queue offset)."""
    root = copy_store("5.3.3", "timer-small", tmp_path)
    m = manifest("5.3.3", "timer-small")
    timers = [msg["timer"] for msg in m["messages"] if msg.get("timer")]
    queued = {u["timerLogOffset"]: t["wheelQueueOffset"] for t in timers for u in t["timerLogUnits"]}
    end = 8192 + cut if cut is not None else m["timerRuntimeBeforeShutdown"]["timerLogMaxOffset"]
    delivered = sum(t["delivered"] for t in timers if t["wheelQueueOffset"] > queued[end - 52])
    last = root / "timerlog" / "00000000000000008192"
    if cut is not None:
        os.truncate(last, cut)
        os.truncate(last, 8192)
    else:
        with open(root / "config" / "timercheck", "r+b") as f:  # lastTimerQueueOffset at 16
            f.seek(16)
            f.write((1 << 20).to_bytes(8, "big"))
    [ahead] = [f for f in verified(root, "5.3.3")[2] if f["kind"] == "timercheck-ahead" and f["details"] == {"requeued": True}]
    said = f"{delivered} of them delivered already (their slots were read), which it delivers a second time"
    assert (delivered, said in ahead["message"]) == ((4, True) if cut == 52 else (1, True) if cut == 1560 else (0, False)), ahead["message"]


@pytest.mark.parametrize("version", ["5.1.4", "5.3.3"])
def test_a_dangling_symlinked_last_segment_next_start_says_it_is_deleted(tmp_path, version):
    """Before: with the last commit log segment of ``clean-small`` a dangling symlink, which 5.1.3+ ``doLoad`` deletes as a
    zero-length last entry (``file.delete()`` removes the link) before it starts, the next start's line (verify's, info's,
    salvage's) said only that the start keeps the log, while verify's error and recover's refusal said its data may be on a
    disk not mounted. The line says in one clause that the start deletes the link and its data is then lost to it, the same
    in every command."""
    root = copy_store(version, "clean-small", tmp_path)
    last = sorted((root / "commitlog").iterdir())[-1]
    last.unlink()
    intact = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    target = tmp_path / "unmounted" / last.name
    os.symlink(target, last)
    line = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert line == f"{intact}; its load deletes commitlog/{last.name}, a dangling symlink to {target}, whose data is then lost to it"
    assert json.loads(run("info", root, "--broker-version", version, "--format", "json").stdout)["next_start"]["line"] == line
    assert first_line(run("verify", root, "--broker-version", version).stdout).startswith(" ".join(line.split()[:8]))
    salvaged = run("salvage", root, "--broker-version", version, "-f", "jsonl", "--out", tmp_path / "out.jsonl")
    assert f"mqtool: {line}\n" in salvaged.stderr
    assert run("recover", root, "--broker-version", version).exit_code == EXIT_REFUSED


@pytest.mark.parametrize("version, fixture, folder", [
    ("5.1.4", "clean-small", "consumequeue/TopicTest/0"), ("5.3.3", "clean-small", "consumequeue/TopicTest/0"),
    ("5.3.3", "timer-small", "timerlog"),
])
def test_a_dangling_symlinked_last_queue_or_timer_log_file_next_start_says_it_is_deleted(tmp_path, version, fixture, folder):
    """Before: a dangling symlink as the last file of a consume queue's folder or of ``timerlog/``, which 5.1.3+ ``doLoad``
    deletes as a zero-length last entry (``ConsumeQueue.load`` and ``TimerLog.load`` are ``MappedFileQueue.load``), had the
    next start's line say only that the start keeps the log (its clause was the commit log's only), while verify's error and
    recover's refusal said its data may be on a disk not mounted. The line now says the start deletes it, in every command
    (the first such link in load order, then how many more)."""
    root = copy_store(version, fixture, tmp_path)
    intact = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    files = sorted((root / folder).iterdir())
    name = f"{int(files[-1].name) + files[-1].stat().st_size:020d}"
    target = tmp_path / "unmounted" / name
    os.symlink(target, root / folder / name)
    line = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert line == f"{intact}; its load deletes {folder}/{name}, a dangling symlink to {target}, whose data is then lost to it"
    assert json.loads(run("info", root, "--broker-version", version, "--format", "json").stdout)["next_start"]["line"] == line
    salvaged = run("salvage", root, "--broker-version", version, "-f", "jsonl", "--out", tmp_path / "out.jsonl")
    assert f"mqtool: {line}\n" in salvaged.stderr
    for command in ("recover", "repair"):
        assert run(command, root, "--broker-version", version).exit_code == EXIT_REFUSED
    assert "its load deletes" not in json.loads(run("verify", root, "--broker-version", "5.0.0", "--format", "json").stdout)[
        "summary"]["next_start"]["line"]  # 5.0.0 refuses such a file (File.length() 0 is not the file size)
    other = root / folder / f"{int(name) + files[-1].stat().st_size:020d}"  # no longer the last: refused, the first line says so
    os.symlink(tmp_path / "unmounted" / other.name, other)
    line = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert line.startswith(f"the broker's next start refuses to start: {folder}/{name}: a dangling symlink to {target}, which ")
    moved = other.rename(root / "consumequeue" / "TopicTest" / "1" / other.name)  # another queue's last: two links deleted
    first = f"{folder}/{name}, a dangling symlink to {target}" if folder.startswith("consumequeue") else \
        f"consumequeue/TopicTest/1/{moved.name}, a dangling symlink to {tmp_path / 'unmounted' / moved.name}"  # the queues load first
    line = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert line == f"{intact}; its load deletes {first}, whose data is then lost to it, and 1 more such link"


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_a_dangling_index_symlink_whose_target_the_broker_creates(tmp_path, version):
    """``IndexService.load`` (4.9.7, 5.3.3) maps every numbered entry of ``index/`` through ``MappedFile.init``, whose
    ``new RandomAccessFile(file, "rw")`` follows a dangling symlink and creates its target where that directory is there (a
    mount point whose disk is not mounted), then loads it as an empty index file and the files after it. Before: mqtool took
    every dangling link for an open that throws, so 5.3.3's next start "refused to start" and 4.9.7's left the later index
    files out (mqtool read none of them); now the line says the start creates the target, the same in verify, info and
    salvage, the index files after it are read, ``recover`` refuses (exit 3: its index entries would go there), and ``repair``
    moves the link out (its plan names the target), undone by ``restore``. A link into a missing directory stays refused."""
    root = copy_store(version, "clean-small", tmp_path)
    intact = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)
    (tmp_path / "mnt").mkdir()
    link, target = root / "index" / "1", tmp_path / "mnt" / "1"  # "1" sorts before every index file
    os.symlink(target, link)
    doc = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)
    line = doc["summary"]["next_start"]["line"]
    assert line == f"{intact['summary']['next_start']['line']}; its load creates the target of index/1, a dangling symlink to {target}, " \
                   "as an empty index file"
    assert doc["summary"]["index"] == intact["summary"]["index"]  # the index files after it read, as the broker loads them
    [found] = [f for f in doc["findings"] if f["kind"] == "index-stray-entry"]
    assert found["severity"] == "error" and "creates the file it points to" in found["message"]
    assert json.loads(run("info", root, "--broker-version", version, "--format", "json").stdout)["next_start"]["line"] == line
    assert f"mqtool: {line}\n" in run("salvage", root, "--broker-version", version, "-f", "jsonl", "--out", tmp_path / "o.jsonl").stderr
    refused = run("recover", root, "--broker-version", version)
    assert refused.exit_code == EXIT_BAD_INPUT and refused.stderr.count("\n") == 1
    assert "`mqtool repair` moves the link out" in refused.stderr
    plan = json.loads(run("repair", root, "--broker-version", version, "--format", "json").stdout)
    [step] = [s for s in plan["steps"] if s["step"] == "quarantine"]
    assert step["paths"] == ["index/1"] and str(target) in step["why"] and "creates the file it points to" in step["why"]
    repaired_and_restored(root, version, tmp_path / "bk", [link])
    assert not os.path.lexists(target)  # mqtool never creates it
    os.rmdir(tmp_path / "mnt")  # the directory gone: the open throws, as before
    line = json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert ("refuses to start: index/1: a dangling symlink" in line) == (version == "5.3.3") and "creates" not in line


def test_whether_the_start_creates_a_dangling_index_links_target_is_judged_for_the_stores_owner(tmp_path):
    """mqtool runs as root, the broker as the store's owner: whether 5.3.3's ``IndexService.load`` (``RandomAccessFile(file,
    "rw")``) creates the target of a dangling ``index/`` link is judged for the owner of the store directory (its uid and
    groups against the target folder's mode bits), and the plans say which user was assumed. Before: for mqtool's own user,
    so a folder root may write in and the owner may not was taken as created: ``recover`` refused with "creates" and
    ``repair``'s step said so, where the broker's open throws and 5.3.3 refuses to start on it. (A tmp_path is named after the test,
    so "load creates" is looked for.)"""
    assert os.geteuid() == 0, "chown to another uid needs root"
    owner = 54321  # no user of this machine: its group alone is taken
    root = copy_store("5.3.3", "clean-small", tmp_path)
    mount = tmp_path / "mnt"
    mount.mkdir(mode=0o755)  # root's: the owner may search it, not write in it
    os.symlink(mount / "1", root / "index" / "1")
    os.chown(root, owner, owner)
    who = f"the broker, taken to run as the store's owner (uid {owner}, gid {owner})"
    line = json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert line.startswith(f"the broker's next start refuses to start: index/1: a dangling symlink to {mount / '1'}") and "load creates" not in line
    assert run("recover", root, "--broker-version", "5.3.3").exit_code == EXIT_REFUSED
    plan = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    [step] = [s for s in plan["steps"] if s["step"] == "quarantine"]
    assert step["paths"] == ["index/1"] and f"cannot map it ({who}, cannot write in {mount})" in step["why"]
    os.chown(mount, owner, owner)  # now the owner's: its start creates the target
    refused = run("recover", root, "--broker-version", "5.3.3")
    assert refused.exit_code == EXIT_BAD_INPUT and f"creates as an empty index file ({who}, can write in {mount})" in refused.stderr
    plan = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    [step] = [s for s in plan["steps"] if s["step"] == "quarantine"]
    assert f"creates the file it points to ({who}, can write in {mount})" in step["why"]
    mount.chmod(0o555)  # the owner's, not writable by it (root still may)
    assert "load creates" not in json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)["summary"]["next_start"]["line"]


@pytest.mark.parametrize("version, refuses", [("5.3.3", True), ("4.9.7", False)])
def test_rebuild_index_says_what_the_start_does_with_an_index_entry_it_leaves(version, refuses, tmp_path):
    """A dangling ``index/`` link into a folder that is not there: ``IndexService.load``'s ``IOException`` ends the load
    (unchanged 3.2.6-5.3.3); 5.1.0+ ``DefaultMessageStore.load`` refuses to start on its false, earlier releases ignore it
    and start without the index files after it. Named as a file of its folder (20 digits: its bytes may be on a disk not
    mounted, ``StrayEntry.unmounted``), ``rebuild-index`` leaves it, so the start still refuses after it, or does not load
    the rebuilt file sorting after it: the plan says which, as verify does (4.9.7's said nothing). Named by an index file's
    17 digits, the rebuild moves it into the backup (``test_rebuild_index_leaves_index_as_the_broker_loads_it``): no note."""
    root = copy_store(version, "crashed-small", tmp_path)
    link = root / "index" / "00000000000000000000"
    os.symlink("/nonexistent/dir/00000000000000000000", link)
    plan = json.loads(run("rebuild-index", root, "--broker-version", version, "--format", "json").stdout)
    [created] = [f["name"] for f in plan["index"]["files"] if f["action"] == "create"]
    assert created > "00000000000000000000" and "index/00000000000000000000" not in [a["path"] for a in plan["actions"]]
    refused = [n for n in plan["notes"] if n.startswith("the broker's next start still refuses after this rebuild")]
    left_out = [n for n in plan["notes"] if "starts without the 1 index file after it: its queries by key do not find their keys" in n]
    assert len(refused) == refuses and len(left_out) == (not refuses), plan["notes"]
    assert all("index/00000000000000000000: a dangling symlink" in n for n in refused + left_out)
    [found] = [f for f in json.loads(run("verify", root, "--broker-version", version, "--format", "json").stdout)["findings"]
               if f["kind"] == "index-stray-entry"]
    assert ("refuses to start" in found["message"]) == refuses and ("starts without the 1 index file after it" in found["message"]) == (not refuses)
    # index files are named by time: a start without the link's writes none at "its offset" (before: the commit log's words)
    assert "a disk that is not mounted: mount the disk" in found["message"] and "its offset" not in found["message"]
    assert all("its offset" not in n for n in refused + left_out)
    link.rename(root / "index" / "99999999999999999")
    plan = json.loads(run("rebuild-index", root, "--broker-version", version, "--format", "json").stdout)
    assert not [n for n in plan["notes"] if "index/99999999999999999" in n], plan["notes"]
    assert [a["op"] for a in plan["actions"] if a["path"] == "index/99999999999999999"] == ["quarantine"]


def _entries(folder) -> dict[str, tuple]:
    """Every entry below ``folder``: a directory, a symlink's target, a file's bytes."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, folder)
            found[rel] = (("link", os.readlink(path)) if os.path.islink(path) else ("dir",) if os.path.isdir(path)
                          else ("file", open(path, "rb").read()))
    return found


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_rebuild_index_leaves_index_as_the_broker_loads_it(version, tmp_path):
    """Before: ``rebuild-index --yes`` deleted the index files mqtool reads and wrote its own, but left every other entry of
    ``index/``: a half-written temporary file, a folder named by a number (``IndexService.load`` opens each name
    ``Long.parseLong`` reads as an index file: it stops there, 5.1.0+ refuse to start) and an old index file after it (mqtool,
    as the load, reads none past that folder: once the folder is gone the broker would load it beside the rebuilt files).
    Now the rebuild moves each into the backup, and ``index/`` holds what the broker loads (``list_index_files``), the rebuilt
    files alone, but for a folder the load skips (a mount's lost+found: left); ``restore`` brings back the old ``index/``
    exactly."""
    from mqtool.store.index import list_index_files

    root = copy_store(version, "clean-small", tmp_path)
    index = root / "index"
    files = sorted(os.listdir(index))
    first = files[0]
    (index / f"{first}.tmp").write_bytes(b"half-written")
    (index / "99999999999999998").mkdir()
    (index / "99999999999999998" / "inside").write_bytes(b"x")
    (index / "99999999999999999").write_bytes((index / first).read_bytes())
    (index / "lost+found").mkdir()
    before = _entries(index)
    plan = json.loads(run("rebuild-index", root, "--broker-version", version, "--format", "json").stdout)
    rebuilt = sorted(f["name"] for f in plan["index"]["files"] if f["action"] != "delete")  # left alone: they hold its bytes
    assert rebuilt == files and {f["action"] for f in plan["index"]["files"]} == {"unchanged"}
    assert run("rebuild-index", root, "--broker-version", version, "--yes", "--backup-dir", tmp_path / "b").exit_code == EXIT_OK
    assert sorted(os.listdir(index)) == sorted(rebuilt + ["lost+found"])
    assert [p.name for p in list_index_files(index)] == rebuilt
    _, out, findings = verified(root, version)
    assert "refuses" not in first_line(out)
    assert [(f["file"], f["severity"]) for f in findings if f["kind"].startswith("index-")] == [("index/lost+found", "info")]
    assert run("restore", tmp_path / "b", "--yes").exit_code == EXIT_OK
    assert _entries(index) == before
