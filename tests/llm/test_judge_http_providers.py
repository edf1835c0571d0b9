"""The judge's HTTP limits hold for the providers litellm calls over httpx itself, not
only through the OpenAI SDK (issue 12, defect 8, second half).

Anthropic (``anthropic/...``) and Gemini (``gemini/...``) calls go through litellm's own
``AsyncHTTPHandler``; before, they never saw our client, so a 307 re-sent the transcript to
wherever it pointed and a gzip bomb was inflated in full. Real requests to the scripted
servers of tests/fault_server.py on 127.0.0.1, through both of litellm's transports.
"""

from __future__ import annotations

import ast
import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge.llm._http import MAX_REPLY_BYTES, OPENAI_SDK_PROVIDERS, SDK_PROVIDERS, judge_client
from judge.llm._litellm import _import_litellm
from judge.verdict import JudgeStage
from tests.fakes import answer, looping_history
from tests.fault_server import FaultServer, Reply, gzip_bomb, redirect

pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]

ANTHROPIC = "anthropic/claude-3-5-haiku-latest"
GEMINI = "gemini/gemini-2.0-flash"
MODELS = (ANTHROPIC, GEMINI)
# Decoded size of the bomb: far past MAX_REPLY_BYTES, small enough to build quickly.
BOMB_BYTES = 64 * 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported() -> None:
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


def native_reply(model: str, text: str) -> Reply:
    """A successful reply in the provider's own wire format."""
    if model.startswith("anthropic/"):
        body: dict[str, Any] = {
            "id": "msg_fault",
            "type": "message",
            "role": "assistant",
            "model": "claude-3-5-haiku-latest",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 120, "output_tokens": 30},
        }
    else:
        body = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 120,
                "candidatesTokenCount": 30,
                "totalTokenCount": 150,
            },
        }
    return Reply(body=body, headers={"content-type": "application/json"})


def tracker_for(port: int, model: str) -> LoopTracker:
    async def no_sleep(seconds: float) -> None:
        pass

    config = TrackerConfig(
        fast_model=model,
        api_base=f"http://127.0.0.1:{port}/v1",
        api_key="k",
        check_after_turns=1,
        initial_interval=1,
        min_interval=1,
        timeout_s=20.0,  # generous: a loaded 2-core box
        max_retries=1,
    )
    return LoopTracker(config, sleep=no_sleep)


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
async def test_honest_reply_is_read_plain_and_compressed(model: str, transport: str) -> None:
    reply = native_reply(model, answer(0.95, "The agent repeats one failing call."))
    packed = Reply(
        body=gzip.compress(reply.encoded()),
        headers={"content-type": "application/json", "content-encoding": "gzip"},
    )
    for each in (reply, packed):
        with FaultServer([each]) as server:
            verdict = await tracker_for(server.port, model).turn_started(looping_history(1))
        [call] = verdict.judge_calls
        assert call.error is None and call.confidence == 0.95, call.error
        assert call.stage is JudgeStage.FAST
        assert server.requests[0].headers.get("accept-encoding") == "gzip, deflate"


@pytest.mark.parametrize("model", MODELS)
async def test_redirect_is_not_followed(model: str, transport: str) -> None:
    with FaultServer([native_reply(model, answer(0.1, "fine"))]) as elsewhere:
        target = f"http://127.0.0.1:{elsewhere.port}/v1/elsewhere"
        with FaultServer([redirect(target)]) as server:
            verdict = await tracker_for(server.port, model).turn_started(looping_history(1))
        assert elsewhere.requests == []  # the transcript went nowhere but the endpoint
    [call] = verdict.judge_calls
    assert call.error is not None and "HTTP 307" in call.error, call.error
    assert "redirects are not followed" in call.error
    assert len(server.requests) == 1  # an answer, not an outage: not retried
    assert not verdict.looping


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
async def test_gzip_bomb_is_capped(model: str, transport: str) -> None:
    with FaultServer([gzip_bomb(BOMB_BYTES)]) as server:
        verdict = await tracker_for(server.port, model).turn_started(looping_history(1))
    [call] = verdict.judge_calls
    assert call.error is not None and f"passed {MAX_REPLY_BYTES} bytes" in call.error, call.error
    assert len(server.requests) == 1
    assert not verdict.looping


async def test_no_litellm_global_is_touched() -> None:
    """The guard is the call's own client: the application's litellm sessions and
    module-level clients are left as they were."""
    litellm = _import_litellm()
    before = (
        litellm.client_session,
        litellm.aclient_session,
        getattr(litellm, "module_level_aclient", None),
        litellm.disable_aiohttp_transport,
    )
    reply = native_reply(ANTHROPIC, answer(0.1, "fine"))
    with FaultServer([reply]) as server:
        await tracker_for(server.port, ANTHROPIC).turn_started(looping_history(1))
    after = (
        litellm.client_session,
        litellm.aclient_session,
        getattr(litellm, "module_level_aclient", None),
        litellm.disable_aiohttp_transport,
    )
    assert after == before


async def test_sdk_providers_keep_litellm_defaults() -> None:
    """A provider litellm calls through another SDK gets no client of ours (it would
    fail on one); every httpx provider gets litellm's handler, closed after the call."""
    from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler

    for provider in (*SDK_PROVIDERS, "groq", "veniceai"):
        assert judge_client(provider, api_base=None, api_key="k", timeout=5.0) is None
    for provider in ("anthropic", "gemini", "vertex_ai", "ollama"):
        guarded = judge_client(provider, api_base=None, api_key="k", timeout=5.0)
        assert guarded is not None and isinstance(guarded.client, AsyncHTTPHandler)
        assert guarded.client.client.follow_redirects is False
        await guarded.aclose()
        assert guarded.client.client.is_closed


def litellm_routes() -> dict[str, str]:
    """{provider: the ``_complete_*`` dispatcher} as the installed litellm's ``completion``
    sends a chat call, read from its source: the first branch of the chain that names the
    provider wins, as it does at run time."""
    import litellm.main

    tree = ast.parse(Path(litellm.main.__file__).read_text("utf-8"))
    [completion] = [
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "completion"
    ]
    routes: dict[str, str] = {}
    for branch in ast.walk(completion):
        if not isinstance(branch, ast.If):
            continue
        called = [
            call.func.id
            for statement in branch.body
            for call in ast.walk(statement)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id.startswith("_complete_")
        ]
        if not called:
            continue
        for compare in ast.walk(branch.test):
            if not (
                isinstance(compare, ast.Compare)
                and isinstance(compare.left, ast.Name)
                and compare.left.id == "custom_llm_provider"
            ):
                continue
            named = compare.comparators[0]
            values = named.elts if isinstance(named, ast.Tuple) else [named]
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    routes.setdefault(value.value, called[0])
    return routes


def takes_an_sdk_client(source: str, dispatcher: str) -> bool:
    """Whether litellm hands ``client=`` to an OpenAI or Azure SDK handler there."""
    start = source.index(f"\ndef {dispatcher}(")
    body = source[start : source.find("\ndef ", start + 1)]
    sdk = ("_dispatch_client_openai(", "_dispatch_client_azure(", "openai_chat_completions.")
    return any(mark in body for mark in sdk)


@pytest.mark.slow
async def test_the_provider_table_follows_litellms_dispatch() -> None:
    """`SDK_PROVIDERS` is a copy of a choice litellm makes in its own ``completion``: which
    providers get an OpenAI SDK client. Read that choice from the installed litellm, so that
    the next release that moves a provider fails here rather than in a user's judge call (a
    provider handed the wrong kind of client fails every call)."""
    import litellm.main
    import openai

    source = Path(litellm.main.__file__).read_text("utf-8")
    routes = litellm_routes()
    assert routes["openai"] == routes["deepinfra"] and routes["anthropic"] != routes["openai"]
    wrong = []
    for provider, dispatcher in sorted(routes.items()):
        sdk = takes_an_sdk_client(source, dispatcher)
        ours = judge_client(provider, api_base=None, api_key="k", timeout=5.0)
        if sdk and ours is not None and provider not in OPENAI_SDK_PROVIDERS:
            wrong.append(f"{provider} ({dispatcher}) takes an SDK client, we give a handler")
        if sdk and provider in OPENAI_SDK_PROVIDERS:
            assert ours is not None and isinstance(ours.client, openai.AsyncOpenAI)
        if not sdk and provider in SDK_PROVIDERS:
            wrong.append(f"{provider} ({dispatcher}) goes over httpx, we leave it unguarded")
        if ours is not None:
            await ours.aclose()
    assert not wrong, wrong
