"""Claude Code hooks: what loop-judge answers to a hook event, and where a session lives.

Claude Code runs a hook as a new process for each event, so the tracker cannot stay in
memory: `HookSession` is one session's tracker plus what the hook needs to feed it (the
transcript's byte offset, tool calls waiting for their result, calls already fed), and
`HookSessionFiles` keeps it in a file per session between invocations, under a lock, replaced
atomically. `HookSession.answer` decides what to answer to one event; the command
(``loop-judge hook claude-code``, `judge.cli.hook`) and the Claude Agent SDK callbacks
(`judge.integrations.claude_agent_sdk`) are two front-ends over it.

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

import contextlib
import json
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from hashlib import blake2b
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judge.errors import LoopJudgeError, StateError
from judge.hooks import client as _client
from judge.state import TrackerState
from judge.verdict import Action, Verdict

if TYPE_CHECKING:
    from judge.config import TrackerConfig
    from judge.llm.redaction import Redactor
    from judge.response.telemetry import Telemetry
    from judge.tracker import LoopTracker

__all__ = [
    "DEFAULT_STATE_DIR_ENV",
    "EXIT_HOOK",
    "HookAnswer",
    "HookEvent",
    "HookInputError",
    "HookSession",
    "HookSessionFiles",
    "SessionCache",
    "SessionState",
    "answer_raw",
    "answer_stdin",
    "default_state_dir",
    "handle_payload",
    "hook_config",
    "main",
]

# The variable that moves the state directory (the command's --state-dir wins over it).
DEFAULT_STATE_DIR_ENV = _client.STATE_DIR_ENV
# Events Claude Code sends (hooks reference; the SDK's HookEvent literal).
PRE_TOOL_USE = "PreToolUse"
POST_TOOL_USE = "PostToolUse"
POST_TOOL_USE_FAILURE = "PostToolUseFailure"
STOP = "Stop"
SUBAGENT_STOP = "SubagentStop"
_TOOL_EVENTS = frozenset({PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE})
_STOP_EVENTS = frozenset({STOP, SUBAGENT_STOP})

# The only exit code: 0 is "success" to Claude Code, which then reads stdout as the
# hook's JSON; 2 would block with stderr as the reason, anything else shows an error.
EXIT_HOOK = 0
# Hook payloads are kilobytes (a Write's content at most a file); a bigger stdin is not a
# hook event, and reading it whole would cost the agent time for nothing.
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
# How long a hook waits for another hook process of the same session to release the
# lock: half of Claude Code's default 60 s per hook command. A parallel tool batch fires
# its hooks at once; each holds the lock for milliseconds, seconds only while a judge
# check runs, so a wait this long means something is stuck, and the hook gives up.
LOCK_WAIT_S = 30.0
LOCK_POLL_S = 0.005
# At most this much new transcript is read per invocation: a resumed multi-megabyte
# session is read from its last 8 MiB the first time, never in full on one tool call.
MAX_READ_BYTES = 8 * 1024 * 1024
# Tool results and texts longer than this are cut (a digest of the whole keeps two
# different long results different), so a 5 MB file read does not go into the state file.
MAX_TEXT_CHARS = 32_000
# Ids and transcript entry uuids remembered to skip what was already fed: far more than
# the calls in flight at once, or the entries a rotated transcript can repeat.
REMEMBERED_IDS = 512
# A session not touched for a week is forgotten (its file removed at the next Stop).
STATE_TTL_S = 7 * 24 * 3600
# Session ids become file names: anything else is hashed.
_SAFE_ID = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# The result Claude sees for a call we denied; the call never ran, so it is not fed.
_STOP_PREFIX = "loop-judge stopped the agent: "


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


# -- the session's saved state ------------------------------------------------------------


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


class SessionState(BaseModel):
    """Everything one session's hook remembers between invocations (the state file).

    It quotes the conversation (the tracker's recent messages, the last message fed,
    pending calls' inputs), all of it redacted as the tracker's own saved state is (with
    ``redact_secrets`` on, the default); the file is also created readable by its owner
    only.
    """

    model_config = ConfigDict(extra="forbid")

    tracker: TrackerState | None = None
    transcript: TranscriptCursor = Field(default_factory=TranscriptCursor)
    fed: int = Field(default=0, description="messages handed to the tracker so far")
    last_fed: Any = Field(default=None, description="the last of them, as handed over")
    pending: dict[str, PendingCall] = Field(default_factory=dict)
    done_ids: list[str] = Field(default_factory=list, description="tool_use ids fed or denied")
    seen_uuids: list[str] = Field(default_factory=list, description="transcript entries read")
    echoed: list[str] = Field(
        default_factory=list, description="digests of last_assistant_message texts fed early"
    )
    stop_blocked: bool = False
    updated: float = 0.0


# -- feeding the tracker ------------------------------------------------------------------


class _TailHistory(Sequence[Any]):
    """The conversation as the tracker's cursor expects it, without keeping all of it.

    The tracker reads only messages past the ones it has seen, after checking that the
    last one it saw is still in place; so the history handed over is the count already
    fed, the last of them, and the new ones. Older positions are never read unless the
    tracker decides the history was rewritten, and then they read as empty system text.
    """

    def __init__(self, fed: int, last: Any, new: list[dict[str, Any]]) -> None:
        self._fed, self._last, self._new = fed, last, new

    def __len__(self) -> int:
        return self._fed + len(self._new)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index >= self._fed:
            return self._new[index - self._fed]
        if index == self._fed - 1 and self._last is not None:
            return self._last
        return {"role": "system", "content": ""}


def _clip(text: str) -> str:
    if len(text) <= MAX_TEXT_CHARS:
        return text
    digest = blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()
    return f"{text[:MAX_TEXT_CHARS]}\n[... {len(text)} characters in all, digest {digest}]"


def _digest(text: str) -> str:
    return blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


# What a command that printed nothing is quoted as.
NO_OUTPUT = "(no output)"
# Keys of a command's exit status in a tool response, as shells and agents name it.
_EXIT_KEYS = ("exit_code", "exitCode", "returncode", "return_code")


def _command_text(response: Mapping[str, Any]) -> str:
    """A command's response (Bash answers ``{"stdout", "stderr", "interrupted", ...}``)
    as the text the model read: its exit status when given, then stdout and stderr. The
    raw mapping would put ``{"interrupted": false, "isImage": false, ...`` into every
    "already tried" line of a recovery message, and hide an error's first line."""
    lines = []
    code = next((response[k] for k in _EXIT_KEYS if isinstance(response.get(k), int)), None)
    if code is not None:
        lines.append(f"exit code {code}")
    if response.get("interrupted") is True:
        lines.append("(interrupted)")
    for key in ("stderr", "stdout") if code else ("stdout", "stderr"):
        text = response.get(key)
        if isinstance(text, str) and text.strip():
            lines.append(text.strip("\n"))
    # A silent command: said in words, so it reads as the data result it was (the raw
    # mapping did), not as an empty acknowledgement.
    return "\n".join(lines) or NO_OUTPUT


def _response_text(response: Any) -> str:
    """A tool's response as text the detectors compare: strings as they are, a command's
    output as its text (`_command_text`), anything else as canonical JSON."""
    if isinstance(response, str):
        return _clip(response)
    if isinstance(response, Mapping) and isinstance(response.get("stdout"), str):
        return _clip(_command_text(response))
    try:
        return _clip(json.dumps(response, sort_keys=True, ensure_ascii=False, default=str))
    except (TypeError, ValueError, RecursionError):
        return _clip(repr(response))


def _call_message(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
    return {"role": "assistant", "content": [block]}


def _result_message(call_id: str, content: Any, is_error: bool) -> dict[str, Any]:
    text = content if isinstance(content, str) else _block_text(content)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": _clip(text)}
    if is_error:
        block["is_error"] = True
    return {"role": "user", "content": [block]}


def _block_text(content: Any) -> str:
    """Text of a transcript tool_result's content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, Mapping):
                # An image or document: told apart by a digest of its data, like history.py.
                parts.append(f"[{part.get('type', 'part')} {_digest(_response_text(part))}]")
        return "\n".join(parts)
    return _response_text(content)


def _remember(items: list[str], item: str) -> None:
    items.append(item)
    del items[:-REMEMBERED_IDS]


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


# -- the session --------------------------------------------------------------------------


class HookSession:
    """One Claude Code session as loop-judge follows it, across hook invocations.

    Build it from a saved `SessionState` (or none), call `answer` for each event, and save
    `state` afterwards; the SDK front-end keeps the object itself instead.
    """

    def __init__(
        self,
        config: TrackerConfig | None = None,
        state: SessionState | None = None,
        *,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._config = config
        self._telemetry = telemetry
        self._state = state if state is not None else SessionState()  # ours from now on
        self._tracker: LoopTracker | None = None
        # What redacts the state file's messages (`_redaction`), once built.
        self._redaction_built: tuple[tuple[Redactor, Callable[[Any], Any]] | None] | None = None

    @property
    def tracker(self) -> LoopTracker:
        """The session's tracker, restored from the saved state on first use."""
        if self._tracker is None:
            from judge.config import TrackerConfig
            from judge.tracker import LoopTracker

            config = self._config if self._config is not None else TrackerConfig()
            self._config = config
            saved: TrackerState | dict[str, Any] | None = self._state.tracker
            if saved is None:
                # A new session continues from an empty tracker's state: it reads the
                # conversation redacted from the first message on, as every later hook
                # call's restore of it will (judge/state.py).
                saved = LoopTracker(config, telemetry=self._telemetry).state.model_dump()
            try:
                self._tracker = LoopTracker.from_state(config, saved, telemetry=self._telemetry)
            except (StateError, ValidationError):
                # From another loop-judge version: follow the session afresh.
                self._state = SessionState(transcript=self._state.transcript)
                fresh = LoopTracker(config, telemetry=self._telemetry).state.model_dump()
                self._tracker = LoopTracker.from_state(config, fresh, telemetry=self._telemetry)
        return self._tracker

    @property
    def state(self) -> SessionState:
        """What to save: the tracker's state and the hook's own bookkeeping."""
        state = self._state.model_copy()
        if self._tracker is not None:
            state.tracker = self._tracker.state
        state.updated = time.time()
        return state

    async def answer(self, event: HookEvent) -> HookAnswer:
        """What to answer to one event (an empty answer when all is well)."""
        if event.name == PRE_TOOL_USE:
            return self.preflight(event)
        if event.name in (POST_TOOL_USE, POST_TOOL_USE_FAILURE):
            return await self._post_tool_use(event)
        if event.name in _STOP_EVENTS:
            return await self._stop(event)
        return HookAnswer(event.name)

    # -- the events ---------------------------------------------------------------------

    def preflight(self, event: HookEvent) -> HookAnswer:
        """The answer to a PreToolUse event; synchronous, as it counts no turn."""
        assert event.tool_name is not None
        verdict = self.tracker.check_call(event.tool_name, event.tool_input)
        if not verdict:
            return HookAnswer(event.name)
        # A denied call never runs: it is not fed (there is no result), and its transcript
        # entries are skipped. The tracker recorded the denial as a refusal, so the same
        # call denied again climbs its ladder, with the texts of each rung.
        if event.tool_use_id is not None:
            _remember(self._state.done_ids, event.tool_use_id)
        action = verdict.action
        reason = verdict.recovery_message or verdict.summary or "this call repeats a loop"
        summary = verdict.summary or "a repeated call"
        if action is Action.STOP:
            return HookAnswer(
                event.name,
                action,
                deny_reason=reason,
                stop_reason=f"{_STOP_PREFIX}{summary}",
                verdict=verdict,
            )
        if action is Action.ASK_USER:
            reason = f"{reason}\nMake no more tool calls: ask the user how to go on."
        return HookAnswer(
            event.name,
            action,
            deny_reason=reason,
            system_message=f"loop-judge denied {event.tool_name}: {summary}",
            verdict=verdict,
        )

    async def _post_tool_use(self, event: HookEvent) -> HookAnswer:
        assert event.tool_name is not None
        failed = event.name == POST_TOOL_USE_FAILURE
        result = event.error if failed else event.tool_response
        new = self._read_transcript(event, current=event.tool_use_id)
        call_id = event.tool_use_id or f"hook-{self._state.fed + len(new)}"
        if call_id not in self._state.done_ids:
            self._state.pending.pop(call_id, None)
            new.append(_call_message(call_id, event.tool_name, event.tool_input))
            new.append(_result_message(call_id, _response_text(result), failed))
            _remember(self._state.done_ids, call_id)
        verdict = await self._turn(new)
        if not verdict:
            return HookAnswer(event.name, verdict=verdict)
        summary = verdict.summary or "a loop"
        if verdict.action is Action.STOP:
            return HookAnswer(
                event.name,
                verdict.action,
                context=verdict.recovery_message,
                stop_reason=f"{_STOP_PREFIX}{summary}",
                verdict=verdict,
            )
        return HookAnswer(
            event.name,
            verdict.action,
            context=verdict.recovery_message or summary,
            system_message=f"loop-judge: {summary}",
            verdict=verdict,
        )

    async def _stop(self, event: HookEvent) -> HookAnswer:
        new = self._read_transcript(event, current=None)
        last = _clip(event.last_assistant_message or "")
        fed = any(m["role"] == "assistant" and m["content"] == last for m in new)
        if last.strip() and not fed:
            # Each Stop ends one assistant message. The transcript lags: its text is fed now
            # and skipped when the transcript shows it.
            new.append({"role": "assistant", "content": last})
            _remember(self._state.echoed, _digest(last))
        verdict = await self._turn(new)
        blocked_before = self._state.stop_blocked
        self._state.stop_blocked = False
        if not verdict:
            return HookAnswer(event.name, verdict=verdict)
        summary = verdict.summary or "a loop"
        if verdict.action is Action.WARN and not event.stop_hook_active and not blocked_before:
            # The run ends inside a loop the agent was not yet told about: let it try once
            # more with the recovery message. Told to stop or ask the user, it may stop.
            self._state.stop_blocked = True
            return HookAnswer(
                event.name,
                verdict.action,
                block_reason=verdict.recovery_message or summary,
                system_message=f"loop-judge: {summary}",
                verdict=verdict,
            )
        return HookAnswer(
            event.name, verdict.action, system_message=f"loop-judge: {summary}", verdict=verdict
        )

    # -- feeding ------------------------------------------------------------------------

    async def _turn(self, new: list[dict[str, Any]]) -> Verdict:
        tracker = self.tracker
        history = _TailHistory(self._state.fed, self._state.last_fed, new)
        verdict = await tracker.turn_started(history)
        if new:
            self._state.fed += len(new)
            self._state.last_fed = self._redacted(new[-1])
        return verdict

    # -- what the state file may hold ----------------------------------------------------

    def _redaction(self) -> tuple[Redactor, Callable[[Any], Any]] | None:
        """The tracker's redactor and its redacting reader (judge.state.redacting_reader);
        None with ``redact_secrets`` off. Built once per session object."""
        if self._redaction_built is None:
            from judge.llm.redaction import redactor_for
            from judge.state import redacting_reader

            config = self.tracker.config
            redactor = redactor_for(enabled=config.redact_secrets, patterns=config.redact_patterns)
            built = (redactor, redacting_reader(redactor)) if redactor is not None else None
            self._redaction_built = (built,)
        return self._redaction_built[0]

    def _redacted(self, raw: Any) -> Any:
        """``raw`` (a message the hook built, a call's input) as the state file keeps it.

        The restored tracker reads every message through the same reader before it
        compares (its cursor checks that the last message it read is still in place), so
        a message kept redacted compares as the raw one did: the reader leaves a redacted
        text as it is. The JSON text of the whole value is redacted first, so a secret
        known only by its key (``{"password": ...}``) is found with its key beside it.
        """
        redaction = self._redaction()
        if redaction is None:
            return raw
        redactor, read = redaction
        try:
            text = json.dumps(raw, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):
            return read(raw)
        clean = redactor.redact(text)
        if clean != text:
            # A marker that broke the JSON leaves the value as it was: the reader below
            # still redacts each of its strings.
            with contextlib.suppress(ValueError):
                raw = json.loads(clean)
        return read(raw)

    def _read_transcript(self, event: HookEvent, *, current: str | None) -> list[dict[str, Any]]:
        """The transcript's new entries as tracker messages (see the module docstring).

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
            _remember(self._state.seen_uuids, uuid)
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
            text = _clip("\n".join(texts))
            echo = _digest(text)
            if echo in self._state.echoed:
                self._state.echoed.remove(echo)  # fed already, from last_assistant_message
                return
            out.append({"role": "assistant", "content": text})

    def _user(self, content: Any, out: list[dict[str, Any]], current: str | None) -> None:
        if isinstance(content, str):
            if content.strip():
                out.append({"role": "user", "content": _clip(content)})
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
                out.append(_call_message(call_id, call.name, call.input))
                out.append(
                    _result_message(call_id, block.get("content"), block.get("is_error") is True)
                )
                _remember(self._state.done_ids, call_id)
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        if texts and "".join(texts).strip():
            out.append({"role": "user", "content": _clip("\n".join(texts))})


# The order of actions by severity, to take the stronger of two.


# -- the state directory ------------------------------------------------------------------


def default_state_dir() -> Path:
    """``$LOOP_JUDGE_HOOK_STATE_DIR``, else the user's cache directory (``$XDG_CACHE_HOME``
    or ``~/.cache``; ``%LOCALAPPDATA%`` on Windows) under ``loop-judge/claude-code``
    (`judge.hooks.client.default_state_dir`, which the daemon's client resolves alone)."""
    return Path(_client.default_state_dir())


class HookSessionFiles:
    """Session states in a directory: one JSON file per session, written atomically
    (a temporary file, then ``os.replace``) under an exclusive lock on a side file, so
    the hook processes of one session's parallel tool calls take turns."""

    def __init__(self, directory: Path | str) -> None:
        self.directory = Path(directory)

    def _paths(self, key: str) -> tuple[Path, Path]:
        name = key if _SAFE_ID.fullmatch(key) else _digest(key)
        return self.directory / f"{name}.json", self.directory / f"{name}.lock"

    @contextlib.contextmanager
    def locked(self, key: str) -> Iterator[Path]:
        """Hold the session's lock; yields the state file's path. `TimeoutError` when
        another process holds it for longer than `LOCK_WAIT_S`."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        state_path, lock_path = self._paths(key)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock(fd)
            try:
                yield state_path
            finally:
                _unlock(fd)
        finally:
            os.close(fd)

    @staticmethod
    def load(path: Path) -> SessionState | None:
        """The saved state, or None when there is none or it cannot be read (a crash mid
        write on a filesystem without atomic rename, another version): start afresh."""
        try:
            return SessionState.model_validate_json(path.read_bytes())
        except (OSError, ValidationError, ValueError):
            return None

    @staticmethod
    def save(path: Path, state: SessionState) -> bytes:
        """Write ``state``; returns the bytes written (`SessionCache` compares them)."""
        data = state.model_dump_json(exclude_defaults=False).encode("utf-8")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return data

    def prune(self, *, now: float | None = None) -> int:
        """Remove the files of sessions untouched for `STATE_TTL_S`; returns how many."""
        cutoff = (time.time() if now is None else now) - STATE_TTL_S
        removed = 0
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.directory):
                if not entry.name.endswith((".json", ".lock")):
                    continue
                with contextlib.suppress(OSError):
                    if entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                        removed += 1
        return removed


def _try_lock(fd: int) -> bool:
    """One non-blocking attempt at the exclusive lock (flock; a byte range on Windows)."""
    if sys.platform == "win32":
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _lock(fd: int) -> None:
    deadline = time.monotonic() + LOCK_WAIT_S
    while not _try_lock(fd):
        if time.monotonic() > deadline:
            raise TimeoutError(f"session state still locked by another hook after {LOCK_WAIT_S} s")
        time.sleep(LOCK_POLL_S)


def _unlock(fd: int) -> None:
    if sys.platform == "win32":
        import msvcrt

        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


# -- one invocation -----------------------------------------------------------------------


def hook_config() -> TrackerConfig:
    """The tracker configuration a hook uses: ``LOOP_JUDGE_*`` as everywhere, except that
    the semantic detector is off unless ``LOOP_JUDGE_SEMANTIC`` asks for it: merely
    checking for its extra imports onnxruntime and numpy, about 0.4 s on every tool call."""
    from judge.config import ENV_PREFIX, TrackerConfig

    if f"{ENV_PREFIX}SEMANTIC" in os.environ:
        return TrackerConfig()
    return TrackerConfig(semantic="off")


def _run_without_loop(turn: Coroutine[Any, Any, HookAnswer]) -> HookAnswer:
    """Run a judge-less event's coroutine to its end without an event loop.

    Without a judge model the tracker never awaits anything that suspends (no judge check;
    the hook passes no ``on_loop``), so the coroutine ends on its first step. Starting an
    event loop for it (``anyio.run``) cost every PostToolUse and Stop the imports of asyncio
    and anyio's backend and a loop's set-up, more than the event's own work. Should it ever
    suspend, it is closed and this raises: the caller saves no state, so nothing is
    half-recorded.
    """
    try:
        turn.send(None)
    except StopIteration as done:
        answer: HookAnswer = done.value
        return answer
    turn.close()
    raise RuntimeError("a judge-less hook turn awaited an event loop")


class SessionCache:
    """Sessions kept warm between events by a long-lived process (the hook daemon,
    `judge.hooks.daemon`), so an event skips the state file's parse and the tracker's
    restore: the per-event cost the in-process path pays.

    The state file stays the truth: it is still written after every event, and a session
    is taken from here only while the file holds exactly the bytes this process last
    wrote (read under the session's lock). Any other writer (the in-process path of a
    hook that could not reach the daemon, a session pruned, another daemon) makes the
    next event load the file, as the in-process path would. A session is taken out for
    one event and put back after it, so an event that fails leaves nothing half-updated
    here. ``size`` sessions at most, the least recently used dropped first.
    """

    def __init__(self, size: int = 64) -> None:
        self._size = size
        self._items: OrderedDict[str, tuple[bytes, HookSession]] = OrderedDict()
        self._mutex = threading.Lock()

    def take(self, path: Path) -> HookSession | None:
        """The warm session saved at ``path``, if the file is still what it wrote."""
        with self._mutex:
            item = self._items.pop(str(path), None)
        if item is None:
            return None
        try:
            current = path.read_bytes()
        except OSError:
            return None
        return item[1] if current == item[0] else None

    def put(self, path: Path, written: bytes, session: HookSession) -> None:
        with self._mutex:
            self._items[str(path)] = (written, session)
            self._items.move_to_end(str(path))
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def _allowed_preflight_keeps(session: HookSession) -> bool:
    """Whether an allowed PreToolUse leaves the warm session as a restore from the file
    would be. The in-process path saves nothing after an allowed preflight, so whatever
    the preflight changed in memory is gone at the next event; the one thing it changes
    is the suite's record of refused calls awaiting their echo (`DetectorSuite.allowed`).
    With none waiting there is nothing to change; with some (or a suite this cannot
    read) the session is dropped and the next event restores it from the file."""
    suite = getattr(session.tracker, "_suite", None)
    echoes = getattr(suite, "_echoes", None)
    return isinstance(echoes, list) and not echoes


def handle_payload(
    payload: Any,
    *,
    state_dir: Path | str | None = None,
    config: TrackerConfig | None = None,
    cache: SessionCache | None = None,
) -> HookAnswer:
    """Answer one decoded hook payload, with the session's state loaded and saved.

    Raises `HookInputError` for a payload that is not a hook event, `TimeoutError` when
    the session stays locked; the command turns every error into "no opinion". With
    ``cache`` (a long-lived process), the session comes from it when the state file is
    unchanged since this process wrote it, and goes back to it after the event.
    """
    import judge.tracker  # noqa: F401 - imported before the lock, not while others wait
    from judge.response.telemetry import Telemetry

    event = HookEvent.parse(payload)
    config = config if config is not None else hook_config()
    store = HookSessionFiles(state_dir if state_dir is not None else default_state_dir())
    with store.locked(event.session_key) as path:
        session = cache.take(path) if cache is not None else None
        if session is None:
            # No telemetry: the process ends before any exporter could send a span, and
            # looking for opentelemetry costs every tool call tens of milliseconds.
            session = HookSession(config, store.load(path), telemetry=Telemetry())
        keeps = (
            cache is not None and event.name == PRE_TOOL_USE and _allowed_preflight_keeps(session)
        )
        if event.name == PRE_TOOL_USE:
            answer = session.preflight(event)  # no event loop to start: the common case
        elif not config.judge_enabled:
            answer = _run_without_loop(session.answer(event))
        else:
            import anyio

            answer = anyio.run(session.answer, event)
        if event.name != PRE_TOOL_USE or answer:
            written = store.save(path, session.state)
            if cache is not None:
                cache.put(path, written, session)
        elif keeps and cache is not None:
            # An allowed preflight changes nothing on file; the session is as it was.
            with contextlib.suppress(OSError):
                cache.put(path, path.read_bytes(), session)
    if event.name in _STOP_EVENTS:
        store.prune()
    return answer


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
    return answer_stdin(state_dir=args.state_dir)


def _scrubbed(message: str) -> str:
    """An error message as stderr may show it: redacted whatever the settings (an
    exception's text can quote a payload), and still printed if the redactor fails."""
    try:
        from judge.llm.redaction import redact

        return redact(message)
    except Exception:  # the error line must go out whatever happens
        return "(message withheld)"


def answer_raw(
    raw: bytes | None,
    *,
    state_dir: Path | str | None = None,
    config: TrackerConfig | None = None,
    cache: SessionCache | None = None,
    agent: str = "claude-code",
) -> tuple[str, str]:
    """The text the hook prints for the event ``raw`` (read from stdin when None): its
    stdout (the answer's JSON line, or nothing) and its stderr (one "ignored" line, or
    nothing). Never raises. The command and the daemon both print exactly this.
    ``agent`` ``"gemini"`` reads and answers Gemini CLI's protocol
    (`judge.integrations.gemini_cli`), ``"codex"`` Codex's (`judge.integrations.codex`),
    ``"cursor"`` Cursor's (`judge.integrations.cursor`, also for a Cursor payload given
    to ``"claude-code"``), with the same session logic."""
    # The tracker logs loop verdicts; in a hook process nobody reads them, and Python's
    # last-resort handler would print each on stderr beside our one line. Added once: the
    # daemon answers many events in one process.
    logger = logging.getLogger("judge")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    try:
        if raw is None:
            raw = sys.stdin.buffer.read(MAX_PAYLOAD_BYTES + 1)
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise HookInputError(f"hook input is over {MAX_PAYLOAD_BYTES} bytes")
        payload = json.loads(raw)
        if agent == "gemini":
            from judge.integrations import gemini_cli

            event = payload.get("hook_event_name") if isinstance(payload, dict) else None
            payload = gemini_cli.to_claude_payload(payload)
            answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
            # Gemini CLI parses stdout as JSON on exit 0: "{}" says "no opinion".
            shown = gemini_cli.gemini_json(answer, event if isinstance(event, str) else None)
            return json.dumps(shown, ensure_ascii=False) + "\n", ""
        if agent == "cursor" or (agent == "claude-code" and _from_cursor(payload)):
            from judge.integrations import cursor

            agent = "cursor"
            event = payload.get("hook_event_name") if isinstance(payload, dict) else None
            payload = cursor.to_claude_payload(payload)
            answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
            # Cursor reads stdout as JSON on exit 0: "{}" says "no opinion".
            shown = cursor.cursor_json(answer, event if isinstance(event, str) else None)
            return json.dumps(shown, ensure_ascii=False) + "\n", ""
        if agent == "codex":
            from judge.integrations import codex

            payload = codex.to_claude_payload(payload)
            answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
            out = json.dumps(codex.codex_json(answer), ensure_ascii=False) + "\n" if answer else ""
            return out, ""
        answer = handle_payload(payload, state_dir=state_dir, config=config, cache=cache)
        out = json.dumps(answer.to_json(), ensure_ascii=False) + "\n" if answer else ""
        return out, ""
    except Exception as exc:  # a hook must never break the agent: anything at all
        # Cursor reads an empty stdout as a failed hook, which a hook set to fail closed
        # turns into a refusal: "{}" lets the call through whatever its settings.
        return ("{}\n" if agent == "cursor" else ""), _ignored(exc)


def _from_cursor(payload: Any) -> bool:
    """Whether a payload given to the claude-code hook is Cursor's: Cursor runs Claude
    Code's settings.json hooks too (its "third-party hooks"), with its own payloads.
    The Cursor module is imported only for a payload with one of its fields."""
    if not isinstance(payload, dict) or not payload.keys() & {"conversation_id", "cursor_version"}:
        return False
    from judge.integrations import cursor

    return cursor.is_cursor_payload(payload)


def _ignored(exc: BaseException) -> str:
    # One line, the error's type and message only: never the payload (it quotes code).
    message = _scrubbed(" ".join(str(exc).split())[:300])
    return f"loop-judge hook: ignored ({type(exc).__name__}: {message})\n"


def answer_stdin(
    *, state_dir: str | None = None, raw: bytes | None = None, agent: str = "claude-code"
) -> int:
    """Answer the event on stdin (or ``raw``, when stdin was read already) on stdout;
    returns `EXIT_HOOK` whatever happens."""
    out, err = answer_raw(raw, state_dir=state_dir, agent=agent)
    try:
        if out:
            sys.stdout.write(out)
            sys.stdout.flush()
    except Exception as exc:  # as any other failure: one line, no answer
        err = _ignored(exc)
    if err:
        sys.stderr.write(err)
    return EXIT_HOOK


if __name__ == "__main__":
    sys.exit(main())
