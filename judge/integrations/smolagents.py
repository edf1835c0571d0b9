"""loop-judge for smolagents: a step callback that judges each finished action step.

smolagents calls each ``step_callbacks`` entry after every step, with the step and the
agent, before the next model call: exactly when ``turn_started`` belongs. `LoopJudgeCallback`
converts the agent's memory (task, plans, and each `ActionStep`'s model output, tool calls
with their ids, observations and error) to the messages the tracker reads, runs the
synchronous tracker (smolagents is synchronous), and acts on the verdict:

- a warning (or ``ask_user``) is appended to the step's ``observations``: smolagents builds
  the next model input from memory, so the model reads it right after the result that
  looped, which is how the smolagents docs have callbacks shape the next step;
- a ``stop`` raises `LoopDetected` out of ``agent.run`` (the step that tripped it is kept in
  ``agent.memory``), or with ``on_stop="interrupt"`` calls ``agent.interrupt()``, the
  documented pause, which a person can follow with ``agent.run(task, reset=False)``.

Usage::

    judge = LoopJudgeCallback()                  # LOOP_JUDGE_* configure its tracker
    agent = ToolCallingAgent(tools=tools, model=model, step_callbacks=[judge])
    try:
        agent.run("Where is my order 7?")
    except LoopDetected as exc:
        print(exc.verdict.summary)

`LoopJudgeCallback.guard` adds a preflight to a ``ToolCallingAgent``'s tools (it returns
the agent): a call that would repeat past its limit does not run, its observation is the
recovery message, the identical call stays refused (each refusal a rung higher), and at
``stop`` the step ends and the callback acts on the stop as above. A ``CodeAgent`` runs
its tools inside its Python executor, where no call can be refused before it runs.

One callback belongs to one agent. A run that resets the agent's memory (``agent.run``'s
default) starts the tracker over; ``reset=False`` continues the same conversation. A
history it cannot read is logged and the step goes on unjudged; judge failures are on the
verdict, never raised.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable
from enum import Enum
from typing import Any

from smolagents import ActionStep, PlanningStep, SystemPromptStep, TaskStep  # type: ignore[import-untyped]

from judge.config import TrackerConfig
from judge.errors import HistoryError, LoopDetected
from judge.sync import SyncLoopTracker
from judge.tracker import LoopTracker
from judge.verdict import Action, Verdict

__all__ = ["LoopJudgeCallback", "StopMode", "steps_to_messages"]

logger = logging.getLogger("judge.integrations.smolagents")

# Between a step's own observations and the recovery text appended to them.
NUDGE_SEPARATOR = "\n\n"
# smolagents' own tool that ends the run with an answer: never refused.
FINAL_ANSWER_TOOL = "final_answer"
# The name that marks a user-role message as tool output, not a person's prompt
# (judge/user_turns.py): for errors and observations that belong to no tool call.
OBSERVATION_NAME = "observation"


class StopMode(str, Enum):
    """What the callback does when the verdict says stop."""

    RAISE = "raise"
    """Raise `LoopDetected` (carrying the verdict) out of ``agent.run``."""
    INTERRUPT = "interrupt"
    """Call ``agent.interrupt()``: smolagents ends the run with its own AgentError."""


def _text(value: Any) -> str | None:
    """A model output or plan as text (smolagents keeps some as lists of content parts)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Iterable):
        parts = [p.get("text", "") if isinstance(p, dict) else str(p) for p in value]
        return "\n".join(p for p in parts if p)
    return str(value)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value  # a CodeAgent's code, or JSON the model wrote
    return json.dumps(value, sort_keys=True, default=str)


def _action_messages(step: Any, observations: str | None) -> list[dict[str, Any]]:
    """One action step: the model's turn, then what came back for it."""
    calls = list(step.tool_calls or [])
    content = _text(step.model_output)
    messages: list[dict[str, Any]] = []
    if calls or content:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = [
                {
                    "id": str(call.id),
                    "type": "function",
                    "function": {"name": str(call.name), "arguments": _arguments(call.arguments)},
                }
                for call in calls
            ]
        messages.append(message)
    error = str(step.error) if step.error is not None else None
    result = "\n".join(part for part in (observations, error) if part)
    if calls:
        # smolagents joins parallel calls' observations into one text it cannot split
        # again, so each call of the step carries that text; the error flag is the step's.
        blocks = [
            {
                "type": "tool_result",
                "tool_use_id": str(call.id),
                "content": result,
                "is_error": error is not None,
            }
            for call in calls
        ]
        messages.append({"role": "user", "content": blocks})
    elif result:
        messages.append({"role": "user", "name": OBSERVATION_NAME, "content": result})
    return messages


def steps_to_messages(
    steps: Iterable[Any], *, nudges: dict[int, tuple[Any, str | None, str]] | None = None
) -> list[dict[str, Any]]:
    """smolagents memory steps as the messages the tracker reads.

    Calls keep their ids (OpenAI ``tool_calls``); results are ``tool_result`` blocks so a
    failed step keeps its error flag (``is_error``). ``nudges`` maps ``id(step)`` to
    (step, its observations before our recovery text, that text): the tracker reads the
    tool's own result and our text as the separate recovery message it is.
    """
    nudges = nudges or {}
    messages: list[dict[str, Any]] = []
    for step in steps:
        if isinstance(step, SystemPromptStep):
            messages.append({"role": "system", "content": step.system_prompt})
        elif isinstance(step, TaskStep):
            messages.append({"role": "user", "content": step.task})
        elif isinstance(step, PlanningStep):
            messages.append({"role": "assistant", "content": _text(step.plan)})
        elif isinstance(step, ActionStep):
            nudge = nudges.get(id(step))
            if nudge is not None and nudge[0] is step:
                messages += _action_messages(step, nudge[1])
                messages.append({"role": "user", "content": nudge[2]})
            else:
                messages += _action_messages(step, step.observations)
    return messages


class LoopJudgeCallback:
    """A smolagents step callback backed by a (synchronous) `LoopTracker`.

    ``verdicts`` lists every loop verdict it acted on, oldest first.
    """

    def __init__(
        self,
        tracker: SyncLoopTracker | LoopTracker | None = None,
        *,
        config: TrackerConfig | None = None,
        session: str | None = None,
        on_stop: StopMode | str = StopMode.RAISE,
    ) -> None:
        """``tracker`` (an async one is wrapped), or a new one from ``config`` (else from
        ``LOOP_JUDGE_*``); ``session`` names the conversation in logs and on `LoopDetected`."""
        if tracker is not None and config is not None:
            raise TypeError("pass tracker= or config=, not both")
        if isinstance(tracker, LoopTracker):
            tracker = SyncLoopTracker(tracker=tracker)
        if tracker is None:
            tracker = SyncLoopTracker(config, name=session)
        self.tracker: SyncLoopTracker = tracker
        self.session = session
        self.on_stop = StopMode(on_stop)
        self.verdicts: list[Verdict] = []
        self._nudges: dict[int, tuple[Any, str | None, str]] = {}
        # Each finished step converted once (by id, with the step to rule out a reused id):
        # the memory grows by a step a turn, and converting all of it each time is O(n^2).
        self._converted: dict[int, tuple[Any, list[dict[str, Any]]]] = {}
        self._first_step: Any = None
        # A stop given by a refused call (`guard`), acted on when its step ends.
        self._stop: Verdict | None = None

    def guard(self, agent: Any) -> Any:
        """Give ``agent``'s tools a preflight (copies: tools shared with other agents are
        left as they are) and return the agent."""
        for name, tool in list(agent.tools.items()):
            if name != FINAL_ANSWER_TOOL:
                agent.tools[name] = self._guarded(name, tool)
        return agent

    def _guarded(self, name: str, tool: Any) -> Any:
        guarded = copy.copy(tool)
        forward = tool.forward

        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                verdict = self.tracker.check_call(name, kwargs if kwargs else list(args))
            except HistoryError as exc:
                logger.warning("loop-judge could not read a call to %r (%s)", name, exc)
                return forward(*args, **kwargs)
            if not verdict:
                return forward(*args, **kwargs)
            if verdict.action is Action.STOP:
                self._stop = verdict
            else:
                self.verdicts.append(verdict)
            return verdict.recovery_message or verdict.summary or "loop detected"

        guarded.forward = checked
        return guarded

    def close(self) -> None:
        """Stop the tracker's event-loop thread (it also stops when collected)."""
        self.tracker.close()

    def __call__(self, memory_step: Any, agent: Any) -> None:
        """smolagents' step callback (registered for `ActionStep`)."""
        if not isinstance(memory_step, ActionStep) or memory_step.is_final_answer:
            return  # the run is over: nothing left to steer
        steps = list(agent.memory.steps)
        self._follow(steps)
        if not any(s is memory_step for s in steps):
            steps.append(memory_step)  # smolagents stores the step after its callbacks
        history = [message for step in steps for message in self._messages(step)]
        history[:0] = steps_to_messages([agent.memory.system_prompt])
        try:
            verdict = self.tracker.turn_started(history)
        except HistoryError as exc:
            logger.warning("loop-judge could not read the agent's memory (%s); not judged", exc)
            return
        stop, self._stop = self._stop, None
        if stop is not None:
            verdict = stop  # a refused call said stop: the step it ended is over now
        if verdict:
            self._act(verdict, memory_step, agent)

    def _messages(self, step: Any) -> list[dict[str, Any]]:
        cached = self._converted.get(id(step))
        if cached is not None and cached[0] is step:
            return cached[1]
        messages = steps_to_messages([step], nudges=self._nudges)
        self._converted[id(step)] = (step, messages)
        return messages

    def _follow(self, steps: list[Any]) -> None:
        """A memory reset (a new ``agent.run``) is a new conversation: start over."""
        first = steps[0] if steps else None
        if first is not self._first_step and self._first_step is not None:
            self.tracker.reset()
            self._nudges.clear()
            self._converted.clear()
        self._first_step = first

    def _act(self, verdict: Verdict, step: Any, agent: Any) -> None:
        self.verdicts.append(verdict)
        if verdict.action is Action.STOP:
            if self.on_stop is StopMode.INTERRUPT:
                agent.interrupt()
                return
            # Raising here skips smolagents' own "store the step": store it, so the
            # memory (and a later run with reset=False) still holds what was done.
            if not any(s is step for s in agent.memory.steps):
                agent.memory.steps.append(step)
            raise LoopDetected(verdict, session=self.session)
        if verdict.recovery_message:
            original = step.observations
            self._nudges[id(step)] = (step, original, verdict.recovery_message)
            self._converted.pop(id(step), None)
            step.observations = (
                f"{original}{NUDGE_SEPARATOR}{verdict.recovery_message}"
                if original
                else verdict.recovery_message
            )
