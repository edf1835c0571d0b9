"""The OpenAI Agents SDK integration, end to end: the real SDK (``Runner.run``) talks to a
scripted OpenAI-compatible Chat Completions server on 127.0.0.1, and loop-judge sits in the
run through ``call_model_input_filter`` and a tool input guardrail."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
from agents.run_config import CallModelData, ModelInputData
from openai import AsyncOpenAI

from judge import Action, LoopDetected, LoopTracker, TrackerConfig
from judge.detectors.revisit import READ_RUN_LIMIT
from judge.integrations.openai_agents import LoopJudge, items_to_messages
from tests.fault_server import FaultServer, Reply, Request, completion

pytestmark = pytest.mark.anyio

# Heuristics only and no semantic extra: the same verdicts on every machine.
CONFIG = TrackerConfig(semantic="off")
# Enough turns for warn, warn, ask_user, stop and then some; the SDK's default is 10.
MAX_TURNS = 40
# The fence every recovery message opens with (prompts/recovery_*.md).
RECOVERY_FENCE = "```loop-judge"
FINAL_ANSWER = "Order 7 has shipped; there is no tracking number yet."


def tool_call(request: Request, name: str, arguments: dict[str, Any]) -> Reply:
    """The model asks for one tool call, numbered by the request's position."""
    n = len(request.json()["messages"])
    call = {
        "id": f"call_{n}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return completion(None, finish="tool_calls", tool_calls=[call])


def nudged(request: Request) -> bool:
    """Did the model's input carry a recovery message: as the user role (a turn's warning)
    or as a refused call's result (the guardrail's)?"""
    return any(
        m["role"] in ("user", "tool") and RECOVERY_FENCE in str(m.get("content"))
        for m in request.json()["messages"]
    )


def looping_model(request: Request) -> Reply:
    """Checks the same order again and again, whatever it is told."""
    return tool_call(request, "get_order", {"order_id": "7"})


def obeying_model(request: Request) -> Reply:
    """Loops until it reads a recovery message, then answers with what it has."""
    if nudged(request):
        return completion(FINAL_ANSWER)
    return tool_call(request, "get_order", {"order_id": "7"})


def productive_model(request: Request) -> Reply:
    """Reads five different pages, then answers."""
    results = [m for m in request.json()["messages"] if m["role"] == "tool"]
    if len(results) < 5:
        return tool_call(request, "read_page", {"page": len(results) + 1})
    return completion(FINAL_ANSWER)


class Tools:
    """The agent's tools, counting what actually ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @function_tool
        def get_order(order_id: str) -> str:
            """Look up an order."""
            self.ran.append(f"get_order {order_id}")
            return "status: shipped, tracking: not yet assigned"

        @function_tool
        def read_page(page: int) -> str:
            """Read one page of the order log."""
            self.ran.append(f"read_page {page}")
            return f"page {page}: entry {page * 17}"

        self.all = [get_order, read_page]


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[Request], Reply]], FaultServer]]:
    servers: list[FaultServer] = []

    def start(handler: Callable[[Request], Reply]) -> FaultServer:
        server = FaultServer(handler)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def agent_for(server: FaultServer, tools: Tools) -> Agent[Any]:
    client = AsyncOpenAI(base_url=server.api_base, api_key="sk-test-not-a-key", max_retries=0)
    return Agent(
        name="orders",
        instructions="You answer questions about orders.",
        model=OpenAIChatCompletionsModel(model="scripted-agent", openai_client=client),
        tools=tools.all,
    )


async def run(judge: LoopJudge, agent: Agent[Any]) -> Any:
    return await Runner.run(
        judge.guard(agent),
        "Where is my order 7?",
        run_config=judge.run_config(tracing_disabled=True),
        max_turns=MAX_TURNS,
    )


@pytest.mark.slow
async def test_a_looping_agent_is_warned_then_stopped(serve: Any) -> None:
    server = serve(looping_model)
    tools = Tools()
    judge = LoopJudge(config=CONFIG, session="s-loop")
    with pytest.raises(LoopDetected) as caught:
        await run(judge, agent_for(server, tools))
    stopped = caught.value.verdict
    assert stopped.action is Action.STOP and caught.value.session == "s-loop"
    actions = [v.action for v in judge.verdicts]
    assert actions[0] is Action.WARN and actions[-1] is Action.STOP
    assert actions.count(Action.STOP) == 1
    # The model read our warnings, and each stayed where it was first put.
    first = next(i for i, r in enumerate(server.requests) if nudged(r))
    warned = [
        sum(RECOVERY_FENCE in str(m.get("content")) for m in r.json()["messages"])
        for r in server.requests[first:]
    ]
    assert warned == sorted(warned) and warned[-1] >= 2
    # The guardrail refused at least one repeat: the model asked more than the tool ran.
    asked = sum(
        1
        for r in server.requests
        for m in r.json()["messages"]
        if m["role"] == "assistant" and m.get("tool_calls")
    )
    assert len(tools.ran) < len(server.requests) <= MAX_TURNS and asked
    # A stubborn model: once refused, the identical call stays refused, each refusal one
    # rung higher, so the lookup ran exactly its limit (three identical answers) and never
    # again.
    assert tools.ran.count("get_order 7") == READ_RUN_LIMIT
    assert actions == [Action.WARN, Action.WARN, Action.ASK_USER, Action.STOP]


async def test_an_agent_that_obeys_is_not_stopped(serve: Any) -> None:
    server = serve(obeying_model)
    tools = Tools()
    judge = LoopJudge(config=CONFIG)
    result = await run(judge, agent_for(server, tools))
    assert result.final_output == FINAL_ANSWER
    assert judge.verdicts and all(v.action is Action.WARN for v in judge.verdicts)
    assert nudged(server.requests[-1])


async def test_a_productive_agent_is_never_touched(serve: Any) -> None:
    server = serve(productive_model)
    tools = Tools()
    judge = LoopJudge(config=CONFIG)
    result = await run(judge, agent_for(server, tools))
    assert result.final_output == FINAL_ANSWER
    assert judge.verdicts == []
    assert tools.ran == [f"read_page {i}" for i in range(1, 6)]
    assert not any(nudged(r) for r in server.requests)
    assert judge.tracker.turn == len(server.requests)


@pytest.mark.parametrize(("preflight", "ran"), [("guard", 3), ("hooks", 3), ("none", 4)])
async def test_a_stop_before_the_repeat_runs(serve: Any, preflight: str, ran: int) -> None:
    """With the guardrail or the hooks the call past its limit never runs; with the turn
    check alone the loop is only seen once it has."""
    server = serve(looping_model)
    tools = Tools()
    config = TrackerConfig(semantic="off", response_mode="block", tool_limits={"get_order": 3})
    judge = LoopJudge(config=config)
    agent = agent_for(server, tools)
    with pytest.raises(LoopDetected) as caught:
        await Runner.run(
            judge.guard(agent) if preflight == "guard" else agent,
            "Where is my order 7?",
            run_config=judge.run_config(tracing_disabled=True),
            hooks=judge.hooks if preflight == "hooks" else None,
            max_turns=MAX_TURNS,
        )
    assert caught.value.verdict.action is Action.STOP
    assert len(tools.ran) == ran and judge.verdicts == [caught.value.verdict]


async def test_a_users_own_filter_runs_first(serve: Any) -> None:
    server = serve(productive_model)
    seen: list[int] = []

    def mine(data: CallModelData[Any]) -> ModelInputData:
        seen.append(len(data.model_data.input))
        marker = {"role": "user", "content": "(marker from my own filter)"}
        return ModelInputData(input=[*data.model_data.input, marker], instructions=None)

    judge = LoopJudge(config=CONFIG)
    config = judge.run_config(RunConfig(call_model_input_filter=mine), tracing_disabled=True)
    await Runner.run(
        judge.guard(agent_for(server, Tools())), "Where is order 7?", run_config=config
    )
    assert seen and len(seen) == len(server.requests)
    last = server.requests[-1].json()["messages"]
    assert last[-1]["content"] == "(marker from my own filter)"
    assert judge.tracker.turn == len(seen)
    # Asking again for a config that already has our filter does not judge twice.
    again = judge.run_config(judge.run_config())
    assert again.call_model_input_filter == judge.filter_model_input


def test_items_convert_with_their_call_ids() -> None:
    items: list[Any] = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Where is order 7?"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}],
        },
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "read_page", "arguments": '{"p":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": [{"type": "input_text", "text": "page 1"}, {"type": "input_image"}],
        },
        {"type": "custom_tool_call", "call_id": "c3", "name": "grep", "input": "order 7"},
        {"type": "custom_tool_call_output", "call_id": "c3", "output": "no match"},
    ]
    messages = items_to_messages(items)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
    ]
    assert messages[1]["content"] == "Where is order 7?"
    turn = messages[2]
    assert turn["content"] == "Checking both."
    assert [c["id"] for c in turn["tool_calls"]] == ["c1", "c2"]
    assert turn["tool_calls"][1]["function"] == {"name": "read_page", "arguments": '{"p":1}'}
    assert messages[4] == {"role": "tool", "tool_call_id": "c2", "content": "page 1\n[input_image]"}
    assert messages[5]["tool_calls"][0]["function"]["arguments"] == "order 7"
    assert messages[6]["tool_call_id"] == "c3"


async def test_an_unreadable_input_never_breaks_the_run(caplog: pytest.LogCaptureFixture) -> None:
    judge = LoopJudge(tracker=LoopTracker(CONFIG))
    items: Any = [{"role": "user", "content": "hi"}, {"type": "function_call_output", "output": 1}]
    data = CallModelData(
        model_data=ModelInputData(input=items, instructions="x"), agent=None, context=None
    )  # type: ignore[arg-type]
    with caplog.at_level("WARNING", logger="judge.integrations.openai_agents"):
        out = await judge.filter_model_input(data)
    assert out.input == items and out.instructions == "x" and judge.verdicts == []
    assert "could not read" in caplog.text


def repeat_items(n: int) -> list[Any]:
    items: list[Any] = [{"role": "user", "content": "Where is order 7?"}]
    for i in range(n):
        items.append(
            {"type": "function_call", "call_id": f"c{i}", "name": "get_order", "arguments": "{}"}
        )
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "shipped"})
    return items


async def filtered(judge: LoopJudge, items: list[Any]) -> list[Any]:
    data = CallModelData(
        model_data=ModelInputData(input=items, instructions=None), agent=None, context=None
    )  # type: ignore[arg-type]
    return list((await judge.filter_model_input(data)).input)


async def test_a_warning_stays_after_the_result_it_answered() -> None:
    judge = LoopJudge(config=TrackerConfig(semantic="off", tool_limits={"get_order": 2}))
    n = 1
    while not judge.verdicts:
        n += 1
        sent = await filtered(judge, repeat_items(n))
    assert judge.verdicts[0].action is Action.WARN
    nudge = sent[-1]
    assert nudge["role"] == "user" and RECOVERY_FENCE in nudge["content"]
    # The next call's input has grown by one turn: the warning is still after the same result.
    later = await filtered(judge, repeat_items(n + 1))
    assert later.index(nudge) == len(repeat_items(n))
    # A rewritten input (the first message trimmed away) keeps it after the same result.
    trimmed = repeat_items(n + 1)[1:]
    again = await filtered(judge, trimmed)
    assert again[again.index(nudge) - 1]["call_id"] == f"c{n - 1}"
