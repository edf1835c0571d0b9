"""A harness that nags: the same corrective message after the same prose answer.

The histories are shaped like Moatless Tools' nag loops in ``evals/coding_dev`` (an answer
in prose, "provide a tool call", one token search, the answer again) but written for these
tests: a cache that fills twice, not any run's words.
"""

from __future__ import annotations

from typing import Any

import pytest

from judge import LoopKind, LoopTracker, TrackerConfig
from judge.detectors import repeated_feedback as rf
from judge.detectors.text_repetition import COMPARE_CHARS
from judge.history import normalize_message
from judge.response.recovery import RECOVERY_FENCE
from tests.fakes import Agent

pytestmark = pytest.mark.anyio

NAG = "You are running unattended and nobody reads prose here. Reply with a tool call."

# One plan, paraphrased three times: what a stuck agent keeps telling a user who is not there.
SAME_PLAN = [
    "The duplicate rows come from the cache being filled twice: once by the warm-up job and "
    "once by the first request. To fix it, clear the stale cache entries before the refresh "
    "runs, then run the refresh again and check that each key appears only once afterwards.",
    "So the duplicates appear because the cache is filled twice, by the warm-up job and then "
    "by the first request. The fix: clear the stale cache entries before the refresh runs, "
    "run the refresh once more, and check that every key now appears only once.",
    "To resolve the duplicate rows: the cache gets filled twice (the warm-up job, then the "
    "first request). Clear the stale cache entries before the refresh runs, then run the "
    "refresh again and verify each key appears only once in the cache afterwards.",
]
# Three answers about three different steps: nagged each time, but moving on.
NEW_STEPS = [
    "The warm-up job is defined in scheduler/jobs.py and registers itself at import time, "
    "which explains why it starts before the web workers. I want to see the registration "
    "order next, so the scheduler configuration is what I will open.",
    "Looking at settings.py, the CACHE_BACKEND points at a local memory cache in tests and at "
    "Redis in production, so the double fill can only happen with Redis. Worth checking the "
    "connection pool size and whether two processes share one database index.",
    "Test results: 14 passed, 2 failed, both in test_refresh_order with a timeout after 30 "
    "seconds. The failures look unrelated to ordering; they wait on a lock that is never "
    "released when the worker exits early, which is a separate bug in the teardown.",
]


def observation(text: str) -> str:
    return f"<observation>\n{text}\n</observation>"


def tracker() -> LoopTracker:
    return LoopTracker(TrackerConfig(semantic="off"))


def moatless(t: LoopTracker | None = None) -> Agent:
    return Agent(t or tracker(), task="<task>Rows are duplicated after a refresh.</task>")


async def search(agent: Agent, step: int) -> Any:
    """One token search with a new result, then the tracker's turn."""
    agent.call(
        "SemanticSearch",
        {"query": f"cache refresh duplicate rows, attempt {step}"},
        observation(f"Found {step + 3} code sections.\ncache/refresh_{step}.py"),
        text="<thoughts>Let me search once more.</thoughts>",
    )
    return await agent.turn()


async def nagged(agent: Agent, answer: str) -> Any:
    """A prose answer, the harness's nag, then the tracker's turn."""
    agent.say(answer)
    agent.user(NAG)
    return await agent.turn()


async def test_the_same_answer_nagged_three_times_is_a_loop() -> None:
    agent = moatless()
    verdicts = []
    for step, answer in enumerate(SAME_PLAN):
        assert not await search(agent, step)
        verdicts.append(await nagged(agent, answer))
    assert not verdicts[0] and not verdicts[1]
    flagged = verdicts[2]
    assert flagged and flagged.kind is LoopKind.ERROR_CYCLE
    assert flagged.source == "heuristic:repeated_feedback"
    # cites each answer and the nag after it, the newest nag last
    nags = [i for i, m in enumerate(agent.messages) if m.get("content") == NAG]
    assert nags[-1] == max(flagged.evidence)
    assert set(nags) <= set(flagged.evidence)


async def test_nagged_twice_then_productive_is_not_a_loop() -> None:
    agent = moatless()
    for step, answer in enumerate(SAME_PLAN[:2]):
        assert not await search(agent, step)
        assert not await nagged(agent, answer)
    agent.call("str_replace_editor", {"command": "create", "path": "fix.py"}, observation("ok"))
    assert not await agent.turn()
    for step in range(2, 6):
        assert not await search(agent, step)


async def test_different_answers_nagged_each_time_are_progress() -> None:
    agent = moatless()
    for step, answer in enumerate([*NEW_STEPS, SAME_PLAN[0]]):
        assert not await search(agent, step)
        assert not await nagged(agent, answer)


async def test_a_file_changed_between_the_nags_answers_them() -> None:
    agent = moatless()
    for step, answer in enumerate(SAME_PLAN):
        agent.call(
            "str_replace_editor",
            {"command": "str_replace", "path": "cache.py", "new_str": f"clear({step})"},
            observation(f"The file cache.py has been edited (version {step})."),
        )
        assert not await agent.turn()
        assert not await nagged(agent, answer)


@pytest.mark.parametrize(
    ("searches", "looping"),
    [
        # three answers in NAG_WINDOW assistant turns, first to last: one search, then two
        ((1, rf.NAG_WINDOW - 4), True),
        # one turn more: the same nag now and then, an occasional slip
        ((1, rf.NAG_WINDOW - 3), False),
    ],
)
async def test_the_window_holds_the_three_answers(searches: tuple[int, int], looping: bool) -> None:
    agent = moatless()
    step = 0
    verdict = await nagged(agent, SAME_PLAN[0])
    for answer, between in zip(SAME_PLAN[1:], searches, strict=True):
        for _ in range(between):
            assert not await search(agent, step)
            step += 1
        verdict = await nagged(agent, answer)
    assert bool(verdict) is looping


async def test_short_narrations_nagged_are_not_answers() -> None:
    agent = moatless()
    for step in range(4):
        assert not await search(agent, step)
        assert not await nagged(agent, "Let me look at the cache refresh code next.")


async def test_an_agent_that_obeys_the_recovery_message_is_not_flagged_again() -> None:
    agent = moatless()
    for step, answer in enumerate(SAME_PLAN):
        await search(agent, step)
        flagged = await nagged(agent, answer)
    assert flagged and agent.messages[-1]["content"].startswith(RECOVERY_FENCE)
    # It obeys: first its plan, in prose (the harness nags that too), then new work.
    assert not await nagged(agent, "My plan: " + SAME_PLAN[0])
    agent.call("str_replace_editor", {"command": "create", "path": "fix.py"}, observation("ok"))
    assert not await agent.turn()
    for step in range(3, 9):
        assert not await search(agent, step)


async def test_a_relapse_after_the_recovery_message_is_caught_again() -> None:
    agent = moatless()
    for step, answer in enumerate(SAME_PLAN):
        await search(agent, step)
        flagged = await nagged(agent, answer)
    assert flagged
    again = []
    for step, answer in enumerate(SAME_PLAN, start=3):
        await search(agent, step)
        again.append(await nagged(agent, answer))
    assert not again[0] and not again[1]  # counted afresh after the recovery message
    assert again[2] and again[2].kind is LoopKind.ERROR_CYCLE


def test_our_recovery_message_is_never_the_nag() -> None:
    detector = rf.RepeatedFeedbackDetector()
    recovery = f"{RECOVERY_FENCE}\nLoop detected: you keep answering in prose.\n```"
    index = 0
    for step, answer in enumerate(SAME_PLAN * 2):
        messages = [
            {"role": "assistant", "content": f"Searching ({step})."},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": recovery},
        ]
        for raw in messages:
            found = detector.observe(normalize_message(raw, index))
            index += 1
            assert found is None


async def test_the_count_survives_a_saved_and_restored_tracker() -> None:
    config = TrackerConfig(semantic="off")
    agent = moatless(LoopTracker(config))
    for step, answer in enumerate(SAME_PLAN[:2]):
        await search(agent, step)
        assert not await nagged(agent, answer)
    agent.tracker = LoopTracker.from_state(config, agent.tracker.state.model_dump_json())
    await search(agent, 2)
    assert await nagged(agent, SAME_PLAN[2])


def test_a_huge_answer_costs_a_bounded_comparison() -> None:
    detector = rf.RepeatedFeedbackDetector()
    # No punctuation, no fences: the worst shape for the prose filter, a megabyte long.
    huge = "cache " * 200_000
    index = 0
    for _ in range(rf.NAG_REPEATS):
        for raw in ({"role": "assistant", "content": huge}, {"role": "user", "content": NAG}):
            found = detector.observe(normalize_message(raw, index))
            index += 1
    assert found is not None and found.score >= 0.9
    kept = [entry[3] for entry in detector._nags]
    assert all(len(text) <= COMPARE_CHARS for text in kept)
