"""What does each framework integration add to every model call of an agent?

An integration runs the tracker before each model call, after converting the framework's
own messages, so its cost lands on every step of every agent run. For each framework this
script runs the same productive agent (distinct tool calls, distinct results: nothing to
flag, so what is timed is the steady state, not escalation) on the framework's own fake
model twice, bare and with loop-judge, alternating the two in one process so machine load
hits both alike, and prints per model call: the bare run's cost, the judged run's cost,
the difference, their ratio, and the time spent inside loop-judge's hooks (timed around
them, so it does not drown in the run-to-run noise of the difference). Heuristics only;
no network.

Run from the repository root:  .venv/bin/python evals/bench_integrations.py

Adding a framework: write ``bench_<name>(turns) -> Pair`` that returns two zero-argument
coroutine functions (one agent run each: bare, judged) and the model calls one run makes,
and optionally a `Stopwatch` the judged agent's hooks run under; then list it in
`BENCHES`.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio

from judge import TrackerConfig

# Tool calls per agent run (each a model call; one more model call gives the answer):
# a short task, and a long one whose history the integration converts on every call.
TURNS = (10, 50)
# Bare and judged runs per measurement, rotated; the fastest run of each is reported (as
# timeit advises): on a shared machine every slower run measures the neighbours' load.
ROUNDS = 15
# Runs of each variant before timing: imports, caches, the first tracker's set-up.
WARMUP = 2
# Distinct tools cycled through, so no detector calls the work a loop.
TOOLS = ("read_file", "grep", "list_dir", "run_tests")
PROMPT = "Refactor every module in src/ to use the new API."

Run = Callable[[], Awaitable[object]]


class Stopwatch:
    """Time spent inside loop-judge's hooks, summed over a run."""

    def __init__(self) -> None:
        self.spent_ns = 0

    async def time(self, work: Awaitable[Any]) -> Any:
        started = time.perf_counter_ns()
        try:
            return await work
        finally:
            self.spent_ns += time.perf_counter_ns() - started


@dataclass(frozen=True)
class Pair:
    """One framework's agent run, bare and with loop-judge, and its model calls per run;
    ``hooks`` (optional) is the stopwatch the judged run's loop-judge hooks run under."""

    bare: Run
    judged: Run
    model_calls: int
    hooks: Stopwatch | None = None


@dataclass(frozen=True)
class Row:
    framework: str
    turns: int
    bare_us: float
    judged_us: float
    in_hooks_us: float | None = None

    @property
    def overhead_us(self) -> float:
        return self.judged_us - self.bare_us

    @property
    def ratio(self) -> float:
        return self.judged_us / self.bare_us


def _config() -> TrackerConfig:
    return TrackerConfig(fast_model=None, confirm_model=None)


def _args(step: int) -> dict[str, Any]:
    return {"path": f"src/pkg{step % 97}/mod_{step}.py"}


def _output(tool: str, path: str) -> str:
    return f"{tool} {path}: def f(x): return x * {len(path)}"


# -- frameworks ----------------------------------------------------------------------


def bench_pydantic_ai(turns: int) -> Pair:
    """`judge.integrations.pydantic_ai.LoopJudge` on pydantic-ai's `FunctionModel`."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    from judge.integrations.pydantic_ai import LoopJudge

    hooks = Stopwatch()

    class Timed(LoopJudge):
        """LoopJudge, its hooks timed."""

        async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
            return await hooks.time(super().before_model_request(ctx, request_context))

        async def before_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any
        ) -> Any:
            work = super().before_tool_execute(ctx, call=call, tool_def=tool_def, args=args)
            return await hooks.time(work)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = sum(isinstance(m, ModelResponse) for m in messages)
        if step >= turns:
            return ModelResponse(parts=[TextPart("all modules refactored")])
        tool = TOOLS[step % len(TOOLS)]
        return ModelResponse(parts=[ToolCallPart(tool, _args(step))])

    def agent(capabilities: list[Any]) -> Agent[None, str]:
        built: Agent[None, str] = Agent(FunctionModel(model), capabilities=capabilities)
        for tool in TOOLS:
            built.tool_plain(name=tool)(_pydantic_tool(tool))
        return built

    bare, judged = agent([]), agent([Timed(config=_config())])
    limits = UsageLimits(request_limit=turns + 1)  # the default (50) is below the long run
    return Pair(
        lambda: bare.run(PROMPT, usage_limits=limits),
        lambda: judged.run(PROMPT, usage_limits=limits),
        turns + 1,
        hooks,
    )


def _pydantic_tool(tool: str) -> Callable[[str], str]:
    def run(path: str) -> str:
        return _output(tool, path)

    return run


def bench_langchain(turns: int) -> Pair:
    """`judge.integrations.langchain.LoopJudgeMiddleware` on `create_agent` with a fake model."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import hook_config
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage, BaseMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool

    from judge.integrations.langchain import LoopJudgeMiddleware

    hooks = Stopwatch()

    class Timed(LoopJudgeMiddleware):
        """LoopJudgeMiddleware, its hooks timed (the tool's own run left out)."""

        @hook_config(can_jump_to=["end"])
        async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            result: dict[str, Any] | None = await hooks.time(super().abefore_model(state, runtime))
            return result

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            tool_ns = 0

            async def run_tool(req: Any) -> Any:
                nonlocal tool_ns
                started = time.perf_counter_ns()
                try:
                    return await handler(req)
                finally:
                    tool_ns += time.perf_counter_ns() - started

            try:
                return await hooks.time(super().awrap_tool_call(request, run_tool))
            finally:
                hooks.spent_ns -= tool_ns

    class ScriptedFake(FakeMessagesListChatModel):
        """LangChain's fake, able to bind tools, calling a new tool on each step."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedFake:
            return self

        def _generate(
            self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
        ) -> ChatResult:
            step = sum(isinstance(m, AIMessage) for m in messages)
            if step >= turns:
                reply = AIMessage(content="all modules refactored")
            else:
                call = {"name": TOOLS[step % len(TOOLS)], "args": _args(step), "id": f"c{step}"}
                reply = AIMessage(content="", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=reply)])

    tools = [
        StructuredTool.from_function(_pydantic_tool(tool), name=tool, description=f"{tool} a path")
        for tool in TOOLS
    ]
    model = ScriptedFake(responses=[AIMessage("unused")])
    bare = create_agent(model, tools=tools)
    judged = create_agent(model, tools=tools, middleware=[Timed(_config())])
    prompt = {"messages": [{"role": "user", "content": PROMPT}]}
    limit = {"recursion_limit": 4 * turns + 10}
    return Pair(
        lambda: bare.ainvoke(prompt, limit),
        lambda: judged.ainvoke(prompt, limit),
        turns + 1,
        hooks,
    )


def bench_openai_agents(turns: int) -> Pair:
    """`judge.integrations.openai_agents.LoopJudge` (input filter and tool guardrail) on an
    Agents SDK `Model` that answers from a script, so no HTTP is timed."""
    from agents import Agent, ModelResponse, RunConfig, Runner, Usage, function_tool
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from judge.integrations.openai_agents import LoopJudge

    class Scripted(Model):
        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **k: Any
        ) -> Any:
            step = sum(1 for i in input if isinstance(i, dict) and i.get("type") == "function_call")
            if step >= turns:
                text = ResponseOutputText(
                    type="output_text", text="all modules refactored", annotations=[]
                )
                done = ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed", content=[text]
                )
                return ModelResponse(output=[done], usage=Usage(), response_id=None)
            call = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"c{step}",
                name=TOOLS[step % len(TOOLS)],
                arguments=json.dumps(_args(step)),
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    tools = [function_tool(_pydantic_tool(tool), name_override=tool) for tool in TOOLS]
    agent: Agent[Any] = Agent(name="refactor", model=Scripted(), tools=list(tools))
    hooks = Stopwatch()

    class Timed(LoopJudge):
        """LoopJudge, its input filter and tool guardrail timed."""

        async def filter_model_input(self, data: Any) -> Any:
            return await hooks.time(super().filter_model_input(data))

        async def _preflight_guardrail(self, data: Any) -> Any:
            return await hooks.time(super()._preflight_guardrail(data))

    judge = Timed(config=_config())
    guarded = judge.guard(agent)
    plain_config = RunConfig(tracing_disabled=True)
    judged_config = judge.run_config(tracing_disabled=True)

    return Pair(
        lambda: Runner.run(agent, PROMPT, run_config=plain_config, max_turns=turns + 2),
        lambda: Runner.run(guarded, PROMPT, run_config=judged_config, max_turns=turns + 2),
        turns + 1,
        hooks,
    )


def bench_smolagents(turns: int) -> Pair:
    """`judge.integrations.smolagents.LoopJudgeCallback` (a step callback on the sync
    tracker) on a `ToolCallingAgent` with a scripted smolagents `Model`. The agent is
    synchronous, so each run goes to a thread with no event loop, as in a script (bare and
    judged alike): the sync tracker then runs its turns in that thread, with no hand-off."""
    from smolagents import Model, ToolCallingAgent, tool
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
    )

    from judge.integrations.smolagents import LoopJudgeCallback

    class Scripted(Model):  # type: ignore[misc]
        def generate(self, messages: list[Any], *a: Any, **k: Any) -> ChatMessage:
            step = sum(1 for m in messages if m.role == MessageRole.TOOL_CALL)
            name, arguments = (
                ("final_answer", {"answer": "all modules refactored"})
                if step >= turns
                else (TOOLS[step % len(TOOLS)], _args(step))
            )
            function = ChatMessageToolCallFunction(name=name, arguments=arguments)
            call = ChatMessageToolCall(id=f"c{step}", type="function", function=function)
            return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=[call])

    @tool
    def read_file(path: str) -> str:
        """Read a file.

        Args:
            path: the file.
        """
        return _output("read_file", path)

    @tool
    def grep(path: str) -> str:
        """Search a file.

        Args:
            path: the file.
        """
        return _output("grep", path)

    @tool
    def list_dir(path: str) -> str:
        """List a directory.

        Args:
            path: the directory.
        """
        return _output("list_dir", path)

    @tool
    def run_tests(path: str) -> str:
        """Run the tests of a path.

        Args:
            path: the path.
        """
        return _output("run_tests", path)

    def agent(callbacks: list[Any]) -> Any:
        return ToolCallingAgent(
            tools=[read_file, grep, list_dir, run_tests],
            model=Scripted(model_id="scripted"),
            step_callbacks=callbacks,
            max_steps=turns + 2,
            verbosity_level=-1,
        )

    hooks = Stopwatch()

    class Timed(LoopJudgeCallback):
        """The callback, timed (it is synchronous: the stopwatch is read directly)."""

        def __call__(self, memory_step: Any, agent: Any) -> None:
            started = time.perf_counter_ns()
            try:
                super().__call__(memory_step, agent)
            finally:
                hooks.spent_ns += time.perf_counter_ns() - started

    bare, judged = agent([]), agent([Timed(config=_config())])

    def run(which: Any) -> Run:
        async def in_a_thread() -> object:
            return await anyio.to_thread.run_sync(which.run, PROMPT)

        return in_a_thread

    return Pair(run(bare), run(judged), turns + 1, hooks)


# Each framework's benchmark; one that is not installed is reported and skipped.
BENCHES: dict[str, Callable[[int], Pair]] = {
    "pydantic-ai": bench_pydantic_ai,
    "langchain": bench_langchain,
    "openai-agents": bench_openai_agents,
    "smolagents": bench_smolagents,
}


# -- measuring -------------------------------------------------------------------------


async def _timed(run: Run) -> float:
    started = time.perf_counter_ns()
    await run()
    return (time.perf_counter_ns() - started) / 1_000


async def measure(framework: str, turns: int, rounds: int) -> Row:
    pair = BENCHES[framework](turns)
    for _ in range(WARMUP):
        await pair.bare()
        await pair.judged()
    bare: list[float] = []
    judged: list[float] = []
    in_hooks: list[float] = []
    for i in range(rounds):
        gc.collect()
        # Alternate which goes first, so neither always runs on a warmer cache.
        if i % 2:
            bare.append(await _timed(pair.bare))
        before = pair.hooks.spent_ns if pair.hooks else 0
        judged.append(await _timed(pair.judged))
        if pair.hooks is not None:
            in_hooks.append((pair.hooks.spent_ns - before) / 1_000)
        if not i % 2:
            bare.append(await _timed(pair.bare))
    calls = pair.model_calls
    hooks = min(in_hooks) / calls if in_hooks else None
    return Row(framework, turns, min(bare) / calls, min(judged) / calls, hooks)


async def main(frameworks: list[str], turns: tuple[int, ...], rounds: int, as_json: bool) -> None:
    rows: list[Row] = []
    for framework in frameworks:
        for n in turns:
            try:
                rows.append(await measure(framework, n, rounds))
            except ImportError as exc:
                print(f"{framework}: not installed ({exc.name})")
                break
            except Exception as exc:  # one framework's broken bench must not hide the others
                print(f"{framework}: failed ({type(exc).__name__}: {exc})")
                break
    if as_json:
        print(
            json.dumps(
                [
                    {
                        **r.__dict__,
                        "overhead_us": r.overhead_us,
                        "ratio": r.ratio,
                    }
                    for r in rows
                ]
            )
        )
        return
    print("per model call, fastest of", rounds, "runs each, heuristics only")
    print("  +us: judged - bare; in hooks: timed inside loop-judge's hooks (where measured)")
    print(
        f"{'framework':<14}{'calls/run':>10}{'bare us':>10}{'judged us':>11}{'+us':>8}"
        f"{'ratio':>7}{'in hooks us':>13}"
    )
    for r in rows:
        hooks = "-" if r.in_hooks_us is None else f"{r.in_hooks_us:.0f}"
        print(
            f"{r.framework:<14}{r.turns + 1:>10}{r.bare_us:>10.0f}{r.judged_us:>11.0f}"
            f"{r.overhead_us:>8.0f}{r.ratio:>7.2f}{hooks:>13}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--framework", action="append", choices=sorted(BENCHES))
    parser.add_argument("--turns", type=int, action="append", help=f"default {TURNS}")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_args()
    anyio.run(main, ns.framework or list(BENCHES), tuple(ns.turns or TURNS), ns.rounds, ns.json)
