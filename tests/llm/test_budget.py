"""Judge spending limits (calls, tokens) and the prompt-size cap."""

from __future__ import annotations

import math
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge.errors import JudgeTimeout
from judge.history import normalize_history
from judge.llm.budget import CHARS_PER_TOKEN, JudgeBudget
from judge.llm.transcript import build_prompt, fit_prompt
from judge.testing import ScriptedJudge
from tests.fakes import answer, fake_judge, looping_history

pytestmark = pytest.mark.anyio
FAST, CONFIRM = "fake/fast", "fake/confirm"
# fake_judge reports 100 prompt + 20 completion tokens per call (FAKE_USAGE).
FAKE_CALL_TOKENS = 120


def every_turn(**cfg: Any) -> TrackerConfig:
    """A judge due on every turn whatever it answers."""
    base: dict[str, Any] = {
        "fast_model": FAST,
        "check_after_turns": 1,
        "initial_interval": 1,
        "min_interval": 1,
        "max_interval": 1,
    }
    return TrackerConfig(**{**base, **cfg})


async def turns(tracker: LoopTracker, n: int) -> list[Any]:
    history = looping_history(n)
    return [await tracker.turn_started(history[: 4 + 2 * i]) for i in range(n)]


async def test_call_budget_then_heuristics_only() -> None:
    client = fake_judge({FAST: [answer(0.2)]})
    tracker = LoopTracker(every_turn(max_judge_calls=3), client=client)
    verdicts = await turns(tracker, 6)
    assert len(client.calls_to(FAST)) == 3
    assert [len(v.judge_calls) for v in verdicts] == [1, 1, 1, 0, 0, 0]
    assert all(v.errors == ["judge budget spent: 3 of 3 calls used"] for v in verdicts[3:])
    assert tracker.judge_calls_used == 3
    assert tracker.judge_tokens_used == 3 * FAKE_CALL_TOKENS


async def test_last_call_goes_to_the_fast_model_and_is_trusted() -> None:
    client = fake_judge({FAST: [answer(0.95, "stuck")], CONFIRM: [answer(0.1)]})
    tracker = LoopTracker(every_turn(confirm_model=CONFIRM, max_judge_calls=1), client=client)
    verdict = (await turns(tracker, 1))[0]
    assert verdict and verdict.confidence == 0.95
    assert len(client.calls_to(CONFIRM)) == 0
    assert verdict.errors == [
        "judge budget spent: 1 of 1 calls used by the fast judge; confirm judge "
        f"{CONFIRM} not asked, trusting the fast model"
    ]
    assert tracker.judge_calls_used == 1


async def test_token_budget() -> None:
    client = fake_judge({FAST: [answer(0.2)]})
    tracker = LoopTracker(every_turn(max_judge_tokens=250), client=client)
    verdicts = await turns(tracker, 5)
    assert len(client.calls_to(FAST)) == 3  # 120, 240, then 360 crosses 250: no fourth check
    assert verdicts[3].errors == ["judge budget spent: 360 of 250 tokens used"]
    assert tracker.judge_tokens_used == 360


async def test_zero_budget_never_calls() -> None:
    client = fake_judge({FAST: [answer(0.2)]})
    tracker = LoopTracker(every_turn(max_judge_calls=0), client=client)
    verdicts = await turns(tracker, 2)
    assert client.requests == [] and all(v.errors for v in verdicts)


async def test_calls_without_usage_are_charged_an_estimate() -> None:
    client = ScriptedJudge.per_model(
        {FAST: [JudgeTimeout("slow"), answer(0.2)]}, usage=(None, None, None)
    )
    tracker = LoopTracker(every_turn(), client=client)
    await turns(tracker, 2)
    chars = [sum(len(m["content"]) for m in prompt) for _, prompt in client.requests]
    assert tracker.judge_tokens_used == sum(math.ceil(c / CHARS_PER_TOKEN) for c in chars)
    assert tracker.judge_calls_used == 2


def test_budget_reason_text() -> None:
    budget = JudgeBudget(max_calls=None, max_tokens=None)
    budget.calls_used = budget.tokens_used = 10**9
    assert budget.spent() is None and budget.calls_left() is None


def test_budget_config_bounds() -> None:
    with pytest.raises(ValueError, match="LOOP_JUDGE_MAX_JUDGE_TOKENS"):
        TrackerConfig(max_judge_tokens=-5)
    assert TrackerConfig().max_judge_calls is None  # unlimited unless set


# -- the prompt cap --------------------------------------------------------------------


def big_history(n: int, size: int) -> list[dict[str, Any]]:
    history = looping_history(n, task="T" * 5000)
    for msg in history[2:]:
        msg["content"] = (msg.get("content") or "") + "x" * size
    return history


def test_prompt_cap_drops_oldest_messages_never_the_task() -> None:
    msgs = normalize_history(big_history(10, 3000))
    uncapped = build_prompt(msgs[2:], msgs[1], message_chars=2000, task_chars=2000)
    assert sum(len(m["content"]) for m in uncapped) > 20_000
    window, prompt = fit_prompt(
        msgs[2:], msgs[1], message_chars=2000, task_chars=2000, max_chars=20_000
    )
    assert sum(len(m["content"]) for m in prompt) <= 20_000
    assert 0 < len(window) < len(msgs) - 2
    assert window[-1] == msgs[-1]  # the newest messages stay
    assert window[0].role == "assistant"  # no result left without its call
    assert "TTTT" in prompt[1]["content"]  # the task stays
    assert f"({len(window)} messages" in prompt[1]["content"]


def test_prompt_cap_keeps_the_task_even_when_nothing_else_fits() -> None:
    msgs = normalize_history(big_history(2, 3000))
    window, prompt = fit_prompt(
        msgs[2:], msgs[1], message_chars=2000, task_chars=2000, max_chars=100
    )
    assert window == [] and "TTTT" in prompt[1]["content"]


async def test_tracker_applies_the_cap() -> None:
    client = fake_judge({FAST: [answer(0.95)]})
    tracker = LoopTracker(every_turn(max_prompt_chars=12_000, history_messages=20), client=client)
    verdict = await tracker.turn_started(big_history(10, 3000))
    assert sum(len(m["content"]) for m in client.requests[0][1]) <= 12_000
    # evidence names only the messages the judge was shown
    assert verdict and verdict.evidence and min(verdict.evidence) > 10
