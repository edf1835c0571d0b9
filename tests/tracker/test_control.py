"""Control: the on_loop callback, a person's overrides, per-model and per-session settings."""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from judge import Action, LoopTracker, TrackerConfig, Verdict
from judge.turns import assistant_turn_ends
from tests.fakes import Agent

pytestmark = pytest.mark.anyio


def write_loop(repeats: int) -> list[dict[str, Any]]:
    agent = Agent()
    for _ in range(repeats):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    return agent.history


async def play(tracker: LoopTracker, history: list[dict[str, Any]]) -> list[Verdict]:
    return [await tracker.turn_started(history[:end]) for end in assistant_turn_ends(history)]


# -- on_loop ---------------------------------------------------------------------------------


async def test_sync_callback_changes_the_action() -> None:
    seen: list[Verdict] = []

    def on_loop(verdict: Verdict) -> Action:
        seen.append(verdict)
        return Action.STOP

    tracker = LoopTracker(TrackerConfig(), on_loop=on_loop)
    verdicts = await play(tracker, write_loop(3))
    assert len(seen) == 1 and seen[0].action is Action.WARN  # the ladder's own choice
    assert verdicts[-1].action is Action.STOP
    assert tracker.stats.actions == {"stop": 1}


async def test_async_callback_may_return_a_new_verdict() -> None:
    async def on_loop(verdict: Verdict) -> Verdict:
        await anyio.sleep(0)
        return verdict.model_copy(update={"action": Action.ASK_USER, "summary": "asked"})

    tracker = LoopTracker(TrackerConfig(), on_loop=on_loop)
    last = (await play(tracker, write_loop(3)))[-1]
    assert last.action is Action.ASK_USER and last.summary == "asked"


async def test_callback_string_action_and_none() -> None:
    answers: list[Any] = ["stop", None]
    tracker = LoopTracker(TrackerConfig(), on_loop=lambda v: answers.pop(0))
    verdicts = [v for v in await play(tracker, write_loop(4)) if v]
    assert [v.action for v in verdicts] == [Action.STOP, Action.WARN]


async def test_raising_callback_is_recorded_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    def on_loop(verdict: Verdict) -> None:
        raise RuntimeError("dashboard down")

    tracker = LoopTracker(TrackerConfig(), on_loop=on_loop)
    with caplog.at_level(logging.WARNING, logger="judge.response"):
        last = (await play(tracker, write_loop(3)))[-1]
    assert last and last.action is Action.WARN
    assert last.errors == ["on_loop failed: RuntimeError: dashboard down"]
    assert "dashboard down" in caplog.text
    assert tracker.stats.callback_errors == 1


async def test_async_raising_and_bad_return_values() -> None:
    async def boom(verdict: Verdict) -> None:
        raise ValueError("nope")

    tracker = LoopTracker(TrackerConfig(), on_loop=boom)
    assert "on_loop failed: ValueError: nope" in (await play(tracker, write_loop(3)))[-1].errors

    tracker = LoopTracker(TrackerConfig(), on_loop=lambda v: 42)
    last = (await play(tracker, write_loop(3)))[-1]
    assert last.action is Action.WARN and "on_loop returned 42" in last.errors[0]


# -- overrides -------------------------------------------------------------------------------


async def test_override_friction_grows() -> None:
    tracker = LoopTracker(TrackerConfig(override_silence_turns=3))
    history = write_loop(40)
    ends = assistant_turn_ends(history)
    turn = 0

    async def until_flag() -> tuple[Verdict, int]:
        nonlocal turn
        quiet = 0
        while True:
            verdict = await tracker.turn_started(history[: ends[turn]])
            turn += 1
            if verdict:
                return verdict, quiet
            # a silenced loop still shows as suspicion
            assert verdict.suspicion >= 0.9 or turn < 3
            quiet += 1

    first, _ = await until_flag()
    one = tracker.override(first, "the file system is slow; retries are expected")
    assert one.count == 1 and one.silenced_until is not None and not one.disabled
    assert "next 3 turns" in one.message
    _, quiet = await until_flag()
    assert quiet == 3
    two = tracker.override(first.pattern or "", "still fine")
    assert "next 6 turns" in two.message
    _, quiet = await until_flag()
    assert quiet == 6
    three = tracker.override(first, "stop asking")
    assert three.disabled and three.silenced_until is None
    assert "off for the rest of this session" in three.message
    rest = [await tracker.turn_started(history[:end]) for end in ends[turn:]]
    assert rest and not any(rest)
    assert [o.count for o in tracker.overrides] == [1, 2, 3]
    assert tracker.overrides[0].reason.startswith("the file system")
    assert tracker.stats.overrides == 3
    assert tracker.ladder_state.patterns[first.pattern or ""].disabled


async def test_override_needs_a_loop() -> None:
    tracker = LoopTracker(TrackerConfig())
    with pytest.raises(ValueError, match="names no pattern"):
        tracker.override(Verdict(), "x")
    with pytest.raises(TypeError):
        tracker.override("", "x")


async def test_override_of_a_silenced_pattern_does_not_hide_other_loops() -> None:
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    tracker = LoopTracker(TrackerConfig())
    flagged = [v for v in await play(tracker, agent.history) if v]
    tracker.override(flagged[0], "fine")
    for _ in range(3):
        agent.call("delete_file", {"path": "b.txt"}, "Deleted.")
    later = [v for v in await play(tracker, agent.history) if v]
    assert later and "delete_file" in (later[0].summary or "")


# -- per-model and per-session settings ------------------------------------------------------


def test_model_overrides_pick_the_matching_blocks() -> None:
    config = TrackerConfig(
        model_overrides={
            "gpt-4o*": {"modify_repeat_limit": 4},
            "gpt-4o-mini": {"recovery_turns": 9},
        }
    )
    mini = LoopTracker(config, agent_model="gpt-4o-mini")
    assert mini.config.modify_repeat_limit == 4 and mini.config.recovery_turns == 9
    assert LoopTracker(config, agent_model="gpt-4o").config.recovery_turns == 5
    assert LoopTracker(config, agent_model="claude-sonnet").config.modify_repeat_limit == 2
    assert LoopTracker(config).config.modify_repeat_limit == 2

    async def first_flag(tracker: LoopTracker) -> int | None:
        verdicts = await play(tracker, write_loop(6))
        return next((i + 1 for i, v in enumerate(verdicts) if v), None)

    assert anyio.run(first_flag, LoopTracker(config, agent_model="gpt-4o-mini")) == 5
    assert anyio.run(first_flag, LoopTracker(config, agent_model="claude")) == 3


def test_model_override_errors_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ValidationError,
        match=r"model_overrides\['gpt-\*'\].*failure_repeat_limit"
        r" must be at least 1",
    ):
        TrackerConfig(model_overrides={"gpt-*": {"failure_repeat_limit": 0}})
    with pytest.raises(ValidationError, match="not a TrackerConfig field: treshold"):
        TrackerConfig(model_overrides={"*": {"treshold": 3}})
    with pytest.raises(ValidationError, match="min_interval"):
        TrackerConfig(model_overrides={"*": {"min_interval": 50}})
    blocks = {"llama*": {"preset": "aggressive"}}
    monkeypatch.setenv("LOOP_JUDGE_MODEL_OVERRIDES", json.dumps(blocks))
    config = TrackerConfig()
    assert config.for_model("llama-3.1-8b").modify_repeat_limit == 1  # the aggressive preset
    assert config.for_model("gpt-4o").modify_repeat_limit == 2
