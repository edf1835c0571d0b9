"""``loop-judge eval --judge-model MODEL``: score one judge model alone on labelled windows.

Opt-in and slow (one real model call per window), so it runs only when a model is named;
`judge_eval.cli.evaluate` hands over to `run_judge_tier_eval` when the flag is given. The
method is `judge_eval.judge_tier`'s; this module turns flags into its settings, prints the
figures and writes ``judge_tier.json`` (ids and figures only, no transcript text).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from judge.cli.shared import EXIT_FAILED, UsageError, tracker_config
from judge.config import TrackerConfig
from judge_eval.cli.eval_plan import resolve_paths, select_subset
from judge_eval.cli.output import print_problems, rich_table
from judge_eval.dataset import load_dataset
from judge_eval.judge_tier import (
    TierResult,
    TierSummary,
    Window,
    WindowResult,
    collect_windows,
    run_tier,
    sample_windows,
    summarize,
    write_results,
)
from judge_eval.tables import TableData

__all__ = ["run_judge_tier_eval", "summary_rows"]

RESULTS_FILE = "judge_tier.json"
# Reply text shown per rejected reply on the console, enough to see its shape.
FAILURE_EXAMPLE_CHARS = 300
# Rejected replies shown on the console.
FAILURE_EXAMPLES = 3


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary_rows(summary: TierSummary) -> list[tuple[str, ...]]:
    """The figures as (what, value) rows, for the console and docs/evaluation.md."""
    failures = ", ".join(f"{kind} {n}" for kind, n in summary.failures.items()) or "none"
    return [
        (
            "windows (positive / negative)",
            f"{summary.windows} ({summary.positives} / {summary.negatives})",
        ),
        ("ROC AUC of the confidence", _fmt(summary.auc, ".3f")),
        (
            f"precision at {summary.threshold:g}",
            f"{_fmt(summary.precision, '.2f')} ({summary.tp} of {summary.tp + summary.fp} flagged)",
        ),
        (
            f"recall at {summary.threshold:g}",
            f"{_fmt(summary.recall, '.2f')} ({summary.tp} of {summary.positives} loops)",
        ),
        (
            "replies matching the schema",
            f"{_fmt(summary.validity, '.0%')} ({summary.valid} of {summary.replies})",
        ),
        ("failed calls by kind", failures),
        (
            "latency median / p95",
            f"{_fmt(summary.latency_median_s, '.1f')} s / {_fmt(summary.latency_p95_s, '.1f')} s",
        ),
        (
            "prompt tokens median (max)",
            f"{_fmt(summary.prompt_tokens_median, '.0f')} ({summary.prompt_tokens_max or '-'})",
        ),
        ("reply tokens median", _fmt(summary.completion_tokens_median, ".0f")),
    ]


def _check_flags(args: argparse.Namespace) -> None:
    clashing = [
        flag
        for flag, value in (
            ("--mode", args.mode),
            ("--judge", args.judge),
            ("--cassette", args.cassette),
            ("--record", args.record),
            ("--sweep", args.sweep),
            ("--loso", args.loso),
            ("--closed-loop", args.closed_loop),
        )
        if value
    ]
    if clashing:
        raise UsageError(
            f"--judge-model scores one model alone on sampled windows; drop {', '.join(clashing)}"
        )
    if args.windows < 2:
        raise UsageError(f"--windows must be at least 2 (one of each label), got {args.windows}")


# The settings a resumed run must share with the file it continues: together they fix the
# sample (which windows, in which order) and what each answer is scored against. The
# timeout and the machine may differ: a slow window does not change what was asked.
RESUME_KEYS = (
    "model",
    "windows",
    "seed",
    "paths",
    "subset",
    "threshold",
    "max_prompt_chars",
    "max_reply_tokens",
)


def _resumed(
    path: Path, settings: dict[str, Any], windows: list[Window]
) -> tuple[list[WindowResult], dict[str, Any]]:
    """The rows already scored in ``path``, checked to be a prefix of this sample.

    A window is hours of CPU on a small machine, so a run stopped by a session's end is
    continued rather than repeated; mixing rows of another sample or other judge settings
    would make the figures mean nothing, so any difference is refused by name.
    """
    try:
        earlier = json.loads(path.read_text("utf-8"))
        rows = [WindowResult(**row) for row in earlier["windows"]]
        old = earlier["settings"]
    except FileNotFoundError:
        raise UsageError(f"--resume: no earlier run at {path}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--resume: {path} is not a judge tier result ({exc})") from None
    for key in RESUME_KEYS:
        if old.get(key) != settings[key]:
            raise UsageError(
                f"--resume: {path} was run with {key}={old.get(key)!r}, this run has "
                f"{key}={settings[key]!r}; resume with the same settings or pick another --out"
            )
    if len(rows) > len(windows):
        raise UsageError(f"--resume: {path} holds {len(rows)} rows, the sample has {len(windows)}")
    for i, (row, window) in enumerate(zip(rows, windows, strict=False)):
        if (row.run_id, row.turn) != (window.run_id, window.turn):
            raise UsageError(
                f"--resume: row {i} of {path} is {row.run_id} turn {row.turn}, the sample's "
                f"window {i} is {window.run_id} turn {window.turn}: the data changed"
            )
    resumed = [*old.get("resumed", []), datetime.now(timezone.utc).isoformat(timespec="seconds")]
    kept = {
        "started": old.get("started"),
        "load_average_start": old.get("load_average_start"),
        "resumed": resumed,
        "elapsed_before_s": float(earlier.get("elapsed_s", 0.0)),
    }
    return rows, kept


def _load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # not every platform has one
        return "-"


async def _collect(trajectories: list[Any], config: TrackerConfig) -> list[Window]:
    windows: list[Window] = []
    for traj in trajectories:
        if traj.labels is not None:
            windows.extend(await collect_windows(traj, config))
    return windows


def run_judge_tier_eval(args: argparse.Namespace, console: Console) -> int:
    """Sample the windows, ask the model about each, print and write the figures."""
    _check_flags(args)
    started = time.perf_counter()
    roots = resolve_paths(args.paths)
    trajectories, problems = load_dataset(roots)
    print_problems(problems, console)
    if args.subset:
        trajectories = select_subset(trajectories, args.subset, roots)
    # The tracker's own settings (LOOP_JUDGE_* included) decide the windows; the judge
    # settings are the command's.
    judge_config = tracker_config(
        {
            "fast_model": args.judge_model,
            "confirm_model": None,
            **({"api_base": args.api_base} if args.api_base else {}),
            "timeout_s": args.judge_timeout,
            # A retry would count one window's time twice in the latency.
            "max_retries": 0,
        }
    )
    console.print(f"choosing windows from {len(trajectories)} trajectories ...")
    candidates = anyio.run(_collect, trajectories, judge_config)
    windows = sample_windows(candidates, args.windows, seed=args.seed)
    if not windows:
        raise UsageError(
            "no windows of both labels under "
            f"{', '.join(map(str, roots))}: the tier needs labelled looping and productive runs"
        )
    labelled = [w for w in candidates if w.label is not None]
    console.print(
        f"{len(candidates)} windows the tracker would send, {len(labelled)} labelled "
        f"({sum(1 for w in labelled if w.label)} positive); asking {args.judge_model} about "
        f"{len(windows)} of them, one at a time",
        highlight=False,
    )
    from judge.llm._litellm import LiteLLMClient, load_litellm

    client = LiteLLMClient.from_config(judge_config)
    out_path = Path(args.out) / RESULTS_FILE
    settings: dict[str, Any] = {
        # The endpoint is left out, as from every report (`judge_eval.tables.public_config`).
        "model": args.judge_model,
        "local_endpoint": bool(args.api_base),
        "windows": len(windows),
        "seed": args.seed,
        "paths": [str(p) for p in roots],
        "subset": args.subset,
        "threshold": judge_config.confidence_threshold,
        "max_prompt_chars": judge_config.max_prompt_chars,
        "max_reply_tokens": judge_config.max_reply_tokens,
        "timeout_s": judge_config.timeout_s,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "load_average_start": _load_average(),
    }
    done: list[WindowResult] = []
    elapsed_before = 0.0
    if args.resume:
        done, kept = _resumed(out_path, settings, windows)
        elapsed_before = kept.pop("elapsed_before_s")
        settings.update(kept)
        console.print(
            f"resuming: {len(done)} of {len(windows)} windows already scored in {out_path}",
            highlight=False,
        )
    shown = 0

    def on_result(result: WindowResult, raw: str | None) -> None:
        nonlocal shown
        done.append(result)
        said = (
            f"{result.confidence:.2f}"
            if result.confidence is not None
            else f"failed ({result.failure})"
        )
        console.print(
            f"[{len(done)}/{len(windows)}] {result.run_id} turn {result.turn} "
            f"({'loop' if result.label else 'productive'}): {said} in {result.latency_s:.1f} s",
            highlight=False,
        )
        if raw is not None and shown < FAILURE_EXAMPLES:
            shown += 1
            console.print(f"  rejected reply: {raw[:FAILURE_EXAMPLE_CHARS]!r}", highlight=False)
        # Written after every window: a run stopped early keeps what it scored.
        partial = TierResult(
            {**settings, "load_average_end": _load_average()},
            summarize(done, judge_config.confidence_threshold),
            list(done),
            elapsed_before + time.perf_counter() - started,
        )
        write_results(partial, out_path)

    anyio.run(
        lambda: run_tier(
            windows[len(done) :],
            client,
            args.judge_model,
            threshold=judge_config.confidence_threshold,
            prepare=load_litellm,
            prepare_deadline_s=judge_config.timeout_s,
            on_result=on_result,
        )
    )
    summary = summarize(done, judge_config.confidence_threshold)
    console.print(rich_table(TableData("judge tier", ("figure", "value"), summary_rows(summary))))
    console.print(f"wrote {out_path}; wall time {time.perf_counter() - started:.0f} s")
    return EXIT_FAILED if summary.valid == 0 else 0
