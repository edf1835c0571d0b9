"""The hook session: what loop-judge answers to one coding agent's event.

An agent runs its hook as a new process for each event, so the tracker cannot stay in
memory: `HookSession` is one session's tracker plus what the hook needs to feed it (the
transcript's byte offset, tool calls waiting for their result, calls already fed), and
`SessionState` is all of that as the state file keeps it between invocations
(`judge.hooks.session_files`). `HookSession.answer` decides what to answer to one event:
a denial before a call that repeats a loop, the recovery message after a repeated
result, one blocked stop when the run ends in a loop.

Every agent's events arrive here as Claude Code's (`judge.integrations.claude_code`:
`HookEvent` in, `HookAnswer` out); Cursor, Gemini CLI and Codex translate theirs to and
from it (`judge.integrations.cursor`, `gemini_cli`, `codex`). Apart from the integrations
because it is the one place that decides, for all four agents and the Claude Agent SDK's
callbacks (`judge.integrations.claude_agent_sdk`); only Claude Code sends a transcript,
whose reading stays with its payloads (`TranscriptFeed`).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judge.errors import StateError
from judge.hooks.messages import (
    TailHistory,
    call_message,
    clip,
    digest,
    remember,
    response_text,
    result_message,
)
from judge.integrations.claude_code import (
    POST_TOOL_USE,
    POST_TOOL_USE_FAILURE,
    PRE_TOOL_USE,
    STOP_EVENTS,
    HookAnswer,
    HookEvent,
    PendingCall,
    TranscriptCursor,
    TranscriptFeed,
)
from judge.state import TrackerState
from judge.verdict import Action, Verdict

if TYPE_CHECKING:
    from judge.config import TrackerConfig
    from judge.llm.redaction import Redactor
    from judge.response.telemetry import Telemetry
    from judge.tracker import LoopTracker

__all__ = ["HookSession", "SessionState"]

# The result the agent sees for a call we denied; the call never ran, so it is not fed.
_STOP_PREFIX = "loop-judge stopped the agent: "


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


class HookSession:
    """One coding agent's session as loop-judge follows it, across hook invocations.

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
        # Claude Code's transcript, read into this state (`_state` is looked up on every
        # read: a tracker restored from another version replaces it mid-event).
        self._transcript = TranscriptFeed(lambda: self._state, self._redacted)

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
        if event.name in STOP_EVENTS:
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
            remember(self._state.done_ids, event.tool_use_id)
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
        new = self._transcript.read(event, current=event.tool_use_id)
        call_id = event.tool_use_id or f"hook-{self._state.fed + len(new)}"
        if call_id not in self._state.done_ids:
            self._state.pending.pop(call_id, None)
            new.append(call_message(call_id, event.tool_name, event.tool_input))
            new.append(result_message(call_id, response_text(result), failed))
            remember(self._state.done_ids, call_id)
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
        new = self._transcript.read(event, current=None)
        last = clip(event.last_assistant_message or "")
        fed = any(m["role"] == "assistant" and m["content"] == last for m in new)
        if last.strip() and not fed:
            # Each Stop ends one assistant message. The transcript lags: its text is fed now
            # and skipped when the transcript shows it.
            new.append({"role": "assistant", "content": last})
            remember(self._state.echoed, digest(last))
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
        history = TailHistory(self._state.fed, self._state.last_fed, new)
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
