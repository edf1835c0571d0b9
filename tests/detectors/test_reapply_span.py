"""Re-apply evidence adds up only while recent and consecutive (judge.detectors.reapply).

Long productive coding runs restore a file and re-apply a fix now and then, one idea after
another, over hundreds of steps. The histories here are shaped like the mini-swe-agent
runs of tests/detectors/test_reapply.py: the same rounds close together are a loop; spread
over a long run, or broken by a different fix, they are not.
"""

from __future__ import annotations

from judge.detectors import reapply
from judge.detectors.base import LOOP_SCORE, Finding
from judge.detectors.reapply import ReapplyDetector
from judge.detectors.steps import StepBuilder
from judge.history import normalize_history
from tests.detectors.test_reapply import (
    FIX,
    INDENT,
    NOT_FOUND,
    RESTORE,
    STALE,
    TEST,
    inline,
    patch,
    script,
    sed,
    shell,
    str_replace,
)
from tests.detectors.test_reapply import UNTERMINATED as BROKEN
from tests.fakes import Agent

OTHER_FIX = (
    "        total = self.pricing.total_for(self.items, coupon=self.coupon)",
    "        self.audit.record('total', total, source='pricing')",
)


def findings(agent: Agent) -> list[Finding]:
    """Every reapply finding over the history, in order."""
    detector, steps, found = ReapplyDetector(), StepBuilder(), []
    for msg in normalize_history(agent.messages):
        for step in steps.feed(msg):
            finding = detector.observe(step)
            if finding is not None:
                found.append(finding)
    return found


def flagged(agent: Agent) -> bool:
    return any(f.score >= LOOP_SCORE for f in findings(agent))


def other_work(agent: Agent, steps: int, tag: str) -> None:
    """Reads and test runs with new output: the rest of a long productive run."""
    for n in range(steps):
        agent.call(
            "bash", {"command": f"grep -n 'def {tag}_{n}' src/shop/*.py"}, shell(0, f"{n}: ok")
        )


def round_of(agent: Agent, edit: dict[str, str]) -> None:
    agent.call("bash", RESTORE, shell(0, "Updated 1 path from the index"))
    agent.call("bash", edit, shell(0))
    agent.call("bash", TEST, INDENT)


def start(agent: Agent) -> None:
    agent.call("bash", script("fix.py", FIX), shell(0))
    agent.call("bash", TEST, INDENT)


def test_three_rounds_close_together_are_a_loop() -> None:
    agent = Agent(task="Fix the cart total.")
    start(agent)
    for edit in (sed(FIX), patch(FIX), script("fix_v2.py", FIX)):
        round_of(agent, edit)
        other_work(agent, 4, "near")
    assert flagged(agent)


def test_the_same_rounds_spread_over_a_long_run_are_not() -> None:
    agent = Agent(task="Fix the cart total.")
    start(agent)
    for n, edit in enumerate((sed(FIX), patch(FIX), script("fix_v2.py", FIX))):
        round_of(agent, edit)
        other_work(agent, reapply.SPAN_STEPS, f"far{n}")
    assert not flagged(agent)


def test_a_different_fix_between_rounds_starts_the_count_again() -> None:
    agent = Agent(task="Fix the cart total.")
    start(agent)
    round_of(agent, sed(FIX))
    round_of(agent, patch(FIX))
    round_of(agent, script("fix_other.py", OTHER_FIX))  # another idea, not the undone fix
    round_of(agent, sed(FIX))
    round_of(agent, patch(FIX))
    assert not flagged(agent)
    round_of(agent, script("fix_v3.py", FIX))  # a third consecutive round: the loop
    assert flagged(agent)


def test_a_stale_edit_refused_three_times_far_apart_is_not_a_loop() -> None:
    agent = Agent(task="Fix the cart tests.")
    for n in range(3):
        agent.call("str_replace_editor", str_replace(STALE, f"from .models import C{n}"), NOT_FOUND)
        other_work(agent, reapply.SPAN_STEPS, f"refused{n}")
    assert not flagged(agent)


def test_the_same_script_error_far_apart_is_not_a_loop_but_close_it_is() -> None:
    far, near = Agent(task="Fix the cart."), Agent(task="Fix the cart.")
    for n in range(3):
        far.call("bash", inline(n), BROKEN)
        other_work(far, reapply.SPAN_STEPS, f"script{n}")
        near.call("bash", inline(n), BROKEN)
        other_work(near, 2, f"script{n}")
    assert not flagged(far)
    assert flagged(near)
