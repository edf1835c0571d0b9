"""The tracker's judge path: two-stage decisions, schedule, faults, cancellation."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from judge import Action, LoopTracker, TrackerConfig, Verdict
from judge.errors import JudgeHTTPError, JudgeTimeout
from judge.testing import ScriptedJudge
from tests.fakes import answer, fake_judge, hang, looping_history

FAST, CONFIRM = "fake/fast", "fake/confirm"


def make(
    fast: list[Any], confirm: list[Any] | None = None, **cfg: Any
) -> tuple[LoopTracker, ScriptedJudge]:
    client = fake_judge({FAST: fast, CONFIRM: confirm or []})
    config = TrackerConfig(fast_model=FAST, confirm_model=CONFIRM if confirm else None, **cfg)
    return LoopTracker(config, client=client), client


async def run_turns(tracker: LoopTracker, n: int, start: int = 0) -> list[Verdict]:
    history = looping_history(start + n)
    verdicts = []
    for i in range(start, start + n):
        # the history at the start of turn i+1: system, user, then i assistant turns
        verdicts.append(await tracker.turn_started(history[: 2 + 2 * i]))
    return verdicts


pytestmark = pytest.mark.anyio


async def test_both_confident_is_a_loop() -> None:
    tracker, _client = make([answer(0.95, "same call")], [answer(0.97, "confirmed")])
    verdicts = await run_turns(tracker, 30)
    assert not any(verdicts[:29])
    v = verdicts[29]
    assert v and v.looping and v.source == "llm"
    assert v.confidence == 0.97 and v.analysis == "confirmed"
    assert [c.stage.value for c in v.judge_calls] == ["fast", "confirm"]
    assert [c.confidence for c in v.judge_calls] == [0.95, 0.97]
    assert v.action is Action.WARN
    # The analysis is for people: the explanation quotes it, the agent's orders do not.
    assert v.recovery_message and "confirmed" not in v.recovery_message
    assert '"confirmed"' in (v.explanation or "")
    assert v.evidence and all(isinstance(i, int) for i in v.evidence)


async def test_fast_below_threshold_skips_confirm() -> None:
    tracker, client = make([answer(0.4)], [answer(0.99)])
    v = (await run_turns(tracker, 30))[-1]
    assert not v and v.source == "llm" and v.confidence == 0.4
    assert len(client.calls_to(CONFIRM)) == 0
    assert len(client.calls_to(FAST)) == 1


async def test_fast_high_confirm_low_is_no_loop() -> None:
    tracker, _client = make([answer(0.95)], [answer(0.3, "progressing")])
    v = (await run_turns(tracker, 30))[-1]
    assert not v
    assert v.confidence == 0.3 and v.analysis == "progressing"
    # the interval adapts from the confirm model's confidence: 5 + 10 * 0.7 = 12
    assert tracker.check_interval == 12


async def test_confirm_unavailable_trusts_fast() -> None:
    tracker, _client = make([answer(0.93, "fast says loop")], [JudgeHTTPError("boom", status=503)])
    v = (await run_turns(tracker, 30))[-1]
    assert v and v.confidence == 0.93 and v.analysis == "fast says loop"
    assert v.judge_calls[1].error and "boom" in v.judge_calls[1].error
    assert any("trusting the fast model" in e for e in v.errors)


async def test_no_confirm_model_trusts_fast() -> None:
    tracker, _client = make([answer(0.91)])
    v = (await run_turns(tracker, 30))[-1]
    assert v and len(v.judge_calls) == 1


async def test_exactly_threshold_is_a_loop() -> None:
    tracker, _client = make([answer(0.9)], [answer(0.9)])
    v = (await run_turns(tracker, 30))[-1]
    assert v.looping and v.confidence == 0.9


@pytest.mark.parametrize(
    ("confidence", "expected"),
    [
        (0.0, [30, 45, 60, 75]),  # interval 15
        (0.5, [30, 40, 50, 60, 70, 80]),  # 5 + 10 * 0.5 = 10
        (0.25, [30, 43, 56, 69]),  # 12.5 rounds half up to 13
        (0.85, [30, 37, 44, 51, 58, 65, 72, 79]),  # 6.5 -> 7
    ],
)
async def test_schedule_over_80_turns(confidence: float, expected: list[int]) -> None:
    tracker, client = make([answer(confidence)])
    checked = []
    for i, v in enumerate(await run_turns(tracker, 80), start=1):
        if v.judge_calls:
            checked.append(i)
    assert checked == expected
    assert len(client.calls_to(FAST)) == len(expected)


async def test_loop_verdict_adapts_interval_from_deciding_confidence() -> None:
    tracker, _client = make([answer(0.95)], [answer(1.0)])
    verdicts = await run_turns(tracker, 40)
    assert verdicts[29].looping
    assert tracker.check_interval == 5  # confidence 1.0 -> min interval
    assert [i for i, v in enumerate(verdicts, 1) if v.judge_calls] == [30, 35, 40]
    # escalation ladder: warn, warn (stronger), ask the user
    assert [v.action for v in verdicts if v] == [Action.WARN, Action.WARN, Action.ASK_USER]


async def test_fast_failure_is_reported_and_retried_after_min_interval() -> None:
    tracker, client = make([JudgeTimeout("slow", model=FAST), answer(0.1)], [answer(0.99)])
    verdicts = await run_turns(tracker, 36)
    failed = verdicts[29]
    assert not failed and failed.errors and "slow" in failed.errors[0]
    assert failed.judge_calls[0].error and failed.judge_calls[0].confidence is None
    assert len(client.calls_to(CONFIRM)) == 0
    assert [i for i, v in enumerate(verdicts, 1) if v.judge_calls] == [30, 35]
    assert tracker.last_check_turn == 35


async def test_invalid_output_is_a_failed_call_not_a_verdict() -> None:
    tracker, _client = make(
        ['{"unproductive_state_analysis": "x", "unproductive_state_confidence": 7}']
    )
    v = (await run_turns(tracker, 30))[-1]
    assert not v and v.confidence is None
    assert "schema" in (v.judge_calls[0].error or "")


async def test_heuristics_only_without_model_never_calls_anything() -> None:
    tracker = LoopTracker(TrackerConfig())
    verdicts = await run_turns(tracker, 60)
    assert not any(verdicts)
    assert all(v.judge_calls == [] for v in verdicts)
    assert tracker.turn == 60


async def test_new_user_message_resets_count_and_schedule() -> None:
    tracker, _client = make([answer(0.2)])
    history = looping_history(40)
    for i in range(35):
        await tracker.turn_started(history[: 2 + 2 * i])
    assert tracker.turn == 35 and tracker.last_check_turn == 30
    history = history[: 2 + 2 * 35] + [{"role": "user", "content": "now do something else"}]
    await tracker.turn_started(history)
    assert tracker.turn == 1 and tracker.last_check_turn == 0
    assert tracker.check_interval == 3


async def test_session_scope_keeps_counting_across_prompts() -> None:
    tracker, _client = make([answer(0.2)], count_scope="session")
    history = looping_history(10)
    for i in range(10):
        await tracker.turn_started(history[: 2 + 2 * i])
    history = history + [{"role": "user", "content": "next"}]
    await tracker.turn_started(history)
    assert tracker.turn == 11


async def test_reset_forgets_everything() -> None:
    tracker, _client = make([answer(0.95)])
    await run_turns(tracker, 31)
    assert tracker.turn == 31 and tracker.last_check_turn == 30
    tracker.reset()
    assert (tracker.turn, tracker.last_check_turn, tracker.check_interval) == (0, 0, 3)
    assert tracker.detections == 0
    v = (await run_turns(tracker, 30))[-1]
    assert v.looping and v.action is Action.WARN  # the ladder restarted too


async def test_judge_sees_trimmed_window_with_task() -> None:
    tracker, client = make([answer(0.1)], history_messages=5)
    history = looping_history(30, task="TASK-MARKER fix the bug")
    # a dangling call at the end: its result is not in yet
    history = history[: 2 + 2 * 29] + [
        {
            "role": "assistant",
            "content": "DANGLING",
            "tool_calls": [
                {"id": "zz", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ],
        }
    ]
    for i in range(29):
        await tracker.turn_started(history[: 2 + 2 * i])
    v = await tracker.turn_started(history)
    assert v.judge_calls
    _, prompt = client.requests[0]
    user = prompt[1]["content"]
    assert "TASK-MARKER" in user
    assert "DANGLING" not in user
    transcript = user.split("<transcript>")[1]
    lines = [ln for ln in transcript.split("</transcript>")[0].strip().splitlines()]
    assert len(lines) == 4  # 5 messages, minus a leading orphan tool result
    assert '"role": "assistant"' in lines[0]


async def test_cancellation_propagates_fast_and_tracker_stays_usable() -> None:
    tracker, _client = make([hang, answer(0.1)])
    history = looping_history(40)
    for i in range(29):
        await tracker.turn_started(history[: 2 + 2 * i])
    started = time.perf_counter()
    with anyio.move_on_after(0.2) as scope:
        await tracker.turn_started(history[: 2 + 2 * 29])
    assert scope.cancelled_caught
    assert time.perf_counter() - started < 1.0
    assert tracker.turn == 30 and tracker.last_check_turn == 30
    assert tracker.check_interval == 5
    verdicts = [await tracker.turn_started(history[: 2 + 2 * i]) for i in range(30, 35)]
    assert [bool(v.judge_calls) for v in verdicts] == [False] * 4 + [True]


# Goes through LiteLLMClient.complete up to the (stubbed, cancelled) import: no request is sent.
@pytest.mark.model_requests
async def test_cancellation_during_litellm_import_is_prompt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import judge.llm._litellm as llm

    def slow_import() -> object:
        time.sleep(3)  # stands in for litellm's multi-second import
        return object()

    monkeypatch.setattr(llm, "_litellm", None)
    monkeypatch.setattr(llm, "_import_litellm", slow_import)
    tracker = LoopTracker(
        TrackerConfig(fast_model="openai/x", check_after_turns=1, initial_interval=1)
    )
    started = time.perf_counter()
    with anyio.move_on_after(0.3) as scope:
        await tracker.turn_started(looping_history(1))
    assert scope.cancelled_caught
    assert time.perf_counter() - started < 1.0
    assert tracker.turn == 1 and tracker.check_interval == 5


async def test_overlapping_calls_are_serialized() -> None:
    gate = anyio.Event()

    async def slow() -> str:
        await gate.wait()
        return answer(0.1)

    tracker, _client = make([slow], check_after_turns=1, initial_interval=1)
    history = looping_history(3)
    results: list[Verdict] = []

    async def call(n: int) -> None:
        results.append(await tracker.turn_started(history[: 2 + 2 * n]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(call, 1)
        await anyio.sleep(0.05)
        tg.start_soon(call, 2)
        await anyio.sleep(0.05)
        assert tracker.turn == 1  # the second call waits for the first
        gate.set()
    assert tracker.turn == 2
    assert [v.turn for v in results] == [1, 2]


async def test_secrets_never_reach_the_judge() -> None:
    tracker, client = make([answer(0.1)], check_after_turns=1, initial_interval=1)
    history = looping_history(1)
    history[-1]["content"] = (
        "config: OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789 and "
        "db at postgres://admin:hunter2hunter2@db.internal:5432/app"
    )
    await tracker.turn_started(history)
    sent = client.requests[0][1][1]["content"]
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789" not in sent
    assert "hunter2hunter2" not in sent
    assert "[REDACTED" in sent and "db.internal" in sent


async def test_redaction_can_be_switched_off() -> None:
    tracker, client = make(
        [answer(0.1)], check_after_turns=1, initial_interval=1, redact_secrets=False
    )
    history = looping_history(1)
    history[-1]["content"] = "token ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    await tracker.turn_started(history)
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" in client.requests[0][1][1]["content"]
