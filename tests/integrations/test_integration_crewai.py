"""The CrewAI integration, end to end: real `Crew` runs of a real `Agent` with real tools,
whose model is a scripted `BaseLLM` (CrewAI's documented seam for custom models), with
`LoopJudgeHooks` registered as CrewAI interception hooks.

CrewAI cannot share an environment with the ``integrations`` extra (it needs openai 2,
openai-agents needs openai 3), so this file runs in CI's second environment
(``.venv-crewai``, ``.ci/run``) and skips in the main one.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("crewai") is None:
    pytest.skip(
        "crewai lives in its own environment (.venv-crewai, see .ci/run)",
        allow_module_level=True,
    )

# CrewAI would send usage telemetry and offer to upload traces: nothing leaves the machine.
# Set before crewai is imported (it reads them then), and only where it is installed.
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ["OTEL_SDK_DISABLED"] = "true"

from crewai import Agent, Crew, CrewOutput, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool
from pydantic import ConfigDict

from judge import Action, LoopDetected, TrackerConfig
from judge.errors import JudgeTimeout
from judge.integrations.crewai import CrewLoopDetected, LoopJudgeHooks, to_chat_message
from tests.fakes import fake_judge
from tests.integrations.stores import DownStore
from tests.project import test_docs as docs

# Heuristics only and no semantic model: the same verdicts on every machine.
CONFIG = TrackerConfig(semantic="off")
# Room for the whole ladder (warn, warn, ask_user, stop) and more; CrewAI's default is 25.
MAX_ITER = 40
FENCE = "```loop-judge"
FINAL_ANSWER = "Order 7 has shipped; there is no tracking number yet."
SAME_RESULT = "status: shipped, tracking: not yet assigned"

Decide = Callable[[list[dict[str, Any]], int], "str | list[dict[str, Any]]"]


class ScriptedLLM(BaseLLM):
    """A CrewAI model whose every answer comes from ``decide(messages, n)``: a list of
    OpenAI-style tool calls, or the final answer's text."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    decide: Any
    inputs: list[list[dict[str, Any]]]

    def call(
        self,
        messages: Any,
        tools: Any = None,
        callbacks: Any = None,
        available_functions: Any = None,
        from_task: Any = None,
        from_agent: Any = None,
        response_model: Any = None,
    ) -> Any:
        self.inputs.append([dict(m) for m in messages])
        return self.decide(self.inputs[-1], len(self.inputs))

    def supports_function_calling(self) -> bool:
        return True


def scripted(decide: Decide) -> ScriptedLLM:
    return ScriptedLLM(model="scripted", decide=decide, inputs=[])


def told(messages: list[dict[str, Any]]) -> bool:
    return any(FENCE in str(m.get("content")) for m in messages)


def calls(name: str, arguments: str, n: int) -> list[dict[str, Any]]:
    call = {"name": name, "arguments": arguments}
    return [{"id": f"call_{n}", "type": "function", "function": call}]


def looping(messages: list[dict[str, Any]], n: int) -> str | list[dict[str, Any]]:
    return calls("get_order", '{"order_id": "7"}', n)


def obeying(messages: list[dict[str, Any]], n: int) -> str | list[dict[str, Any]]:
    if told(messages):
        return FINAL_ANSWER
    return looping(messages, n)


def productive(messages: list[dict[str, Any]], n: int) -> str | list[dict[str, Any]]:
    if n <= 5:
        return calls("read_page", f'{{"page": {n}}}', n)
    return FINAL_ANSWER


class Tools:
    """The crew's tools, counting what actually ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @tool("get_order")
        def get_order(order_id: str) -> str:
            """Look up an order by its number."""
            self.ran.append(order_id)
            return SAME_RESULT

        @tool("read_page")
        def read_page(page: int) -> str:
            """Read one page of the order log."""
            self.ran.append(f"page {page}")
            return f"page {page}: entry {page * 17}"

        self.all = [get_order, read_page]


def kickoff(crew: Crew) -> str:
    """The crew's final answer (kickoff returns a streaming output only when asked to)."""
    output = crew.kickoff()
    assert isinstance(output, CrewOutput)
    return output.raw


def crew(llm: ScriptedLLM, tools: Tools) -> Crew:
    agent = Agent(
        role="Support agent",
        goal="Answer questions about orders",
        backstory="You look orders up.",
        llm=llm,
        tools=tools.all,
        max_iter=MAX_ITER,
        verbose=False,
    )
    task = Task(
        description="Where is my order 7?", expected_output="The order's status", agent=agent
    )
    return Crew(agents=[agent], tasks=[task], verbose=False)


@pytest.fixture
def hooks() -> Iterator[LoopJudgeHooks]:
    with LoopJudgeHooks(config=CONFIG) as registered:
        yield registered


def test_a_looping_agent_is_warned_then_stopped(hooks: LoopJudgeHooks) -> None:
    tools, llm = Tools(), scripted(looping)
    with pytest.raises(LoopDetected) as caught:
        crew(llm, tools).kickoff()
    assert isinstance(caught.value, CrewLoopDetected)
    assert caught.value.verdict.action is Action.STOP
    actions = [v.action for v in hooks.verdicts]
    assert actions[0] is Action.WARN and actions[-1] is Action.STOP
    assert Action.ASK_USER in actions and actions.count(Action.STOP) == 1
    # The model read the recovery message from the first warning on.
    first = next(i for i, m in enumerate(llm.inputs) if told(m))
    assert all(told(m) for m in llm.inputs[first:])
    assert len(llm.inputs) < MAX_ITER


def test_a_stubborn_model_runs_the_tool_only_its_limit(hooks: LoopJudgeHooks) -> None:
    """The identical call past its limit is refused before it runs, its result is the
    recovery message, and it stays refused (each refusal a rung higher) until the stop:
    the lookup ran twice (two identical answers: the read rule's limit), never again."""
    tools, llm = Tools(), scripted(looping)
    with pytest.raises(LoopDetected):
        crew(llm, tools).kickoff()
    assert tools.ran == ["7", "7"]
    assert [v.action for v in hooks.verdicts] == [
        Action.WARN,
        Action.WARN,
        Action.ASK_USER,
        Action.STOP,
    ]
    # Each refused call's result, as the model read it, is the recovery message.
    results = [m for m in llm.inputs[-1] if m.get("role") == "tool"]
    assert [FENCE in str(m["content"]) for m in results] == [False] * 2 + [True] * 3
    assert not any("blocked by hook" in str(m["content"]) for m in results)


def test_an_agent_that_obeys_is_not_stopped(hooks: LoopJudgeHooks) -> None:
    tools, llm = Tools(), scripted(obeying)
    assert kickoff(crew(llm, tools)) == FINAL_ANSWER
    assert hooks.verdicts and all(v.action is Action.WARN for v in hooks.verdicts)
    assert told(llm.inputs[-1])


def test_a_productive_agent_is_never_touched(hooks: LoopJudgeHooks) -> None:
    tools, llm = Tools(), scripted(productive)
    assert kickoff(crew(llm, tools)) == FINAL_ANSWER
    assert hooks.verdicts == []
    assert not any(told(m) for m in llm.inputs)
    assert tools.ran == [f"page {i}" for i in range(1, 6)]
    results = [m["content"] for m in llm.inputs[-1] if m.get("role") == "tool"]
    assert results == [f"page {i}: entry {i * 17}" for i in range(1, 6)]


def test_messages_convert_incrementally_with_ids(hooks: LoopJudgeHooks) -> None:
    """Each turn converts only what the tracker has not seen (the last message again, as
    it may still grow), and what it reads keeps the calls' ids."""
    converted: list[dict[str, Any]] = []

    def counting(message: Any) -> list[dict[str, Any]]:
        converted.append(message)
        return to_chat_message(message)

    hooks._sessions._convert = counting
    tools, llm = Tools(), scripted(productive)
    crew(llm, tools).kickoff()
    turns = len(llm.inputs)
    assert turns == 6
    assert len(converted) == len(llm.inputs[-1]) + turns - 1
    [session] = hooks._sessions._sessions.values()
    history = [d for chunk in session.chunks for d in chunk]
    calls_made = [c for m in history for c in m.get("tool_calls", [])]
    assert [c["id"] for c in calls_made] == [f"call_{n}" for n in range(1, 6)]
    results = [m["tool_call_id"] for m in history if m["role"] == "tool"]
    assert results == [f"call_{n}" for n in range(1, 6)]


def test_native_messages_convert_to_what_the_tracker_reads() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    assert to_chat_message({"role": "assistant", "content": None, "tool_calls": [call]}) == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
            ],
        }
    ]
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert to_chat_message({"role": "user", "content": parts, "files": {"a": object()}}) == [
        {"role": "user", "content": "look\n[image_url]"}
    ]
    assert to_chat_message(
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": None}
    ) == [{"role": "tool", "content": "", "tool_call_id": "c1"}]


def test_loop_judge_trouble_never_reaches_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    """A store that is down: every turn is logged and skipped, the crew finishes."""
    store = DownStore()
    tools, llm = Tools(), scripted(productive)
    with LoopJudgeHooks(store=store, config=CONFIG) as hooks:
        assert kickoff(crew(llm, tools)) == FINAL_ANSWER
    assert store.asked == 6 and hooks.verdicts == []
    assert "redis down" in caplog.text


def test_a_judge_that_fails_never_reaches_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    """The judge model never answers: the failure is on the turn's verdict and in the log,
    never raised into the agent, and the heuristics still stop the loop."""
    fast = "fake/fast"
    config = TrackerConfig(
        fast_model=fast, check_after_turns=1, initial_interval=1, early_checks=False
    )
    judge = fake_judge({fast: [JudgeTimeout("no answer in 30 s", model=fast)]})
    tools, llm = Tools(), scripted(looping)
    hooks = LoopJudgeHooks(config=config, judge_client=judge)
    with hooks, pytest.raises(LoopDetected):
        crew(llm, tools).kickoff()
    assert judge.calls_to(fast)
    assert "judge check failed" in caplog.text
    assert hooks.verdicts[-1].action is Action.STOP
    assert tools.ran == ["7", "7"]


def test_hooks_leave_crewai_when_done() -> None:
    from crewai.hooks import InterceptionPoint, get_hooks

    with LoopJudgeHooks(config=CONFIG) as hooks:
        assert hooks.before_model_call in get_hooks(InterceptionPoint.PRE_MODEL_CALL)
    assert hooks.before_model_call not in get_hooks(InterceptionPoint.PRE_MODEL_CALL)
    assert hooks.before_tool_call not in get_hooks(InterceptionPoint.PRE_TOOL_CALL)
    assert hooks.after_tool_call not in get_hooks(InterceptionPoint.POST_TOOL_CALL)


# -- the docs' CrewAI block ------------------------------------------------------------------

# The main environment's docs test skips blocks that import crewai (it is not installed
# there); this environment runs them, the same way, against the same fake OpenAI API.
DOCS_BLOCKS = [b for b in docs.BLOCKS if "crewai" in docs.imported_modules(b.text)]


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), docs.FakeOpenAI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_docs_have_a_crewai_block() -> None:
    assert DOCS_BLOCKS and all(docs.how_checked(b) == "run" for b in DOCS_BLOCKS)


@pytest.mark.parametrize("block", DOCS_BLOCKS, ids=[b.id for b in DOCS_BLOCKS])
def test_the_docs_crewai_block_runs(block: Any, tmp_path: Path, fake_openai: str) -> None:
    """As pasted, in a fresh interpreter: the model loops, and loop-judge stops the crew."""
    asked = docs.FakeOpenAI.requests
    done = docs.run_block(block, tmp_path, fake_openai)
    assert done.returncode == 0, done.stderr
    assert docs.FakeOpenAI.requests > asked
    assert done.stdout.strip().endswith("stopping"), done.stdout[-2000:]
