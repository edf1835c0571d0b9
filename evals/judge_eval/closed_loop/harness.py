"""The harness: drives scripted agents through fresh trackers, turn by turn.

`run_scenario` plays one scenario against a `LoopTracker` with a `ScriptedJudge` that
answers from the agent's ground truth, as an agent following the README would (verdict at
the start of each turn, recovery message appended, stop obeyed); `run_closed_loop` runs
every scenario. Detectors share one memoised embedder, so replayed turns are not
re-embedded.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from judge.config import TrackerConfig
from judge.detectors.base import Detector
from judge.detectors.semantic_repeat import SemanticRepeatDetector
from judge.detectors.suite import default_detectors
from judge.testing import SCRIPTED_CONFIRM_MODEL, SCRIPTED_FAST_MODEL, ScriptedJudge
from judge.tracker import LoopTracker
from judge.verdict import Action, Verdict
from judge_eval.closed_loop.agents import ScriptedAgent
from judge_eval.closed_loop.metrics import ClosedLoopReport, FlagRecord, RunResult
from judge_eval.closed_loop.model import (
    DEFAULT_SEED,
    LOOP_POLICIES,
    LOOPING_PHASES,
    MAX_TURNS_AFTER_ONSET,
    Message,
    Policy,
)
from judge_eval.closed_loop.productive import productive_scenarios
from judge_eval.closed_loop.scenarios import Scenario, loop_scenarios, seeds_from_trajectories
from judge_eval.dataset import Trajectory
from judge_eval.tables import public_config


class _MemoEmbedder:
    """The shared sentence embedder, remembering each text's vector.

    Scripted agents replay the same recorded loop turns again and again, and 340 runs
    re-embed the same few hundred requests thousands of times (60 ms each for a long
    Magentic-One request), which alone would take the eval past its time budget. The model
    is deterministic and texts are embedded one by one as the detector does, so the
    vectors, and every verdict, are the same as without the memo.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._memo: dict[str, Any] = {}

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        for text in texts:
            if text not in self._memo:
                self._memo[text] = self._inner.embed([text])[0]
        return np.stack([self._memo[text] for text in texts])


DetectorFactory = Callable[[TrackerConfig], list[Detector]]


def memo_detectors() -> DetectorFactory:
    """A factory of the tracker's default detectors for one config, whose semantic detector
    (when the extra is installed and enabled) shares one `_MemoEmbedder`: the same
    detectors a tracker builds for itself, without re-embedding a replayed request."""
    memo: _MemoEmbedder | None = None

    def build(config: TrackerConfig) -> list[Detector]:
        nonlocal memo
        detectors = default_detectors(config)
        if not any(isinstance(d, SemanticRepeatDetector) for d in detectors):
            return detectors
        if memo is None:
            from judge.detectors.embeddings import shared_embedder

            memo = _MemoEmbedder(shared_embedder())
        return [
            SemanticRepeatDetector(memo) if isinstance(d, SemanticRepeatDetector) else d
            for d in detectors
        ]

    return build


def closed_loop_config(**overrides: Any) -> TrackerConfig:
    """The tracker settings of the closed-loop eval: the defaults (and any ``LOOP_JUDGE_*``
    variables, as in the replay eval) with the scripted judge's models, so every scenario
    runs the heuristics and the judge path."""
    models = {"fast_model": SCRIPTED_FAST_MODEL, "confirm_model": SCRIPTED_CONFIRM_MODEL}
    return TrackerConfig(**{**models, **overrides})


def _flag(agent: ScriptedAgent, verdict: Verdict) -> FlagRecord:
    return FlagRecord(
        turn=agent.turns,
        phase=agent.phase,
        action=verdict.action.value,
        source=verdict.source,
        pattern=verdict.pattern,
        kind=verdict.kind.value if verdict.kind is not None else None,
        summary=verdict.summary,
    )


async def run_scenario(
    scenario: Scenario,
    config: TrackerConfig | None = None,
    *,
    seed: int = DEFAULT_SEED,
    detectors: DetectorFactory | None = None,
) -> RunResult:
    """Drive one scripted agent through a fresh tracker until it is stopped or done.

    Each turn: ``turn_started(history)``; on a loop verdict, ``stop`` ends the run, any
    other action appends the recovery message as a user message (as the README shows) and
    lets the policy react; then the agent adds its next turn. A crash (a tracker bug) is
    recorded on the result, not raised, so one scenario cannot hide all the others.
    ``detectors`` builds the tracker's detectors (default: the tracker's own).
    """
    config = config if config is not None else closed_loop_config()
    agent = ScriptedAgent(scenario, seed=seed)
    judge = ScriptedJudge(agent.judge_answer, analysis="closed-loop ground truth")
    result = RunResult(
        id=scenario.id,
        family=scenario.family,
        origin=scenario.origin,
        kind=scenario.kind,
        policy=scenario.policy,
        looping=scenario.looping,
    )
    started = time.perf_counter()
    history: list[Message] = [dict(m) for m in scenario.opening]
    try:
        tracker = LoopTracker(
            config, client=judge, detectors=detectors(config) if detectors else None
        )
        while True:
            verdict = await tracker.turn_started(history)
            if verdict:
                flag = _flag(agent, verdict)
                result.flags.append(flag)
                if verdict.action is Action.STOP:
                    result.end, result.stopped_phase = "stopped", flag.phase
                    break
                if verdict.recovery_message:
                    history.append({"role": "user", "content": verdict.recovery_message})
                agent.on_recovery()
            turn = agent.next_turn(len(history))
            if turn is None:
                capped = agent.onset_turn is not None and (
                    agent.turns - agent.onset_turn + 1 >= MAX_TURNS_AFTER_ONSET
                )
                result.end = "cap" if capped and agent.phase in LOOPING_PHASES else "finished"
                break
            history.extend(turn)
        result.judge_tokens = tracker.judge_tokens_used
    except Exception as exc:  # the harness boundary: a crash is a finding, not an abort
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        result.end, result.crash = "crashed", f"{type(exc).__name__}: {exc}{where}"
    result.turns = agent.turns
    result.onset_turn = agent.onset_turn
    result.escape_turns = list(agent.escape_turns)
    result.relapse_turn = agent.relapse_turn
    result.judge_calls = len(judge.calls)
    result.wall_s = time.perf_counter() - started
    return result


async def run_closed_loop(
    trajectories: Iterable[Trajectory],
    config: TrackerConfig | None = None,
    *,
    policies: Sequence[Policy] = LOOP_POLICIES,
    productive: bool = True,
    seed: int = DEFAULT_SEED,
    on_done: Callable[[RunResult], None] | None = None,
) -> ClosedLoopReport:
    """Run every looping trajectory under every policy, plus the productive agents.

    Scenarios run one after another: the work is CPU-bound (no judge waits), so overlapping
    them would only interleave the same work.
    """
    config = config if config is not None else closed_loop_config()
    scenarios = loop_scenarios(seeds_from_trajectories(trajectories), policies)
    if productive:
        scenarios += productive_scenarios()
    started = time.perf_counter()
    factory = memo_detectors()
    results = []
    for scenario in scenarios:
        result = await run_scenario(scenario, config, seed=seed, detectors=factory)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return ClosedLoopReport(results, public_config(config), time.perf_counter() - started)
