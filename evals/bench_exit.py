"""Does a process that uses loop-judge always exit cleanly, whenever it exits?

The semantic model loads in a background thread when the first tracker is built. A process
that exits while that load is still inside onnxruntime must still exit normally: no abort
(exit 134), no segmentation fault (139). This starts fresh interpreters that build a
tracker (or build one and run one turn), sleep a random 0-3 s and exit, while a busy loop
keeps the machine's other core loaded, and counts the exits that were not clean.

    .venv/bin/python evals/bench_exit.py --runs 200
    .venv/bin/python evals/bench_exit.py --runs 20 --baseline-tree <worktree of e4a9f67>

With ``--baseline-tree`` each run is made in both trees, side by side (a child imports the
package of the tree it runs in: ``python -c`` puts its working directory first on
``sys.path``). Prints each abnormal exit as it happens and a summary per tree; exits 1
when any run of this tree was abnormal. The test suite runs a bounded version of this
loop (tests/tracker/test_clean_exit.py).
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

# What the child does before sleeping. Both build the default tracker (semantic "auto",
# which starts the model's load); "turn" also runs one turn, as a short script would.
SCRIPTS = {
    "build": "from judge import LoopTracker\nLoopTracker()\n",
    "turn": (
        "import anyio\nfrom judge import LoopTracker\ntracker = LoopTracker()\n"
        "anyio.run(tracker.turn_started, "
        '[{"role": "user", "content": "list the files"}, '
        '{"role": "assistant", "content": "Looking at the files now."}])\n'
    ),
}
# The longest exit delay drawn: the model's load takes about 0.5 s on idle
# cores and several seconds under load, so 0-3 s covers exits before, during and after it.
MAX_DELAY_S = 3.0


def _child(script: str, delay: float) -> str:
    return f"{script}import time\ntime.sleep({delay:.3f})\n"


REPO = Path(__file__).resolve().parents[1]


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(range(10_000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="children per script")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-load", action="store_true", help="leave the other core idle")
    parser.add_argument("--baseline-tree", type=Path, help="another checkout, run side by side")
    args = parser.parse_args()
    trees = {"this tree": REPO}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree.resolve()
    for label, tree in trees.items():
        where = subprocess.run(
            [sys.executable, "-c", "import judge; print(judge.__file__)"],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(tree)):
            parser.error(f"{label} ({tree}) imports judge from {where}")
        print(f"{label}: {where}")
    rng = random.Random(args.seed)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
    stop = multiprocessing.Event()
    spinner = None
    if not args.no_load:
        spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
        spinner.start()
    codes: dict[str, Counter[int]] = {label: Counter() for label in trees}
    walls: dict[str, list[float]] = {label: [] for label in trees}
    try:
        for i in range(args.runs):
            for name, script in SCRIPTS.items():
                delay = rng.uniform(0.0, MAX_DELAY_S)
                for label, tree in trees.items():
                    started = time.perf_counter()
                    done = subprocess.run(
                        [sys.executable, "-c", _child(script, delay)],
                        capture_output=True,
                        text=True,
                        env=env,
                        cwd=tree,
                        timeout=120,
                    )
                    walls[label].append(time.perf_counter() - started - delay)
                    codes[label][done.returncode] += 1
                    if done.returncode != 0:
                        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                        print(
                            f"{label} run {i} {name} delay {delay:.2f}s: exit "
                            f"{done.returncode}: {tail[0]}",
                            flush=True,
                        )
    finally:
        stop.set()
        if spinner is not None:
            spinner.join(5)
    load = "other core idle" if args.no_load else "other core busy"
    for label in trees:
        total = sum(codes[label].values())
        abnormal = total - codes[label][0]
        print(
            f"{label}: {total} runs ({args.runs} per script, delays 0-{MAX_DELAY_S:.0f} s, "
            f"{load}): {abnormal} abnormal exits; exit codes "
            f"{dict(sorted(codes[label].items()))}; process time beyond the delay median "
            f"{statistics.median(walls[label]):.2f} s, max {max(walls[label]):.2f} s"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 1 if sum(codes["this tree"].values()) != codes["this tree"][0] else 0


if __name__ == "__main__":
    sys.exit(main())
