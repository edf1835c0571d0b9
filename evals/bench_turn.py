"""How much does ``turn_started`` cost an agent when no judge check is due?

The tracker runs on every turn of the agent, so its cost per turn must not grow with the
length of the conversation: it should read only the new messages. This script grows one
history per size the way an agent does (append an assistant call and its tool result, call
``turn_started`` with the same, growing list) and times the last calls before the history
reaches 100, 1,000 and 10,000 messages, heuristics only. The sizes run side by side in one
process so their ratio is not skewed by a different machine load.

Run from the repository root:  .venv/bin/python evals/bench_turn.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig

# History sizes (messages) at which the cost is measured; 10,000 is a long day's session.
SIZES = (100, 1_000, 10_000)
# Calls timed at each size: the last ones before the history reaches it.
TIMED_CALLS = 100
# Repetitions per size; the median of their means is reported, which shrugs off one run
# disturbed by the garbage collector or another process.
REPEATS = 5
# Distinct tools and paths cycled through, so the history is varied work that no detector
# calls a loop (a flag would add escalation work and measure something else).
TOOLS = ("read_file", "grep", "list_dir", "run_tests")


def _call(turn: int) -> dict[str, Any]:
    tool = TOOLS[turn % len(TOOLS)]
    return {
        "role": "assistant",
        "content": f"Step {turn}: looking at module {turn} next.",
        "tool_calls": [
            {
                "id": f"call_{turn}",
                "type": "function",
                "function": {
                    "name": tool,
                    "arguments": json.dumps({"path": f"src/pkg{turn % 97}/mod_{turn}.py"}),
                },
            }
        ],
    }


def _result(turn: int) -> dict[str, Any]:
    return {
        "role": "tool",
        "tool_call_id": f"call_{turn}",
        "content": f"contents of mod_{turn}.py: def f_{turn}(x): return x * {turn}",
    }


async def mean_turn_us(size: int) -> float:
    """Mean microseconds of the last TIMED_CALLS ``turn_started`` calls up to ``size``."""
    tracker = LoopTracker(TrackerConfig(fast_model=None, confirm_model=None))
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Refactor every module in src/ to use the new API."},
    ]
    timings: list[int] = []
    turn = 0
    while len(history) < size:
        history.append(_call(turn))
        history.append(_result(turn))
        turn += 1
        started = time.perf_counter_ns()
        verdict = await tracker.turn_started(history)
        timings.append(time.perf_counter_ns() - started)
        if verdict:
            raise SystemExit(f"benchmark history was flagged at turn {turn}: {verdict.summary}")
    return statistics.fmean(timings[-TIMED_CALLS:]) / 1_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs per size")
    args = parser.parse_args()
    results: dict[int, float] = {}
    for size in SIZES:
        means = [anyio.run(mean_turn_us, size) for _ in range(args.repeats)]
        results[size] = statistics.median(means)
    print(f"turn_started, heuristics only, no check due; mean of the last {TIMED_CALLS} calls")
    print(f"{'history (messages)':>20} {'us per call':>12}")
    for size, us in results.items():
        print(f"{size:>20,} {us:>12.1f}")
    ratio = results[SIZES[-1]] / results[SIZES[0]]
    print(f"{'ratio 10k / 100':>20} {ratio:>12.2f}")


if __name__ == "__main__":
    main()
