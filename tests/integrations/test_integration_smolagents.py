"""The smolagents integration, end to end: real ToolCallingAgent and CodeAgent runs driven by
a scripted smolagents `Model`, with `LoopJudgeCallback` as their step callback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("smolagents")

from smolagents import ActionStep, CodeAgent, Model, TaskStep, ToolCall, ToolCallingAgent, tool
from smolagents.memory import Timing
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)
from smolagents.utils import AgentError, AgentToolExecutionError

from judge import Action, LoopDetected, LoopTracker, TrackerConfig
from judge.integrations.smolagents import LoopJudgeCallback, steps_to_messages

# Heuristics only and no semantic extra: the same verdicts on every machine.
CONFIG = TrackerConfig(semantic="off")
# Room for warn, warn, ask_user, stop; smolagents' default is 20 steps.
MAX_STEPS = 40
RECOVERY_FENCE = "```loop-judge"
FINAL_ANSWER = "Order 7 has shipped; there is no tracking number yet."

Decide = Callable[[list[ChatMessage], int], ChatMessage]


class ScriptedModel(Model):  # type: ignore[misc]
    """A smolagents model whose every answer comes from ``decide(messages, n)``."""

    def __init__(self, decide: Decide) -> None:
        super().__init__(model_id="scripted")
        self.decide = decide
        self.inputs: list[list[ChatMessage]] = []

    def generate(
        self,
        messages: list[ChatMessage],
        stop_sequences: list[str] | None = None,
        response_format: dict[str, str] | None = None,
        tools_to_call_from: list[Any] | None = None,
        **kwargs: Any,
    ) -> ChatMessage:
        self.inputs.append(list(messages))
        return self.decide(messages, len(self.inputs))


def nudged(messages: list[Any]) -> bool:
    return any(RECOVERY_FENCE in str(m.content) for m in messages)


def calls(name: str, arguments: dict[str, Any], n: int) -> ChatMessage:
    call = ChatMessageToolCall(
        id=f"call_{n}",
        type="function",
        function=ChatMessageToolCallFunction(name=name, arguments=arguments),
    )
    return ChatMessage(role=MessageRole.ASSISTANT, content=None, tool_calls=[call])


def looping(messages: list[ChatMessage], n: int) -> ChatMessage:
    return calls("get_order", {"order_id": "7"}, n)


def obeying(messages: list[ChatMessage], n: int) -> ChatMessage:
    if nudged(messages):
        return calls("final_answer", {"answer": FINAL_ANSWER}, n)
    return calls("get_order", {"order_id": "7"}, n)


def productive(messages: list[ChatMessage], n: int) -> ChatMessage:
    if n <= 5:
        return calls("read_page", {"page": n}, n)
    return calls("final_answer", {"answer": FINAL_ANSWER}, n)


def code_looping(messages: list[ChatMessage], n: int) -> ChatMessage:
    code = "Thought: check the order.\n<code>\nprint(get_order(order_id='7'))\n</code>"
    return ChatMessage(role=MessageRole.ASSISTANT, content=code)


@tool
def get_order(order_id: str) -> str:
    """Look up an order.

    Args:
        order_id: the order's number.
    """
    return "status: shipped, tracking: not yet assigned"


@tool
def read_page(page: int) -> str:
    """Read one page of the order log.

    Args:
        page: the page number.
    """
    return f"page {page}: entry {page * 17}"


TOOLS = [get_order, read_page]


@pytest.fixture
def judge() -> Iterator[LoopJudgeCallback]:
    callback = LoopJudgeCallback(config=CONFIG, session="s1")
    yield callback
    callback.close()


def tool_agent(decide: Decide, judge: LoopJudgeCallback) -> tuple[ToolCallingAgent, ScriptedModel]:
    model = ScriptedModel(decide)
    agent = ToolCallingAgent(
        tools=TOOLS, model=model, step_callbacks=[judge], max_steps=MAX_STEPS, verbosity_level=0
    )
    return agent, model


def test_a_looping_agent_is_warned_then_stopped(judge: LoopJudgeCallback) -> None:
    agent, model = tool_agent(looping, judge)
    with pytest.raises(LoopDetected) as caught:
        agent.run("Where is my order 7?")
    assert caught.value.verdict.action is Action.STOP and caught.value.session == "s1"
    actions = [v.action for v in judge.verdicts]
    assert actions[0] is Action.WARN and actions[-1] is Action.STOP
    assert Action.ASK_USER in actions and actions.count(Action.STOP) == 1
    # The model read the warning in the step's observation, right after the looping result.
    first = next(i for i, m in enumerate(model.inputs) if nudged(m))
    assert all(nudged(m) for m in model.inputs[first:])
    # The step that tripped the stop stayed in memory, once.
    last = agent.memory.steps[-1]
    assert isinstance(last, ActionStep) and agent.memory.steps.count(last) == 1
    assert len(model.inputs) < MAX_STEPS


def test_an_agent_that_obeys_is_not_stopped(judge: LoopJudgeCallback) -> None:
    agent, model = tool_agent(obeying, judge)
    assert agent.run("Where is my order 7?") == FINAL_ANSWER
    assert judge.verdicts and all(v.action is Action.WARN for v in judge.verdicts)
    assert nudged(model.inputs[-1])


def test_a_productive_agent_is_never_touched(judge: LoopJudgeCallback) -> None:
    agent, model = tool_agent(productive, judge)
    assert agent.run("Where is my order 7?") == FINAL_ANSWER
    assert judge.verdicts == []
    assert not any(nudged(m) for m in model.inputs)
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert [s.observations for s in steps[:5]] == [f"page {i}: entry {i * 17}" for i in range(1, 6)]
    assert judge.tracker.turn == 5  # the final answer's step is not judged


def test_a_looping_code_agent_is_stopped(judge: LoopJudgeCallback) -> None:
    model = ScriptedModel(code_looping)
    agent = CodeAgent(
        tools=TOOLS, model=model, step_callbacks=[judge], max_steps=MAX_STEPS, verbosity_level=0
    )
    with pytest.raises(LoopDetected):
        agent.run("Where is my order 7?")
    assert judge.verdicts[0].action is Action.WARN
    assert "python_interpreter" in (judge.verdicts[0].summary or "")


def test_interrupt_mode_pauses_the_agent_the_smolagents_way() -> None:
    judge = LoopJudgeCallback(
        tracker=LoopTracker(TrackerConfig(semantic="off", response_mode="block")),
        on_stop="interrupt",
    )
    agent, model = tool_agent(looping, judge)
    with pytest.raises(AgentError, match="interrupted"):
        agent.run("Where is my order 7?")
    judge.close()
    assert [v.action for v in judge.verdicts] == [Action.STOP]
    assert agent.interrupt_switch and len(model.inputs) == judge.tracker.turn


def test_a_new_run_starts_the_tracker_over(judge: LoopJudgeCallback) -> None:
    """agent.run resets the agent's memory by default: a new conversation for the tracker
    too (its ladder starts over); reset=False continues the old one."""
    agent, _model = tool_agent(looping, judge)
    with pytest.raises(LoopDetected):
        agent.run("Where is my order 7?")
    assert judge.tracker.detections == 4
    agent.model = ScriptedModel(productive)
    assert agent.run("And order 8?") == FINAL_ANSWER
    assert judge.tracker.detections == 0 and judge.tracker.turn == 5
    seen = judge.tracker.state.seen  # messages read
    agent.model = ScriptedModel(productive)
    agent.run("And order 9?", reset=False)
    assert judge.tracker.state.seen > seen + 5 and len(judge.verdicts) == 4


def test_memory_steps_convert_with_ids_errors_and_nudges() -> None:
    failed = ActionStep(
        step_number=2,
        timing=Timing(start_time=0.0),
        model_output="Let me look.",
        tool_calls=[ToolCall(name="get_order", arguments={"order_id": "7"}, id="call_a")],
        observations=None,
        error=AgentToolExecutionError("no such order", logger=_Silent()),
    )
    nudged_step = ActionStep(
        step_number=3,
        timing=Timing(start_time=0.0),
        tool_calls=[ToolCall(name="read_page", arguments={"page": 1}, id="call_b")],
        observations="page 1\n\nNUDGE",
    )
    messages = steps_to_messages(
        [TaskStep(task="Where is order 7?"), failed, nudged_step],
        nudges={id(nudged_step): (nudged_step, "page 1", "NUDGE")},
    )
    assert [m["role"] for m in messages] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "user",
    ]
    assert messages[1]["content"] == "Let me look."
    assert messages[1]["tool_calls"][0]["id"] == "call_a"
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"order_id": "7"}'
    result = messages[2]["content"][0]
    assert result["tool_use_id"] == "call_a" and result["is_error"] is True
    assert "no such order" in result["content"]
    assert messages[4]["content"][0]["content"] == "page 1"  # the tool's own result
    assert messages[5] == {"role": "user", "content": "NUDGE"}


class _Silent:
    """The logger smolagents' errors want: they log themselves when built."""

    def log_error(self, *args: Any, **kwargs: Any) -> None:
        pass


class CountingTools:
    """Copies of the tools that count what actually ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

        @tool
        def get_order(order_id: str) -> str:
            """Look up an order.

            Args:
                order_id: the order's number.
            """
            self.ran.append(order_id)
            return "status: shipped, tracking: not yet assigned"

        self.all = [get_order, read_page]


def test_a_guarded_stubborn_agent_runs_the_tool_only_its_limit(judge: LoopJudgeCallback) -> None:
    """With ``guard``, the identical call past its limit is refused before it runs: its
    observation is the recovery text, each refusal a rung higher, and the stop ends the
    run; the lookup ran twice (two identical answers: the read rule's limit), never again."""
    tools = CountingTools()
    model = ScriptedModel(looping)
    agent = judge.guard(
        ToolCallingAgent(
            tools=tools.all,
            model=model,
            step_callbacks=[judge],
            max_steps=MAX_STEPS,
            verbosity_level=0,
        )
    )
    with pytest.raises(LoopDetected) as caught:
        agent.run("Where is my order 7?")
    assert caught.value.verdict.action is Action.STOP
    assert tools.ran == ["7", "7"]
    assert [v.action for v in judge.verdicts] == [
        Action.WARN,
        Action.WARN,
        Action.ASK_USER,
        Action.STOP,
    ]
    # The model read each refusal as the call's observation.
    assert nudged(model.inputs[-1])


def test_guard_leaves_shared_tools_and_the_final_answer_alone(judge: LoopJudgeCallback) -> None:
    agent = judge.guard(
        ToolCallingAgent(tools=TOOLS, model=ScriptedModel(obeying), verbosity_level=0)
    )
    assert agent.tools["get_order"] is not get_order and agent.tools["get_order"].forward
    assert get_order.forward is not agent.tools["get_order"].forward
    assert agent.tools["final_answer"].forward.__name__ != "checked"
