"""The tests' helpers around the public test doubles of `judge.testing`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import anyio

from judge.testing import AgentHistory, Entry, ScriptedJudge, Usage


def answer(confidence: float, analysis: str = "scripted") -> str:
    return json.dumps(
        {"unproductive_state_analysis": analysis, "unproductive_state_confidence": confidence}
    )


# What every reply of `fake_judge` reports: round numbers, so budget tests count by hand.
FAKE_USAGE: Usage = (100, 20, 0.0001)


def fake_judge(scripts: Mapping[str, Sequence[Entry]]) -> ScriptedJudge:
    """The public `ScriptedJudge`, one script per model (its last entry repeats), with a
    fixed usage per reply (`FAKE_USAGE`)."""
    return ScriptedJudge.per_model(scripts, usage=FAKE_USAGE)


async def hang() -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


class Agent(AgentHistory):
    """The tests' one history builder: `judge.testing.AgentHistory` plus what some tests need.

    The defaults give the detector tests' conversation (a generic agent, assistant calls
    with ``""`` content); `live_agent` gives the support agent that asks its tracker every
    turn. Extras over `AgentHistory`: ``text`` on a call (the assistant's words beside it,
    OpenAI format), ``name`` on `say`, `parallel` calls in one assistant message, call ids
    from ``first_call``, and ``history`` as another name for ``messages``. Messages are
    appended by `AgentHistory.call` alone; the extras only adjust what it appended.
    """

    def __init__(
        self,
        tracker: Any = None,
        *,
        task: str = "Do the task.",
        system: str = "You are an agent.",
        fmt: str = "openai",
        call_content: str | None = "",
        first_call: int = 1,
    ) -> None:
        super().__init__(tracker, task=task, system=system, fmt=fmt, first_call=first_call)
        self.call_content = call_content

    @property
    def history(self) -> list[dict[str, Any]]:
        return self.messages

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        result: str,
        text: str | None = None,
        *,
        is_error: bool = False,
    ) -> None:
        """One assistant tool call and its result; ``text`` replaces ``call_content``."""
        content = self.call_content if text is None else text
        if self.fmt == "anthropic" and content is not None:
            raise ValueError("text beside a call is only written in the OpenAI format")
        super().call(name, arguments, result, is_error=is_error)
        if content is not None:
            self.messages[-2]["content"] = content

    def parallel(self, calls: list[tuple[str, dict[str, Any], str]]) -> None:
        """Several calls in one assistant message, then their results in order."""
        if self.fmt != "openai" or not calls:
            raise ValueError("parallel calls need the OpenAI format and at least one call")
        start = len(self.messages)
        for name, arguments, result in calls:
            self.call(name, arguments, result)
        appended = self.messages[start:]
        del self.messages[start:]
        assistant, results = appended[0], appended[1::2]
        assistant["tool_calls"] = [c for m in appended[0::2] for c in m["tool_calls"]]
        self.messages += [assistant, *results]

    def say(self, text: str, name: str | None = None) -> None:
        """An assistant message without a call, from the speaker ``name`` when given."""
        super().say(text)
        if name:
            self.messages[-1]["name"] = name


def live_agent(tracker: Any, *, task: str = "Where is my order?", fmt: str = "openai") -> Agent:
    """A support agent's history, asking ``tracker`` at the start of every turn (`turn`) and
    appending its recovery message when it flags; assistant calls carry no text."""
    return Agent(tracker, task=task, system="You are a support agent.", fmt=fmt, call_content=None)


def looping_history(
    n_turns: int, *, task: str = "Find the weather in Lima"
) -> list[dict[str, Any]]:
    """A history with ``n_turns`` assistant turns, each a different read (no heuristic loop);
    call ids from ``call_0``."""
    agent = Agent(task=task, system="You are a helpful agent.", first_call=0)
    for i in range(n_turns):
        agent.call("read_file", {"path": f"f{i}.txt"}, f"content {i}", text=f"step {i}")
    return agent.history


async def replay_turns(tracker: Any, history: list[dict[str, Any]]) -> list[Any]:
    """``turn_started`` at each turn boundary of a finished history, the eval's own
    boundaries (`judge.turns.assistant_turn_ends`)."""
    from judge.turns import assistant_turn_ends

    return [await tracker.turn_started(history[:end]) for end in assistant_turn_ends(history)]
