"""The Google ADK plugin, end to end through a real ``Runner`` with ``InMemorySessionService``.

The agent's model is a ``BaseLlm`` subclass that scripts its replies (ADK's documented seam
for a model of one's own; the ``MockModel`` of ADK's test runner replays a fixed list and
cannot react to what it is told). It records every ``LlmRequest`` it gets, so each test
asserts what the model was told, which tools ran, and how the run ended.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import Agent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types
from pydantic import Field

from judge import TrackerConfig
from judge.errors import JudgeTimeout
from judge.integrations.google_adk import METADATA_KEY, LoopJudgePlugin, events_to_messages
from judge.tracker import LoopTracker
from tests.fakes import fake_judge
from tests.integrations.stores import DownStore

pytestmark = pytest.mark.anyio

APP = "shop"
USER = "u1"
TOOL = "convert_currency"
FENCE = "```loop-judge"
SAME_RESULT = "rate service unavailable"
GIVE_UP = "I cannot convert this now: the rate service is down."
TASK = "convert 10 EUR to USD"
# The default ladder (warn, warn, ask_user, stop) for a tool of the "other" class (3
# identical results allowed): the 4th, 5th and 6th calls are refused, each a rung higher,
# and the stop comes before the 7th call runs.
TOLD_ACTIONS = ["warn", "warn", "ask_user"]

Reply = Callable[[LlmRequest], types.Content]


def _texts(contents: list[types.Content]) -> list[str]:
    """Every text the request carries, plain parts and function responses alike."""
    found = []
    for content in contents:
        for part in content.parts or []:
            if part.text:
                found.append(part.text)
            elif part.function_response is not None:
                found.append(json.dumps(part.function_response.response))
    return found


def _told(contents: list[types.Content]) -> list[str]:
    """The recovery texts the model was shown: a turn's warning or a refused call's result."""
    return [text for text in _texts(contents) if FENCE in text]


def _warnings(contents: list[types.Content]) -> list[str]:
    """The warnings edited into the request as user turns of their own."""
    return [
        part.text
        for content in contents
        if content.role == "user"
        for part in content.parts or []
        if part.text and part.text.startswith(FENCE)
    ]


def _call(amount: int) -> types.Content:
    call = types.FunctionCall(name=TOOL, args={"amount": amount})
    return types.Content(role="model", parts=[types.Part(function_call=call)])


def _say(text: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=text)])


class ScriptedModel(BaseLlm):
    """A model whose every reply is ``reply(request)``; it keeps the requests it got."""

    model: str = "scripted"
    reply: Any = Field(exclude=True)
    requests: list[LlmRequest] = Field(default_factory=list, exclude=True)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        yield LlmResponse(content=self.reply(llm_request))


def looping(*, obey: bool = False) -> Reply:
    """The same call every time, until ``obey`` and a warning arrived."""

    def reply(request: LlmRequest) -> types.Content:
        if obey and _told(request.contents):
            return _say(GIVE_UP)
        return _call(10)

    return reply


class Shop:
    """One app: an agent with the currency tool, the plugin, a runner and its sessions."""

    def __init__(self, reply: Reply, plugin: LoopJudgePlugin, *, result: str = SAME_RESULT):
        self.model = ScriptedModel(reply=reply)
        self.runs: list[int] = []

        def convert_currency(amount: int) -> str:
            """Convert an amount of EUR to USD."""
            self.runs.append(amount)
            return result if result != "rate" else f"{amount} EUR = {amount * 1.08:.2f} USD"

        agent = Agent(name="cashier", model=self.model, tools=[convert_currency])
        self.sessions = InMemorySessionService()
        self.runner = Runner(
            app=App(name=APP, root_agent=agent, plugins=[plugin]), session_service=self.sessions
        )

    async def session(self) -> Session:
        return await self.sessions.create_session(app_name=APP, user_id=USER)

    async def run(self, session: Session, text: str = TASK) -> list[Event]:
        message = types.Content(role="user", parts=[types.Part(text=text)])
        return [
            event
            async for event in self.runner.run_async(
                user_id=USER, session_id=session.id, new_message=message
            )
        ]

    async def stored(self, session: Session) -> Session:
        found = await self.sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert found is not None
        return found


def _final_text(events: list[Event]) -> str:
    content = events[-1].content
    assert content is not None and content.parts
    return "".join(part.text or "" for part in content.parts)


async def test_a_looping_agent_is_warned_then_stopped() -> None:
    plugin = LoopJudgePlugin(config=TrackerConfig())
    shop = Shop(looping(), plugin)
    session = await shop.session()

    events = await shop.run(session)

    stop = events[-1].custom_metadata or {}
    verdict = stop[METADATA_KEY]
    assert verdict["action"] == "stop" and verdict["kind"] == "exact_repeat"
    assert TOOL in verdict["summary"] and _final_text(events)
    # The model read each rung of the ladder before the stop, each stronger than the last.
    told = _told(shop.model.requests[-1].contents)
    assert len(told) == len(TOLD_ACTIONS)
    assert "LOOP DETECTED:" in told[0] and "AGAIN" in told[1] and "ASK THE USER" in told[2]
    assert [v.action.value for v in plugin.verdicts] == [*TOLD_ACTIONS, "stop"]
    # A stubborn model: the tool ran its limit (3); the next calls were refused (the same
    # call stayed refused, one rung higher each time), and the 7th stopped before it ran.
    assert len(shop.model.requests) == 7
    assert shop.runs == [10, 10, 10]
    # The stop is the agent's final answer, kept in the session like any other event; the
    # 4th to 7th calls each have the recovery message as their result, never the tool's.
    stored = await shop.stored(session)
    results = [
        json.dumps(part.function_response.response)
        for event in stored.events
        for part in (event.content.parts or [] if event.content else [])
        if part.function_response is not None
    ]
    assert len(results) == 7 and all(FENCE in text for text in results[3:])
    assert (stored.events[-1].custom_metadata or {}).get(METADATA_KEY) == verdict


async def test_a_warning_edits_the_request_and_stays_in_place() -> None:
    # A preflight that never refuses leaves the warnings to the turns: each is a user turn
    # of its own in the request, and every later request shows it at the same place.
    plugin = LoopJudgePlugin(config=TrackerConfig(), preflight=False)
    shop = Shop(looping(), plugin)
    session = await shop.session()

    events = await shop.run(session)

    assert (events[-1].custom_metadata or {})[METADATA_KEY]["action"] == "stop"
    firsts = [n for n, r in enumerate(shop.model.requests) if _warnings(r.contents)]
    assert firsts, "no request carried a warning"
    first = shop.model.requests[firsts[0]].contents
    assert first[-1].role == "user" and _warnings(first) == _warnings([first[-1]])
    later = shop.model.requests[-1].contents
    assert _warnings(later)[0] == _warnings(first)[0]
    position = len(first) - 1
    assert later[position].parts and later[position].parts[0].text == _warnings(first)[0]
    # The warnings live in the requests only: none was written into the session's events.
    stored = await shop.stored(session)
    assert _warnings([e.content for e in stored.events if e.content]) == []


async def test_an_agent_that_obeys_the_warning_is_not_stopped() -> None:
    plugin = LoopJudgePlugin(config=TrackerConfig())
    shop = Shop(looping(obey=True), plugin)
    session = await shop.session()

    events = await shop.run(session)

    assert _final_text(events) == GIVE_UP
    assert not any((e.custom_metadata or {}).get(METADATA_KEY) for e in events)
    assert len(_told(shop.model.requests[-1].contents)) == 1
    assert shop.runs == [
        10,
        10,
        10,
    ]  # three allowed repeats, the fourth refused, then it changed course
    assert [v.action.value for v in plugin.verdicts] == ["warn"]


async def test_a_productive_agent_is_never_touched() -> None:
    turns = 12

    def productive(request: LlmRequest) -> types.Content:
        done = sum(1 for c in request.contents if c.role == "model")
        return _say("all converted") if done >= turns else _call(done)

    plugin = LoopJudgePlugin(config=TrackerConfig())
    shop = Shop(productive, plugin, result="rate")
    session = await shop.session()

    events = await shop.run(session)

    assert _final_text(events) == "all converted"
    assert shop.runs == list(range(turns))
    assert not any(_told(r.contents) for r in shop.model.requests)
    assert plugin.verdicts == []
    # The tracker really judged every request of this session.
    tracker = plugin.tracker(await shop.stored(session))
    assert tracker is not None and tracker.turn == turns + 1
    assert tracker.stats.detections == 0


async def test_each_session_has_its_own_tracker() -> None:
    plugin = LoopJudgePlugin(config=TrackerConfig())
    shop = Shop(looping(obey=True), plugin)
    first, second = await shop.session(), await shop.session()

    await shop.run(first)
    await shop.run(second)

    one, two = plugin.tracker(first), plugin.tracker(second)
    assert one is not None and two is not None and one is not two
    # Each conversation climbed its own ladder from the start: one warning each.
    assert [v.action.value for v in plugin.verdicts] == ["warn", "warn"]


async def test_a_session_continued_in_a_later_run_keeps_its_ladder() -> None:
    plugin = LoopJudgePlugin(config=TrackerConfig())
    shop = Shop(looping(obey=True), plugin)
    session = await shop.session()
    await shop.run(session)

    # The user insists; the model loops again in the same session: the call may run once
    # more after the person spoke, and the ladder climbs from where it stood (a second
    # warning, stronger) instead of starting over.
    shop.model.reply = looping()
    events = await shop.run(session, "please try again")

    assert (events[-1].custom_metadata or {})[METADATA_KEY]["action"] == "stop"
    assert [v.action.value for v in plugin.verdicts] == ["warn", *TOLD_ACTIONS[1:], "stop"]
    assert shop.runs == [10] * 4
    told = _told(shop.model.requests[-1].contents)
    assert "AGAIN" in told[-2] and "ASK THE USER" in told[-1]


def _finishing_after(calls: int) -> Reply:
    def reply(request: LlmRequest) -> types.Content:
        done = sum(1 for c in request.contents if c.role == "model")
        return _say("done") if done >= calls else _call(done)

    return reply


async def test_a_store_outage_never_crashes_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    store = DownStore()
    shop = Shop(_finishing_after(3), LoopJudgePlugin(store=store), result="rate")

    events = await shop.run(await shop.session())

    assert _final_text(events) == "done"
    assert shop.runs == [0, 1, 2]
    assert store.asked == 4  # every model request asked (no loop on record: no preflight)
    assert "redis down" in caplog.text


async def test_a_failing_judge_never_crashes_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    fast = "fake/fast"
    config = TrackerConfig(
        fast_model=fast, check_after_turns=1, initial_interval=1, early_checks=False
    )
    judge = fake_judge({fast: [JudgeTimeout("no answer in 30 s", model=fast)]})
    plugin = LoopJudgePlugin(config=config, judge_client=judge)
    shop = Shop(looping(), plugin)

    events = await shop.run(await shop.session())

    # The judge was asked and never answered; the heuristics still stopped the loop, and
    # the failure was logged (it is on that turn's verdict), not raised into the agent.
    assert judge.calls_to(fast)
    assert "judge check failed" in caplog.text
    assert (events[-1].custom_metadata or {})[METADATA_KEY]["action"] == "stop"
    assert shop.runs == [10, 10, 10]


async def test_native_events_convert_with_ids_and_error_flags() -> None:
    def reply(request: LlmRequest) -> types.Content:
        if sum(1 for c in request.contents if c.role == "model"):
            return _say("done")
        first = types.FunctionCall(id="call-a", name=TOOL, args={"amount": 5})
        second = types.FunctionCall(id="call-b", name=TOOL, args={"amount": -1})
        parts = [
            types.Part(text="thinking it over", thought=True),
            types.Part(text="checking"),
            types.Part(function_call=first),
            types.Part(function_call=second),
        ]
        return types.Content(role="model", parts=parts)

    model = ScriptedModel(reply=reply)

    def convert_currency(amount: int) -> dict[str, str]:
        """Convert an amount of EUR to USD."""
        if amount < 0:
            return {"status": "error", "error_message": "amount must be positive"}
        return {"result": "5 EUR = 5.40 USD"}

    agent = Agent(name="cashier", model=model, tools=[convert_currency])
    sessions = InMemorySessionService()
    runner = Runner(app=App(name=APP, root_agent=agent), session_service=sessions)
    session = await sessions.create_session(app_name=APP, user_id=USER)
    message = types.Content(role="user", parts=[types.Part(text="convert 5 EUR")])
    async for _ in runner.run_async(user_id=USER, session_id=session.id, new_message=message):
        pass
    stored = await sessions.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert stored is not None

    chat = events_to_messages(stored.events)

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


async def test_only_new_events_are_converted() -> None:
    plugin = LoopJudgePlugin(config=TrackerConfig())
    converted: list[str] = []
    convert = plugin._sessions._convert

    def counting(event: Event) -> list[dict[str, Any]]:
        converted.append(event.id)
        return convert(event)

    plugin._sessions._convert = counting
    turns = 10
    shop = Shop(_finishing_after(turns), plugin, result="rate")
    session = await shop.session()

    await shop.run(session)

    stored = await shop.stored(session)
    # Every event a request followed (all but the final answer), each once, and the newest
    # of each request once more (a framework may still add to its last event): linear in
    # the run, not quadratic.
    assert set(converted) == {e.id for e in stored.events[:-1]}
    assert max(converted.count(i) for i in converted) <= 2
    assert len(shop.model.requests) == turns + 1
    # And the result is never stale: the stored session, converted again, is the same.
    history = plugin._sessions.history(f"{APP}/{USER}/{session.id}", list(stored.events))
    assert history == events_to_messages(stored.events)


async def test_the_plugin_covers_every_agent_of_the_app() -> None:
    """Registered once on the App, it judges a sub-agent the root hands the task to: the
    session's one tracker follows the whole conversation, whichever agent talks."""

    def reply(request: LlmRequest) -> types.Content:
        if TOOL in request.tools_dict:
            return _call(10)  # the cashier, looping
        call = types.FunctionCall(name="transfer_to_agent", args={"agent_name": "cashier"})
        return types.Content(role="model", parts=[types.Part(function_call=call)])

    model = ScriptedModel(reply=reply)
    runs: list[int] = []

    def convert_currency(amount: int) -> str:
        """Convert an amount of EUR to USD."""
        runs.append(amount)
        return SAME_RESULT

    cashier = Agent(name="cashier", model=model, tools=[convert_currency])
    front = Agent(name="front_desk", model=model, sub_agents=[cashier])
    plugin = LoopJudgePlugin(config=TrackerConfig())
    sessions = InMemorySessionService()
    runner = Runner(app=App(name=APP, root_agent=front, plugins=[plugin]), session_service=sessions)
    session = await sessions.create_session(app_name=APP, user_id=USER)
    message = types.Content(role="user", parts=[types.Part(text=TASK)])
    events = [
        e async for e in runner.run_async(user_id=USER, session_id=session.id, new_message=message)
    ]

    assert {e.author for e in events} >= {"front_desk", "cashier"}
    assert events[-1].author == "cashier"
    assert (events[-1].custom_metadata or {})[METADATA_KEY]["action"] == "stop"
    assert runs == [10, 10, 10]
    assert [v.action.value for v in plugin.verdicts] == [*TOLD_ACTIONS, "stop"]
