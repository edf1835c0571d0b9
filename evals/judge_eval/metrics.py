"""Score replay results against their labels: precision, recall, delay and judge cost.

Only the first flag of a trajectory counts, because that is when the agent is told to stop
or change course; what the tracker says afterwards no longer reaches an unchanged agent.

* looping, first flag at or after the onset: true positive, with a detection delay of the
  assistant turns from the onset to the flagged one (0 = flagged on the onset itself);
* looping, first flag before the onset: a false positive (the agent was interrupted while
  still productive) and the loop is missed as well (a false negative);
* looping, never flagged: false negative;
* not looping: any flag is a false positive, none a true negative.

Precision is TP / (TP + FP), recall TP / looping trajectories, and the false-positive rate
counts flagged productive trajectories over all productive ones.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from judge_eval.replay import TrajectoryResult

__all__ = [
    "NOT_LOOPING_KIND",
    "Metrics",
    "Outcome",
    "Score",
    "compute_metrics",
    "group_metrics",
    "percentile",
    "score",
]

# The label kind of a productive trajectory (judge_eval.dataset.KINDS).
NOT_LOOPING_KIND = "none"
# Judge calls are reported per 100 turns: a rate that compares runs of any length.
TURNS_PER_RATE = 100
# The delay percentile reported next to the median: the slow tail users notice.
DELAY_TAIL_PERCENTILE = 90


class Outcome(str, Enum):
    TP = "TP"
    FP = "FP"
    FN = "FN"
    TN = "TN"


@dataclass(frozen=True, slots=True)
class Score:
    """How one labelled trajectory was scored.

    ``missed`` is set for every looping trajectory without a true positive, including the
    ones flagged too early (outcome FP), so recall needs no special case.
    """

    outcome: Outcome
    delay: int | None = None
    missed: bool = False

    @property
    def early(self) -> bool:
        """A looping trajectory flagged before its loop began."""
        return self.outcome is Outcome.FP and self.missed


def score(result: TrajectoryResult) -> Score | None:
    """Score one result from its first flag; None when it is unlabelled."""
    labels = result.labels
    if labels is None:
        return None
    flagged = result.first_flag_index
    if not labels.looping:
        return Score(Outcome.FP if flagged is not None else Outcome.TN)
    onset = labels.onset_message_index
    assert onset is not None  # guaranteed by Labels' own validation
    if flagged is None:
        return Score(Outcome.FN, missed=True)
    if flagged < onset:
        return Score(Outcome.FP, missed=True)
    delay = sum(1 for index in result.assistant_indices if onset <= index <= flagged) - 1
    return Score(Outcome.TP, delay=max(delay, 0))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between ranks (numpy's default).

    None for no values: an empty median is unknown, not zero.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


@dataclass(frozen=True, slots=True)
class Metrics:
    """Detection quality and judge cost over a set of replayed trajectories.

    Ratios are None where their denominator is zero (no flags, no loops), so a report shows
    "-" instead of a misleading 0.
    """

    trajectories: int
    looping: int
    not_looping: int
    tp: int
    fp: int
    fp_before_onset: int
    fn: int
    tn: int
    crashed: int
    precision: float | None
    recall: float | None
    f1: float | None
    fpr: float | None
    delay_median: float | None
    delay_p90: float | None
    turns: int
    judge_calls: int
    judge_errors: int
    calls_per_100_turns: float | None
    tokens_per_trajectory: float | None
    cost_per_trajectory: float | None
    cost_usd: float
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compute_metrics(results: Iterable[TrajectoryResult]) -> Metrics:
    """Metrics over the labelled, uncrashed results; crashes are counted, never scored."""
    results = list(results)
    crashed = sum(1 for r in results if r.crash is not None)
    scored = [(r, s) for r in results if r.crash is None and (s := score(r)) is not None]
    counts = dict.fromkeys(Outcome, 0)
    delays: list[float] = []
    early = 0
    for _, s in scored:
        counts[s.outcome] += 1
        early += s.early
        if s.delay is not None:
            delays.append(s.delay)
    looping = sum(1 for r, _ in scored if r.labels is not None and r.labels.looping)
    not_looping = len(scored) - looping
    tp, fp = counts[Outcome.TP], counts[Outcome.FP]
    precision = _ratio(tp, tp + fp)
    recall = _ratio(tp, looping)
    f1 = (
        2 * precision * recall / (precision + recall)
        if precision is not None and recall is not None and precision + recall > 0
        else (0.0 if precision is not None and recall is not None else None)
    )
    runs = [r for r, _ in scored]
    turns = sum(r.turns for r in runs)
    calls = sum(len(r.calls) for r in runs)
    return Metrics(
        trajectories=len(scored),
        looping=looping,
        not_looping=not_looping,
        tp=tp,
        fp=fp,
        fp_before_onset=early,
        fn=sum(1 for _, s in scored if s.missed),
        tn=counts[Outcome.TN],
        crashed=crashed,
        precision=precision,
        recall=recall,
        f1=f1,
        fpr=_ratio(fp - early, not_looping),
        delay_median=statistics.median(delays) if delays else None,
        delay_p90=percentile(delays, DELAY_TAIL_PERCENTILE),
        turns=turns,
        judge_calls=calls,
        judge_errors=sum(r.judge_errors for r in runs),
        calls_per_100_turns=_ratio(TURNS_PER_RATE * calls, turns),
        tokens_per_trajectory=_ratio(sum(r.tokens for r in runs), len(runs)),
        cost_per_trajectory=_ratio(sum(r.cost_usd for r in runs), len(runs)),
        cost_usd=sum(r.cost_usd for r in runs),
        wall_s=sum(r.wall_s for r in results),
    )


def group_metrics(
    results: Iterable[TrajectoryResult], key: Callable[[TrajectoryResult], str | None]
) -> dict[str, Metrics]:
    """Metrics per group (kind, origin, flag source), groups in first-seen order.

    A result whose key is None belongs to no group (an unlabelled one, for kinds).
    """
    groups: dict[str, list[TrajectoryResult]] = {}
    for result in results:
        name = key(result)
        if name is not None:
            groups.setdefault(name, []).append(result)
    return {name: compute_metrics(members) for name, members in groups.items()}


def kind_of(result: TrajectoryResult) -> str | None:
    """The label kind, "none" for productive runs, None when unlabelled."""
    return result.labels.kind if result.labels is not None else None
