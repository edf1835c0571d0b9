"""Replay recorded trajectories through a `LoopTracker`, turn by turn, as an agent would.

A recorded run is a finished history; the tracker must instead see it grow. Each turn hands
the tracker the history up to one assistant message and the tool results that answer it,
which is exactly what an agent passes to ``turn_started`` before asking its model again.
Everything the tracker said (first flag, its source, every judge call with its tokens,
latency and cost) is kept on a `TrajectoryResult` so that scoring never re-runs anything.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from judge.config import TrackerConfig
from judge.llm._litellm import LLMClient
from judge.tracker import LoopTracker
from judge.turns import assistant_turns
from judge.verdict import Verdict
from judge_eval.dataset import Labels, Trajectory

__all__ = [
    "DEFAULT_CONCURRENCY",
    "CallRecord",
    "ClientFactory",
    "TrajectoryResult",
    "origin_of",
    "replay_all",
    "replay_trajectory",
]

# Trajectories replayed at once. Judge calls dominate the wall time of a judge-mode eval;
# 8 in flight stays under the default rate limits of hosted flash models.
DEFAULT_CONCURRENCY = 8
# Hand-made trajectories carry this repo name in their source (evals/make_handmade.py).
_HANDMADE_REPO = "loop-judge"
# Agent names longer than this lose their parenthesised detail in tables
# ("Magentic-One (Orchestrator + WebSurfer/...)" -> "Magentic-One").
_ORIGIN_CHARS = 30

ClientFactory = Callable[[Trajectory], LLMClient | None]
"""Builds the judge client for one trajectory (the oracle must know whose labels to read)."""


def origin_of(traj: Trajectory) -> str:
    """Which collection a trajectory comes from, for the per-source tables.

    Recorded runs name their agent in ``meta.agent``; hand-made scenarios all share one
    bucket, since their agent names only describe the scenario's style.
    """
    source, meta = traj.source, traj.meta
    if source.get("repo") == _HANDMADE_REPO:
        return "handmade"
    agent = meta.get("agent")
    if isinstance(agent, str) and agent:
        if len(agent) > _ORIGIN_CHARS and " (" in agent:
            agent = agent.split(" (", 1)[0]
        return agent
    repo = source.get("repo")
    return repo if isinstance(repo, str) and repo else "unknown"


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One judge model call made during a replay (successful or not)."""

    turn: int
    message_index: int
    model: str
    stage: str
    confidence: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    cost_usd: float | None
    error: str | None

    @property
    def tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)


@dataclass(slots=True)
class TrajectoryResult:
    """What the tracker said about one trajectory, plus the labels needed to score it.

    ``assistant_indices`` are the message indices of the turns, so a detection delay can be
    counted in turns from the onset without the messages at hand.
    """

    id: str
    labels: Labels | None = None
    origin: str = "unknown"
    messages: int = 0
    assistant_indices: tuple[int, ...] = ()
    turns: int = 0
    first_flag_index: int | None = None
    first_flag_turn: int | None = None
    flag_source: str | None = None
    flag_kind: str | None = None
    flags: int = 0
    calls: list[CallRecord] = field(default_factory=list)
    judge_errors: int = 0
    wall_s: float = 0.0
    crash: str | None = None

    @property
    def tokens(self) -> int:
        return sum(c.tokens for c in self.calls)

    @property
    def cost_usd(self) -> float:
        return sum(c.cost_usd or 0.0 for c in self.calls)

    @property
    def latency_s(self) -> float:
        return sum(c.latency_s for c in self.calls)


def _record(result: TrajectoryResult, index: int, verdict: Verdict) -> None:
    for call in verdict.judge_calls:
        result.calls.append(
            CallRecord(
                turn=verdict.turn,
                message_index=index,
                model=call.model,
                stage=call.stage.value,
                confidence=call.confidence,
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                latency_s=call.latency_s,
                cost_usd=call.cost_usd,
                error=call.error,
            )
        )
    result.judge_errors += len(verdict.errors)
    if not verdict:
        return
    result.flags += 1
    if result.first_flag_index is None:
        result.first_flag_index = index
        result.first_flag_turn = verdict.turn
        result.flag_source = verdict.source
        result.flag_kind = verdict.kind.value if verdict.kind is not None else None


async def replay_trajectory(
    traj: Trajectory, config: TrackerConfig, client: LLMClient | None = None
) -> TrajectoryResult:
    """Replay one trajectory through a fresh tracker and record what it said.

    The whole run is replayed even after the first flag: the judge calls it would still
    make are part of the schedule's cost. A crash (a tracker bug, a history it rejects) is
    recorded on the result instead of raised, so one bad trajectory cannot hide the
    verdicts on all the others; the eval's exit code reports it.
    """
    turns = assistant_turns(traj.messages)
    result = TrajectoryResult(
        id=traj.id,
        labels=traj.labels,
        origin=origin_of(traj),
        messages=len(traj.messages),
        assistant_indices=tuple(index for index, _ in turns),
    )
    started = time.perf_counter()
    try:
        tracker = LoopTracker(config, client=client)
        for index, end in turns:
            verdict = await tracker.turn_started(traj.messages[:end])
            result.turns += 1
            _record(result, index, verdict)
    except Exception as exc:  # the harness boundary: a crash is a finding, not an abort
        frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        where = f" at {frame.filename}:{frame.lineno}" if frame else ""
        result.crash = f"{type(exc).__name__}: {exc}{where}"
    result.wall_s = time.perf_counter() - started
    return result


async def replay_all(
    trajectories: Sequence[Trajectory],
    config: TrackerConfig,
    *,
    client_factory: ClientFactory | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_done: Callable[[TrajectoryResult], None] | None = None,
) -> list[TrajectoryResult]:
    """Replay many trajectories, at most ``concurrency`` at a time; results keep input order.

    Judge calls are I/O bound, so overlapping trajectories divides a judge-mode eval's wall
    time; the limiter keeps a large data set from opening hundreds of requests at once.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    limiter = anyio.CapacityLimiter(concurrency)
    results: list[TrajectoryResult | None] = [None] * len(trajectories)

    async def one(position: int, traj: Trajectory) -> None:
        async with limiter:
            client = client_factory(traj) if client_factory is not None else None
            result = await replay_trajectory(traj, config, client)
        results[position] = result
        if on_done is not None:
            on_done(result)

    async with anyio.create_task_group() as group:
        for position, traj in enumerate(trajectories):
            group.start_soon(one, position, traj)
    return [r for r in results if r is not None]
