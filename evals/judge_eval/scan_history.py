"""Rebuilding an agent's chat history from the model calls and tool runs a tracer recorded.

A tracer (OpenTelemetry GenAI spans, Langfuse observations) records each model call with
the messages it was sent and the messages it answered, and each tool run with its
arguments and result; it never records "the conversation" as such. The readers in
`judge_eval.otlp_reader` and `judge_eval.langfuse_reader` turn their spans into the
`Step` objects below, and `rebuild_history` folds them, in time order, into the OpenAI chat
messages the tracker reads.

How the steps are folded, and why:

* a model call's input is matched against the history so far: agents usually send the
  whole conversation every time, so the newest history message that also appears in the
  input marks where the input starts saying something new, and only what follows it is
  appended; an input that shares nothing with the history (instrumentations that record
  only the newest messages) is appended whole;
* a model call's output (the assistant message, with its tool calls) is appended, and the
  call's reported token usage is kept against that message's index;
* a tool run whose call the history already holds adds the result as a ``tool`` message;
  one whose call it does not hold (content capture was off for the model calls) first adds
  an assistant message making that call, so the run is still seen acting.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judge.errors import TrajectoryFormatError

__all__ = [
    "ChatStep",
    "Step",
    "ToolStep",
    "TraceFormatError",
    "TraceRun",
    "as_text",
    "rebuild_history",
]


class TraceFormatError(TrajectoryFormatError):
    """A trace export could not be read; names the file and, where known, where in it.

    ``str()`` is ``"<path>: <where>: <reason>"`` (``where`` like ``"line 3, span 5fa1…,
    attribute gen_ai.input.messages"``), so the broken record can be found in a large export.
    A `TrajectoryFormatError` so callers that handle trajectory files handle these too.
    """

    where: str | None
    detail: str

    def __init__(self, path: object, detail: str, where: str | None = None) -> None:
        self.where = where
        self.detail = detail
        super().__init__(path, f"{where}: {detail}" if where else detail)


@dataclass(frozen=True, slots=True)
class ChatStep:
    """One model call: the messages sent, the messages answered, the tokens it reported."""

    start: float
    where: str
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool run: which call it answers (when the tracer recorded the id) and its result."""

    start: float
    where: str
    name: str
    call_id: str | None = None
    arguments: str = "{}"
    result: str | None = None


Step = ChatStep | ToolStep


@dataclass(slots=True)
class TraceRun:
    """One agent run read from a trace export, as the messages the tracker will replay.

    ``reported_tokens`` maps the index of an assistant message to the tokens (input plus
    output) the model call that wrote it reported; calls without usage are absent.
    """

    id: str
    path: Path
    format: str
    messages: list[dict[str, Any]]
    reported_tokens: dict[int, int] = field(default_factory=dict)


def _key(message: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two recorded messages the same message.

    Tool calls and results are matched by their ids where the tracer kept them, because
    the same result is often serialised differently by the tool span and by the next
    model call's input (a JSON object in one, its text in the other).
    """
    role = message.get("role")
    if role == "tool" and message.get("tool_call_id"):
        return (role, message["tool_call_id"])
    calls = message.get("tool_calls") or []
    if calls:
        ids = tuple(str(c.get("id") or "") for c in calls)
        if all(ids):
            return (role, ids)
        return (role, tuple((c["function"]["name"], c["function"]["arguments"]) for c in calls))
    return (role, str(message.get("content") or "").strip())


def _merge_input(history: list[dict[str, Any]], inputs: Sequence[dict[str, Any]]) -> int:
    """Append what ``inputs`` adds to ``history`` (see the module docstring); returns how
    many of the history's messages were kept as they were."""
    if not history:
        history.extend(inputs)
        return 0
    # The last occurrence wins: a repeated message is matched at its newest copy.
    positions = {_key(message): n for n, message in enumerate(inputs)}
    for back in range(len(history) - 1, -1, -1):
        position = positions.get(_key(history[back]))
        if position is None:
            continue
        # The input is the agent's own record from here on: what the history holds after
        # this point came from tool spans and is replaced by the agent's version of it.
        del history[back + 1 :]
        history.extend(inputs[position + 1 :])
        return back + 1
    kept = len(history)
    seen_system = {_key(m) for m in history if m.get("role") == "system"}
    history.extend(m for m in inputs if _key(m) not in seen_system)
    return kept


def _holds_call(history: Sequence[dict[str, Any]], step: ToolStep) -> bool:
    for message in reversed(history):
        for call in message.get("tool_calls") or []:
            if step.call_id is not None and call.get("id") == step.call_id:
                return True
            if step.call_id is None and call["function"]["name"] == step.name:
                return True
    return False


def _has_result(history: Sequence[dict[str, Any]], call_id: str) -> bool:
    return any(m.get("role") == "tool" and m.get("tool_call_id") == call_id for m in history)


def _pending_id(history: Sequence[dict[str, Any]], name: str) -> str | None:
    """The id of the newest call to ``name`` that has no result yet (for id-less tool runs)."""
    for message in reversed(history):
        for call in message.get("tool_calls") or []:
            call_id = call.get("id")
            if call["function"]["name"] == name and call_id and not _has_result(history, call_id):
                return str(call_id)
    return None


def rebuild_history(steps: Sequence[Step]) -> tuple[list[dict[str, Any]], dict[int, int]]:
    """The chat messages ``steps`` add up to, and the reported tokens per assistant message.

    Steps are taken in start order (ties keep the reader's order, which is the file's).
    """
    history: list[dict[str, Any]] = []
    tokens: dict[int, int] = {}
    synthetic = 0
    for step in sorted(steps, key=lambda s: s.start):
        if isinstance(step, ChatStep):
            kept = _merge_input(history, step.inputs)
            tokens = {i: n for i, n in tokens.items() if i < kept}
            for message in step.outputs:
                history.append(message)
                if message.get("role") == "assistant" and step.tokens is not None:
                    tokens[len(history) - 1] = step.tokens
            continue
        call_id = step.call_id or _pending_id(history, step.name)
        if call_id is None or not _holds_call(history, ToolStep(0, "", step.name, call_id)):
            synthetic += 1
            call_id = call_id or f"scan_call_{synthetic}"
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": step.name, "arguments": step.arguments},
            }
            history.append({"role": "assistant", "content": "", "tool_calls": [call]})
        if step.result is not None and not _has_result(history, call_id):
            history.append({"role": "tool", "tool_call_id": call_id, "content": step.result})
    return history, tokens


def as_text(value: Any) -> str:
    """A tool argument or result as text: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)
