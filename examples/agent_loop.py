"""loop-judge in an agent's loop, end to end, nothing to set up: ``python examples/agent_loop.py``.

The README's example, complete: a scripted coding agent that gets stuck re-running a
failing test, a `LoopTracker` asked at the start of every turn, and the recovery message
appended to the history when a loop is found. The agent reads that message and changes
course, as a model would.

The LLM judge is real code talking to a fake model: an OpenAI-compatible server on
127.0.0.1, started here, that answers every judge request with a fixed assessment. Swap
in a real one by changing two lines (see ``judge_config``), e.g.
``TrackerConfig(fast_model="gemini/gemini-2.5-flash")`` with ``GEMINI_API_KEY`` set.
Nothing leaves this machine. tests/project/test_examples.py runs this file.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio

from judge import Action, LoopTracker, TrackerConfig

TASK = "Fix the failing test in test_app.py"
# The fake judge's answer: low confidence, so only the heuristics call the loop here. A
# real judge finds the loops no heuristic names (an agent that rephrases, plans forever).
JUDGE_CONFIDENCE = 0.2
# Turns before the agent would give up on its own, so the example always ends.
MAX_TURNS = 20


# -- a fake OpenAI-compatible judge model on 127.0.0.1 -----------------------------------


class _JudgeHandler(BaseHTTPRequestHandler):
    """Answers POST /v1/chat/completions with one fixed assessment, counting requests."""

    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI client expects
    requests_seen = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        json.loads(self.rfile.read(length))  # a real request body, or this raises
        type(self).requests_seen += 1
        assessment = {
            "unproductive_state_analysis": "Each step gathers new information.",
            "unproductive_state_confidence": JUDGE_CONFIDENCE,
        }
        body = json.dumps(
            {
                "id": "fake-1",
                "object": "chat.completion",
                "created": 0,
                "model": "fake-judge",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": json.dumps(assessment)},
                    }
                ],
                "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@contextmanager
def fake_judge_server() -> Iterator[str]:
    """Serve the fake judge on a free port of 127.0.0.1; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JudgeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# -- a scripted agent ---------------------------------------------------------------------


class ScriptedAgent:
    """A coding agent that re-runs a failing test until told it is looping, then reads the
    code, fixes it and finishes. Stands in for your model call plus tool execution."""

    def __init__(self) -> None:
        self.done = False
        self.turn = 0
        self.warned = False
        self._plan = ["read", "test", "test", "test", "test", "test"]
        self._fixing = ["read_source", "edit", "test_passes", "answer"]

    async def step(self, history: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One turn: an assistant message and the tool's result, as OpenAI messages."""
        self.turn += 1
        last = history[-1]
        if last["role"] == "user" and "LOOP DETECTED" in str(last["content"]):
            self.warned = True  # the recovery message: change course
        if self.warned and self._fixing:
            action = self._fixing.pop(0)
        elif self._plan:
            action = self._plan.pop(0)
        else:
            action = "test"
        if action == "answer" or self.turn >= MAX_TURNS:
            self.done = True
            return [{"role": "assistant", "content": "The test passes now: add() adds."}]
        name, arguments, result = {
            "read": ("read_file", {"path": "test_app.py"}, "assert add(1, 2) == 3"),
            "test": ("run_tests", {"path": "test_app.py"}, "FAILED: assert -1 == 3"),
            "read_source": ("read_file", {"path": "app.py"}, "def add(a, b): return a - b"),
            "edit": ("edit_file", {"path": "app.py", "old": "a - b", "new": "a + b"}, "ok"),
            "test_passes": ("run_tests", {"path": "test_app.py"}, "1 passed"),
        }[action]
        call_id = f"call_{self.turn}"
        call = {"name": name, "arguments": json.dumps(arguments)}
        return [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call_id, "type": "function", "function": call}],
            },
            {"role": "tool", "tool_call_id": call_id, "content": result},
        ]


# -- the loop from the README -------------------------------------------------------------


def judge_config(api_base: str) -> TrackerConfig:
    """The tracker's settings. With a hosted model: drop api_base and api_key, name the
    model (``fast_model="gemini/gemini-2.5-flash"``), and set the provider's key."""
    return TrackerConfig(
        fast_model="openai/fake-judge",
        api_base=api_base,
        api_key="not-needed",
        check_after_turns=2,  # ask the judge early so this short run shows a check
        semantic="off",  # no embedding model needed for this agent
    )


async def run_agent(config: TrackerConfig) -> list[str]:
    """Drive the agent through the tracker; returns what happened, one line per event."""
    tracker = LoopTracker(config)
    agent = ScriptedAgent()
    history: list[dict[str, Any]] = [{"role": "user", "content": TASK}]
    events = []
    judge_calls, judge_errors = 0, 0
    while not agent.done:
        verdict = await tracker.turn_started(history)  # OpenAI chat messages
        judge_calls += len(verdict.judge_calls)
        judge_errors += sum(1 for call in verdict.judge_calls if call.error)
        if verdict:  # truthy only when looping
            events.append(f"turn {verdict.turn}: loop ({verdict.action.value}): {verdict.summary}")
            if verdict.action == Action.STOP:
                break
            history.append({"role": "user", "content": verdict.recovery_message})
        history += await agent.step(history)  # your agent's own turn
    events.append(f"judge calls: {judge_calls}, failed: {judge_errors}")
    events.append(f"finished after {agent.turn} turns: {history[-1]['content']}")
    return events


def main() -> None:
    with fake_judge_server() as api_base:
        for line in anyio.run(run_agent, judge_config(api_base)):
            print(line)
        print(f"fake judge answered {_JudgeHandler.requests_seen} request(s)")


if __name__ == "__main__":
    main()
