"""Single files the broker opens by name, found as directories: the ``checkpoint`` (``StoreCheckpoint``'s
``new RandomAccessFile(file, "rw")`` throws and ``DefaultMessageStore.load`` fails, 3.2.6-5.3.3): the next start's
refusal, ``verify``'s ``not-a-file``, ``info``, ``recover``'s refusal and ``repair``'s quarantine, undone
exactly by ``restore``."""

from __future__ import annotations

import json
import os
import stat

import pytest
from conftest import copy_store
from test_load_strays import run, snapshot, verified

from mqtool.errors import EXIT_BAD_INPUT, EXIT_FINDINGS, EXIT_OK


def checkpoint_directory(root):
    """``root``'s checkpoint replaced by a directory holding it (an operator's copy gone wrong)."""
    (root / "checkpoint").rename(root / "checkpoint.orig")
    (root / "checkpoint").mkdir()
    (root / "checkpoint.orig").rename(root / "checkpoint" / "checkpoint")


@pytest.mark.parametrize("version", ["3.2.6", "4.9.7", "5.3.3"])
def test_checkpoint_directory_refused_then_repaired(tmp_path, version):
    root = copy_store(version, "crashed-small", tmp_path)
    checkpoint_directory(root)
    code, out, findings = verified(root, version)
    first = " ".join(out.split("\n")[:6])
    assert code == EXIT_FINDINGS and first.startswith("the broker's next start refuses to start: checkpoint: a directory, which StoreCheckpoint")
    found = {f["kind"]: f for f in findings}["not-a-file"]
    assert (found["severity"], found["file"]) == ("error", "checkpoint") and "checkpoint-missing" not in {f["kind"] for f in findings}
    shown = " ".join(run("info", root, "--broker-version", version).stdout.split())
    assert "Checkpoint file a directory, which StoreCheckpoint cannot open" in shown
    dumped = run("dump", "checkpoint", root)
    assert dumped.exit_code == EXIT_BAD_INPUT and dumped.stderr.endswith("checkpoint: a directory, not a checkpoint file\n")

    refused = run("recover", root, "--broker-version", version)
    assert refused.exit_code == EXIT_BAD_INPUT and "Traceback" not in refused.output
    assert refused.stderr.count("\n") == 1 and "`mqtool repair` moves it out first" in refused.stderr

    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup")
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert (root / "checkpoint").is_file() and not (root / "checkpoint" / "checkpoint").exists()
    code, out, _ = verified(root, version)
    assert code == EXIT_OK and "refuses" not in out.split("\n")[0] and " normal recovery" in " ".join(out.split("\n")[:3])  # recovered
    restored = run("restore", tmp_path / "backup", "--yes")
    assert restored.exit_code == EXIT_OK, restored.stderr
    assert snapshot(root) == damaged


def test_info_says_checkpoint_missing(tmp_path):
    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "checkpoint").unlink()
    shown = " ".join(run("info", root, "--broker-version", "4.9.7").stdout.split())
    assert "Checkpoint file missing: the broker creates it and reads every timestamp as 0" in shown


def into_directory(root, name: str) -> None:
    """``root``'s file ``name`` (or none) replaced by a directory holding it."""
    path = root / name
    path.parent.mkdir(exist_ok=True)
    if path.exists():
        path.rename(root / "moved")
        path.mkdir()
        (root / "moved").rename(path / path.name)
    else:
        path.mkdir()


@pytest.mark.parametrize("version, store, name, opener", [
    ("4.9.7", "clean-small", "lock", "DefaultMessageStore's constructor"),  # 4.2.0+ (rules 6.4)
    ("5.3.3", "timer-small", "config/timercheck", "TimerCheckpoint"),  # 5.0.0+ (rules 8.1)
    ("5.3.3", "timer-small", "timerwheel", "TimerWheel"),
])
def test_file_opened_first_as_directory_refused_then_repaired(tmp_path, version, store, name, opener):
    """``BrokerController.initialize`` fails before the store loads: no figures, verify's ``not-a-file``,
    ``recover`` refused naming ``repair``, whose quarantine ``restore`` undoes."""
    root = copy_store(version, store, tmp_path)
    into_directory(root, name)
    code, out, findings = verified(root, version)
    assert code == EXIT_FINDINGS
    first = " ".join(out.split("\n")[:3])
    assert first.startswith(f"the broker's next start refuses to start: {name}: a directory, which {opener} cannot open")
    assert "keeps [" not in " ".join(out.split("\n")[:4])
    assert {(f["kind"], f["severity"]) for f in findings if f["file"] == name} >= {("not-a-file", "error")}
    refused = run("recover", root, "--broker-version", version)
    assert refused.exit_code == EXIT_BAD_INPUT and refused.stderr.count("\n") == 1 and "`mqtool repair`" in refused.stderr
    if name == "lock":
        assert "lock file a directory (see verify)" in " ".join(run("info", root, "--broker-version", version).stdout.split())
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup")
    assert applied.exit_code in (EXIT_OK, EXIT_FINDINGS), applied.stderr  # a wheel moved out is lost (timer-wheel)
    assert not (root / name).is_dir() and "refuses" not in run("verify", root, "--broker-version", version).stdout.split("\n")[0]
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged


def test_lock_fifo_is_not_said_absent(tmp_path):
    """Before: a FIFO as the store's lock (4.9.7 ``clean-small``) made info's lock file row say 'absent', as if nothing
    were there; it says what is there (JSON ``lock_special``), never opening it."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "lock").unlink()
    os.mkfifo(root / "lock")
    shown = run("info", root, "--broker-version", "4.9.7")
    assert shown.exit_code == EXIT_OK and "lock file a FIFO, socket or device node" in " ".join(shown.stdout.split())
    doc = json.loads(run("info", root, "--broker-version", "4.9.7", "--format", "json").stdout)
    assert (doc["lock_file"], doc["lock_directory"], doc["lock_special"], doc["lock_holder"]) == (False, False, True, None)


@pytest.mark.parametrize("version", ["3.2.6", "4.0.0"])
def test_lock_directory_ignored_before_4_2_0(tmp_path, version):
    """3.2.6-4.1.0 open no lock file (rules 6.4): a directory there changes nothing, nor is it a 4.2.0+ broker's lock
    file to the version detection."""
    root = copy_store(version, "clean-small", tmp_path)
    before = run("verify", root, "--broker-version", version).stdout.split("\n")[0]
    detected = json.loads(run("info", root, "--format", "json").stdout)["version"]
    into_directory(root, "lock")
    assert json.loads(run("info", root, "--format", "json").stdout)["version"] == detected
    shown = run("verify", root, "--broker-version", version)
    assert shown.stdout.split("\n")[0] == before and "not-a-file" not in shown.stdout


def test_config_directory_read_as_the_broker_does(tmp_path):
    """``ConfigManager.load``: ``file2String``'s ``FileInputStream`` throws on a directory, caught: the ``.bak`` is
    loaded; a ``.bak`` that is a directory too makes ``loadBak`` return false, and the broker refuses to start."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    into_directory(root, "config/consumerOffset.json")
    _, _, findings = verified(root, "4.9.7")
    found = [f for f in findings if f["kind"] == "config-unreadable"]
    assert [(f["severity"], f["message"]) for f in found] == [("warning", "config/consumerOffset.json: a directory, which FileInputStream "
                                                               "cannot read; the broker loads consumerOffset.json.bak instead")]
    assert "a directory, which FileInputStream cannot read: read config/consumerOffset.json.bak instead" in run("offsets", root).stderr
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert not (root / "config/consumerOffset.json").exists() and (root / "config/consumerOffset.json.bak").is_file()
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged
    into_directory(root, "config/consumerOffset.json.bak")
    _, _, findings = verified(root, "4.9.7")
    found = [f for f in findings if f["kind"] == "config-unreadable"]
    assert len(found) == 1 and found[0]["severity"] == "error" and found[0]["message"].endswith("the broker refuses to start")
    assert "not-a-file" not in {f["kind"] for f in findings}
    first = " ".join(run("verify", root, "--broker-version", "4.9.7").stdout.split("\n")[:4])
    assert first.startswith("the broker's next start refuses to start: config/consumerOffset.json.bak: a directory, which FileInputStream")
    assert run("recover", root, "--broker-version", "4.9.7").exit_code == EXIT_BAD_INPUT


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
@pytest.mark.parametrize("name", ["topics.json", "consumerOffset.json.bak"])
def test_a_config_fifo_hangs_the_start_and_is_moved_out(tmp_path, version, name):
    """``MixAll.file2String``'s ``new FileInputStream`` on a FIFO waits in the open for a writer, so ``ConfigManager.load``
    (or ``loadBak``, where the file itself is gone) never returns and ``BrokerController.initialize`` hangs. It was once taken
    for a missing file: the ``.bak`` loaded, the store sound, and ``repair`` left it. Now the next start is said to hang,
    verify fails, repair moves the FIFO out (never opening it) and ``restore`` puts it back."""
    root = copy_store(version, "config-real", tmp_path)
    if name.endswith(".bak"):
        (root / "config" / name.removesuffix(".bak")).unlink()
    (root / "config" / name).unlink()
    os.mkfifo(root / "config" / name)
    code, out, findings = verified(root, version)
    first = " ".join(" ".join(out.split("\n")[:4]).split())
    assert first.startswith(f"the broker's next start refuses to start: config/{name}: a FIFO, whose open by FileInputStream waits"), first
    found = [(f["kind"], f["severity"]) for f in findings if f["file"] == f"config/{name}"]
    assert code == EXIT_FINDINGS and found == [("config-unreadable", "error")]  # once: it was a not-a-file too
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup")
    assert applied.exit_code in (EXIT_OK, EXIT_FINDINGS), applied.stderr
    assert not (root / "config" / name).exists()
    assert "config-unreadable" not in {f["kind"] for f in verified(root, version)[2]}
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged and stat.S_ISFIFO(os.lstat(root / "config" / name).st_mode)


def test_a_config_bak_fifo_beside_a_malformed_file_is_moved_out_once(tmp_path):
    """A FIFO ``.bak`` beside a malformed ``delayOffset.json``: repair planned two quarantine steps for the same ``.bak``
    (the FIFO's, and the undecodable-``.bak`` one, which took ``store.A_FIFO`` for a reason to move it again) and
    ``--yes`` printed the move twice. One step now."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    (root / "config" / "delayOffset.json").write_text("{not json")
    (root / "config" / "delayOffset.json.bak").unlink(missing_ok=True)
    os.mkfifo(root / "config" / "delayOffset.json.bak")
    plan = json.loads(run("repair", root, "--broker-version", "4.9.7", "--format", "json").stdout)
    moved = [s["paths"] for s in plan["steps"] if "config/delayOffset.json.bak" in s["paths"]]
    assert moved == [["config/delayOffset.json.bak"]], plan["steps"]


@pytest.mark.parametrize("version, loaded", [("4.0.0", False), ("4.5.1", True)])
def test_a_consumer_filter_fifo_hangs_only_the_releases_that_load_it(tmp_path, version, loaded):
    """``consumerFilter.json`` is loaded from 4.1.0 (``ConsumerFilterManager``): a FIFO there hangs a 4.5.1 start, not a
    4.0.0 one. Before, the next-start line said the hang whatever the release, while verify (the loading releases alone)
    said nothing on 4.0.0: two answers."""
    root = copy_store(version, "clean-small", tmp_path)
    (root / "config").mkdir(exist_ok=True)
    (root / "config" / "consumerFilter.json").unlink(missing_ok=True)
    os.mkfifo(root / "config" / "consumerFilter.json")
    code, out, findings = verified(root, version)
    first = " ".join(" ".join(out.split("\n")[:4]).split())
    hangs = first.startswith("the broker's next start refuses to start: config/consumerFilter.json: a FIFO")
    found = [f["file"] for f in findings if f["kind"] == "config-unreadable"]
    assert (hangs, found) == ((True, ["config/consumerFilter.json"]) if loaded else (False, [])), (first, found)


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
@pytest.mark.parametrize("what, then", [
    ("a directory", "cannot write the PID into it and exit"),
    ("a FIFO", "opens it to read before writing the PID, which on a FIFO waits for a writer"),
    ("a socket", "cannot open it to read before writing the PID (a socket's open throws ENXIO) and exit"),
])
def test_abort_directory_is_an_abnormal_start(tmp_path, version, what, then):
    """``isTempFileExist`` is ``File.exists()``: a directory or a FIFO named ``abort`` makes the start abnormal in every
    release, and 5.0.0+ exit after that recovery (``createTempFile``'s ``MixAll.string2File`` throws on a directory; on a
    FIFO its read first waits for a writer). ``repair`` moves it out and carries out the same abnormal recovery as with an
    abort file: both repaired stores hold the same bytes. A FIFO was once taken for no abort file: a normal start. The
    quarantine says what each does (a socket's open throws, ENXIO; before, it was said to wait for a writer as a FIFO's)."""
    as_file = copy_store(version, "crashed-small", tmp_path / "file")
    root = copy_store(version, "crashed-small", tmp_path)
    if what == "a directory":
        into_directory(root, "abort")
    else:
        (root / "abort").unlink()
        os.mkfifo(root / "abort") if what == "a FIFO" else a_socket(root / "abort")
    shown = "a directory" if what == "a directory" else "a FIFO, socket or device node"
    steps = json.loads(run("repair", root, "--broker-version", version, "--format", "json").stdout)["steps"]
    assert steps[0]["why"] == (f"{what}, not the abort file: File.exists() finds it, so the broker's recovery is abnormal; 5.0.0+ then "
                               f"{then}; moved into the backup as it is")
    code, out, findings = verified(root, version)
    first = " ".join(out.split("\n")[:6])
    kinds = {(f["kind"], f["severity"]) for f in findings if f["file"] == "abort"}
    if version == "5.3.3":
        assert first.startswith(f"the broker's next start refuses to start: abort: {shown}, ")
        assert "abnormal recovery scanning from" in first and kinds == {("not-a-file", "error"), ("abort-present", "warning")}
    else:
        assert "abnormal recovery scanning from" in first and "refuses" not in first and kinds == {("abort-present", "warning")}
    assert f"abort file PRESENT ({shown}: see verify)" in " ".join(run("info", root, "--broker-version", version).stdout.split())
    refused = run("recover", root, "--broker-version", version)
    assert refused.exit_code == EXIT_BAD_INPUT and refused.stderr.count("\n") == 1 and "`mqtool repair`" in refused.stderr
    damaged = snapshot(root)
    for store in (as_file, root):
        applied = run("repair", store, "--yes", "--broker-version", version, "--backup-dir", tmp_path / f"backup-{store.parent.name}")
        assert applied.exit_code == EXIT_OK, applied.stderr
    assert snapshot(root) == snapshot(as_file) and "abort" not in snapshot(root)
    assert run("restore", tmp_path / f"backup-{root.parent.name}", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged


def test_a_device_node_abort_is_an_abnormal_start_the_broker_gets_past(tmp_path, monkeypatch):
    """A device node named ``abort``: ``File.exists()`` finds it (an abnormal recovery), and 5.x ``createTempFile``'s
    ``MixAll.string2File`` reads it as empty and writes the PID into it (5.3.3): the start goes on, where a FIFO hangs it
    and a socket or directory makes it exit. Before, it was said to hang or exit (an error), recover refused it and its
    empty content counted as 4.x evidence; now the start is the abnormal one, ``recover --yes`` carries it out as with an
    abort file (the same bytes) and removes the node as a clean shutdown does, ``restore`` puts it back, none opening it."""
    as_file = copy_store("5.3.3", "crashed-small", tmp_path / "file")
    root = copy_store("5.3.3", "crashed-small", tmp_path)
    evidence = json.loads(run("info", root, "--format", "json").stdout)["version"]["evidence"]
    (root / "abort").unlink()
    os.mknod(root / "abort", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    opened, real = [], os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real(path, *a, **k))
    assert json.loads(run("info", root, "--format", "json").stdout)["version"]["evidence"] == [e for e in evidence if "abort file" not in e]
    code, out, findings = verified(root, "5.3.3")
    first = " ".join(out.split("\n")[:3])
    assert "abnormal recovery scanning from" in first and "refuses" not in first
    assert {(f["kind"], f["severity"]) for f in findings if f["file"] == "abort"} == {("abort-present", "warning")}
    damaged = snapshot(root)
    for store in (as_file, root):
        applied = run("recover", store, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / f"backup-{store.parent.name}")
        assert applied.exit_code == EXIT_OK, applied.stderr
    assert snapshot(root) == snapshot(as_file) and "abort" not in snapshot(root)
    assert run("restore", tmp_path / f"backup-{root.parent.name}", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged and stat.S_ISCHR(os.lstat(root / "abort").st_mode) and str(root / "abort") not in opened


def a_socket(path) -> None:
    """A Unix socket bound at ``path`` (left there once closed, as a crashed process leaves one); bound by its name from
    its folder, as a socket's path is at most 107 bytes."""
    import socket

    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(path.name)
    finally:
        os.chdir(cwd)


def test_a_config_socket_is_passed_over_as_the_broker_does(tmp_path):
    """``MixAll.file2String``'s ``new FileInputStream`` on a socket throws (ENXIO), as on a directory, not waiting as on a
    FIFO: ``ConfigManager.load`` loads the ``.bak``; a ``.bak`` that is a socket with the file gone makes ``loadBak`` return
    false and the broker refuses to start. Before, a socket was taken for a missing file: verify said nothing, the next
    start was said to begin, and repair left it (the broker's every persist fails on it). Now it is said as the broker
    meets it, repair moves it out (never opening it) and ``restore`` puts the socket back."""
    root = copy_store("4.9.7", "config-real", tmp_path)
    (root / "config/consumerOffset.json").unlink()
    a_socket(root / "config/consumerOffset.json")
    _, _, findings = verified(root, "4.9.7")
    assert [(f["severity"], f["message"]) for f in findings if f["kind"] == "config-unreadable"] == [
        ("warning", "config/consumerOffset.json: a socket, whose open by FileInputStream throws (ENXIO); the broker loads "
                    "consumerOffset.json.bak instead")]
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert not (root / "config/consumerOffset.json").exists() and (root / "config/consumerOffset.json.bak").is_file()
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged and stat.S_ISSOCK(os.lstat(root / "config/consumerOffset.json").st_mode)
    (root / "config/consumerOffset.json").unlink()
    (root / "config/consumerOffset.json.bak").unlink()
    a_socket(root / "config/consumerOffset.json.bak")
    code, out, _ = verified(root, "4.9.7")
    first = " ".join(" ".join(out.split("\n")[:4]).split())
    refusal = ("the broker's next start refuses to start: config/consumerOffset.json.bak: a socket, whose open by FileInputStream "
               "throws (ENXIO), where ConfigManager.loadBak falls back")
    assert code == EXIT_FINDINGS and first.startswith(refusal)


@pytest.mark.parametrize("version, severity", [("4.9.7", "warning"), ("5.3.3", "error")])
def test_a_config_device_node_is_read_as_empty_and_never_opened(tmp_path, monkeypatch, version, severity):
    """A device node as ``config/consumerOffset.json``: ``file2String`` reads ``File.length()`` (0) bytes, an empty string,
    so ``ConfigManager.load`` loads the ``.bak``; then ``MixAll.string2File`` up to 5.0.0 renames a new file over the node,
    while 5.1.0+ write the empty old content into the ``.bak`` and the table into the device (rules 7.4): the next start
    loads an empty table. Before, mqtool said the file was missing and left it; now verify says what is there (an error
    where the broker writes in place), repair moves it out and restore puts it back, none opening it."""
    root = copy_store(version, "config-real", tmp_path)
    node = root / "config/consumerOffset.json"
    node.unlink()
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's
    opened, real = [], os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real(path, *a, **k))
    _, _, findings = verified(root, version)
    found = [(f["severity"], f["message"]) for f in findings if f["kind"] == "config-unreadable"]
    said = ("config/consumerOffset.json: a device node, which MixAll.file2String reads as empty (File.length() is 0); the broker "
            "loads consumerOffset.json.bak instead")
    assert len(found) == 1 and found[0][0] == severity and found[0][1].startswith(said)
    assert ("empties consumerOffset.json.bak (MixAll.string2File writes in place)" in found[0][1]) == (severity == "error")
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", version, "--backup-dir", tmp_path / "backup")
    assert applied.exit_code in (EXIT_OK, EXIT_FINDINGS), applied.stderr
    assert not node.exists() or node.is_file()  # moved out (then, on 4.9.7, the .bak copied over it)
    assert "config-unreadable" not in {f["kind"] for f in verified(root, version)[2]}
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged and stat.S_ISCHR(os.lstat(node).st_mode) and str(node) not in opened


def test_a_socket_lock_refuses_the_start_and_is_moved_out(tmp_path):
    """``DefaultMessageStore``'s constructor opens ``lock`` with ``new RandomAccessFile(file, "rw")``, which throws on a
    socket (ENXIO), so ``BrokerController.initialize`` fails (4.2.0+). Before, verify called the store sound and
    ``repair --yes`` stopped with an internal error (exit 5) opening it to hold the store's lock; now the next start
    refuses, repair moves it out and ``restore`` puts the socket back."""
    root = copy_store("4.9.7", "clean-small", tmp_path)
    (root / "lock").unlink()
    a_socket(root / "lock")
    code, out, findings = verified(root, "4.9.7")
    first = " ".join(" ".join(out.split("\n")[:4]).split())
    refusal = ("the broker's next start refuses to start: lock: a socket, which DefaultMessageStore's constructor cannot open "
               "(new RandomAccessFile(file, \"rw\") throws ENXIO)")
    assert code == EXIT_FINDINGS and first.startswith(refusal)
    assert {(f["kind"], f["severity"]) for f in findings if f["file"] == "lock"} == {("not-a-file", "error")}
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup")
    assert applied.exit_code == EXIT_OK, applied.stderr
    assert not (root / "lock").exists() and verified(root, "4.9.7")[0] == EXIT_OK
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged and stat.S_ISSOCK(os.lstat(root / "lock").st_mode)


def test_a_device_node_lock_is_never_opened(tmp_path, monkeypatch):
    """A device node as ``lock``: the broker opens and locks it (no refusal). Before, ``info``'s lock probe and the apply's
    lock opened the device; now neither does (a broker using the store is still found by its open files)."""
    root = copy_store("4.9.7", "crashed-small", tmp_path)
    (root / "lock").unlink()
    os.mknod(root / "lock", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    opened, real = [], os.open
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real(path, *a, **k))
    assert run("info", root, "--broker-version", "4.9.7").exit_code == EXIT_OK
    assert run("recover", root, "--yes", "--broker-version", "4.9.7", "--backup-dir", tmp_path / "backup").exit_code == EXIT_OK
    assert str(root / "lock") not in opened and stat.S_ISCHR(os.lstat(root / "lock").st_mode)


@pytest.mark.parametrize("second", ["commitlog/00000000000000000000", "consumequeue/TopicTest/0/00000000000000000000"])
def test_a_wheel_of_the_wrong_length_is_said_with_the_refusal_the_start_meets_after_it(tmp_path, second):
    """A ``timerwheel`` of the wrong length (5.3.3 ``timer-crashed``) beside a commit log segment or a consume queue file cut
    short, which the broker refuses to load after the wheel: the next start's line (verify, info, repair) says the wheel's
    refusal, then the file's, as it says that file alone, with the figures once that is fixed where it gives them (a queue
    file, which the recovery rewrites). Before: the wheel's refusal alone, without the second refusal or any figures."""
    def line_of(root):
        return json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)["summary"]["next_start"]["line"]

    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    os.truncate(root / second, 1000)
    alone = line_of(root).removeprefix("the broker's next start refuses to start: ")
    assert alone.startswith(f"{second.rsplit('/', 1)[1] if second.startswith('commitlog') else second}: 1000 bytes")
    os.truncate(root / "timerwheel", 1000000)
    line = line_of(root)
    assert line == ("the broker's next start refuses to start: timerwheel: 1000000 bytes, not 38707200, on which TimerWheel's constructor "
                    "throws, so BrokerController.initialize fails; then, once `repair` has resized the wheel, it refuses to start: "
                    + alone.replace(", which `mqtool recover` fixes", ", which that `repair` fixes too"))  # recover refuses: the wheel
    assert json.loads(run("info", root, "--broker-version", "5.3.3", "--format", "json").stdout)["next_start"]["line"] == line
    assert json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)["next_start"]["line"] == line


@pytest.mark.parametrize("size", [1000000, 38707200 + 32])
def test_wheel_of_the_wrong_length_refuses_the_start_in_every_command(tmp_path, size):
    """Before: a ``timerwheel`` cut short or grown (5.3.3 ``timer-crashed``), on which ``TimerWheel``'s constructor throws in
    ``BrokerController.initialize`` before the store loads (5.0.0-5.3.3), had verify's ``timer-wheel`` say the broker refuses
    to start while the next start's line (verify, info, repair, salvage) said it keeps the log, and ``recover`` planned a
    recovery. Now the line says the refusal, then what the start does once the wheel is fixed (as on the intact store),
    ``recover`` refuses naming ``repair``, whose resize lets the broker start, undone exactly by ``restore``."""
    root = copy_store("5.3.3", "timer-crashed", tmp_path)
    intact = json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)["summary"]["next_start"]["line"]
    assert intact.startswith("the broker's next start keeps [")
    os.truncate(root / "timerwheel", size)
    line = json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)["summary"]["next_start"]["line"]
    keeps = intact.removeprefix("the broker's next start ")
    assert line == (f"the broker's next start refuses to start: timerwheel: {size} bytes, not 38707200, on which TimerWheel's constructor "
                    f"throws, so BrokerController.initialize fails; with that file fixed, it {keeps}")
    code, _, findings = verified(root, "5.3.3")
    assert code == EXIT_FINDINGS and {f["kind"] for f in findings if f["file"] == "timerwheel"} == {"timer-wheel"}  # no second finding
    assert json.loads(run("info", root, "--broker-version", "5.3.3", "--format", "json").stdout)["next_start"]["line"] == line
    salvaged = run("salvage", root, "--broker-version", "5.3.3", "-f", "jsonl", "--out", tmp_path / "out.jsonl")
    assert f"mqtool: {line}\n" in salvaged.stderr
    refused = run("recover", root, "--broker-version", "5.3.3")
    assert refused.exit_code == EXIT_BAD_INPUT and refused.stderr.count("\n") == 1
    assert "timerwheel: " in refused.stderr and "`mqtool repair`" in refused.stderr
    plan = json.loads(run("repair", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    assert plan["next_start"]["line"] == line and [s["step"] for s in plan["steps"]][:1] == ["resize-segment"]
    damaged = snapshot(root)
    applied = run("repair", root, "--yes", "--broker-version", "5.3.3", "--backup-dir", tmp_path / "backup")
    assert applied.exit_code in (EXIT_OK, EXIT_FINDINGS), applied.stderr
    assert (root / "timerwheel").stat().st_size == 38707200
    after = json.loads(run("verify", root, "--broker-version", "5.3.3", "--format", "json").stdout)
    assert "refuses" not in after["summary"]["next_start"]["line"] and "timer-wheel" not in {f["kind"] for f in after["findings"]}
    assert run("restore", tmp_path / "backup", "--yes").exit_code == EXIT_OK
    assert snapshot(root) == damaged
