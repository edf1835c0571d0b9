"""The closed-loop eval's tables and its JSON and markdown report files.

Turns a `ClosedLoopReport` into the tables the CLI prints and the markdown shows, and
writes ``closed_loop.json`` (every figure and run) and ``closed_loop.md`` (the tables and
the runs behind each failure).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from judge_eval.closed_loop.metrics import ClosedLoopReport, FlagRecord, RunResult
from judge_eval.closed_loop.model import LOOP_POLICIES, Policy
from judge_eval.report_files import markdown_table
from judge_eval.tables import TableData

JSON_FILE = "closed_loop.json"
MARKDOWN_FILE = "closed_loop.md"
_MISSING = "-"
# Runs listed one by one in the markdown report for each kind of failure.
_LISTED_RUNS = 30

EXPLANATION = (
    "Each labelled looping run is cut at its onset and driven through a fresh tracker under"
    " each policy; productive agents are scripted by hand. flagged: runs with a loop "
    "verdict while the agent looped. recovered: the agent escaped after a recovery message "
    "and was not stopped for it. re-flagged / re-flags: runs with, and the number of, loop "
    "verdicts while the agent did new, distinct work after its escape (a plain-text plan, "
    "then new calls with new results; a relapsing agent's second escape included, its "
    "relapse not; reflags_before_relapse in the JSON counts the first escape alone). stop "
    "recov: runs stopped after the agent recovered (must be 0). relapse: relapses into the "
    "same loop that were flagged. stop loop: runs stopped while looping. prod flag: "
    "productive runs flagged. false stop: productive runs stopped (must be 0). flag delay, "
    "escape delay: median agent turns from the loop's first turn to the first flag, and to "
    "the escape (0 = right after it). calls: judge calls (a scripted judge: 0.95 when its "
    "last 3 assistant turns loop, else 0.1)."
)


def _num(value: float | None) -> str:
    return _MISSING if value is None else f"{value:g}"


def policy_table(report: ClosedLoopReport) -> TableData:
    """Per policy, the productive agents, and overall (columns: see `EXPLANATION`)."""
    columns = (
        "policy", "runs", "flagged", "recovered", "re-flagged", "re-flags", "stop recov",
        "relapse", "stop loop", "prod flag", "false stop", "flag delay", "escape delay",
        "calls",
    )  # fmt: skip
    rows: list[tuple[str, ...]] = []
    for m in [*report.by_policy(), report.overall()]:
        loops = m.loop_runs > 0
        rows.append(
            (
                m.name,
                str(m.runs),
                f"{m.loops_flagged}/{m.loop_runs}" if loops else _MISSING,
                str(m.ended_by_recovery) if loops else _MISSING,
                str(m.reflagged_runs) if loops else _MISSING,
                str(m.reflags) if loops else _MISSING,
                str(m.stopped_after_recovery),
                f"{m.relapses_caught}/{m.relapses}" if m.relapses else _MISSING,
                str(m.stopped_looping) if loops else _MISSING,
                f"{m.productive_flagged}/{m.productive_runs}" if m.productive_runs else _MISSING,
                str(m.false_stops),
                _num(m.onset_to_flag_median),
                _num(m.onset_to_escape_median),
                str(m.judge_calls),
            )
        )
    return TableData("closed loop: per policy", columns, rows)


def reflag_table(report: ClosedLoopReport) -> TableData:
    """Which detectors flag agents that already escaped (source / loop kind), per policy."""
    sources = report.reflag_sources()
    # An agent that ignores every warning never escapes, so it has no column here.
    policies = [p.value for p in LOOP_POLICIES if p is not Policy.IGNORE_WARNINGS]
    total: Counter[str] = Counter()
    for counts in sources.values():
        total.update(counts)
    rows: list[tuple[str, ...]] = [
        (name, *(str(sources.get(p, Counter())[name]) for p in policies), str(count))
        for name, count in total.most_common()
    ]
    if not rows:
        rows = [("none", *("0" for _ in policies), "0")]  # same type as above
    return TableData(
        "closed loop: re-flags after escape by source / kind",
        ("source / kind", *policies, "total"),
        rows,
    )


def productive_table(report: ClosedLoopReport) -> TableData:
    rows: list[tuple[str, ...]] = [
        (
            m.name,
            str(m.runs),
            str(m.turns),
            str(m.productive_flagged),
            str(m.false_stops),
            str(m.judge_calls),
        )
        for m in report.productive_families()
    ]
    return TableData(
        "closed loop: productive agents",
        ("family", "runs", "turns", "flagged", "false stops", "judge calls"),
        rows,
    )


def closed_loop_tables(report: ClosedLoopReport) -> list[TableData]:
    return [policy_table(report), reflag_table(report), productive_table(report)]


def _run_line(result: RunResult, flags: Sequence[FlagRecord]) -> str:
    shown = "; ".join(
        f"turn {f.turn} ({f.phase.value if f.phase else '-'}) {f.action} by {f.source}"
        for f in flags
    )
    return (
        f"- `{result.id}`: onset turn {result.onset_turn}, escapes {result.escape_turns or '-'}"
        f", end {result.end}: {shown}"
    )


def write_closed_loop(
    report: ClosedLoopReport,
    out_dir: Path,
    *,
    settings: dict[str, Any],
    tables: Sequence[TableData] | None = None,
) -> tuple[Path, Path]:
    """Write ``closed_loop.json`` (figures and every run with its flags) and
    ``closed_loop.md`` (the tables and the runs behind each failure)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = {
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings,
        **report.to_dict(),
    }
    json_path = out_dir / JSON_FILE
    json_path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tables = list(tables) if tables is not None else closed_loop_tables(report)
    parts = ["# loop-judge closed-loop eval", ""]
    parts += [f"- {k}: `{v}`" for k, v in settings.items()]
    parts += ["", EXPLANATION, ""]
    parts += [markdown_table(t) for t in tables]
    sections: tuple[
        tuple[str, Callable[[Any], bool], Callable[[Any], list[FlagRecord]] | None], ...
    ] = (
        ("stopped after the agent recovered", lambda r: r.stopped_after_recovery, None),
        ("productive runs stopped", lambda r: r.false_stop, None),
        ("stopped before the loop's labelled onset", lambda r: r.stopped_before_onset, None),
        ("re-flagged after escape", lambda r: bool(r.reflags), lambda r: r.reflags),
        ("crashed", lambda r: r.crash is not None, None),
    )
    for title, wanted, flags_of in sections:
        runs = [r for r in report.results if wanted(r)]
        parts += [f"### {title} ({len(runs)})", ""]
        for run in runs[:_LISTED_RUNS]:
            listed = flags_of(run) if flags_of is not None else run.flags
            parts.append(f"- `{run.id}`: {run.crash}" if run.crash else _run_line(run, listed))
        if len(runs) > _LISTED_RUNS:
            parts.append(f"- ... and {len(runs) - _LISTED_RUNS} more (see {JSON_FILE})")
        if not runs:
            parts.append("none")
        parts.append("")
    md_path = out_dir / MARKDOWN_FILE
    md_path.write_text("\n".join(parts), encoding="utf-8")
    return json_path, md_path
