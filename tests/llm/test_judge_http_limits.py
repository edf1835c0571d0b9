"""A hostile judge endpoint or caller object cannot cost memory, money or the prompt:
the client guards itself against a server it does not control.

Real requests through litellm to the misbehaving servers of tests/fault_server.py on
127.0.0.1: a gzip bomb, a redirect to a second server, usage blocks with negative token
counts. And objects handed to the tracker whose ``__str__`` raises.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from judge import HistoryError, LoopTracker, TrackerConfig
from judge.history import canonical_arguments, normalize_history
from judge.llm._http import MAX_REPLY_BYTES
from judge.llm._litellm import _import_litellm
from judge.llm.budget import CHARS_PER_TOKEN, JudgeBudget, call_tokens, token_count
from judge.verdict import JudgeCall, JudgeStage
from tests.fakes import answer, looping_history
from tests.fault_server import FaultServer, Reply, completion, gzip_bomb, redirect

pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]

FAST = "openai/x"
# A gzip bomb: ~200 kB on the wire, 200 MiB inflated (about 1000:1).
BOMB_BYTES = 200 * 1024 * 1024
# Python memory a refused bomb may cost: the compressed body, buffers and litellm's own
# objects; before the fix the inflated body alone was 200 MiB (and ~1 GB of copies).
BOMB_PEAK_LIMIT = 24 * 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported() -> None:
    _import_litellm()


@pytest.fixture(params=["aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both of litellm's transports: the guarded client must replace either."""
    litellm = _import_litellm()
    old = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = request.param == "httpx"
    try:
        yield str(request.param)
    finally:
        litellm.disable_aiohttp_transport = old


def tracker_for(port: int, **cfg: Any) -> LoopTracker:
    async def no_sleep(seconds: float) -> None:
        pass

    settings: dict[str, Any] = {
        "fast_model": FAST,
        "api_base": f"http://127.0.0.1:{port}/v1",
        "api_key": "k",
        "check_after_turns": 1,
        "initial_interval": 1,
        "min_interval": 1,
        # generous: a loaded 2-core CI box, and tracemalloc slows the traced call
        "timeout_s": 20.0,
        "max_retries": 1,
        **cfg,
    }
    return LoopTracker(TrackerConfig(**settings), sleep=no_sleep)


@pytest.mark.slow
async def test_gzip_bomb_reply_is_refused_without_inflating_it(transport: str) -> None:
    bomb = gzip_bomb(BOMB_BYTES)
    assert len(bomb.encoded()) < 256 * 1024
    with FaultServer([completion(answer(0.1, "fine")), bomb]) as server:
        # An honest call first, untraced: litellm imports its provider code on first use.
        await tracker_for(server.port).turn_started(looping_history(1))
        tracker = tracker_for(server.port)
        tracemalloc.start()
        try:
            verdict = await tracker.turn_started(looping_history(1))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak < BOMB_PEAK_LIMIT, f"{peak / 2**20:.0f} MiB"
    [call] = verdict.judge_calls
    assert call.error is not None and "JudgeOutputError" in call.error, call.error
    assert f"passed {MAX_REPLY_BYTES} bytes" in call.error
    assert len(server.requests) == 2  # the same bomb again is no use: not retried
    assert server.requests[1].headers.get("accept-encoding") == "gzip, deflate"


async def test_compressed_replies_of_honest_size_are_read(transport: str) -> None:
    import gzip
    import zlib

    body = completion(answer(0.95, "The agent repeats one failing call.")).encoded()
    replies = [
        Reply(body=gzip.compress(body), headers={"content-encoding": "gzip"}),
        Reply(body=zlib.compress(body), headers={"content-encoding": "deflate"}),
        Reply(body=zlib.compress(body)[2:-4], headers={"content-encoding": "deflate"}),  # raw
    ]
    for reply in replies:
        with FaultServer([reply]) as server:
            verdict = await tracker_for(server.port).turn_started(looping_history(1))
        [call] = verdict.judge_calls
        assert call.error is None and call.confidence == 0.95, call.error
        assert call.stage is JudgeStage.FAST


async def test_oversized_plain_reply_and_unknown_encoding_are_refused(transport: str) -> None:
    huge = Reply(body=b"{" + b" " * (MAX_REPLY_BYTES + 10) + b"}")
    brotli = Reply(body=b"\x0b\x02\x80{}\x03", headers={"content-encoding": "br"})
    for reply, words in ((huge, "announces"), (brotli, "encoding 'br'")):
        with FaultServer([reply]) as server:
            verdict = await tracker_for(server.port).turn_started(looping_history(1))
        [call] = verdict.judge_calls
        assert call.error is not None and words in call.error, call.error
        assert len(server.requests) == 1


async def test_redirect_never_resends_the_prompt(transport: str) -> None:
    ok = completion(answer(0.1, "fine"))
    with FaultServer([ok]) as elsewhere:
        target = f"http://127.0.0.1:{elsewhere.port}/v1/chat/completions"
        with FaultServer([redirect(target)]) as server:
            verdict = await tracker_for(server.port).turn_started(looping_history(1))
        assert elsewhere.requests == []  # the transcript went nowhere but the endpoint
    [call] = verdict.judge_calls
    assert call.error is not None and "307" in call.error, call.error
    assert len(server.requests) == 1  # a redirect is an answer, not an outage: no retry


def test_negative_token_counts_are_not_counts() -> None:
    assert token_count(-5) is None and token_count(True) is None and token_count(2.5) is None
    assert token_count(0) == 0 and token_count(7) == 7
    estimate = 4000 // CHARS_PER_TOKEN
    call = JudgeCall(
        model=FAST, stage=JudgeStage.FAST, prompt_tokens=-(10**6), completion_tokens=-5
    )
    assert call_tokens(call, 4000) == estimate
    call = JudgeCall(model=FAST, stage=JudgeStage.FAST, prompt_tokens=100, completion_tokens=-5)
    assert call_tokens(call, 4000) == 100
    budget = JudgeBudget(max_tokens=2500)
    for _ in range(2):
        budget.record([JudgeCall(model=FAST, stage=JudgeStage.FAST, prompt_tokens=-(10**6))], 4000)
    assert budget.tokens_used == 2 * estimate and budget.spent() is None
    budget.record([JudgeCall(model=FAST, stage=JudgeStage.FAST, prompt_tokens=-1)], 4000)
    assert budget.spent() is not None


async def test_endpoint_reporting_negative_usage_cannot_outspend_the_token_cap(
    transport: str,
) -> None:
    reply = completion(answer(0.1, "fine"))
    body = dict(reply.body) if isinstance(reply.body, dict) else {}
    body["usage"] = {"prompt_tokens": -100_000, "completion_tokens": -100_000, "total_tokens": -1}
    with FaultServer([Reply(body=body)]) as server:
        tracker = tracker_for(server.port, max_judge_tokens=1000)
        for turns in range(1, 21):
            verdict = await tracker.turn_started(looping_history(turns))
    # Each check's prompt is charged its estimate (~1-2k tokens): one or two checks, not 20.
    assert 1 <= len(server.requests) <= 2, len(server.requests)
    assert tracker.judge_tokens_used >= 1000
    assert any("budget" in e for e in verdict.errors) or not verdict.judge_calls


# -- caller objects whose __str__ raises ----------------------------------------------------


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    __repr__ = __str__


def call_message(**call: Any) -> dict[str, Any]:
    function = {"name": "run", "arguments": call.pop("arguments", "{}")}
    return {"role": "assistant", "content": None, "tool_calls": [{"function": function, **call}]}


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (call_message(id=Unprintable()), "tool_calls[0].id"),
        (call_message(arguments={"a": Unprintable()}), "tool_calls[0].function.arguments"),
        ({"role": "user", "content": "hi", "name": Unprintable()}, "name"),
    ],
)
def test_unprintable_caller_object_is_a_history_error(message: dict[str, Any], field: str) -> None:
    history = [{"role": "user", "content": "go"}, message]
    with pytest.raises(HistoryError) as caught:
        normalize_history(history)
    assert caught.value.index == 1 and caught.value.field == field
    assert "cannot be read as text: RuntimeError" in str(caught.value)


def test_unprintable_arguments_in_check_call_are_a_history_error() -> None:
    with pytest.raises(HistoryError, match="cannot be read as text"):
        canonical_arguments({"a": Unprintable()})
    with pytest.raises(HistoryError):
        LoopTracker(TrackerConfig()).check_call("run", {"a": Unprintable()})


async def test_unprintable_object_from_model_dump_is_a_history_error() -> None:
    class BadMessage:
        def model_dump(self, **_: Any) -> dict[str, Any]:
            raise RuntimeError("cannot dump")

    tracker = LoopTracker(TrackerConfig())
    with pytest.raises(HistoryError, match="model_dump"):
        await tracker.turn_started([{"role": "user", "content": "go"}, BadMessage()])
