"""OpenHands agent-SDK (v1) event logs -> OpenAI chat messages.

The OpenHands software-agent SDK persists a conversation as one JSON object per event
(``conversations/<id>/events/event-NNNNN-<uuid>.json``), and its benchmark harness also dumps
the same events as one JSON list (``traj_<task>.json``). Neither is a chat transcript: a
single model response that calls several tools becomes several ``ActionEvent`` objects that
share one ``llm_response_id``, and the observations come back as separate events. This
module folds them back into the chat shape the evaluation set uses, so that a run from this
agent family can be stored in the project's own format and read by ``load_trajectory``:

* ``SystemPromptEvent`` -> ``system`` message; ``MessageEvent`` -> ``user``/``assistant``;
* consecutive ``ActionEvent`` objects of one ``llm_response_id`` -> one ``assistant`` message
  whose content is the model's visible thought and whose ``tool_calls`` keep the native call
  ids, names and JSON arguments (verbatim, the string the model sent);
* ``ObservationEvent`` / ``AgentErrorEvent`` / ``UserRejectObservation`` -> ``tool`` message
  answering its call;
* bookkeeping events (``Condensation``, state updates, pauses) carry nothing the model said or
  saw as a turn, so they are skipped and counted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConvertedEvents", "OpenHandsEventError", "events_to_messages", "observation_text"]

#: Longest single message kept verbatim; longer ones are cut and marked, so that one huge
#: file dump cannot dominate a stored run (the dev-set brief caps a message at 20,000 chars).
MAX_MESSAGE_CHARS = 20_000
TRUNCATION_MARK = "\n[... truncated by the dev-set converter: {cut} of {total} characters cut ...]"


class OpenHandsEventError(ValueError):
    """An event list that cannot be read as an OpenHands SDK conversation."""


@dataclass
class ConvertedEvents:
    """The chat messages of one run and what was left out on the way."""

    messages: list[dict[str, Any]]
    skipped: dict[str, int] = field(default_factory=dict)
    truncated: int = 0


def _text(value: Any) -> str:
    """Text of a string or of a list of ``{"type": "text", "text": ...}`` parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            part["text"]
            for part in value
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return json.dumps(value, ensure_ascii=False)


def _cap(text: str, converted: ConvertedEvents) -> str:
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    converted.truncated += 1
    return text[:MAX_MESSAGE_CHARS] + TRUNCATION_MARK.format(
        cut=len(text) - MAX_MESSAGE_CHARS, total=len(text)
    )


def observation_text(observation: Mapping[str, Any]) -> str:
    """What the agent was shown for one tool result.

    SDK versions differ: newer observations hold ``content`` (text parts), older ones an
    ``output`` string, and failures may only carry ``error``. The first non-empty one wins.
    """
    for key in ("content", "output"):
        text = _text(observation.get(key))
        if text:
            return text
    error = observation.get("error")
    if isinstance(error, str) and error:
        return error
    return ""


def _tool_call(event: Mapping[str, Any]) -> dict[str, Any]:
    """The native tool call of one ``ActionEvent``, in the chat-completions shape.

    SDK versions store the call three ways: newer ones a flat ``MessageToolCall``
    (``tool_call.arguments``, ``tool_call.name``); SDKs before software-agent-sdk PR #550
    (September 2025) LiteLLM's ``ChatCompletionMessageToolCall``, which nests them under
    ``tool_call.function``; the earliest none at all, only the parsed ``action``.
    """
    call = event.get("tool_call")
    call_id = event.get("tool_call_id")
    name = event.get("tool_name")
    if isinstance(call, Mapping):
        function = call.get("function")
        nested = function if isinstance(function, Mapping) else {}
        arguments = call.get("arguments", nested.get("arguments"))
        call_id = call.get("id", call_id)
        name = call.get("name", nested.get("name", name))
        if arguments is None:
            raise OpenHandsEventError(
                f"ActionEvent {event.get('id')!r} has a tool call without arguments"
            )
    else:  # early SDK events keep only the parsed action: its fields are the arguments
        action = event.get("action")
        fields = (
            {k: v for k, v in action.items() if k != "kind"} if isinstance(action, Mapping) else {}
        )
        arguments = json.dumps(fields, ensure_ascii=False)
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise OpenHandsEventError(f"ActionEvent {event.get('id')!r} has no tool call id or name")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def events_to_messages(events: Sequence[Any]) -> ConvertedEvents:
    """Chat messages for one conversation's events, in event order.

    Raises :class:`OpenHandsEventError` when an entry is not an event object or an action has
    no tool call, so a malformed dump is refused rather than silently shortened.
    """
    converted = ConvertedEvents(messages=[])
    messages = converted.messages
    open_response: str | None = None  # llm_response_id of the assistant message being built
    for number, event in enumerate(events):
        if not isinstance(event, Mapping) or not isinstance(event.get("kind"), str):
            raise OpenHandsEventError(f"event {number} is not an event object")
        kind = event["kind"]
        if kind == "ActionEvent":
            response = event.get("llm_response_id")
            call = _tool_call(event)
            same_response = open_response is not None and response == open_response and messages
            if same_response:
                messages[-1]["tool_calls"].append(call)
            else:
                thought = _text(event.get("thought"))
                messages.append(
                    {"role": "assistant", "content": _cap(thought, converted), "tool_calls": [call]}
                )
                open_response = response if isinstance(response, str) else None
            continue
        open_response = None
        if kind == "SystemPromptEvent":
            prompt = event.get("system_prompt")
            text = _text(prompt.get("text") if isinstance(prompt, Mapping) else prompt)
            messages.append({"role": "system", "content": _cap(text, converted)})
        elif kind == "MessageEvent":
            message = event.get("llm_message")
            if not isinstance(message, Mapping):
                raise OpenHandsEventError(f"MessageEvent {event.get('id')!r} has no llm_message")
            role = message.get("role")
            if role not in ("user", "assistant", "system"):
                raise OpenHandsEventError(f"MessageEvent {event.get('id')!r} has role {role!r}")
            messages.append(
                {"role": role, "content": _cap(_text(message.get("content")), converted)}
            )
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            if kind == "ObservationEvent":
                observation = event.get("observation")
                text = observation_text(observation) if isinstance(observation, Mapping) else ""
            elif kind == "AgentErrorEvent":
                text = _text(event.get("error"))
            else:
                text = _text(event.get("rejection_reason"))
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(event.get("tool_call_id")),
                    "content": _cap(text, converted),
                }
            )
        else:
            # Condensation and state bookkeeping, and kinds newer SDKs may add: not a turn.
            converted.skipped[kind] = converted.skipped.get(kind, 0) + 1
    return converted
