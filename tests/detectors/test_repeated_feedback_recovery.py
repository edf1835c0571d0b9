"""A format correction the agent heeds is not the agent stuck.

Shaped like a long mini-swe-agent style coding run (written for these tests): the harness
now and then rejects a reply that holds two commands, and each time the agent answers
with one new, valid command. Those commands fail or find nothing, and nothing is edited,
so no new tool data ends the run of corrections: only the recovery does. A correction that
comes back while the agent only repeats itself is still a loop.
"""

from __future__ import annotations

from judge.detectors import repeated_feedback as rf
from judge.detectors.base import LOOP_SCORE
from judge.detectors.steps import StepBuilder
from judge.history import normalize_history
from tests.fakes import Agent

FORMAT = (
    "Please always provide EXACTLY ONE action in triple backticks, found 2 actions. "
    "Please format your action in triple backticks as shown in the example."
)
TWO_ACTIONS = "THOUGHT: check both.\n```bash\ngrep -n x a.py\n```\n```bash\ngrep -n y b.py\n```"


def scores(agent: Agent, detector: rf.RepeatedFeedbackDetector | None = None) -> list[float]:
    """The detector's score after each message of the history."""
    detector = detector or rf.RepeatedFeedbackDetector()
    steps = StepBuilder()
    found = []
    for msg in normalize_history(agent.messages):
        finding = detector.observe(msg)
        for step in steps.feed(msg):
            finding = detector.observe(step)
        found.append(finding.score if finding is not None else 0.0)
    return found


def rejected(agent: Agent) -> None:
    agent.say(TWO_ACTIONS)
    agent.user(FORMAT)


def test_corrections_each_answered_by_a_new_command_are_not_a_loop() -> None:
    agent = Agent(task="Fix the ignore option.")
    for n in range(6):
        rejected(agent)
        for k in range(3):  # new commands that fail or find nothing: no new data
            agent.call(
                "bash",
                {"command": f"grep -n 'def f{n}_{k}' src/m.py"},
                "<returncode>1</returncode>",
            )
    assert max(scores(agent)) < LOOP_SCORE


def test_corrections_back_to_back_are_a_loop() -> None:
    agent = Agent(task="Fix the ignore option.")
    for _ in range(rf.REPEATS):
        rejected(agent)
    assert scores(agent)[-1] == LOOP_SCORE


def test_corrections_answered_by_a_repeated_command_are_a_loop() -> None:
    # The same call again is not a new action: the agent has not moved on.
    agent = Agent(task="Fix the ignore option.")
    agent.call("bash", {"command": "grep -n ignore src/m.py"}, "<returncode>1</returncode>")
    for _ in range(rf.REPEATS):
        rejected(agent)
        agent.call("bash", {"command": "grep -n ignore src/m.py"}, "<returncode>1</returncode>")
    assert max(scores(agent)) == LOOP_SCORE


def test_the_calls_seen_survive_a_saved_and_restored_detector() -> None:
    agent = Agent(task="Fix the ignore option.")
    agent.call("bash", {"command": "grep -n ignore src/m.py"}, "<returncode>1</returncode>")
    rejected(agent)
    first = rf.RepeatedFeedbackDetector()
    steps = StepBuilder()
    for msg in normalize_history(agent.messages):
        first.observe(msg)
        for step in steps.feed(msg):
            first.observe(step)
    restored = rf.RepeatedFeedbackDetector()
    for name in rf.RepeatedFeedbackDetector.STATE:
        setattr(restored, name, getattr(first, name))
    start = len(agent.messages)
    for _ in range(rf.REPEATS - 1):
        agent.call("bash", {"command": "grep -n ignore src/m.py"}, "<returncode>1</returncode>")
        rejected(agent)
    steps_after = StepBuilder()
    found = None
    for msg in normalize_history(agent.messages)[start - 1 :]:
        found = restored.observe(msg) or found
        for step in steps_after.feed(msg):
            found = restored.observe(step)
    assert found is not None and found.score == LOOP_SCORE
