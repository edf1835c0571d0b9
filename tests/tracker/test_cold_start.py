"""What a fresh process loads before its first answer.

Functional checks only: which modules a quiet tracker and a judge-less hook event import,
and which pydantic schemas they build.
The timings live in evals/bench_cold_start.py.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import types
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from judge.hooks import invocation
from judge.integrations import claude_code

# A quiet turn needs none of these: the saved state's model, the recovery texts, the
# known-loop memory, telemetry, the redaction rules, an event loop of its own.
_NOT_ON_A_QUIET_TURN = (
    "judge.state",
    "judge.response.recovery",
    "judge.response.memory",
    "sqlite3",
    "opentelemetry",
    "judge.llm.redaction",
)
# Models whose schema a quiet process never needs (defer_build; built on first validation).
# The verdict is not among them: every turn validates one.
_DEFERRED_MODELS = (
    "judge.verdict:JudgeCall",
    "judge.response.ladder:LadderState",
    "judge.response.ladder:LadderPolicy",
    "judge.response.ladder:PatternState",
    "judge.response.ladder:LadderStep",
    "judge.response.stats:TrackerStats",
)


def _run(code: str) -> dict[str, Any]:
    """The JSON that a fresh interpreter running ``code`` prints last."""
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


_REPORT = f"""
import importlib, json, sys
built = {{}}
for where in {_DEFERRED_MODELS!r}:
    module, name = where.split(":")
    built[where] = getattr(importlib.import_module(module), name).__pydantic_complete__
loaded = [m for m in {_NOT_ON_A_QUIET_TURN!r} if m in sys.modules]
loops = [m for m in ("asyncio", "anyio") if m in sys.modules]
print(json.dumps({{"loaded": loaded, "built": built, "loops": loops}}))
"""


@pytest.mark.slow
def test_a_quiet_tracker_builds_only_its_config_and_loads_nothing_else() -> None:
    report = _run(
        "import anyio\nfrom judge import LoopTracker, TrackerConfig\n"
        "t = LoopTracker(TrackerConfig(semantic='off'))\n"
        "v = anyio.run(t.turn_started, [{'role': 'user', 'content': 'hi'}])\n"
        "assert not v and v.turn == 1\n" + _REPORT
    )
    assert report["loaded"] == []
    assert not any(report["built"].values()), report["built"]


@pytest.mark.slow
def test_a_judge_less_hook_event_starts_no_event_loop(tmp_path: Path) -> None:
    payload = {
        "hook_event_name": "PostToolUse",
        "session_id": "s",
        "tool_name": "Read",
        "tool_input": {"file_path": "/a.py"},
        "tool_use_id": "t1",
        "tool_response": "ok",
    }
    report = _run(
        "from judge.integrations.claude_code import handle_payload\n"
        f"answer = handle_payload({payload!r}, state_dir={str(tmp_path)!r})\n"
        "assert not answer\n" + _REPORT
    )
    # No event loop, and no judge machinery (judge.llm.pair, anyio) without a judge model.
    assert report["loops"] == []
    assert (tmp_path / "s.json").exists()  # the turn was recorded


def test_a_turn_that_would_suspend_is_refused_not_half_run() -> None:
    @types.coroutine
    def suspends() -> Generator[None, None, None]:
        yield

    async def turn() -> Any:
        await suspends()

    with pytest.raises(RuntimeError, match="awaited an event loop"):
        invocation._run_without_loop(turn())


def test_the_hook_command_turns_plugins_off_for_its_call_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from judge.cli import PLUGINS_ENV, main

    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    seen: list[str | None] = []

    def answer(**_: Any) -> int:
        seen.append(os.environ.get(PLUGINS_ENV))
        return claude_code.EXIT_HOOK

    monkeypatch.setattr(claude_code, "answer_stdin", answer)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"{}")))
    assert main(["hook", "claude-code", "--state-dir", str(tmp_path)]) == claude_code.EXIT_HOOK
    assert seen == ["__all__"] and PLUGINS_ENV not in os.environ
    # A choice made in the environment is the user's: left as it is.
    monkeypatch.setenv(PLUGINS_ENV, "some_plugin")
    main(["hook", "claude-code", "--state-dir", str(tmp_path)])
    assert seen[-1] == "some_plugin" and os.environ[PLUGINS_ENV] == "some_plugin"
