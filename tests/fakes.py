"""In-process test doubles for the judge's model client."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from judge._llm import ModelReply
from judge.errors import JudgeError


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
