"""loop-judge for CrewAI: interception hooks that judge every model call of every agent.

CrewAI's extension point for cross-cutting agent behaviour is its hook dispatcher: a hook
registered for ``InterceptionPoint.PRE_MODEL_CALL`` runs before each model call an agent
executor makes, with the executor's own history in ``context.messages`` (OpenAI-style
dicts: ``tool_calls`` with their ids, ``role: "tool"`` results with ``tool_call_id``), and
``PRE_TOOL_CALL`` / ``POST_TOOL_CALL`` hooks run around every tool. `LoopJudgeHooks`
registers one of each and:

1. before each model call, converts the history's new messages to the chat dicts the
   tracker reads (ids kept, only what was not seen before converted) and runs the
   conversation's tracker: one per agent and task, so agents of one crew, and tasks that
   run at the same time, never share one;
2. on ``warn`` or ``ask_user``, appends the recovery message to ``context.messages`` (the
   executor's history, which CrewAI asks hooks to edit in place) as a user message: the
   model reads it in this very call, and it stays in the history after;
3. on ``stop``, raises `CrewLoopDetected`, which is both `judge.LoopDetected` and
   CrewAI's ``HookAborted``: CrewAI lets ``HookAborted`` through as a deliberate stop (any
   other exception from a hook is swallowed, and a hook returning False makes the agent
   retry the task), so the run ends and ``crew.kickoff()`` raises it; catch it as
   `LoopDetected`.

Before each tool runs, the tracker's preflight asks whether the call would repeat past
its limit. If so the tool does not run (the hook blocks it), the model gets the recovery
message as the call's result (swapped in by the after-tool hook for CrewAI's fixed
"blocked" text), the identical call stays refused, each refusal a rung higher, and at
``stop`` the run ends right after the refused call, before its side effect happens.

    from judge.integrations.crewai import LoopJudgeHooks

    with LoopJudgeHooks():           # LOOP_JUDGE_* configure its trackers
        crew.kickoff()

CrewAI's hooks are process-wide: register before the crew runs (an executor copies the
model-call hooks when it is made) and unregister when done (leaving the ``with`` block
does both). Loop-judge's own trouble (a store that is down, a history it cannot read) is
logged and the agent goes on unjudged for that turn; judge failures are on the verdict,
never raised.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Coroutine, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from crewai.hooks import HookAborted, InterceptionPoint, register_hook, unregister_hook

from judge.config import TrackerConfig
from judge.errors import LoopDetected
from judge.integrations._session_turns import (
    DEFAULT_SESSION,
    STOP_ACTIONS,
    TELL_ACTIONS,
    Sessions,
)
from judge.llm.client import LLMClient
from judge.service.store import SessionStore
from judge.sync import _Runner
from judge.verdict import Verdict

__all__ = ["CrewLoopDetected", "LoopJudgeHooks", "to_chat_message"]

logger = logging.getLogger("judge.integrations.crewai")

# Where a tool call's text is kept when CrewAI's message carries parts instead of a string.
_NON_TEXT_PART = "[{kind}]"
# The fields of an OpenAI tool call the tracker reads.
_FUNCTION = "function"

T = TypeVar("T")


class CrewLoopDetected(LoopDetected, HookAborted):  # type: ignore[misc,unused-ignore]
    """`LoopDetected` as CrewAI's own kind of hook abort.

    CrewAI's dispatcher swallows any exception a hook raises except ``HookAborted``, which
    it passes on as a deliberate stop; being both lets a stop reach the caller of
    ``crew.kickoff()`` (or ``agent.kickoff()``) as itself. Catch it as `LoopDetected`.
    """


def _text(content: Any) -> str | None:
    """A message's content as text (CrewAI keeps multimodal content as a list of parts)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        pieces: list[str] = []
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text")
                pieces.append(
                    text if isinstance(text, str) else _NON_TEXT_PART.format(kind=part.get("type"))
                )
            else:
                pieces.append(str(part))
        return "\n".join(pieces)
    return str(content)


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get(_FUNCTION) or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        # The tracker canonicalizes either shape; a string keeps one form in the history.
        arguments = json.dumps(arguments if arguments is not None else {}, sort_keys=True)
    return {
        "id": str(call.get("id", "")),
        "type": "function",
        "function": {"name": str(function.get("name", "")), "arguments": arguments},
    }


def to_chat_message(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One CrewAI executor message as the chat dicts the tracker reads.

    The executor's messages are already OpenAI-shaped; this keeps what the tracker reads
    (role, text, calls with their ids, a result's ``tool_call_id``) and leaves out what it
    must not hold (files, a provider's raw parts).
    """
    role = message.get("role")
    converted: dict[str, Any] = {"role": role, "content": _text(message.get("content"))}
    if role == "assistant" and message.get("tool_calls"):
        converted["tool_calls"] = [_call(c) for c in message["tool_calls"]]
    elif role == "tool":
        converted["tool_call_id"] = str(message.get("tool_call_id", ""))
        converted["content"] = converted["content"] or ""
    return [converted]


def _session(agent: Any, task: Any) -> str:
    """The conversation a hook is in: one executor history per agent and task (a standalone
    ``agent.kickoff()`` has no task). CrewAI gives both a UUID ``id``."""
    agent_id = getattr(agent, "id", None)
    task_id = getattr(task, "id", None)
    if agent_id is None and task_id is None:
        return DEFAULT_SESSION
    return f"{agent_id}/{task_id}" if task_id is not None else str(agent_id)


def _arguments_key(arguments: Any) -> str:
    return json.dumps(arguments, sort_keys=True, default=str)


class LoopJudgeHooks:
    """CrewAI hooks backed by one `LoopTracker` per conversation (agent and task).

    ``verdicts`` lists every loop verdict acted on, oldest first.
    """

    def __init__(
        self,
        *,
        store: SessionStore | None = None,
        config: TrackerConfig | None = None,
        judge_client: LLMClient | None = None,
    ) -> None:
        """``store`` keeps the trackers elsewhere (a `judge.service.RedisStore` shares
        them between processes); ``config`` is read from ``LOOP_JUDGE_*`` when None;
        ``judge_client`` is the judge model's client (built from the config when None)."""
        self._sessions: Sessions[Mapping[str, Any]] = Sessions(
            to_chat_message, logger, store=store, config=config, judge_client=judge_client
        )
        self.verdicts: list[Verdict] = []
        # CrewAI's hooks are synchronous, the tracker is async: one event loop of ours runs
        # every turn. Hooks come from several threads (parallel tool calls, async tasks),
        # and the loop runs one turn at a time, hence the lock.
        self._runner = _Runner()
        self._lock = threading.Lock()
        # Refused calls whose result is still CrewAI's "blocked" text, by conversation and
        # call: the after-tool hook puts the recovery message in its place.
        self._refused: dict[tuple[str, str, str], list[Verdict]] = {}
        self._registered = False

    # -- registration -------------------------------------------------------------------

    def register(self) -> LoopJudgeHooks:
        """Register the three hooks with CrewAI (process-wide) and return self."""
        if not self._registered:
            register_hook(InterceptionPoint.PRE_MODEL_CALL, self.before_model_call)
            register_hook(InterceptionPoint.PRE_TOOL_CALL, self.before_tool_call)
            register_hook(InterceptionPoint.POST_TOOL_CALL, self.after_tool_call)
            self._registered = True
        return self

    def unregister(self) -> None:
        """Take the hooks out again (executors made while they were in keep their copy)."""
        if self._registered:
            unregister_hook(InterceptionPoint.PRE_MODEL_CALL, self.before_model_call)
            unregister_hook(InterceptionPoint.PRE_TOOL_CALL, self.before_tool_call)
            unregister_hook(InterceptionPoint.POST_TOOL_CALL, self.after_tool_call)
            self._registered = False

    def close(self) -> None:
        """Unregister and close the event loop the trackers ran on."""
        self.unregister()
        with self._lock:
            self._runner.close()

    def __enter__(self) -> LoopJudgeHooks:
        return self.register()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            return self._runner.run(coroutine)

    # -- the hooks ----------------------------------------------------------------------

    def before_model_call(self, context: Any) -> None:
        """``PRE_MODEL_CALL``: one turn of the conversation's tracker."""
        if context.executor is None:
            # A model call outside an agent's loop (CrewAI converting an output, planning):
            # one-off, and no part of the conversation the tracker follows.
            return
        session = _session(context.agent, context.task)
        messages: list[Any] = context.messages
        verdict = self._run(self._sessions.turn(session, list(messages)))
        if not verdict:
            return
        self.verdicts.append(verdict)
        if verdict.action in STOP_ACTIONS:
            raise CrewLoopDetected(verdict, session=session)
        if verdict.action in TELL_ACTIONS and verdict.recovery_message:
            # In place: the executor's own list, so the model reads it now and it stays.
            messages.append({"role": "user", "content": verdict.recovery_message})

    def before_tool_call(self, context: Any) -> bool | None:
        """``PRE_TOOL_CALL``: the preflight; False blocks a call that would repeat past its
        limit (CrewAI then skips the tool and `after_tool_call` gives the reason)."""
        session = _session(context.agent, context.task)
        name = str(context.tool_name)
        arguments = dict(context.tool_input or {})
        verdict = self._run(self._sessions.preflight(session, name, arguments))
        if not verdict:
            return None
        key = (session, name, _arguments_key(arguments))
        with self._lock:
            self._refused.setdefault(key, []).append(verdict)
        return False

    def after_tool_call(self, context: Any) -> str | None:
        """``POST_TOOL_CALL``: a refused call's result becomes the recovery message; a
        refusal that said stop ends the run here, the tool not having run."""
        session = _session(context.agent, context.task)
        key = (session, str(context.tool_name), _arguments_key(dict(context.tool_input or {})))
        with self._lock:
            pending = self._refused.get(key)
            verdict = pending.pop(0) if pending else None
            if pending == []:
                del self._refused[key]
        if verdict is None:
            return None
        self.verdicts.append(verdict)
        if verdict.action in STOP_ACTIONS:
            raise CrewLoopDetected(verdict, session=session)
        return verdict.recovery_message or verdict.summary or "loop detected"
