"""The judge against a real model: SmolLM2-135M behind llama.cpp's OpenAI-compatible server.

A model this small judges at chance, so nothing here asserts on a verdict's answer; the
tests pin down what must hold for any model: real HTTP through litellm, the structured
output negotiation, the bookkeeping on the verdict, and that a check never raises.
Skipped, with the reason, where ``.ci/install-llama.sh`` could not install the server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.llm._litellm import FORMAT_MODES, LiteLLMClient
from judge.llm.assessment import ANALYSIS_KEY, CONFIDENCE_KEY, assessment_schema, extract_object
from judge.tracker import FRESH_ASSISTANT_TURNS
from judge.verdict import JudgeCall, JudgeStage
from tests.fakes import looping_history
from tests.realmodel import (
    LITELLM_MODEL,
    LocalServer,
    announce_skip,
    llama_server,
    missing_reason,
    smollm_gguf,
)

_SKIP_REASON = missing_reason()
announce_skip(_SKIP_REASON)
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.model_requests,  # to the local llama.cpp server only
    pytest.mark.slow,
    pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or ""),
]

# Generous: one thread decodes ~30-60 tokens/s on CI, and a reply may run to the 600-token cap.
TIMEOUT_S = 120.0
HISTORY_MESSAGES = 6
PROMPT = [
    {
        "role": "system",
        "content": (
            "You judge whether an AI agent is stuck in a loop. Answer with a JSON object with "
            f'the keys "{ANALYSIS_KEY}" (one sentence) and "{CONFIDENCE_KEY}" (0 to 1).'
        ),
    },
    {"role": "user", "content": "The agent read f1.txt, then f2.txt, then f3.txt."},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    gguf = smollm_gguf()
    assert gguf is not None  # guaranteed by the skipif above
    with llama_server(gguf, tmp_path_factory.mktemp("llama")) as running:
        yield running


async def _no_sleep(seconds: float) -> None:
    return None


def make_tracker(server: LocalServer) -> LoopTracker:
    config = TrackerConfig(
        fast_model=LITELLM_MODEL,
        api_base=server.api_base,
        check_after_turns=1,
        initial_interval=1,
        min_interval=1,  # check on every turn, whatever the model answers
        max_interval=1,
        timeout_s=TIMEOUT_S,
        early_checks=False,
        # A short window keeps each check's new prompt tokens (and so the tier) small: one
        # CPU thread evaluates only ~70-150 prompt tokens/s here.
        history_messages=HISTORY_MESSAGES,
    )
    return LoopTracker(config, sleep=_no_sleep)


def make_client(server: LocalServer) -> LiteLLMClient:
    return LiteLLMClient(api_base=server.api_base, timeout_s=TIMEOUT_S, sleep=_no_sleep)


def assert_well_formed(verdict: Any, turn: int) -> JudgeCall:
    """What holds for any judge model: one fast call, bookkept, answered or explained."""
    assert isinstance(verdict, Verdict)
    assert verdict.turn == turn
    assert verdict.source == "llm"
    assert len(verdict.judge_calls) == 1
    call = verdict.judge_calls[0]
    assert (call.model, call.stage) == (LITELLM_MODEL, JudgeStage.FAST)
    assert call.attempts >= 1
    assert call.latency_s > 0
    if call.error is None:
        assert call.confidence is not None
        assert 0.0 <= call.confidence <= 1.0
        assert isinstance(call.analysis, str)
        assert verdict.confidence == call.confidence
        assert verdict.errors == []
    else:
        # The server answered but the reply was unusable (bad JSON, a confidence out of
        # range, cut off at max_tokens): said so on the verdict, never raised.
        assert call.error.startswith("JudgeOutputError: "), call.error
        assert call.confidence is None
        assert len(verdict.errors) == 1
        assert call.error in verdict.errors[0]
        assert not verdict.looping
    return call


async def test_one_check_gives_a_well_formed_verdict(server: LocalServer) -> None:
    tracker = make_tracker(server)
    verdict = await tracker.turn_started(looping_history(3))
    call = assert_well_formed(verdict, turn=1)
    assert call.prompt_tokens is None or call.prompt_tokens > 0
    assert call.cost_usd is None  # litellm has no price for a local model


async def test_five_checks_in_a_row_keep_working(server: LocalServer) -> None:
    """A check on every turn, except right after the model called a loop: then the judge
    waits for FRESH_ASSISTANT_TURNS new turns (it is not asked about answered evidence)."""
    tracker = make_tracker(server)
    latencies: list[float] = []
    last_loop: int | None = None
    turn = 0
    while len(latencies) < 5:
        turn += 1
        assert turn <= 5 * (FRESH_ASSISTANT_TURNS + 1), "checks stopped"
        verdict = await tracker.turn_started(looping_history(turn))
        if not verdict.judge_calls:
            assert last_loop is not None and turn - last_loop <= FRESH_ASSISTANT_TURNS
            continue
        latencies.append(assert_well_formed(verdict, turn=turn).latency_s)
        if verdict.looping:
            last_loop = turn
    assert all(latency > 0 for latency in latencies)
    assert tracker.last_check_turn == turn


async def test_unknown_model_starts_at_json_object_with_schema(server: LocalServer) -> None:
    client = make_client(server)
    reply = await client.complete(LITELLM_MODEL, PROMPT, schema=assessment_schema())
    # llama.cpp honours {"type": "json_object", "schema": ...} on the first attempt ...
    assert FORMAT_MODES[client._format_mode[LITELLM_MODEL]] == "json_object_schema"
    assert reply.attempts == 1
    assert reply.finish_reason in ("stop", "length")
    if reply.finish_reason == "stop":
        # ... and turns the schema into a grammar, so a finished reply has both keys.
        assert reply.content is not None
        assert set(extract_object(reply.content)) == {ANALYSIS_KEY, CONFIDENCE_KEY}


async def test_json_schema_rejection_falls_back_and_still_answers(
    server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = make_client(server)
    client._format_mode[LITELLM_MODEL] = FORMAT_MODES.index("json_schema")
    with caplog.at_level(logging.INFO, logger="judge.llm"):
        reply = await client.complete(LITELLM_MODEL, PROMPT, schema=assessment_schema())
    assert FORMAT_MODES[client._format_mode[LITELLM_MODEL]] == "json_object_schema"
    assert reply.attempts == 2
    assert reply.content
    assert any("rejected response_format json_schema" in r.getMessage() for r in caplog.records)
