"""The Claude Code hook: ``loop-judge hook claude-code`` run as Claude Code runs it.

`FakeClaudeCode` plays Claude Code's side: it writes the session transcript (JSONL entries
of the documented shapes: ``type``/``uuid``/``message`` with Anthropic content blocks,
one line per tool_use, results in user entries) and sends each hook its documented
payload (``session_id``, ``transcript_path``, ``hook_event_name``, ``tool_name``,
``tool_input``, ``tool_use_id``, ``tool_response`` / ``error``, ``stop_hook_active``,
``last_assistant_message``). It obeys the answers: a denied call gets the reason as its
error result and no PostToolUse, ``continue: false`` ends the run, a blocked Stop makes
the agent go on. The main scenarios run the real command in a subprocess; the finer
cases call `handle_payload` in process, which is the same code without the process.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judge.config import ENV_PREFIX
from judge.hooks.client import DAEMON_ENV
from judge.integrations.claude_code import (
    DEFAULT_STATE_DIR_ENV,
    HookAnswer,
    HookInputError,
    HookSessionFiles,
    TranscriptCursor,
    default_state_dir,
    handle_payload,
    read_transcript,
)
from judge.verdict import Action

LOOP_JUDGE = Path(sys.executable).with_name("loop-judge")

Outcome = dict[str, Any]


def _hermetic_env() -> dict[str, str]:
    """The child's environment without the user's LOOP_JUDGE_* settings, answering in
    process: these tests are about the answers; the daemon that gives the same ones
    (started in a temporary socket directory) is tests/hooks/test_hook_daemon.py's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env[DAEMON_ENV] = "off"
    return env


def run_hook(payload: Any, state_dir: Path, *, raw: bytes | None = None) -> tuple[str, str]:
    """Run the command as Claude Code does; returns (stdout, stderr) after checking exit 0."""
    data = raw if raw is not None else json.dumps(payload).encode()
    proc = subprocess.run(
        [str(LOOP_JUDGE), "hook", "claude-code", "--state-dir", str(state_dir)],
        input=data,
        capture_output=True,
        env=_hermetic_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode(), proc.stderr.decode()


def in_process(payload: Any, state_dir: Path) -> tuple[str, str]:
    """The same answer without a process: the JSON the command would print."""
    answer = handle_payload(payload, state_dir=state_dir)
    return (json.dumps(answer.to_json()) + "\n" if answer else ""), ""


Runner = Callable[[Any, Path], tuple[str, str]]


class FakeClaudeCode:
    """One Claude Code session: a transcript file and the hook events of its tool calls."""

    def __init__(self, tmp: Path, runner: Runner, session: str = "9f1c2d3e-session") -> None:
        self.transcript = tmp / "transcript.jsonl"
        self.transcript.write_text("")
        self.state_dir = tmp / "state"
        self.runner = runner
        self.session = session
        self.calls = 0
        self.entries = 0
        self.stopped = False
        self.answers: list[Outcome] = []

    def _write(self, entry_type: str, message: dict[str, Any]) -> None:
        self.entries += 1
        entry = {
            "type": entry_type,
            "uuid": f"uuid-{self.entries}",
            "parentUuid": f"uuid-{self.entries - 1}",
            "sessionId": self.session,
            "isSidechain": False,
            "message": message,
        }
        with self.transcript.open("a") as handle:
            handle.write(json.dumps(entry) + "\n")

    def _hook(self, event: str, **fields: Any) -> Outcome:
        payload = {
            "session_id": self.session,
            "transcript_path": str(self.transcript),
            "cwd": "/home/dev/app",
            "permission_mode": "default",
            "hook_event_name": event,
            **fields,
        }
        out, _ = self.runner(payload, self.state_dir)
        answer = json.loads(out) if out.strip() else {}
        self.answers.append({"event": event, **answer})
        if answer.get("continue") is False:
            self.stopped = True
        return answer

    def prompt(self, text: str) -> None:
        self._write("user", {"role": "user", "content": text})

    def tool(self, name: str, tool_input: dict[str, Any], result: str, *, error: bool = False):
        """One tool call: PreToolUse, then (unless denied) the tool and PostToolUse[Failure].

        The result reaches the transcript after the Post hook ran (Claude Code writes the
        transcript asynchronously), so the hook must take it from the payload.
        """
        self.calls += 1
        call_id = f"toolu_01{self.calls:04d}"
        block = {"type": "tool_use", "id": call_id, "name": name, "input": tool_input}
        self._write(
            "assistant",
            {"id": f"msg_{self.calls}", "role": "assistant", "content": [block]},
        )
        pre = self._hook("PreToolUse", tool_name=name, tool_input=tool_input, tool_use_id=call_id)
        decision = pre.get("hookSpecificOutput", {}).get("permissionDecision")
        if decision == "deny":
            reason = pre["hookSpecificOutput"]["permissionDecisionReason"]
            self._result(call_id, reason, error=True)
            return pre
        if error:
            post = self._hook(
                "PostToolUseFailure",
                tool_name=name,
                tool_input=tool_input,
                tool_use_id=call_id,
                error=result,
            )
        else:
            post = self._hook(
                "PostToolUse",
                tool_name=name,
                tool_input=tool_input,
                tool_use_id=call_id,
                tool_response={
                    "stdout": result,
                    "stderr": "",
                    "interrupted": False,
                    "isImage": False,
                },
            )
        self._result(call_id, result, error=error)
        return post

    def _result(self, call_id: str, text: str, *, error: bool) -> None:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": text}
        if error:
            block["is_error"] = True
        self._write("user", {"role": "user", "content": [block]})

    def stop(self, text: str, *, active: bool = False) -> Outcome:
        self._write(
            "assistant",
            {"role": "assistant", "content": [{"type": "text", "text": text}]},
        )
        return self._hook("Stop", stop_hook_active=active, last_assistant_message=text)


def _said_anything(answers: list[Outcome]) -> list[Outcome]:
    return [a for a in answers if set(a) != {"event"}]


# -- end to end, through the command --------------------------------------------------------


@pytest.mark.slow
def test_looping_agent_is_denied_then_stopped(tmp_path: Path) -> None:
    """The same failing test run again and again: the 3rd is denied with what to do
    instead, denials climb the ladder (warn, warn, ask the user), and the 4th ends the run."""
    cc = FakeClaudeCode(tmp_path, run_hook)
    cc.prompt("Fix the failing test in app.py")
    command = {"command": "pytest tests/test_app.py -x", "description": "Run the tests"}
    failure = "Exit code 1\nFAILED tests/test_app.py::test_total - assert 41 == 42"
    for _ in range(2):
        assert cc.tool("Bash", command, failure, error=True) == {}
    denials = []
    while not cc.stopped and len(denials) < 6:
        denials.append(cc.tool("Bash", command, failure, error=True))
    assert len(denials) == 4 and cc.stopped
    reasons = [d["hookSpecificOutput"]["permissionDecisionReason"] for d in denials]
    assert all(d["hookSpecificOutput"]["permissionDecision"] == "deny" for d in denials)
    assert "do not call Bash with these arguments again" in reasons[0]
    assert "pytest tests/test_app.py -x" in reasons[0]
    # Each denial is one rung higher, with that rung's own text, as a turn's would be.
    assert [f"(detection {n} of this loop" in r for n, r in enumerate(reasons, 1)] == [True] * 4
    assert "LOOP DETECTED AGAIN" in reasons[1] and "LOOP DETECTED AGAIN" not in reasons[0]
    # The advice matches the rule: run it again after a change, not never.
    assert "until you have changed something it depends on" in reasons[0]
    assert "for the rest of this task" not in " ".join(reasons)
    assert "ask the user" in reasons[2] and "ask the user" not in reasons[1]
    assert "continue" not in denials[2]
    assert denials[3]["continue"] is False
    assert denials[3]["stopReason"].startswith("loop-judge stopped the agent: Bash(")


@pytest.mark.slow
def test_denials_quote_a_command_result_as_text(tmp_path: Path) -> None:
    """Bash's tool_response is a mapping (stdout, stderr, interrupted, isImage): what the
    "already tried" line quotes is the output the model read, not that mapping."""
    cc = FakeClaudeCode(tmp_path, run_hook)
    cc.prompt("Fix the failing test in app.py")
    command = {"command": "pytest -q tests/test_app.py", "description": "Run the tests"}
    output = "F. [100%]\nFAILED tests/test_app.py::test_total - assert 41 == 42\n1 failed"
    answers = [cc.tool("Bash", command, output) for _ in range(6)]
    denied = [a for a in answers if a.get("hookSpecificOutput", {}).get("permissionDecision")]
    assert denied, answers
    reason = denied[0]["hookSpecificOutput"]["permissionDecisionReason"]
    tried = reason.split("Already tried, without progress:")[1]
    assert "-> F. [100%] FAILED tests/test_app.py::test_total" in tried
    assert "isImage" not in reason and "interrupted" not in reason and '"stdout"' not in reason


@pytest.mark.slow
def test_productive_agent_is_never_touched(tmp_path: Path) -> None:
    """Reads, edits and test runs whose output changes, then a stop: no answer at all."""
    cc = FakeClaudeCode(tmp_path, run_hook)
    cc.prompt("Make the total include tax")
    cc.tool("Read", {"file_path": "/home/dev/app/app.py"}, "def total(x):\n    return x\n")
    for step in range(3):
        cc.tool(
            "Edit",
            {
                "file_path": "/home/dev/app/app.py",
                "old_string": f"return x * {step}" if step else "return x",
                "new_string": f"return x * {step + 1}",
            },
            "The file /home/dev/app/app.py has been updated.",
        )
        cc.tool("Bash", {"command": "pytest -q"}, f"{3 - step} failed, {step} passed", error=True)
    cc.tool("Bash", {"command": "pytest -q"}, "4 passed in 0.12s")
    assert cc.stop("Done: total now includes tax and all 4 tests pass.") == {}
    assert _said_anything(cc.answers) == []
    assert not cc.stopped


@pytest.mark.slow
def test_bad_input_and_broken_state_dir_never_break_the_agent(tmp_path: Path) -> None:
    """Not JSON, a payload without session_id, a state dir that is a file: exit 0, nothing
    on stdout, one line on stderr that names the problem."""
    out, err = run_hook(None, tmp_path / "state", raw=b"{not json")
    assert out == "" and err.count("\n") == 1 and err.startswith("loop-judge hook: ignored")
    out, err = run_hook({"hook_event_name": "Stop"}, tmp_path / "state")
    assert out == "" and "'session_id'" in err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    payload = {"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": False}
    out, err = run_hook(payload, blocker)
    assert out == "" and err.startswith("loop-judge hook: ignored (FileExistsError")


@pytest.mark.slow
def test_concurrent_hooks_of_one_session_do_not_corrupt_state(tmp_path: Path) -> None:
    """A parallel tool batch: eight PostToolUse processes at once on one session. Each
    waits its turn for the lock; the state file ends valid, with every call fed once."""
    state_dir = tmp_path / "state"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text(
        json.dumps({"type": "user", "uuid": "u1", "message": {"role": "user", "content": "go"}})
        + "\n"
    )
    procs = []
    for i in range(8):
        payload = {
            "session_id": "parallel",
            "transcript_path": str(transcript),
            "hook_event_name": "PostToolUse",
            "tool_name": "Read",
            "tool_input": {"file_path": f"/src/module_{i}.py"},
            "tool_use_id": f"toolu_par_{i}",
            "tool_response": {"type": "text", "file": {"content": f"# module {i}"}},
        }
        proc = subprocess.Popen(
            [str(LOOP_JUDGE), "hook", "claude-code", "--state-dir", str(state_dir)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_hermetic_env(),
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(payload).encode())
        proc.stdin.close()
        procs.append(proc)
    for proc in procs:
        assert proc.wait(timeout=120) == 0
        assert proc.stdout is not None and proc.stdout.read() == b""
        assert proc.stderr is not None and proc.stderr.read() == b""
    files = sorted(p.name for p in state_dir.iterdir())
    assert files == ["parallel.json", "parallel.lock"]  # no temporary file left behind
    state = HookSessionFiles.load(state_dir / "parallel.json")
    assert state is not None and state.tracker is not None
    assert sorted(state.done_ids) == sorted(f"toolu_par_{i}" for i in range(8))
    assert state.fed == 1 + 2 * 8  # the prompt once, then each call and its result
    assert state.tracker.stats.turns == 8


@pytest.mark.slow
def test_the_hook_path_imports_no_heavy_module(tmp_path: Path) -> None:
    """A hook runs on every tool call: litellm (no judge check is due), opentelemetry,
    numpy and onnxruntime (the semantic detector is off in hooks) stay unimported."""
    payload = {
        "session_id": "imports",
        "transcript_path": str(tmp_path / "none.jsonl"),
        "hook_event_name": "PostToolUse",
        "tool_name": "Read",
        "tool_input": {"file_path": "/a.py"},
        "tool_use_id": "toolu_1",
        "tool_response": "print('a')",
    }
    for command in (
        [sys.executable, "-X", "importtime", "-m", "judge.integrations.claude_code"],
        [sys.executable, "-X", "importtime", "-m", "judge.cli", "hook", "claude-code"],
    ):
        proc = subprocess.run(
            [*command, "--state-dir", str(tmp_path / "state")],
            input=json.dumps(payload).encode(),
            capture_output=True,
            env=_hermetic_env(),
            timeout=120,
        )
        assert proc.returncode == 0 and proc.stdout == b""
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.decode().splitlines()}
        assert "judge.tracker" in imported  # the measurement itself works
        heavy = {"litellm", "opentelemetry", "numpy", "onnxruntime"}
        assert not {name.split(".")[0] for name in imported} & heavy
        # Nor the rest of the CLI: rich, the eval machinery and the other commands.
        assert not {"rich", "judge.cli.app", "judge_eval", "judge_eval.cli.evaluate"} & imported


# -- the same code in process: the finer cases ----------------------------------------------


def test_a_recovered_agent_is_not_stopped(tmp_path: Path) -> None:
    """Denied once, the agent reads the error and fixes its cause: nothing more is said,
    and its final stop goes through."""
    cc = FakeClaudeCode(tmp_path, in_process)
    cc.prompt("Fix the failing test")
    command = {"command": "pytest tests/test_app.py"}
    failure = "Exit code 1\nE   ModuleNotFoundError: No module named 'requests'"
    for _ in range(2):
        cc.tool("Bash", command, failure, error=True)
    denied = cc.tool("Bash", command, failure, error=True)
    assert denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    before = len(cc.answers)
    cc.tool("Bash", {"command": "pip install requests"}, "Successfully installed requests-2.32")
    cc.tool("Bash", command, "3 passed in 0.4s")
    assert cc.stop("The tests pass now: requests was missing.") == {}
    assert _said_anything(cc.answers[before:]) == []
    assert not cc.stopped


def test_a_cycle_gets_context_after_the_repeated_result(tmp_path: Path) -> None:
    """An A-B-A-B-A-B cycle with the same results each round is no exact repeat, so the
    preflight lets each call through; the turn after the result tells Claude."""
    cc = FakeClaudeCode(tmp_path, in_process)
    cc.prompt("Why does the build fail?")
    answers = []
    for _ in range(3):
        answers.append(cc.tool("Read", {"file_path": "/app/setup.cfg"}, "[metadata]\nname = app"))
        answers.append(cc.tool("Bash", {"command": "make build"}, "error: no rule", error=True))
    said = [a for a in answers if a]
    assert said, "the cycle was never flagged"
    first = said[0]
    context = first["hookSpecificOutput"]["additionalContext"]
    assert first["hookSpecificOutput"]["hookEventName"] in ("PostToolUse", "PostToolUseFailure")
    assert context.startswith("```loop-judge") and "LOOP DETECTED" in context
    assert first["systemMessage"].startswith("loop-judge: ")
    assert "permissionDecision" not in first["hookSpecificOutput"]


def test_stop_in_a_loop_is_blocked_once_never_twice(tmp_path: Path) -> None:
    """The agent answers the same words to each nudge: that Stop is blocked with the
    recovery message; the next Stop goes through (stop_hook_active, and our own record)."""
    cc = FakeClaudeCode(tmp_path, in_process)
    cc.prompt("Deploy the app to staging")
    stuck = "I could not deploy: the staging credentials are missing. Let me try again."
    assert cc.stop(stuck) == {}
    cc.prompt("Please continue with the deployment.")
    assert cc.stop(stuck) == {}
    cc.prompt("Please continue with the deployment.")
    blocked = cc.stop(stuck)
    assert blocked["decision"] == "block"
    assert blocked["reason"].startswith("```loop-judge")
    assert "continue" not in blocked
    # Claude Code sends the next Stop with stop_hook_active: never blocked.
    assert "decision" not in cc.stop(stuck, active=True)
    # Even a client that forgets stop_hook_active gets no second block in a row.
    cc.prompt("Please continue with the deployment.")
    assert "decision" not in cc.stop(stuck)


def test_result_comes_from_the_payload_when_the_transcript_lags(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The transcript holds no tool lines at all (written late): the payloads alone still
    catch the repeat, and the late lines, when they come, are not fed twice. The tracker
    reads the history the hook hands it as one growing conversation, never a rewrite."""
    caplog.set_level(logging.INFO, logger="judge.tracker")
    state = tmp_path / "state"
    transcript = tmp_path / "t.jsonl"
    transcript.write_text("")
    base = {"session_id": "lag", "transcript_path": str(transcript)}
    call = {"tool_name": "Grep", "tool_input": {"pattern": "TODO", "path": "/src"}}
    for i in range(2):
        answer = handle_payload(
            {**base, **call, "hook_event_name": "PostToolUseFailure", "tool_use_id": f"t{i}",
             "error": "grep: /src: No such file or directory"},
            state_dir=state,
        )  # fmt: skip
        assert not answer
    lines = []
    for i in range(2):
        use = {"type": "tool_use", "id": f"t{i}", "name": "Grep", "input": call["tool_input"]}
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "x", "is_error": True}
        lines.append({"type": "assistant", "uuid": f"a{i}", "message": {"content": [use]}})
        lines.append({"type": "user", "uuid": f"r{i}", "message": {"content": [result]}})
    transcript.write_text("".join(json.dumps(line) + "\n" for line in lines))
    pre = handle_payload(
        {**base, **call, "hook_event_name": "PreToolUse", "tool_use_id": "t2"}, state_dir=state
    )
    assert pre.action is Action.WARN and pre.deny_reason is not None
    saved = HookSessionFiles.load(state / "lag.json")
    assert saved is not None and saved.fed == 4 and saved.pending == {}
    assert "rewritten" not in caplog.text


def test_transcript_reading_is_incremental_and_survives_truncation(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"uuid": "1"}\nnot json\n{"uuid": "2"}\n{"uuid": "3", "par')
    entries, cursor = read_transcript(str(path), TranscriptCursor())
    assert entries == [{"uuid": "1"}, {"uuid": "2"}]  # the half-written line waits
    with path.open("ab") as handle:
        handle.write(b'tial": true}\n')
    entries, cursor = read_transcript(str(path), cursor)
    assert entries == [{"uuid": "3", "partial": True}]
    assert read_transcript(str(path), cursor) == ([], cursor)
    path.write_bytes(b'{"uuid": "new"}\n')  # truncated and rewritten: read from the start
    entries, _ = read_transcript(str(path), cursor)
    assert entries == [{"uuid": "new"}]
    assert read_transcript(str(tmp_path / "missing.jsonl"), cursor) == ([], cursor)


def test_a_rotated_transcript_is_not_fed_twice(tmp_path: Path) -> None:
    """The transcript replaced by a copy (another inode): entries already read are skipped
    by uuid, so old calls do not come back as repeats."""
    cc = FakeClaudeCode(tmp_path, in_process)
    cc.prompt("List the files")
    cc.tool("Glob", {"pattern": "*.py"}, "app.py\ntests/test_app.py")
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(cc.transcript.read_bytes())
    os.replace(copy, cc.transcript)
    cc.tool("Read", {"file_path": "app.py"}, "print('hi')")
    state = HookSessionFiles.load(cc.state_dir / f"{cc.session}.json")
    assert state is not None and state.fed == 1 + 2 + 2


def test_hook_input_errors_name_the_field() -> None:
    with pytest.raises(HookInputError, match="JSON object"):
        handle_payload([1, 2])
    with pytest.raises(HookInputError, match="'tool_name'"):
        handle_payload({"session_id": "s", "hook_event_name": "PreToolUse"})
    with pytest.raises(HookInputError, match="stop_hook_active"):
        handle_payload({"session_id": "s", "hook_event_name": "Stop", "stop_hook_active": "no"})


def test_other_events_get_no_answer(tmp_path: Path) -> None:
    payload = {"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": "hi"}
    assert not handle_payload(payload, state_dir=tmp_path)


def test_state_dir_default_and_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DEFAULT_STATE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_state_dir() == tmp_path / "cache" / "loop-judge" / "claude-code"
    monkeypatch.setenv(DEFAULT_STATE_DIR_ENV, str(tmp_path / "mine"))
    assert default_state_dir() == tmp_path / "mine"


def test_state_files_are_private_and_old_ones_pruned(tmp_path: Path) -> None:
    payload = {"session_id": "odd id/../x", "hook_event_name": "Stop", "stop_hook_active": False}
    handle_payload(payload, state_dir=tmp_path)
    [state_file] = list(tmp_path.glob("*.json"))
    assert "/" not in state_file.stem and ".." not in state_file.name  # hashed, not a path
    assert state_file.stat().st_mode & 0o077 == 0
    old = time.time() - 8 * 24 * 3600
    os.utime(state_file, (old, old))
    assert HookSessionFiles(tmp_path).prune() == 1
    assert not state_file.exists()


def test_answer_json_shapes() -> None:
    """The documented output fields, and the SDK's keyword-safe ``continue_``."""
    deny = HookAnswer("PreToolUse", Action.STOP, deny_reason="r", stop_reason="s")
    assert deny.to_json() == {
        "continue": False,
        "stopReason": "s",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "r",
        },
    }
    assert deny.to_json(continue_key="continue_")["continue_"] is False
    context = HookAnswer("PostToolUse", Action.WARN, context="c")
    assert context.to_json() == {
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "c"}
    }
    assert HookAnswer("Stop", block_reason="b").to_json() == {"decision": "block", "reason": "b"}
    assert not HookAnswer("Stop") and HookAnswer("Stop").to_json() == {}


def test_a_command_response_reads_as_its_output() -> None:
    from judge.detectors.outcome import Outcome, classify
    from judge.hooks.messages import response_text as _response_text

    bash = {"stdout": "F. [100%]\n1 failed", "stderr": "", "interrupted": False, "isImage": False}
    assert _response_text(bash) == "F. [100%]\n1 failed"
    failed = {"stdout": "", "stderr": "boom\n", "exit_code": 2, "interrupted": False}
    assert _response_text(failed) == "exit code 2\nboom"
    # A silent command is a data result, as its raw mapping was, not an acknowledgement.
    silent = _response_text({"stdout": "", "stderr": "", "interrupted": False, "isImage": False})
    assert classify(silent) is Outcome.OK
