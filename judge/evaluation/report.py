"""Turn scored runs into tables, ``report.json``, ``report.md`` and a PNG chart.

Tables are plain data (`TableData`) so the terminal (rich, in judge.cli) and the markdown
file show the same numbers from one source. matplotlib is optional (the ``eval`` extra):
without it the chart is skipped with a one-line note, never an error.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from judge.evaluation.metrics import (
    Metrics,
    Outcome,
    compute_metrics,
    group_metrics,
    kind_of,
    score,
)
from judge.evaluation.replay import TrajectoryResult
from judge.evaluation.sweep import SweepRow
from judge.trajectories.dataset import KINDS, ImportProblem

__all__ = [
    "CHART_FILE",
    "JSON_FILE",
    "MARKDOWN_FILE",
    "Run",
    "TableData",
    "build_report",
    "main_tables",
    "sweep_table",
    "unlabelled_summary",
    "write_chart",
    "write_markdown",
]

JSON_FILE = "report.json"
MARKDOWN_FILE = "report.md"
CHART_FILE = "report.png"
# Chart size in inches at CHART_DPI: two panels side by side stay legible on a laptop.
CHART_SIZE_IN = (12.0, 4.5)
CHART_DPI = 110
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
    cells = (
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
    columns = ("run", *_QUALITY_COLUMNS, *_RATE_COLUMNS)
    if cost:
        columns += _COST_COLUMNS
    columns += ("crashed", "wall s")
    rows = [
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
    columns = (label, *_QUALITY_COLUMNS, *_RATE_COLUMNS)
    if cost:
        columns += _COST_COLUMNS
    rows = [(name, *_metric_cells(m, cost=cost)) for name, m in groups.items()]
    return TableData(title, columns, rows)


def flag_source_table(run: Run) -> TableData:
    """Who raised each first flag, and how good and how early those flags were."""
    groups = group_metrics(run.labelled, lambda r: r.flag_source)
    rows = [
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


# -- report.json -----------------------------------------------------------------------------


def trajectory_row(result: TrajectoryResult) -> dict[str, Any]:
    s = score(result)
    labels = result.labels
    return {
        "id": result.id,
        "origin": result.origin,
        "looping": labels.looping if labels else None,
        "kind": labels.kind if labels else None,
        "onset": labels.onset_message_index if labels else None,
        "first_flag_index": result.first_flag_index,
        "first_flag_turn": result.first_flag_turn,
        "source": result.flag_source,
        "flag_kind": result.flag_kind,
        "outcome": s.outcome.value if s and result.crash is None else None,
        "delay": s.delay if s else None,
        "turns": result.turns,
        "messages": result.messages,
        "flags": result.flags,
        "judge_calls": len(result.calls),
        "judge_errors": result.judge_errors,
        "tokens": result.tokens,
        "cost_usd": round(result.cost_usd, 8),
        "latency_s": round(result.latency_s, 4),
        "wall_s": round(result.wall_s, 4),
        "crash": result.crash,
        "note": labels.note if labels else None,
        "calls": [
            {
                "turn": c.turn,
                "message_index": c.message_index,
                "model": c.model,
                "stage": c.stage,
                "confidence": c.confidence,
                "prompt_tokens": c.prompt_tokens,
                "completion_tokens": c.completion_tokens,
                "latency_s": round(c.latency_s, 4),
                "cost_usd": c.cost_usd,
                "error": c.error,
            }
            for c in result.calls
        ],
    }


def build_report(
    runs: Sequence[Run],
    *,
    settings: dict[str, Any],
    problems: Sequence[ImportProblem] = (),
    elapsed_s: float,
) -> dict[str, Any]:
    """Everything measured, as JSON-safe data: metrics, breakdowns and per-trajectory rows."""
    out: dict[str, Any] = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        "elapsed_s": round(elapsed_s, 3),
        "import_problems": [{"path": p.path, "reason": p.reason} for p in problems],
        "runs": {},
    }
    for run in runs:
        labelled = run.labelled
        out["runs"][run.name] = {
            "config": run.config,
            "elapsed_s": round(run.elapsed_s, 3),
            "metrics": run.metrics.to_dict(),
            "by_kind": {k: m.to_dict() for k, m in group_metrics(labelled, kind_of).items()},
            "by_origin": {
                k: m.to_dict() for k, m in group_metrics(labelled, lambda r: r.origin).items()
            },
            "by_flag_source": {
                k: m.to_dict() for k, m in group_metrics(labelled, lambda r: r.flag_source).items()
            },
            "unlabelled": unlabelled_summary(run.results),
            "trajectories": [trajectory_row(r) for r in run.results],
        }
    return out


def write_json(report: dict[str, Any], out_dir: Path) -> Path:
    path = out_dir / JSON_FILE
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


# -- report.md -------------------------------------------------------------------------------


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(table: TableData) -> str:
    lines = [
        f"### {table.title}",
        "",
        "| " + " | ".join(table.columns) + " |",
        "| " + " | ".join("---" for _ in table.columns) + " |",
    ]
    lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def _mistakes(run: Run) -> list[str]:
    lines = []
    for result in run.labelled:
        s = score(result)
        if s is None or result.crash is not None or s.outcome in (Outcome.TP, Outcome.TN):
            continue
        labels = result.labels
        assert labels is not None
        if s.early:
            what = (
                f"flagged at {result.first_flag_index}, before onset {labels.onset_message_index}"
            )
        elif s.outcome is Outcome.FP:
            what = f"flagged at {result.first_flag_index} (not looping)"
        else:
            what = f"missed (onset {labels.onset_message_index})"
        source = f" by {result.flag_source}" if result.flag_source else ""
        lines.append(
            f"- **{s.outcome.value}** `{result.id}` ({labels.kind}): {what}{source}. "
            f"Label note: {labels.note or '-'}"
        )
    return lines


def write_markdown(
    runs: Sequence[Run],
    tables: Sequence[TableData],
    out_dir: Path,
    *,
    settings: dict[str, Any],
    problems: Sequence[ImportProblem] = (),
    chart: Path | None = None,
) -> Path:
    parts = ["# loop-judge eval report", ""]
    parts += [f"- {k}: `{v}`" for k, v in settings.items()]
    parts.append("")
    parts.append(
        "Scoring uses each trajectory's first flag. FP<onset: a looping run flagged before "
        "its loop began (also counted as FN). Delay: assistant turns from the onset to the "
        "flag (0 = flagged on the onset message). FPR: flagged productive runs / productive "
        "runs."
    )
    parts.append("")
    if chart is not None:
        parts += [f"![detection delay and judge calls]({chart.name})", ""]
    parts += [markdown_table(t) for t in tables]
    for run in runs:
        parts += [f"### {run.name}: misses and false positives", ""]
        parts += _mistakes(run) or ["none"]
        parts.append("")
        crashes = [r for r in run.results if r.crash is not None]
        if crashes:
            parts += [f"### {run.name}: crashes", ""]
            parts += [f"- `{r.id}`: {r.crash}" for r in crashes]
            parts.append("")
    if problems:
        parts += ["### files that could not be loaded", ""]
        parts += [f"- `{p.path}`: {p.reason}" for p in problems]
        parts.append("")
    path = out_dir / MARKDOWN_FILE
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


# -- chart -----------------------------------------------------------------------------------


def write_chart(runs: Sequence[Run], out_dir: Path) -> tuple[Path | None, str | None]:
    """Draw detection delay and judge calls per trajectory; (path, None) or (None, why not)."""
    if not any(run.labelled for run in runs):
        return None, "chart skipped: no labelled trajectories to score"
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on CI or a server; must precede pyplot
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "chart skipped: matplotlib is not installed (pip install 'loop-judge[eval]')"

    fig, (delay_ax, calls_ax) = plt.subplots(1, 2, figsize=CHART_SIZE_IN, dpi=CHART_DPI)
    delays = {run.name: _delays(run) for run in runs}
    top = max((max(d) for d in delays.values() if d), default=0)
    bins = [b - 0.5 for b in range(0, int(top) + 2)]
    labels = []
    for name, values in delays.items():
        median = f", median {statistics.median(values):g}" if values else ""
        labels.append(f"{name} ({len(values)} caught{median})")
    # Runs side by side in each bin: overlaid outlines hide a run that agrees with another.
    delay_ax.hist(list(delays.values()), bins=bins, label=labels)
    delay_ax.legend(loc="upper right", fontsize="small")
    delay_ax.xaxis.get_major_locator().set_params(integer=True)
    delay_ax.yaxis.get_major_locator().set_params(integer=True)
    delay_ax.set_title("Detection delay (turns after the loop's onset)")
    delay_ax.set_xlabel("turns after onset (0 = flagged at the onset)")
    delay_ax.set_ylabel("looping trajectories caught")

    # Looping runs first, then productive ones; within each, most judge calls first.
    last_calls = {r.id: len(r.calls) for r in runs[-1].results}
    ordered = sorted(
        runs[0].labelled,
        key=lambda r: (not (r.labels and r.labels.looping), -last_calls.get(r.id, 0), r.id),
    )
    ids = [r.id for r in ordered]
    width = 0.8 / max(len(runs), 1)
    any_calls = False
    for offset, run in enumerate(runs):
        per_id = {r.id: len(r.calls) for r in run.results}
        heights = [per_id.get(i, 0) for i in ids]
        any_calls = any_calls or any(heights)
        xs = [x + offset * width for x in range(len(ids))]
        calls_ax.bar(xs, heights, width=width, label=run.name)
    split = sum(1 for r in ordered if r.labels is not None and r.labels.looping)
    calls_ax.axvline(split - 0.5, color="grey", linestyle="--", linewidth=1)
    calls_ax.set_title("Judge calls per trajectory")
    calls_ax.set_xlabel(
        f"trajectories: {split} looping left of the dashed line, "
        f"{len(ids) - split} productive right"
    )
    calls_ax.set_ylabel("judge calls")
    calls_ax.set_xticks([])
    if any_calls:
        calls_ax.legend(loc="upper right", fontsize="small")
    else:
        calls_ax.set_ylim(0, 1)
        calls_ax.set_yticks([])
        calls_ax.text(
            0.5,
            0.5,
            "no judge calls (heuristics only)",
            ha="center",
            va="center",
            transform=calls_ax.transAxes,
        )
    fig.tight_layout()
    path = out_dir / CHART_FILE
    fig.savefig(path)
    plt.close(fig)
    return path, None


def _delays(run: Run) -> list[int]:
    out = []
    for result in run.labelled:
        s = score(result)
        if s is not None and s.delay is not None and result.crash is None:
            out.append(s.delay)
    return out
