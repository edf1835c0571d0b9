"""The Cursor hook: ``loop-judge hook cursor`` run as Cursor runs it.

Cursor starts each command of ``.cursor/hooks.json`` once per event with the event's JSON
on stdin and reads one JSON object from stdout. The fixtures in tests/data/hooks/cursor/
follow Cursor's hooks reference (cursor.com/docs/hooks, "Reference": the common input
of every hook, then ``preToolUse``, ``postToolUse`` with its JSON-string ``tool_output``,
``postToolUseFailure``, ``stop``, and the older ``beforeShellExecution`` /
``afterShellExecution``); the answers use its output fields (``permission``,
``agent_message``, ``user_message``, ``additional_context``, ``followup_message``). A
denied call runs no post-event; each call has its own ``tool_use_id``.
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
from judge.integrations.claude_code import HookAnswer, HookInputError, answer_raw
from judge.integrations.cursor import cursor_json, is_cursor_payload, to_claude_payload
from judge.verdict import Action
from tests.hooks.test_hook_daemon import Hooks, package, sockets

__all__ = ["package", "sockets"]  # fixtures, used by name

DATA = Path(__file__).resolve().parents[1] / "data" / "hooks" / "cursor"
LOOP_JUDGE = Path(sys.executable).with_name("loop-judge")
# The Cursor-only fields of the common input: never in what the session is fed.
PERSONAL = ("user@example.com", "/home/user/project", "claude-sonnet-4-thinking")


def fixture(name: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    payload.update(changes)
    return payload


def run_cursor_hook(
    payload: Any, state_dir: Path, *, agent: str = "cursor", module: bool = False
) -> dict[str, Any]:
    """One event, one process, as Cursor runs it: exit 0, one JSON object on stdout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[DAEMON_ENV] = "off"
    command = (
        [sys.executable, "-m", "judge.hooks", agent] if module else [str(LOOP_JUDGE), "hook", agent]
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
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer


def _denied(answer: dict[str, Any]) -> bool:
    if answer.get("permission") != "deny":
        assert "permission" not in answer, answer
        return False
    assert answer["agent_message"].strip() and answer["user_message"].strip()
    return True


def _looping_session(
    state_dir: Path, session: str, *, failure: bool = False, **run: Any
) -> int | None:
    """The same failing ``npm test`` until it is refused: the call number refused."""
    after = "post_tool_use_failure" if failure else "post_tool_use"
    for n in range(1, 7):
        call = f"toolu_{n:03d}"
        before = run_cursor_hook(
            fixture("pre_tool_use", conversation_id=session, tool_use_id=call), state_dir, **run
        )
        if _denied(before):
            return n
        assert before == {}
        answer = run_cursor_hook(
            fixture(after, conversation_id=session, tool_use_id=call), state_dir, **run
        )
        # A repeated result is told to the agent where Cursor reads it: postToolUse only.
        assert set(answer) <= (set() if failure else {"additional_context"}), answer
    return None


# -- the payloads and answers ---------------------------------------------------------


def test_pre_tool_use_is_a_claude_code_pre_tool_use() -> None:
    payload = to_claude_payload(fixture("pre_tool_use"))
    assert payload == {
        "hook_event_name": "PreToolUse",
        "session_id": "7c1e4b2a-9d3f-4e55-8a61-2f0b9c8d7e41",
        "tool_name": "Shell",
        # The directory is dropped: postToolUse's input lacks it, and the call before
        # and after must be one call.
        "tool_input": {"command": "npm test"},
        "tool_use_id": "toolu_001",
    }
    assert not any(value in json.dumps(payload) for value in PERSONAL)


def test_tool_output_is_decoded_as_a_command_response() -> None:
    payload = to_claude_payload(fixture("post_tool_use"))
    assert payload["hook_event_name"] == "PostToolUse"
    assert payload["tool_response"]["exitCode"] == 1
    assert payload["tool_response"]["stdout"].startswith("FAIL src/sum.test.ts")
    # Text that is not JSON stays the text it is.
    plain = to_claude_payload(fixture("post_tool_use", tool_output="3 passed"))
    assert plain["tool_response"] == "3 passed"


def test_failures_carry_their_error_and_denials_are_not_fed() -> None:
    failed = to_claude_payload(fixture("post_tool_use_failure"))
    assert failed["hook_event_name"] == "PostToolUseFailure"
    assert failed["error"].startswith("Command failed with exit code 1")
    timeout = to_claude_payload(
        fixture("post_tool_use_failure", failure_type="timeout", error_message="after 30s")
    )
    assert timeout["error"] == "timed out: after 30s"
    denied = to_claude_payload(fixture("post_tool_use_failure", failure_type="permission_denied"))
    assert denied["hook_event_name"] == "postToolUseFailure"  # answered by nothing
    assert "tool_name" not in denied and "error" not in denied


def test_stop_asks_for_one_follow_up_and_never_after_an_abort() -> None:
    assert to_claude_payload(fixture("stop"))["stop_hook_active"] is False
    assert to_claude_payload(fixture("stop", loop_count=1))["stop_hook_active"] is True
    assert to_claude_payload(fixture("stop", status="aborted"))["stop_hook_active"] is True
    assert to_claude_payload(fixture("stop", status="error"))["stop_hook_active"] is True


def test_shell_events_of_older_releases_are_the_same_shell_call() -> None:
    before = to_claude_payload(fixture("before_shell_execution"))
    after = to_claude_payload(fixture("after_shell_execution"))
    assert before["hook_event_name"] == "PreToolUse"
    assert after["hook_event_name"] == "PostToolUse"
    assert before["tool_name"] == after["tool_name"] == "Shell"
    assert before["tool_input"] == after["tool_input"] == {"command": "npm test"}
    assert after["tool_response"].startswith("FAIL src/sum.test.ts")


def test_answers_use_cursors_fields() -> None:
    deny = HookAnswer("PreToolUse", Action.WARN, deny_reason="loop", system_message="denied")
    assert cursor_json(deny, "preToolUse") == {
        "permission": "deny",
        "agent_message": "loop",
        "user_message": "denied",
    }
    stop = HookAnswer("PreToolUse", Action.STOP, deny_reason="loop", stop_reason="stopped")
    assert cursor_json(stop, "beforeShellExecution") == {
        "permission": "deny",
        "agent_message": "loop",
        "user_message": "stopped",
    }
    context = HookAnswer("PostToolUse", Action.WARN, context="again", system_message="x")
    assert cursor_json(context, "postToolUse") == {"additional_context": "again"}
    # afterShellExecution reads no output: nothing to say there.
    assert cursor_json(context, "afterShellExecution") == {}
    block = HookAnswer("Stop", Action.WARN, block_reason="loop", system_message="x")
    assert cursor_json(block, "stop") == {"followup_message": "loop"}
    assert cursor_json(HookAnswer("Stop"), "stop") == {}


def test_each_fixture_gets_no_opinion(tmp_path: Path) -> None:
    for path in sorted(DATA.glob("*.json")):
        out, err = answer_raw(path.read_bytes(), state_dir=tmp_path, agent="cursor")
        assert (out, err) == ("{}\n", ""), path.name


def test_malformed_input_is_a_clear_error_and_lets_the_call_through(tmp_path: Path) -> None:
    cases = {
        b"not json": "JSONDecodeError",
        b"[1, 2]": "must be a JSON object",
        json.dumps({"hook_event_name": "preToolUse", "tool_name": "Shell"}).encode(): (
            "'conversation_id' must be a non-empty string"
        ),
        json.dumps({"conversation_id": "c", "tool_name": "Shell"}).encode(): (
            "no 'hook_event_name'"
        ),
        json.dumps(fixture("before_shell_execution", command=None)).encode(): (
            "'command' must be a non-empty string"
        ),
        json.dumps(fixture("pre_tool_use", tool_name=7)).encode(): "'tool_name'",
    }
    for raw, expected in cases.items():
        out, err = answer_raw(raw, state_dir=tmp_path, agent="cursor")
        # "{}" and exit 0: Cursor lets the call through, even for a hook set to fail closed.
        assert out == "{}\n", raw
        assert err.startswith("loop-judge hook: ignored (") and expected in err, (raw, err)
        assert "user@example.com" not in err
    with pytest.raises(HookInputError):
        to_claude_payload({"hook_event_name": "stop"})


@pytest.mark.slow
def test_the_claude_code_hook_answers_cursors_payloads_in_cursors_fields(tmp_path: Path) -> None:
    """Cursor also runs .claude/settings.json hooks, with its own payloads."""
    assert is_cursor_payload(fixture("pre_tool_use"))
    assert not is_cursor_payload({"session_id": "s", "hook_event_name": "PreToolUse"})
    refused = _looping_session(tmp_path, "via-claude-code", agent="claude-code")
    assert refused is not None and 3 <= refused <= 4, refused


# -- sessions, one process per event --------------------------------------------------


@pytest.mark.slow
def test_looping_session_is_refused_by_the_fourth_call(tmp_path: Path) -> None:
    refused = _looping_session(tmp_path, "cursor-loop")
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_looping_session_of_failures_through_python_m(tmp_path: Path) -> None:
    refused = _looping_session(tmp_path, "cursor-loop-m", failure=True, module=True)
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_looping_session_with_the_older_shell_events(tmp_path: Path) -> None:
    session, refused = "cursor-shell-loop", None
    for n in range(1, 7):
        before = run_cursor_hook(
            fixture("before_shell_execution", conversation_id=session), tmp_path
        )
        if _denied(before):
            refused = n
            break
        assert before == {}
        after = fixture("after_shell_execution", conversation_id=session)
        assert run_cursor_hook(after, tmp_path) == {}
    assert refused is not None and 3 <= refused <= 4, refused


@pytest.mark.slow
def test_productive_session_is_never_refused(tmp_path: Path) -> None:
    session = "cursor-productive"
    for n in range(8):
        call = f"toolu_{n:03d}"
        if n % 2:
            tool, tool_input = "Write", {"file_path": f"src/m{n}.ts", "contents": f"export {n}"}
            output = json.dumps({"success": True, "path": f"src/m{n}.ts"})
        else:
            tool, tool_input = "Shell", {"command": f"npm test -- src/t{n}.test.ts"}
            output = json.dumps({"exitCode": 0, "stdout": f"Tests: {n + 1} passed"})
        fields = {"conversation_id": session, "tool_use_id": call, "tool_name": tool}
        before = run_cursor_hook(fixture("pre_tool_use", **fields, tool_input=tool_input), tmp_path)
        assert before == {}
        after = fixture("post_tool_use", **fields, tool_input=tool_input, tool_output=output)
        assert run_cursor_hook(after, tmp_path) == {}
    assert run_cursor_hook(fixture("stop", conversation_id=session), tmp_path) == {}


@pytest.mark.slow
def test_a_stop_after_a_loop_never_asks_twice(tmp_path: Path) -> None:
    """Cursor's stop carries no final text, so the stop's own turn has nothing new; what
    it may say is a follow-up, and never once Cursor says it already followed one up."""
    session = "cursor-stop"
    for n in range(1, 4):
        call = f"toolu_{n:03d}"
        fields = {"conversation_id": session, "tool_use_id": call}
        run_cursor_hook(fixture("pre_tool_use", **fields), tmp_path)
        run_cursor_hook(fixture("post_tool_use_failure", **fields), tmp_path)
    first = run_cursor_hook(fixture("stop", conversation_id=session), tmp_path)
    assert set(first) <= {"followup_message"}, first
    again = run_cursor_hook(fixture("stop", conversation_id=session, loop_count=1), tmp_path)
    assert again == {}
    aborted = run_cursor_hook(fixture("stop", conversation_id=session, status="aborted"), tmp_path)
    assert aborted == {}


class CursorHooks(Hooks):
    """The daemon tests' runner, as Cursor's command."""

    def command(self, state_dir: Path) -> list[str]:
        return [sys.executable, "-m", "judge.hooks", "cursor", "--state-dir", str(state_dir)]


def _play(hooks: Hooks, state_dir: Path, session: str) -> list[str]:
    """A looping session's answers, event by event, as the process printed them."""
    answers = []
    for n in range(1, 6):
        call = f"toolu_{n:03d}"
        for name in ("pre_tool_use", "post_tool_use"):
            out, err = hooks(fixture(name, conversation_id=session, tool_use_id=call), state_dir)
            assert err == ""
            answers.append(out)
    out, err = hooks(fixture("stop", conversation_id=session), state_dir)
    assert err == ""
    return [*answers, out]


@pytest.mark.slow
def test_the_daemon_answers_as_the_process_does(
    package: Path, sockets: Path, tmp_path: Path
) -> None:
    hooks = CursorHooks(package, sockets, tmp_path)
    hooks.start(tmp_path / "warm")
    warm = _play(hooks, tmp_path / "daemon", "cursor-daemon")
    assert all("by the daemon" in how for how in hooks.how[-len(warm) :]), hooks.how
    cold = _play(
        CursorHooks(package, sockets, tmp_path, **{DAEMON_ENV: "off"}),
        tmp_path / "cold",
        "cursor-daemon",
    )
    assert warm == cold
    assert any('"permission": "deny"' in out for out in warm)
