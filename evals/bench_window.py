"""What a turn costs when the agent does not simply append to its history.

Two shapes:

- a sliding window: each turn the agent appends a call and its result and drops its
  oldest messages, keeping the system message and the newest W messages (20, 200,
  1,000). The tracker finds the messages it read before at the end of the list and reads
  only the two new ones, so the cost per turn must not grow with W;
- a rewrite in the middle of a long history (100,000 messages): one message halfway is
  replaced and the last one changed, so the tracker must re-read; what it re-reads is
  bounded (`judge.history.REREAD_MESSAGES`), not everything since message 0.

Both also run with every message a copy (as a server receives it: equal, not the same
object), which exercises the comparison by content.

With ``--baseline-tree DIR`` (a ``git worktree`` of an earlier commit), the same cases run
for that tree's package too, one after the other in the same run, and both are printed
side by side.

Run from the repository root:  .venv/bin/python evals/bench_window.py
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig

WINDOWS = (20, 200, 1_000)
# Turns timed per window, after the window has filled.
TIMED_TURNS = 200
REWRITE_MESSAGES = 100_000
TOOLS = ("read_file", "grep", "list_dir", "run_tests")


def _pair(turn: int) -> list[dict[str, Any]]:
    call_id = f"call_{turn}"
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": TOOLS[turn % 4], "arguments": f'{{"path": "src/m_{turn}.py"}}'},
    }
    return [
        {"role": "assistant", "content": f"Step {turn}: reading m_{turn}.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": f"def f_{turn}(x): return {turn}"},
    ]


SYSTEM = {"role": "system", "content": "You are a coding agent."}
TASK = {"role": "user", "content": "Refactor every module in src/ to the new API."}


async def window_turn_us(window: int, copies: bool) -> float:
    """Median microseconds per turn with a sliding window of ``window`` messages."""
    tracker = LoopTracker(TrackerConfig(fast_model=None, confirm_model=None, semantic="off"))
    full: list[dict[str, Any]] = [TASK]
    timings: list[float] = []
    turn = 0
    while len(timings) < TIMED_TURNS:
        full.extend(_pair(turn))
        turn += 1
        history = [SYSTEM, *full[-window:]]
        if copies:
            history = copy.deepcopy(history)
        started = time.perf_counter_ns()
        await tracker.turn_started(history)
        elapsed = time.perf_counter_ns() - started
        if len(full) > window:
            timings.append(elapsed / 1_000)
    return statistics.median(timings)


async def rewrite_s(copies: bool) -> float:
    """Seconds of the turn that reads a 100,000-message history rewritten in the middle."""
    tracker = LoopTracker(TrackerConfig(fast_model=None, confirm_model=None, semantic="off"))
    history: list[dict[str, Any]] = [SYSTEM, TASK]
    for turn in range(REWRITE_MESSAGES // 2):
        history.extend(_pair(turn))
    await tracker.turn_started(history)
    rewritten = copy.deepcopy(history) if copies else list(history)
    rewritten[len(rewritten) // 2] = {"role": "user", "content": "An edited note."}
    rewritten[-1] = {"role": "tool", "tool_call_id": rewritten[-1]["tool_call_id"], "content": "x"}
    started = time.perf_counter()
    await tracker.turn_started(rewritten)
    return time.perf_counter() - started


def measure() -> dict[str, Any]:
    """Every case, in this process: the package ``judge`` resolves to here."""
    import judge

    return {
        "package": str(Path(judge.__file__).resolve().parent),
        "window": {
            str(window): [anyio.run(window_turn_us, window, copies) for copies in (False, True)]
            for window in WINDOWS
        },
        "rewrite": [anyio.run(rewrite_s, copies) for copies in (False, True)],
    }


def measure_tree(tree: Path) -> dict[str, Any]:
    """`measure` in a fresh process that imports the package in ``tree``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--json"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tree),
    ).stdout
    result: dict[str, Any] = json.loads(out)
    if not Path(result["package"]).is_relative_to(tree.resolve()):
        raise SystemExit(f"the baseline imported {result['package']}, not the package in {tree}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-tree", type=Path, help="also measure this tree's package")
    parser.add_argument("--json", action="store_true", help="print this tree's figures as JSON")
    args = parser.parse_args()
    if args.json:
        print(json.dumps(measure()))
        return
    runs = [("this", measure())]
    if args.baseline_tree is not None:
        if not (args.baseline_tree / "judge").is_dir():
            parser.error(f"--baseline-tree {args.baseline_tree} holds no judge package")
        runs.append(("baseline", measure_tree(args.baseline_tree)))
    for name, result in runs:
        print(f"{name}: {result['package']}")
    print("sliding window: median us per turn_started (heuristics only)")
    print(f"{'window':>8}" + "".join(f" {n + ' same':>16} {n + ' copies':>16}" for n, _ in runs))
    for window in WINDOWS:
        cells = "".join(
            f" {r['window'][str(window)][0]:>16.1f} {r['window'][str(window)][1]:>16.1f}"
            for _, r in runs
        )
        print(f"{window:>8,}{cells}")
    print(f"history of {REWRITE_MESSAGES:,} rewritten in the middle: one turn_started, s")
    for i, label in enumerate(("same objects", "copies")):
        cells = "".join(f" {name} {r['rewrite'][i]:.3f}" for name, r in runs)
        print(f"{label:>14}:{cells}")


if __name__ == "__main__":
    main()
