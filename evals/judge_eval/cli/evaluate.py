"""``loop-judge eval``: replay labelled trajectories through the tracker and report.

The command's flags and flow: plan the runs (`judge_eval.cli.eval_plan`), replay every
trajectory under each, print the tables and write report.json, report.md and report.png
(judge_eval's `tables`, `report_files` and `chart`). ``--sweep`` scores a grid of
heuristic settings instead; ``--loso`` replays a grid of settings and adds the
leave-one-family-out figures (`judge_eval.loso`) to the usual report of the defaults;
``--closed-loop`` hands over to `judge_eval.cli.eval_closed_loop`, ``--judge-model`` to
`judge_eval.cli.eval_judge_tier`.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.progress import TaskID

from judge.cli.shared import EXIT_FAILED, UsageError
from judge.config import TrackerConfig
from judge_eval.chart import write_chart
from judge_eval.cli.eval_closed_loop import run_closed_loop_eval
from judge_eval.cli.eval_judge_tier import run_judge_tier_eval
from judge_eval.cli.eval_plan import (
    DEFAULT_DATA_DIR,
    DEFAULT_OUT_DIR,
    JUDGES,
    MODES,
    RunPlan,
    oracle_settings,
    plan_runs,
    resolve_paths,
    select_subset,
)
from judge_eval.cli.output import print_problems, progress_bar, rich_table
from judge_eval.dataset import Trajectory, load_dataset
from judge_eval.judge_tier import DEFAULT_SEED as TIER_SEED
from judge_eval.judge_tier import DEFAULT_TIMEOUT_S as TIER_TIMEOUT_S
from judge_eval.judge_tier import DEFAULT_WINDOWS
from judge_eval.loso import (
    LosoResult,
    build_loso_configs,
    leave_one_source_out,
    loso_settings,
)
from judge_eval.oracle import (
    DEFAULT_ERROR_RATE,
    DEFAULT_NOISE,
    DEFAULT_SEED,
    PRICE_IN_PER_MTOK,
    PRICE_OUT_PER_MTOK,
)
from judge_eval.replay import DEFAULT_CONCURRENCY, TrajectoryResult, replay_all
from judge_eval.report_files import (
    LOSO_NOTE,
    build_report,
    markdown_table,
    write_json,
    write_markdown,
)
from judge_eval.sweep import (
    SweepAxis,
    build_configs,
    parse_axis,
    replay_grid,
    run_sweep,
    settings_grid,
)
from judge_eval.tables import (
    Run,
    TableData,
    loso_tables,
    main_tables,
    public_config,
    sweep_table,
    unlabelled_table,
)

__all__ = ["add_parser", "run", "summary_table"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ev = sub.add_parser(
        "eval",
        help="replay labelled trajectories and report precision, recall, delay and cost",
        description="Replay trajectories turn by turn through the tracker and score the first "
        "flag of each against its labels. With no model configured this runs the heuristics "
        "only, offline.",
    )
    ev.add_argument(
        "paths",
        nargs="*",
        help=f"files or folders (default: the bundled labelled set, {DEFAULT_DATA_DIR} in the "
        "repository, found from any working directory)",
    )
    ev.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="PATH",
        help="another labelled set (file or folder) to replay instead of the bundled one; "
        "repeatable, the same as PATHS",
    )
    ev.add_argument("--mode", choices=MODES, help="heuristics (default), judge or full")
    ev.add_argument(
        "--judge",
        choices=JUDGES,
        help="env: models from LOOP_JUDGE_* (default in judge mode); oracle: a simulated judge "
        "answering from the labels, comparing the seed and gated schedules",
    )
    ev.add_argument(
        "--out", default=str(DEFAULT_OUT_DIR), help="report folder (default: %(default)s)"
    )
    ev.add_argument(
        "--subset", help="only the ids listed in NAME.txt next to the data (e.g. smoke)"
    )
    ev.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help="trajectories replayed at once (default: %(default)s)",
    )
    ev.add_argument("--cassette", help="JSONL of judge replies: replayed, or written with --record")
    ev.add_argument("--record", action="store_true", help="record judge replies into --cassette")
    ev.add_argument(
        "--oracle-noise",
        type=float,
        default=DEFAULT_NOISE,
        help="std dev of the oracle's confidence noise (default: %(default)s)",
    )
    ev.add_argument(
        "--oracle-error-rate",
        type=float,
        default=DEFAULT_ERROR_RATE,
        help="share of oracle calls that time out (default: %(default)s)",
    )
    ev.add_argument(
        "--oracle-seed",
        type=int,
        default=DEFAULT_SEED,
        help="seed of the oracle's noise (default: %(default)s)",
    )
    ev.add_argument(
        "--price-in",
        type=float,
        default=PRICE_IN_PER_MTOK,
        help="oracle's US$ per million prompt tokens (default: %(default)s)",
    )
    ev.add_argument(
        "--price-out",
        type=float,
        default=PRICE_OUT_PER_MTOK,
        help="oracle's US$ per million completion tokens (default: %(default)s)",
    )
    ev.add_argument(
        "--sweep",
        action="append",
        metavar="FIELD=V1,V2",
        help="score every combination of these TrackerConfig values (repeatable); with "
        "--loso, the grid LOSO chooses from",
    )
    ev.add_argument(
        "--loso",
        action="store_true",
        help="also report leave-one-family-out figures: replay the data once per setting of "
        "a threshold grid (judge_eval.loso.LOSO_GRID, or --sweep), score each agent family "
        "with the setting that is best on the other families, and pool; heuristics or "
        "--judge oracle",
    )
    ev.add_argument("--no-chart", action="store_true", help="do not draw report.png")
    ev.add_argument(
        "--closed-loop",
        action="store_true",
        help="drive scripted agents (seeded from the labelled loops in PATHS, plus productive "
        "ones) through the tracker turn by turn, reacting to its recovery messages; writes "
        "closed_loop.json and closed_loop.md; exits 1 if a recovered or productive agent is "
        "stopped",
    )
    ev.add_argument(
        "--judge-model",
        metavar="MODEL",
        help="score this litellm model alone (single stage, no heuristics) on a balanced, "
        "seeded sample of the prompts the tracker would send it; one real call per window "
        "(judge_eval.judge_tier); writes judge_tier.json",
    )
    ev.add_argument(
        "--api-base",
        metavar="URL",
        help="with --judge-model: an OpenAI-compatible endpoint (llama.cpp, vLLM)",
    )
    ev.add_argument(
        "--windows",
        type=int,
        default=DEFAULT_WINDOWS,
        help="with --judge-model: windows to score, half of each label (default: %(default)s)",
    )
    ev.add_argument(
        "--seed",
        type=int,
        default=TIER_SEED,
        help="with --judge-model: seed of the window sample (default: %(default)s)",
    )
    ev.add_argument(
        "--judge-timeout",
        type=float,
        default=TIER_TIMEOUT_S,
        metavar="SECONDS",
        help="with --judge-model: timeout of one call (default: %(default)s; a small model "
        "on a CPU reads a window in minutes)",
    )
    ev.add_argument(
        "--resume",
        action="store_true",
        help="with --judge-model: keep the windows already scored in --out's judge_tier.json "
        "(same model, sample and judge settings) and ask only about the rest",
    )
    ev.add_argument(
        "-v", "--verbose", action="store_true", help="log each failed judge call as it happens"
    )
    ev.set_defaults(func=run)


def _run_sweep(
    args: argparse.Namespace,
    trajectories: list[Trajectory],
    configs: list[tuple[dict[str, str], TrackerConfig]],
    out_dir: Path,
    console: Console,
) -> int:
    with progress_bar(console) as progress:
        task = progress.add_task("sweep", total=len(trajectories) * len(configs))
        rows = anyio.run(
            lambda: run_sweep(
                trajectories,
                configs,
                concurrency=args.concurrency,
                on_done=lambda _r: progress.advance(task),
            )
        )
    table = sweep_table(rows)
    console.print(rich_table(table))
    out_dir.mkdir(parents=True, exist_ok=True)
    data = [{"setting": r.setting, "metrics": r.metrics.to_dict()} for r in rows]
    (out_dir / "sweep.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out_dir / "sweep.md").write_text(markdown_table(table), encoding="utf-8")
    console.print(f"sweep written to {out_dir / 'sweep.json'} and {out_dir / 'sweep.md'}")
    return EXIT_FAILED if any(r.metrics.crashed for r in rows) else 0


def _check_loso(args: argparse.Namespace) -> None:
    """--loso replays the data once per setting: refuse what that would break or bill."""
    if args.closed_loop:
        raise UsageError("--loso and --closed-loop are separate evals; run them one at a time")
    if args.cassette or args.record:
        raise UsageError(
            "--loso replays the data once per grid setting and a cassette holds the judge "
            "replies of one; drop --cassette/--record"
        )
    judged = (args.mode or ("judge" if args.judge else "heuristics")) != "heuristics"
    if judged and args.judge != "oracle":
        raise UsageError(
            "--loso runs the heuristics or --judge oracle: with a real judge model every "
            "grid setting would pay for its judge calls again"
        )


def _replay_loso(
    args: argparse.Namespace,
    plan: RunPlan,
    configs: list[tuple[dict[str, str], TrackerConfig]],
    trajectories: list[Trajectory],
    progress: Any,
) -> tuple[Run, LosoResult, int]:
    """Replay one plan under every setting: its run of the defaults (for the usual tables),
    its LOSO figures, and how many replays under the other settings crashed."""
    task = progress.add_task(
        f"{plan.name} x {len(configs)} settings", total=len(trajectories) * len(configs)
    )
    replays = anyio.run(
        lambda: replay_grid(
            trajectories,
            configs,
            concurrency=args.concurrency,
            client_factory=plan.client_factory,
            on_done=lambda _r: progress.advance(task),
        )
    )
    defaults = replays[0]
    run = Run(plan.name, public_config(plan.config), defaults.results, defaults.elapsed_s)
    crashed = sum(1 for replay in replays[1:] for r in replay.results if r.crash is not None)
    return run, leave_one_source_out(replays), crashed


def run(args: argparse.Namespace, console: Console) -> int:
    logger = logging.getLogger("judge")
    level = logger.level
    if not args.verbose:
        # Each failed judge call logs a warning; the report counts and lists them instead,
        # and hundreds of lines would bury the progress bar.
        logger.setLevel(logging.ERROR)
    try:
        return _run_eval(args, console)
    finally:
        logger.setLevel(level)


def _run_eval(args: argparse.Namespace, console: Console) -> int:
    args.paths = [*args.paths, *args.data]  # --data is PATHS by name, for every eval mode
    if args.loso:
        _check_loso(args)
    if args.judge_model:
        return run_judge_tier_eval(args, console)
    if args.closed_loop:
        return run_closed_loop_eval(args, console)
    started = time.perf_counter()
    axes = [parse_axis(spec) for spec in args.sweep or ()]
    sweeping = bool(axes) and not args.loso
    if sweeping and args.mode not in (None, "heuristics"):
        raise UsageError("--sweep runs heuristics only; drop --mode/--judge/--cassette")
    if sweeping and (args.judge or args.cassette):
        raise UsageError("--sweep runs heuristics only; drop --judge/--cassette")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    sweep_configs = (
        build_configs({"fast_model": None, "confirm_model": None}, settings_grid(axes))
        if sweeping
        else []
    )
    plans, recorder, mode = ([], None, "heuristics") if sweeping else plan_runs(args)
    # Every grid is validated before any replay, so a bad value costs no replay time.
    grids = _loso_grids(plans, axes) if args.loso else {}
    roots = resolve_paths(args.paths)
    trajectories, problems = load_dataset(roots)
    print_problems(problems, console)
    if args.subset:
        trajectories = select_subset(trajectories, args.subset, roots)
    if not trajectories:
        raise UsageError(f"no trajectories found under {', '.join(map(str, roots))}")
    out_dir = Path(args.out)
    if sweeping:
        return _run_sweep(args, trajectories, sweep_configs, out_dir, console)

    labelled = sum(1 for t in trajectories if t.labels is not None)
    console.print(
        f"replaying {len(trajectories)} trajectories ({labelled} labelled) in {mode} mode: "
        + ", ".join(p.name for p in plans)
        + (
            f"; leave-one-family-out over {len(next(iter(grids.values())))} settings"
            if grids
            else ""
        )
    )
    runs: list[Run] = []
    loso: dict[str, LosoResult] = {}
    grid_crashes = 0
    with progress_bar(console) as progress:
        for plan in plans:
            if args.loso:
                loso_run, loso[plan.name], crashed = _replay_loso(
                    args, plan, grids[plan.name], trajectories, progress
                )
                runs.append(loso_run)
                grid_crashes += crashed
                continue
            task = progress.add_task(plan.name, total=len(trajectories))
            run_started = time.perf_counter()

            def advance(_result: TrajectoryResult, task_id: TaskID = task) -> None:
                progress.advance(task_id)

            async def replay_plan(p: RunPlan = plan) -> list[TrajectoryResult]:
                return await replay_all(
                    trajectories,
                    p.config,
                    client_factory=p.client_factory,
                    concurrency=args.concurrency,
                    on_done=advance,
                )

            results = anyio.run(replay_plan)
            config = public_config(plan.config)
            runs.append(Run(plan.name, config, results, time.perf_counter() - run_started))
    if recorder is not None:
        console.print(f"recorded {recorder.calls} judge calls to {recorder.save()}")

    # Tables of metrics only mean something when some trajectory had labels.
    tables = main_tables(runs) if any(run.labelled for run in runs) else []
    loso_summaries = []
    if tables:
        for plan_name, loso_result in loso.items():
            *details, loso_summary = loso_tables(plan_name, loso_result)
            tables += [*details, loso_summary]
            loso_summaries.append(loso_summary)
    for table in tables:
        if all(table is not s for s in loso_summaries):  # printed last, under the summary
            console.print(rich_table(table))
    unlabelled = unlabelled_table(runs)
    if unlabelled is not None:
        console.print(rich_table(unlabelled))
        tables.append(unlabelled)
    crashes = [(run.name, r) for run in runs for r in run.results if r.crash is not None]
    for name, result in crashes:
        console.print(
            f"[bold red]crash[/] in {name} replay of {result.id}: {result.crash}",
            markup=True,
            highlight=False,
        )
    if grid_crashes:
        console.print(
            f"[bold red]{grid_crashes} crash(es)[/] in the replays of the other LOSO settings",
            highlight=False,
        )
    failed_calls = [
        (r.id, c.error) for run in runs for r in run.results for c in r.calls if c.error
    ]
    if failed_calls:
        first_id, first_error = failed_calls[0]
        console.print(
            f"[yellow]{len(failed_calls)} judge call(s) failed[/]; first: {first_id}: "
            f"{first_error}",
            highlight=False,
        )

    settings = {
        "mode": mode,
        "judge": "cassette" if args.cassette and not args.record else (args.judge or None),
        "paths": [str(p) for p in roots],
        "subset": args.subset,
        "trajectories": len(trajectories),
        "concurrency": args.concurrency,
        "cassette": args.cassette,
    }
    if loso:
        settings["loso_grid"] = "--sweep" if axes else "judge_eval.loso.LOSO_GRID"
    if args.judge == "oracle":
        settings["oracle"] = asdict(oracle_settings(args))
    elapsed = time.perf_counter() - started
    out_dir.mkdir(parents=True, exist_ok=True)
    chart, why_not = (
        (None, "chart skipped (--no-chart)") if args.no_chart else (write_chart(runs, out_dir))
    )
    data = build_report(
        runs, settings=settings, problems=problems, elapsed_s=elapsed, loso=loso or None
    )
    json_path = write_json(data, out_dir)
    md_path = write_markdown(
        runs,
        tables,
        out_dir,
        settings=settings,
        problems=problems,
        chart=chart,
        notes=[LOSO_NOTE] if loso else [],
    )
    if any(run.labelled for run in runs):
        console.print(rich_table(summary_table(runs)))
    for loso_summary in loso_summaries:
        console.print(rich_table(loso_summary))
    console.print(f"report: {md_path} (tables, every miss and false positive)", highlight=False)
    console.print(f"data:   {json_path} (one row per trajectory)", highlight=False)
    console.print(f"chart:  {chart}" if chart else f"chart:  none, {why_not}", highlight=False)
    console.print(f"wall time {elapsed:.1f} s", highlight=False)
    return EXIT_FAILED if crashes or grid_crashes else 0


def _loso_grids(
    plans: list[RunPlan], axes: list[SweepAxis]
) -> dict[str, list[tuple[dict[str, str], TrackerConfig]]]:
    """Each plan's validated LOSO settings, the defaults first, on top of its overrides."""
    settings = loso_settings(axes)
    return {plan.name: build_loso_configs(plan.overrides, settings) for plan in plans}


def summary_table(runs: list[Run]) -> TableData:
    """The closing table, one row per run, readable at a glance: loops caught out of loops,
    false alarms on productive runs, median delay and judge calls; the detailed tables are
    printed above it and kept in report.md."""
    rows: list[tuple[str, ...]] = []
    for run in runs:
        m = run.metrics
        recall = "-" if m.recall is None else f"{m.recall:.0%}"
        precision = "-" if m.precision is None else f"{m.precision:.2f}"
        delay = "-" if m.delay_median is None else f"{m.delay_median:g} turns"
        rows.append(
            (
                run.name,
                f"{m.tp} of {m.looping} ({recall})",
                f"{m.fp}"
                + (f" ({m.fp_before_onset} before a loop's onset)" if m.fp_before_onset else ""),
                precision,
                delay,
                str(m.judge_calls),
                str(m.crashed),
            )
        )
    columns = (
        "run",
        "loops caught",
        "false alarms",
        "precision",
        "median delay",
        "judge calls",
        "crashed",
    )
    return TableData("summary", columns, rows)
