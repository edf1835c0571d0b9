"""The litellm client against a fake OpenAI-compatible endpoint (respx at the HTTP layer)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import respx

from judge import LoopTracker, TrackerConfig
from judge.errors import JudgeHTTPError, JudgeRateLimited, JudgeTimeout
from judge.llm._litellm import LiteLLMClient
from judge.llm.assessment import assessment_schema
from tests.fakes import answer, looping_history

# Real requests through litellm, answered by respx at the HTTP layer.
pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]
BASE = "http://judge.test/v1"
URL = f"{BASE}/chat/completions"
MODEL = "openai/judge-fast"
PROMPT = [{"role": "user", "content": "hi"}]


def completion(content: str | None, finish: str = "stop", **extra: Any) -> httpx.Response:
    body = {
        "id": "cmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "judge-fast",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {"role": "assistant", "content": content, **extra},
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
    }
    return httpx.Response(200, json=body)


def client(sleep: Any, **kw: Any) -> LiteLLMClient:
    return LiteLLMClient(api_base=BASE, api_key="sk-test", sleep=sleep, **kw)


async def complete(c: LiteLLMClient) -> Any:
    return await c.complete(MODEL, PROMPT, schema=assessment_schema())


async def test_success_reports_tokens_and_unknown_cost(httpx_litellm: Any, no_sleep: Any) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(return_value=completion(answer(0.4)))
        reply = await complete(client(sleep))
    assert route.call_count == 1
    assert json.loads(reply.content)["unproductive_state_confidence"] == 0.4
    assert (reply.prompt_tokens, reply.completion_tokens, reply.attempts) == (120, 30, 1)
    assert reply.cost_usd is None  # no price for an unknown local model: unknown, not fatal
    sent = json.loads(route.calls[0].request.content)
    assert sent["temperature"] == 0
    assert "response_format" in sent
    assert delays == []


async def test_429_honours_retry_after(httpx_litellm: Any, no_sleep: Any) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(
            side_effect=[
                httpx.Response(
                    429, headers={"retry-after": "7"}, json={"error": {"message": "slow"}}
                ),
                completion(answer(0.1)),
            ]
        )
        reply = await complete(client(sleep))
    assert route.call_count == 2 and reply.attempts == 2
    assert delays == [7.0]


async def test_429_without_retry_after_backs_off(httpx_litellm: Any, no_sleep: Any) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(return_value=httpx.Response(429, json={"error": {}}))
        with pytest.raises(JudgeRateLimited) as info:
            await complete(client(sleep, max_retries=2))
    assert route.call_count == 3  # max_retries + 1, no multiplication by litellm or the SDK
    assert info.value.attempts == 3  # type: ignore[attr-defined]
    assert len(delays) == 2 and all(0 < d <= 8.5 for d in delays)


async def test_retry_after_beyond_cap_gives_up(httpx_litellm: Any, no_sleep: Any) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(
            return_value=httpx.Response(429, headers={"retry-after": "3600"}, json={})
        )
        with pytest.raises(JudgeRateLimited):
            await complete(client(sleep, max_retry_after_s=60))
    assert route.call_count == 1 and delays == []


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_5xx_is_retried(httpx_litellm: Any, no_sleep: Any, status: int) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(
            side_effect=[
                httpx.Response(status, json={"error": {"message": "upstream"}}),
                completion(answer(0.2)),
            ]
        )
        reply = await complete(client(sleep))
    assert route.call_count == 2 and reply.attempts == 2 and len(delays) == 1


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retried(
    httpx_litellm: Any, no_sleep: Any, status: int
) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(
            return_value=httpx.Response(status, json={"error": {"message": "nope"}})
        )
        with pytest.raises(JudgeHTTPError) as info:
            await complete(client(sleep))
    assert route.call_count == 1 and delays == []
    assert info.value.status == status


async def test_timeout_is_retried_then_reported(httpx_litellm: Any, no_sleep: Any) -> None:
    _delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(side_effect=httpx.ReadTimeout("read timed out"))
        with pytest.raises(JudgeTimeout):
            await complete(client(sleep, max_retries=1))
    assert route.call_count == 2


async def test_format_rejection_falls_back_to_json_object_with_schema(
    httpx_litellm: Any, no_sleep: Any
) -> None:
    _, sleep = no_sleep
    c = client(sleep)
    c._format_mode[MODEL] = 0  # pretend the model claims native json_schema support
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(
            side_effect=[
                httpx.Response(
                    500,
                    json={
                        "error": {"message": "'response_format' type json_schema is not supported"}
                    },
                ),
                completion(answer(0.3)),
                completion(answer(0.3)),
            ]
        )
        await complete(c)
        await complete(c)
    formats = [json.loads(call.request.content)["response_format"] for call in route.calls]
    assert formats[0]["type"] == "json_schema"
    assert formats[1] == {"type": "json_object", "schema": assessment_schema()}
    assert formats[2] == formats[1]  # remembered: the next check does not pay again


@pytest.mark.parametrize(
    ("content", "finish", "problem"),
    [
        ("not json at all", "stop", "no JSON object"),
        (
            '{"unproductive_state_analysis": "x", "unproductive_state_confidence": "0.95"}',
            "stop",
            "schema",
        ),
        (
            '{"unproductive_state_analysis": "x", "unproductive_state_confidence": 7}',
            "stop",
            "schema",
        ),
        (
            '{"unproductive_state_analysis": "x", "unproductive_state_confidence": -0.1}',
            "stop",
            "schema",
        ),
        (
            '{"unproductive_state_analysis": "x", "unproductive_state_confidence": NaN}',
            "stop",
            "NaN",
        ),
        ('{"unproductive_state_confidence": 0.5}', "stop", "required"),
        ('{"unproductive_state_analysis": "the agent keeps', "length", "max_tokens"),
        (None, "stop", "no content"),
    ],
)
async def test_bad_replies_fail_the_check_not_the_agent(
    httpx_litellm: Any, no_sleep: Any, content: str | None, finish: str, problem: str
) -> None:
    _, sleep = no_sleep
    tracker = LoopTracker(
        TrackerConfig(
            fast_model=MODEL,
            api_base=BASE,
            api_key="sk-test",
            check_after_turns=1,
            initial_interval=1,
        ),
        sleep=sleep,
    )
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(return_value=completion(content, finish))
        verdict = await tracker.turn_started(looping_history(1))
    assert route.call_count == 1
    assert not verdict and verdict.confidence is None
    assert problem in (verdict.judge_calls[0].error or "")
    assert verdict.errors
    assert tracker.check_interval == 5


async def test_prose_wrapped_json_is_accepted(httpx_litellm: Any, no_sleep: Any) -> None:
    _, sleep = no_sleep
    tracker = LoopTracker(
        TrackerConfig(
            fast_model=MODEL,
            api_base=BASE,
            api_key="sk-test",
            check_after_turns=1,
            initial_interval=1,
        ),
        sleep=sleep,
    )
    wrapped = f"Here is my assessment:\n```json\n{answer(0.92, 'stuck')}\n```\nThanks."
    with respx.mock(assert_all_mocked=True) as mock:
        mock.post(URL).mock(return_value=completion(wrapped))
        verdict = await tracker.turn_started(looping_history(1))
    assert verdict and verdict.confidence == 0.92
    assert verdict.judge_calls[0].prompt_tokens == 120


async def test_refusal_is_a_failed_call(httpx_litellm: Any, no_sleep: Any) -> None:
    _, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        mock.post(URL).mock(return_value=completion(None, refusal="I can't help with that"))
        tracker = LoopTracker(
            TrackerConfig(fast_model=MODEL, api_base=BASE, check_after_turns=1, initial_interval=1),
            sleep=sleep,
        )
        verdict = await tracker.turn_started(looping_history(1))
    assert not verdict and "refused" in (verdict.judge_calls[0].error or "")


async def test_401_through_tracker_is_one_request(httpx_litellm: Any, no_sleep: Any) -> None:
    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(return_value=httpx.Response(401, json={"error": {}}))
        tracker = LoopTracker(
            TrackerConfig(
                fast_model=MODEL,
                confirm_model=MODEL,
                api_base=BASE,
                check_after_turns=1,
                initial_interval=1,
            ),
            sleep=sleep,
        )
        verdict = await tracker.turn_started(looping_history(1))
    assert route.call_count == 1 and delays == []
    assert not verdict and "401" in (verdict.judge_calls[0].error or "")
    assert len(verdict.judge_calls) == 1  # the confirm model is not asked


async def test_retries_stop_at_the_time_budget(httpx_litellm: Any, no_sleep: Any) -> None:
    """An outage costs at most timeout_s plus a bounded retry budget, whatever max_retries."""
    from judge.llm._litellm import RETRY_TIME_BUDGET_S

    delays, sleep = no_sleep
    with respx.mock(assert_all_mocked=True) as mock:
        route = mock.post(URL).mock(
            return_value=httpx.Response(429, headers={"retry-after": "6"}, json={})
        )
        with pytest.raises(JudgeRateLimited):
            await complete(client(sleep, max_retries=10, timeout_s=1.0))
    assert sum(delays) <= 1.0 + RETRY_TIME_BUDGET_S
    assert route.call_count == len(delays) + 1 < 11
