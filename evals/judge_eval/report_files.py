"""Write an eval's ``report.json`` and ``report.md``.

``report.json`` holds everything measured (metrics, breakdowns, one row per trajectory and
judge call) for scripts; ``report.md`` holds the tables and every miss and false positive
for people. Tables come from `tables`, the chart (linked from the markdown) from `chart`.
`markdown_table` is also what the sweep and the closed loop write their markdown with.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from judge_eval.dataset import ImportProblem
from judge_eval.loso import LosoResult
from judge_eval.metrics import Outcome, group_metrics, kind_of, score
from judge_eval.replay import TrajectoryResult
from judge_eval.tables import Run, TableData, unlabelled_summary

__all__ = [
    "JSON_FILE",
    "LOSO_NOTE",
    "MARKDOWN_FILE",
    "build_report",
    "markdown_table",
    "trajectory_row",
    "write_json",
    "write_markdown",
]

JSON_FILE = "report.json"
MARKDOWN_FILE = "report.md"
# What the LOSO tables of report.md mean, for a reader who did not run the command.
LOSO_NOTE = (
    "Leave-one-family-out (LOSO): each setting of the grid replays every trajectory once; "
    "for each agent family (a source's first word: the two smolagents agents are one "
    "family), the setting with the best F1 on all the other families (ties: higher "
    "precision, then the defaults) scores that family, and the held-out counts of all "
    "families are pooled. LOSO well under the in-sample best means the best setting fits "
    "the families it was chosen on."
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
    loso: Mapping[str, LosoResult] | None = None,
) -> dict[str, Any]:
    """Everything measured, as JSON-safe data: metrics, breakdowns and per-trajectory rows,
    and with ``--loso`` each run's leave-one-family-out figures under ``loso``."""
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
    if loso is not None:
        out["loso"] = {name: result.to_dict() for name, result in loso.items()}
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
    notes: Sequence[str] = (),
) -> Path:
    """``notes`` are paragraphs a mode's tables need to be read right (``--loso``'s
    method), placed with the scoring rules, before any table."""
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
    for note in notes:
        parts += [note, ""]
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
