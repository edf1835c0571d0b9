"""What one run did, scored against its ground truth, and the figures of a group of runs.

`RunResult` holds one scenario's flags and end with the phases they came in, and answers
the questions the eval asks of it (flagged in the loop? stopped after recovering?);
`PolicyMetrics` sums those over a policy, the productive agents, or all runs; and
`ClosedLoopReport` holds every run of one eval with those figures.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge_eval.closed_loop.model import (
    ESCAPE_WORK_TURNS,
    JUDGE_LOOKBACK,
    LOOP_POLICIES,
    LOOPING_PHASES,
    MAX_TURNS_AFTER_ONSET,
    RECOVERED_PHASES,
    RELAPSE_AFTER_CALLS,
    Phase,
    Policy,
)


@dataclass(frozen=True, slots=True)
class FlagRecord:
    """One loop verdict and what the agent was really doing when it came."""

    turn: int  # the agent's newest turn when the verdict came (1-based)
    phase: Phase | None
    action: str
    source: str | None
    pattern: str | None
    kind: str | None
    summary: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "turn": self.turn,
            "phase": self.phase.value if self.phase else None,
            "action": self.action,
            "source": self.source,
            "pattern": self.pattern,
            "kind": self.kind,
            "summary": self.summary,
        }


@dataclass(slots=True)
class RunResult:
    """What happened in one scenario, and the ground truth to score it."""

    id: str
    family: str
    origin: str
    kind: str
    policy: Policy
    looping: bool
    turns: int = 0
    onset_turn: int | None = None
    escape_turns: list[int] = field(default_factory=list)
    relapse_turn: int | None = None
    flags: list[FlagRecord] = field(default_factory=list)
    end: str = "finished"  # finished | stopped | cap | crashed
    stopped_phase: Phase | None = None
    judge_calls: int = 0
    judge_tokens: int = 0
    wall_s: float = 0.0
    crash: str | None = None

    def flags_in(self, phases: Iterable[Phase]) -> list[FlagRecord]:
        wanted = frozenset(phases)
        return [f for f in self.flags if f.phase in wanted]

    @property
    def stopped(self) -> bool:
        return self.end == "stopped"

    @property
    def loop_flagged(self) -> bool:
        return bool(self.flags_in([Phase.LOOP]))

    @property
    def first_loop_flag(self) -> int | None:
        flags = self.flags_in([Phase.LOOP])
        return flags[0].turn if flags else None

    @property
    def onset_to_flag(self) -> int | None:
        first = self.first_loop_flag
        return None if first is None or self.onset_turn is None else first - self.onset_turn

    @property
    def onset_to_escape(self) -> int | None:
        if not self.escape_turns or self.onset_turn is None:
            return None
        return self.escape_turns[0] - self.onset_turn

    @property
    def reflags(self) -> list[FlagRecord]:
        """Loop verdicts on an agent that had escaped and was doing new, distinct work."""
        return self.flags_in(RECOVERED_PHASES)

    @property
    def reflags_before_relapse(self) -> list[FlagRecord]:
        """Re-flags in the first escape only (a relapsing agent escapes a second time)."""
        relapse = self.relapse_turn
        return [f for f in self.reflags if relapse is None or f.turn < relapse]

    @property
    def stopped_after_recovery(self) -> bool:
        return self.stopped and self.stopped_phase in RECOVERED_PHASES

    @property
    def stopped_looping(self) -> bool:
        return self.stopped and self.stopped_phase in LOOPING_PHASES

    @property
    def ended_by_recovery(self) -> bool:
        """The agent escaped after a recovery message and was not stopped for it."""
        return bool(self.escape_turns) and not self.stopped_after_recovery

    @property
    def relapse_caught(self) -> bool:
        return bool(self.flags_in([Phase.RELAPSE]))

    @property
    def false_stop(self) -> bool:
        """A productive agent was stopped."""
        return self.stopped and self.stopped_phase is Phase.PRODUCTIVE

    @property
    def stopped_before_onset(self) -> bool:
        """Stopped during the recorded work before the labelled onset: reported, not a
        must-be-0 figure, since it rests on where a person put the onset (the replay eval
        calls its flags "FP<onset")."""
        return self.stopped and self.stopped_phase is Phase.PREFIX

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "origin": self.origin,
            "kind": self.kind,
            "policy": self.policy.value,
            "looping": self.looping,
            "turns": self.turns,
            "onset_turn": self.onset_turn,
            "escape_turns": self.escape_turns,
            "relapse_turn": self.relapse_turn,
            "end": self.end,
            "stopped_phase": self.stopped_phase.value if self.stopped_phase else None,
            "onset_to_flag": self.onset_to_flag,
            "onset_to_escape": self.onset_to_escape,
            "reflags": len(self.reflags),
            "reflags_before_relapse": len(self.reflags_before_relapse),
            "judge_calls": self.judge_calls,
            "judge_tokens": self.judge_tokens,
            "wall_s": round(self.wall_s, 4),
            "crash": self.crash,
            "flags": [f.to_dict() for f in self.flags],
        }


def _median(values: Sequence[int]) -> float | None:
    return float(statistics.median(values)) if values else None


def _p90(values: Sequence[int]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = 0.9 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, slots=True)
class PolicyMetrics:
    """The figures of one group of runs (a policy, the productive agents, or all)."""

    name: str
    runs: int
    loop_runs: int
    loops_flagged: int
    ended_by_recovery: int
    reflagged_runs: int
    reflags: int
    reflags_before_relapse: int
    stopped_after_recovery: int
    relapses: int
    relapses_caught: int
    stopped_looping: int
    capped: int
    flags_before_onset: int
    stopped_before_onset: int
    productive_runs: int
    productive_flagged: int
    false_stops: int
    onset_to_flag_median: float | None
    onset_to_flag_p90: float | None
    onset_to_escape_median: float | None
    onset_to_escape_p90: float | None
    judge_calls: int
    turns: int
    crashed: int

    @classmethod
    def of(cls, name: str, results: Sequence[RunResult]) -> PolicyMetrics:
        loops = [r for r in results if r.looping]
        productive = [r for r in results if not r.looping]
        to_flag = [d for r in loops if (d := r.onset_to_flag) is not None]
        to_escape = [d for r in loops if (d := r.onset_to_escape) is not None]
        return cls(
            name=name,
            runs=len(results),
            loop_runs=len(loops),
            loops_flagged=sum(r.loop_flagged for r in loops),
            ended_by_recovery=sum(r.ended_by_recovery for r in loops),
            reflagged_runs=sum(bool(r.reflags) for r in loops),
            reflags=sum(len(r.reflags) for r in loops),
            reflags_before_relapse=sum(len(r.reflags_before_relapse) for r in loops),
            stopped_after_recovery=sum(r.stopped_after_recovery for r in loops),
            relapses=sum(r.relapse_turn is not None for r in loops),
            relapses_caught=sum(r.relapse_caught for r in loops),
            stopped_looping=sum(r.stopped_looping for r in loops),
            capped=sum(r.end == "cap" for r in loops),
            flags_before_onset=sum(len(r.flags_in([Phase.PREFIX])) for r in loops),
            stopped_before_onset=sum(r.stopped_before_onset for r in loops),
            productive_runs=len(productive),
            productive_flagged=sum(bool(r.flags) for r in productive),
            false_stops=sum(r.false_stop for r in results),
            onset_to_flag_median=_median(to_flag),
            onset_to_flag_p90=_p90(to_flag),
            onset_to_escape_median=_median(to_escape),
            onset_to_escape_p90=_p90(to_escape),
            judge_calls=sum(r.judge_calls for r in results),
            turns=sum(r.turns for r in results),
            crashed=sum(r.crash is not None for r in results),
        )

    @property
    def failures(self) -> list[str]:
        """The figures that must be 0 and are not."""
        out = []
        if self.stopped_after_recovery:
            out.append(f"{self.stopped_after_recovery} run(s) stopped after the agent recovered")
        if self.false_stops:
            out.append(f"{self.false_stops} productive run(s) stopped")
        if self.crashed:
            out.append(f"{self.crashed} run(s) crashed")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass(slots=True)
class ClosedLoopReport:
    """All runs of one closed-loop eval, with figures per policy and overall."""

    results: list[RunResult]
    config: dict[str, Any]
    elapsed_s: float = 0.0

    def by_policy(self) -> list[PolicyMetrics]:
        rows = []
        for policy in (*LOOP_POLICIES, Policy.PRODUCTIVE):
            group = [r for r in self.results if r.policy is policy]
            if group:
                rows.append(PolicyMetrics.of(policy.value, group))
        return rows

    def overall(self) -> PolicyMetrics:
        return PolicyMetrics.of("overall", self.results)

    def reflag_sources(self) -> dict[str, Counter[str]]:
        """Re-flags after an escape, by policy: ``source / kind`` -> count."""
        out: dict[str, Counter[str]] = {}
        for r in self.results:
            for f in r.reflags:
                out.setdefault(r.policy.value, Counter())[f"{f.source} / {f.kind}"] += 1
        return out

    def productive_families(self) -> list[PolicyMetrics]:
        families = sorted({r.family for r in self.results if not r.looping})
        return [
            PolicyMetrics.of(family, [r for r in self.results if r.family == family])
            for family in families
        ]

    @property
    def failures(self) -> list[str]:
        return self.overall().failures

    def to_dict(self) -> dict[str, Any]:
        return {
            "elapsed_s": round(self.elapsed_s, 3),
            "config": self.config,
            "constants": {
                "escape_work_turns": ESCAPE_WORK_TURNS,
                "relapse_after_calls": RELAPSE_AFTER_CALLS,
                "max_turns_after_onset": MAX_TURNS_AFTER_ONSET,
                "judge_lookback": JUDGE_LOOKBACK,
            },
            "overall": self.overall().to_dict(),
            "by_policy": {m.name: m.to_dict() for m in self.by_policy()},
            "productive_families": {m.name: m.to_dict() for m in self.productive_families()},
            "reflag_sources": {k: dict(v) for k, v in self.reflag_sources().items()},
            "failures": self.failures,
            "runs": [r.to_dict() for r in self.results],
        }
