"""smolagents agent memory (``intermediate_steps`` of its benchmark output) -> OpenAI chat messages.

smolagents' benchmark script (``examples/smolagents_benchmark/run.py``) stores each run's
memory as the message list the model was sent, with smolagents' own roles:

* ``system`` / ``user`` / ``assistant`` - as in chat completions (content is a list of text parts);
* ``tool-call`` - the call(s) the agent parsed from the assistant output, rendered as
  ``"Calling tools:\\n[{'id': ..., 'type': 'function', 'function': {...}}]"`` where the list
  is a Python literal, not JSON;
* ``tool-response`` - the observation (``"Observation:\\n..."``) or the error the harness sent
  back; smolagents sends it to the model as a user turn.

This module folds a ``tool-call`` into the assistant message before it as native
``tool_calls`` and turns the ``tool-response`` that answers it into a ``tool`` message, so a run
reads like any other function-calling trajectory. A ``tool-response`` with no open call (a
parsing or execution error reported before any call was recorded) stays a ``user`` message,
which is how the model saw it. CodeAgent calls carry their Python source as the argument
string; it is wrapped as ``{"code": ...}`` so that arguments are always a JSON object string.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ConvertedMemory", "SmolagentsMemoryError", "memory_to_messages", "parse_tool_calls"]

#: Longest single message kept verbatim (the dev-set brief caps a message at 20,000 chars).
MAX_MESSAGE_CHARS = 20_000
TRUNCATION_MARK = "\n[... truncated by the dev-set converter: {cut} of {total} characters cut ...]"
_CALL_PREFIX = "Calling tools:"


class SmolagentsMemoryError(ValueError):
    """A memory list that cannot be read as smolagents messages."""


@dataclass
class ConvertedMemory:
    """The chat messages of one run and how many messages were cut."""

    messages: list[dict[str, Any]]
    truncated: int = 0


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    raise SmolagentsMemoryError(f"content of type {type(content).__name__} is not text")


def _arguments(name: str, arguments: Any) -> str:
    if isinstance(arguments, Mapping):
        return json.dumps(dict(arguments), ensure_ascii=False)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return arguments
        # CodeAgent: the argument is the Python source the interpreter ran.
        return json.dumps({"code": arguments}, ensure_ascii=False)
    return json.dumps({"value": arguments}, ensure_ascii=False)


def parse_tool_calls(text: str) -> list[dict[str, Any]]:
    """OpenAI ``tool_calls`` from a smolagents ``tool-call`` message text."""
    if not text.startswith(_CALL_PREFIX):
        raise SmolagentsMemoryError(f"tool-call text does not start with {_CALL_PREFIX!r}")
    try:
        calls = ast.literal_eval(text[len(_CALL_PREFIX) :].strip())
    except (ValueError, SyntaxError) as error:
        raise SmolagentsMemoryError(f"tool-call list is not a Python literal: {error}") from None
    if not isinstance(calls, list):
        raise SmolagentsMemoryError("tool-call text does not hold a list")
    parsed: list[dict[str, Any]] = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise SmolagentsMemoryError(f"tool call without a function name: {call!r}")
        name = function["name"]
        parsed.append(
            {
                "id": str(call.get("id")),
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": _arguments(name, function.get("arguments")),
                },
            }
        )
    return parsed


def memory_to_messages(memory: Sequence[Any]) -> ConvertedMemory:
    """Chat messages for one run's memory, in order; malformed entries raise an error."""
    converted = ConvertedMemory(messages=[])
    messages = converted.messages
    unanswered: list[str] = []  # ids of the last assistant message's calls not yet answered

    def cap(text: str) -> str:
        if len(text) <= MAX_MESSAGE_CHARS:
            return text
        converted.truncated += 1
        return text[:MAX_MESSAGE_CHARS] + TRUNCATION_MARK.format(
            cut=len(text) - MAX_MESSAGE_CHARS, total=len(text)
        )

    for number, entry in enumerate(memory):
        if not isinstance(entry, Mapping):
            raise SmolagentsMemoryError(f"entry {number} is not an object")
        role = entry.get("role")
        text = _text(entry.get("content"))
        if role in ("system", "user", "assistant"):
            messages.append({"role": role, "content": cap(text)})
            unanswered = []
        elif role == "tool-call":
            calls = parse_tool_calls(text)
            if (
                messages
                and messages[-1]["role"] == "assistant"
                and "tool_calls" not in messages[-1]
            ):
                messages[-1]["tool_calls"] = calls
            else:  # a call with no model text before it: an assistant turn of its own
                messages.append({"role": "assistant", "content": "", "tool_calls": calls})
            unanswered = [call["id"] for call in calls]
        elif role == "tool-response":
            if unanswered:
                messages.append(
                    {"role": "tool", "tool_call_id": unanswered.pop(0), "content": cap(text)}
                )
            else:
                messages.append({"role": "user", "content": cap(text)})
        else:
            raise SmolagentsMemoryError(f"entry {number} has unknown role {role!r}")
    return converted
