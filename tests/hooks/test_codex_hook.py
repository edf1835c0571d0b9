"""The Codex hook: ``loop-judge hook codex`` run as Codex runs it.

Codex starts the hook command once per event with the event's JSON on stdin and reads
Claude Code's output shapes from stdout (openai/codex: codex-rs/hooks/schema/generated/
pre-tool-use, post-tool-use and stop ``.command.input.schema.json`` for the fixtures in
tests/data/hooks/codex/, codex-rs/hooks/src/engine/output_parser.rs for what an answer
may hold: a PreToolUse output with ``continue: false`` or ``stopReason`` is rejected as
a whole). A denied call runs no PostToolUse; each call has its own ``tool_use_id``.
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
from judge.integrations.claude_code import HookAnswer, answer_raw
from judge.integrations.codex import codex_json, to_claude_payload
from judge.verdict import Action
from tests.hooks.test_hook_daemon import Hooks, package, sockets

__all__ = ["package", "sockets"]  # fixtures, used by name

DATA = Path(__file__).resolve().parents[1] / "data" / "hooks" / "codex"
LOOP_JUDGE = Path(sys.executable).with_name("loop-judge")


def fixture(name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    payload.update(changes)
    return payload


def run_codex_hook(payload: Any, state_dir: Path, *, module: bool = False) -> dict[str, Any]:
    """One event, one process, as Codex runs it: exit 0, and JSON or nothing on stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[DAEMON_ENV] = "off"
    command = (
        [sys.executable, "-m", "judge.hooks", "codex"]
        if module
        else [str(LOOP_JUDGE), "hook", "codex"]
    )
    proc = subprocess.run(
        [*command, "--state-dir", str(state_dir)],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b"", proc.stderr
    answer: dict[str, Any] = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return answer


def _denied(answer: dict[str, Any]) -> bool:
    specific = answer.get("hookSpecificOutput", {})
    if specific.get("permissionDecision") != "deny":
        return False
    # Codex drops a PreToolUse answer that holds either.
    assert "continue" not in answer and "stopReason" not in answer
    assert specific["permissionDecisionReason"].strip()
    return True


def _looping_session(state_dir: Path, session: str, *, module: bool = False) -> int | None:
    for n in range(1, 7):
        call = f"call_{n:03d}"
        before = run_codex_hook(
            fixture("pre_tool_use", session_id=session, tool_use_id=call), state_dir, module=module
        )
        if _denied(before):
            return n
        assert before == {}
        run_codex_hook(
            fixture("post_tool_use", session_id=session, tool_use_id=call), state_dir, module=module
        )
    return None


def test_payloads_keep_claude_code_shapes_without_the_rollout() -> None:
    payload = to_claude_payload(fixture("post_tool_use"))
    assert "transcript_path" not in payload
    assert payload["hook_event_name"] == "PostToolUse"
    assert payload["tool_use_id"] == "call_001"


def test_a_denial_that_stops_keeps_the_denial() -> None:
    answer = HookAnswer("PreToolUse", Action.STOP, deny_reason="loop", stop_reason="stopped")
    assert codex_json(answer) == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "loop",
        },
        "systemMessage": "stopped",
    }
    post = HookAnswer("PostToolUse", Action.STOP, context="loop", stop_reason="stopped")
    assert codex_json(post) == post.to_json()


def test_each_fixture_gets_no_answer(tmp_path: Path) -> None:
    for name in ("pre_tool_use", "post_tool_use", "stop"):
        out, err = answer_raw(json.dumps(fixture(name)).encode(), state_dir=tmp_path, agent="codex")
        assert (out, err) == ("", "")


@pytest.mark.slow
def test_looping_session_is_refused_by_the_fourth_call(tmp_path: Path) -> None:
    refused = _looping_session(tmp_path, "codex-loop")
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_looping_session_through_python_m(tmp_path: Path) -> None:
    refused = _looping_session(tmp_path, "codex-loop-m", module=True)
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_productive_session_is_never_refused(tmp_path: Path) -> None:
    session = "codex-productive"
    for n in range(8):
        call, command = f"call_{n:03d}", {"command": f"cargo test --test t{n}"}
        before = run_codex_hook(
            fixture("pre_tool_use", session_id=session, tool_use_id=call, tool_input=command),
            tmp_path,
        )
        assert before == {}
        after = run_codex_hook(
            fixture(
                "post_tool_use",
                session_id=session,
                tool_use_id=call,
                tool_input=command,
                tool_response=f"test result: ok. {n + 1} passed; 0 failed",
            ),
            tmp_path,
        )
        assert after == {}
    assert run_codex_hook(fixture("stop", session_id=session), tmp_path) == {}


class CodexHooks(Hooks):
    """The daemon tests' runner, as Codex's command."""

    def command(self, state_dir: Path) -> list[str]:
        return [sys.executable, "-m", "judge.hooks", "codex", "--state-dir", str(state_dir)]


@pytest.mark.slow
def test_the_daemon_answers_codex(package: Path, sockets: Path, tmp_path: Path) -> None:
    hooks = CodexHooks(package, sockets, tmp_path)
    hooks.start(tmp_path / "warm")
    session, state_dir = "codex-daemon", tmp_path / "daemon"
    refused = None
    for n in range(1, 7):
        call = f"call_{n:03d}"
        out, err = hooks(fixture("pre_tool_use", session_id=session, tool_use_id=call), state_dir)
        assert err == ""
        if out and _denied(json.loads(out)):
            refused = n
            break
        assert out == ""
        hooks(fixture("post_tool_use", session_id=session, tool_use_id=call), state_dir)
    assert refused is not None and 3 <= refused <= 4, refused
    assert "by the daemon" in hooks.how[-1]
