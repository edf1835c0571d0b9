"""The pydantic-ai capability, end to end against a real `pydantic_ai.Agent` run.

The agent's model is pydantic-ai's own `FunctionModel`: a scripted function that sees the
exact messages the framework would send, so each test asserts what the model was told,
what ran, and how the run ended.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from judge import LoopDetected, TrackerConfig
from judge.integrations.pydantic_ai import METADATA_KEY, LoopJudge, to_chat_messages
from judge.tracker import LoopTracker
from tests.integrations.stores import DownStore

pytestmark = pytest.mark.anyio

TOOL = "convert_currency"
FENCE = "```loop-judge"
SAME_RESULT = "rate service unavailable"
GIVE_UP = "I cannot convert this now: the rate service is down."
# The default ladder (warn, warn, ask_user, stop) for a tool of the "other" class (3
# identical results allowed): the 4th, 5th and 6th calls are refused, each a rung higher,
# and the stop comes before the 7th call runs.
TOLD_ACTIONS = ["warn", "warn", "ask_user"]


def _recoveries(messages: list[ModelMessage]) -> list[SystemPromptPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, SystemPromptPart) and (part.metadata or {}).get(METADATA_KEY)
    ]


def _told(messages: list[ModelMessage]) -> list[str]:
    """The recovery texts the model was shown: a turn's warning (a mid-conversation system
    prompt, which FunctionModel renders as a ``<system>`` user part) or a refused call's
    result (a tool return)."""
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, (SystemPromptPart, UserPromptPart, ToolReturnPart))
        and isinstance(part.content, str)
        and FENCE in part.content
    ]


class Script:
    """The scripted model: the same call every time until `obey` and a warning arrived."""

    def __init__(self, *, obey: bool = False) -> None:
        self.obey = obey
        self.requests = 0
        self.seen: list[ModelMessage] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests += 1
        self.seen = list(messages)
        if self.obey and _told(messages):
            return ModelResponse(parts=[TextPart(GIVE_UP)])
        return ModelResponse(parts=[ToolCallPart(TOOL, {"amount": 10})])


def _agent(model: Any, capability: LoopJudge) -> tuple[Agent[None, str], list[int]]:
    agent: Agent[None, str] = Agent(FunctionModel(model), capabilities=[capability])
    runs: list[int] = []

    @agent.tool_plain
    def convert_currency(amount: int) -> str:
        runs.append(amount)
        return SAME_RESULT

    return agent, runs


async def test_a_looping_agent_is_warned_then_stopped() -> None:
    script = Script()
    agent, runs = _agent(script, LoopJudge(config=TrackerConfig()))

    with pytest.raises(LoopDetected) as caught:
        await agent.run("convert 10 EUR to USD")

    verdict = caught.value.verdict
    assert verdict.action.value == "stop" and verdict.kind is not None
    assert verdict.kind.value == "exact_repeat"
    assert TOOL in (verdict.summary or "")
    # The model read each rung of the ladder before the stop, each stronger than the last.
    told = _told(script.seen)
    assert len(told) == len(TOLD_ACTIONS)
    assert "LOOP DETECTED:" in told[0] and "AGAIN" in told[1] and "ASK THE USER" in told[2]
    # A stubborn model: the tool ran its limit (3); the next calls were refused, and the
    # preflight stopped the 7th before its side effect.
    assert script.requests == 7
    assert len(runs) == 3
    assert caught.value.session is not None


async def test_an_agent_that_obeys_the_warning_is_not_stopped() -> None:
    script = Script(obey=True)
    agent, runs = _agent(script, LoopJudge(config=TrackerConfig()))

    result = await agent.run("convert 10 EUR to USD")

    assert result.output == GIVE_UP
    told = _told(result.all_messages())
    assert len(told) == 1 and "LOOP DETECTED:" in told[0]
    assert len(runs) == 3  # three allowed repeats, the fourth refused, then it changed course


async def test_a_productive_agent_is_never_touched() -> None:
    turns = 12

    def productive(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(m, ModelResponse) for m in messages)
        if done >= turns:
            return ModelResponse(parts=[TextPart("all converted")])
        return ModelResponse(parts=[ToolCallPart(TOOL, {"amount": done})])

    capability = LoopJudge(config=TrackerConfig())
    agent: Agent[None, str] = Agent(FunctionModel(productive), capabilities=[capability])

    @agent.tool_plain
    def convert_currency(amount: int) -> str:
        return f"{amount} EUR = {amount * 1.08:.2f} USD"

    result = await agent.run("convert 0..11 EUR to USD")

    assert result.output == "all converted"
    assert _recoveries(result.all_messages()) == []
    # The tracker really judged every request of this conversation.
    tracker = capability.tracker(result.conversation_id)
    assert tracker is not None and tracker.turn == turns + 1
    assert tracker.stats.detections == 0


async def test_a_conversation_continued_in_a_later_run_keeps_its_ladder() -> None:
    capability = LoopJudge(config=TrackerConfig())
    first, _ = _agent(Script(obey=True), capability)
    result = await first.run("convert 10 EUR to USD")
    assert len(_told(result.all_messages())) == 1

    # The user insists; the agent loops again in the same conversation: the call may run
    # once more after the person spoke, and the ladder climbs from where it stood (a
    # second warning, stronger) instead of starting over.
    script = Script()
    second, _ = _agent(script, capability)
    with pytest.raises(LoopDetected):
        await second.run("please try again", message_history=result.all_messages())
    told = _told(script.seen)
    assert len(told) == len(TOLD_ACTIONS)
    assert "LOOP DETECTED:" in told[0] and "AGAIN" in told[1] and "ASK THE USER" in told[2]


async def test_loop_judge_trouble_never_crashes_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    store = DownStore()
    agent, runs = _agent(_finishing_after(3), LoopJudge(store=store))

    result = await agent.run("convert 10 EUR to USD")

    assert result.output == "done"
    assert len(runs) == 3
    assert store.asked == 4  # every model request asked (no loop on record: no preflight)
    assert "redis down" in caplog.text


def _finishing_after(calls: int) -> Any:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(isinstance(m, ModelResponse) for m in messages)
        if done >= calls:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(TOOL, {"amount": done})])

    return model


async def test_native_parts_convert_with_ids_and_error_flags() -> None:
    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    TextPart("checking"),
                    ToolCallPart(TOOL, '{"amount": 5}', tool_call_id="call-a"),
                    ToolCallPart(TOOL, {"amount": -1}, tool_call_id="call-b"),
                ]
            )
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(model), instructions="be brief")

    @agent.tool_plain
    def convert_currency(amount: int) -> str:
        if amount < 0:
            raise ModelRetry("amount must be positive")
        return "5 EUR = 5.40 USD"

    result = await agent.run("convert 5 EUR")
    chat = to_chat_messages(result.all_messages())

    assert chat[0] == {"role": "user", "content": "convert 5 EUR"}
    assistant = chat[1]
    assert assistant["role"] == "assistant" and assistant["content"] == "checking"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call-a", "call-b"]
    assert assistant["tool_calls"][0]["function"] == {"name": TOOL, "arguments": '{"amount": 5}'}
    ok = next(m for m in chat if m.get("tool_call_id") == "call-a")
    assert ok == {"role": "tool", "tool_call_id": "call-a", "content": "5 EUR = 5.40 USD"}
    failed = next(m for m in chat if isinstance(m["content"], list))
    block = failed["content"][0]
    assert block["tool_use_id"] == "call-b" and block["is_error"] is True
    assert "amount must be positive" in block["content"]
    assert chat[-1] == {"role": "assistant", "content": "done"}
    # And the tracker reads it as it is: no HistoryError, the failure flagged.
    verdict = await LoopTracker(TrackerConfig()).turn_started(chat)
    assert not verdict


def test_a_tool_return_outside_a_run_converts_too() -> None:
    history: list[ModelMessage] = [
        ModelRequest(parts=[SystemPromptPart("be brief")]),
        ModelRequest(parts=[ToolReturnPart(TOOL, {"usd": 5.4}, tool_call_id="x1")]),
    ]
    assert to_chat_messages(history) == [
        {"role": "system", "content": "be brief"},
        {"role": "tool", "tool_call_id": "x1", "content": '{"usd":5.4}'},
    ]


def test_incremental_conversion_matches_a_full_one() -> None:
    """Only new messages are converted each turn, and the result is never stale: a part
    added in place to the last message, a new message and a rewritten head all show."""
    sessions = LoopJudge(config=TrackerConfig())._sessions
    history: list[ModelMessage] = [
        ModelRequest(parts=[UserPromptPart("convert 10 EUR")]),
        ModelResponse(parts=[ToolCallPart(TOOL, {"amount": 10}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart(TOOL, SAME_RESULT, tool_call_id="c1")]),
    ]
    assert sessions.history("s", history) == to_chat_messages(history)

    last = history[-1]
    assert isinstance(last, ModelRequest)
    last.parts = [*last.parts, SystemPromptPart("note")]  # what an enqueue does in place
    history.append(ModelResponse(parts=[TextPart("done")]))
    assert sessions.history("s", history) == to_chat_messages(history)
    assert {"role": "system", "content": "note"} in sessions.history("s", history)

    rewritten = [ModelRequest(parts=[UserPromptPart("summary of the above")]), *history[2:]]
    assert sessions.history("s", rewritten) == to_chat_messages(rewritten)
