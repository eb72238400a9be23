"""Start-up and lookups: each command as a fresh ``mqtool`` process, best wall of ``--repeat``.

    python bench/bench_startup.py --store /tmp/b2g/store-4.9-2g-msg1k-seg1g-s7

Commands on the bundled sample store (``fixtures/rocketmq-5.3.3/clean-small``) and lookups on a
store from ``bench/make_store.py`` (its topic ``%RETRY%bench_group``, its first record): issue #10's
target is <= 0.3 s for ``--help``, ``--version``, any command on a small store and a lookup on a
2 GiB store. Run it with ``PYTHONDONTWRITEBYTECODE`` unset, as a user's install runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "fixtures" / "rocketmq-5.3.3" / "clean-small"
TOPIC = "%RETRY%bench_group"  # make_store.py's first topic


def commands(store: Path) -> list[list[str]]:
    msg = json.loads((FIXTURE.parent / f"{FIXTURE.name}.manifest.json").read_text())["messages"][7]
    first = subprocess.run([*mqtool(), "dump", str(store), "--limit", "1", "-f", "json"], capture_output=True, text=True, check=True)
    row = json.loads(first.stdout)[0]
    f, s = str(FIXTURE), str(store)
    return [
        ["--version"], ["--help"], ["dump", f, "--limit", "5"], ["info", f],
        ["query", "uniq-key", f, msg["topic"], msg["uniqKey"]], ["query", "msg-id", f, msg["msgId"]],
        ["dump", s, "--msg-id", row["msg_id"]], ["query", "msg-id", s, row["msg_id"]],
        ["query", "uniq-key", s, row["topic"], row["uniq_key"]], ["query", "key", s, row["topic"], row["keys"][0]],
        ["query", "offset", s, row["topic"], str(row["queue_id"]), "5"], ["query", "time", s, row["topic"], str(row["queue_id"]), str(row["store_timestamp"] + 500)],
        ["dump", s, "--from-offset", str(row["offset"]), "--limit", "10"],
    ]


def mqtool() -> list[str]:
    return [str(Path(sys.executable).with_name("mqtool")), "-q"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", type=Path, required=True, help="a store from bench/make_store.py (e.g. 2 GiB of 1 KiB records)")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: every process compiles mqtool's sources (0.1-0.15 s more)", file=sys.stderr)
    print("| command | wall s | target |\n|---|---|---|")
    for c in commands(args.store):
        best = min(_wall(c) for _ in range(args.repeat))
        shown = " ".join(a if len(a) < 40 else a[:12] + "…" for a in c).replace(str(FIXTURE), "FIXTURE").replace(str(args.store), "STORE")
        print(f"| `mqtool {shown}` | {best:.2f} | <= 0.3 s: {'met' if best <= 0.3 else 'NOT met'} |")
    return 0


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([*mqtool(), *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    sys.exit(main())
