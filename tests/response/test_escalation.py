"""The escalation ladder (per pattern and overall), recoveries, and the three message levels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from judge import Action, LoopTracker, TrackerConfig, Verdict
from judge.config import ResponseMode
from judge.response.ladder import (
    DEFAULT_LADDER,
    Ladder,
    LadderPolicy,
    LadderState,
    RecoveryLevel,
)
from judge.turns import replay
from judge_eval.importers import load_trajectory
from tests.fakes import Agent

RECORDED = Path(__file__).resolve().parents[2] / "evals/data/recorded/react_webshop"


def ladder(**policy: Any) -> Ladder:
    return Ladder(LadderPolicy(**policy))


def detect(lad: Ladder, pattern: str, turns: int = 1) -> Any:
    for _ in range(turns):
        lad.tick()
    step = lad.escalate(pattern, label=f"loop {pattern}")
    lad.end_turn()
    return step


# -- the rungs -----------------------------------------------------------------------------


def test_default_ladder_rungs_for_one_pattern() -> None:
    assert DEFAULT_LADDER == (Action.WARN, Action.WARN, Action.ASK_USER, Action.STOP)
    lad = ladder()
    steps = [detect(lad, "A") for _ in range(6)]
    assert [s.action for s in steps] == [
        Action.WARN,
        Action.WARN,
        Action.ASK_USER,
        Action.STOP,
        Action.STOP,
        Action.STOP,
    ]
    assert [s.level for s in steps[:4]] == [
        RecoveryLevel.WARN,
        RecoveryLevel.FORBID,
        RecoveryLevel.ASK_USER,
        RecoveryLevel.STOP,
    ]
    assert [s.pattern_count for s in steps] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("mode", "actions", "levels"),
    [
        (
            ResponseMode.WARN,
            [Action.WARN] * 4,
            [RecoveryLevel.WARN, RecoveryLevel.FORBID, RecoveryLevel.FORBID, RecoveryLevel.FORBID],
        ),
        (ResponseMode.BLOCK, [Action.STOP] * 4, [RecoveryLevel.STOP] * 4),
        (
            ResponseMode.CHANCE_THEN_BLOCK,
            [Action.WARN] + [Action.STOP] * 3,
            [RecoveryLevel.WARN] + [RecoveryLevel.STOP] * 3,
        ),
    ],
)
def test_response_modes_map_rungs(
    mode: ResponseMode, actions: list[Action], levels: list[RecoveryLevel]
) -> None:
    lad = ladder(mode=mode)
    steps = [detect(lad, "A") for _ in range(4)]
    assert [s.action for s in steps] == actions
    assert [s.level for s in steps] == levels


def test_distinct_patterns_climb_at_half_speed() -> None:
    lad = ladder()
    steps = [detect(lad, p) for p in "ABCDE"]
    # rung = max(pattern count 1, ceil(overall / 2)) = 1, 1, 2, 2, 3
    assert [s.rung for s in steps] == [1, 1, 2, 2, 3]
    assert [s.action for s in steps] == [Action.WARN] * 4 + [Action.ASK_USER]
    assert steps[2].level is RecoveryLevel.FORBID
    relapse = detect(lad, "A")  # pattern count 2, overall 6 -> rung 3
    assert (relapse.pattern_count, relapse.overall_count, relapse.action) == (2, 6, Action.ASK_USER)
    assert relapse.tried[0] == "loop A" and set(relapse.tried) >= {"loop B", "loop E"}


def test_overall_every_one_is_a_global_ladder() -> None:
    lad = ladder(overall_every=1)
    assert [detect(lad, p).action for p in "ABCD"] == list(DEFAULT_LADDER)


def test_preview_changes_nothing() -> None:
    lad = ladder()
    detect(lad, "A")
    before = lad.state.model_dump()
    assert lad.preview("A").action is Action.WARN and lad.preview("A").pattern_count == 2
    assert lad.state.model_dump() == before


# -- recoveries ----------------------------------------------------------------------------


def test_escape_counts_as_recovery_after_recovery_turns() -> None:
    lad = ladder(recovery_turns=5)
    detect(lad, "A")
    for turn in range(1, 6):
        lad.tick()
        recovered = lad.end_turn()
        assert recovered == (["A"] if turn == 5 else [])
    assert lad.state.recoveries == 1 and lad.state.failed_recoveries == 0
    assert lad.state.patterns["A"].recoveries == 1
    lad.tick()
    assert lad.end_turn() == []  # counted once


def test_relapse_within_the_window_is_a_failed_recovery() -> None:
    lad = ladder(recovery_turns=5)
    detect(lad, "A")
    step = detect(lad, "A", turns=1)  # the very next turn: the warning was ignored
    assert step.failed_recovery and step.action is Action.WARN
    step = detect(lad, "A", turns=3)
    assert step.failed_recovery
    assert lad.state.failed_recoveries == 2 and lad.state.recoveries == 0
    # escape, then relapse after the window: a recovery, and the ladder keeps climbing
    for _ in range(5):
        lad.tick()
        lad.end_turn()
    step = detect(lad, "A")
    assert not step.failed_recovery and step.pattern_count == 4 and step.action is Action.STOP
    assert lad.state.recoveries == 1


def test_state_round_trips_through_json() -> None:
    lad = ladder()
    detect(lad, "A")
    detect(lad, "B")
    lad.override("B", "known flaky endpoint")
    saved = lad.state.model_dump_json()
    restored = Ladder(LadderPolicy(), LadderState.model_validate_json(saved))
    assert restored.state == lad.state
    assert restored.silenced("B") and not restored.silenced("A")
    assert detect(restored, "A").pattern_count == 2


# -- through the tracker -------------------------------------------------------------------


def looping_agent(repeats: int = 6) -> Agent:
    agent = Agent()
    for _ in range(repeats):
        agent.call("write_file", {"path": "out/report.md"}, "Error: permission denied")
    return agent


def run(agent: Agent, **config: Any) -> tuple[LoopTracker, list[Verdict]]:
    tracker = LoopTracker(TrackerConfig(**config))
    return tracker, [v for _, v in anyio.run(replay, agent.history, tracker)]


def test_tracker_messages_grow_stronger_with_each_rung() -> None:
    tracker, verdicts = run(looping_agent(6))
    flagged = [v for v in verdicts if v]
    assert [v.action for v in flagged] == [Action.WARN, Action.WARN, Action.ASK_USER, Action.STOP]
    warn, forbid, ask, stop = (v.recovery_message or "" for v in flagged)
    assert "LOOP DETECTED:" in warn and "Constraint: do not call write_file" in warn
    assert "FORBIDDEN: calling write_file" in forbid and "FORBIDDEN" not in warn
    assert "STOP AND ASK THE USER" in ask and "Make no more tool calls" in ask
    assert "RUN STOPPED" in stop
    assert "ask the user" in (flagged[2].summary or "")
    assert tracker.detections == 4
    assert all(v.pattern == flagged[0].pattern for v in flagged)


def test_recovery_message_is_a_fenced_block_from_the_evidence() -> None:
    _, verdicts = run(looping_agent(2 + 1))
    v = next(v for v in verdicts if v)
    message = v.recovery_message or ""
    assert message.startswith("```loop-judge\n") and message.endswith("\n```")
    # the evidence, the call, its arguments and its error, with message indices
    assert "messages 2, 4, 6" in message
    assert 'write_file({"path":"out/report.md"})' in message
    assert "Error: permission denied" in message
    assert "\n" not in (v.summary or "") and len(v.summary or "") <= 120
    explanation = v.explanation or ""
    assert 2 <= explanation.count(". ") + 1 <= 3 and "messages 2, 4, 6" in explanation


@pytest.mark.parametrize("budget", [200, 350, 600])
def test_recovery_message_stays_within_its_budget(budget: int) -> None:
    agent = Agent()
    arguments = {"path": "x" * 400, "text": "```" + "y" * 400}
    for _ in range(6):
        agent.call("write_file", arguments, "Error: " + "z" * 300)
    _, verdicts = run(agent, recovery_max_chars=budget)
    for v in (v for v in verdicts if v):
        message = v.recovery_message or ""
        assert len(message) <= budget
        assert message.startswith("```loop-judge") and message.endswith("```")
        assert message.count("```") == 2  # an argument's fence never closes ours


def test_real_trajectory_gets_all_three_levels() -> None:
    trajectory = load_trajectory(RECORDED / "react-webshop-031.json")
    tracker = LoopTracker(TrackerConfig())
    verdicts = [v for _, v in anyio.run(replay, trajectory.messages, tracker) if v]
    first = verdicts[0]
    assert first.action is Action.WARN and first.evidence == [4, 6, 8]
    assert "click" in (first.summary or "")
    assert "Invalid action!" in (first.recovery_message or "")
    assert "repeated-call loop" in (first.explanation or "")
    assert [v.action for v in verdicts[:4]] == [
        Action.WARN,
        Action.WARN,
        Action.ASK_USER,
        Action.STOP,
    ]
