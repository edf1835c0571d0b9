"""The Claude Agent SDK integration, end to end through the real SDK.

`FakeClaudeCLI` is a `claude_agent_sdk` ``Transport`` that plays the Claude Code process
on the other end of the SDK's control protocol: it answers ``initialize`` (and keeps the
``hookCallbackIds`` the SDK registered per event), runs a scripted agent, and for each
tool call sends the ``hook_callback`` control requests Claude Code sends (PreToolUse,
then PostToolUse or PostToolUseFailure, and Stop at the end) and waits for the SDK's
``control_response``. So the SDK's own dispatch (`Query._handle_control_request`) calls
our callbacks with its typed inputs, and converts our ``continue_`` back to ``continue``
on the wire. The fake obeys the answers as Claude Code does: a denied call gets the
reason as its error result, ``continue: false`` ends the run, a blocked Stop goes on.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from claude_agent_sdk import ClaudeAgentOptions, HookMatcher, ResultMessage, query
from claude_agent_sdk._internal.transport import Transport

from judge.integrations.claude_agent_sdk import HOOK_EVENTS, LoopJudgeHooks, loop_judge_hooks
from judge.verdict import Action

pytestmark = pytest.mark.anyio

SESSION = "5d0c7e2a-sdk-session"


@dataclass(frozen=True)
class Call:
    name: str
    input: dict[str, Any]
    result: str
    error: bool = False


@dataclass
class Agent:
    """A scripted model: ``plan`` until it gets loop feedback, then ``recovery``.

    A step is a `Call` or a final text (a str ends the turn with a Stop).
    """

    plan: list[Call | str]
    recovery: list[Call | str] | None = None
    told: bool = False

    def steps(self) -> list[Call | str]:
        return self.recovery if self.told and self.recovery is not None else self.plan


@dataclass
class FakeClaudeCLI(Transport):
    """The Claude Code end of the SDK's stdin/stdout protocol, in memory."""

    agent: Agent
    transcript_path: str = "/nonexistent/transcript.jsonl"
    hook_ids: dict[str, list[str]] = field(default_factory=dict)
    exchanges: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    ended_by_hook: bool = False

    def __post_init__(self) -> None:
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](math.inf)
        self._responses: dict[str, dict[str, Any]] = {}
        self._waiting: dict[str, anyio.Event] = {}
        self._prompted = anyio.Event()
        self._input_ended = anyio.Event()
        self._requests = 0
        self._calls = 0

    # -- Transport ----------------------------------------------------------------------

    async def connect(self) -> None:
        return None

    def is_ready(self) -> bool:
        return True

    async def end_input(self) -> None:
        self._input_ended.set()

    async def close(self) -> None:
        self._input_ended.set()

    async def write(self, data: str) -> None:
        for line in data.splitlines():
            message = json.loads(line)
            kind = message["type"]
            if kind == "control_request" and message["request"]["subtype"] == "initialize":
                for event, matchers in (message["request"]["hooks"] or {}).items():
                    for matcher in matchers:
                        assert matcher["matcher"] is None  # every tool
                        self.hook_ids.setdefault(event, []).extend(matcher["hookCallbackIds"])
                await self._send.send(
                    {
                        "type": "control_response",
                        "response": {
                            "subtype": "success",
                            "request_id": message["request_id"],
                            "response": {"commands": [], "hooks_applied": True},
                        },
                    }
                )
            elif kind == "control_response":
                response = message["response"]
                assert response["subtype"] == "success", response
                self._responses[response["request_id"]] = response["response"]
                self._waiting[response["request_id"]].set()
            elif kind == "user":
                self._prompted.set()

    def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        return self._messages()

    async def _messages(self) -> AsyncIterator[dict[str, Any]]:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run)
            async for message in self._receive:
                yield message

    # -- the agent run ------------------------------------------------------------------

    async def _hook(self, event: str, **fields: Any) -> dict[str, Any]:
        """One hook event through every callback the SDK registered for it."""
        answer: dict[str, Any] = {}
        for callback_id in self.hook_ids.get(event, []):
            self._requests += 1
            request_id = f"cli_req_{self._requests}"
            self._waiting[request_id] = anyio.Event()
            payload = {
                "session_id": SESSION,
                "transcript_path": self.transcript_path,
                "cwd": "/home/dev/app",
                "permission_mode": "default",
                "hook_event_name": event,
                **fields,
            }
            await self._send.send(
                {
                    "type": "control_request",
                    "request_id": request_id,
                    "request": {
                        "subtype": "hook_callback",
                        "callback_id": callback_id,
                        "input": payload,
                        "tool_use_id": fields.get("tool_use_id"),
                    },
                }
            )
            with anyio.fail_after(30):
                await self._waiting[request_id].wait()
            answer.update(self._responses[request_id])
        self.exchanges.append((event, answer))
        if answer:
            self.agent.told = True
        return answer

    async def _run(self) -> None:
        await self._prompted.wait()
        turns = 0
        stop_active = False
        while turns < 40:
            progressed = False
            for step in list(self.agent.steps()):
                turns += 1
                if isinstance(step, str):
                    answer = await self._final(step, stop_active)
                    if answer.get("decision") == "block" and not stop_active:
                        stop_active = True
                        progressed = True
                        break
                    await self._result()
                    return
                before = self.agent.told
                if not await self._tool(step):
                    await self._result()
                    return
                if self.agent.told and not before:
                    progressed = True
                    break  # the model read the feedback: it picks its next step anew
            if not progressed:
                await self._result()
                return

    async def _tool(self, call: Call) -> bool:
        """One call; False when a hook ended the run (``continue: false``)."""
        self._calls += 1
        call_id = f"toolu_01sdk{self._calls:04d}"
        block = {"type": "tool_use", "id": call_id, "name": call.name, "input": call.input}
        await self._send.send(self._assistant([block]))
        fields = {"tool_name": call.name, "tool_input": call.input, "tool_use_id": call_id}
        pre = await self._hook("PreToolUse", **fields)
        if pre.get("continue") is False:
            self.ended_by_hook = True
            return False
        specific = pre.get("hookSpecificOutput", {})
        if specific.get("permissionDecision") == "deny":
            await self._send.send(
                self._tool_result(call_id, specific["permissionDecisionReason"], error=True)
            )
            return True
        if call.error:
            post = await self._hook("PostToolUseFailure", **fields, error=call.result)
        else:
            post = await self._hook(
                "PostToolUse", **fields, tool_response={"stdout": call.result, "stderr": ""}
            )
        await self._send.send(self._tool_result(call_id, call.result, error=call.error))
        if post.get("continue") is False:
            self.ended_by_hook = True
            return False
        return True

    async def _final(self, text: str, stop_active: bool) -> dict[str, Any]:
        await self._send.send(self._assistant([{"type": "text", "text": text}]))
        return await self._hook("Stop", stop_hook_active=stop_active, last_assistant_message=text)

    async def _result(self) -> None:
        await self._send.send(
            {
                "type": "result",
                "subtype": "success",
                "duration_ms": 5,
                "duration_api_ms": 3,
                "is_error": False,
                "num_turns": self._calls,
                "session_id": SESSION,
                "result": "done",
            }
        )
        await self._input_ended.wait()
        self._send.close()

    @staticmethod
    def _assistant(content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "type": "assistant",
            "parent_tool_use_id": None,
            "session_id": SESSION,
            "message": {"role": "assistant", "model": "claude-fake", "content": content},
        }

    @staticmethod
    def _tool_result(call_id: str, text: str, *, error: bool) -> dict[str, Any]:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if error:
            block["is_error"] = True
        return {
            "type": "user",
            "parent_tool_use_id": None,
            "session_id": SESSION,
            "message": {"role": "user", "content": [block]},
        }


async def _run(agent: Agent, hooks: LoopJudgeHooks) -> tuple[FakeClaudeCLI, list[Any]]:
    cli = FakeClaudeCLI(agent)
    options = ClaudeAgentOptions(hooks=hooks.hooks())
    messages = []
    with anyio.fail_after(60):
        async for message in query(prompt="Fix the failing test", options=options, transport=cli):
            messages.append(message)
    return cli, messages


FAILING = Call("Bash", {"command": "pytest tests/test_app.py"}, "Exit code 1\nFAILED test_x", True)


async def test_looping_agent_is_denied_then_stopped() -> None:
    hooks = LoopJudgeHooks()
    cli, messages = await _run(Agent([FAILING] * 10), hooks)
    assert cli.ended_by_hook
    assert isinstance(messages[-1], ResultMessage)
    said = [(event, answer) for event, answer in cli.exchanges if answer]
    assert [event for event, _ in said] == ["PreToolUse"] * 4
    denials = [answer["hookSpecificOutput"] for _, answer in said]
    assert all(d["permissionDecision"] == "deny" for d in denials)
    assert denials[0]["permissionDecisionReason"].startswith("```loop-judge")
    # continue_ in our answer reached Claude Code as "continue", through the SDK.
    assert said[-1][1]["continue"] is False and "continue_" not in said[-1][1]
    assert [a.action for a in hooks.answers] == [
        Action.WARN,
        Action.WARN,
        Action.ASK_USER,
        Action.STOP,
    ]
    session = hooks.session(SESSION)
    assert session is not None and session.tracker.stats.turns == 2  # two calls ran


async def test_productive_agent_is_never_touched() -> None:
    plan: list[Call | str] = [
        Call("Read", {"file_path": "app.py"}, "def total(x): return x"),
        Call("Edit", {"file_path": "app.py", "old_string": "x", "new_string": "x * 2"}, "ok"),
        Call("Bash", {"command": "pytest -q"}, "1 failed, 2 passed", True),
        Call("Edit", {"file_path": "app.py", "old_string": "x * 2", "new_string": "x * 3"}, "ok"),
        Call("Bash", {"command": "pytest -q"}, "3 passed"),
        "All tests pass now.",
    ]
    hooks = LoopJudgeHooks()
    cli, _ = await _run(Agent(plan), hooks)
    assert [answer for _, answer in cli.exchanges if answer] == []
    assert [event for event, _ in cli.exchanges][-1] == "Stop"
    assert not cli.ended_by_hook and hooks.answers == []


async def test_recovered_agent_is_not_stopped() -> None:
    recovery: list[Call | str] = [
        Call("Bash", {"command": "pip install requests"}, "Successfully installed requests"),
        Call("Bash", {"command": "pytest tests/test_app.py"}, "3 passed"),
        "Fixed: requests was missing.",
    ]
    hooks = LoopJudgeHooks()
    cli, _ = await _run(Agent([FAILING] * 10, recovery=recovery), hooks)
    said = [event for event, answer in cli.exchanges if answer]
    assert said == ["PreToolUse"]  # denied once, then never again
    assert cli.exchanges[-1] == ("Stop", {})
    assert not cli.ended_by_hook


async def test_stop_in_a_loop_is_blocked_once() -> None:
    """An agent that ends each turn repeating itself, the SDK's typed Stop inputs given to
    the callback directly (a blocked Stop is what makes the SDK run go on, so a scripted
    run cannot reach the third one): the Stop that shows the loop is blocked with the
    recovery message, the stop after it (stop_hook_active) is not."""
    stuck = "I cannot reach the staging server; the credentials are missing. Retrying."
    hooks = LoopJudgeHooks()
    callback = hooks.callback
    stop_answers = []
    for active in (False, False, False, True):
        stop_answers.append(
            await callback(
                {
                    "session_id": SESSION,
                    "transcript_path": "/nonexistent",
                    "cwd": "/",
                    "hook_event_name": "Stop",
                    "stop_hook_active": active,
                    "last_assistant_message": f"{stuck}",
                },
                None,
                {"signal": None},
            )
        )
    # Typed inputs straight to the callback: the 3rd identical ending is a loop, blocked;
    # the 4th arrives with stop_hook_active and passes with a note for the person.
    assert stop_answers[:2] == [{}, {}]
    assert stop_answers[2]["decision"] == "block"
    assert stop_answers[2]["reason"].startswith("```loop-judge")
    assert "decision" not in stop_answers[3]


async def test_bad_event_is_no_opinion(caplog: pytest.LogCaptureFixture) -> None:
    hooks = LoopJudgeHooks()
    answer = await hooks.callback({"hook_event_name": "PreToolUse"}, None, {"signal": None})  # type: ignore[arg-type]
    assert answer == {}
    assert "session_id" in caplog.text


def test_hooks_cover_every_event_with_one_matcher() -> None:
    hooks = loop_judge_hooks(timeout=5)
    assert set(hooks) == set(HOOK_EVENTS)
    for matchers in hooks.values():
        [matcher] = matchers
        assert isinstance(matcher, HookMatcher)
        assert matcher.matcher is None and matcher.timeout == 5 and len(matcher.hooks) == 1
    with pytest.raises(ValueError, match="max_sessions"):
        LoopJudgeHooks(max_sessions=0)
