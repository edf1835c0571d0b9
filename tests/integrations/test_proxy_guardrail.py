"""The litellm proxy guardrail, driven with OpenAI chat request payloads as the proxy has them.

The hook is called exactly as litellm's proxy calls it (``async_pre_call_hook(
user_api_key_dict, cache, data, call_type)``), in each mode, with the session id in each
place a client can put it. Nothing leaves the process.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import TrackerConfig
from judge.integrations.litellm_proxy import (
    GuardrailMode,
    LoopJudgeGuardrail,
    session_id_of,
)
from judge.service.store import MemoryStore, RedisStore
from tests.service.exposition import sample
from tests.serving import (
    failing_repeat_history,
    free_port,
    prefixes,
    redis_server,
    unique_prefix,
)

pytestmark = pytest.mark.anyio
N_TURNS = 4  # failing_repeat_history loops from turn 3 (three identical failures)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A /chat/completions body after the proxy's pre-processing (metadata, headers)."""
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": copy.deepcopy(messages),
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0,
        "metadata": {"loop_judge_session_id": "agent-42"},
        "proxy_server_request": {
            "url": "http://127.0.0.1:4000/chat/completions",
            "method": "POST",
            "headers": {"content-type": "application/json", "user-agent": "openai-python"},
        },
    }
    body.update(extra)
    return body


def guardrail(mode: str, **kwargs: Any) -> LoopJudgeGuardrail:
    # As the proxy builds it from config.yaml: guardrail_name, event_hook, default_on and
    # every non-None litellm_params field (unknown ones included) as keyword arguments.
    return LoopJudgeGuardrail(
        guardrail_name="loop-judge",
        event_hook="pre_call",
        default_on=True,
        loop_judge_mode=mode,
        fail_on_error=True,
        store=kwargs.pop("store", MemoryStore(TrackerConfig())),
        **kwargs,
    )


async def hook(g: LoopJudgeGuardrail, data: dict[str, Any]) -> Any:
    return await g.async_pre_call_hook(
        user_api_key_dict=None, cache=None, data=data, call_type="completion"
    )


async def drive(g: LoopJudgeGuardrail, **extra: Any) -> list[Any]:
    """Send the looping conversation turn by turn; returns what the hook returned."""
    return [await hook(g, request(h, **extra)) for h in prefixes(failing_repeat_history(6), 6)]


async def test_observe_passes_everything_and_counts() -> None:
    g = guardrail("observe")
    sent = [request(h) for h in prefixes(failing_repeat_history(N_TURNS), N_TURNS)]
    for data in sent:
        before = copy.deepcopy(data)
        assert await hook(g, data) == before
    assert g.metrics.value("loop_judge_turns_total") == N_TURNS
    labels = {"kind": "exact_repeat", "source": "heuristic:exact_repeat", "endpoint": "turn"}
    assert g.metrics.value("loop_judge_loops_total", **labels) == 2  # turns 3 and 4
    exposed = g.metrics.render()  # what a scrape would read: the same counts
    assert sample(exposed, "loop_judge_turns_total") == N_TURNS
    assert sample(exposed, "loop_judge_loops_total", **labels) == 2


async def test_nudge_appends_the_recovery_message() -> None:
    g = guardrail("nudge")
    histories = prefixes(failing_repeat_history(N_TURNS), N_TURNS)
    out = []
    for h in histories:
        data = request(h)
        out.append(await hook(g, data))
        assert data["messages"] == h  # the caller's request object is not mutated
    assert [len(o["messages"]) for o in out[:2]] == [len(h) for h in histories[:2]]
    nudged = out[2]
    assert nudged["messages"][:-1] == histories[2]
    last = nudged["messages"][-1]
    assert last["role"] == "user" and "run_tests" in last["content"]
    assert nudged["tools"] == TOOLS and nudged["model"] == "gpt-4o-mini"


async def test_nudge_as_system_message() -> None:
    g = guardrail("nudge", nudge_role="system")
    out = await drive(g)
    assert out[2]["messages"][-1]["role"] == "system"


async def test_block_rejects_with_the_loop_named() -> None:
    from litellm.exceptions import GuardrailRaisedException

    g = guardrail("block")
    histories = prefixes(failing_repeat_history(N_TURNS), N_TURNS)
    for h in histories[:2]:
        await hook(g, request(h))
    with pytest.raises(GuardrailRaisedException) as caught:
        await hook(g, request(histories[2]))
    message = str(caught.value)
    assert "loop-judge" in message and "exact_repeat" in message and "turn 3" in message
    assert getattr(caught.value, "status_code", 400) == 400


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ({"metadata": {"loop_judge_session_id": "m-1", "session_id": "other"}}, "m-1"),
        ({"litellm_metadata": {"loop_judge_session_id": "lm-1"}, "metadata": {}}, "lm-1"),
        (
            {
                "metadata": {},
                "proxy_server_request": {"headers": {"X-Loop-Judge-Session": "h-1"}},
            },
            "h-1",
        ),
        ({"metadata": {"headers": {"x-loop-judge-session": "h-2"}}}, "h-2"),
        ({"metadata": {}, "litellm_session_id": "ls-1"}, "ls-1"),
        ({"metadata": {"session_id": "s-1"}}, "s-1"),
        ({"metadata": {}}, None),
    ],
)
def test_session_id_sources(extra: dict[str, Any], expected: str | None) -> None:
    assert session_id_of(request([{"role": "user", "content": "hi"}], **extra)) == expected


async def test_sessions_are_kept_apart() -> None:
    from litellm.exceptions import GuardrailRaisedException

    g = guardrail("block")
    histories = prefixes(failing_repeat_history(N_TURNS), N_TURNS)
    for h in histories[:2]:
        for sid in ("a", "b"):
            await hook(g, request(h, metadata={"loop_judge_session_id": sid}))
    await hook(g, request(histories[0], metadata={"loop_judge_session_id": "c"}))
    for sid in ("a", "b"):
        with pytest.raises(GuardrailRaisedException, match="turn 3"):
            await hook(g, request(histories[2], metadata={"loop_judge_session_id": sid}))
    assert g.metrics.value("loop_judge_turns_total") == 7


async def test_a_session_belongs_to_the_proxy_key_that_sent_it() -> None:
    """Another key with the same session id gets its own session: it neither inherits the
    ladder nor reaches the first key's history; the raw key is never a store key."""
    from litellm.exceptions import GuardrailRaisedException
    from litellm.proxy._types import UserAPIKeyAuth

    store = MemoryStore(TrackerConfig())
    g = guardrail("block", store=store)
    alice, mallory = (
        UserAPIKeyAuth(api_key="sk-alice-0123456789"),
        UserAPIKeyAuth(api_key="sk-mallory-0123456789"),
    )
    histories = prefixes(failing_repeat_history(N_TURNS), N_TURNS)

    async def send(who: Any, h: list[dict[str, Any]]) -> Any:
        data = request(h, metadata={"loop_judge_session_id": "shared"})
        return await g.async_pre_call_hook(
            user_api_key_dict=who, cache=None, data=data, call_type="completion"
        )

    for h in histories[:2]:
        await send(alice, h)
    # Mallory's first turn under the same id is a first turn: no inherited loop.
    assert await send(mallory, histories[0]) is not None
    with pytest.raises(GuardrailRaisedException, match="turn 3"):
        await send(alice, histories[2])
    keys = list(store._entries)
    assert len(keys) == 2 and all(k.endswith("/shared") for k in keys)
    assert not any("sk-" in k for k in keys)


@pytest.mark.parametrize("bad", ["a/b", "x" * 129, "white space", "semi;colon"])
async def test_a_session_id_outside_the_rule_is_not_judged(bad: str) -> None:
    g = guardrail("block")
    data = request(failing_repeat_history(6), metadata={"loop_judge_session_id": bad})
    assert await hook(g, data) is data
    assert g.metrics.value("loop_judge_unjudged_requests_total", reason="bad_session_id") == 1
    assert g.metrics.value("loop_judge_turns_total") == 0


async def test_requests_without_session_or_messages_pass_unjudged() -> None:
    g = guardrail("block")
    data = request(failing_repeat_history(6), metadata={})
    assert await hook(g, data) is data
    assert g.metrics.value("loop_judge_unjudged_requests_total", reason="no_session") == 1
    embedding = {"model": "text-embedding-3-small", "input": ["x"], "metadata": {}}
    assert await hook(g, embedding) is embedding
    assert g.metrics.value("loop_judge_turns_total") == 0


async def test_unreadable_history_or_store_never_fails_the_request() -> None:
    g = guardrail("block")
    bad = request([{"role": "wizard", "content": "?"}])
    assert await hook(g, bad) is bad
    assert g.metrics.value("loop_judge_history_errors_total") == 1
    down = RedisStore(TrackerConfig(), url=f"redis://127.0.0.1:{free_port()}/0")
    g = guardrail("block", store=down)
    try:
        data = request(failing_repeat_history(3))
        assert await hook(g, data) is data
        assert g.metrics.value("loop_judge_store_errors_total", error="StoreUnavailable") == 1
    finally:
        await down.aclose()


def test_proxy_would_run_it_on_every_pre_call() -> None:
    from litellm.types.guardrails import GuardrailEventHooks

    g = guardrail("observe")
    data = request([{"role": "user", "content": "hi"}])
    assert g.should_run_guardrail(data, GuardrailEventHooks.pre_call) is True
    assert g.should_run_guardrail(data, GuardrailEventHooks.post_call) is False
    assert g.loop_judge_mode is GuardrailMode.OBSERVE


def test_bad_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="shout"):
        guardrail("shout")


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(Path(tmp_path_factory.mktemp("redis"))) as url:
        yield url


async def test_two_proxies_share_sessions_through_redis(redis_url: str) -> None:
    prefix = unique_prefix()
    proxies = [
        guardrail("block", redis_url=redis_url, key_prefix=prefix, store=None) for _ in range(2)
    ]
    from litellm.exceptions import GuardrailRaisedException

    histories = prefixes(failing_repeat_history(N_TURNS), N_TURNS)
    try:
        await hook(proxies[0], request(histories[0]))
        await hook(proxies[1], request(histories[1]))
        with pytest.raises(GuardrailRaisedException, match="turn 3"):
            await hook(proxies[0], request(histories[2]))
    finally:
        for p in proxies:
            await p.store.aclose()
