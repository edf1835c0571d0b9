"""The judge's fault matrix against a real HTTP server on 127.0.0.1 (tests/fault_server.py).

One test per fault. Each drives a real `LoopTracker` through litellm over a real socket and
asserts what the tracker did (requests made, attempts, backoff asked for, the schedule) and
what the verdict says (``errors``, ``judge_calls``). ``turn_started`` must never raise: every
test awaits it bare, so an exception fails the test. Every turn is timed against its bound,
so an outage cannot hold a turn up longer: attempts x (timeout_s + watchdog grace) plus the
backoff, which an injected sleep records instead of sleeping.

Each test runs with both of litellm's transports (aiohttp, its default, and httpx).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.llm._litellm import (
    BACKOFF_INITIAL_S,
    BACKOFF_JITTER_S,
    BACKOFF_MAX_S,
    WATCHDOG_GRACE_S,
    _import_litellm,
)
from judge.llm.breaker import BreakerState
from judge.verdict import JudgeStage
from tests.fakes import answer, looping_history
from tests.fault_server import FaultServer, Reply, Request, closed_port, completion, error

# Real requests through litellm, to the fault server on 127.0.0.1 only.
pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]

FAST, CONFIRM = "openai/x", "openai/y"
# Small enough to keep the file fast, large enough that a loaded CI box still answers a
# healthy local request well inside it: with a test worker per core, litellm's first
# request took 0.5-1 s now and then (another test's background load holding the GIL), and
# a 503 read as a timeout.
TIMEOUT_S = 2.0
# Scheduling noise on top of the computed bound (thread hops, litellm's request setup).
SLACK_S = 0.75
# A turn whose retries all answer at once: local round trips plus litellm's per-request
# overhead, on a busy 2-core CI box. Sleeping the real backoff (0.5 s + 1 s + jitter) for
# three attempts would already take 1.5-2.5 s of it; the recorded delays prove it was not.
HEALTHY_TURN_S = 3.0
# A turn whose check is skipped does no I/O at all.
SKIPPED_TURN_S = 0.25


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported() -> None:
    """Import litellm once up front so its import time is never charged to a timed turn."""
    _import_litellm()


@pytest.fixture(params=["aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    litellm = _import_litellm()
    old = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = request.param == "httpx"
    try:
        yield str(request.param)
    finally:
        litellm.disable_aiohttp_transport = old


@pytest.fixture
def delays() -> list[float]:
    return []


def make_tracker(
    port: int,
    delays: list[float],
    *,
    confirm: bool = False,
    clock: Any = None,
    **cfg: Any,
) -> LoopTracker:
    async def record_sleep(seconds: float) -> None:
        delays.append(seconds)

    settings: dict[str, Any] = {
        "fast_model": FAST,
        "confirm_model": CONFIRM if confirm else None,
        "api_base": f"http://127.0.0.1:{port}/v1",
        "api_key": "k",
        "check_after_turns": 1,
        "initial_interval": 1,
        "timeout_s": TIMEOUT_S,
        "max_retries": 1,
        **cfg,
    }
    return LoopTracker(TrackerConfig(**settings), sleep=record_sleep, clock=clock)


async def timed_turn(tracker: LoopTracker, turns: int = 1) -> tuple[Verdict, float]:
    started = time.perf_counter()
    verdict = await tracker.turn_started(looping_history(turns))
    return verdict, time.perf_counter() - started


def outage_bound(attempts: int) -> float:
    """Most a turn may take when every attempt hangs until the watchdog (backoff injected)."""
    return attempts * (TIMEOUT_S + WATCHDOG_GRACE_S) + SLACK_S


def assert_failed_check(verdict: Verdict, error_type: str, attempts: int) -> None:
    """A failed check: no loop, no confidence, one fast call with the error, one error line."""
    assert not verdict and verdict.source == "llm" and verdict.confidence is None
    [call] = verdict.judge_calls
    assert call.stage is JudgeStage.FAST and call.model == FAST
    assert call.error is not None and call.error.startswith(f"{error_type}: "), call.error
    assert call.attempts == attempts
    assert verdict.errors == [f"fast judge {FAST}: {call.error}"]


def assert_backoff(delays: list[float], retries: int) -> None:
    assert len(delays) == retries
    for n, delay in enumerate(delays):
        base = min(BACKOFF_INITIAL_S * 2**n, BACKOFF_MAX_S)
        assert base <= delay <= base + BACKOFF_JITTER_S


# -- the endpoint cannot be reached or does not answer in time ---------------------------


async def test_connect_refused(transport: str, delays: list[float]) -> None:
    tracker = make_tracker(closed_port(), delays, max_retries=2)
    verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeConnectionError", attempts=3)
    assert "connection failed" in verdict.errors[0]
    assert_backoff(delays, retries=2)
    assert elapsed <= outage_bound(3)
    assert tracker.check_interval == tracker.config.min_interval  # retried soon, not never


@pytest.mark.slow
async def test_read_timeout(transport: str, delays: list[float]) -> None:
    with FaultServer([Reply(delay_s=10)]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeTimeout", attempts=2)
    assert len(server.requests) == 2
    assert_backoff(delays, retries=1)
    assert TIMEOUT_S <= elapsed <= outage_bound(2)


@pytest.mark.slow
async def test_slow_trickle_past_the_timeout(transport: str, delays: list[float]) -> None:
    # Headers at once, then one byte every 50 ms: each read succeeds, so a per-read timeout
    # never fires; the 400-byte body would take 20 s. Only the total deadline stops it.
    body = completion(answer(0.2, "x" * 200)).body
    with FaultServer([Reply(body=body, trickle_s=0.05)]) as server:
        tracker = make_tracker(server.port, delays, max_retries=0)
        verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeTimeout", attempts=1)
    assert delays == []
    assert elapsed <= outage_bound(1)


async def test_connection_dropped_without_a_response(transport: str, delays: list[float]) -> None:
    with FaultServer([Reply(close=True)]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeConnectionError", attempts=2)
    assert len(server.requests) == 2
    assert elapsed <= outage_bound(2)


# -- HTTP statuses -----------------------------------------------------------------------


async def test_429_with_retry_after_waits_as_told(transport: str, delays: list[float]) -> None:
    script = [error(429, "slow down", **{"retry-after": "2"}), completion(answer(0.3))]
    with FaultServer(script) as server:
        tracker = make_tracker(server.port, delays)
        verdict, elapsed = await timed_turn(tracker)
    assert delays == [2.0]  # the server's number, not our backoff
    assert not verdict and verdict.errors == [] and verdict.confidence == 0.3
    assert verdict.judge_calls[0].attempts == 2 and len(server.requests) == 2
    assert elapsed <= HEALTHY_TURN_S


async def test_429_without_retry_after_backs_off(transport: str, delays: list[float]) -> None:
    with FaultServer([error(429), completion(answer(0.3))]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, elapsed = await timed_turn(tracker)
    assert_backoff(delays, retries=1)
    assert verdict.confidence == 0.3 and verdict.judge_calls[0].attempts == 2
    assert elapsed <= HEALTHY_TURN_S


async def test_429_asking_too_long_a_pause_gives_up(transport: str, delays: list[float]) -> None:
    with FaultServer([error(429, **{"retry-after": "3600"})]) as server:
        tracker = make_tracker(server.port, delays, max_retries=2)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeRateLimited", attempts=1)
    assert delays == [] and len(server.requests) == 1  # an hour is down, not busy


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_retried_then_reported(
    transport: str, delays: list[float], status: int
) -> None:
    with FaultServer([error(status)]) as server:
        tracker = make_tracker(server.port, delays, max_retries=2)
        verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeHTTPError", attempts=3)
    assert f"HTTP {status}" in verdict.errors[0]
    assert len(server.requests) == 3
    assert_backoff(delays, retries=2)
    assert elapsed <= HEALTHY_TURN_S


async def test_5xx_blip_recovers_within_the_check(transport: str, delays: list[float]) -> None:
    with FaultServer([error(503), completion(answer(0.25))]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, _ = await timed_turn(tracker)
    assert verdict.errors == [] and verdict.confidence == 0.25
    assert verdict.judge_calls[0].attempts == 2


@pytest.mark.parametrize("status", [400, 401])
async def test_4xx_is_not_retried(transport: str, delays: list[float], status: int) -> None:
    with FaultServer([error(status, "bad request or bad key")]) as server:
        tracker = make_tracker(server.port, delays, confirm=True, max_retries=2)
        verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeHTTPError", attempts=1)
    assert f"HTTP {status}" in verdict.errors[0]
    assert len(server.requests) == 1 and delays == []  # retrying cannot fix our request
    assert elapsed <= HEALTHY_TURN_S


# -- the reply arrives but is not a usable assessment -------------------------------------


async def test_invalid_json_reply(transport: str, delays: list[float]) -> None:
    with FaultServer([completion("The agent seems fine to me.")]) as server:
        tracker = make_tracker(server.port, delays, max_retries=2)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeOutputError", attempts=1)
    assert "no JSON object" in verdict.errors[0]
    assert len(server.requests) == 1  # temperature 0: asking again gives the same answer


async def test_response_body_not_json(transport: str, delays: list[float]) -> None:
    # A proxy's HTML error page with a 200: litellm cannot parse the body and reports a
    # 500, which is retried like any 5xx (proxies flap).
    with FaultServer([Reply(body="<html>Gateway</html>")]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeHTTPError", attempts=2)
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "content",
    [
        f"Here is my assessment: {answer(0.42, 'reads new files')} Hope that helps!",
        f"```json\n{answer(0.42, 'reads new files')}\n```",
        f"Sure.\n```\n{answer(0.42, 'reads new files')}\n```\nDone.",
    ],
    ids=["prose", "json-fence", "bare-fence-in-prose"],
)
async def test_wrapped_json_is_extracted(transport: str, delays: list[float], content: str) -> None:
    with FaultServer([completion(content)]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, _ = await timed_turn(tracker)
    assert verdict.errors == []
    assert verdict.confidence == 0.42 and verdict.analysis == "reads new files"
    assert verdict.judge_calls[0].prompt_tokens == 120  # usage read from the real body


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"unproductive_state_confidence": 0.5}', "required"),
        ('{"unproductive_state_analysis": "x", "unproductive_state_confidence": "0.95"}', "schema"),
        ('{"unproductive_state_analysis": "x", "unproductive_state_confidence": 1.5}', "schema"),
        ('{"unproductive_state_analysis": "x", "unproductive_state_confidence": NaN}', "NaN"),
        ('{"unproductive_state_analysis": "x", "unproductive_state_confidence": -0.2}', "schema"),
    ],
    ids=["missing-field", "string-confidence", "out-of-range", "nan", "negative"],
)
async def test_schema_violation(
    transport: str, delays: list[float], body: str, problem: str
) -> None:
    with FaultServer([completion(body)]) as server:
        tracker = make_tracker(server.port, delays, max_retries=2)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeOutputError", attempts=1)
    assert problem in verdict.errors[0]
    assert len(server.requests) == 1
    assert tracker.check_interval == tracker.config.min_interval


async def test_truncated_reply(transport: str, delays: list[float]) -> None:
    cut = '{"unproductive_state_analysis": "the agent keeps reading the same'
    with FaultServer([completion(cut, finish="length")]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeOutputError", attempts=1)
    assert "cut off at max_tokens" in verdict.errors[0]


async def test_empty_choices(transport: str, delays: list[float]) -> None:
    with FaultServer([completion(None, choices=[])]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeOutputError", attempts=1)
    assert "no choices" in verdict.errors[0]


async def test_refusal(transport: str, delays: list[float]) -> None:
    with FaultServer([completion(None, refusal="I can't assess this.")]) as server:
        tracker = make_tracker(server.port, delays)
        verdict, _ = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeOutputError", attempts=1)
    assert "refused" in verdict.errors[0]


# -- two models ----------------------------------------------------------------------------


def by_model(fast: Reply, confirm: Reply) -> Any:
    def handler(request: Request) -> Reply:
        return fast if request.model == FAST.split("/", 1)[1] else confirm

    return handler


async def test_confirm_model_down_trusts_the_fast_one(transport: str, delays: list[float]) -> None:
    handler = by_model(completion(answer(0.95, "same read again")), error(503))
    with FaultServer(handler) as server:
        tracker = make_tracker(server.port, delays, confirm=True)
        verdict, elapsed = await timed_turn(tracker)
    assert verdict and verdict.source == "llm"
    assert verdict.confidence == 0.95 and verdict.analysis == "same read again"
    fast, confirm = verdict.judge_calls
    assert fast.error is None and confirm.stage is JudgeStage.CONFIRM
    assert confirm.error and "HTTP 503" in confirm.error and confirm.attempts == 2
    assert verdict.errors == [f"confirm judge {CONFIRM}: {confirm.error}; trusting the fast model"]
    assert [r.model for r in server.requests] == ["x", "y", "y"]
    assert elapsed <= HEALTHY_TURN_S


async def test_both_models_down(transport: str, delays: list[float]) -> None:
    with FaultServer(by_model(error(503), error(503))) as server:
        tracker = make_tracker(server.port, delays, confirm=True)
        verdict, elapsed = await timed_turn(tracker)
    assert_failed_check(verdict, "JudgeHTTPError", attempts=2)
    assert [r.model for r in server.requests] == ["x", "x"]  # no answer, nothing to confirm
    assert elapsed <= HEALTHY_TURN_S


# -- repeated failure: the circuit breaker ------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.slow
async def test_breaker_stops_paying_for_an_outage_and_recovers(
    transport: str, delays: list[float]
) -> None:
    clock = FakeClock()
    healthy = False

    def handler(request: Request) -> Reply:
        return completion(answer(0.1)) if healthy else Reply(delay_s=10)

    with FaultServer(handler) as server:
        tracker = make_tracker(
            server.port,
            delays,
            clock=clock,
            max_retries=0,
            min_interval=1,  # a failed check is retried on the very next turn
            breaker_failures=3,
            breaker_cooldown_s=300,
        )
        turn = 0

        async def step() -> tuple[Verdict, float]:
            nonlocal turn
            turn += 1
            return await timed_turn(tracker, turn)

        for _ in range(3):  # three checks time out, each within its bound
            verdict, elapsed = await step()
            assert_failed_check(verdict, "JudgeTimeout", attempts=1)
            assert elapsed <= outage_bound(1)
        assert tracker._breaker.state is BreakerState.OPEN
        for _ in range(5):  # open: no request, no wait, and the verdict says why
            verdict, elapsed = await step()
            assert not verdict and verdict.judge_calls == []
            [line] = verdict.errors
            assert line.startswith("judge skipped: circuit open until ")
            assert "3 failed checks in a row" in line
            assert elapsed < SKIPPED_TURN_S
        assert len(server.requests) == 3
        clock.now += 300  # cool-down over: one trial, which fails and reopens at once
        verdict, _ = await step()
        assert_failed_check(verdict, "JudgeTimeout", attempts=1)
        verdict, _ = await step()
        assert verdict.errors[0].startswith("judge skipped: circuit open")
        assert len(server.requests) == 4
        clock.now += 300
        healthy = True  # the trial succeeds and closes the breaker
        verdict, _ = await step()
        assert verdict.errors == [] and verdict.confidence == 0.1
        assert tracker._breaker.state is BreakerState.CLOSED
    assert tracker.judge_calls_used == 5
