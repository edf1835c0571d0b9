"""The library's log lines reach the application's handlers, never a bare stderr."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

AGENT = textwrap.dedent(
    """
    import anyio, logging, sys
    from judge import LoopTracker, TrackerConfig
    from judge.testing import AgentHistory

    async def main() -> None:
        tracker = LoopTracker(TrackerConfig(semantic="off"), name="s1")
        history = AgentHistory(tracker, task="fix the failing test")
        stopped = False
        for _ in range(12):
            history.call("run_tests", {"path": "tests/"}, "1 failed")
            verdict = await tracker.turn_started(history.messages)
            stopped = stopped or verdict.action.value == "stop"
        print("stopped" if stopped else "running")

    if len(sys.argv) > 1:
        logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    anyio.run(main)
    """
)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", AGENT, *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_no_configured_logging_means_no_output_on_stderr() -> None:
    done = run()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "stopped"
    assert done.stderr == ""


@pytest.mark.slow
def test_configured_logging_gets_one_line_per_loop_verdict_with_the_tracker_name() -> None:
    done = run("configure")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("judge")]
    assert lines, done.stderr
    assert any(" WARNING " in line and "s1" in line for line in lines)
