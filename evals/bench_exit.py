"""Does a process that uses loop-judge always exit cleanly, whenever it exits?

The semantic model loads in a background thread when the first tracker is built. A process
that exits while that load is still inside onnxruntime must still exit normally: no abort
(exit 134), no segmentation fault (139). This starts fresh interpreters that build a
tracker (or build one and run one turn), sleep a random 0-3 s and exit, while a busy loop
keeps the machine's other core loaded, and counts the exits that were not clean.

    .venv/bin/python evals/bench_exit.py --runs 200

Prints each abnormal exit as it happens and a summary; exits 1 when any run was abnormal.
The test suite runs a bounded version of this loop (tests/test_clean_exit.py).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from collections import Counter

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
# The delays the issue measured aborts at: the model's load takes about 0.5 s on idle
# cores and several seconds under load, so 0-3 s covers exits before, during and after it.
MAX_DELAY_S = 3.0


def _child(script: str, delay: float) -> str:
    return f"{script}import time\ntime.sleep({delay:.3f})\n"


def _spin(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        sum(range(10_000))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="children per script")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-load", action="store_true", help="leave the other core idle")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
    stop = multiprocessing.Event()
    spinner = None
    if not args.no_load:
        spinner = multiprocessing.Process(target=_spin, args=(stop,), daemon=True)
        spinner.start()
    codes: Counter[int] = Counter()
    walls: list[float] = []
    try:
        for i in range(args.runs):
            for name, script in SCRIPTS.items():
                delay = rng.uniform(0.0, MAX_DELAY_S)
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-c", _child(script, delay)],
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=120,
                )
                walls.append(time.perf_counter() - started - delay)
                codes[done.returncode] += 1
                if done.returncode != 0:
                    tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                    print(
                        f"run {i} {name} delay {delay:.2f}s: exit {done.returncode}: {tail[0]}",
                        flush=True,
                    )
    finally:
        stop.set()
        if spinner is not None:
            spinner.join(5)
    total = sum(codes.values())
    abnormal = total - codes[0]
    print(
        f"{total} runs ({args.runs} per script, delays 0-{MAX_DELAY_S:.0f} s, "
        f"{'other core idle' if args.no_load else 'other core busy'}): {abnormal} abnormal "
        f"exits; exit codes {dict(sorted(codes.items()))}; process time beyond the delay "
        f"median {statistics.median(walls):.2f} s, max {max(walls):.2f} s; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    return 1 if abnormal else 0


if __name__ == "__main__":
    sys.exit(main())
