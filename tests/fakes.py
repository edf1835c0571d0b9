"""In-process test doubles for the judge's model client."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from judge.errors import JudgeError
from judge.llm._litellm import ModelReply


def answer(confidence: float, analysis: str = "scripted") -> str:
    return json.dumps(
        {"unproductive_state_analysis": analysis, "unproductive_state_confidence": confidence}
    )


Script = str | JudgeError | Callable[[], Any]


@dataclass
class FakeClient:
    """Plays back scripted replies per model and records every request.

    A script entry is reply text, a `JudgeError` to raise, or a callable (sync or async)
    returning either. When a model's script runs out its last entry repeats.
    """

    scripts: dict[str, list[Script]] = field(default_factory=dict)
    requests: list[tuple[str, list[dict[str, str]]]] = field(default_factory=list)

    def calls_to(self, model: str) -> int:
        return sum(1 for m, _ in self.requests if m == model)

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        self.requests.append((model, messages))
        script = self.scripts.get(model)
        if not script:
            raise AssertionError(f"unexpected call to {model}")
        entry = script.pop(0) if len(script) > 1 else script[0]
        if callable(entry):
            entry = entry()
            if hasattr(entry, "__await__"):
                entry = await entry
        if isinstance(entry, JudgeError):
            raise entry
        return ModelReply(
            content=entry,
            finish_reason="stop",
            prompt_tokens=100,
            completion_tokens=20,
            cost_usd=0.0001,
            attempts=1,
        )


async def hang() -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def looping_history(
    n_turns: int, *, task: str = "Find the weather in Lima"
) -> list[dict[str, Any]]:
    """A history with ``n_turns`` assistant turns, each a different read (no heuristic loop)."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": task},
    ]
    for i in range(n_turns):
        call_id = f"call_{i}"
        history.append(
            {
                "role": "assistant",
                "content": f"step {i}",
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"f{i}.txt"}),
                        },
                    }
                ],
            }
        )
        history.append({"role": "tool", "tool_call_id": call_id, "content": f"content {i}"})
    return history


class LiveAgent:
    """A history grown the way an agent grows it, in either wire format, with the tracker
    asked at the start of every turn and its recovery message appended when it flags.

    ``fmt="anthropic"`` writes ``tool_use`` / ``tool_result`` content blocks instead of
    OpenAI ``tool_calls`` and ``tool`` messages.
    """

    def __init__(
        self, tracker: Any, *, task: str = "Where is my order?", fmt: str = "openai"
    ) -> None:
        self.tracker = tracker
        self.fmt = fmt
        self.history: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a support agent."},
            {"role": "user", "content": task},
        ]
        self.verdicts: list[Any] = []
        self._n = 0

    def _call_id(self) -> str:
        self._n += 1
        return f"call_{self._n}"

    def call(self, name: str, args: dict[str, Any], result: str, *, is_error: bool = False) -> None:
        cid = self._call_id()
        if self.fmt == "anthropic":
            self.history.append(
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": cid, "name": name, "input": args}],
                }
            )
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": cid, "content": result}
            if is_error:
                block["is_error"] = True
            self.history.append({"role": "user", "content": [block]})
            return
        self.history.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": name, "arguments": json.dumps(args)},
                    }
                ],
            }
        )
        self.history.append({"role": "tool", "tool_call_id": cid, "content": result})

    def say(self, text: str) -> None:
        self.history.append({"role": "assistant", "content": text})

    def user(self, text: str) -> None:
        self.history.append({"role": "user", "content": text})

    async def turn(self) -> Any:
        """``turn_started``, then what the README tells agents to do with a loop verdict."""
        verdict = await self.tracker.turn_started(self.history)
        self.verdicts.append(verdict)
        if verdict:
            self.user(verdict.recovery_message)
        return verdict
