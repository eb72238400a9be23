"""Parts of a store mqtool does not check are named by info and verify, never ignored, never a reason to refuse."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from conftest import store_path
from mqtool.cli import app
from mqtool.store.layout import unchecked_parts

REAL = [("4.9.7", "clean-small"), ("5.3.3", "clean-small"), ("5.3.3", "timer-small"), ("5.3.3", "lmq-small"), ("4.9.7", "config-real")]


@pytest.mark.parametrize("version,name", REAL)
def test_real_stores_hold_nothing_unchecked(version, name):
    """5.x creates compaction/position-checkpoint on every start: an unused feature is not reported."""
    assert unchecked_parts(store_path(version, name)) == []


def test_info_and_verify_name_what_they_do_not_check(store_copy):
    root = store_copy("5.3.3", "clean-small")
    (root / "consumequeue_rocksdb").mkdir()
    (root / "consumequeue_rocksdb" / "CURRENT").write_text("MANIFEST-000001\n")
    (root / "compaction" / "compactionLog").mkdir()
    (root / "mystery.dat").write_bytes(b"x")
    expected = [
        "compaction/: the compaction store of cleanup.policy=COMPACTION topics (5.x), not checked",
        "consumequeue_rocksdb/: RocksDB consume queues (storeType=defaultRocksDB, 5.2+), not checked",
        "mystery.dat: not a part of a RocketMQ store mqtool knows, not checked",
    ]
    info = CliRunner().invoke(app, ["info", str(root), "--format", "json"])
    assert info.exit_code == 0, info.output
    assert [n for n in json.loads(info.stdout)["notes"] if "not checked" in n] == expected
    verify = CliRunner().invoke(app, ["verify", str(root), "--format", "json"])
    assert verify.exit_code == 0, verify.output
    assert [n for n in json.loads(verify.stdout)["summary"]["notes"] if "not checked" in n] == expected
