"""loop-judge as a pydantic-ai capability: the tracker runs before every model request.

pydantic-ai 2.x's extension point for cross-cutting agent behaviour is the capability
(``Agent(..., capabilities=[...])``); its ``before_model_request`` hook runs once per
request step, with the run's persistent history in ``ctx.messages``. There `LoopJudge`:

1. converts the history's native parts to chat dicts (`to_chat_messages`), keeping every
   ``tool_call_id`` and a tool's error outcome, so calls and results keep their identity;
2. runs the conversation's tracker (one per ``ctx.conversation_id``, so concurrent runs
   never share one, and a conversation continued in a later run keeps its ladder);
3. on ``warn`` or ``ask_user``, enqueues the recovery message with ``ctx.enqueue`` as a
   `SystemPromptPart` (the framework's way to steer from a hook: it goes into this very
   request and stays in the history, in the application's voice, not the user's), marked
   with ``metadata={"loop_judge": ...}`` so code can find it again;
4. on ``stop``, raises `judge.LoopDetected` (carrying the verdict) out of ``agent.run``.

Before each tool runs, ``before_tool_execute`` asks the tracker's preflight whether the
call would repeat past its limit. If so the tool does not run: the model gets the recovery
message as the call's result (``SkipToolExecution``), the identical call stays refused,
each refusal one rung higher, and at ``stop`` the run ends before the tool's side effect
happens. Loop-judge's own trouble (a store that is down, a history it cannot read)
is logged and the agent goes on; judge failures are on the verdict, never raised.

    from pydantic_ai import Agent
    from judge.integrations.pydantic_ai import LoopJudge

    agent = Agent("openai:gpt-5", capabilities=[LoopJudge()])
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import SkipToolExecution
from pydantic_ai.messages import (
    BaseToolCallPart,
    BaseToolReturnPart,
    BinaryContent,
    FileUrl,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ToolCallPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext, ToolDefinition

from judge.config import TrackerConfig
from judge.errors import LoopDetected
from judge.history import OBSERVATION_NAME
from judge.integrations._session_turns import (
    DEFAULT_SESSION,
    STOP_ACTIONS,
    TELL_ACTIONS,
    Sessions,
)
from judge.llm.client import LLMClient
from judge.service.store import SessionStore
from judge.tracker import LoopTracker
from judge.verdict import Verdict

__all__ = ["METADATA_KEY", "LoopJudge", "to_chat_messages"]

logger = logging.getLogger("judge.integrations.pydantic_ai")

# The key under which an injected recovery prompt's `SystemPromptPart.metadata` says it is
# ours (metadata is for the application only: pydantic-ai never sends it to the model).
METADATA_KEY = "loop_judge"
# Tool outcomes that reach the model as an error (pydantic-ai's own ERROR_OUTCOMES).
_ERROR_OUTCOMES = frozenset({"failed", "retried"})


# -- pydantic-ai messages -> chat dicts ----------------------------------------------------


def _user_text(content: str | Sequence[UserContent]) -> str:
    """A user prompt's text; media become a short marker naming them (never their bytes)."""
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    for item in content:
        if isinstance(item, str):
            pieces.append(item)
        elif isinstance(item, TextContent):
            pieces.append(item.content)
        elif isinstance(item, FileUrl):
            pieces.append(f"[{item.kind} {item.url}]")
        elif isinstance(item, BinaryContent):
            pieces.append(f"[{item.media_type} {item.identifier}]")
    return "\n".join(pieces)


def _call(part: BaseToolCallPart[Any]) -> dict[str, Any]:
    # The raw arguments (a JSON string or a dict): the tracker canonicalizes either, so the
    # same call compares equal however the provider sent it.
    arguments = part.args if part.args is not None else {}
    return {
        "id": part.tool_call_id,
        "type": "function",
        "function": {"name": part.tool_name, "arguments": arguments},
    }


def _result(part: BaseToolReturnPart[Any]) -> dict[str, Any]:
    text = part.model_response_str(wrap_if_error=False)
    if part.outcome in _ERROR_OUTCOMES:
        # The Anthropic block carries the tool's own error flag, which the detectors trust
        # over reading the text; the tracker reads both shapes in one history.
        block = {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": text,
            "is_error": True,
        }
        return {"role": "user", "content": [block]}
    return {"role": "tool", "tool_call_id": part.tool_call_id, "content": text}


def _retry(part: RetryPromptPart) -> dict[str, Any]:
    """The deprecated retry part (still in histories built by hand): a failed call's result
    when it names a tool, else the framework's feedback, which is no person's prompt."""
    if part.tool_name is not None:
        block = {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": part.model_response(),
            "is_error": True,
        }
        return {"role": "user", "content": [block]}
    return {"role": "user", "name": OBSERVATION_NAME, "content": part.model_response()}


def _request(message: ModelRequest, out: list[dict[str, Any]]) -> None:
    for part in message.parts:
        if isinstance(part, BaseToolReturnPart):
            out.append(_result(part))
        elif isinstance(part, UserPromptPart):
            out.append({"role": "user", "content": _user_text(part.content)})
        elif isinstance(part, SystemPromptPart):
            out.append({"role": "system", "content": part.content})
        elif isinstance(part, RetryFeedbackPart):
            # The framework telling the model its output was unusable: feedback, not a
            # person's new prompt (which would restart the turn count).
            out.append({"role": "user", "name": OBSERVATION_NAME, "content": part.model_response()})
        elif isinstance(part, RetryPromptPart):
            out.append(_retry(part))
        # Other request parts (instruction, tool-availability and settings deltas) are the
        # framework's bookkeeping, not conversation.


def _response(message: ModelResponse, out: list[dict[str, Any]]) -> None:
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            text.append(part.content)
        elif isinstance(part, BaseToolCallPart):
            calls.append(_call(part))
        elif isinstance(part, BaseToolReturnPart):
            # A provider-run (native) tool's result arrives inside the response itself.
            results.append(_result(part))
        # Thinking is the model's private scratchpad; files and compaction carry no call.
    assistant: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
    if calls:
        assistant["tool_calls"] = calls
    out.append(assistant)
    out.extend(results)


def _chat(message: ModelMessage) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if isinstance(message, ModelResponse):
        _response(message, out)
    else:
        _request(message, out)
    return out


def to_chat_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """pydantic-ai's history as the chat dicts `LoopTracker.turn_started` reads.

    Each `ModelResponse` is one assistant message (its text, and its tool calls with their
    ids and raw arguments); each request part becomes its own message: tool results keep
    their ``tool_call_id`` (a failed or retried one is flagged as an error), system prompts
    stay system, user prompts user, and the framework's retry feedback is marked as an
    observation so it never counts as the user's new prompt.
    """
    return [d for message in messages for d in _chat(message)]


# -- the capability ----------------------------------------------------------------------


def _session(ctx: RunContext[Any]) -> str:
    # The conversation, not the run: a chat continued with message_history keeps its id
    # (and so its tracker and escalation ladder); concurrent conversations never share one.
    return ctx.conversation_id or ctx.run_id or DEFAULT_SESSION


def _recovery_part(verdict: Verdict) -> SystemPromptPart:
    assert verdict.recovery_message is not None
    marker = {
        "action": verdict.action.value,
        "kind": verdict.kind.value if verdict.kind else None,
        "pattern": verdict.pattern,
        "turn": verdict.turn,
    }
    return SystemPromptPart(verdict.recovery_message, metadata={METADATA_KEY: marker})


@dataclass(kw_only=True)
class LoopJudge(AbstractCapability[Any]):
    """Loop detection for a pydantic-ai agent: ``Agent(..., capabilities=[LoopJudge()])``.

    ``config`` is the `TrackerConfig` of every conversation's tracker (default: the
    ``LOOP_JUDGE_*`` environment, heuristics only unless a judge model is set);
    ``judge_client`` replaces the LLM client (a test double); ``store`` keeps the trackers
    (default: in this process; a `judge.service.RedisStore` shares them between replicas);
    ``preflight=False`` turns off the check before each tool call.
    """

    config: TrackerConfig | None = None
    judge_client: LLMClient | None = field(default=None, repr=False)
    store: SessionStore | None = field(default=None, repr=False)
    preflight: bool = True
    _sessions: Sessions[ModelMessage] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._sessions = Sessions(
            _chat, logger, store=self.store, config=self.config, judge_client=self.judge_client
        )

    def tracker(self, conversation_id: str) -> LoopTracker | None:
        """The tracker of a conversation (``result.conversation_id``): its stats, overrides,
        ladder. None when unknown, or when a ``store`` keeps the trackers."""
        return self._sessions.tracker(conversation_id)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds live trackers: not for agent specs

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Judge the history before each model request; tell the model, or stop the run."""
        session = _session(ctx)
        verdict = await self._sessions.turn(session, ctx.messages)
        if verdict is None or not verdict:
            return request_context
        if verdict.action in STOP_ACTIONS:
            raise LoopDetected(verdict, session=session)
        if verdict.action in TELL_ACTIONS and verdict.recovery_message:
            ctx.enqueue(_recovery_part(verdict))
        return request_context

    async def before_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
    ) -> dict[str, Any]:
        """Refuse a call that would repeat past its limit, before its side effect happens:
        its result is the recovery message; at ``stop`` the run ends."""
        if not self.preflight:
            return args
        session = _session(ctx)
        arguments = call.args if call.args is not None else {}
        verdict = await self._sessions.preflight(session, call.tool_name, arguments)
        if verdict is None or not verdict:
            return args
        if verdict.action in STOP_ACTIONS:
            logger.warning(
                "loop-judge stopped session %s before a call: %s", session, verdict.summary
            )
            raise LoopDetected(verdict, session=session)
        raise SkipToolExecution(verdict.recovery_message or verdict.summary or "loop detected")
