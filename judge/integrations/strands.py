"""loop-judge for Strands Agents (``strands-agents``; written against 1.62.0).

`LoopJudgeHooks` is a Strands ``HookProvider`` (``Agent(hooks=[LoopJudgeHooks()])``). It
keeps one tracker per agent (an agent is one conversation: its ``messages``), and:

- on ``BeforeModelCallEvent``, converts ``agent.messages`` (text, ``toolUse`` blocks with
  their ``toolUseId``, ``toolResult`` blocks with their status) to the chat messages the
  tracker reads, only the messages new since the last model call, and runs
  ``turn_started``. A ``warn`` or ``ask_user`` verdict appends the recovery message as a
  text block to the newest user message, the one holding the tool results the loop
  produced: the model reads it right under those results, in this call and every later
  one, and a provider that wants roles to alternate (Bedrock) gets no extra turn. A
  ``stop`` sets the event's ``cancel`` to a text explaining the loop: Strands skips the
  model call and ends the invocation with that text as the final assistant message
  (``stop_reason`` ``end_turn``), and the verdict's kind, action and summary are put in
  the agent's state under ``"loop_judge"`` (``agent.state.get("loop_judge")``, cleared
  when the next invocation starts).
- on ``BeforeToolCallEvent``, asks the tracker's preflight (``check_call``): a call that
  would repeat past its limit is cancelled (``cancel_tool``) with the recovery message as
  its error result; the identical call stays refused, each refusal one rung higher, and
  at ``stop`` the tool does not run and the next model call ends the invocation as above.

Strands wraps an exception raised in a hook in its own ``EventLoopException``, which is why
a stop ends the invocation with an answer rather than with `judge.LoopDetected`.
Loop-judge's own trouble (a store that is down, a message it cannot read) is logged and
the agent goes on unjudged; judge failures are on the verdict, never raised.
"""

from __future__ import annotations

import json
import logging
import uuid
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from strands import Agent
from strands.hooks import (
    BeforeInvocationEvent,
    BeforeModelCallEvent,
    BeforeToolCallEvent,
    HookProvider,
    HookRegistry,
)

from judge.config import TrackerConfig
from judge.history import OBSERVATION_NAME
from judge.integrations._session_turns import STOP_ACTIONS, TELL_ACTIONS, Sessions
from judge.llm.client import LLMClient
from judge.service.store import SessionStore
from judge.tracker import LoopTracker
from judge.verdict import Origin, Verdict

__all__ = ["STATE_KEY", "LoopJudgeHooks", "messages_to_chat"]

logger = logging.getLogger("judge.integrations.strands")

# The key of the agent state (``agent.state``) that holds a stop's verdict essentials.
STATE_KEY = "loop_judge"
# A tool result's status when the tool failed (Strands' ToolResultStatus).
ERROR_STATUS = "error"
# The text of a stop when the verdict carries none to show.
STOP_FALLBACK = "Stopped: the agent was looping."
# What a media block of a message reads as: its presence matters, its bytes do not.
_MEDIA_BLOCKS = ("image", "document", "video")


# -- Strands messages -> chat dicts ----------------------------------------------------------


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, sort_keys=True, default=str)


def _result_text(content: Iterable[Mapping[str, Any]]) -> str:
    pieces: list[str] = []
    for block in content:
        if isinstance(block.get("text"), str):
            pieces.append(block["text"])
        elif "json" in block:
            pieces.append(json.dumps(block["json"], sort_keys=True, default=str))
        else:
            pieces.append(next((f"[{kind}]" for kind in _MEDIA_BLOCKS if kind in block), "[part]"))
    return "\n".join(pieces)


def _message_chat(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One Strands message as chat dicts: the model's turn (its text and tool calls), a
    person's message, or tool results (one ``tool`` message each, bound by id)."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for block in message.get("content") or []:
        if "toolUse" in block:
            use = block["toolUse"]
            function = {"name": str(use.get("name", "")), "arguments": _arguments(use.get("input"))}
            calls.append(
                {"id": str(use.get("toolUseId")), "type": "function", "function": function}
            )
        elif "toolResult" in block:
            result = block["toolResult"]
            call_id = str(result.get("toolUseId"))
            text = _result_text(result.get("content") or [])
            if result.get("status") == ERROR_STATUS:
                # The Anthropic block carries the error flag, which the detectors trust
                # over reading the text; the tracker reads both shapes in one history.
                error = {"type": "tool_result", "tool_use_id": call_id, "content": text}
                results.append({"role": "user", "content": [error | {"is_error": True}]})
            else:
                results.append({"role": "tool", "tool_call_id": call_id, "content": text})
        elif isinstance(block.get("text"), str):
            texts.append(block["text"])
        else:
            kind = next((kind for kind in _MEDIA_BLOCKS if kind in block), None)
            if kind is not None:
                texts.append(f"[{kind}]")
        # reasoningContent (the model's private reasoning), cache points and guard
        # markers are not conversation.
    if message.get("role") == "assistant":
        if not (texts or calls):
            return []
        assistant: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) or None}
        if calls:
            assistant["tool_calls"] = calls
        return [assistant]
    chat = list(results)
    for text in texts:
        if results:
            # Text beside tool results is no person's prompt: our recovery message (which
            # the tracker recognizes), or a plugin's note on the results.
            chat.append({"role": "user", "name": OBSERVATION_NAME, "content": text})
        else:
            chat.append({"role": "user", "content": text})
    return chat


def messages_to_chat(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Strands ``agent.messages`` as the chat dicts `LoopTracker.turn_started` reads.

    An assistant message is one assistant turn (its text, its ``toolUse`` blocks as
    ``tool_calls`` with their ids and inputs); each ``toolResult`` is a ``tool`` message
    bound by ``toolUseId`` (``status: "error"`` flagged as an error); a user message's
    text is a person's prompt, except beside tool results, where it is marked as an
    observation. Reasoning is left out; media become a marker naming their kind.
    """
    return [d for message in messages for d in _message_chat(message)]


# -- the hook provider -----------------------------------------------------------------------


def _essentials(verdict: Verdict) -> dict[str, Any]:
    return {
        "kind": verdict.kind.value if verdict.kind else None,
        "action": verdict.action.value,
        "source": verdict.source,
        "confidence": verdict.confidence,
        "pattern": verdict.pattern,
        "summary": verdict.summary,
        "turn": verdict.turn,
    }


def _stop_text(verdict: Verdict) -> str:
    # The text stays in the agent's messages, which the model reads if the conversation
    # goes on: a judge's explanation quotes the judge model's own words, which must never
    # reach the agent, so a judge's stop says only its summary (our facts).
    person = verdict.explanation if verdict.origin is not Origin.LLM else None
    return person or verdict.summary or STOP_FALLBACK


class LoopJudgeHooks(HookProvider):
    """Loop detection for Strands agents: ``Agent(hooks=[LoopJudgeHooks()])``.

    ``config`` is the `TrackerConfig` of every agent's tracker (default: the
    ``LOOP_JUDGE_*`` environment); ``judge_client`` replaces the LLM client (a test
    double); ``store`` keeps the trackers (default: in this process; a
    `judge.service.RedisStore` shares them between replicas, with ``session`` naming the
    conversation, as the store's key must outlive the process); ``preflight=False`` turns
    off the check before each tool call. ``verdicts`` lists every loop verdict acted on,
    oldest first. One provider may serve several agents: each gets its own tracker.
    """

    def __init__(
        self,
        *,
        config: TrackerConfig | None = None,
        judge_client: LLMClient | None = None,
        store: SessionStore | None = None,
        session: str | None = None,
        preflight: bool = True,
    ) -> None:
        self.session = session
        self.preflight = preflight
        self.verdicts: list[Verdict] = []
        self._sessions: Sessions[Mapping[str, Any]] = Sessions(
            _message_chat, logger, store=store, config=config, judge_client=judge_client
        )
        self._keys: weakref.WeakKeyDictionary[Agent, str] = weakref.WeakKeyDictionary()
        # Agents whose invocation a refused call stopped: their next model call ends it.
        self._stopping: weakref.WeakKeyDictionary[Agent, Verdict] = weakref.WeakKeyDictionary()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeInvocationEvent, self.before_invocation)
        registry.add_callback(BeforeModelCallEvent, self.before_model_call)
        registry.add_callback(BeforeToolCallEvent, self.before_tool_call)

    def _key(self, agent: Agent) -> str:
        key = self._keys.get(agent)
        if key is None:
            # Agents are conversations of their own even when they share an agent_id.
            suffix = agent.agent_id if self.session is not None else uuid.uuid4().hex
            key = self._keys[agent] = f"{self.session or agent.agent_id}/{suffix}"
        return key

    def tracker(self, agent: Agent) -> LoopTracker | None:
        """The tracker of ``agent`` (stats, ``override``, ladder); None when unknown, or
        when a ``store`` keeps the trackers."""
        return self._sessions.tracker(self._key(agent))

    def before_invocation(self, event: BeforeInvocationEvent) -> None:
        """A new invocation: a stop recorded for the last one is over."""
        self._stopping.pop(event.agent, None)
        if event.agent.state.get(STATE_KEY) is not None:
            event.agent.state.delete(STATE_KEY)

    async def before_model_call(self, event: BeforeModelCallEvent) -> None:
        """Judge the conversation before each model call; tell the model, or end the run."""
        agent = event.agent
        stopping = self._stopping.pop(agent, None)
        if stopping is not None:
            self._stop(event, stopping)
            return
        messages = agent.messages
        verdict = await self._sessions.turn(self._key(agent), messages)
        if verdict is None or not verdict:
            return
        self.verdicts.append(verdict)
        if verdict.action in STOP_ACTIONS:
            self._stop(event, verdict)
        elif verdict.action in TELL_ACTIONS and verdict.recovery_message:
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "user":
                last["content"].append({"text": verdict.recovery_message})
            else:
                messages.append({"role": "user", "content": [{"text": verdict.recovery_message}]})

    def _stop(self, event: BeforeModelCallEvent, verdict: Verdict) -> None:
        logger.warning("loop-judge stopped %s: %s", self._key(event.agent), verdict.summary)
        event.agent.state.set(STATE_KEY, _essentials(verdict))
        event.cancel = _stop_text(verdict)

    async def before_tool_call(self, event: BeforeToolCallEvent) -> None:
        """Refuse a call that would repeat past its limit, before its side effect happens:
        its result is the recovery message; at ``stop`` the next model call ends the run."""
        if not self.preflight:
            return
        use = event.tool_use
        key = self._key(event.agent)
        verdict = await self._sessions.preflight(key, str(use.get("name")), use.get("input"))
        if verdict is None or not verdict:
            return
        self.verdicts.append(verdict)
        if verdict.action in STOP_ACTIONS:
            self._stopping[event.agent] = verdict
        event.cancel_tool = verdict.recovery_message or verdict.summary or STOP_FALLBACK
