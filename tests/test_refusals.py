"""A call ``check_call`` refused stays refused until something changes.

An agent that checks each call before running it and refuses the looping ones: the
refused call counts as an attempt, each refusal climbs the ladder with its rung's text,
the refusal's echo in the history is not a new attempt (it used to break the repeat chain,
so two of every three identical failing calls ran after a block), and another call, a new
result or a person's message lets it run again.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge.verdict import Action, Verdict

pytestmark = pytest.mark.anyio

CONFIG = TrackerConfig(semantic="off")
PYTEST = {"command": "pytest tests/test_x.py"}
FAILURE = "FAILED tests/test_x.py::test_a - AssertionError: assert 1 == 2\n1 failed in 0.12s"
# The default ladder: warn, warn (forbid), ask the user, stop.
LADDER = [Action.WARN, Action.WARN, Action.ASK_USER, Action.STOP]


class Agent:
    """A stubborn agent loop: the same call each turn, checked first, refused calls
    answered with the refusal's recovery message (as frameworks record them)."""

    def __init__(self, tracker: LoopTracker, *, echo: bool = True) -> None:
        self.tracker = tracker
        self.history: list[dict[str, Any]] = [{"role": "user", "content": "fix the test"}]
        self.ran = 0
        self.refusals: list[Verdict] = []
        self.turns: list[Verdict] = []
        self.echo = echo

    async def step(self, name: str, args: dict[str, Any], result: str) -> Verdict:
        check = self.tracker.check_call(name, args)
        call_id = f"c{len(self.history)}"
        call = {"id": call_id, "type": "function", "function": {"name": name}}
        call["function"]["arguments"] = json.dumps(args)
        if check:
            self.refusals.append(check)
            if not self.echo:  # Claude Code: a denied call never reaches the history
                return check
            result = check.recovery_message or "refused"
        else:
            self.ran += 1
        self.history.append({"role": "assistant", "content": "", "tool_calls": [call]})
        self.history.append({"role": "tool", "tool_call_id": call_id, "content": result})
        turn = await self.tracker.turn_started(self.history)
        self.turns.append(turn)
        return check

    async def say(self, text: str) -> None:
        """A person's message, then the model's turn it starts."""
        self.history.append({"role": "user", "content": text})
        self.turns.append(await self.tracker.turn_started(self.history))


def _detections(verdicts: list[Verdict]) -> list[int]:
    found = (
        re.search(r"\(detection (\d+) of this loop", v.recovery_message or "") for v in verdicts
    )
    return [int(m.group(1)) if m else 0 for m in found]


@pytest.mark.parametrize("echo", [True, False], ids=["echoed", "not-in-history"])
async def test_a_refused_call_stays_refused_and_climbs_the_ladder(echo: bool) -> None:
    agent = Agent(LoopTracker(CONFIG), echo=echo)
    for _ in range(9):
        await agent.step("bash", PYTEST, FAILURE)
    # The failing run ran its limit (2 identical failures), never again.
    assert agent.ran == CONFIG.failure_repeat_limit
    assert [v.action for v in agent.refusals[:4]] == LADDER
    assert all(v.action is Action.STOP for v in agent.refusals[4:])
    # Each refusal is a detection with its rung's own text; the turns after the refusals
    # say nothing more (the refusal answered them), so nothing is counted twice.
    assert _detections(agent.refusals[:4]) == [1, 2, 3, 4]
    assert agent.tracker.detections == len(agent.refusals)
    assert not any(agent.turns)


async def test_the_count_shown_agrees_with_the_messages_cited() -> None:
    agent = Agent(LoopTracker(CONFIG))
    for _ in range(4):
        await agent.step("bash", PYTEST, FAILURE)
    first, second = agent.refusals[:2]
    # Two calls ran (messages 1 and 3), the 3rd was refused, then the 4th.
    assert first.evidence == [1, 3] and second.evidence == [1, 3]
    assert "called 2x in a row" in (first.summary or "")
    assert "Evidence: messages 1, 3" in (first.recovery_message or "")
    assert "called 2x in a row, the same error; attempt 3 refused" in (first.analysis or "")
    assert "attempt 4 refused" in (second.analysis or "")


async def test_the_advice_matches_the_rule() -> None:
    """The text says what the tracker enforces: run it again once something changed."""
    agent = Agent(LoopTracker(CONFIG))
    for _ in range(3):
        await agent.step("bash", PYTEST, FAILURE)
    text = agent.refusals[0].recovery_message or ""
    assert "until you have changed something it depends on" in text
    assert "for the rest of this task" not in text
    # ... and the tracker enforces it: after an edit the test run is allowed again.
    await agent.step("edit", {"path": "x.py", "old": "1", "new": "2"}, "File written")
    assert not await agent.step("bash", PYTEST, FAILURE)
    assert agent.ran == 4


async def test_a_persons_message_lets_it_run_once_more() -> None:
    agent = Agent(LoopTracker(CONFIG))
    for _ in range(3):
        await agent.step("bash", PYTEST, FAILURE)
    assert agent.ran == 2 and len(agent.refusals) == 1
    await agent.say("I installed the missing package, try again")
    # Allowed once: its real result is read (not taken for the refusal's echo) ...
    assert not await agent.step("bash", PYTEST, FAILURE)
    assert agent.ran == 3
    # ... the same failure again is a loop at that turn, one rung higher ...
    assert agent.turns[-1].looping and agent.turns[-1].action is Action.WARN
    assert _detections([agent.turns[-1]]) == [2]
    # ... and the identical call is refused again, higher still.
    refused = await agent.step("bash", PYTEST, FAILURE)
    assert refused.action is Action.ASK_USER and agent.ran == 3


async def test_a_new_result_ends_the_refusal() -> None:
    agent = Agent(LoopTracker(CONFIG))
    for _ in range(3):
        await agent.step("bash", PYTEST, FAILURE)
    await agent.step("read_file", {"path": "x.py"}, "def a(): return 1")
    assert not await agent.step("bash", PYTEST, "1 passed in 0.10s")
    assert agent.ran == 4


async def test_a_refusal_survives_save_and_restore() -> None:
    """A tracker restored between refusals refuses as one never saved would."""
    kept = Agent(LoopTracker(CONFIG))
    moved = Agent(LoopTracker(CONFIG))
    for _ in range(7):
        await kept.step("bash", PYTEST, FAILURE)
        await moved.step("bash", PYTEST, FAILURE)
        moved.tracker = LoopTracker.from_state(CONFIG, moved.tracker.state.model_dump_json())
    assert moved.ran == kept.ran == CONFIG.failure_repeat_limit
    assert [v.action for v in moved.refusals] == [v.action for v in kept.refusals]


async def test_a_preview_records_nothing() -> None:
    """``refuse=False``: a caller that cannot refuse (a watching hook) gets the verdict
    the next detection would get, and the call's real result counts as usual."""
    tracker = LoopTracker(CONFIG)
    agent = Agent(tracker)
    for _ in range(2):
        await agent.step("bash", PYTEST, FAILURE)
    preview = tracker.check_call("bash", PYTEST, refuse=False)
    again = tracker.check_call("bash", PYTEST, refuse=False)
    assert preview.looping and again.action is preview.action is Action.WARN
    assert tracker.detections == 0


async def test_an_overridden_loop_is_not_refused() -> None:
    agent = Agent(LoopTracker(CONFIG))
    for _ in range(3):
        await agent.step("bash", PYTEST, FAILURE)
    agent.tracker.override(agent.refusals[0], "flaky CI: retrying is right here")
    assert not agent.tracker.check_call("bash", PYTEST)


async def test_a_refused_read_stays_refused_whatever_the_tool_is_called() -> None:
    """The read rule (three identical answers in a row) refuses the 4th identical read and
    every one after it, as the repeat rule does for commands."""
    agent = Agent(LoopTracker(CONFIG))
    weather = json.dumps({"city": "Paris", "temp_c": 12})
    for _ in range(8):
        await agent.step("get_weather", {"city": "Paris"}, weather)
    assert agent.ran == 3
    assert [v.action for v in agent.refusals[:4]] == LADDER
    assert "read 'city=paris' 3x in a row" in (agent.refusals[0].summary or "")
    assert not any(agent.turns)
