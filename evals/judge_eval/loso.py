"""Leave-one-family-out (LOSO): how tuned thresholds score on an agent family they never saw.

A threshold chosen because it scores best on the data it is then measured on flatters
itself: the figure rewards fitting those very trajectories, so every tuned figure is shown
next to its LOSO twin. For each agent family F, the grid setting with the best F1 on every
other family is chosen and F is scored with it; the held-out counts of all folds are then
pooled into one figure. A rule that helps only in-sample shows up as a LOSO figure under
the in-sample one.

A family is the first word of what the eval's by-source table groups by
(`TrajectoryResult.origin`: the recorded agent, or "handmade"; `family_of`). A family
without loops is still a fold: its false alarms are exactly what a setting tuned elsewhere
may add.

Cost: each setting replays the data once (`judge_eval.sweep.replay_grid`); the folds
only re-score those replays, so any number of families costs one sweep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from judge.config import TrackerConfig
from judge_eval.dataset import KINDS
from judge_eval.metrics import Metrics, compute_metrics, group_metrics, kind_of, score
from judge_eval.replay import TrajectoryResult
from judge_eval.sweep import (
    GridReplay,
    SweepAxis,
    build_configs,
    describe_setting,
    settings_grid,
)

__all__ = [
    "LOSO_GRID",
    "Fold",
    "LosoResult",
    "build_loso_configs",
    "choose_setting",
    "family_of",
    "leave_one_source_out",
    "loso_settings",
    "one_at_a_time",
    "source_of",
]

# The default grid: detector thresholds of TrackerConfig's "balanced" preset, each one step
# either side of its default. These are the numbers a tuning pass on the dev split moves
# (the preset's repeat and similarity limits); thresholds that live as module constants in
# the detectors are not config fields and so not tunable here. They are varied one at a
# time around the defaults, 1 + 6 x 2 = 13 replays, because the cartesian product of six
# axes would be 3^6 = 729 (one replay of evals/data takes ~25 s on one core).
LOSO_GRID: tuple[SweepAxis, ...] = (
    SweepAxis("other_repeat_limit", ("2", "4")),  # default 3
    SweepAxis("result_cycle_min", ("3", "5")),  # default 4
    SweepAxis("cycle_repeats_period2", ("2", "4")),  # default 3
    SweepAxis("retry_min_variants", ("3", "5")),  # default 4
    SweepAxis("retry_similarity", ("0.85", "0.95")),  # default 0.9
    SweepAxis("text_similarity", ("0.9", "0.98")),  # default 0.95
)


def one_at_a_time(axes: Sequence[SweepAxis]) -> list[dict[str, str]]:
    """One setting per value of each axis, every other field left at its default."""
    return [{axis.field: value} for axis in axes for value in axis.values]


def loso_settings(axes: Sequence[SweepAxis] = ()) -> list[dict[str, str]]:
    """The settings LOSO chooses among: the defaults first, then ``axes``' cartesian
    product (``--sweep``), or `LOSO_GRID` one value at a time when no axes are given.

    The defaults are always a candidate, both as the tie-break and because the in-sample
    figure of the shipped configuration is reported next to the others.
    """
    grid = settings_grid(axes) if axes else one_at_a_time(LOSO_GRID)
    seen = [dict[str, str]()]
    for setting in grid:
        if setting not in seen:
            seen.append(setting)
    return seen


def build_loso_configs(
    base: Mapping[str, Any], settings: Sequence[dict[str, str]]
) -> list[tuple[dict[str, str], TrackerConfig]]:
    """A validated config per setting (a bad value is a `ConfigError` naming the field),
    without settings that merely restate an earlier one (``other_repeat_limit=3`` is the
    defaults): a duplicate would cost a replay and could only ever tie."""
    built = build_configs(base, settings)
    kept: list[tuple[dict[str, str], TrackerConfig]] = []
    for setting, config in built:
        if all(config != other for _, other in kept):
            kept.append((setting, config))
    return kept


def family_of(origin: str) -> str:
    """The agent family of a source: its first word, the project that built the agent.

    Sources name the project first and then the variant ("smolagents CodeAgent" and
    "smolagents ToolCallingAgent", "mini-swe-agent 1.15.0" and "2.2.7", "OpenHands agent
    SDK" and "OpenHands CodeActAgent", "ReAct (FEVER)" and "ReAct (WebShop)"). Variants of
    one project share its prompts, its harness messages and its tools, so a threshold
    chosen on one sibling and scored on another would not be held out at all: siblings
    are one fold.
    """
    return origin.split(maxsplit=1)[0] if origin.strip() else origin


def source_of(result: TrajectoryResult) -> str:
    """The fold a trajectory belongs to: its agent family (`family_of` its source)."""
    return family_of(result.origin)


def _exact_f1(m: Metrics) -> Fraction:
    """F1 from the counts, exactly, so equal scores tie instead of differing in the last
    float bit. 2TP / (2TP + FP + FN) is the harmonic mean of precision and recall; with no
    loops and no flags there is nothing to get wrong, and nothing to prefer: 0."""
    denominator = 2 * m.tp + m.fp + m.fn
    return Fraction(2 * m.tp, denominator) if denominator else Fraction(0)


def _exact_precision(m: Metrics) -> Fraction:
    # No flags raised no false alarm: ranked as precise as can be, so on a training set
    # without loops the setting that stays silent beats one that cries wolf.
    flagged = m.tp + m.fp
    return Fraction(m.tp, flagged) if flagged else Fraction(1)


def choose_setting(candidates: Sequence[Metrics]) -> int:
    """The index of the best candidate: highest F1, then highest precision, then the
    earliest (index 0 being the defaults, the defaults win any tie)."""
    if not candidates:
        raise ValueError("no candidate settings to choose from")
    return min(
        range(len(candidates)),
        key=lambda i: (-_exact_f1(candidates[i]), -_exact_precision(candidates[i]), i),
    )


@dataclass(frozen=True, slots=True)
class Fold:
    """One held-out family (``source``): the setting chosen without it, and how that
    setting scored on the families it was chosen on (``train``) and on the held-out one."""

    source: str
    chosen: int
    setting: dict[str, str]
    train: Metrics
    held_out: Metrics


@dataclass(frozen=True, slots=True)
class LosoResult:
    """In-sample figures per setting, the folds, and the pooled held-out figure.

    ``pooled_results`` holds, for every trajectory, its replay under the setting chosen
    for its own family's fold: scoring it is pooling the folds' counts, and grouping it by
    kind gives the per-kind LOSO figure.
    """

    settings: list[dict[str, str]]
    in_sample: list[Metrics]
    best: int
    folds: list[Fold]
    pooled_results: list[TrajectoryResult]
    pooled: Metrics

    @property
    def default(self) -> Metrics:
        return self.in_sample[0]

    def by_kind(self) -> dict[str, Metrics]:
        groups = group_metrics(self.pooled_results, kind_of)
        order = {kind: i for i, kind in enumerate(KINDS)}
        return dict(sorted(groups.items(), key=lambda item: order.get(item[0], len(order))))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: what report.json keeps under ``loso``."""
        best = self.settings[self.best]
        return {
            "grid": [
                {"setting": s, "name": describe_setting(s), "metrics": m.to_dict()}
                for s, m in zip(self.settings, self.in_sample, strict=True)
            ],
            "in_sample_default": self.default.to_dict(),
            "in_sample_best": {
                "setting": best,
                "name": describe_setting(best),
                "metrics": self.in_sample[self.best].to_dict(),
            },
            "pooled": self.pooled.to_dict(),
            "folds": [
                {
                    "source": f.source,
                    "setting": f.setting,
                    "name": describe_setting(f.setting),
                    "train": f.train.to_dict(),
                    "held_out": f.held_out.to_dict(),
                }
                for f in self.folds
            ],
            "by_kind": {kind: m.to_dict() for kind, m in self.by_kind().items()},
            # Per trajectory, held out: lets a reader score any subset (one dev set, say)
            # the way the folds were scored, without replaying the grid again.
            "pooled_trajectories": [
                {"id": r.id, "outcome": s.outcome.value, "delay": s.delay}
                for r in self.pooled_results
                if (s := score(r)) is not None
            ],
        }


def _sources(results: Iterable[TrajectoryResult]) -> list[str]:
    """The families with a labelled trajectory, sorted; a family with only unlabelled
    runs has nothing to score and is no fold."""
    return sorted({source_of(r) for r in results if r.labels is not None})


def leave_one_source_out(replays: Sequence[GridReplay]) -> LosoResult:
    """Choose a setting per held-out family from the others' scores and pool the folds.

    ``replays[0]`` must be the defaults (it wins ties) and every replay must hold the same
    trajectories in the same order, as `replay_grid` returns them.
    """
    if not replays:
        raise ValueError("leave-one-family-out needs at least one replay")
    ids = [r.id for r in replays[0].results]
    for replay in replays[1:]:
        if [r.id for r in replay.results] != ids:
            raise ValueError(
                f"setting {describe_setting(replay.setting)} replayed other trajectories "
                "than the defaults; every setting must replay the same ones in order"
            )
    in_sample = [compute_metrics(r.results) for r in replays]
    sources = [source_of(r) for r in replays[0].results]
    folds = []
    chosen_for: dict[str, int] = {}
    for held_out in _sources(replays[0].results):
        train = [
            compute_metrics(
                r for r, s in zip(replay.results, sources, strict=True) if s != held_out
            )
            for replay in replays
        ]
        chosen = choose_setting(train)
        chosen_for[held_out] = chosen
        tested = [r for r, s in zip(replays[chosen].results, sources, strict=True) if s == held_out]
        folds.append(
            Fold(held_out, chosen, replays[chosen].setting, train[chosen], compute_metrics(tested))
        )
    pooled_results = [
        replays[chosen_for[s]].results[i] if s in chosen_for else replays[0].results[i]
        for i, s in enumerate(sources)
    ]
    return LosoResult(
        settings=[r.setting for r in replays],
        in_sample=in_sample,
        best=choose_setting(in_sample),
        folds=folds,
        pooled_results=pooled_results,
        pooled=compute_metrics(pooled_results),
    )
