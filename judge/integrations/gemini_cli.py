"""Gemini CLI's hooks, answered by the shared hook session.

Gemini CLI runs a hook command per event with the event's JSON on stdin (its hooks
reference, docs/hooks/reference.md in google-gemini/gemini-cli). The events loop-judge
answers map one to one onto Claude Code's, so this module only translates:

- the payload (`to_claude_payload`): ``BeforeTool`` is a ``PreToolUse``; ``AfterTool`` a
  ``PostToolUse``, or a ``PostToolUseFailure`` when its ``tool_response`` carries an
  ``error``; ``AfterAgent`` a ``Stop`` (``prompt_response`` is the last assistant message).
  Gemini's transcript is not Claude Code's JSONL, so it is not read: each event carries
  the call and its result, which is what the tracker needs.
- the answer (`gemini_json`): a refused call is ``{"decision": "deny", "reason": ...}``
  (the reason reaches the model as the tool's error, the turn goes on), a repeated result
  adds ``hookSpecificOutput.additionalContext`` to it, a Stop that ends in a loop is a
  ``deny`` of the final response (the reason is the model's next prompt), and a stop ends
  the loop with ``continue: false``. Always exit 0 with JSON: the reference prefers it
  to exit 2, and a hook must never break the agent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.integrations.claude_code import HookAnswer

__all__ = ["AGENT", "EVENTS", "gemini_json", "to_claude_payload"]

AGENT = "gemini"

# Gemini CLI's event names and the Claude Code events they are answered as.
EVENTS: Mapping[str, str] = {
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "AfterAgent": "Stop",
}


def _failure(response: Any) -> str | None:
    """The error text of a tool response ``{"llmContent", "returnDisplay", "error"}``, or
    None for a success. The error is an object with a message, or a string."""
    if not isinstance(response, Mapping):
        return None
    error = response.get("error")
    if error is None or error is False or error == "":
        return None
    if isinstance(error, Mapping):
        message = error.get("message")
        text = message if isinstance(message, str) and message else str(dict(error))
    else:
        text = str(error)
    # The tool's own output says more than the error line alone (a shell's stderr, its
    # exit code); both are what the model read.
    content = response.get("llmContent")
    if isinstance(content, str) and content.strip() and content.strip() != text.strip():
        return f"{text}\n{content}"
    return text


def _result(response: Any) -> Any:
    """What the model read of a successful tool response: its ``llmContent``."""
    if isinstance(response, Mapping) and "llmContent" in response:
        return response["llmContent"]
    return response


def to_claude_payload(payload: Any) -> Any:
    """Gemini CLI's hook payload as the Claude Code payload it is answered as. Anything
    not a mapping goes through unchanged, for the same error the Claude Code hook gives;
    an event loop-judge does not answer keeps its name (no answer)."""
    if not isinstance(payload, Mapping):
        return payload
    name = payload.get("hook_event_name")
    out: dict[str, Any] = {
        "hook_event_name": EVENTS.get(name, name) if isinstance(name, str) else name,
        "session_id": payload.get("session_id"),
    }
    if name in ("BeforeTool", "AfterTool"):
        out["tool_name"] = payload.get("tool_name")
        out["tool_input"] = payload.get("tool_input")
    if name == "AfterTool":
        response = payload.get("tool_response")
        error = _failure(response)
        if error is not None:
            out["hook_event_name"] = "PostToolUseFailure"
            out["error"] = error
        else:
            out["tool_response"] = _result(response)
    elif name == "AfterAgent":
        stop_active = payload.get("stop_hook_active", False)
        out["stop_hook_active"] = stop_active
        response = payload.get("prompt_response")
        if isinstance(response, str):
            out["last_assistant_message"] = response
    return out


def gemini_json(answer: HookAnswer, event: str | None) -> dict[str, Any]:
    """The hook's stdout JSON for Gemini CLI (``event`` is Gemini's event name)."""
    out: dict[str, Any] = {}
    if answer.stop_reason is not None:
        out["continue"] = False
        out["stopReason"] = answer.stop_reason
    if answer.system_message is not None:
        out["systemMessage"] = answer.system_message
    reason = answer.deny_reason if answer.deny_reason is not None else answer.block_reason
    if reason is not None:
        out["decision"] = "deny"
        out["reason"] = reason
    if answer.context is not None:
        out["hookSpecificOutput"] = {
            "hookEventName": event or "AfterTool",
            "additionalContext": answer.context,
        }
    return out
