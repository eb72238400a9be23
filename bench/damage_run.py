"""Random damage at scale (issue #28): N copies of the real-broker fixtures, each with 1-3 random
damages (``tests/damage_support.py``: bit flips, cut files, zeroed ranges, garbage appended,
stray and deleted files, cut consume queue files), then ``repair --yes``, ``verify`` and
``mqtool restore`` of the repair's backup, as a user runs them (the CLI in a fresh process, with
a per-command timeout), the read-only commands (info, stats, offsets, salvage, dump) first. Prints
every problem as it happens and the tally at the end:
tracebacks, hangs, undocumented exit codes, stores not sound after the repair beyond the truly
lost data, messages wholly before the first damaged byte of the log that ``mqtool survivors``
finds otherwise than on the repaired undamaged fixture (``survivor``), failed restores (not
byte-identical to the damaged copy).

    python bench/damage_run.py                   # 1000 runs over every fixture kind, seeds 0..999
    python bench/damage_run.py -n 300 --first 5000 --only lmq-small,dledger-crashed
    python bench/damage_run.py --seed 17         # replay one run (kind = seed modulo the kinds)
    python bench/damage_run.py --lost-pages      # also zero files' tails, as a crash that lost pages
    python bench/damage_run.py --disk-faults     # also empty files, misdirected page writes, files grown with zeros
    python bench/damage_run.py --cut-files       # also a commit log segment or consume queue file cut short
    python bench/damage_run.py --layout-faults   # also files replaced by a folder or FIFO, parts linked to another disk, FIFOs

Exit 1 when any run had a problem.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from damage_support import CUT_FILES, DAMAGES, DISK_FAULTS, KINDS, LAYOUT_FAULTS, LOST_PAGES, PROBLEMS, damage_run  # noqa: E402
import damage_support  # noqa: E402

damage_support.FRESH_PROCESS = True  # each command in a fresh process with its timeout, as a user runs it


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000, help="how many damaged copies (default 1000)")
    ap.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    ap.add_argument("--seed", type=int, help="run this one seed only")
    ap.add_argument("--only", help="comma-separated store names or version/name (default: every kind)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds each command may take (default 120)")
    ap.add_argument("--no-restore", action="store_true", help="skip the restore check")
    ap.add_argument("--no-version", action="store_true", help="repair without --broker-version (a refusal naming the versions, store unchanged, is ok)")
    ap.add_argument("--no-survivors", action="store_true", help="skip the survivors check (the messages before the first damage fare as on the repaired fixture)")
    ap.add_argument("--lost-pages", action="store_true", help="damages include a file's tail, or a directory's last files, zeroed (pages a crash lost)")
    ap.add_argument("--disk-faults", action="store_true", help="damages include a file left empty, a misdirected page write, a file grown with zeros")
    ap.add_argument("--cut-files", action="store_true", help="damages include a commit log segment or consume queue file cut at a random length")
    ap.add_argument("--layout-faults", action="store_true", help="damages include a single file replaced by a folder or a FIFO, a segment or "
                    "folder moved to another file system and linked back (maybe cut), a FIFO in a queue or stray folder")
    args = ap.parse_args()
    kinds = [k for k in KINDS if not args.only or any(w in (k[1], "/".join(k)) for w in args.only.split(","))]
    if not kinds:
        ap.error(f"--only matches no kind of {', '.join('/'.join(k) for k in KINDS)}")
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.n)
    tally: Counter = Counter()
    per_store: Counter = Counter()
    refused: Counter = Counter()  # ok runs where repair refused (exit 4), the store unchanged: by why
    for seed in seeds:
        version, name = kinds[seed % len(kinds)]
        work = Path(tempfile.mkdtemp(prefix="mqtool-damage-"))
        try:
            out = damage_run(version, name, seed, work, timeout=args.timeout, restore=not args.no_restore, version_given=not args.no_version,
                             kinds=(LOST_PAGES if args.lost_pages else DAMAGES) + (DISK_FAULTS if args.disk_faults else ()) + (CUT_FILES if args.cut_files else ())
                             + (LAYOUT_FAULTS if args.layout_faults else ()), survivors_kept=not args.no_survivors, readers=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        tally[out.problem or "ok"] += 1
        if out.problem is None and out.refused:
            refused[out.refused] += 1
        if out.problem:
            per_store[(out.store, out.problem)] += 1
            print(f"seed {seed} {out.store} [{'; '.join(out.damages)}] repair exit {out.repair_rc}: {out.problem}: {out.detail}", flush=True)
        done = sum(tally.values())
        if done % 50 == 0:
            print(f"-- {done} runs: " + ", ".join(f"{p} {tally[p]}" for p in ("ok",) + PROBLEMS), flush=True)
    total = sum(tally.values())
    print(f"\n{total} damaged copies over {len(kinds)} fixture kinds")
    for p in ("ok",) + PROBLEMS:
        print(f"  {p:<10} {tally[p]}")
    if refused["version"]:
        print(f"  ({refused['version']} of the ok runs: repair refused, naming the --broker-version values that decide, the store unchanged)")
    if refused["unplanned"]:
        print(f"  ({refused['unplanned']} of the ok runs: repair refused a 3.2.6-4.3.1 abnormal recovery past a TOTALSIZE mismatch, documented, the store unchanged)")
    for (store, problem), n in sorted(per_store.items()):
        print(f"    {store}: {problem} x{n}")
    return 1 if total - tally["ok"] else 0


if __name__ == "__main__":
    sys.exit(main())
