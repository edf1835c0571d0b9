"""The files in examples/ run as a user would run them (issue 14: the README's example must
work as pasted): each in its own interpreter, from outside the repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from judge.config import ENV_PREFIX

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # The user's LOOP_JUDGE_* must not change the example (tests/conftest.py's rule), and
    # its judge server is on 127.0.0.1: no proxy may stand in between.
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1"
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # a fresh interpreter that imports litellm for its judge
def test_agent_loop_example_recovers_and_asks_the_judge(tmp_path: Path) -> None:
    done = run_example("agent_loop.py", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # The scripted agent re-runs the failing test; the third identical failure is the loop.
    assert lines[0] == (
        'turn 5: loop (warn): run_tests({"path":"test_app.py"}) called 3x in a row, the same error'
    )
    # It read the recovery message, fixed the code and finished; the judge was asked and
    # answered through the real litellm client.
    assert lines[1] == "judge calls: 1, failed: 0"
    assert lines[2] == "finished after 8 turns: The test passes now: add() adds."
    assert lines[3] == "fake judge answered 1 request(s)"


def test_every_example_is_tested() -> None:
    tested = {"agent_loop.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested
