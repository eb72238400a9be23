"""What a store holds beyond what mqtool reads (reference §1.1, §16), named by ``info`` and ``verify`` as not checked."""

from __future__ import annotations

from pathlib import Path

READ = {
    "commitlog", "consumequeue", "consumequeue_ext", "index", "checkpoint", "abort", "abort.bak", "lock", "config",
    "timerlog", "timerwheel", "batchconsumequeue",
}
"""Store parts mqtool reads and checks (``dledger-<id>/`` too: the DLedger commit log)."""

FEATURES = {
    "consumequeue_rocksdb": "RocksDB consume queues (storeType=defaultRocksDB, 5.2+)",
    "rocksdb": "a RocksDB store (RocksDB consume queues or config, 5.2+)",
    "compaction": "the compaction store of cleanup.policy=COMPACTION topics (5.x)",
    "tieredstore": "tiered storage (5.x)",
    "tiered_store": "tiered storage (5.x)",
}


def unchecked_parts(root: Path | None) -> list[str]:
    """One line per top-level entry of ``root`` that mqtool does not check, saying what it is."""
    if root is None or not root.is_dir():
        return []
    lines = []
    for path in sorted(root.iterdir()):
        name = path.name
        if name in READ or name.startswith("dledger-") or name.startswith("."):
            continue
        # a feature folder the broker creates on every start holds nothing of interest until used (5.x: compaction/position-checkpoint)
        if name not in FEATURES or not path.is_dir() or any(p.name != "position-checkpoint" for p in path.iterdir()):
            what = FEATURES.get(name, "not a part of a RocketMQ store mqtool knows")
            lines.append(f"{name}{'/' if path.is_dir() else ''}: {what}, not checked")
    return lines
