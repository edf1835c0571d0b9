"""How do 1,000 trackers fare on one event loop, sharing one (fake) judge?

An agent host keeps one tracker per live conversation. This script runs ``--trackers``
trackers concurrently for ``--turns`` turns each, every turn a ``turn_started`` with the
conversation's growing history, against a judge client that answers after a few
milliseconds (no network). It reports:

- wall time of the whole run, and turns per second;
- peak memory: tracemalloc's peak and the process's peak RSS;
- memory per tracker: what the trackers still hold after the last turn (tracemalloc, after
  a garbage collection), divided by their number; the histories are the caller's and are
  built before the baseline, so they are not counted.

The wall time is taken in a run without tracemalloc (it slows Python allocation about 2x);
the memory figures in a second run with it.

Run from the repository root:  .venv/bin/python evals/bench_load.py
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import sys
import time
import tracemalloc
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig
from judge.llm._litellm import ModelReply

FAST, CONFIRM = "fake/fast", "fake/confirm"
# The judge's simulated latency: a few ms keeps checks of different trackers overlapping
# without making the benchmark about sleeping.
JUDGE_LATENCY_S = 0.003
# Default schedule (check from turn 30, every 5-15 turns): what a deployment would run.
CONFIG = TrackerConfig(fast_model=FAST, confirm_model=CONFIRM)
KINDS = ("reads", "edits", "searches", "tests")


class FakeJudge:
    """Answers "no loop" with a confidence that varies by task, after a short sleep."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        self.calls += 1
        await anyio.sleep(JUDGE_LATENCY_S)
        confidence = (len(messages[1]["content"]) % 7) / 10
        body = json.dumps(
            {
                "unproductive_state_analysis": "progressing",
                "unproductive_state_confidence": confidence,
            }
        )
        return ModelReply(body, "stop", 3000, 40, None, 1)


def body_for(kind: str, turns: int) -> list[dict[str, Any]]:
    """Varied, productive work (no heuristic fires), shared by every tracker of a kind."""
    msgs: list[dict[str, Any]] = []
    for t in range(turns):
        cid = f"{kind}_{t}"
        args = json.dumps({"path": f"src/{kind}/{t}.py", "line": t})
        msgs.append(
            {
                "role": "assistant",
                "content": f"Next: {kind} step {t}.",
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": kind, "arguments": args}}
                ],
            }
        )
        msgs.append(
            {
                "role": "tool",
                "tool_call_id": cid,
                "content": f"result {t} of {kind}: " + "data " * (20 + t % 30),
            }
        )
    return msgs


def rss_now_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except OSError:
        return 0
    return pages * resource.getpagesize()


def peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # Linux reports KiB


async def run(trackers: int, turns: int, *, measure: bool) -> dict[str, float]:
    bodies = {kind: body_for(kind, turns) for kind in KINDS}
    heads = [
        [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": f"Task {i}: fix issue #{i} in the repository."},
        ]
        for i in range(trackers)
    ]
    client = FakeJudge()
    gc.collect()
    if measure:
        tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0] if measure else 0
    pool = [LoopTracker(CONFIG, client=client) for _ in range(trackers)]
    flagged = 0

    async def drive(i: int) -> None:
        nonlocal flagged
        head, body = heads[i], bodies[KINDS[i % len(KINDS)]]
        for t in range(1, turns + 1):
            verdict = await pool[i].turn_started(head + body[: 2 * t])
            flagged += bool(verdict)

    started = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for i in range(trackers):
            tg.start_soon(drive, i)
    wall = time.perf_counter() - started
    out = {
        "wall_s": wall,
        "turns_per_s": trackers * turns / wall,
        "judge_calls": client.calls,
        "flagged": flagged,
        "peak_rss_mb": peak_rss_bytes() / 2**20,
        "rss_mb": rss_now_bytes() / 2**20,
    }
    if measure:
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["tracemalloc_peak_mb"] = (peak - base) / 2**20
        out["per_tracker_kb"] = (current - base) / trackers / 1024
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trackers", type=int, default=1_000)
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    timed = anyio.run(lambda: run(args.trackers, args.turns, measure=False))
    measured = anyio.run(lambda: run(args.trackers, args.turns, measure=True))
    print(f"{args.trackers} trackers x {args.turns} turns, concurrent on one event loop")
    print(
        f"  wall time              {timed['wall_s']:.1f} s "
        f"({timed['turns_per_s']:,.0f} turns/s, {timed['judge_calls']} judge calls, "
        f"{timed['flagged']} loop verdicts)"
    )
    print(
        f"  peak RSS               {max(timed['peak_rss_mb'], measured['peak_rss_mb']):.0f} MB"
        f" (process, interpreter and libraries included; {timed['rss_mb']:.0f} MB after run)"
    )
    print(f"  tracemalloc peak       {measured['tracemalloc_peak_mb']:.1f} MB (trackers + run)")
    print(f"  memory per tracker     {measured['per_tracker_kb']:.1f} KB after {args.turns} turns")


if __name__ == "__main__":
    main()
