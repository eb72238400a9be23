"""Single files the broker opens by name, found as directories: the ``checkpoint`` (``StoreCheckpoint``'s
``new RandomAccessFile(file, "rw")`` throws and ``DefaultMessageStore.load`` fails, 3.2.6-5.3.3): the next start's
refusal, ``verify``'s ``checkpoint-not-a-file``, ``info``, ``recover``'s refusal and ``repair``'s quarantine, undone
exactly by ``restore``."""

from __future__ import annotations

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
    found = {f["kind"]: f for f in findings}["checkpoint-not-a-file"]
    assert (found["severity"], found["file"]) == ("error", "checkpoint") and "checkpoint-missing" not in {f["kind"] for f in findings}
    shown = " ".join(run("info", root, "--broker-version", version).stdout.split())
    assert "Checkpoint file a directory, which StoreCheckpoint cannot open" in shown

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
