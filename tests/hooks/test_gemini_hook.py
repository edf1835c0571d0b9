"""The Gemini CLI hook: ``loop-judge hook gemini`` run as Gemini CLI runs it.

Gemini CLI starts the hook command once per event with the event's JSON on stdin and
reads one JSON object from stdout on exit 0 (its hooks reference: docs/hooks/reference.md
in google-gemini/gemini-cli, https://geminicli.com/docs/hooks/reference). The fixtures
in tests/data/hooks/gemini/ are written from that reference's shapes: the base fields
(``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name``, ``timestamp``), then
``tool_name``/``tool_input`` (BeforeTool), ``tool_response`` with ``llmContent``,
``returnDisplay`` and an optional ``error`` (AfterTool), ``prompt``/``prompt_response``/
``stop_hook_active`` (AfterAgent). A refused call is ``decision: "deny"`` with the
``reason`` the model reads as the tool's error; a denied tool runs no AfterTool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from judge.config import ENV_PREFIX
from judge.hooks.client import DAEMON_ENV
from judge.integrations.claude_code import answer_raw
from judge.integrations.gemini_cli import to_claude_payload
from tests.hooks.test_hook_daemon import Hooks, package, sockets

__all__ = ["package", "sockets"]  # fixtures, used by name

DATA = Path(__file__).resolve().parents[1] / "data" / "hooks" / "gemini"
LOOP_JUDGE = Path(sys.executable).with_name("loop-judge")


def fixture(name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    payload.update(changes)
    return payload


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[DAEMON_ENV] = "off"
    return env


def run_gemini_hook(payload: Any, state_dir: Path, *, module: bool = False) -> dict[str, Any]:
    """One event, one process, as Gemini CLI runs it: exit 0 and one JSON object."""
    command = (
        [sys.executable, "-m", "judge.hooks", "gemini"]
        if module
        else [str(LOOP_JUDGE), "hook", "gemini"]
    )
    proc = subprocess.run(
        [*command, "--state-dir", str(state_dir)],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b"", proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def _looping_session(hook: Any, state_dir: Path, session: str, calls: int = 6) -> int | None:
    """The same failing shell command again and again; the 1-based call refused first."""
    for n in range(1, calls + 1):
        before = hook(fixture("before_tool", session_id=session), state_dir)
        if before.get("decision") == "deny":
            assert before["reason"].strip()
            return n
        assert before == {}
        after = hook(fixture("after_tool_failed_command", session_id=session), state_dir)
        assert after.get("decision") is None
    return None


def test_payloads_map_onto_claude_code_events() -> None:
    before = to_claude_payload(fixture("before_tool"))
    assert before["hook_event_name"] == "PreToolUse"
    assert before["tool_name"] == "run_shell_command"
    assert before["tool_input"] == {"command": "npm test", "description": "Run the test suite"}
    # Gemini's transcript is not Claude Code's JSONL: never handed on to be read.
    assert "transcript_path" not in before
    after = to_claude_payload(fixture("after_tool_failed_command"))
    assert after["hook_event_name"] == "PostToolUse"
    assert after["tool_response"].startswith("Command: npm test")
    failed = to_claude_payload(fixture("after_tool_error"))
    assert failed["hook_event_name"] == "PostToolUseFailure"
    assert failed["error"].startswith("File not found")
    stop = to_claude_payload(fixture("after_agent"))
    assert stop["hook_event_name"] == "Stop"
    assert stop["last_assistant_message"].startswith("The tests pass now")
    assert stop["stop_hook_active"] is False


@pytest.mark.parametrize(
    "name", ["before_tool", "after_tool_failed_command", "after_tool_error", "after_agent"]
)
def test_each_fixture_is_answered_with_json(name: str, tmp_path: Path) -> None:
    out, err = answer_raw(json.dumps(fixture(name)).encode(), state_dir=tmp_path, agent="gemini")
    assert err == ""
    assert json.loads(out) == {}


def test_bad_payload_is_ignored_without_breaking_gemini(tmp_path: Path) -> None:
    out, err = answer_raw(b"not json", state_dir=tmp_path, agent="gemini")
    assert out == ""
    assert err.startswith("loop-judge hook: ignored")


@pytest.mark.slow
def test_looping_session_is_refused_by_the_fourth_call(tmp_path: Path) -> None:
    refused = _looping_session(run_gemini_hook, tmp_path, "gemini-loop")
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_looping_session_through_python_m(tmp_path: Path) -> None:
    def hook(payload: Any, state_dir: Path) -> dict[str, Any]:
        return run_gemini_hook(payload, state_dir, module=True)

    refused = _looping_session(hook, tmp_path, "gemini-loop-m")
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_productive_session_is_never_refused(tmp_path: Path) -> None:
    session = "gemini-productive"
    for n in range(8):
        tool_input = {"command": f"pytest tests/test_{n}.py", "description": f"step {n}"}
        response = {
            "llmContent": f"Command: pytest tests/test_{n}.py\nOutput: {n + 1} passed\n"
            "Exit Code: 0",
            "returnDisplay": f"{n + 1} passed",
        }
        before = run_gemini_hook(
            fixture("before_tool", session_id=session, tool_input=tool_input), tmp_path
        )
        assert before == {}
        after = run_gemini_hook(
            fixture(
                "after_tool_failed_command",
                session_id=session,
                tool_input=tool_input,
                tool_response=response,
            ),
            tmp_path,
        )
        assert after == {}
    assert run_gemini_hook(fixture("after_agent", session_id=session), tmp_path) == {}


class GeminiHooks(Hooks):
    """The daemon tests' runner, as Gemini CLI's command."""

    def command(self, state_dir: Path) -> list[str]:
        return [sys.executable, "-m", "judge.hooks", "gemini", "--state-dir", str(state_dir)]


@pytest.mark.slow
def test_the_daemon_answers_gemini_the_same(package: Path, sockets: Path, tmp_path: Path) -> None:
    hooks = GeminiHooks(package, sockets, tmp_path)
    hooks.start(tmp_path / "warm")

    def hook(payload: Any, state_dir: Path) -> dict[str, Any]:
        out, err = hooks(payload, state_dir)
        assert err == ""
        answer: dict[str, Any] = json.loads(out)
        return answer

    warm = _looping_session(hook, tmp_path / "daemon", "gemini-daemon")
    cold = _looping_session(run_gemini_hook, tmp_path / "cold", "gemini-daemon")
    assert warm == cold
    assert "by the daemon" in hooks.how[-1]
