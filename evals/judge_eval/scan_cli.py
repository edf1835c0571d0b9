"""``loop-judge scan PATH...``: which of my agent's runs looped, from the traces it left.

Reads OTLP JSON exports of OpenTelemetry GenAI spans, Langfuse exports and every
trajectory format ``eval`` reads (`judge_eval.scan.load_runs`), replays each run through the
tracker with the user's ``LOOP_JUDGE_*`` settings, and prints one row per run; ``--json``
and ``--html`` write the same findings for programs and for people. Heuristics only unless
a judge model is configured; then the most calls and cost the scan could make are printed
first, and the scan asks before making them (``--yes`` answers for scripts).

Exit codes: 0 every file was read and no run looped; 10 some run looped (as ``check``'s
warn: far from 1 and 2 so a finding never reads as an error); 1 some file could not be read
or some replay crashed (the other runs are still reported); 2 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console

from judge.cli.shared import EXIT_FAILED, UsageError, tracker_config
from judge_eval.cli.output import progress_bar, rich_table
from judge_eval.scan import RunReport, ScanReport, estimate_judge, read_paths, scan_runs
from judge_eval.scan_html import render_html
from judge_eval.tables import TableData

__all__ = ["EXIT_LOOPED", "add_parser", "run"]

# Some run looped: the value `check` uses for a warned agent, for the same reason.
EXIT_LOOPED = 10


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    scan = sub.add_parser(
        "scan",
        help="replay OTLP GenAI spans, Langfuse exports or trajectories; say which runs looped",
        description="Read agent runs from OpenTelemetry GenAI span exports (OTLP JSON), "
        "Langfuse trace exports or any trajectory file `import` reads, replay each through "
        "the tracker with the LOOP_JUDGE_* settings (heuristics only unless a judge model is "
        "configured) and print one row per run. Exit 0: no loop; 10: some run looped; "
        "1: a file could not be read or a replay crashed.",
    )
    scan.add_argument("paths", nargs="+", help="files or folders (.json, .jsonl, .traj)")
    scan.add_argument("--json", metavar="FILE", help="write the findings as JSON")
    scan.add_argument("--html", metavar="FILE", help="write a self-contained HTML report")
    scan.add_argument(
        "--yes",
        action="store_true",
        help="make the judge calls without asking (when a judge model is configured)",
    )
    scan.set_defaults(func=run)


def _table(reports: list[RunReport]) -> TableData:
    rows: list[tuple[str, ...]] = []
    for r in reports:
        looped = "crashed" if r.crash else "yes" if r.looped else "no"
        tokens = "-"
        if r.looped:
            tokens = f"{r.wasted_tokens}" + (" (est.)" if r.tokens_source != "reported" else "")
        rows.append(
            (
                r.id,
                r.file,
                str(r.messages),
                str(r.turns),
                looped,
                str(r.onset_turn) if r.onset_turn is not None else "-",
                r.kind or "-",
                str(r.wasted_turns) if r.looped else "-",
                tokens,
            )
        )
    columns = (
        "run",
        "file",
        "messages",
        "turns",
        "looped",
        "onset turn",
        "kind",
        "wasted turns",
        "wasted tokens",
    )
    return TableData("runs", columns, rows)


def _confirm(args: argparse.Namespace, calls: int, cost: float | None, err: Console) -> None:
    price = f"about ${cost:.4f} at most" if cost is not None else "cost unknown (no price)"
    err.print(
        f"the judge is configured: this scan makes at most {calls} judge calls, {price}",
        markup=False,
        highlight=False,
    )
    if args.yes or calls == 0:
        return
    if not sys.stdin.isatty():
        raise UsageError(
            "judge calls need confirmation: pass --yes, or unset LOOP_JUDGE_FAST_MODEL "
            "to scan with the heuristics only"
        )
    answer = input("make these calls? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise UsageError("cancelled: no judge call made")


def run(args: argparse.Namespace, console: Console) -> int:
    """Scan every path; bad files are reported and the others still scanned."""
    # Soft-wrapped: an error line names a file and must stay one line for grep.
    err = Console(stderr=True, soft_wrap=True)
    config = tracker_config({})  # LOOP_JUDGE_* as the runtime reads them
    runs, problems = read_paths(args.paths)
    for problem in problems:
        err.print(f"error: {problem.file}: {problem.reason}", markup=False, highlight=False)
    if config.judge_enabled:
        estimate = estimate_judge(runs, config)
        _confirm(args, estimate.calls, estimate.cost_usd, err)
    if err.is_terminal and runs:
        with progress_bar(err) as progress:
            task = progress.add_task("scan", total=len(runs))
            report = scan_runs(runs, problems, config, on_done=lambda _r: progress.advance(task))
    else:
        report = scan_runs(runs, problems, config)
    console.print(rich_table(_table(report.runs)))
    console.print(_summary(report), markup=False, highlight=False)
    if args.json:
        text = json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
        Path(args.json).write_text(text, encoding="utf-8")
    if args.html:
        Path(args.html).write_text(render_html(report), encoding="utf-8")
    if problems or report.crashed:
        return EXIT_FAILED
    return EXIT_LOOPED if report.looped else 0


def _summary(report: ScanReport) -> str:
    mode = "heuristics and the judge" if report.judge else "heuristics only"
    line = f"{len(report.runs)} runs, {report.looped} looped ({mode})"
    if report.judge:
        calls = sum(r.judge_calls for r in report.runs)
        cost = sum(r.judge_cost_usd for r in report.runs)
        line += f"; {calls} judge calls, ${cost:.4f}"
    if report.problems:
        line += f"; {len(report.problems)} file(s) not read"
    if report.crashed:
        line += f"; {report.crashed} replay(s) crashed"
    return line
