"""Claude Code's hooks: its events read, its answers written, its transcript read.

This module is Claude Code's side of the protocol: `HookEvent` (the fields loop-judge
reads of a payload), `HookAnswer` (what to answer, in Claude Code's output fields) and
the session transcript (`read_transcript`, `TranscriptFeed`). Cursor, Gemini CLI and
Codex translate their events into these and their answers out of them. What to answer
is decided by the agent-neutral hook session (`judge.hooks.session.HookSession`), kept
between invocations in a file per session (`judge.hooks.session_files`); one invocation
runs in `judge.hooks.invocation`. The command (``loop-judge hook claude-code``,
`judge.cli.hook`) and the Claude Agent SDK callbacks (`judge.integrations.claude_agent_sdk`)
are two front-ends over the same session. The names that moved there are still
importable from here, loaded on first use (`__getattr__`).

What is answered (field names as in Claude Code's hooks reference, and in the SDK's own
``types.py``, which mirrors it):

- ``PreToolUse``: ``tracker.check_call`` (a preflight, no turn counted). A call that would
  be a loop is denied (``permissionDecision: "deny"``) with the recovery message as the
  ``permissionDecisionReason``, which Claude reads. The tracker records the denial as a
  refusal, so the same call denied again climbs the configured ladder with each rung's
  own text (the same texts a turn's verdict would carry), and at ``stop`` the run is
  ended (``continue: false``).
- ``PostToolUse`` / ``PostToolUseFailure``: one ``turn_started``. On a loop verdict the
  recovery message goes to Claude as ``additionalContext``; at ``stop``, ``continue: false``.
- ``Stop`` / ``SubagentStop``: one ``turn_started``; only when the run ends in a loop that
  still gets a warning is the stop blocked (``decision: "block"`` with the recovery message
  as the ``reason``), and never twice in a row (``stop_hook_active``, and our own record).
- Anything else, and every non-loop: nothing at all, so Claude Code goes on as if no hook ran.

Tool results come from the hook payloads (``tool_response``, ``error``) because the
transcript is written asynchronously and can lag behind the hook; the transcript supplies
everything else (the person's prompts, the assistant's text, calls no hook saw). Each
tool call is fed as its own assistant message followed by its result, so parallel calls
that Claude Code writes as separate transcript lines never lose their pairing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from judge.errors import LoopJudgeError
from judge.hooks.messages import (
    REMEMBERED_IDS,
    call_message,
    clip,
    digest,
    remember,
    result_message,
)
from judge.verdict import Action, Verdict

if TYPE_CHECKING:
    from judge.hooks.invocation import EXIT_HOOK as EXIT_HOOK
    from judge.hooks.invocation import answer_raw as answer_raw
    from judge.hooks.invocation import answer_stdin as answer_stdin
    from judge.hooks.invocation import handle_payload as handle_payload
    from judge.hooks.invocation import hook_config as hook_config
    from judge.hooks.session import HookSession as HookSession
    from judge.hooks.session import SessionState as SessionState
    from judge.hooks.session_cache import SessionCache as SessionCache
    from judge.hooks.session_files import DEFAULT_STATE_DIR_ENV as DEFAULT_STATE_DIR_ENV
    from judge.hooks.session_files import HookSessionFiles as HookSessionFiles
    from judge.hooks.session_files import default_state_dir as default_state_dir

__all__ = [
    "DEFAULT_STATE_DIR_ENV",
    "EXIT_HOOK",
    "HookAnswer",
    "HookEvent",
    "HookInputError",
    "HookSession",
    "HookSessionFiles",
    "PendingCall",
    "SessionCache",
    "SessionState",
    "TranscriptCursor",
    "TranscriptFeed",
    "answer_raw",
    "answer_stdin",
    "default_state_dir",
    "handle_payload",
    "hook_config",
    "main",
    "read_transcript",
]

# The hook machinery's public names, importable from here as from their modules in
# `judge.hooks`, and the module each is loaded from on first use: importing this module
# (as Cursor's, Gemini CLI's and Codex's translators do for `HookAnswer`, and the session
# itself does) loads none of that machinery.
_MOVED = {
    "EXIT_HOOK": "judge.hooks.invocation",
    "answer_raw": "judge.hooks.invocation",
    "answer_stdin": "judge.hooks.invocation",
    "handle_payload": "judge.hooks.invocation",
    "hook_config": "judge.hooks.invocation",
    "HookSession": "judge.hooks.session",
    "SessionState": "judge.hooks.session",
    "SessionCache": "judge.hooks.session_cache",
    "DEFAULT_STATE_DIR_ENV": "judge.hooks.session_files",
    "HookSessionFiles": "judge.hooks.session_files",
    "default_state_dir": "judge.hooks.session_files",
}

# Events Claude Code sends (hooks reference; the SDK's HookEvent literal).
PRE_TOOL_USE = "PreToolUse"
POST_TOOL_USE = "PostToolUse"
POST_TOOL_USE_FAILURE = "PostToolUseFailure"
STOP = "Stop"
SUBAGENT_STOP = "SubagentStop"
_TOOL_EVENTS = frozenset({PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE})
STOP_EVENTS = frozenset({STOP, SUBAGENT_STOP})

# At most this much new transcript is read per invocation: a resumed multi-megabyte
# session is read from its last 8 MiB the first time, never in full on one tool call.
MAX_READ_BYTES = 8 * 1024 * 1024


def __getattr__(name: str) -> Any:
    """A name moved to `judge.hooks` (`_MOVED`), imported from its module on first use."""
    home = _MOVED.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # found directly from now on
    return value


class HookInputError(LoopJudgeError, ValueError):
    """The hook event on stdin is not one Claude Code sends: names what is wrong."""


# -- the event ----------------------------------------------------------------------------


@dataclass(frozen=True)
class HookEvent:
    """One hook event, validated: the fields loop-judge reads, nothing else."""

    name: str
    session_id: str
    transcript_path: str | None = None
    tool_name: str | None = None
    tool_input: Any = None
    tool_use_id: str | None = None
    tool_response: Any = None
    error: str | None = None
    stop_hook_active: bool = False
    last_assistant_message: str | None = None
    agent_id: str | None = None

    @classmethod
    def parse(cls, payload: Any) -> HookEvent:
        """Validate a decoded payload; `HookInputError` names the field that is wrong."""
        if not isinstance(payload, Mapping):
            raise HookInputError(f"hook input must be a JSON object, got {type(payload).__name__}")
        name = _text_field(payload, "hook_event_name", required=True)
        session = _text_field(payload, "session_id", required=True)
        assert name is not None and session is not None
        tool_name = _text_field(payload, "tool_name", required=name in _TOOL_EVENTS)
        stop_active = payload.get("stop_hook_active", False)
        if not isinstance(stop_active, bool):
            raise HookInputError(
                f"stop_hook_active must be true or false, got {type(stop_active).__name__}"
            )
        return cls(
            name=name,
            session_id=session,
            transcript_path=_text_field(payload, "transcript_path"),
            tool_name=tool_name,
            tool_input=payload.get("tool_input") if payload.get("tool_input") is not None else {},
            tool_use_id=_text_field(payload, "tool_use_id"),
            tool_response=payload.get("tool_response"),
            error=_text_field(payload, "error"),
            stop_hook_active=stop_active,
            last_assistant_message=_text_field(payload, "last_assistant_message"),
            agent_id=_text_field(payload, "agent_id"),
        )

    @property
    def session_key(self) -> str:
        """The tracker this event belongs to: a sub-agent's calls are its own loop."""
        return self.session_id if not self.agent_id else f"{self.session_id}.{self.agent_id}"


def _text_field(payload: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = payload.get(name)
    if value is None:
        if required:
            raise HookInputError(f"hook input has no {name!r}")
        return None
    if not isinstance(value, str) or (required and not value):
        # The type only, never the value: an error line reaches stderr and logs, and a
        # field of the payload can quote anything the agent read.
        raise HookInputError(f"{name!r} must be a non-empty string, got {type(value).__name__}")
    return value


# -- the answer ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HookAnswer:
    """What to tell Claude Code; empty (falsy) means "no opinion": print nothing.

    ``deny_reason`` (PreToolUse), ``context`` (PostToolUse), ``block_reason`` (Stop) reach
    the model; ``stop_reason`` ends the run and, like ``system_message``, is shown to the
    person. ``action`` is what the answer does (a repeated denial climbs the ladder past
    its verdict's own action); ``verdict`` is the verdict behind it, for callers that log it.
    """

    event: str
    action: Action = Action.CONTINUE
    deny_reason: str | None = None
    context: str | None = None
    block_reason: str | None = None
    stop_reason: str | None = None
    system_message: str | None = None
    verdict: Verdict | None = field(default=None, compare=False)

    def __bool__(self) -> bool:
        return any(
            (self.deny_reason, self.context, self.block_reason, self.stop_reason,
             self.system_message)
        )  # fmt: skip

    def to_json(self, *, continue_key: str = "continue") -> dict[str, Any]:
        """The hook's JSON output (empty when there is nothing to say).

        ``continue_key`` is ``"continue_"`` for the Python SDK, which renames the keyword.
        """
        out: dict[str, Any] = {}
        if self.stop_reason is not None:
            out[continue_key] = False
            out["stopReason"] = self.stop_reason
        if self.system_message is not None:
            out["systemMessage"] = self.system_message
        if self.block_reason is not None:
            out["decision"] = "block"
            out["reason"] = self.block_reason
        if self.deny_reason is not None:
            out["hookSpecificOutput"] = {
                "hookEventName": self.event,
                "permissionDecision": "deny",
                "permissionDecisionReason": self.deny_reason,
            }
        elif self.context is not None:
            out["hookSpecificOutput"] = {
                "hookEventName": self.event,
                "additionalContext": self.context,
            }
        return out


# -- where reading the transcript stopped ------------------------------------------------


class TranscriptCursor(BaseModel):
    """Where reading the transcript stopped: the file (path and identity) and byte offset."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    device: int = 0
    inode: int = 0
    offset: int = 0


class PendingCall(BaseModel):
    """A tool call read from the transcript whose result has not been fed yet."""

    model_config = ConfigDict(extra="forbid")

    name: str
    input: Any = None


# -- reading the transcript ---------------------------------------------------------------


def read_transcript(path: str, cursor: TranscriptCursor) -> tuple[list[Any], TranscriptCursor]:
    """The complete JSON lines added to ``path`` since ``cursor``, and the new cursor.

    A file that is missing gives nothing. A file replaced (another inode) or truncated
    (shorter than the offset) is read again from its start; the entries already read are
    skipped by their uuid. A last line still being written is left for the next call.
    Lines that are not JSON are skipped.
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, after fstat
    except OSError:
        return [], cursor
    with handle:
        info = os.fstat(handle.fileno())
        same = (cursor.path, cursor.device, cursor.inode) == (path, info.st_dev, info.st_ino)
        offset = cursor.offset if same and info.st_size >= cursor.offset else 0
        skip_partial = False
        if info.st_size - offset > MAX_READ_BYTES:
            offset = info.st_size - MAX_READ_BYTES
            skip_partial = True  # the first line read is the tail of one cut in half
        handle.seek(offset)
        data = handle.read(MAX_READ_BYTES)
    end = data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")
    if skip_partial and lines:
        lines = lines[1:]
    entries = []
    for line in lines:
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    new_cursor = TranscriptCursor(
        path=path, device=info.st_dev, inode=info.st_ino, offset=offset + end
    )
    return entries, new_cursor


# -- the transcript as tracker messages ---------------------------------------------------


class TranscriptFeed:
    """Claude Code's transcript entries as tracker messages, for one hook session.

    The transcript supplies what no hook payload carries (the person's prompts, the
    assistant's text, calls no hook saw); each tool call is fed as its own assistant
    message followed by its result, so parallel calls that Claude Code writes as separate
    transcript lines never lose their pairing. ``state`` returns the session's saved
    state each time it is called (a session restored from another version replaces its
    state mid-event); ``redact`` is how a call's input may be kept in the state file.
    """

    def __init__(self, state: Callable[[], SessionState], redact: Callable[[Any], Any]) -> None:
        self._current_state = state
        self._redacted = redact

    @property
    def _state(self) -> SessionState:
        return self._current_state()

    def read(self, event: HookEvent, *, current: str | None) -> list[dict[str, Any]]:
        """The transcript's new entries as tracker messages (see the class docstring).

        ``current``: the tool_use id whose result the event itself carries; the
        transcript's copy of that result is ignored so results always come from one source.
        """
        path = event.transcript_path
        if not path or event.agent_id:
            return []  # a sub-agent's calls arrive in its own hooks; its text is not ours
        entries, cursor = read_transcript(path, self._state.transcript)
        self._state.transcript = cursor
        out: list[dict[str, Any]] = []
        for entry in entries:
            self._convert(entry, out, current)
        return out

    def _convert(self, entry: Any, out: list[dict[str, Any]], current: str | None) -> None:
        if not isinstance(entry, Mapping) or entry.get("type") not in ("user", "assistant"):
            return  # summaries, snapshots, system notes: not the conversation
        if entry.get("isSidechain") or entry.get("isMeta") or entry.get("isCompactSummary"):
            return  # a sub-agent's, injected, or a compaction's rewrite: not this agent's turn
        uuid = entry.get("uuid")
        if isinstance(uuid, str):
            if uuid in self._state.seen_uuids:
                return
            remember(self._state.seen_uuids, uuid)
        message = entry.get("message")
        if not isinstance(message, Mapping):
            return
        content = message.get("content")
        if entry["type"] == "assistant":
            self._assistant(content, out)
        else:
            self._user(content, out, current)

    def _assistant(self, content: Any, out: list[dict[str, Any]]) -> None:
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            return
        texts = []
        for block in content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str) and block["text"].strip():
                texts.append(block["text"])
            elif kind == "tool_use":
                call_id, name = block.get("id"), block.get("name")
                if not isinstance(call_id, str) or not isinstance(name, str) or not name:
                    continue
                if call_id not in self._state.done_ids:
                    pending = self._state.pending
                    kept = self._redacted(block.get("input"))
                    pending[call_id] = PendingCall(name=name, input=kept)
                    for stale in list(pending)[:-REMEMBERED_IDS]:
                        del pending[stale]  # results never came (denied elsewhere, lost)
        if texts:
            text = clip("\n".join(texts))
            echo = digest(text)
            if echo in self._state.echoed:
                self._state.echoed.remove(echo)  # fed already, from last_assistant_message
                return
            out.append({"role": "assistant", "content": text})

    def _user(self, content: Any, out: list[dict[str, Any]], current: str | None) -> None:
        if isinstance(content, str):
            if content.strip():
                out.append({"role": "user", "content": clip(content)})
            return
        if not isinstance(content, list):
            return
        texts = []
        for block in content:
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "tool_result":
                call_id = block.get("tool_use_id")
                if not isinstance(call_id, str) or call_id == current:
                    continue
                if call_id in self._state.done_ids:
                    continue
                call = self._state.pending.pop(call_id, None)
                if call is None:
                    continue  # its call was never read (before our window): nothing to pair
                out.append(call_message(call_id, call.name, call.input))
                out.append(
                    result_message(call_id, block.get("content"), block.get("is_error") is True)
                )
                remember(self._state.done_ids, call_id)
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        if texts and "".join(texts).strip():
            out.append({"role": "user", "content": clip("\n".join(texts))})


# -- the command --------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``loop-judge hook claude-code`` (also ``python -m judge.integrations.claude_code``,
    which skips the rest of the command line's imports): read one event from stdin, write
    the answer to stdout. Always returns 0: whatever goes wrong inside (an unreadable
    payload, a locked or unwritable state file, a bug) is one line on stderr and no
    answer, so Claude Code carries on as if no hook ran."""
    import argparse

    parser = argparse.ArgumentParser(prog="loop-judge hook claude-code")
    parser.add_argument("--state-dir", default=None)
    args = parser.parse_args(argv)
    from judge.hooks.invocation import answer_stdin

    return answer_stdin(state_dir=args.state_dir)


if __name__ == "__main__":
    import sys

    sys.exit(main())
