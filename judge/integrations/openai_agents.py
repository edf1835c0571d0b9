"""loop-judge for the OpenAI Agents SDK (``openai-agents``): each model call and each tool
call of a run is checked, through the SDK's own extension points.

- ``RunConfig.call_model_input_filter`` runs right before every model call with the exact
  input items the model will get. `LoopJudge.filter_model_input` converts them (messages,
  ``function_call`` / ``function_call_output`` and the other tool items, call ids kept) to
  the chat messages the tracker reads, runs ``turn_started``, and acts on the verdict: a
  warning (or ``ask_user``) is appended to the model's input as a user message, and kept in
  place on every later call of the run so the model sees one consistent conversation; a
  ``stop`` raises `LoopDetected` out of ``Runner.run``.
- A tool input guardrail (`LoopJudge.tool_guardrail`, added to every function tool by
  `LoopJudge.guard`) asks the tracker's preflight (``check_call``) before each call runs:
  a call that would repeat past its limit is not run, and the model gets the recovery
  message as the call's result (the guardrail's ``reject_content``). The identical call
  stays refused, each refusal one rung higher on the ladder, and at ``stop`` it raises
  `LoopDetected`: a model that insists never runs the tool past its limit.
- `LoopJudge.hooks` (``RunHooks``) does the same preflight for tools that take no guardrail
  (hosted, computer, shell tools), where a hook can only end the run, so it only acts at
  ``stop``.

Usage::

    judge = LoopJudge()                       # or LoopJudge(tracker=LoopTracker(config))
    try:
        result = await Runner.run(judge.guard(agent), task, run_config=judge.run_config())
    except LoopDetected as exc:
        print(exc.verdict.summary)

One `LoopJudge` follows one conversation: reuse it for the follow-up runs of that
conversation (``result.to_input_list()`` plus the next message), make a new one for another.
The run's history must be kept on our side (the default, or a ``session``): with
``previous_response_id`` or ``conversation_id`` the filter sees only the newest items.

The integration never breaks a run because of itself: a history it cannot read is logged
and the model call goes on untouched; judge failures are on the verdict, never raised.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agents import Agent, FunctionTool, RunConfig, RunContextWrapper, RunHooks, Tool
from agents.exceptions import AgentsException
from agents.run_config import CallModelData, ModelInputData
from agents.tool_context import ToolContext
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
)

from judge.config import TrackerConfig
from judge.errors import HistoryError, LoopDetected
from judge.tracker import LoopTracker
from judge.verdict import Action, Verdict

__all__ = [
    "GUARDRAIL_NAME",
    "AgentsLoopDetected",
    "LoopJudge",
    "LoopJudgeHooks",
    "items_to_messages",
]

logger = logging.getLogger("judge.integrations.openai_agents")

GUARDRAIL_NAME = "loop-judge"
# The role our recovery text is sent with: "user" is what the README's own agent loop
# appends, what the tracker recognizes as its recovery message (not a new prompt), and what
# every model accepts between a tool result and the next answer.
NUDGE_ROLE = "user"
# Input items that are one tool call, and the field holding their arguments. Tools without
# a name field (computer, shell, apply_patch) are named by their item type.
_CALL_ARGUMENTS = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "computer_call": "action",
    "shell_call": "action",
    "local_shell_call": "action",
    "apply_patch_call": "operation",
}
_CALL_SUFFIX = "_call"
_OUTPUT_SUFFIX = "_call_output"
# An MCP call carries its call and its result in one item.
_MCP_CALL = "mcp_call"
# Chat roles of the tracker for the SDK's message roles ("developer" is OpenAI's newer
# name for a system message).
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
# What an image or file part of a message reads as: its presence matters, its bytes do not.
_NON_TEXT_PART = "[{kind}]"


class AgentsLoopDetected(LoopDetected, AgentsException):
    """`LoopDetected` as the Agents SDK's own kind of error.

    The SDK passes its own exceptions (``AgentsException``) out of a tool call unchanged
    and wraps any other in a ``UserError``; being both lets a stop raised by the tool
    guardrail or a hook reach the caller of ``Runner.run`` as itself, with the SDK's
    ``run_data`` attached. Catch it as `LoopDetected`.
    """


def _as_dict(item: Any) -> dict[str, Any] | None:
    """An input item as a plain dict (the SDK passes TypedDicts, sometimes pydantic models)."""
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        dumped = dump(exclude_unset=True)
        return dumped if isinstance(dumped, dict) else None
    return None


def _text(content: Any) -> str | None:
    """The text of a message's content or a tool's output (a string or a list of parts)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, Iterable):
        return str(content)
    pieces: list[str] = []
    for part in content:
        data = _as_dict(part)
        if data is None:
            pieces.append(str(part))
        elif isinstance(data.get("text"), str):
            pieces.append(data["text"])
        elif isinstance(data.get("refusal"), str):
            pieces.append(data["refusal"])
        else:
            pieces.append(_NON_TEXT_PART.format(kind=data.get("type", "part")))
    return "\n".join(pieces)


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _tool_call(call_id: Any, name: str, arguments: Any) -> dict[str, Any]:
    return {
        "id": None if call_id is None else str(call_id),
        "type": "function",
        "function": {"name": name, "arguments": _arguments(arguments)},
    }


def items_to_messages(items: Iterable[Any]) -> list[dict[str, Any]]:
    """The SDK's input items as the OpenAI chat messages the tracker reads.

    Messages keep their role and text; tool calls (``function_call``, custom, computer,
    shell, apply-patch, MCP) become an assistant message's ``tool_calls`` with their call
    ids, parallel calls (and the text the model said with them) in one message; outputs
    become ``tool`` messages bound by ``call_id``. Items that are neither (reasoning,
    hosted searches whose results the model never sees as items) are left out.
    """
    messages: list[dict[str, Any]] = []

    def add_call(call: dict[str, Any]) -> None:
        last = messages[-1] if messages else None
        # A model's answer is one text message followed by its calls: one assistant turn.
        if last is not None and last["role"] == "assistant":
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})

    for item in items:
        data = _as_dict(item)
        if data is None:
            continue
        kind = data.get("type")
        if kind in _CALL_ARGUMENTS:
            name = data.get("name") or str(kind).removesuffix(_CALL_SUFFIX)
            add_call(_tool_call(data.get("call_id"), str(name), data.get(_CALL_ARGUMENTS[kind])))
        elif isinstance(kind, str) and kind.endswith(_OUTPUT_SUFFIX):
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": data.get("call_id"),
                    "content": _text(data.get("output")) or "",
                }
            )
        elif kind == _MCP_CALL:
            call_id = data.get("id")
            add_call(_tool_call(call_id, str(data.get("name")), data.get("arguments")))
            result = data.get("error") or data.get("output") or ""
            messages.append({"role": "tool", "tool_call_id": call_id, "content": str(result)})
        elif (kind is None or kind == "message") and data.get("role") in _ROLES:
            messages.append({"role": _ROLES[data["role"]], "content": _text(data.get("content"))})
    return messages


def _item_key(item: Any) -> str:
    """What identifies an input item across model calls of a run, to re-place a nudge."""
    data = _as_dict(item) or {"repr": repr(item)}
    if data.get("call_id") is not None:
        return f"{data.get('type')}:{data['call_id']}"
    return json.dumps(data, sort_keys=True, default=str)


@dataclass(frozen=True)
class _Nudge:
    """A recovery message we added after the run's input item number ``position`` (counted
    without our own items), whose `_item_key` was ``anchor``."""

    position: int
    anchor: str
    item: dict[str, Any]


class LoopJudge:
    """One conversation's loop judge for Agents SDK runs; see the module docstring.

    ``verdicts`` lists every loop verdict it acted on (turns and preflights), oldest first.
    """

    def __init__(
        self,
        tracker: LoopTracker | None = None,
        *,
        config: TrackerConfig | None = None,
        session: str | None = None,
    ) -> None:
        """``tracker`` (or a new one from ``config``, else from ``LOOP_JUDGE_*``);
        ``session`` names the conversation in logs and on `LoopDetected`."""
        if tracker is not None and config is not None:
            raise TypeError("pass tracker= or config=, not both")
        self.tracker = tracker if tracker is not None else LoopTracker(config, name=session)
        self.session = session
        self.verdicts: list[Verdict] = []
        self._nudges: list[_Nudge] = []
        self.tool_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._preflight_guardrail, name=GUARDRAIL_NAME
        )
        """Add to a function tool's ``tool_input_guardrails`` (`guard` does it for all)."""
        self.hooks = LoopJudgeHooks(self)
        """Pass as ``Runner.run(..., hooks=judge.hooks)`` to preflight every tool kind."""

    # -- setup --------------------------------------------------------------------------

    def run_config(self, base: RunConfig | None = None, **kwargs: Any) -> RunConfig:
        """A ``RunConfig`` (``base`` or a new one, with ``kwargs``) whose model input filter
        is ours. A filter already on ``base`` runs first; we see what it produced."""
        config = RunConfig(**kwargs) if base is None else dataclasses.replace(base, **kwargs)
        previous = config.call_model_input_filter
        if previous is None or previous == self.filter_model_input:
            config.call_model_input_filter = self.filter_model_input
        else:

            async def chained(data: CallModelData[Any]) -> ModelInputData:
                result = previous(data)
                filtered = await result if inspect.isawaitable(result) else result
                data.model_data = filtered
                return await self.filter_model_input(data)

            config.call_model_input_filter = chained
        return config

    def guard(self, agent: Agent[Any]) -> Agent[Any]:
        """A clone of ``agent`` whose function tools run `tool_guardrail` first (the
        agent and its tools are not changed; handoff targets are guarded too)."""
        tools: list[Tool] = []
        for tool in agent.tools:
            if isinstance(tool, FunctionTool):
                guarded = copy.copy(tool)
                existing = list(tool.tool_input_guardrails or [])
                if self.tool_guardrail not in existing:
                    existing.append(self.tool_guardrail)
                guarded.tool_input_guardrails = existing
                tools.append(guarded)
            else:
                tools.append(tool)
        handoffs = [self.guard(h) if isinstance(h, Agent) else h for h in agent.handoffs]
        return agent.clone(tools=tools, handoffs=handoffs)

    # -- each model call ----------------------------------------------------------------

    async def filter_model_input(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: one tracker turn per model call."""
        raw = list(data.model_data.input)
        items = self._with_nudges(raw)
        try:
            verdict = await self.tracker.turn_started(items_to_messages(items))
        except HistoryError as exc:
            logger.warning("loop-judge could not read the run's input (%s); not judged", exc)
            return ModelInputData(input=items, instructions=data.model_data.instructions)
        if verdict:
            self._act(verdict)
            if verdict.recovery_message and raw:
                nudge = {"role": NUDGE_ROLE, "content": verdict.recovery_message}
                self._nudges.append(_Nudge(len(raw) - 1, _item_key(raw[-1]), nudge))
                items.append(nudge)
        return ModelInputData(input=items, instructions=data.model_data.instructions)

    def _with_nudges(self, items: list[Any]) -> list[Any]:
        """The input with our earlier recovery messages back where the model read them.

        A run's local history only grows, so a nudge goes back after the same position;
        where the history was rewritten (a trimmed or edited input), after the first item
        with the same identity, else nowhere.
        """
        if not self._nudges:
            return items
        keys = [_item_key(item) for item in items]
        after: dict[int, list[dict[str, Any]]] = {}
        for nudge in self._nudges:
            if nudge.position < len(keys) and keys[nudge.position] == nudge.anchor:
                after.setdefault(nudge.position, []).append(nudge.item)
            elif nudge.anchor in keys:
                after.setdefault(keys.index(nudge.anchor), []).append(nudge.item)
        merged: list[Any] = []
        for position, item in enumerate(items):
            merged.append(item)
            merged.extend(after.get(position, ()))
        return merged

    def _act(self, verdict: Verdict) -> None:
        """Record and log a loop verdict; raise `LoopDetected` when it says stop."""
        self.verdicts.append(verdict)
        if verdict.action is Action.STOP:
            raise AgentsLoopDetected(verdict, session=self.session)

    # -- each tool call -----------------------------------------------------------------

    def preflight(self, name: str, arguments: Any, *, refuse: bool = True) -> Verdict | None:
        """The tracker's preflight for one call; None when all is well or unreadable.
        ``refuse``: the caller will refuse a looping call (`LoopTracker.check_call`)."""
        try:
            verdict = self.tracker.check_call(name, arguments, refuse=refuse)
        except HistoryError as exc:
            logger.warning("loop-judge could not read a call to %r (%s); not judged", name, exc)
            return None
        return verdict if verdict else None

    async def _preflight_guardrail(
        self, data: ToolInputGuardrailData
    ) -> ToolGuardrailFunctionOutput:
        context = data.context
        verdict = self.preflight(context.tool_name, context.tool_arguments)
        if verdict is None:
            return ToolGuardrailFunctionOutput.allow()
        self._act(verdict)
        return ToolGuardrailFunctionOutput.reject_content(
            verdict.recovery_message or verdict.summary or "loop detected", output_info=verdict
        )


class LoopJudgeHooks(RunHooks[Any]):
    """Run hooks that preflight each tool start; a hook cannot refuse a call, so it acts
    only on a ``stop`` (raising `LoopDetected`); turns and warnings are the filter's job."""

    def __init__(self, judge: LoopJudge) -> None:
        self._judge = judge

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        if isinstance(tool, FunctionTool) and self._judge.tool_guardrail in (
            tool.tool_input_guardrails or []
        ):
            return  # the guardrail already asked, before this hook ran
        if isinstance(context, ToolContext):
            name, arguments = context.tool_name, context.tool_arguments
        else:
            name, arguments = tool.name, None
        # A hook cannot refuse the call, which runs whatever we say: a preview only.
        verdict = self._judge.preflight(name, arguments, refuse=False)
        if verdict is not None and verdict.action is Action.STOP:
            self._judge._act(verdict)
