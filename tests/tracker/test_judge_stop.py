"""What a judge alone can do to a run.

One model's "loop" is an opinion, and a judge that answers 0.95 on everything would end
every run it watches. So the judge alone stops a run only when both of its models (fast and
confirm) found a loop on two checks at least ``min_interval`` turns apart, with no check in
between finding none; until then the rung's stop becomes ask-the-user. A loop the judge
confirms twice still stops, and heuristic verdicts stop as they always did.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from judge import Action, LoopTracker, TrackerConfig, Verdict
from judge.errors import JudgeHTTPError
from judge.response.ladder import Ladder, LadderPolicy, LadderState
from judge.testing import Answer, JudgeRequest, ScriptedJudge
from judge.verdict import JudgeStage
from tests.fakes import Agent

pytestmark = pytest.mark.anyio

FAST, CONFIRM = "fake/fast", "fake/confirm"
MIN_INTERVAL = 5
TURNS = 80
MODES = ["graduated", "block", "chance_then_block"]


def always(confidence: float) -> Callable[[JudgeRequest], Answer]:
    return lambda request: confidence


def confirm_fails(request: JudgeRequest) -> Answer:
    if request.model == CONFIRM:
        return JudgeHTTPError("503 upstream", model=CONFIRM, status=503)
    return 0.95


def confirm_flaky() -> Callable[[JudgeRequest], Answer]:
    """Fast always sure; confirm agrees on every other check, disagrees in between."""
    asked = []

    def script(request: JudgeRequest) -> Answer:
        if request.model != CONFIRM:
            return 0.95
        asked.append(request.number)
        return 0.95 if len(asked) % 2 else 0.2

    return script


def tracker(
    script: Callable[[JudgeRequest], Answer], *, confirm: bool = True, **cfg: Any
) -> LoopTracker:
    config = TrackerConfig(
        fast_model=FAST,
        confirm_model=CONFIRM if confirm else None,
        check_after_turns=1,
        min_interval=MIN_INTERVAL,
        semantic="off",
        **cfg,
    )
    return LoopTracker(config, client=ScriptedJudge(script))


async def productive(track: LoopTracker, turns: int = TURNS) -> list[Verdict]:
    """An agent reading a new file every turn: nothing a heuristic flags, and it carries
    on whatever it is told (the worst case for a judge that is always sure)."""
    agent = Agent(track, task="Summarize the repository.", first_call=0)
    verdicts = []
    for i in range(turns):
        agent.call("read_file", {"path": f"src/m{i}.py"}, f"module {i}", text=f"step {i}")
        verdicts.append(await agent.turn())
        if verdicts[-1].action is Action.STOP:
            break
    return verdicts


def agreed(verdict: Verdict) -> bool:
    """Both models found a loop on this check."""
    calls = verdict.judge_calls
    return (
        verdict.looping
        and [c.stage for c in calls] == [JudgeStage.FAST, JudgeStage.CONFIRM]
        and all(c.ok for c in calls)
    )


def assert_judge_stops_only_after_agreement(verdicts: list[Verdict]) -> None:
    """Every judge STOP comes after two agreeing checks MIN_INTERVAL turns apart, with no
    check finding no loop between them."""
    stretch: list[int] = []
    for verdict in verdicts:
        if verdict.judge_calls and verdict.confidence is not None:
            if agreed(verdict):
                stretch.append(verdict.turn)
            elif not verdict.looping:
                stretch.clear()
        if verdict.source == "llm" and verdict.action is Action.STOP:
            assert len(stretch) >= 2 and stretch[-1] - stretch[0] >= MIN_INTERVAL, (
                verdict.turn,
                stretch,
            )


# -- a productive run -----------------------------------------------------------------------


JUDGES: dict[str, Callable[[], tuple[Callable[[JudgeRequest], Answer], bool]]] = {
    "fast_only": lambda: (always(0.95), False),
    "confirm_down": lambda: (confirm_fails, True),
    "confirm_flaky": lambda: (confirm_flaky(), True),
}


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("judge", sorted(JUDGES))
async def test_a_judge_without_lasting_agreement_never_stops_a_productive_run(
    judge: str, mode: str
) -> None:
    script, confirm = JUDGES[judge]()
    verdicts = await productive(tracker(script, confirm=confirm, response_mode=mode))
    flagged = [v for v in verdicts if v]
    # At least four: past the default ladder's stop rung.
    assert len(flagged) >= 4 and all(v.source == "llm" for v in flagged)
    assert Action.STOP not in {v.action for v in verdicts}
    # It may still hand the run to a person, where the ladder would have stopped it.
    assert flagged[-1].action is Action.ASK_USER
    assert "STOP AND ASK THE USER" in (flagged[-1].recovery_message or "")


@pytest.mark.parametrize("mode", MODES)
async def test_two_models_always_sure_stop_only_after_two_checks_an_interval_apart(
    mode: str,
) -> None:
    verdicts = await productive(tracker(always(0.95), response_mode=mode))
    assert_judge_stops_only_after_agreement(verdicts)
    judged = [v for v in verdicts if v.source == "llm" and v.looping]
    # A single check never stops, even where the mode stops at the first detection.
    assert judged[0].action is not Action.STOP
    if mode == "block":
        assert judged[0].action is Action.ASK_USER
    # Two agreeing checks an interval apart: a confirmed loop still ends the run.
    assert verdicts[-1].action is Action.STOP and verdicts[-1].source == "llm"
    assert judged[-1].turn - judged[0].turn >= MIN_INTERVAL


async def test_a_real_loop_confirmed_twice_still_stops() -> None:
    """The agent searches and opens page after page without getting closer: nothing the
    heuristics flag, a loop the judge sees, and both models agree each time."""
    track = tracker(always(0.97), response_mode="block")
    agent = Agent(track, task="Find the release date of version 2.3.", first_call=0)
    verdicts: list[Verdict] = []
    for i in range(40):
        if i % 2:
            agent.call("open", {"url": f"https://docs.example/page/{i}"}, f"page {i}: no dates")
        else:
            agent.call("search", {"query": f"release {i} date notes"}, f"{i} unrelated hits")
        verdicts.append(await agent.turn())
        if verdicts[-1].action is Action.STOP:
            break
    judged = [v for v in verdicts if v.source == "llm" and v.looping]
    assert [v.action for v in judged] == [Action.ASK_USER, Action.STOP]
    assert judged[1].turn - judged[0].turn >= MIN_INTERVAL
    assert "RUN STOPPED" in (judged[1].recovery_message or "")


async def test_a_check_that_finds_no_loop_starts_the_agreement_over() -> None:
    """Agree, clear, agree: the two agreements are not one stretch, so no stop."""
    answers: list[Answer] = [0.95, 0.95, 0.1, 0.95, 0.95, 0.1, 0.95, 0.95]
    track = LoopTracker(
        TrackerConfig(
            fast_model=FAST,
            confirm_model=CONFIRM,
            check_after_turns=1,
            min_interval=MIN_INTERVAL,
            response_mode="block",
            semantic="off",
        ),
        client=ScriptedJudge(answers, default=0.1),
    )
    verdicts = await productive(track, turns=60)
    judged = [v for v in verdicts if v.source == "llm" and v.confidence is not None]
    assert [v.looping for v in judged[:5]] == [True, False, True, False, True]
    assert Action.STOP not in {v.action for v in verdicts}


async def test_heuristic_verdicts_stop_as_before() -> None:
    """The rule is the judge's alone: a heuristic loop in block mode stops at once."""
    track = tracker(always(0.0), response_mode="block")
    agent = Agent(track, task="Deploy.", first_call=0)
    verdicts = []
    for _ in range(4):
        agent.call("bash", {"cmd": "make deploy"}, "error: permission denied")
        verdicts.append(await agent.turn())
    first = next(v for v in verdicts if v)
    assert first.source == "heuristic:exact_repeat" and first.action is Action.STOP


async def test_the_agreement_survives_a_saved_state() -> None:
    """A sidecar restores the tracker every turn: the first agreement must be remembered."""
    config = TrackerConfig(
        fast_model=FAST,
        confirm_model=CONFIRM,
        check_after_turns=1,
        min_interval=MIN_INTERVAL,
        response_mode="block",
        semantic="off",
    )
    judge = ScriptedJudge(always(0.95))
    track = LoopTracker(config, client=judge)
    agent = Agent(track, task="Summarize the repository.", first_call=0)
    actions = []
    for i in range(30):
        agent.call("read_file", {"path": f"src/m{i}.py"}, f"module {i}")
        verdict = await agent.turn()
        actions.append(verdict.action)
        if verdict.action is Action.STOP:
            break
        track = LoopTracker.from_state(config, track.state.model_dump_json(), client=judge)
        agent.tracker = track
    assert [a for a in actions if a is not Action.CONTINUE] == [Action.ASK_USER, Action.STOP]


# -- the ladder's record --------------------------------------------------------------------


def at(lad: Ladder, turn: int) -> None:
    while lad.state.turn < turn:
        lad.tick()


def test_the_ladder_needs_two_agreements_an_interval_apart() -> None:
    lad = Ladder(LadderPolicy())
    at(lad, 10)
    lad.judge_checked(agreed=True, looping=True)
    assert not lad.judge_may_stop(MIN_INTERVAL)
    at(lad, 12)
    lad.judge_checked(agreed=True, looping=True)
    assert not lad.judge_may_stop(MIN_INTERVAL)  # two, but only 2 turns apart
    at(lad, 14)
    lad.judge_checked(agreed=False, looping=True)  # fast trusted alone: neither
    assert not lad.judge_may_stop(MIN_INTERVAL)
    at(lad, 15)
    lad.judge_checked(agreed=True, looping=True)
    assert lad.judge_may_stop(MIN_INTERVAL)
    assert lad.state.judge_agreed == [10, 15]  # first and latest only: never grows
    lad.judge_checked(agreed=False, looping=False)
    assert not lad.judge_may_stop(MIN_INTERVAL) and lad.state.judge_agreed == []


def test_the_record_round_trips_and_an_older_state_reads_as_none() -> None:
    lad = Ladder(LadderPolicy())
    at(lad, 3)
    lad.judge_checked(agreed=True, looping=True)
    restored = LadderState.model_validate_json(lad.state.model_dump_json())
    assert restored.judge_agreed == [3]
    older = lad.state.model_dump(exclude={"judge_agreed"})
    assert LadderState.model_validate(older).judge_agreed == []
