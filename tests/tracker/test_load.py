"""Many trackers at once against one shared judge client: no cross-talk, no corruption.

An agent host runs one tracker per conversation on one event loop, all sharing a model
client. Each tracker's verdicts must be exactly those of a solo run of its own history,
overlapping calls on one tracker must queue, and memory must not grow with the turns.
Timing is left to ``evals/bench_load.py``; here only a loose memory sanity bound.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import tracemalloc
from typing import Any

import anyio
import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.llm.client import ModelReply

pytestmark = pytest.mark.anyio

TRACKERS = 1_000
TURNS = 10
FAST, CONFIRM = "fake/fast", "fake/confirm"
# Kinds of scripted history; tracker i follows kind i % len(KINDS).
KINDS = ("reads", "repeat", "cycle", "chatter")
# Per tracker after many turns: normalized windows, detector state and the schedule come
# to tens of KB (evals/bench_load.py measures it); 256 KB flags a leak, not a regression.
MEMORY_PER_TRACKER_BOUND = 256 * 1024


def _assistant(cid: str, name: str, args: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def scripted_history(i: int, turns: int) -> list[dict[str, Any]]:
    """Tracker i's conversation: its own task text, one of four behaviours."""
    kind = KINDS[i % len(KINDS)]
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": f"task #{i}: tidy repository {i}"},
    ]
    for t in range(turns):
        cid = f"c{i}_{t}"
        if kind == "reads":
            history.append(_assistant(cid, "read_file", {"path": f"r{i}/{t}.py"}))
            history.append({"role": "tool", "tool_call_id": cid, "content": f"body {i}.{t}"})
        elif kind == "repeat":  # the same write, same result, from turn 3 on
            args = {"path": f"w{i}.py", "text": "x"} if t >= 2 else {"path": f"p{t}.py"}
            history.append(_assistant(cid, "write_file", args))
            history.append({"role": "tool", "tool_call_id": cid, "content": "written"})
        elif kind == "cycle":  # A-B-A-B with identical results
            name = ("open_tab", "close_tab")[t % 2]
            history.append(_assistant(cid, name, {"tab": i}))
            history.append({"role": "tool", "tool_call_id": cid, "content": f"{name} ok"})
        else:  # prose and searches that find something new each time
            history.append(_assistant(cid, "search", {"q": f"step {t}"}, f"Now step {t} of {i}."))
            history.append({"role": "tool", "tool_call_id": cid, "content": f"hit {t * i}"})
    return history


def prefixes(history: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The history at the start of each turn after the task."""
    return [history[: 4 + 2 * t] for t in range((len(history) - 2) // 2)]


TASK_ID = re.compile(r"task #(\d+)")


class EchoJudge:
    """One client shared by every tracker; its answer depends only on the prompt.

    The confidence comes from the task number in the prompt, and each request sleeps a
    little (longer for some trackers) so that checks of different trackers interleave. A
    tracker that sent another's transcript, or got another's answer, would diverge from
    its solo run.
    """

    def __init__(self) -> None:
        self.in_flight = 0
        self.max_in_flight = 0

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        match = TASK_ID.search(messages[1]["content"])
        assert match is not None
        i = int(match.group(1))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await anyio.sleep(0.001 * (i % 3))
        finally:
            self.in_flight -= 1
        confidence = 0.95 if i % 5 == 0 else round(0.1 * (i % 9), 2)
        if model == CONFIRM:
            confidence = 0.2 if i % 10 == 0 else 0.97
        body = json.dumps(
            {
                "unproductive_state_analysis": f"tracker {i} turn",
                "unproductive_state_confidence": confidence,
            }
        )
        return ModelReply(body, "stop", 100 + i, 10, None, 1)


# One frozen config shared by all trackers: building a TrackerConfig reads the environment
# (~10 ms), which would dominate this file.
CONFIG = TrackerConfig(
    fast_model=FAST,
    confirm_model=CONFIRM,
    check_after_turns=3,
    initial_interval=2,
    min_interval=2,
    max_interval=4,
    # The optional embedding detector runs a small ONNX model per tool call and has its own
    # tests; here it would only multiply the run time of a bookkeeping test by ~3.
    semantic="off",
)


def make_tracker(client: Any) -> LoopTracker:
    return LoopTracker(CONFIG, client=client)


def fingerprint(verdict: Verdict) -> tuple[Any, ...]:
    """Everything in a verdict except timings."""
    calls = tuple(
        (c.model, c.stage, c.confidence, c.analysis, c.prompt_tokens, c.error)
        for c in verdict.judge_calls
    )
    return (
        verdict.looping,
        verdict.source,
        verdict.kind,
        verdict.confidence,
        verdict.analysis,
        tuple(verdict.evidence),
        verdict.action,
        verdict.turn,
        tuple(verdict.errors),
        calls,
    )


async def run_solo(i: int) -> list[tuple[Any, ...]]:
    tracker = make_tracker(EchoJudge())
    history = scripted_history(i, TURNS)
    return [fingerprint(await tracker.turn_started(h)) for h in prefixes(history)]


@pytest.mark.slow
async def test_thousand_trackers_no_cross_talk() -> None:
    client = EchoJudge()
    trackers = [make_tracker(client) for _ in range(TRACKERS)]
    histories = [scripted_history(i, TURNS) for i in range(TRACKERS)]
    got: dict[int, list[tuple[Any, ...]]] = {i: [] for i in range(TRACKERS)}

    async def drive(i: int) -> None:
        for history in prefixes(histories[i]):
            got[i].append(fingerprint(await trackers[i].turn_started(history)))
            await anyio.sleep(0)  # let the others in between turns too

    async with anyio.create_task_group() as tg:
        for i in range(TRACKERS):
            tg.start_soon(drive, i)
    assert client.max_in_flight > 100  # the checks really overlapped
    for i in range(TRACKERS):
        assert got[i] == await run_solo(i), f"tracker {i} diverged from its solo run"
    loops = {KINDS[i % len(KINDS)] for i in range(TRACKERS) if any(f[0] for f in got[i])}
    assert {"repeat", "cycle"} <= loops  # the scripts do produce verdicts to compare


@pytest.mark.slow
async def test_overlapping_calls_on_one_tracker_are_serialized() -> None:
    class Tracing(EchoJudge):
        async def complete(self, model: str, messages: Any, *, schema: Any) -> ModelReply:
            assert self.in_flight == 0, "two checks of one tracker overlapped"
            return await super().complete(model, messages, schema=schema)

    client = Tracing()
    tracker = make_tracker(client)
    history = scripted_history(4, 60)  # plain reads: the judge is asked every few turns
    calls = prefixes(history)
    verdicts: list[Verdict] = []

    async def turn(h: list[dict[str, Any]]) -> None:
        verdicts.append(await tracker.turn_started(h))

    async with anyio.create_task_group() as tg:
        for h in calls:  # all 60 at once, in order
            tg.start_soon(turn, h)
    assert client.max_in_flight == 1
    assert [v.turn for v in verdicts] == list(range(1, len(calls) + 1))  # FIFO, no turn lost
    solo = make_tracker(EchoJudge())
    expected = [fingerprint(await solo.turn_started(h)) for h in calls]
    assert [fingerprint(v) for v in verdicts] == expected  # state not corrupted


@pytest.mark.slow
async def test_memory_per_tracker_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retained memory does not grow with turns (tracemalloc; a sanity bound, not a bench)."""
    # pytest keeps every log record of a test; the library logs each loop verdict, and those
    # records are the test runner's memory, not the trackers'.
    monkeypatch.setattr(logging.getLogger("judge"), "disabled", True)
    count, turns = 10, 120
    client = EchoJudge()
    histories = [scripted_history(i, turns) for i in range(count)]
    # `import judge` is lazy and the redaction rules compile on first use: a first run of
    # every history loads the modules and patterns these turns need, so process-wide
    # objects are not counted as tracker memory below.
    for history in histories:
        warm = make_tracker(client)
        for t, _ in enumerate(prefixes(history)):
            await warm.turn_started(history[: 4 + 2 * t])
    del warm
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        trackers = [make_tracker(client) for _ in range(count)]
        sizes = []
        for t, _ in enumerate(prefixes(histories[0])):
            for i in range(count):
                await trackers[i].turn_started(histories[i][: 4 + 2 * t])
            if t + 1 in (40, turns):
                gc.collect()
                sizes.append(tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    at_40, at_end = (s / count for s in sizes)
    assert at_end < MEMORY_PER_TRACKER_BOUND
    assert at_end < at_40 * 1.5 + 16 * 1024  # 3x the turns, not 3x the memory
