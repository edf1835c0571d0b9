"""Judge replies from reasoning models, against a real HTTP server on 127.0.0.1.

Models that think before they answer (DeepSeek R1 distills, Qwen3, some o-series routes)
send a ``<think>...</think>`` block first, sometimes with a draft JSON or code braces in
it. The reply shapes below are the ones such models send through llama.cpp-style servers;
each goes through a real `LoopTracker`, litellm and a socket (tests/fault_server.py), and
the verdict must carry the final answer, or a judge error, never the draft.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.errors import JudgeOutputError
from judge.llm._litellm import _import_litellm
from judge.llm.assessment import (
    ANALYSIS_KEY,
    CONFIDENCE_KEY,
    JudgeAssessment,
    assessment_schema,
    parse_assessment,
)
from tests.fakes import looping_history
from tests.fault_server import FaultServer, Reply, completion

pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]

FAST = "openai/reasoner"
DRAFT = json.dumps(
    {"unproductive_state_analysis": "first guess", "unproductive_state_confidence": 0.3}
)
FINAL = json.dumps(
    {
        "unproductive_state_analysis": "The agent reran the same failing test four times.",
        "unproductive_state_confidence": 0.95,
    }
)

# Qwen3 behind a template that starts the reply with a newline: the thinking holds a draft.
QWEN3_DRAFT = (
    "\n<think>\nThe agent ran pytest, then again. Draft answer:\n"
    f"{DRAFT}\nNo wait, it is the same call four times with the same failure, so higher."
    f"\n</think>\n\n{FINAL}"
)
# An R1 distill: its chat template writes "<think>\n" into the prompt, so the reply opens
# mid-thought and holds only the closing tag.
R1_DISTILL = (
    f"Okay, let me look at the transcript. Maybe {DRAFT} fits? The results never change."
    f"\n</think>\n\n{FINAL}\n"
)
# The same with the answer in a markdown fence.
R1_FENCED = (
    f"Okay. Maybe {DRAFT} fits? The results never change.\n</think>\n\n```json\n{FINAL}\n```"
)
# Code with braces in the thinking (an R1 distill reading a Python edit).
R1_CODE_BRACES = (
    "The agent edits `cfg = {k: v for k, v in pairs}` and then `assert load({}) == {}` "
    "fails again, {unbalanced\n</think>\n" + FINAL
)
# Cut off by the reply cap while still thinking: the draft is all there is.
CUT_OFF_WITH_DRAFT = f"<think>\nLet me draft: {DRAFT}\nBut the agent also ran"
# Stopped while still thinking (a server-side stop sequence): no answer either.
STOPPED_IN_THINKING = f"<think>\nDraft: {DRAFT}"


@pytest.fixture(params=["aiohttp", "httpx"])
def transport(request: pytest.FixtureRequest) -> Any:
    litellm = _import_litellm()
    old = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = request.param == "httpx"
    yield request.param
    litellm.disable_aiohttp_transport = old


async def judged(reply: Reply, **cfg: Any) -> tuple[Verdict, FaultServer]:
    with FaultServer([reply]) as server:
        tracker = LoopTracker(
            TrackerConfig(
                fast_model=FAST,
                api_base=server.api_base,
                api_key="k",
                check_after_turns=1,
                initial_interval=1,
                timeout_s=5.0,
                max_retries=0,
                **cfg,
            )
        )
        verdict = await tracker.turn_started(looping_history(1))
    return verdict, server


@pytest.mark.parametrize(
    "text", [QWEN3_DRAFT, R1_DISTILL, R1_FENCED], ids=["qwen3", "r1-distill", "r1-fenced"]
)
async def test_the_final_answer_is_taken_never_the_draft(transport: str, text: str) -> None:
    verdict, _ = await judged(completion(text))
    [call] = verdict.judge_calls
    assert call.error is None and call.confidence == 0.95
    assert verdict.looping and verdict.errors == []


async def test_code_braces_in_thinking_are_no_parse_error(transport: str) -> None:
    verdict, _ = await judged(completion(R1_CODE_BRACES))
    assert verdict.judge_calls[0].confidence == 0.95 and verdict.looping


async def test_a_reply_cut_off_in_its_thinking_is_an_error_not_a_verdict(transport: str) -> None:
    verdict, server = await judged(
        completion(CUT_OFF_WITH_DRAFT, finish="length"), max_reply_tokens=256
    )
    [call] = verdict.judge_calls
    assert call.confidence is None and not verdict.looping and verdict.confidence is None
    assert call.error is not None and call.error.startswith("JudgeOutputError: ")
    assert "cut off inside the model's thinking" in call.error
    # names the cap it was sent with and the setting that raises it
    assert "max_tokens=256" in call.error and "LOOP_JUDGE_MAX_REPLY_TOKENS" in call.error
    assert server.requests[0].json()["max_tokens"] == 256
    assert verdict.errors == [f"fast judge {FAST}: {call.error}"]


async def test_a_reply_stopped_in_its_thinking_is_an_error(transport: str) -> None:
    verdict, _ = await judged(completion(STOPPED_IN_THINKING))
    error = verdict.judge_calls[0].error or ""
    assert "ended inside the model's thinking" in error and verdict.confidence is None


async def test_thinking_with_nothing_after_it_is_an_error(transport: str) -> None:
    verdict, _ = await judged(completion(f"Draft: {DRAFT}\n</think>\n", finish="length"))
    error = verdict.judge_calls[0].error or ""
    assert "no answer after the model's thinking" in error and verdict.confidence is None


def test_a_closing_tag_quoted_in_a_plain_answer_is_not_thinking() -> None:
    quoted = json.dumps(
        {
            "unproductive_state_analysis": "The agent keeps printing </think> into its output.",
            "unproductive_state_confidence": 0.4,
        }
    )
    assert parse_assessment(quoted).confidence == 0.4


@pytest.mark.parametrize("tag", ["think", "THINK", "thinking", "reasoning"])
def test_each_thinking_tag_is_skipped(tag: str) -> None:
    text = f"  <{tag}>draft {DRAFT} and code {{x: 1}}</{tag}>\n{FINAL}"
    assert parse_assessment(text).confidence == 0.95
    with pytest.raises(JudgeOutputError, match="cut off inside the model's thinking"):
        parse_assessment(f"<{tag}>draft {DRAFT}", finish_reason="length", max_tokens=600)


def test_the_schema_file_and_the_model_share_their_bounds() -> None:
    """A reply is checked once, against the schema file; the model's own bounds must say the
    same, or a value one accepts and the other refuses would depend on how it was built."""
    confidence = assessment_schema()["properties"][CONFIDENCE_KEY]
    bounds = {type(m).__name__: m for m in JudgeAssessment.model_fields["confidence"].metadata}
    assert (confidence["minimum"], confidence["maximum"]) == (bounds["Ge"].ge, bounds["Le"].le)
    assert set(assessment_schema()["required"]) == {ANALYSIS_KEY, CONFIDENCE_KEY}
