"""The circuit breaker on its own (pure, clock injected) and wired into the tracker."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from judge import LoopTracker, TrackerConfig
from judge.errors import JudgeTimeout
from judge.llm.breaker import BreakerState, CircuitBreaker, skip_message
from tests.fakes import answer, fake_judge, looping_history


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_threshold_failures_in_a_row() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=3, cooldown_s=60, clock=clock)
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.seconds_left() is None and breaker.state is BreakerState.CLOSED
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    clock.now = 59.5
    assert breaker.seconds_left() == pytest.approx(0.5)


def test_success_resets_the_count() -> None:
    breaker = CircuitBreaker(failures=2, cooldown_s=60, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED and breaker.consecutive_failures == 1


def test_half_open_trial_closes_on_success_and_reopens_on_failure() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures=1, cooldown_s=10, clock=clock)
    breaker.record_failure()
    clock.now = 10.0
    assert breaker.seconds_left() is None and breaker.state is BreakerState.HALF_OPEN
    breaker.record_failure()  # the trial failed: a full cool-down again, from now
    assert breaker.state is BreakerState.OPEN
    assert breaker.seconds_left() == pytest.approx(10.0)
    clock.now = 20.0
    assert breaker.seconds_left() is None
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED and breaker.consecutive_failures == 0


def test_rejects_a_threshold_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        CircuitBreaker(failures=0)


def test_skip_message_names_the_wall_clock_time() -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert skip_message(299.6, 3, now=now) == (
        "judge skipped: circuit open until 2025-01-02T03:09:04Z "
        "(3 failed checks in a row; 300 s left)"
    )


@pytest.mark.anyio
async def test_tracker_skips_checks_while_open() -> None:
    clock = Clock()
    client = fake_judge({"fake/fast": [JudgeTimeout("slow")] * 2 + [answer(0.2)]})
    config = TrackerConfig(
        fast_model="fake/fast",
        check_after_turns=1,
        initial_interval=1,
        min_interval=1,
        breaker_failures=2,
        breaker_cooldown_s=30,
    )
    tracker = LoopTracker(config, client=client, clock=clock)
    history = looping_history(6)
    errors = [(await tracker.turn_started(history[: 4 + 2 * i])).errors for i in range(4)]
    assert len(client.requests) == 2
    assert [e[0].split(":")[0] for e in errors] == [
        "fast judge fake/fast",
        "fast judge fake/fast",
        "judge skipped",
        "judge skipped",
    ]
    clock.now = 30.0
    verdict = await tracker.turn_started(history)
    assert verdict.errors == [] and verdict.confidence == 0.2
    tracker.reset()  # a new conversation does not forget the endpoint's health or spend
    assert tracker.judge_calls_used == 3


def test_config_bounds() -> None:
    with pytest.raises(ValueError, match="LOOP_JUDGE_BREAKER_FAILURES"):
        TrackerConfig(breaker_failures=0)
    with pytest.raises(ValueError, match="LOOP_JUDGE_BREAKER_COOLDOWN_S"):
        TrackerConfig(breaker_cooldown_s=-1)
