"""The Strands hook provider, end to end through a real ``strands.Agent``.

The agent's model is a scripted implementation of Strands' ``Model`` interface (its
documented seam for a provider of one's own): each call sees the exact messages the agent
sends and streams back a reply in Strands' own stream events, so each test asserts what
the model was told, which tools ran, and how the invocation ended.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("strands")

from strands import Agent, tool
from strands.models.model import Model
from strands.types.content import Messages

from judge import TrackerConfig
from judge.errors import JudgeTimeout
from judge.integrations.strands import STATE_KEY, LoopJudgeHooks, messages_to_chat
from judge.tracker import LoopTracker
from tests.fakes import fake_judge
from tests.integrations.stores import DownStore

pytestmark = pytest.mark.anyio

TOOL = "convert_currency"
FENCE = "```loop-judge"
SAME_RESULT = "rate service unavailable"
GIVE_UP = "I cannot convert this now: the rate service is down."
TASK = "convert 10 EUR to USD"
# The default ladder (warn, warn, ask_user, stop) for a tool of the "other" class (3
# identical results allowed): the 4th, 5th and 6th calls are refused, each a rung higher,
# and the stop comes before the 7th call runs.
TOLD_ACTIONS = ["warn", "warn", "ask_user"]

# What the scripted model answers: a tool call (its input) or a text.
Reply = Callable[[Messages], "dict[str, Any] | str"]


def _texts(messages: Messages) -> list[str]:
    """Every text the messages carry: plain blocks and tool results alike."""
    found: list[str] = []
    for message in messages:
        for block in message["content"]:
            if "text" in block:
                found.append(block["text"])
            elif "toolResult" in block:
                found += [c["text"] for c in block["toolResult"]["content"] if "text" in c]
    return found


def _told(messages: Messages) -> list[str]:
    """The recovery texts the model was shown: a turn's warning or a refused call's result."""
    return [text for text in _texts(messages) if FENCE in text]


class ScriptedModel(Model):
    """A model whose every reply is ``reply(messages)``; it keeps what each call was sent."""

    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.seen: list[Messages] = []

    def update_config(self, **model_config: Any) -> None:
        return None

    def get_config(self) -> Any:
        return {}

    def structured_output(
        self, output_model: Any, prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        raise NotImplementedError("the tests ask for no structured output")

    async def stream(
        self,
        messages: Messages,
        tool_specs: Any = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        self.seen.append(json.loads(json.dumps(messages, default=str)))
        answer = self.reply(messages)
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(answer, str):
            yield {"contentBlockDelta": {"delta": {"text": answer}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        call_id = f"tooluse_{len(self.seen)}"
        yield {"contentBlockStart": {"start": {"toolUse": {"toolUseId": call_id, "name": TOOL}}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(answer)}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def looping(*, obey: bool = False) -> Reply:
    """The same call every time, until ``obey`` and a warning arrived."""

    def reply(messages: Messages) -> dict[str, Any] | str:
        if obey and _told(messages):
            return GIVE_UP
        return {"amount": 10}

    return reply


def _finishing_after(calls: int, text: str = "done") -> Reply:
    def reply(messages: Messages) -> dict[str, Any] | str:
        done = sum(1 for m in messages if m["role"] == "assistant")
        return text if done >= calls else {"amount": done}

    return reply


class Cashier:
    """One agent with the currency tool and the hook provider."""

    def __init__(self, reply: Reply, hooks: LoopJudgeHooks, *, result: str = SAME_RESULT):
        self.model = ScriptedModel(reply)
        self.runs: list[int] = []

        @tool
        def convert_currency(amount: int) -> str:
            """Convert an amount of EUR to USD.

            Args:
                amount: the amount in EUR.
            """
            self.runs.append(amount)
            return result if result != "rate" else f"{amount} EUR = {amount * 1.08:.2f} USD"

        self.agent = Agent(
            model=self.model, tools=[convert_currency], hooks=[hooks], callback_handler=None
        )

    async def run(self, text: str = TASK) -> Any:
        return await self.agent.invoke_async(text)


async def test_a_looping_agent_is_warned_then_stopped() -> None:
    hooks = LoopJudgeHooks(config=TrackerConfig())
    cashier = Cashier(looping(), hooks)

    result = await cashier.run()

    assert result.stop_reason == "end_turn"
    stop = cashier.agent.state.get(STATE_KEY)
    assert stop["action"] == "stop" and stop["kind"] == "exact_repeat"
    assert TOOL in stop["summary"] and str(result).strip()
    # The model read each rung of the ladder before the stop, each stronger than the last.
    told = _told(cashier.model.seen[-1])
    assert len(told) == len(TOLD_ACTIONS)
    assert "LOOP DETECTED:" in told[0] and "AGAIN" in told[1] and "ASK THE USER" in told[2]
    assert [v.action.value for v in hooks.verdicts] == [*TOLD_ACTIONS, "stop"]
    # A stubborn model: the tool ran its limit (3); the next calls were refused (the same
    # call stayed refused, one rung higher each time), and the 7th stopped before it ran.
    assert len(cashier.model.seen) == 7
    assert cashier.runs == [10, 10, 10]
    # The 4th to 7th calls each have the recovery message as their (error) result.
    results = [
        block["toolResult"]
        for message in cashier.agent.messages
        for block in message["content"]
        if "toolResult" in block
    ]
    assert len(results) == 7
    assert all(r["status"] == "error" and FENCE in r["content"][0]["text"] for r in results[3:])
    # The stop is the final assistant message of the conversation.
    last = cashier.agent.messages[-1]
    assert last["role"] == "assistant" and last["content"][0]["text"] == str(result).strip()


async def test_a_warning_goes_under_the_results_and_stays() -> None:
    # A preflight that never refuses leaves the warnings to the turns: each is a text block
    # of the user message holding the looping results, and stays in the conversation.
    hooks = LoopJudgeHooks(config=TrackerConfig(), preflight=False)
    cashier = Cashier(looping(), hooks)

    await cashier.run()

    assert cashier.agent.state.get(STATE_KEY)["action"] == "stop"
    warned = [
        m
        for m in cashier.agent.messages
        if m["role"] == "user" and any(b.get("text", "").startswith(FENCE) for b in m["content"])
    ]
    assert len(warned) == len(TOLD_ACTIONS)
    for message in warned:
        assert "toolResult" in message["content"][0] and "text" in message["content"][-1]
    # Roles still alternate, as Bedrock requires: no turn of ours was added.
    roles = [m["role"] for m in cashier.agent.messages]
    assert all(a != b for a, b in itertools.pairwise(roles))
    # The tracker reads its own recovery messages back, never as a person's new prompt.
    tracker = hooks.tracker(cashier.agent)
    assert tracker is not None and tracker.stats.detections == len(TOLD_ACTIONS) + 1


async def test_an_agent_that_obeys_the_warning_is_not_stopped() -> None:
    hooks = LoopJudgeHooks(config=TrackerConfig())
    cashier = Cashier(looping(obey=True), hooks)

    result = await cashier.run()

    assert str(result).strip() == GIVE_UP
    assert cashier.agent.state.get(STATE_KEY) is None
    assert len(_told(cashier.model.seen[-1])) == 1
    # Three allowed repeats, the fourth refused, then it changed course.
    assert cashier.runs == [10, 10, 10]
    assert [v.action.value for v in hooks.verdicts] == ["warn"]


async def test_a_productive_agent_is_never_touched() -> None:
    turns = 12
    hooks = LoopJudgeHooks(config=TrackerConfig())
    cashier = Cashier(_finishing_after(turns, "all converted"), hooks, result="rate")

    result = await cashier.run()

    assert str(result).strip() == "all converted"
    assert cashier.runs == list(range(turns))
    assert not any(_told(seen) for seen in cashier.model.seen)
    assert hooks.verdicts == [] and cashier.agent.state.get(STATE_KEY) is None
    # The tracker really judged every model call of this agent.
    tracker = hooks.tracker(cashier.agent)
    assert tracker is not None and tracker.turn == turns + 1
    assert tracker.stats.detections == 0


async def test_a_conversation_continued_keeps_its_ladder_and_a_new_run_clears_the_stop() -> None:
    hooks = LoopJudgeHooks(config=TrackerConfig())
    cashier = Cashier(looping(obey=True), hooks)
    await cashier.run()

    # The user insists; the model loops again in the same conversation: the call may run
    # once more after the person spoke, and the ladder climbs from where it stood (a
    # second warning, stronger) instead of starting over.
    cashier.model.reply = looping()
    await cashier.run("please try again")
    assert [v.action.value for v in hooks.verdicts] == ["warn", *TOLD_ACTIONS[1:], "stop"]
    assert cashier.runs == [10] * 4
    told = _told(cashier.model.seen[-1])
    assert "AGAIN" in told[-2] and "ASK THE USER" in told[-1]
    assert cashier.agent.state.get(STATE_KEY)["action"] == "stop"

    # The next invocation starts with no stop on record.
    cashier.model.reply = _finishing_after(0, "fine")
    result = await cashier.run("thanks")
    assert str(result).strip() == "fine"
    assert cashier.agent.state.get(STATE_KEY) is None


async def test_agents_sharing_a_provider_have_their_own_trackers() -> None:
    hooks = LoopJudgeHooks(config=TrackerConfig())
    first = Cashier(looping(obey=True), hooks)
    second = Cashier(looping(obey=True), hooks)

    await first.run()
    await second.run()

    one, two = hooks.tracker(first.agent), hooks.tracker(second.agent)
    assert one is not None and two is not None and one is not two
    # Each conversation climbed its own ladder from the start: one warning each.
    assert [v.action.value for v in hooks.verdicts] == ["warn", "warn"]


async def test_a_store_outage_never_crashes_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    store = DownStore()
    cashier = Cashier(_finishing_after(3), LoopJudgeHooks(store=store, session="s1"), result="rate")

    result = await cashier.run()

    assert str(result).strip() == "done"
    assert cashier.runs == [0, 1, 2]
    assert store.asked == 4  # every model call asked (no loop on record: no preflight)
    assert "redis down" in caplog.text


async def test_a_failing_judge_never_crashes_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    fast = "fake/fast"
    config = TrackerConfig(
        fast_model=fast, check_after_turns=1, initial_interval=1, early_checks=False
    )
    judge = fake_judge({fast: [JudgeTimeout("no answer in 30 s", model=fast)]})
    cashier = Cashier(looping(), LoopJudgeHooks(config=config, judge_client=judge))

    await cashier.run()

    # The judge was asked and never answered; the heuristics still stopped the loop, and
    # the failure was logged (it is on that turn's verdict), not raised into the agent.
    assert judge.calls_to(fast)
    assert "judge check failed" in caplog.text
    assert cashier.agent.state.get(STATE_KEY)["action"] == "stop"
    assert cashier.runs == [10, 10, 10]


def test_native_messages_convert_with_ids_and_error_flags() -> None:
    messages: Messages = [
        {"role": "user", "content": [{"text": "convert 5 EUR"}]},
        {
            "role": "assistant",
            "content": [
                {"reasoningContent": {"reasoningText": {"text": "thinking it over"}}},
                {"text": "checking"},
                {"toolUse": {"toolUseId": "call-a", "name": TOOL, "input": {"amount": 5}}},
                {"toolUse": {"toolUseId": "call-b", "name": TOOL, "input": {"amount": -1}}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "toolResult": {
                        "toolUseId": "call-a",
                        "status": "success",
                        "content": [{"json": {"usd": 5.4}}],
                    }
                },
                {
                    "toolResult": {
                        "toolUseId": "call-b",
                        "status": "error",
                        "content": [{"text": "amount must be positive"}],
                    }
                },
                {"text": "note from a plugin"},
            ],
        },
        {"role": "assistant", "content": [{"text": "done"}]},
    ]

    chat = messages_to_chat(messages)

    assert chat[0] == {"role": "user", "content": "convert 5 EUR"}
    assistant = chat[1]
    assert assistant["role"] == "assistant" and assistant["content"] == "checking"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call-a", "call-b"]
    assert assistant["tool_calls"][0]["function"] == {"name": TOOL, "arguments": '{"amount": 5}'}
    assert chat[2] == {"role": "tool", "tool_call_id": "call-a", "content": '{"usd": 5.4}'}
    block = chat[3]["content"][0]
    assert block["tool_use_id"] == "call-b" and block["is_error"] is True
    assert block["content"] == "amount must be positive"
    assert chat[4] == {"role": "user", "name": "observation", "content": "note from a plugin"}
    assert chat[-1] == {"role": "assistant", "content": "done"}


async def test_real_messages_convert_and_the_tracker_reads_them() -> None:
    cashier = Cashier(_finishing_after(2), LoopJudgeHooks(config=TrackerConfig()), result="rate")
    await cashier.run()

    chat = messages_to_chat(cashier.agent.messages)

    calls = [m for m in chat if m.get("tool_calls")]
    results = [m for m in chat if m["role"] == "tool"]
    assert [c["tool_calls"][0]["id"] for c in calls] == [m["tool_call_id"] for m in results]
    assert results[0]["content"] == "0 EUR = 0.00 USD"
    verdict = await LoopTracker(TrackerConfig()).turn_started(chat)
    assert not verdict


async def test_only_new_messages_are_converted() -> None:
    hooks = LoopJudgeHooks(config=TrackerConfig())
    converted: list[int] = []
    convert = hooks._sessions._convert

    def counting(message: Any) -> list[dict[str, Any]]:
        converted.append(id(message))
        return convert(message)

    hooks._sessions._convert = counting
    turns = 10
    cashier = Cashier(_finishing_after(turns), hooks, result="rate")

    await cashier.run()

    messages = cashier.agent.messages
    # Every message a model call followed (all but the final answer), each once, and the
    # newest of each call once more (a framework may still add to it): linear, not quadratic.
    assert set(converted) == {id(m) for m in messages[:-1]}
    assert max(converted.count(i) for i in converted) <= 2
    assert len(cashier.model.seen) == turns + 1
    # And the result is never stale.
    assert hooks._sessions.history(hooks._key(cashier.agent), messages) == messages_to_chat(
        messages
    )
