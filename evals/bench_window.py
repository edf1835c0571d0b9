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

Run from the repository root:  .venv/bin/python evals/bench_window.py
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    print("sliding window: median us per turn_started (heuristics only)")
    print(f"{'window':>8} {'same objects':>14} {'copies':>10}")
    for window in WINDOWS:
        same = anyio.run(window_turn_us, window, False)
        copied = anyio.run(window_turn_us, window, True)
        print(f"{window:>8,} {same:>14.1f} {copied:>10.1f}")
    print(f"history of {REWRITE_MESSAGES:,} rewritten in the middle: one turn_started")
    for copies in (False, True):
        label = "copies" if copies else "same objects"
        print(f"{label:>14}: {anyio.run(rewrite_s, copies):.3f} s")


if __name__ == "__main__":
    main()
