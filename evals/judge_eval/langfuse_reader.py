"""Agent runs from Langfuse exports.

Langfuse's "Download JSON" on a trace writes the trace with its ``observations`` (and
scores); a session's download holds its ``traces``; the public API and the table exports
give lists of traces, or lists (JSON or JSONL) of observations that each name their
``traceId``. All of these are read:

* ``GENERATION`` observations are model calls: ``input`` holds the chat messages sent (a
  list of OpenAI-style messages, an object with ``messages``, or a prompt string),
  ``output`` the answer (an assistant message, a list of them, or text), and
  ``usageDetails`` / ``usage`` the tokens;
* ``TOOL`` observations are tool runs (``input`` the arguments, ``output`` the result);
  a ``SPAN`` counts as one only when its name is that of a tool call still waiting for its
  result, because most spans are an application's own steps, not tools;
* ``EVENT`` observations and the other kinds are points in time with nothing the agent
  said or did, and are not read.

Observations are grouped into runs by the trace's ``sessionId`` when it has one (a session
is one conversation across several traces), else by trace id, and ordered by
``startTime``.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from judge_eval.scan_history import (
    ChatStep,
    Step,
    ToolStep,
    TraceFormatError,
    TraceRun,
    as_text,
    rebuild_history,
)

__all__ = ["FORMAT", "looks_like", "read_runs"]

FORMAT = "langfuse"

# Token counts summed when no total is given: Langfuse's current names, then the older ones.
_COUNTS = ("input", "output", "promptTokens", "completionTokens")
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


def _is_observation(item: Any) -> bool:
    return isinstance(item, dict) and "traceId" in item and "type" in item


def _is_trace(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("observations"), list)


def looks_like(data: Any) -> bool:
    """A trace with ``observations``, a session with ``traces``, or a list of either, or a
    list of observations."""
    if _is_trace(data) or _is_observation(data):
        return True
    if isinstance(data, dict) and isinstance(data.get("traces"), list):
        return all(_is_trace(t) for t in data["traces"])
    if isinstance(data, dict) and isinstance(data.get("data"), list):  # an API page
        return bool(data["data"]) and all(_is_trace(t) or _is_observation(t) for t in data["data"])
    if isinstance(data, list) and data:
        return all(_is_trace(t) for t in data) or all(_is_observation(o) for o in data)
    return False


def _time(raw: Any) -> float:
    if not isinstance(raw, str) or not raw:
        return 0.0
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _tokens(observation: dict[str, Any]) -> int | None:
    """Input plus output tokens from ``usageDetails`` (newer) or ``usage`` (older)."""
    for key in ("usageDetails", "usage"):
        usage = observation.get(key)
        if not isinstance(usage, dict):
            continue
        numbers = {k: v for k, v in usage.items() if isinstance(v, int) and v >= 0}
        for total in ("total", "totalTokens"):
            if total in numbers:
                return numbers[total]
        counted = [numbers[k] for k in _COUNTS if k in numbers]
        if counted:
            return sum(counted)
    return None


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, detail: str) -> TraceFormatError:
        return TraceFormatError(self.path, detail, where)

    def message(self, raw: Any, where: str) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.fail(where, f"expected a message object, got {type(raw).__name__}")
        role = raw.get("role")
        if role not in _ROLES:
            raise self.fail(where, f"'role' must be one of {sorted(_ROLES)}, got {role!r}")
        content = raw.get("content")
        message: dict[str, Any] = {
            "role": "system" if role == "developer" else "tool" if role == "function" else role,
            "content": _text(content),
        }
        if message["role"] == "tool":
            message["tool_call_id"] = str(raw.get("tool_call_id") or raw.get("name") or "")
        calls = raw.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise self.fail(f"{where}, field tool_calls", "expected a list")
            message["tool_calls"] = [
                self.call(c, f"{where}, tool_calls[{n}]") for n, c in enumerate(calls)
            ]
        return message

    def call(self, raw: Any, where: str) -> dict[str, Any]:
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise self.fail(where, "a tool call needs function.name")
        return {
            "id": str(raw.get("id") or ""),
            "type": "function",
            "function": {
                "name": function["name"],
                "arguments": as_text(function.get("arguments")) or "{}",
            },
        }

    def messages(self, raw: Any, where: str, *, default_role: str) -> list[dict[str, Any]]:
        if raw is None:
            return []
        if isinstance(raw, str):
            return [{"role": default_role, "content": raw}]
        if isinstance(raw, dict) and isinstance(raw.get("messages"), list):
            raw = raw["messages"]
        if isinstance(raw, dict) and "role" in raw:
            raw = [raw]
        if isinstance(raw, dict) and isinstance(raw.get("choices"), list):  # a raw response
            raw = [c.get("message") for c in raw["choices"] if isinstance(c, dict)]
        if not isinstance(raw, list):
            raise self.fail(where, "expected chat messages, a message, or text")
        return [self.message(m, f"{where}[{n}]") for n, m in enumerate(raw)]

    def step(self, observation: dict[str, Any], where: str) -> Step | None:
        kind = str(observation.get("type") or "").upper()
        start = _time(observation.get("startTime"))
        if kind == "GENERATION":
            inputs = self.messages(
                observation.get("input"), f"{where}, field input", default_role="user"
            )
            outputs = self.messages(
                observation.get("output"), f"{where}, field output", default_role="assistant"
            )
            if not inputs and not outputs:
                return None
            return ChatStep(start, where, inputs, outputs, _tokens(observation))
        if kind in ("TOOL", "SPAN"):
            name = observation.get("name")
            if not isinstance(name, str) or not name:
                if kind == "SPAN":
                    return None
                raise self.fail(where, "TOOL observation without a 'name'")
            output = observation.get("output")
            return ToolStep(
                start,
                where,
                name,
                None,
                as_text(observation.get("input")) or "{}",
                None if output is None else as_text(output),
            )
        return None


def _text(content: Any) -> str:
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                pieces.append(part["text"])
            elif isinstance(part, str):
                pieces.append(part)
        return "\n".join(pieces)
    return as_text(content)


def _pending(steps: list[Step], name: str) -> bool:
    """Whether a model call so far asked for tool ``name`` (a SPAN is then that tool)."""
    for step in steps:
        if isinstance(step, ChatStep):
            for message in step.outputs:
                for call in message.get("tool_calls") or []:
                    if call["function"]["name"] == name:
                        return True
    return False


def read_runs(path: Path, documents: list[tuple[int | None, Any]]) -> list[TraceRun]:
    """The runs in one file's Langfuse documents (``(line, document)``; line None for JSON)."""
    reader = _Reader(path)
    observations: list[tuple[str, dict[str, Any]]] = []  # (run id, observation)
    for line, document in documents:
        prefix = f"line {line}, " if line is not None else ""
        if isinstance(document, dict) and isinstance(document.get("traces"), list):
            traces: list[Any] = document["traces"]
        elif isinstance(document, dict) and isinstance(document.get("data"), list):
            traces = document["data"]
        elif isinstance(document, list):
            traces = document
        else:
            traces = [document]
        for n, trace in enumerate(traces):
            if _is_observation(trace) and not _is_trace(trace):
                run = str(trace["traceId"])
                observations.append((run, trace))
                continue
            if not _is_trace(trace):
                raise reader.fail(
                    f"{prefix}trace {n}", "neither a trace with 'observations' nor an observation"
                )
            trace_id = str(trace.get("id") or f"{path.stem}:{n}")
            session = trace.get("sessionId")
            run = str(session) if isinstance(session, str) and session else trace_id
            for observation in trace["observations"]:
                if not isinstance(observation, dict):
                    raise reader.fail(
                        f"{prefix}trace {trace_id}", "an observation is not an object"
                    )
                observations.append((run, observation))
    groups: dict[str, list[Step]] = defaultdict(list)
    ordered = sorted(observations, key=lambda item: _time(item[1].get("startTime")))
    for run, observation in ordered:
        where = f"observation {observation.get('id') or '?'}"
        step = reader.step(observation, where)
        if step is None:
            continue
        is_span = str(observation.get("type")).upper() == "SPAN"
        if isinstance(step, ToolStep) and is_span and not _pending(groups[run], step.name):
            continue
        groups[run].append(step)
    runs = []
    for run_id, steps in groups.items():
        if steps:
            messages, tokens = rebuild_history(steps)
            runs.append(TraceRun(run_id, path, FORMAT, messages, tokens))
    return runs
