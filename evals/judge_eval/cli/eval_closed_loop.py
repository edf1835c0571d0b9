"""``loop-judge eval --closed-loop``: scripted agents react to the tracker's messages.

A different experiment from the replay (its own scripted judge, its own tables and files),
sharing only the data selection with it, so it has its own module; `judge_eval.cli.evaluate`
hands over to `run_closed_loop_eval` when the flag is given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import anyio
from pydantic import ValidationError
from rich.console import Console

from judge.cli.shared import EXIT_FAILED, UsageError
from judge_eval.cli.eval_plan import resolve_paths, select_subset
from judge_eval.cli.output import print_problems, progress_bar, rich_table
from judge_eval.closed_loop import (
    closed_loop_config,
    closed_loop_tables,
    run_closed_loop,
    write_closed_loop,
)
from judge_eval.dataset import load_dataset

__all__ = ["run_closed_loop_eval"]


def run_closed_loop_eval(args: argparse.Namespace, console: Console) -> int:
    """Drive scripted agents, seeded from the labelled loops in PATHS, through the tracker
    with a scripted judge; exit 1 when a figure that must be 0 is not."""
    clashing = [
        flag
        for flag, value in (
            ("--mode", args.mode),
            ("--judge", args.judge),
            ("--cassette", args.cassette),
            ("--record", args.record),
            ("--sweep", args.sweep),
        )
        if value
    ]
    if clashing:
        raise UsageError(f"--closed-loop uses its own scripted judge; drop {', '.join(clashing)}")
    roots = resolve_paths(args.paths)
    trajectories, problems = load_dataset(roots)
    print_problems(problems, console)
    if args.subset:
        trajectories = select_subset(trajectories, args.subset, roots)
    try:
        config = closed_loop_config()
    except ValidationError as exc:
        problems_text = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(f"invalid tracker configuration: {problems_text}") from exc
    looping = sum(1 for t in trajectories if t.labels is not None and t.labels.looping)
    if not looping:
        raise UsageError(f"no labelled looping trajectories under {', '.join(map(str, roots))}")
    console.print(
        f"closed loop: {looping} looping trajectories x 5 policies, plus the productive agents"
    )
    with progress_bar(console) as progress:
        task = progress.add_task("closed loop", total=None)
        result = anyio.run(
            lambda: run_closed_loop(trajectories, config, on_done=lambda _r: progress.advance(task))
        )
    tables = closed_loop_tables(result)
    for table in tables:
        console.print(rich_table(table))
    settings = {
        "mode": "closed-loop",
        "judge": "scripted",
        "paths": [str(p) for p in roots],
        "subset": args.subset,
        "seeds": looping,
    }
    json_path, md_path = write_closed_loop(result, Path(args.out), settings=settings, tables=tables)
    console.print(f"wall time {result.elapsed_s:.2f} s; wrote {json_path}, {md_path}")
    early = result.overall().stopped_before_onset
    if early:
        console.print(
            f"[yellow]{early} run(s) stopped before their loop's labelled onset[/] "
            f"(listed in {md_path.name})",
            highlight=False,
        )
    for failure in result.failures:
        console.print(f"[bold red]must be 0[/]: {failure}", highlight=False)
    return EXIT_FAILED if result.failures else 0
