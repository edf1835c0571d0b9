"""loop-judge for Google's Agent Development Kit (``google-adk``; written against 2.13.0).

`LoopJudgePlugin` is an ADK plugin (``BasePlugin``): registered once on the ``App`` (or the
``Runner``), it applies to every agent of the app, sub-agents and agent tools included,
and keeps one tracker per ADK session, so concurrent conversations never share one.

- ``before_model_callback`` runs before every model request. It converts the session's
  events (``session.events``: user text, ``function_call`` and ``function_response`` parts
  with their ids, the error a tool reported) to the chat messages the tracker reads, only
  the events new since the last request, and runs ``turn_started``. A ``warn`` or
  ``ask_user`` verdict edits the ``LlmRequest``: the recovery message is appended to its
  ``contents`` as a user turn, and put back at the same place in every later request of
  the session, so the model reads one consistent conversation. A ``stop`` returns an
  ``LlmResponse`` instead of calling the model (ADK's documented short circuit): its text
  explains the stop and its ``custom_metadata["loop_judge"]`` holds the verdict's kind,
  action and summary; it becomes the agent's final event, and every later model request of
  the same invocation gets it too, whichever of its agents makes it.
- ``before_tool_callback`` asks the tracker's preflight (``check_call``) before each tool
  runs: a call that would repeat past its limit does not run, and its result is the
  recovery message (a returned dict is ADK's way to answer a call without running it).
  The identical call stays refused, each refusal one rung higher; at ``stop`` the tool
  does not run and the next model request ends the run as above.

Usage::

    app = App(name="coder", root_agent=agent, plugins=[LoopJudgePlugin()])
    runner = Runner(app=app, session_service=InMemorySessionService())

Loop-judge's own trouble (a store that is down, an event it cannot read) is logged and the
agent goes on unjudged; judge failures are on the verdict, never raised. ADK wraps any
exception a plugin raises in a ``RuntimeError``, which is why a stop ends the run with a
response rather than with `judge.LoopDetected`.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from google.adk.agents.callback_context import CallbackContext
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.plugins.base_plugin import BasePlugin
from google.adk.sessions.session import Session
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from judge.config import TrackerConfig
from judge.history import OBSERVATION_NAME
from judge.integrations._session_turns import MAX_SESSIONS, STOP_ACTIONS, TELL_ACTIONS, Sessions
from judge.llm.client import LLMClient
from judge.service.store import SessionStore
from judge.tracker import LoopTracker
from judge.verdict import Origin, Verdict

__all__ = ["METADATA_KEY", "PLUGIN_NAME", "LoopJudgePlugin", "events_to_messages"]

logger = logging.getLogger("judge.integrations.google_adk")

# ADK requires each plugin of a runner to have a unique name.
PLUGIN_NAME = "loop_judge"
# The key under which a stop response's `custom_metadata` holds the verdict's essentials.
METADATA_KEY = "loop_judge"
# Who wrote a person's message: ADK authors user input "user" and every other event with
# the name of the agent that produced it.
USER_AUTHOR = "user"
# The key ADK puts a plain (non-dict) tool return under in a function response: unwrapped,
# the tracker compares the tool's own output, and our refusal reads as the text it is.
RESULT_KEY = "result"
# Keys by which a tool's response says it failed: ADK's own ``{"error": ...}`` (a missing
# tool, a failed call) and the ``status`` field of the ADK docs' tool examples.
ERROR_KEY = "error"
STATUS_KEY = "status"
ERROR_STATUS = "error"
# The text of a stop when the verdict carries none to show.
STOP_FALLBACK = "Stopped: the agent was looping."


# -- ADK events -> chat dicts ----------------------------------------------------------------


def _arguments(value: Any) -> str:
    return json.dumps(value if value is not None else {}, sort_keys=True, default=str)


def _response_text(response: dict[str, Any] | None) -> str:
    if not response:
        return ""
    result = response.get(RESULT_KEY)
    if isinstance(result, str) and len(response) == 1:
        return result
    return json.dumps(response, sort_keys=True, default=str)


def _failed(response: dict[str, Any] | None) -> bool:
    if not response:
        return False
    return ERROR_KEY in response or response.get(STATUS_KEY) == ERROR_STATUS


def _result(response: types.FunctionResponse, call_id: str) -> dict[str, Any]:
    text = _response_text(response.response)
    if _failed(response.response):
        # The Anthropic block carries the error flag, which the detectors trust over
        # reading the text; the tracker reads both shapes in one history.
        block = {"type": "tool_result", "tool_use_id": call_id, "content": text, "is_error": True}
        return {"role": "user", "content": [block]}
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _event_messages(event: Event) -> list[dict[str, Any]]:
    """One session event as chat dicts: the model's turn (its text and calls), a person's
    message, or the results of calls (one ``tool`` message each, bound by call id)."""
    content = event.content
    if event.partial or content is None or not content.parts:
        return []  # a streamed chunk (the whole response follows), or no conversation
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for n, part in enumerate(content.parts):
        if part.thought:
            continue  # the model's private reasoning, not what it said or did
        if part.function_call is not None:
            call = part.function_call
            calls.append(
                {
                    # ADK gives every call an id; a model's own may lack one: the event's
                    # id and the part's place are as unique.
                    "id": call.id or f"{event.id}:{n}",
                    "type": "function",
                    "function": {"name": call.name or "", "arguments": _arguments(call.args)},
                }
            )
        elif part.function_response is not None:
            response = part.function_response
            results.append(_result(response, response.id or f"{event.id}:{n}"))
        elif part.text is not None:
            texts.append(part.text)
        elif part.executable_code is not None:
            code = part.executable_code
            texts.append(f"```{(code.language or '').lower()}\n{code.code or ''}\n```")
        elif part.code_execution_result is not None:
            outcome = part.code_execution_result
            texts.append(f"[{outcome.outcome}] {outcome.output or ''}")
        elif part.inline_data is not None:
            texts.append(f"[{part.inline_data.mime_type or 'data'}]")  # never the bytes
        elif part.file_data is not None:
            texts.append(f"[{part.file_data.mime_type or 'file'} {part.file_data.file_uri}]")
    text = "\n".join(texts)
    messages: list[dict[str, Any]] = []
    if content.role == "model":
        if text or calls:
            assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
    elif text:
        if event.author == USER_AUTHOR:
            messages.append({"role": "user", "content": text})
        else:
            # A user-role turn the framework or an agent wrote (a code result, a
            # confirmation): feedback, never a person's new prompt.
            messages.append({"role": "user", "name": OBSERVATION_NAME, "content": text})
    return messages + results


def events_to_messages(events: list[Event]) -> list[dict[str, Any]]:
    """A session's events as the chat dicts `LoopTracker.turn_started` reads.

    A model turn is one assistant message (its text, its ``function_call`` parts as
    ``tool_calls`` with their ids and arguments); each ``function_response`` is a ``tool``
    message bound by its id (a response with an ``error`` key or ``status: "error"`` is
    flagged as an error); a person's text is a user message; other user-role turns are
    marked as observations. Thoughts and streamed chunks are left out; media become a
    marker naming their type.
    """
    return [d for event in events for d in _event_messages(event)]


# -- the plugin ------------------------------------------------------------------------------


def _session_key(session: Session) -> str:
    # A session id is unique only within its app and user (callers may choose their own).
    return f"{session.app_name}/{session.user_id}/{session.id}"


def _content_key(content: types.Content) -> str:
    return content.model_dump_json(exclude_none=True)


@dataclass(frozen=True)
class _Nudge:
    """A recovery message we put after request content number ``position`` (counted
    without our own), whose `_content_key` was ``anchor``; the session event it followed
    is ``event_id``."""

    position: int
    anchor: str
    event_id: str
    content: types.Content


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


def _stop_response(verdict: Verdict) -> LlmResponse:
    # The response stays in the session, which the model reads if the conversation goes
    # on: a judge's explanation quotes the judge model's own words, which must never reach
    # the agent, so a judge's stop says only its summary (our facts).
    person = verdict.explanation if verdict.origin is not Origin.LLM else None
    text = person or verdict.summary or STOP_FALLBACK
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        custom_metadata={METADATA_KEY: _essentials(verdict)},
    )


class LoopJudgePlugin(BasePlugin):
    """Loop detection for every agent of an ADK app; see the module docstring.

    ``config`` is the `TrackerConfig` of every session's tracker (default: the
    ``LOOP_JUDGE_*`` environment); ``judge_client`` replaces the LLM client (a test
    double); ``store`` keeps the trackers (default: in this process, 10,000 sessions, least
    recently used forgotten; a `judge.service.RedisStore` shares them between replicas);
    ``preflight=False`` turns off the check before each tool call. ``verdicts`` lists every
    loop verdict acted on, oldest first.
    """

    def __init__(
        self,
        *,
        name: str = PLUGIN_NAME,
        config: TrackerConfig | None = None,
        judge_client: LLMClient | None = None,
        store: SessionStore | None = None,
        preflight: bool = True,
    ) -> None:
        super().__init__(name=name)
        self.preflight = preflight
        self.verdicts: list[Verdict] = []
        self._sessions: Sessions[Event] = Sessions(
            self._convert, logger, store=store, config=config, judge_client=judge_client
        )
        # Per session, the recovery messages shown so far; and, by session event id, the
        # texts shown right after that event (what the tracker reads back in the history).
        self._nudges: OrderedDict[str, list[_Nudge]] = OrderedDict()
        self._after_event: dict[str, list[str]] = {}
        # Invocations a stop ended, with the verdict: their later model requests get the
        # same stop. Cleared when the invocation's run ends.
        self._stopped: dict[str, Verdict] = {}

    def tracker(self, session: Session) -> LoopTracker | None:
        """The tracker of an ADK ``session`` (stats, ``override``, ladder); None when
        unknown, or when a ``store`` keeps the trackers."""
        return self._sessions.tracker(_session_key(session))

    def _convert(self, event: Event) -> list[dict[str, Any]]:
        messages = _event_messages(event)
        for text in self._after_event.get(event.id, ()):
            messages.append({"role": "user", "content": text})
        return messages

    # -- each model request --------------------------------------------------------------

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Judge the session before each model request; tell the model, or end the run."""
        stopped = self._stopped.get(callback_context.invocation_id)
        if stopped is not None:
            return _stop_response(stopped)
        session = callback_context.session
        key = _session_key(session)
        self._replace_nudges(key, llm_request)
        events = list(session.events)
        verdict = await self._sessions.turn(key, events)
        if verdict is None or not verdict:
            return None
        self.verdicts.append(verdict)
        if verdict.action in STOP_ACTIONS:
            self._stopped[callback_context.invocation_id] = verdict
            logger.warning("loop-judge stopped session %s: %s", key, verdict.summary)
            return _stop_response(verdict)
        if verdict.action in TELL_ACTIONS and verdict.recovery_message and events:
            self._tell(key, llm_request, events[-1].id, verdict.recovery_message)
        return None

    def _tell(self, key: str, llm_request: LlmRequest, event_id: str, text: str) -> None:
        contents = llm_request.contents
        nudges = self._nudges.setdefault(key, [])
        ours = {id(nudge.content) for nudge in nudges}
        theirs = [c for c in contents if id(c) not in ours]
        position = len(theirs)
        anchor = _content_key(theirs[-1]) if theirs else ""
        content = types.Content(role="user", parts=[types.Part(text=text)])
        nudges.append(_Nudge(position, anchor, event_id, content))
        self._nudges.move_to_end(key)
        self._after_event.setdefault(event_id, []).append(text)
        contents.append(content)
        while len(self._nudges) > MAX_SESSIONS:
            _, forgotten = self._nudges.popitem(last=False)
            for nudge in forgotten:
                self._after_event.pop(nudge.event_id, None)

    def _replace_nudges(self, key: str, llm_request: LlmRequest) -> None:
        """Put the session's earlier recovery messages back where the model read them.

        ADK builds each request anew from the session's events, which only grow, so a
        nudge goes back after the same position; where the contents were rewritten (a
        compacted history, another agent's view), after the first content with the same
        identity, else nowhere.
        """
        nudges = self._nudges.get(key)
        if not nudges:
            return
        contents = llm_request.contents
        keys: list[str] | None = None
        after: dict[int, list[types.Content]] = {}
        for nudge in nudges:
            at = nudge.position - 1
            if 0 <= at < len(contents) and _content_key(contents[at]) == nudge.anchor:
                after.setdefault(at, []).append(nudge.content)
                continue
            if keys is None:
                keys = [_content_key(content) for content in contents]
            if nudge.anchor in keys:
                after.setdefault(keys.index(nudge.anchor), []).append(nudge.content)
        if not after:
            return
        merged: list[types.Content] = []
        for position, content in enumerate(contents):
            merged.append(content)
            merged.extend(after.get(position, ()))
        llm_request.contents = merged

    # -- each tool call ------------------------------------------------------------------

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """Refuse a call that would repeat past its limit, before its side effect happens:
        its result is the recovery message; at ``stop`` the next model request ends the run."""
        if not self.preflight:
            return None
        key = _session_key(tool_context.session)
        verdict = await self._sessions.preflight(key, tool.name, tool_args)
        if verdict is None or not verdict:
            return None
        self.verdicts.append(verdict)
        if verdict.action in STOP_ACTIONS:
            self._stopped[tool_context.invocation_id] = verdict
            logger.warning("loop-judge stopped session %s before a call: %s", key, verdict.summary)
        return {RESULT_KEY: verdict.recovery_message or verdict.summary or STOP_FALLBACK}

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """The invocation is over: a stop it had ends with it (the next message of the
        session is a person's, after which the agent may try again)."""
        self._stopped.pop(invocation_context.invocation_id, None)
