"""Unchanged test results add up only while the agent keeps at it (judge.detectors.no_effect).

A test re-run after each new edit, same output every time, is a loop (six edits). A long
run that comes back to the same test now and then, after other work elsewhere, and finds
it unchanged is not: those runs are far apart, and each starts a new count.
"""

from __future__ import annotations

from judge.detectors import no_effect
from judge.detectors.base import LOOP_SCORE
from judge.detectors.no_effect import NoEffectDetector
from judge.detectors.steps import StepBuilder
from judge.history import normalize_history
from tests.fakes import Agent

TEST = {"command": "cd /testbed && python -m pytest tests/test_cart.py -q"}
SAME = "<returncode>1</returncode>\n<output>\n1 failed, 12 passed in 0.4s\n</output>"


def best(agent: Agent) -> float:
    """The highest no_effect score over the history."""
    detector, steps, top = NoEffectDetector(), StepBuilder(), 0.0
    for msg in normalize_history(agent.messages):
        for step in steps.feed(msg):
            finding = detector.observe(step)
            if finding is not None:
                top = max(top, finding.score)
    return top


def edit(agent: Agent, n: int) -> None:
    agent.call("bash", {"command": f"sed -i 's/rate_{n}/rate_{n + 1}/' src/cart.py"}, "")


def test_an_unchanged_test_after_each_of_six_edits_is_a_loop() -> None:
    agent = Agent(task="Fix the cart total.")
    agent.call("bash", TEST, SAME)
    for n in range(no_effect.NO_EFFECT_EDITS):
        edit(agent, n)
        agent.call("bash", TEST, SAME)
    assert best(agent) == LOOP_SCORE


def test_the_same_test_unchanged_now_and_then_over_a_long_run_is_not() -> None:
    agent = Agent(task="Fix the cart total and the invoice layout.")
    agent.call("bash", TEST, SAME)
    for n in range(no_effect.NO_EFFECT_EDITS + 2):
        edit(agent, n)
        agent.call("bash", TEST, SAME)
        # Other work: a few commands (fewer than the targets followed, so the test is not
        # forgotten that way), each with new output.
        for k in range(no_effect.MAX_GAP_STEPS):
            command = {"command": f"python render_invoice.py --page {k % 3}"}
            agent.call("bash", command, f"page {k % 3}, draft {n}.{k}")
    assert best(agent) < LOOP_SCORE


def test_the_step_clock_survives_a_saved_and_restored_suite() -> None:
    # Saved after a long stretch of other work: the restored detector must still know the
    # test's last run is old, or the next unchanged run would extend the count.
    detector, steps = NoEffectDetector(), StepBuilder()
    agent = Agent(task="Fix the cart total.")
    agent.call("bash", TEST, SAME)
    for n in range(no_effect.NO_EFFECT_EDITS - 1):
        edit(agent, n)
        agent.call("bash", TEST, SAME)
    for k in range(no_effect.MAX_GAP_STEPS + 1):
        agent.call("bash", {"command": f"python render_invoice.py --page {k % 3}"}, f"draft {k}")
    for msg in normalize_history(agent.messages):
        for step in steps.feed(msg):
            detector.observe(step)
    restored = NoEffectDetector()
    for name in NoEffectDetector.STATE:
        setattr(restored, name, getattr(detector, name))
    start = len(agent.messages)
    edit(agent, 99)
    agent.call("bash", TEST, SAME)
    found = [
        restored.observe(s)
        for m in normalize_history(agent.messages)[start:]
        for s in steps.feed(m)
    ]
    assert found[-1] is None  # a new look: the count starts again
