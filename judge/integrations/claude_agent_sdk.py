"""Claude Agent SDK: loop-judge as ``ClaudeAgentOptions(hooks=...)`` callbacks.

The SDK delivers the same hook events as Claude Code's command hooks, as Python calls
over its control protocol instead of processes: ``PreToolUse``, ``PostToolUse``,
``PostToolUseFailure`` and ``Stop`` reach `LoopJudgeHooks`, which hands each to the
session's `judge.hooks.session.HookSession` (the one place that decides what to
answer) and returns that answer as the SDK's ``SyncHookJSONOutput`` (``continue_`` for
``continue``, as the SDK renames it). Sessions stay in memory, one tracker per
``session_id`` (a sub-agent's calls under their own ``agent_id``), so no state file or
lock is involved.

    from claude_agent_sdk import ClaudeAgentOptions, query
    from judge.integrations.claude_agent_sdk import loop_judge_hooks

    options = ClaudeAgentOptions(hooks=loop_judge_hooks())
    async for message in query(prompt="Fix the failing test", options=options): ...

A callback never raises into the SDK: an event it cannot read is logged and answered
with ``{}`` (no opinion), so a loop-judge problem never blocks a tool call.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio

from judge.errors import LoopJudgeError
from judge.hooks.session import HookSession
from judge.integrations.claude_code import (
    POST_TOOL_USE,
    POST_TOOL_USE_FAILURE,
    PRE_TOOL_USE,
    STOP,
    SUBAGENT_STOP,
    HookAnswer,
    HookEvent,
)

if TYPE_CHECKING:
    from claude_agent_sdk import HookContext, HookInput, HookJSONOutput, HookMatcher

    from judge.config import TrackerConfig

__all__ = ["HOOK_EVENTS", "MAX_SESSIONS", "LoopJudgeHooks", "loop_judge_hooks"]

logger = logging.getLogger("judge.integrations.claude_agent_sdk")

# The events loop-judge answers; each gets one matcher for every tool.
HOOK_EVENTS = (PRE_TOOL_USE, POST_TOOL_USE, POST_TOOL_USE_FAILURE, STOP, SUBAGENT_STOP)
# Sessions kept in memory at once; the least recently used is forgotten beyond this. A
# process serving many conversations keeps its recent ones, never an unbounded number.
MAX_SESSIONS = 1024


class LoopJudgeHooks:
    """One tracker per session behind the SDK's hook callbacks.

    `hooks` is what ``ClaudeAgentOptions(hooks=...)`` takes; `session` gives a session's
    `HookSession` (its ``tracker``: stats, ``override(...)``) and `answers` the non-empty
    answers given so far, for a caller that reports them.
    """

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        timeout: float | None = None,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self._config = config
        self._timeout = timeout
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[str, HookSession] = OrderedDict()
        self._locks: dict[str, anyio.Lock] = {}
        self.answers: list[HookAnswer] = []

    def hooks(self) -> dict[Any, list[HookMatcher]]:
        """``{event: [HookMatcher(matcher=None, hooks=[callback])]}`` for every event in
        `HOOK_EVENTS`; ``timeout`` (seconds) is the matcher's, None for the SDK default."""
        from claude_agent_sdk import HookMatcher

        return {
            event: [HookMatcher(matcher=None, hooks=[self.callback], timeout=self._timeout)]
            for event in HOOK_EVENTS
        }

    def session(self, session_key: str) -> HookSession | None:
        """The session's state (key: ``session_id``, or ``session_id.agent_id``)."""
        return self._sessions.get(session_key)

    async def callback(
        self, input_data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        """The SDK's ``HookCallback``: answer one event; ``{}`` when all is well."""
        try:
            payload: Mapping[str, Any] = dict(input_data)
            if tool_use_id and not payload.get("tool_use_id"):
                payload = {**payload, "tool_use_id": tool_use_id}
            event = HookEvent.parse(payload)
            answer = await self._answer(event)
        except (LoopJudgeError, ValueError, TypeError) as exc:
            logger.warning("loop-judge hook ignored an event: %s: %s", type(exc).__name__, exc)
            return {}
        if not answer:
            return {}
        self.answers.append(answer)
        logger.log(
            logging.WARNING if answer.stop_reason else logging.INFO,
            "loop-judge %s on %s (session %s): %s",
            answer.action.value,
            event.name,
            event.session_key,
            answer.verdict.summary if answer.verdict is not None else "",
        )
        # The SyncHookJSONOutput's keys, from the one function that writes both front-ends'.
        return cast("HookJSONOutput", answer.to_json(continue_key="continue_"))

    async def _answer(self, event: HookEvent) -> HookAnswer:
        key = event.session_key
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:  # the SDK runs each control request as its own task
            session = self._sessions.get(key)
            if session is None:
                session = HookSession(self._config)
                self._sessions[key] = session
                while len(self._sessions) > self._max_sessions:
                    old, _ = self._sessions.popitem(last=False)
                    self._locks.pop(old, None)
            else:
                self._sessions.move_to_end(key)
            return await session.answer(event)


def loop_judge_hooks(
    config: TrackerConfig | None = None, *, timeout: float | None = None
) -> dict[Any, list[HookMatcher]]:
    """The ``hooks=`` value for ``ClaudeAgentOptions``: loop-judge on every tool call and
    stop, with ``config`` (default: ``LOOP_JUDGE_*``). Keep a `LoopJudgeHooks` instead
    when you want its sessions or answers afterwards."""
    return LoopJudgeHooks(config, timeout=timeout).hooks()
