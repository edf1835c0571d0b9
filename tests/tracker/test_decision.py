"""`judge.decision.decide`, the one place that says whether the agent loops: table tests
of its inputs (findings, the judge's outcome, the policy) against what it says to do."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from judge.decision import (
    CLEAR,
    KNOWN_LOOP_NOTE,
    LLM_PATTERN,
    NOTHING_ANSWERED,
    Answered,
    Decision,
    Outcome,
    Policy,
    Rules,
    agreement,
    combine,
    decide,
    may_stop,
)
from judge.detectors.base import Finding
from judge.llm.pair import JudgeOutcome
from judge.verdict import JudgeCall, JudgeStage, LoopKind

WEIGHTS = {"a": 0.4, "b": 0.4, "x": 0.8}
RULES = Rules(weights=WEIGHTS, threshold=0.7, min_interval=5)


def finding(
    name: str = "a",
    score: float = 1.0,
    evidence: tuple[int, ...] = (4,),
    pattern: str | None = None,
    kind: LoopKind = LoopKind.EXACT_REPEAT,
    **details: Any,
) -> Finding:
    return Finding(
        detector=name,
        kind=kind,
        score=score,
        evidence=evidence,
        summary=f"{name} repeats",
        pattern=pattern or f"p-{name}",
        details=details,
    )


def policy(**changes: Any) -> Policy:
    return dataclasses.replace(Policy(rules=RULES, turn=20), **changes)


def judged(fast: float | None, confirm: float | None = None) -> JudgeOutcome:
    """A check's outcome: ``None`` for a call that failed, absent confirm: not asked."""
    calls = [JudgeCall(model="f", stage=JudgeStage.FAST, confidence=fast)]
    if fast is None:
        calls = [JudgeCall(model="f", stage=JudgeStage.FAST, error="boom")]
    deciding = calls[0] if fast is not None else None
    if fast is not None and confirm is not None:
        calls.append(JudgeCall(model="c", stage=JudgeStage.CONFIRM, confidence=confirm))
        deciding = calls[1]
    return JudgeOutcome(deciding=deciding, calls=calls, evidence=[3, 5])


A_LOOP = finding("a", 1.0)
WEAK = finding("b", 0.3)
NEAR = finding("b", 0.5)
SILENCED = policy(silenced=frozenset({"p-a"}))
ANSWERED = policy(answered=Answered(4, "d"))

# (case, findings, judge, policy, outcome, suspicion, loop finding's detector)
Row = tuple[str, list[Finding], JudgeOutcome | None, Policy, Outcome, float, str | None]
HEURISTIC_TABLE: list[Row] = [
    ("nothing", [], None, policy(), Outcome.CLEAR, 0.0, None),
    ("one at its threshold", [A_LOOP, WEAK], None, policy(), Outcome.FINDING, 1.0, "a"),
    (
        "two strong",
        [finding("a", 0.75), finding("b", 0.72)],
        None,
        policy(),
        Outcome.FINDING,
        0.75,
        "a",
    ),
    (
        "weak signals only",
        [finding(n, 0.5) for n in "cdefg"],
        None,
        policy(),
        Outcome.CLEAR,
        0.5,
        None,
    ),
    ("enough weight", [finding("x", 0.8)], None, policy(), Outcome.FINDING, 0.8, "x"),
    ("silenced: shown, not flagged", [A_LOOP], None, SILENCED, Outcome.CLEAR, 1.0, None),
    (
        "silenced one, another flags",
        [A_LOOP, finding("c", 0.95)],
        None,
        SILENCED,
        Outcome.FINDING,
        0.95,
        "c",
    ),
    ("answered: shown, not flagged", [A_LOOP], None, ANSWERED, Outcome.CLEAR, 1.0, None),
    (
        "newer evidence than answered",
        [finding("a", 1.0, evidence=(5,))],
        None,
        ANSWERED,
        Outcome.FINDING,
        1.0,
        "a",
    ),
    (
        "no evidence is never answered",
        [finding("a", 1.0, evidence=())],
        None,
        ANSWERED,
        Outcome.FINDING,
        1.0,
        "a",
    ),
    (
        "known: raised to the cap",
        [WEAK],
        None,
        policy(known=frozenset({"p-b"})),
        Outcome.CLEAR,
        0.5,
        None,
    ),
    ("a judge that found none", [WEAK], judged(0.2), policy(), Outcome.CLEAR, 0.3, None),
    ("a judge without an answer", [WEAK], judged(None), policy(), Outcome.CLEAR, 0.3, None),
    ("a sure fast judge alone", [WEAK], judged(0.9), policy(), Outcome.JUDGE, 0.3, None),
    ("confirm overrules fast", [WEAK], judged(0.9, 0.4), policy(), Outcome.CLEAR, 0.3, None),
    ("both models", [], judged(0.9, 0.8), policy(), Outcome.JUDGE, 0.0, None),
    (
        "the judge silenced",
        [WEAK],
        judged(0.9, 0.8),
        policy(silenced=frozenset({LLM_PATTERN})),
        Outcome.CLEAR,
        0.3,
        None,
    ),
    (
        "heuristics before the judge",
        [A_LOOP],
        judged(0.9, 0.9),
        policy(),
        Outcome.FINDING,
        1.0,
        "a",
    ),
]


@pytest.mark.parametrize(
    ("findings", "judge", "pol", "outcome", "suspicion", "detector"),
    [row[1:] for row in HEURISTIC_TABLE],
    ids=[row[0] for row in HEURISTIC_TABLE],
)
def test_decide(
    findings: list[Finding],
    judge: JudgeOutcome | None,
    pol: Policy,
    outcome: Outcome,
    suspicion: float,
    detector: str | None,
) -> None:
    decision = decide(findings, judge, pol)
    assert decision.outcome is outcome
    assert decision.suspicion == suspicion
    assert decision.looping is (outcome is not Outcome.CLEAR)
    assert (decision.finding.detector if decision.finding else None) == detector


def test_nothing_found_is_the_shared_clear() -> None:
    assert decide([], None, policy()) is CLEAR


def test_a_silenced_or_answered_finding_neither_flags_nor_makes_the_turn_suspect() -> None:
    near = finding("a", 0.5)
    assert decide([near], None, policy()).suspect
    silenced = decide([near], None, SILENCED)
    assert not silenced.suspect and silenced.suspicion == 0.5 and silenced.findings == ()
    answered = decide([near], None, ANSWERED)
    assert not answered.suspect and answered.suspicion == 0.5


def test_the_memory_brings_a_known_pattern_forward_or_flags_it_one_repeat_early() -> None:
    known = policy(known=frozenset({"p-b"}))
    raised = decide([WEAK], None, known)
    assert raised.suspect and raised.findings[0].score == 0.5
    assert not decide([WEAK], None, policy()).suspect
    rules = dataclasses.replace(RULES, memory_lowers_threshold=True)
    lowered = dataclasses.replace(known, rules=rules)
    one_short = finding("b", 0.3, count=3, limit=3)
    decision = decide([one_short], None, lowered)
    assert decision.outcome is Outcome.FINDING and decision.suspicion == 1.0
    assert decision.finding is not None and decision.finding.summary.endswith(KNOWN_LOOP_NOTE)
    # Two repeats short: only the early check.
    assert decide([finding("b", 0.3, count=2, limit=3)], None, lowered).outcome is Outcome.CLEAR
    # A finding already at its threshold is left as it is.
    assert decide([A_LOOP], None, policy(known=frozenset({"p-a"}))).finding == A_LOOP


def test_the_judges_loop_takes_its_kind_from_the_strongest_signal_under_it() -> None:
    retry = finding("b", 0.4, kind=LoopKind.SIMILAR_RETRY)
    assert decide([WEAK, retry], judged(0.9, 0.9), policy()).kind is LoopKind.SIMILAR_RETRY
    assert decide([], judged(0.9, 0.9), policy()).kind is LoopKind.COGNITIVE


# (case, agreement before, turn, fast, confirm, agreement after, may stop)
Turns = tuple[int, ...]
AgreementRow = tuple[str, Turns, int, float | None, float | None, Turns | None, bool]
AGREEMENT_TABLE: list[AgreementRow] = [
    ("first agreement", (), 10, 0.9, 0.9, (10,), False),
    ("too soon", (10,), 12, 0.9, 0.9, (10, 12), False),
    ("lasted", (10,), 15, 0.9, 0.9, (10, 15), True),
    ("first and latest only", (10, 15), 20, 0.9, 0.8, (10, 20), True),
    ("fast alone keeps it", (10,), 15, 0.9, None, (10,), False),
    ("a check finding none ends it", (10, 15), 20, 0.2, None, (), False),
    ("confirm finding none ends it", (10, 15), 20, 0.9, 0.2, (), False),
    ("no answer leaves it", (10, 15), 20, None, None, None, False),
]


@pytest.mark.parametrize(
    ("before", "turn", "fast", "confirm", "after", "stop"),
    [row[1:] for row in AGREEMENT_TABLE],
    ids=[row[0] for row in AGREEMENT_TABLE],
)
def test_judge_agreement(
    before: tuple[int, ...],
    turn: int,
    fast: float | None,
    confirm: float | None,
    after: tuple[int, ...] | None,
    stop: bool,
) -> None:
    decision = decide([], judged(fast, confirm), policy(judge_agreed=before, turn=turn))
    assert decision.judge_agreed == after
    assert decision.judge_may_stop is stop
    said = None if fast is None else (confirm if confirm is not None else fast) >= 0.7
    assert decision.judge_said is said


def test_agreement_and_may_stop_alone() -> None:
    assert agreement((), 3, both=True, looping=True) == (3,)
    assert agreement((3,), 4, both=False, looping=True) == (3,)
    assert agreement((3, 4), 9, both=False, looping=False) == ()
    assert may_stop((3, 8), 5) and not may_stop((3, 7), 5) and not may_stop((3,), 0)


# (case, findings, policy, outcome, suspicion)
PREFLIGHT_TABLE: list[tuple[str, list[Finding], Policy, Outcome, float]] = [
    ("nothing", [], policy(), Outcome.CLEAR, 0.0),
    ("below the threshold", [NEAR], policy(), Outcome.CLEAR, 0.5),
    ("at the threshold", [NEAR, A_LOOP], policy(), Outcome.REFUSE, 1.0),
    (
        "no combination before a call",
        [finding("a", 0.75), finding("b", 0.72)],
        policy(),
        Outcome.CLEAR,
        0.75,
    ),
    ("silenced: shown as a suspicion", [A_LOOP], SILENCED, Outcome.CLEAR, 0.5),
    (
        "another detector's pattern still refuses",
        [A_LOOP, finding("c", 0.95)],
        SILENCED,
        Outcome.REFUSE,
        0.95,
    ),
    ("a person spoke since", [A_LOOP], policy(prompt=5), Outcome.CLEAR, 0.5),
    ("a prompt before the evidence", [A_LOOP], policy(prompt=3), Outcome.REFUSE, 1.0),
    (
        "answered evidence still refuses",
        [A_LOOP],
        policy(answered=Answered(9, "d")),
        Outcome.REFUSE,
        1.0,
    ),
    (
        "a streamed repeat cites nothing",
        [finding("s", 1.0, evidence=())],
        policy(prompt=5),
        Outcome.REFUSE,
        1.0,
    ),
]


@pytest.mark.parametrize(
    ("findings", "pol", "outcome", "suspicion"),
    [row[1:] for row in PREFLIGHT_TABLE],
    ids=[row[0] for row in PREFLIGHT_TABLE],
)
def test_decide_before_a_call(
    findings: list[Finding], pol: Policy, outcome: Outcome, suspicion: float
) -> None:
    decision = decide(findings, None, pol, preflight=True)
    assert decision.outcome is outcome
    assert decision.suspicion == suspicion


def test_answered_evidence_is_kept_and_moved() -> None:
    answered = NOTHING_ANSWERED.upto(7, "d7")
    assert answered == Answered(7, "d7")
    assert answered.upto(5, "d5") is answered  # an older message answers nothing new
    assert answered.covers((3, 7)) and not answered.covers((8,)) and not answered.covers(())
    assert answered.moved(2) == Answered(2, "d7")
    assert answered.moved(None) is NOTHING_ANSWERED
    assert NOTHING_ANSWERED.moved(3) is NOTHING_ANSWERED


def test_combine() -> None:
    assert combine([finding("a", 0.95)], WEIGHTS).loop is not None
    weak = combine([finding(n, 0.5) for n in "cdefg"], WEIGHTS)
    assert weak.loop is None and weak.suspicion == 0.5 and len(weak.findings) == 5
    assert combine([], WEIGHTS).loop is None


def test_decide_changes_nothing_it_is_given() -> None:
    pol = policy(judge_agreed=(3,), known=frozenset({"p-b"}))
    findings = [WEAK, A_LOOP]
    before = (list(findings), pol)
    decide(findings, judged(0.9, 0.9), pol)
    decide(findings, None, pol, preflight=True)
    assert (findings, pol) == before


def test_a_decision_is_a_value() -> None:
    assert Decision(Outcome.CLEAR, 0.0) == CLEAR
    with pytest.raises(dataclasses.FrozenInstanceError):
        CLEAR.suspicion = 1.0  # type: ignore[misc]


def _repeats(n: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Where is order 7?"}]
    for i in range(n):
        function = {"name": "lookup", "arguments": '{"order": 7}'}
        call = {"id": f"c{i}", "type": "function", "function": function}
        history.append({"role": "assistant", "content": "", "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": "not found"})
    return history


@pytest.mark.anyio
async def test_what_a_verdict_answered_is_saved_where_older_states_keep_it() -> None:
    from judge.config import TrackerConfig
    from judge.tracker import LoopTracker

    config = TrackerConfig()
    live = LoopTracker(config)
    history = _repeats(12)
    flagged = None
    for k in range(3, len(history) + 1, 2):
        verdict = await live.turn_started(history[:k])
        if verdict.looping and flagged is None:
            flagged = k
            break
    assert flagged is not None
    state = live.state
    assert state.ladder.acted_through == flagged - 1 and state.ladder.acted_digest
    assert live.ladder_state.acted_through == flagged - 1
    restored = LoopTracker.from_state(config, state.model_dump_json())
    assert restored.ladder_state.acted_through == flagged - 1
    # Both go on alike: the answered repeat is not flagged again until it is done again.
    for k in range(flagged + 2, len(history) + 1, 2):
        a, b = await live.turn_started(history[:k]), await restored.turn_started(history[:k])
        assert (a.looping, a.action, a.suspicion) == (b.looping, b.action, b.suspicion)
    # The ladder's own state, given back, carries it too.
    other = LoopTracker(config)
    other.load_ladder_state(live.ladder_state)
    assert other.ladder_state.acted_digest == live.ladder_state.acted_digest
