"""loop-judge as LangChain v1 agent middleware: the tracker runs before every model call.

LangChain 1.x builds agents on LangGraph with ``create_agent(..., middleware=[...])``; an
`AgentMiddleware`'s ``before_model`` hook runs before each model call with the agent's state
(its ``messages``) and answers with a state update. There `LoopJudgeMiddleware`:

1. converts the state's messages to chat dicts (`to_chat_messages`): ``AIMessage.tool_calls``
   with their ids and parsed arguments, ``ToolMessage.tool_call_id`` (a ``status="error"``
   result flagged as an error), human and system messages as they are;
2. runs the conversation's tracker. The conversation is the agent state's: a key the
   middleware writes into the state on the first model call, so a thread resumed from a
   checkpointer keeps its tracker and escalation ladder, and every checkpointer-less
   ``invoke`` is a conversation of its own;
3. on ``warn`` or ``ask_user``, appends the recovery message to the state as a
   `HumanMessage`: the model reads it in this very call and it stays in the conversation,
   as it would from the README's own agent loop (every provider accepts a user message
   there; a mid-conversation system message is refused by some);
4. on ``stop``, does what LangChain's own limit middlewares do (``ModelCallLimitMiddleware``,
   ``ToolCallLimitMiddleware``): with ``exit_behavior="end"`` (the default) it jumps to the
   end of the run with a final `AIMessage` explaining the loop (its
   ``response_metadata["loop_judge"]`` holds the verdict's kind, action and summary), and
   with ``exit_behavior="error"`` it raises `judge.LoopDetected`, carrying the verdict, out
   of ``invoke``.

A preflight also runs before each tool call (``wrap_tool_call``): a call that would repeat
past its limit does not run, and the model gets the recovery message as the call's
result (a ``ToolMessage`` with ``status="error"``). The identical call stays refused, each
refusal one rung higher; at ``stop`` the run ends before the tool's side effect happens
(``"error"`` raises there, ``"end"`` ends the run at the next model call). Loop-judge's
own trouble (a store that is down, a history it cannot read) is logged and the agent goes
on; judge failures are on the verdict, never raised.

Both ``invoke`` and ``ainvoke`` work: async hooks await the tracker; the sync ones run it
on one event loop of the middleware's own, in a daemon thread started on first use, so a
judge model's connections stay on one loop.

    from langchain.agents import create_agent
    from judge.integrations.langchain import LoopJudgeMiddleware

    agent = create_agent("openai:gpt-5", tools=[...], middleware=[LoopJudgeMiddleware()])
"""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, TypeVar

from langchain.agents.middleware.types import (
    AgentMiddleware,
    AgentState,
    PrivateStateAttr,
    ToolCallRequest,
    hook_config,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import NotRequired

from judge.config import TrackerConfig
from judge.errors import LoopDetected
from judge.history import ROLES
from judge.integrations._session_turns import STOP_ACTIONS, TELL_ACTIONS, Sessions
from judge.llm.client import LLMClient
from judge.service.store import SessionStore
from judge.verdict import Origin, Verdict

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal

__all__ = [
    "METADATA_KEY",
    "ExitBehavior",
    "LoopJudgeMiddleware",
    "LoopJudgeState",
    "to_chat_messages",
]

logger = logging.getLogger("judge.integrations.langchain")

# Where the final AIMessage of a stopped run keeps the verdict's essentials, and the prefix
# of the ids of the messages this middleware adds (so code can tell them apart).
METADATA_KEY = "loop_judge"
MESSAGE_ID_PREFIX = "loop-judge-"
# Stops given by preflights and not yet acted on, kept at most: one per conversation in
# flight, and a stale one (a run that ended first) is dropped by the next request anyway.
MAX_PENDING_STOPS = 1024
# The state key that names the conversation's tracker (private: not in the agent's input
# or output schema, but checkpointed with the thread).
SESSION_KEY: Final = "loop_judge_session"
# The event loop of the sync hooks: asyncio, which litellm and LangGraph need.
PORTAL_BACKEND = "asyncio"
PORTAL_THREAD_NAME = "loop-judge-langchain"

ExitBehavior = Literal["end", "error"]
_EXIT_BEHAVIORS: tuple[str, ...] = ("end", "error")
_T = TypeVar("_T")


class LoopJudgeState(AgentState[Any]):
    """The agent state with the key of this conversation's tracker."""

    loop_judge_session: NotRequired[Annotated[str, PrivateStateAttr]]


# -- LangChain messages -> chat dicts -----------------------------------------------------


def _assistant(message: AIMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": "assistant", "content": str(message.text)}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                # Parsed arguments: the tracker canonicalizes them, key order never matters.
                "function": {"name": call["name"], "arguments": call["args"]},
            }
            for call in message.tool_calls
        ]
    return out


def _tool_result(message: ToolMessage) -> dict[str, Any]:
    text = str(message.text)
    if message.status == "error":
        # The Anthropic block carries the tool's own error flag, which the detectors trust
        # over reading the text; the tracker reads both shapes in one history.
        block = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": text,
            "is_error": True,
        }
        return {"role": "user", "content": [block]}
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": text}


def _chat(message: BaseMessage) -> list[dict[str, Any]]:
    if isinstance(message, AIMessage):
        return [_assistant(message)]
    if isinstance(message, ToolMessage):
        return [_tool_result(message)]
    if isinstance(message, HumanMessage):
        return [{"role": "user", "content": str(message.text)}]
    if isinstance(message, SystemMessage):
        return [{"role": "system", "content": str(message.text)}]
    if isinstance(message, FunctionMessage):
        return [{"role": "function", "name": message.name, "content": str(message.text)}]
    if isinstance(message, ChatMessage):
        role = message.role if message.role in ROLES else "user"
        return [{"role": role, "content": str(message.text)}]
    return []


def to_chat_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as the chat dicts `LoopTracker.turn_started` reads.

    ``AIMessage`` -> assistant (text, and ``tool_calls`` with ids and parsed arguments),
    ``ToolMessage`` -> tool result under its ``tool_call_id`` (``status="error"`` flagged),
    ``HumanMessage`` -> user, ``SystemMessage`` -> system, ``ChatMessage`` by its role, the
    legacy ``FunctionMessage`` -> function. Other message types carry no conversation.
    """
    return [d for message in messages for d in _chat(message)]


# -- the sync hooks' event loop -------------------------------------------------------------


class _Portal:
    """One event loop in a daemon thread for the sync hooks, started on first use.

    Kept apart from the middleware so its finalizer can hold the portal without keeping
    the middleware alive.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._manager: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None

    def run(self, func: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        with self._lock:
            if self._portal is None:
                # Imported here: only sync agents pay for anyio's thread machinery.
                from anyio.from_thread import start_blocking_portal

                manager = start_blocking_portal(PORTAL_BACKEND, name=PORTAL_THREAD_NAME)
                self._portal = manager.__enter__()
                self._manager = manager
            portal = self._portal
        result: _T = portal.call(func)
        return result

    def close(self) -> None:
        with self._lock:
            manager, self._manager, self._portal = self._manager, None, None
        if manager is not None:
            try:
                manager.__exit__(None, None, None)
            except RuntimeError as exc:  # the loop already died (interpreter shutdown)
                logger.debug("loop-judge portal did not stop cleanly: %s", exc)


# -- the middleware ---------------------------------------------------------------------------


def _stop_message(verdict: Verdict) -> AIMessage:
    # The message stays in the thread, which the model reads if it is resumed: a judge's
    # explanation quotes the judge model's own words, which must never reach the agent,
    # so a judge's stop says only its summary (our facts).
    person = verdict.explanation if verdict.origin is not Origin.LLM else None
    text = person or verdict.summary or "Stopped: the agent was looping."
    essentials = {
        "kind": verdict.kind.value if verdict.kind else None,
        "action": verdict.action.value,
        "source": verdict.source,
        "confidence": verdict.confidence,
        "summary": verdict.summary,
        "turn": verdict.turn,
    }
    return AIMessage(
        content=text,
        id=f"{MESSAGE_ID_PREFIX}{uuid.uuid4().hex}",
        response_metadata={METADATA_KEY: essentials},
    )


class LoopJudgeMiddleware(AgentMiddleware[LoopJudgeState, Any, Any]):
    """Loop detection for a LangChain agent, as ``create_agent(..., middleware=[...])`` takes it.

    ``config`` is the `TrackerConfig` of every conversation's tracker (default: the
    ``LOOP_JUDGE_*`` environment, heuristics only unless a judge model is set);
    ``judge_client`` replaces the LLM client (a test double); ``store`` keeps the trackers
    (default: in this process; a `judge.service.RedisStore` shares them between replicas);
    ``exit_behavior`` is what a stop verdict does: ``"end"`` the run with a final message,
    or raise ``"error"`` (`judge.LoopDetected`).
    """

    state_schema = LoopJudgeState

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        judge_client: LLMClient | None = None,
        store: SessionStore | None = None,
        exit_behavior: ExitBehavior = "end",
    ) -> None:
        super().__init__()
        if exit_behavior not in _EXIT_BEHAVIORS:
            raise ValueError(f"exit_behavior must be 'end' or 'error', got {exit_behavior!r}")
        self._sessions = Sessions(
            _chat, logger, store=store, config=config, judge_client=judge_client
        )
        self.exit_behavior: ExitBehavior = exit_behavior
        # Stop verdicts given by a preflight (a tool call cannot end the run itself), by
        # session, with the id of the refusal's ToolMessage: the next model call of that
        # session ends the run with it, if that refusal is what the model would read now
        # (a run that ended otherwise, at its recursion limit, leaves a stale one behind,
        # which a later request must not act on). Bounded: a checkpointer-less session
        # that ends that way never comes back.
        self._stops: OrderedDict[str, tuple[Verdict, str]] = OrderedDict()
        self._portal = _Portal()
        weakref.finalize(self, self._portal.close)

    # -- before each model call ---------------------------------------------------------

    async def _before_model(self, state: LoopJudgeState) -> dict[str, Any] | None:
        update: dict[str, Any] = {}
        session = state.get(SESSION_KEY)
        if not session:
            session = uuid.uuid4().hex
            update[SESSION_KEY] = session
        stopped = self._stops.pop(session, None)
        messages = state["messages"]
        if stopped is not None and not (
            messages and getattr(messages[-1], "id", None) == stopped[1]
        ):
            stopped = None  # not the run the refusal ended: a later request
        verdict = stopped[0] if stopped else await self._sessions.turn(session, messages)
        if verdict and verdict.action in STOP_ACTIONS:
            if self.exit_behavior == "error":
                raise LoopDetected(verdict, session=session)
            update.update(jump_to="end", messages=[_stop_message(verdict)])
        elif verdict and verdict.action in TELL_ACTIONS and verdict.recovery_message:
            note = HumanMessage(
                content=verdict.recovery_message, id=f"{MESSAGE_ID_PREFIX}{uuid.uuid4().hex}"
            )
            update["messages"] = [note]
        return update or None

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: LoopJudgeState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Judge the conversation before the model call; tell the model, or stop the run."""
        return await self._before_model(state)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: LoopJudgeState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The same for ``invoke``: the tracker runs on the middleware's own event loop."""
        return self._portal.run(lambda: self._before_model(state))

    # -- before each tool call ----------------------------------------------------------

    async def _preflight(self, request: ToolCallRequest) -> ToolMessage | None:
        """The refusal to return instead of running the call, or None to run it."""
        session = request.state.get(SESSION_KEY) if isinstance(request.state, dict) else None
        if not session:
            return None
        call = request.tool_call
        verdict = await self._sessions.preflight(session, call["name"], call["args"])
        if verdict is None or not verdict:
            return None
        if verdict.action in STOP_ACTIONS:
            logger.warning(
                "loop-judge stopped session %s before a call: %s", session, verdict.summary
            )
            if self.exit_behavior == "error":
                raise LoopDetected(verdict, session=session)
        refusal = ToolMessage(
            content=verdict.recovery_message or verdict.summary or "loop detected",
            tool_call_id=call["id"] or "",
            name=call["name"],
            status="error",
            id=f"{MESSAGE_ID_PREFIX}{uuid.uuid4().hex}",
        )
        if verdict.action in STOP_ACTIONS:
            self._stops[session] = (verdict, str(refusal.id))
            while len(self._stops) > MAX_PENDING_STOPS:
                self._stops.popitem(last=False)
        return refusal

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Refuse a call that would repeat past its limit; run every other one."""
        refused = await self._preflight(request)
        return refused if refused is not None else await handler(request)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """The same for ``invoke``."""
        refused = self._portal.run(lambda: self._preflight(request))
        return refused if refused is not None else handler(request)
