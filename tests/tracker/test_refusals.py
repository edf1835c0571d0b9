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
from judge.detectors.revisit import READ_RUN_LIMIT
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
    """The read rule (two identical answers in a row) refuses the 3rd identical read and
    every one after it, as the repeat rule does for commands."""
    agent = Agent(LoopTracker(CONFIG))
    weather = json.dumps({"city": "Paris", "temp_c": 12})
    for _ in range(8):
        await agent.step("get_weather", {"city": "Paris"}, weather)
    assert agent.ran == READ_RUN_LIMIT == 2
    assert [v.action for v in agent.refusals[:4]] == LADDER
    assert "read with the same arguments 2x in a row" in (agent.refusals[0].summary or "")
    assert not any(agent.turns)


async def test_several_refusals_before_a_turn_keep_the_chain() -> None:
    """Parallel calls: two identical calls refused before the next turn, both echoed in
    one message; neither echo is read as an attempt with a new result."""
    tracker = LoopTracker(CONFIG)
    agent = Agent(tracker)
    for _ in range(2):
        await agent.step("bash", PYTEST, FAILURE)
    first, second = tracker.check_call("bash", PYTEST), tracker.check_call("bash", PYTEST)
    assert first.looping and second.looping
    calls = [{"id": f"p{n}", "type": "function", "function": {"name": "bash"}} for n in range(2)]
    for call in calls:
        call["function"]["arguments"] = json.dumps(PYTEST)
    agent.history.append({"role": "assistant", "content": "", "tool_calls": calls})
    for verdict, call in zip((first, second), calls, strict=True):
        result = verdict.recovery_message or "refused"
        agent.history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    assert not await tracker.turn_started(agent.history)
    third = tracker.check_call("bash", PYTEST)
    assert [v.action for v in (first, second, third)] == LADDER[:3]


async def test_a_call_allowed_after_an_override_is_read_as_it_ran() -> None:
    """Refused, never echoed (a hook that skips denied calls), then a person overrides
    and the call runs: its real result is read, not taken for the refusal's echo."""
    agent = Agent(LoopTracker(CONFIG), echo=False)
    for _ in range(3):
        await agent.step("bash", PYTEST, FAILURE)
    assert agent.ran == 2 and len(agent.refusals) == 1
    agent.tracker.override(agent.refusals[0], "it is flaky, retry it")
    assert not await agent.step("bash", PYTEST, "1 passed in 0.10s")
    assert agent.ran == 3
    # The passing run was read: the repeat detector's run of failures is over, a new run
    # of one passing call began (as its saved state shows).
    exact = agent.tracker.state.detectors["detectors"]["exact_repeat"]
    assert exact["_count"] == 1 and exact["_all_failed"] is False


async def test_an_override_of_one_detectors_pattern_leaves_the_others() -> None:
    """Three identical reads are both an exact repeat and a re-read: overriding the one
    the turn showed does not let the call through while the other still holds."""
    agent = Agent(LoopTracker(CONFIG))
    for _ in range(4):
        await agent.step("bash", {"command": "cat src/app.py"}, "def total(x): return x")
    flagged = next(v for v in agent.refusals + agent.turns if v)
    agent.tracker.override(flagged, "I am editing it in another window")
    again = agent.tracker.check_call("bash", {"command": "cat src/app.py"})
    assert again.looping and again.pattern != flagged.pattern


async def test_a_read_with_another_offset_is_not_refused() -> None:
    """The preflight only refuses the identical call: another page, offset or range may
    read something new, which only its result can tell."""
    agent = Agent(LoopTracker(CONFIG))
    page = "def total(x): return x"
    for _ in range(3):
        await agent.step("read_file", {"path": "src/app.py", "offset": 0}, page)
    assert agent.tracker.check_call("read_file", {"path": "src/app.py", "offset": 0})
    for args in (
        {"path": "src/app.py", "offset": 50},
        {"path": "tests/app.py", "offset": 0},
        {"path": "src/app.py", "offset": 0, "limit": 20},
    ):
        assert not agent.tracker.check_call("read_file", args), args


async def test_a_state_saved_before_refusals_existed_still_loads() -> None:
    tracker = LoopTracker(CONFIG)
    agent = Agent(tracker)
    for _ in range(2):
        await agent.step("bash", PYTEST, FAILURE)
    state = json.loads(tracker.state.model_dump_json())
    saved = state["detectors"]["detectors"]
    saved["exact_repeat"].pop("_refused")
    for name in ("_refused", "_run_result", "_run_call"):
        saved["revisit"].pop(name)
    restored = LoopTracker.from_state(CONFIG, state)
    assert restored.check_call("bash", PYTEST).looping


async def test_no_refusal_once_the_ttl_window_has_expired() -> None:
    now = [1_000.0]
    config = TrackerConfig(semantic="off", ttl_seconds=60)
    tracker = LoopTracker(config)
    tracker._suite._clock = lambda: now[0]  # the window's clock, moved by hand
    agent = Agent(tracker)
    for _ in range(2):
        await agent.step("bash", PYTEST, FAILURE)
    assert tracker.check_call("bash", PYTEST, refuse=False).looping
    now[0] += 3_600
    assert not tracker.check_call("bash", PYTEST)
    assert tracker.detections == 0
