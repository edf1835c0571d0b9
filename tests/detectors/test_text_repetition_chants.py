"""Short chants: the same short reply again and again, a final answer that
degenerates into one word, and the short openers productive agents repeat by habit.

The existing rules already cover these (a short message 5x in a row with nothing new,
a short sentence 8x back to back); on the labelled data no run chants, while productive
coding agents open a dozen messages with "Good!" each, so no looser rule is added.
"""

from __future__ import annotations

from typing import Any

import pytest

from judge import LoopKind, LoopTracker, TrackerConfig
from judge.detectors import text_repetition as tr
from tests.fakes import Agent

pytestmark = pytest.mark.anyio


def tracker() -> LoopTracker:
    return LoopTracker(TrackerConfig(semantic="off"))


async def said(agent: Agent, text: str, reply: str) -> Any:
    agent.say(text)
    agent.user(reply)
    return await agent.tracker.turn_started(agent.messages)


@pytest.mark.parametrize("chant", ["I'll send.", "Yes.", "Done."])
async def test_a_short_reply_chanted_to_the_same_nudge_is_a_loop(chant: str) -> None:
    agent = Agent(tracker(), task="Send the weekly report to the team.")
    verdicts = [await said(agent, chant, "ok") for _ in range(tr.SHORT_MESSAGE_REPEATS)]
    assert not any(verdicts[:-1])
    assert verdicts[-1] and verdicts[-1].kind is LoopKind.TEXT_REPETITION


async def test_the_same_short_answer_to_new_questions_is_no_chant() -> None:
    agent = Agent(tracker(), task="A few quick checks before the release, please.")
    questions = [
        "Is the changelog updated for this release?",
        "Did the nightly build pass on all three platforms?",
        "Are the migration notes linked from the README?",
        "Have the translators signed off on the new strings?",
        "Is the version number bumped in pyproject.toml?",
        "Did you tag the release commit in git?",
    ]
    for question in questions:
        assert not await said(agent, "Yes.", question)


async def test_a_final_answer_that_degenerates_is_caught_on_that_message() -> None:
    agent = Agent(tracker(), task="Fix the failing date parser test.")
    agent.call("bash", {"command": "pytest tests/test_dates.py"}, "1 passed")
    assert not await agent.tracker.turn_started(agent.messages)
    fine = "The parser now accepts ISO week dates and the test passes. " + "Done. " * (
        tr.SHORT_SENTENCE_RUN - 1
    )
    agent.say(fine)
    assert not await agent.tracker.turn_started(agent.messages)
    agent.user("Thanks, anything else to check?")
    agent.say("Nothing else; the fix is complete. " + "Done. " * tr.SHORT_SENTENCE_RUN)
    verdict = await agent.tracker.turn_started(agent.messages)
    assert verdict and verdict.kind is LoopKind.TEXT_REPETITION
    assert verdict.evidence == [len(agent.messages) - 1]


async def test_a_habitual_opener_beside_new_work_is_no_chant() -> None:
    # mini-swe-agent on deepseek opens a dozen messages with "Good!" in productive runs.
    agent = Agent(tracker(), task="Fix the failing date parser test.")
    for step in range(12):
        agent.call(
            "bash",
            {"command": f"sed -n '{10 * step},{10 * step + 9}p' dates.py"},
            f"<returncode>0</returncode>\n<output>\nline {10 * step} of dates.py\n</output>",
            text=f"Good! Now let me read the next part of dates.py, lines {10 * step} on.",
        )
        assert not await agent.tracker.turn_started(agent.messages)
