"""Replay runs nobody labelled, for crashes and timing only.

The measurement-only sets (``shared/coding_runs``, the unlabelled part of
``shared/recorded``) judge generalisation: looking at what the detectors flag there, and
changing anything because of it, would turn them into a tuning set. This script therefore
reports only what cannot be tuned on: whether every turn of every run went through the
tracker without an exception, and what the turns cost. It never prints, counts or writes
a verdict.

Run from the repository root:
    .venv/bin/python evals/replay_unlabelled.py ../shared/coding_runs
"""

from __future__ import annotations

import argparse
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig
from judge_eval.importers import load_trajectories


async def replay(messages: list[Any], config: TrackerConfig) -> list[float]:
    """Seconds per `turn_started`, called at each assistant message as an agent would."""
    tracker = LoopTracker(config)
    timings = []
    for k, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            start = time.perf_counter()
            await tracker.turn_started(messages[:k])
            timings.append(time.perf_counter() - start)
    start = time.perf_counter()
    await tracker.turn_started(messages)
    timings.append(time.perf_counter() - start)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a folder of trajectory files (searched deep)")
    parser.add_argument(
        "--semantic", choices=("auto", "on", "off"), default="auto", help="semantic detector"
    )
    args = parser.parse_args()
    config = TrackerConfig(fast_model=None, confirm_model=None, semantic=args.semantic)
    files = sorted(p for p in args.folder.rglob("*.json") if p.is_file())
    runs = crashed = unreadable = 0
    turns: list[float] = []
    slowest_run = 0.0
    for path in files:
        try:
            trajectories = load_trajectories(path)
        except Exception as exc:  # a file that is not a trajectory: say so, go on
            unreadable += 1
            print(f"unreadable {path.name}: {type(exc).__name__}: {exc}"[:200])
            continue
        for trajectory in trajectories:
            runs += 1
            try:
                timings = anyio.run(replay, list(trajectory.messages), config)
            except Exception:
                crashed += 1
                print(f"CRASH {trajectory.id}:\n{traceback.format_exc(limit=6)}")
                continue
            turns.extend(timings)
            slowest_run = max(slowest_run, sum(timings))
    print(f"runs {runs}, crashed {crashed}, unreadable files {unreadable}, turns {len(turns)}")
    if turns:
        ordered = sorted(turns)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        print(
            f"per turn: median {statistics.median(turns) * 1e6:.0f} us, "
            f"p99 {p99 * 1e3:.2f} ms, max {ordered[-1] * 1e3:.1f} ms; "
            f"slowest whole run {slowest_run:.2f} s"
        )


if __name__ == "__main__":
    main()
