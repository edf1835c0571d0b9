"""Cursor's agent hooks, answered by the shared hook session.

Cursor runs each command in ``.cursor/hooks.json`` (``version: 1``) as a new process per
event, with the event's JSON on stdin, and reads one JSON object from its stdout (its
hooks reference, cursor.com/docs/hooks). This module translates in both directions; the
session, its state file and the daemon are the ones the four agents share
(`judge.hooks.session`, `judge.hooks.session_files`, `judge.hooks.daemon`).

What is read (the common input of every agent hook, then each event's own fields):

- ``conversation_id`` is the session: "stable across many turns" in Cursor's words, as
  Claude Code's ``session_id`` is. ``generation_id`` changes with every user message and
  is not a session. ``workspace_roots``, ``user_email``, ``model`` and ``cursor_version``
  are never read, so nothing of them reaches the state file.
- ``preToolUse`` is a ``PreToolUse``: ``tool_name`` (``Shell``, ``Read``, ``Write``,
  ``Grep``, ``Task``, ``MCP:<name>``, ...), ``tool_input`` (an object: a shell call is
  ``{"command", "working_directory"}``) and ``tool_use_id``, as Claude Code names them.
- ``postToolUse`` is a ``PostToolUse``. Its result is ``tool_output``, which Cursor sends as
  a JSON *string* (a shell call's is ``{"exitCode", "stdout", ...}`` encoded), not Claude
  Code's ``tool_response`` object: it is decoded, so a command's exit code and output
  read as the Claude Code hook reads a Bash response.
- ``postToolUseFailure`` is a ``PostToolUseFailure`` with ``error_message`` as the error
  (a timeout says so). One with ``failure_type: "permission_denied"`` is a call that never
  ran (denied by a hook, ours included, or by the person), so it is not fed.
- ``stop`` is a ``Stop``. Cursor sends no final text and no ``stop_hook_active``; its
  ``loop_count`` (follow-ups the stop hooks already caused) stands in for the latter, and
  a ``status`` other than ``completed`` (aborted, error) is never answered with a
  follow-up.
- The per-tool events of releases before the generic ones are understood too, as the
  same calls: ``beforeShellExecution`` / ``afterShellExecution`` (``command``, and
  ``output`` after it) as a ``Shell`` call ``{"command"}``; ``beforeMCPExecution`` /
  ``afterMCPExecution`` (``tool_name``, ``tool_input`` and ``result_json`` as JSON
  strings); ``afterFileEdit`` (``file_path``, ``edits``) as a ``Write`` with no
  pre-event. Register one family or the other: both would see each call twice.

What is answered (Cursor's own output fields; nothing, ``{}``, while all is well):

- a call that repeats a loop is refused, ``{"permission": "deny"}``, with the recovery
  message as ``agent_message`` (what Cursor feeds back to the agent) and a line for the
  person as ``user_message``. Cursor's pre-tool output has no field that ends the run, so
  a stop is the same refusal with the stop's words in both messages.
- after a repeated result, the recovery message is ``additional_context`` (``postToolUse``
  only: ``postToolUseFailure`` and the per-tool after-events have no output field, so
  there the next refusal is what the agent reads).
- a ``stop`` whose own turn finds the run in a loop still warned about gets the recovery
  message as ``followup_message``, which Cursor submits as the next user message; once,
  as the Claude Code hook blocks a ``Stop`` once (and Cursor's ``loop_limit`` caps it
  too). With no final text in Cursor's ``stop``, that turn has little new to judge: the
  refusals and ``additional_context`` do most of the work.

Cursor also runs Claude Code's own ``.claude/settings.json`` hooks ("third-party hooks",
cursor.com/docs/reference/third-party-hooks), mapping ``PreToolUse``, ``PostToolUse`` and
``Stop`` onto its ``preToolUse``, ``postToolUse`` and ``stop``; it documents the names
and the answers it accepts there, not the payload. What it sends carries its common
fields (``conversation_id``, ``cursor_version``), which Claude Code never sends, so the
``claude-code`` hook hands such a payload to this module (`is_cursor_payload`) and
answers in Cursor's fields, which Cursor reads from either kind of hook: its mapping of
Claude Code's answer would show the recovery message to the person only
(``permissionDecisionReason`` becomes ``user_message``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from judge.integrations.claude_code import HookAnswer

__all__ = [
    "AGENT",
    "EVENTS",
    "LEGACY_EVENTS",
    "cursor_json",
    "is_cursor_payload",
    "to_claude_payload",
]

AGENT = "cursor"

# The Cursor events to register, and the Claude Code events they are answered as.
EVENTS: Mapping[str, str] = {
    "preToolUse": "PreToolUse",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "stop": "Stop",
}
# Per-tool events of Cursor releases before the generic tool events: understood as well.
LEGACY_EVENTS: Mapping[str, str] = {
    "beforeShellExecution": "PreToolUse",
    "afterShellExecution": "PostToolUse",
    "beforeMCPExecution": "PreToolUse",
    "afterMCPExecution": "PostToolUse",
    "afterFileEdit": "PostToolUse",
}
# Claude Code's names, as a third-party hook's payload may carry them.
_CLAUDE_NAMES = frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop"})
# Fields of Cursor's common hook input that Claude Code never sends.
_CURSOR_FIELDS = ("conversation_id", "cursor_version")
# The tool name a shell command gets, as Cursor's generic events name its shell tool.
SHELL_TOOL = "Shell"
# The tool name an edit reported by afterFileEdit gets (Cursor's own name for edits).
EDIT_TOOL = "Write"
# The key of preToolUse's shell input that its postToolUse input lacks.
WORKING_DIRECTORY = "working_directory"
# What an edit's result reads as: afterFileEdit reports the edit, not a tool's output.
EDITED = "(file edited)"


def _input_error(message: str) -> Exception:
    from judge.integrations.claude_code import HookInputError

    return HookInputError(message)


def is_cursor_payload(payload: Any) -> bool:
    """Whether ``payload`` is Cursor's (its common fields), whatever its event's name."""
    return isinstance(payload, Mapping) and any(
        isinstance(payload.get(name), str) for name in _CURSOR_FIELDS
    )


def _event_name(payload: Mapping[str, Any]) -> str:
    name = payload.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise _input_error("Cursor hook input has no 'hook_event_name'")
    return name


def _decoded(value: Any) -> Any:
    """A field Cursor sends as JSON text (``tool_output``, MCP ``tool_input`` and
    ``result_json``) as the value it encodes; text that is not JSON stays text."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _command(payload: Mapping[str, Any]) -> str:
    command = payload.get("command")
    if not isinstance(command, str) or not command:
        kind = type(command).__name__
        raise _input_error(f"'command' must be a non-empty string, got {kind}")
    return command


def to_claude_payload(payload: Any) -> Any:
    """Cursor's hook payload as the Claude Code payload it is answered as.

    Anything not a mapping goes through unchanged, for the Claude Code hook's own error;
    an event loop-judge does not answer keeps its name (no answer). Raises
    `judge.integrations.claude_code.HookInputError` for a Cursor event without its
    session or a shell event without its command."""
    if not isinstance(payload, Mapping):
        return payload
    name = _event_name(payload)
    session = payload.get("conversation_id")
    if session is None:
        session = payload.get("session_id")  # sessionStart's name for the same id
    if not isinstance(session, str) or not session:
        raise _input_error(
            f"'conversation_id' must be a non-empty string, got {type(session).__name__}"
        )
    claude = (
        EVENTS.get(name) or LEGACY_EVENTS.get(name) or (name if name in _CLAUDE_NAMES else None)
    )
    out: dict[str, Any] = {"hook_event_name": claude or name, "session_id": session}
    if claude is None:
        return out
    if name in ("beforeShellExecution", "afterShellExecution"):
        out["tool_name"] = SHELL_TOOL
        # The command alone: afterShellExecution has no cwd, and the call before and
        # after must read as the same call.
        out["tool_input"] = {"command": _command(payload)}
        if name == "afterShellExecution":
            output = payload.get("output")
            out["tool_response"] = output if isinstance(output, str) else _decoded(output)
        return out
    if name == "afterFileEdit":
        out["tool_name"] = EDIT_TOOL
        out["tool_input"] = {"file_path": payload.get("file_path"), "edits": payload.get("edits")}
        out["tool_response"] = EDITED
        return out
    if claude == "Stop":
        loop_count = payload.get("loop_count", 0)
        status = payload.get("status", "completed")
        # A follow-up is asked for only once per session, and never after an abort or
        # an error (the person stopped it, or Cursor could not go on).
        again = isinstance(loop_count, int) and loop_count > 0
        out["stop_hook_active"] = bool(
            payload.get("stop_hook_active") is True or again or status != "completed"
        )
        return out
    out["tool_name"] = payload.get("tool_name")
    tool_input = _decoded(payload.get("tool_input"))
    if isinstance(tool_input, Mapping) and WORKING_DIRECTORY in tool_input:
        # preToolUse's shell input names the directory, postToolUse's does not (the
        # reference's examples): without it, the call before and after is one call.
        tool_input = {k: v for k, v in tool_input.items() if k != WORKING_DIRECTORY}
    out["tool_input"] = tool_input
    if isinstance(payload.get("tool_use_id"), str):
        out["tool_use_id"] = payload["tool_use_id"]
    if claude == "PostToolUse":
        if "result_json" in payload:  # afterMCPExecution
            out["tool_response"] = _decoded(payload.get("result_json"))
        elif "tool_output" in payload:
            out["tool_response"] = _decoded(payload.get("tool_output"))
        else:
            out["tool_response"] = payload.get("tool_response")
    elif claude == "PostToolUseFailure":
        if payload.get("failure_type") == "permission_denied":
            # Never ran: no result to feed (a denial of ours is already recorded).
            return {"hook_event_name": name, "session_id": session}
        error = payload.get("error_message", payload.get("error"))
        text = error if isinstance(error, str) and error else "the tool failed"
        if payload.get("failure_type") == "timeout" and "timed out" not in text.lower():
            text = f"timed out: {text}"
        out["error"] = text
    return out


def cursor_json(answer: HookAnswer, event: str | None) -> dict[str, Any]:
    """The hook's stdout JSON for Cursor (``{}`` when there is nothing to say); ``event``
    is the event's name as Cursor sent it."""
    out: dict[str, Any] = {}
    if answer.deny_reason is not None:
        out["permission"] = "deny"
        out["agent_message"] = answer.deny_reason
        note = answer.stop_reason if answer.stop_reason is not None else answer.system_message
        if note is not None:
            out["user_message"] = note
    elif answer.block_reason is not None:
        out["followup_message"] = answer.block_reason
    elif answer.context is not None and event in ("postToolUse", "PostToolUse"):
        out["additional_context"] = answer.context
    return out
