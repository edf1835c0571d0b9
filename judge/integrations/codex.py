"""Codex CLI's hooks, answered by the shared hook session.

Codex runs command hooks from ``hooks.json`` or ``[hooks]`` in ``config.toml`` with the
event's JSON on stdin, in Claude Code's shapes (openai/codex, codex-rs/hooks/schema/
generated/*.command.input.schema.json and output_parser.rs): ``PreToolUse``,
``PostToolUse`` and ``Stop`` carry the same fields loop-judge reads, so the payload goes
through almost as it is (`to_claude_payload`) and so does the answer (`codex_json`),
with two differences:

- ``transcript_path`` is Codex's rollout JSONL, not Claude Code's transcript: it is not
  read; each event carries the call and its result, which is what the tracker needs.
- Codex rejects a PreToolUse output with ``continue: false`` or ``stopReason`` as a
  whole, which would drop the denial with it; a denial that would also end the run keeps
  the denial and says the rest in ``systemMessage``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.integrations.claude_code import HookAnswer

__all__ = ["AGENT", "EVENTS", "codex_json", "to_claude_payload"]

AGENT = "codex"

# The Codex events loop-judge answers (the same names as Claude Code's).
EVENTS = ("PreToolUse", "PostToolUse", "Stop")


def to_claude_payload(payload: Any) -> Any:
    """Codex's hook payload as the Claude Code payload it is answered as."""
    if not isinstance(payload, Mapping):
        return payload
    return {key: value for key, value in payload.items() if key != "transcript_path"}


def codex_json(answer: HookAnswer) -> dict[str, Any]:
    """The hook's stdout JSON for Codex (empty when there is nothing to say)."""
    out = answer.to_json()
    if answer.event == "PreToolUse":
        out.pop("continue", None)
        stop = out.pop("stopReason", None)
        if stop is not None and "systemMessage" not in out:
            out["systemMessage"] = stop
    return out
