"""Scored runs as tables: the numbers the terminal and report.md both show.

A table is plain data (`TableData`: title, columns, rows of strings) so the command line
(rich, in judge_eval.cli.output) and the markdown file render the same cells from one
source. This module holds the `Run` being tabled, the cell formatting and one builder per
table; writing files is `report_files`, drawing is `chart`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from judge_eval.dataset import KINDS
from judge_eval.loso import LosoResult
from judge_eval.metrics import Metrics, compute_metrics, group_metrics, kind_of
from judge_eval.replay import TrajectoryResult
from judge_eval.sweep import SweepRow, describe_setting

__all__ = [
    "Run",
    "TableData",
    "flag_source_table",
    "grouped_table",
    "loso_tables",
    "main_tables",
    "overall_table",
    "public_config",
    "sweep_table",
    "unlabelled_summary",
    "unlabelled_table",
]

# Config fields never written to a report (secrets) or not worth a column (endpoints).
_PRIVATE_FIELDS = frozenset({"api_key", "api_base"})
_MISSING = "-"


@dataclass(slots=True)
class Run:
    """One replay of the data under one configuration (e.g. the seed or gated schedule)."""

    name: str
    config: dict[str, Any]
    results: list[TrajectoryResult]
    elapsed_s: float
    metrics: Metrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = compute_metrics(self.results)

    @property
    def labelled(self) -> list[TrajectoryResult]:
        return [r for r in self.results if r.labels is not None]


@dataclass(frozen=True, slots=True)
class TableData:
    title: str
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]


def public_config(config: Any) -> dict[str, Any]:
    """A `TrackerConfig` as JSON-safe values, without secrets or endpoints."""
    data = config.model_dump(mode="json")
    return {k: v for k, v in data.items() if k not in _PRIVATE_FIELDS}


# -- formatting ------------------------------------------------------------------------------


def _ratio(value: float | None) -> str:
    return _MISSING if value is None else f"{value:.2f}"


def _number(value: float | None, digits: int = 1) -> str:
    return _MISSING if value is None else f"{value:.{digits}f}"


def _money(value: float | None) -> str:
    return _MISSING if value is None else f"${value:.4f}"


_QUALITY_COLUMNS = ("n", "loops", "TP", "FP", "FP<onset", "FN", "TN")
_RATE_COLUMNS = ("prec", "recall", "F1", "FPR", "delay med", "p90")
_COST_COLUMNS = ("calls/100t", "tokens/traj", "$/traj")


def _metric_cells(m: Metrics, *, cost: bool) -> tuple[str, ...]:
    cells: tuple[str, ...] = (
        str(m.trajectories),
        str(m.looping),
        str(m.tp),
        str(m.fp),
        str(m.fp_before_onset),
        str(m.fn),
        str(m.tn),
        _ratio(m.precision),
        _ratio(m.recall),
        _ratio(m.f1),
        _ratio(m.fpr),
        _number(m.delay_median),
        _number(m.delay_p90),
    )
    if cost:
        cells += (
            _number(m.calls_per_100_turns),
            _number(m.tokens_per_trajectory, 0),
            _money(m.cost_per_trajectory),
        )
    return cells


def _uses_judge(runs: Sequence[Run]) -> bool:
    return any(r.metrics.judge_calls or r.config.get("fast_model") for r in runs)


def overall_table(runs: Sequence[Run]) -> TableData:
    cost = _uses_judge(runs)
    columns: tuple[str, ...] = ("run", *_QUALITY_COLUMNS, *_RATE_COLUMNS)
    if cost:
        columns += _COST_COLUMNS
    columns += ("crashed", "wall s")
    rows: list[tuple[str, ...]] = [
        (
            run.name,
            *_metric_cells(run.metrics, cost=cost),
            str(run.metrics.crashed),
            f"{run.elapsed_s:.2f}",
        )
        for run in runs
    ]
    return TableData("overall", columns, rows)


def _kind_order(name: str) -> int:
    return KINDS.index(name) if name in KINDS else len(KINDS)


def grouped_table(title: str, label: str, groups: dict[str, Metrics], *, cost: bool) -> TableData:
    columns: tuple[str, ...] = (label, *_QUALITY_COLUMNS, *_RATE_COLUMNS)
    if cost:
        columns += _COST_COLUMNS
    rows: list[tuple[str, ...]] = [
        (name, *_metric_cells(m, cost=cost)) for name, m in groups.items()
    ]
    return TableData(title, columns, rows)


def flag_source_table(run: Run) -> TableData:
    """Who raised each first flag, and how good and how early those flags were."""
    groups = group_metrics(run.labelled, lambda r: r.flag_source)
    rows: list[tuple[str, ...]] = [
        (
            name,
            str(m.tp + m.fp),
            str(m.tp),
            str(m.fp),
            str(m.fp_before_onset),
            _ratio(m.precision),
            _number(m.delay_median),
            _number(m.delay_p90),
        )
        for name, m in sorted(groups.items())
    ]
    columns = ("source", "flags", "TP", "FP", "FP<onset", "prec", "delay med", "p90")
    return TableData(f"{run.name}: first flags by source", columns, rows)


def main_tables(runs: Sequence[Run]) -> list[TableData]:
    """Overall comparison, then per kind, per origin and per flag source for each run."""
    cost = _uses_judge(runs)
    tables = [overall_table(runs)]
    for run in runs:
        by_kind = group_metrics(run.labelled, kind_of)
        by_kind = dict(sorted(by_kind.items(), key=lambda item: _kind_order(item[0])))
        by_origin = dict(sorted(group_metrics(run.labelled, lambda r: r.origin).items()))
        tables.append(grouped_table(f"{run.name}: by kind", "kind", by_kind, cost=cost))
        tables.append(grouped_table(f"{run.name}: by source", "source", by_origin, cost=cost))
        tables.append(flag_source_table(run))
    return tables


def sweep_table(rows: Sequence[SweepRow]) -> TableData:
    fields = list(rows[0].setting) if rows else []
    columns = (*fields, "TP", "FP", "FN", "precision", "recall", "F1", "FPR", "delay med")
    body = [
        (
            *(row.setting[f] for f in fields),
            str(row.metrics.tp),
            str(row.metrics.fp),
            str(row.metrics.fn),
            _ratio(row.metrics.precision),
            _ratio(row.metrics.recall),
            _ratio(row.metrics.f1),
            _ratio(row.metrics.fpr),
            _number(row.metrics.delay_median),
        )
        for row in rows
    ]
    return TableData("sweep (heuristics only)", columns, body)


_LOSO_COLUMNS = ("TP", "FP", "FN", "TN", "prec", "recall", "F1", "FPR")


def _loso_cells(m: Metrics) -> tuple[str, ...]:
    return (
        str(m.tp),
        str(m.fp),
        str(m.fn),
        str(m.tn),
        _ratio(m.precision),
        _ratio(m.recall),
        _ratio(m.f1),
        _ratio(m.fpr),
    )


def loso_tables(name: str, loso: LosoResult) -> list[TableData]:
    """The grid in-sample, one row per held-out source, LOSO per kind, and last the three
    figures side by side: in-sample with the defaults, in-sample with the grid's best
    setting, and the pooled held-out (LOSO) figure."""
    grid = TableData(
        f"{name}: LOSO grid, in-sample",
        ("setting", *_LOSO_COLUMNS),
        [
            (describe_setting(s), *_loso_cells(m))
            for s, m in zip(loso.settings, loso.in_sample, strict=True)
        ],
    )
    folds = TableData(
        f"{name}: LOSO folds (setting chosen on the other families)",
        ("held-out family", "n", "loops", "chosen setting", "train F1", *_LOSO_COLUMNS),
        [
            (
                f.source,
                str(f.held_out.trajectories),
                str(f.held_out.looping),
                describe_setting(f.setting),
                _ratio(f.train.f1),
                *_loso_cells(f.held_out),
            )
            for f in loso.folds
        ],
    )
    by_kind = grouped_table(f"{name}: LOSO by kind", "kind", loso.by_kind(), cost=False)
    best = loso.settings[loso.best]
    summary = TableData(
        f"{name}: leave-one-family-out ({len(loso.folds)} families)",
        ("figure", "setting", *_LOSO_COLUMNS),
        [
            ("in-sample, defaults", describe_setting({}), *_loso_cells(loso.default)),
            (
                "in-sample, best of grid",
                describe_setting(best),
                *_loso_cells(loso.in_sample[loso.best]),
            ),
            ("LOSO, pooled", "chosen per fold", *_loso_cells(loso.pooled)),
        ],
    )
    return [grid, folds, by_kind, summary]


def unlabelled_summary(results: Iterable[TrajectoryResult]) -> dict[str, Any]:
    """Counts for runs without labels: they prove nothing crashes, and are never scored."""
    runs = [r for r in results if r.labels is None]
    return {
        "trajectories": len(runs),
        "turns": sum(r.turns for r in runs),
        "flagged": sum(1 for r in runs if r.first_flag_index is not None),
        "crashed": sum(1 for r in runs if r.crash is not None),
        "judge_calls": sum(len(r.calls) for r in runs),
        "flag_sources": _count(r.flag_source for r in runs if r.flag_source),
    }


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return dict(sorted(out.items()))


def unlabelled_table(runs: Sequence[Run]) -> TableData | None:
    rows = []
    for run in runs:
        s = unlabelled_summary(run.results)
        if s["trajectories"]:
            rows.append(
                (
                    run.name,
                    *(
                        str(s[k])
                        for k in ("trajectories", "turns", "flagged", "crashed", "judge_calls")
                    ),
                )
            )
    if not rows:
        return None
    return TableData(
        "unlabelled (replayed, not scored)",
        ("run", "trajectories", "turns", "flagged", "crashed", "judge calls"),
        rows,
    )
