"""Agent runs from OTLP JSON exports of OpenTelemetry GenAI spans.

Reads what the OpenTelemetry semantic conventions for generative AI describe, as the
OTLP/JSON encoding writes it (``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``,
one document per file or one per line as the Collector's file exporter writes them):

* model-call spans (``gen_ai.operation.name`` ``chat``, ``text_completion`` or
  ``generate_content``) with the structured ``gen_ai.input.messages``,
  ``gen_ai.output.messages`` and ``gen_ai.system_instructions`` attributes: messages of
  ``role`` and ``parts`` (``text``, ``tool_call``, ``tool_call_response``, ...), as a JSON
  string or as the structured value; and their token usage
  (``gen_ai.usage.input_tokens`` / ``output_tokens``);
* the older per-message events on those spans, or as OTLP log records
  (``gen_ai.system.message``, ``gen_ai.user.message``, ``gen_ai.assistant.message``,
  ``gen_ai.tool.message``, ``gen_ai.choice``), which the conventions still list as
  deprecated in favour of the attributes;
* tool spans (``execute_tool``): ``gen_ai.tool.name``, ``gen_ai.tool.call.id``,
  ``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``.

``invoke_agent`` and other spans only group the others and are not read. Spans are grouped
into runs by ``gen_ai.conversation.id`` when a trace carries one (several traces of one
conversation make one run), else by trace id, and ordered by start time.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
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

FORMAT = "otlp"

# gen_ai.operation.name values of a model call, from the conventions' well-known values.
_CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_TOOL_OPERATION = "execute_tool"
_CONVERSATION = "gen_ai.conversation.id"
# The deprecated per-message events, and the role each one stands for.
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_CHOICE_EVENT = "gen_ai.choice"
_ROLES = frozenset({"system", "user", "assistant", "tool"})


def looks_like(data: Any) -> bool:
    """An OTLP/JSON traces (or logs) request: ``resourceSpans`` or ``resourceLogs``."""
    return isinstance(data, dict) and ("resourceSpans" in data or "resourceLogs" in data)


def _value(raw: Any) -> Any:
    """An OTLP ``AnyValue`` as plain Python (kvlists become dicts, arrays lists)."""
    if not isinstance(raw, dict):
        return raw
    if "stringValue" in raw:
        return raw["stringValue"]
    if "intValue" in raw:  # int64 is a JSON string in OTLP/JSON
        return int(raw["intValue"])
    if "doubleValue" in raw:
        return float(raw["doubleValue"])
    if "boolValue" in raw:
        return bool(raw["boolValue"])
    if "arrayValue" in raw:
        return [_value(v) for v in (raw["arrayValue"] or {}).get("values", [])]
    if "kvlistValue" in raw:
        return _attributes((raw["kvlistValue"] or {}).get("values", []))
    if "bytesValue" in raw:
        return "[bytes]"
    return None


def _attributes(raw: Any) -> dict[str, Any]:
    if not isinstance(raw, list):
        return {}
    out: dict[str, Any] = {}
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = _value(item.get("value"))
    return out


def _nanos(raw: Any) -> int:
    try:
        return int(raw or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(slots=True)
class _Span:
    trace_id: str
    span_id: str
    start: int
    attributes: dict[str, Any]
    events: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    where: str = ""


class _Reader:
    """Turns one file's spans into steps, blaming the file (and line, span, field) for
    anything malformed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, detail: str) -> TraceFormatError:
        return TraceFormatError(self.path, detail, where)

    # -- messages ---------------------------------------------------------------------

    def structured(self, raw: Any, where: str) -> list[Any]:
        """A messages attribute: a JSON string per the conventions, or the structured value."""
        if isinstance(raw, str):
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise self.fail(where, f"invalid JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(raw, list):
            raise self.fail(where, f"expected a list of messages, got {type(raw).__name__}")
        return raw

    def parts_message(self, message: Any, where: str) -> list[dict[str, Any]]:
        """One conventions message (``role`` + ``parts``) as OpenAI chat messages.

        Tool results become one ``tool`` message each, whichever role carried them (some
        providers put them in a user message).
        """
        if not isinstance(message, dict):
            raise self.fail(where, f"expected an object, got {type(message).__name__}")
        role = message.get("role")
        if role not in _ROLES:
            raise self.fail(where, f"'role' must be one of {sorted(_ROLES)}, got {role!r}")
        parts = message.get("parts")
        if not isinstance(parts, list):
            raise self.fail(where, "'parts' missing or not a list")
        texts: list[str] = []
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for n, part in enumerate(parts):
            if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                raise self.fail(f"{where}, part {n}", "expected an object with a 'type'")
            kind = part["type"]
            if kind == "text":
                texts.append(as_text(part.get("content")))
            elif kind == "tool_call":
                if not isinstance(part.get("name"), str):
                    raise self.fail(f"{where}, part {n}", "tool_call without a 'name'")
                calls.append(
                    {
                        "id": str(part.get("id") or f"call_{len(calls)}"),
                        "type": "function",
                        "function": {
                            "name": part["name"],
                            "arguments": as_text(part.get("arguments")) or "{}",
                        },
                    }
                )
            elif kind == "tool_call_response":
                results.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(part.get("id") or ""),
                        "content": as_text(part.get("response")),
                    }
                )
            elif kind == "reasoning":
                continue  # the model's thinking is not something the agent did
            else:  # blob, file, uri and types of later versions: loops are read from text
                texts.append(f"[{kind}]")
        out: list[dict[str, Any]] = list(results)
        if texts or calls or not results:
            if role == "tool":
                out.append({"role": "tool", "tool_call_id": "", "content": "\n".join(texts)})
            else:
                converted: dict[str, Any] = {"role": role, "content": "\n".join(texts)}
                if calls:
                    converted["tool_calls"] = calls
                out.append(converted)
        return out

    def event_message(self, name: str, body: dict[str, Any], where: str) -> dict[str, Any]:
        """One deprecated per-message event (its body fields as attributes or a body)."""
        if name == _CHOICE_EVENT:
            inner = body.get("message")
            if isinstance(inner, str):
                try:
                    inner = json.loads(inner)
                except json.JSONDecodeError:
                    inner = {"content": inner}
            body = inner if isinstance(inner, dict) else {}
            role = "assistant"
        else:
            role = _MESSAGE_EVENTS[name]
        message: dict[str, Any] = {"role": role, "content": as_text(body.get("content"))}
        if role == "tool":
            message["tool_call_id"] = str(body.get("id") or "")
        calls = body.get("tool_calls")
        if isinstance(calls, str):
            try:
                calls = json.loads(calls)
            except json.JSONDecodeError:
                raise self.fail(f"{where}, field tool_calls", "invalid JSON") from None
        if calls:
            if not isinstance(calls, list):
                raise self.fail(f"{where}, field tool_calls", "expected a list")
            message["tool_calls"] = [self.event_call(c, f"{where}, tool_calls") for c in calls]
        return message

    def event_call(self, call: Any, where: str) -> dict[str, Any]:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise self.fail(where, "a tool call needs function.name")
        return {
            "id": str(call.get("id") or ""),
            "type": "function",
            "function": {
                "name": function["name"],
                "arguments": as_text(function.get("arguments")) or "{}",
            },
        }

    # -- spans --------------------------------------------------------------------------

    def chat_step(self, span: _Span) -> ChatStep | None:
        attrs = span.attributes
        inputs: list[dict[str, Any]] = []
        outputs: list[dict[str, Any]] = []
        system = attrs.get("gen_ai.system_instructions")
        if system is not None:
            where = f"{span.where}, attribute gen_ai.system_instructions"
            parts = self.structured(system, where)
            wrapped = {"role": "system", "parts": parts}
            inputs += self.parts_message(wrapped, where)
        for name, target in (
            ("gen_ai.input.messages", inputs),
            ("gen_ai.output.messages", outputs),
        ):
            if name not in attrs:
                continue
            where = f"{span.where}, attribute {name}"
            for n, message in enumerate(self.structured(attrs[name], where)):
                target += self.parts_message(message, f"{where}, message {n}")
        for name, _, body in span.events:
            where = f"{span.where}, event {name}"
            if name in _MESSAGE_EVENTS:
                inputs.append(self.event_message(name, body, where))
            elif name == _CHOICE_EVENT:
                outputs.append(self.event_message(name, body, where))
        if not inputs and not outputs:
            return None  # content capture was off: the span says a call happened, not what
        return ChatStep(span.start, span.where, inputs, outputs, _usage(attrs))

    def tool_step(self, span: _Span) -> ToolStep:
        attrs = span.attributes
        name = attrs.get("gen_ai.tool.name")
        if not isinstance(name, str) or not name:
            raise self.fail(span.where, "execute_tool span without gen_ai.tool.name")
        call_id = attrs.get("gen_ai.tool.call.id")
        result = attrs.get("gen_ai.tool.call.result")
        return ToolStep(
            span.start,
            span.where,
            name,
            str(call_id) if call_id else None,
            as_text(attrs.get("gen_ai.tool.call.arguments")) or "{}",
            None if result is None else as_text(result),
        )

    def spans(self, document: Any, line: int | None) -> list[_Span]:
        """The spans of one OTLP request, plus its log-record events attached to theirs."""
        prefix = f"line {line}, " if line is not None else ""
        if not looks_like(document):
            raise self.fail(prefix.rstrip(", ") or "top level", "not an OTLP traces request")
        found: list[_Span] = []
        for r, resource in enumerate(document.get("resourceSpans") or []):
            for s, scope in enumerate((resource or {}).get("scopeSpans") or []):
                for n, raw in enumerate((scope or {}).get("spans") or []):
                    found.append(self.span(raw, f"{prefix}resourceSpans[{r}].scopeSpans[{s}]", n))
        by_id = {(span.trace_id, span.span_id): span for span in found}
        for r, resource in enumerate(document.get("resourceLogs") or []):
            for scope in (resource or {}).get("scopeLogs") or []:
                for record in (scope or {}).get("logRecords") or []:
                    self.attach_log(record, by_id, found, f"{prefix}resourceLogs[{r}]")
        return found

    def span(self, raw: Any, where: str, n: int) -> _Span:
        if not isinstance(raw, dict):
            raise self.fail(f"{where}.spans[{n}]", "expected an object")
        span_id = str(raw.get("spanId") or "")
        trace_id = raw.get("traceId")
        label = f"span {span_id}" if span_id else f"{where}.spans[{n}]"
        if where.startswith("line "):
            label = f"{where.split(',')[0]}, {label}"
        if not isinstance(trace_id, str) or not trace_id:
            raise self.fail(label, "'traceId' missing")
        events = []
        for event in raw.get("events") or []:
            if isinstance(event, dict) and isinstance(event.get("name"), str):
                body = _attributes(event.get("attributes"))
                if isinstance(body.get("body"), (dict, str)):
                    body = _body(body["body"])
                events.append((event["name"], _nanos(event.get("timeUnixNano")), body))
        return _Span(
            trace_id,
            span_id,
            _nanos(raw.get("startTimeUnixNano")),
            _attributes(raw.get("attributes")),
            events,
            label,
        )

    def attach_log(
        self, record: Any, by_id: dict[tuple[str, str], _Span], found: list[_Span], where: str
    ) -> None:
        """A deprecated GenAI event sent as a log record joins the span it names."""
        if not isinstance(record, dict):
            return
        attrs = _attributes(record.get("attributes"))
        name = record.get("eventName") or attrs.get("event.name")
        if name not in _MESSAGE_EVENTS and name != _CHOICE_EVENT:
            return
        body = _body(_value(record.get("body")))
        key = (str(record.get("traceId") or ""), str(record.get("spanId") or ""))
        if not key[0]:
            raise self.fail(f"{where}, event {name}", "log record without a 'traceId'")
        span = by_id.get(key)
        if span is None:  # a span exported elsewhere: the events still make a model call
            span = _Span(key[0], key[1], _nanos(record.get("timeUnixNano")), {}, where=where)
            span.attributes["gen_ai.operation.name"] = "chat"
            if _CONVERSATION in attrs:
                span.attributes[_CONVERSATION] = attrs[_CONVERSATION]
            by_id[key] = span
            found.append(span)
        span.events.append((str(name), _nanos(record.get("timeUnixNano")), body))


def _body(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            return {"content": raw}
    return raw if isinstance(raw, dict) else {}


def _usage(attrs: dict[str, Any]) -> int | None:
    """Input plus output tokens, by the current names or the older prompt/completion ones."""
    total = 0
    seen = False
    for names in (
        ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
        ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
    ):
        for name in names:
            value = attrs.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                total += value
                seen = True
                break
    return total if seen else None


def read_runs(path: Path, documents: list[tuple[int | None, Any]]) -> list[TraceRun]:
    """The runs in one file's OTLP documents (``(line, document)``; line None for JSON)."""
    reader = _Reader(path)
    spans: list[_Span] = []
    for line, document in documents:
        spans += reader.spans(document, line)
    conversation_of: dict[str, str] = {}
    for span in spans:
        conversation = span.attributes.get(_CONVERSATION)
        if isinstance(conversation, str) and conversation:
            conversation_of.setdefault(span.trace_id, conversation)
    groups: dict[str, list[Step]] = defaultdict(list)
    for span in sorted(spans, key=lambda s: s.start):
        run = conversation_of.get(span.trace_id, span.trace_id)
        operation = span.attributes.get("gen_ai.operation.name")
        has_messages = "gen_ai.input.messages" in span.attributes or any(
            name in _MESSAGE_EVENTS or name == _CHOICE_EVENT for name, _, _ in span.events
        )
        if operation == _TOOL_OPERATION:
            groups[run].append(reader.tool_step(span))
        elif operation in _CHAT_OPERATIONS or (operation is None and has_messages):
            step = reader.chat_step(span)
            if step is not None:
                groups[run].append(step)
        else:
            groups.setdefault(run, [])
    runs = []
    for run_id, steps in groups.items():
        if not steps:
            continue  # a trace of only agent/workflow spans: nothing the agent said or did
        messages, tokens = rebuild_history(steps)
        runs.append(TraceRun(run_id, path, FORMAT, messages, tokens))
    return runs
