"""The ``loop-judge`` command line. The only module that imports rich.

``demo`` replays a bundled trajectory, ``eval`` measures the tracker on labelled data and
``import`` converts other agents' trajectories into our labelled-trajectory JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from judge.config import TrackerConfig, env_name
from judge.errors import ConfigError
from judge.evaluation import report
from judge.evaluation.cassette import Cassette, CassetteRecorder
from judge.evaluation.closed_loop import (
    closed_loop_config,
    closed_loop_tables,
    run_closed_loop,
    write_closed_loop,
)
from judge.evaluation.oracle import (
    DEFAULT_ERROR_RATE,
    DEFAULT_NOISE,
    DEFAULT_SEED,
    ORACLE_CONFIRM_MODEL,
    ORACLE_FAST_MODEL,
    PRICE_IN_PER_MTOK,
    PRICE_OUT_PER_MTOK,
    OracleClient,
    OracleSettings,
)
from judge.evaluation.replay import (
    DEFAULT_CONCURRENCY,
    TrajectoryResult,
    assistant_turn_ends,
    replay,
    replay_all,
)
from judge.evaluation.sweep import build_configs, parse_axis, run_sweep, settings_grid
from judge.llm._litellm import LiteLLMClient, LLMClient
from judge.tracker import LoopTracker
from judge.trajectories.dataset import (
    ImportProblem,
    Trajectory,
    TrajectoryFormatError,
    iter_trajectory_files,
    load_dataset,
)
from judge.trajectories.importers import load_trajectories, load_trajectory
from judge.verdict import Action, Verdict

__all__ = ["assistant_turn_ends", "build_parser", "main", "replay"]

DEMO_FILE = "demo_trajectory.json"
# Where `loop-judge eval` looks when given no paths, and writes when given no --out
# (relative to the working directory: the repository root in the README's commands).
DEFAULT_DATA_DIR = Path("evals/data")
DEFAULT_OUT_DIR = Path("evals/out")
# Exit codes: 1 = the run finished but something failed (a crash, a file not imported),
# 2 = the command was used wrongly (argparse's own code for usage errors).
EXIT_FAILED = 1
EXIT_USAGE = 2
# Console width when output is not a terminal (CI logs, files): wide enough for all columns.
PIPE_WIDTH = 180
MODES = ("heuristics", "judge", "full")
JUDGES = ("env", "oracle")
# The two schedules the oracle compares: gemini-cli's seed (judge from turn 30, every
# 5-15 turns) and ours, where a heuristic suspicion brings a check forward.
SCHEDULES: dict[str, dict[str, Any]] = {
    "seed": {"early_checks": False},
    "gated": {"early_checks": True},
}
# File names written by `import`: anything outside this set becomes "_".
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _load_demo() -> dict[str, Any]:
    return json.loads((resources.files("judge") / "data" / DEMO_FILE).read_text("utf-8"))


def _demo(args: argparse.Namespace, console: Console) -> int:
    data = json.loads(Path(args.file).read_text("utf-8")) if args.file else _load_demo()
    messages = data["messages"] if isinstance(data, dict) else data
    tracker = LoopTracker(TrackerConfig())
    results = anyio.run(replay, messages, tracker)
    name = data.get("id", args.file) if isinstance(data, dict) else args.file
    table = Table(title=f"replay of {name}")
    for col in ("turn", "messages", "looping", "source", "action", "summary"):
        table.add_column(col)
    first = None
    for end, verdict in results:
        if verdict and first is None:
            first = verdict
        table.add_row(
            str(verdict.turn),
            str(end),
            "yes" if verdict else "",
            verdict.source or "",
            verdict.action.value,
            verdict.summary or "",
        )
    console.print(table)
    if first is not None:
        console.print(f"[bold red]loop detected at turn {first.turn}[/]: {first.summary}")
        if first.recovery_message:
            console.print(first.recovery_message)
    else:
        console.print("no loop detected")
    return 0


# -- eval ------------------------------------------------------------------------------------


class UsageError(ConfigError):
    """The command line asks for something that cannot be done; exit 2 with this message."""


@dataclass(slots=True)
class RunPlan:
    """One replay of the data: its name, tracker settings and how each trajectory's judge
    client is made."""

    name: str
    overrides: dict[str, Any]
    config: TrackerConfig
    client_factory: Callable[[Trajectory], LLMClient | None] | None = None


def _config(overrides: dict[str, Any]) -> TrackerConfig:
    try:
        return TrackerConfig(**overrides)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(f"invalid tracker configuration: {problems}") from exc


def _resolve_paths(paths: Sequence[str]) -> list[Path]:
    if paths:
        return [Path(p) for p in paths]
    if DEFAULT_DATA_DIR.is_dir():
        return [DEFAULT_DATA_DIR]
    raise UsageError(
        f"no PATHS given and ./{DEFAULT_DATA_DIR} does not exist; run from the repository root "
        "or pass trajectory files or folders, e.g. loop-judge eval path/to/trajectories"
    )


def _subset(trajectories: list[Trajectory], name: str, roots: Sequence[Path]) -> list[Trajectory]:
    """Keep the ids listed in ``NAME.txt`` (next to the data) or in the file ``name``."""
    candidates = [Path(name)] + [
        (root if root.is_dir() else root.parent) / f"{name}.txt" for root in roots
    ]
    listing = next((c for c in candidates if c.is_file()), None)
    if listing is None:
        tried = ", ".join(str(c) for c in candidates)
        raise UsageError(f"--subset {name}: no id list found (tried {tried})")
    wanted = [
        line.strip()
        for line in listing.read_text("utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    by_id = {t.id: t for t in trajectories}
    unknown = [i for i in wanted if i not in by_id]
    if unknown:
        raise UsageError(f"--subset {listing}: ids not in the data: {', '.join(unknown)}")
    return [by_id[i] for i in wanted]


def _oracle_settings(args: argparse.Namespace) -> OracleSettings:
    try:
        return OracleSettings(
            noise=args.oracle_noise,
            error_rate=args.oracle_error_rate,
            seed=args.oracle_seed,
            price_in_per_mtok=args.price_in,
            price_out_per_mtok=args.price_out,
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _plan_runs(args: argparse.Namespace) -> tuple[list[RunPlan], CassetteRecorder | None, str]:
    """Decide what to replay: configs, judge clients, and the cassette to record into."""
    replaying = args.cassette is not None and not args.record
    if args.record and args.cassette is None:
        raise UsageError("--record needs --cassette FILE to record into")
    mode = args.mode or ("judge" if args.judge or replaying else "heuristics")
    if mode == "heuristics":
        if args.judge or args.cassette:
            raise UsageError("--judge and --cassette need --mode judge (or full)")
        overrides = {"fast_model": None, "confirm_model": None}
        return [RunPlan("heuristics", overrides, _config(overrides))], None, mode

    if replaying:
        cassette = Cassette.load(args.cassette)
        plans = []
        for spec in cassette.header.get("runs", []):
            name, overrides = spec["name"], spec["overrides"]

            def factory(traj: Trajectory, _run: str = name) -> LLMClient:
                return cassette.client(f"{_run}/{traj.id}")

            plans.append(RunPlan(name, overrides, _config(overrides), factory))
        if not plans:
            raise UsageError(f"cassette {args.cassette} names no runs in its header")
        return plans, None, mode

    judge = args.judge or "env"
    inner: Callable[[Trajectory, TrackerConfig], LLMClient]
    if judge == "oracle":
        settings = _oracle_settings(args)
        models = {"fast_model": ORACLE_FAST_MODEL, "confirm_model": ORACLE_CONFIRM_MODEL}
        specs = [(name, {**models, **extra}) for name, extra in SCHEDULES.items()]

        def inner(traj: Trajectory, _config: TrackerConfig) -> LLMClient:
            return OracleClient(traj.labels, trajectory_id=traj.id, settings=settings)

    else:
        env_config = _config({})
        if env_config.fast_model is None:
            raise UsageError(
                f"--mode {mode} needs a judge model: set {env_name('fast_model')} (a litellm "
                "model string), or use --judge oracle, or --cassette FILE to replay a recording"
            )
        # Models are named explicitly so a cassette replays them on a machine without env.
        models = {"fast_model": env_config.fast_model, "confirm_model": env_config.confirm_model}
        specs = [(mode, models)]

        def inner(traj: Trajectory, config: TrackerConfig) -> LLMClient:
            return LiteLLMClient(
                api_base=config.api_base,
                api_key=config.api_key.get_secret_value() if config.api_key else None,
                timeout_s=config.timeout_s,
                max_retries=config.max_retries,
                max_retry_after_s=config.max_retry_after_s,
            )

    recorder = None
    if args.record:
        recorder = CassetteRecorder(
            args.cassette,
            {
                "judge": judge,
                "oracle": asdict(_oracle_settings(args)) if judge == "oracle" else None,
                "runs": [{"name": n, "overrides": o} for n, o in specs],
            },
        )
    plans = []
    for name, overrides in specs:
        config = _config(overrides)

        def factory(traj: Trajectory, _run: str = name, _cfg: TrackerConfig = config) -> LLMClient:
            client = inner(traj, _cfg)
            if recorder is not None:
                return recorder.client(client, f"{_run}/{traj.id}")
            return client

        plans.append(RunPlan(name, overrides, config, factory))
    return plans, recorder, mode


def _progress(console: Console) -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


def _rich_table(table: report.TableData) -> Table:
    out = Table(title=table.title, title_justify="left")
    for i, column in enumerate(table.columns):
        out.add_column(column, justify="left" if i == 0 else "right", no_wrap=i == 0)
    for row in table.rows:
        out.add_row(*row)
    return out


def _print_problems(problems: Sequence[ImportProblem], console: Console) -> None:
    if problems:
        console.print(f"[yellow]{len(problems)} file(s) could not be loaded and were skipped:[/]")
        for problem in problems:
            console.print(f"  {problem}", style="yellow", markup=False, highlight=False)


def _run_sweep(
    args: argparse.Namespace,
    trajectories: list[Trajectory],
    configs: list[tuple[dict[str, str], TrackerConfig]],
    out_dir: Path,
    console: Console,
) -> int:
    with _progress(console) as progress:
        task = progress.add_task("sweep", total=len(trajectories) * len(configs))
        rows = anyio.run(
            lambda: run_sweep(
                trajectories,
                configs,
                concurrency=args.concurrency,
                on_done=lambda _r: progress.advance(task),
            )
        )
    table = report.sweep_table(rows)
    console.print(_rich_table(table))
    out_dir.mkdir(parents=True, exist_ok=True)
    data = [{"setting": r.setting, "metrics": r.metrics.to_dict()} for r in rows]
    (out_dir / "sweep.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    (out_dir / "sweep.md").write_text(report.markdown_table(table), encoding="utf-8")
    console.print(f"sweep written to {out_dir / 'sweep.json'} and {out_dir / 'sweep.md'}")
    return EXIT_FAILED if any(r.metrics.crashed for r in rows) else 0


def _eval(args: argparse.Namespace, console: Console) -> int:
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


def _run_closed_loop(args: argparse.Namespace, console: Console) -> int:
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
    roots = _resolve_paths(args.paths)
    trajectories, problems = load_dataset(roots)
    _print_problems(problems, console)
    if args.subset:
        trajectories = _subset(trajectories, args.subset, roots)
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
    with _progress(console) as progress:
        task = progress.add_task("closed loop", total=None)
        result = anyio.run(
            lambda: run_closed_loop(trajectories, config, on_done=lambda _r: progress.advance(task))
        )
    tables = closed_loop_tables(result)
    for table in tables:
        console.print(_rich_table(table))
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


def _run_eval(args: argparse.Namespace, console: Console) -> int:
    if args.closed_loop:
        return _run_closed_loop(args, console)
    started = time.perf_counter()
    axes = [parse_axis(spec) for spec in args.sweep or ()]
    if axes and args.mode not in (None, "heuristics"):
        raise UsageError("--sweep runs heuristics only; drop --mode/--judge/--cassette")
    if axes and (args.judge or args.cassette):
        raise UsageError("--sweep runs heuristics only; drop --judge/--cassette")
    if args.concurrency < 1:
        raise UsageError(f"--concurrency must be at least 1, got {args.concurrency}")
    sweep_configs = (
        build_configs({"fast_model": None, "confirm_model": None}, settings_grid(axes))
        if axes
        else []
    )
    plans, recorder, mode = ([], None, "heuristics") if axes else _plan_runs(args)
    roots = _resolve_paths(args.paths)
    trajectories, problems = load_dataset(roots)
    _print_problems(problems, console)
    if args.subset:
        trajectories = _subset(trajectories, args.subset, roots)
    if not trajectories:
        raise UsageError(f"no trajectories found under {', '.join(map(str, roots))}")
    out_dir = Path(args.out)
    if axes:
        return _run_sweep(args, trajectories, sweep_configs, out_dir, console)

    labelled = sum(1 for t in trajectories if t.labels is not None)
    console.print(
        f"replaying {len(trajectories)} trajectories ({labelled} labelled) in {mode} mode: "
        + ", ".join(p.name for p in plans)
    )
    runs: list[report.Run] = []
    with _progress(console) as progress:
        for plan in plans:
            task = progress.add_task(plan.name, total=len(trajectories))
            run_started = time.perf_counter()
            results: list[TrajectoryResult] = anyio.run(
                lambda p=plan, t=task: replay_all(
                    trajectories,
                    p.config,
                    client_factory=p.client_factory,
                    concurrency=args.concurrency,
                    on_done=lambda _r: progress.advance(t),
                )
            )
            config = report.public_config(plan.config)
            runs.append(report.Run(plan.name, config, results, time.perf_counter() - run_started))
    if recorder is not None:
        console.print(f"recorded {recorder.calls} judge calls to {recorder.save()}")

    # Tables of metrics only mean something when some trajectory had labels.
    tables = report.main_tables(runs) if any(run.labelled for run in runs) else []
    for table in tables:
        console.print(_rich_table(table))
    unlabelled = report.unlabelled_table(runs)
    if unlabelled is not None:
        console.print(_rich_table(unlabelled))
        tables.append(unlabelled)
    crashes = [(run.name, r) for run in runs for r in run.results if r.crash is not None]
    for name, result in crashes:
        console.print(
            f"[bold red]crash[/] in {name} replay of {result.id}: {result.crash}",
            markup=True,
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
    if args.judge == "oracle":
        settings["oracle"] = asdict(_oracle_settings(args))
    elapsed = time.perf_counter() - started
    out_dir.mkdir(parents=True, exist_ok=True)
    chart, why_not = (
        (None, "chart skipped (--no-chart)")
        if args.no_chart
        else (report.write_chart(runs, out_dir))
    )
    data = report.build_report(runs, settings=settings, problems=problems, elapsed_s=elapsed)
    json_path = report.write_json(data, out_dir)
    md_path = report.write_markdown(
        runs, tables, out_dir, settings=settings, problems=problems, chart=chart
    )
    console.print(
        f"wall time {elapsed:.2f} s; wrote {json_path}, {md_path}" + (f", {chart}" if chart else "")
    )
    if why_not:
        console.print(why_not)
    return EXIT_FAILED if crashes else 0


# -- import ----------------------------------------------------------------------------------


def _import(args: argparse.Namespace, console: Console) -> int:
    """Convert each file; a bad one is reported and skipped, the others are all written."""
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: set[str] = set()
    failures = 0
    for file in iter_trajectory_files(args.paths):
        try:
            trajectories = load_trajectories(file)
        except TrajectoryFormatError as exc:
            failures += 1
            console.print(f"[red]error[/]: {exc}", highlight=False)
            continue
        except OSError as exc:
            failures += 1
            console.print(
                f"[red]error[/]: {file}: cannot read: {exc.strerror or exc}", highlight=False
            )
            continue
        for traj in trajectories:
            stem = _UNSAFE_NAME.sub("_", traj.id).strip("._") or "trajectory"
            name, n = stem, 1
            while name in written:
                n += 1
                name = f"{stem}-{n}"
            written.add(name)
            target = out_dir / f"{name}.json"
            text = json.dumps(traj.to_json_dict(), indent=2, ensure_ascii=False) + "\n"
            target.write_text(text, encoding="utf-8")
            console.print(f"{file} -> {target}", highlight=False)
    console.print(
        f"imported {len(written)} trajectories into {out_dir}"
        + (f"; [red]{failures} file(s) failed[/]" if failures else "")
    )
    return EXIT_FAILED if failures else 0


# -- serve -----------------------------------------------------------------------------------


def _serve(args: argparse.Namespace, console: Console) -> int:
    """Run the sidecar with uvicorn; the server stack is imported only here."""
    try:
        import uvicorn

        from judge.service.app import OPENAPI_FILE, create_app, openapi_text
        from judge.service.settings import ServerSettings
    except ImportError as exc:
        raise UsageError(
            f"the server needs the serve extra ({exc.name} is missing): "
            "pip install 'loop-judge[serve]'"
        ) from exc
    if args.dump_openapi is not None:
        text = openapi_text()
        if args.dump_openapi == "-":
            sys.stdout.write(text)
        else:
            target = Path(args.dump_openapi or OPENAPI_FILE)
            target.write_text(text, encoding="utf-8")
            console.print(f"wrote {target}", highlight=False)
        return 0
    overrides = {
        key: value
        for key, value in (("host", args.host), ("port", args.port), ("redis_url", args.redis_url))
        if value is not None
    }
    try:
        settings = ServerSettings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(str(e["msg"]) for e in exc.errors())
        raise UsageError(f"invalid server settings: {problems}") from exc
    settings.check_bind()  # ConfigError: exit 2 with the message, before binding anything
    app = create_app(settings)
    console.print(
        f"loop-judge sidecar on http://{settings.host}:{settings.port} "
        f"(sessions: {'redis' if settings.redis_url else 'memory'})",
        highlight=False,
    )
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info")
    return 0


# -- check -----------------------------------------------------------------------------------

# Exit codes of `check`, for scripts and orchestrators (issue 6): 0 no loop, 10 the agent
# would have been warned, 20 it would have been stopped or handed to the user. Far from
# 1 and 2 (failure, usage) so the three outcomes never read as an error.
EXIT_NO_LOOP = 0
EXIT_WARN = 10
EXIT_STOP = 20
_HALTING = (Action.STOP, Action.ASK_USER)


async def _replay_until_halt(messages: list[dict[str, Any]], tracker: LoopTracker) -> list[Verdict]:
    """Verdicts turn by turn, up to the first that would have halted the agent."""
    verdicts = []
    for end in assistant_turn_ends(messages):
        verdict = await tracker.turn_started(messages[:end])
        verdicts.append(verdict)
        if verdict and verdict.action in _HALTING:
            break
    return verdicts


def _check(args: argparse.Namespace, console: Console) -> int:
    """Replay one trajectory; exit 0 / 10 / 20 by the most severe action it would get."""
    try:
        trajectory = load_trajectory(args.file)
    except TrajectoryFormatError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"{args.file}: cannot read: {exc.strerror or exc}") from exc
    tracker = LoopTracker(_config({}))  # the env's judge when configured, else heuristics
    verdicts = anyio.run(_replay_until_halt, trajectory.messages, tracker)
    loops = [v for v in verdicts if v]
    halted = next((v for v in loops if v.action in _HALTING), None)
    deciding = halted or (loops[0] if loops else (verdicts[-1] if verdicts else Verdict()))
    code = EXIT_STOP if halted else EXIT_WARN if loops else EXIT_NO_LOOP
    if args.json:
        sys.stdout.write(deciding.model_dump_json(indent=2) + "\n")
        return code
    if not loops:
        console.print(f"{args.file}: no loop in {len(verdicts)} turns", highlight=False)
        return code
    first = loops[0]
    console.print(
        f"{args.file}: loop at turn {first.turn} ({first.source}, {first.action.value}): "
        f"{first.summary}",
        markup=False,
        highlight=False,
    )
    console.print(first.explanation or "", markup=False, highlight=False)
    if halted is not None and halted is not first:
        console.print(
            f"then at turn {halted.turn} ({halted.action.value}): {halted.summary}",
            markup=False,
            highlight=False,
        )
    return code


# -- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loop-judge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="replay a bundled looping trajectory through the tracker")
    demo.add_argument("file", nargs="?", help="a JSON trajectory instead of the bundled one")
    demo.set_defaults(func=_demo)

    ev = sub.add_parser(
        "eval",
        help="replay labelled trajectories and report precision, recall, delay and cost",
        description="Replay trajectories turn by turn through the tracker and score the first "
        "flag of each against its labels. With no model configured this runs the heuristics "
        "only, offline.",
    )
    ev.add_argument("paths", nargs="*", help=f"files or folders (default: ./{DEFAULT_DATA_DIR})")
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
        help="score every combination of these TrackerConfig values (repeatable)",
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
        "-v", "--verbose", action="store_true", help="log each failed judge call as it happens"
    )
    ev.set_defaults(func=_eval)

    imp = sub.add_parser(
        "import",
        help="convert OpenAI JSON/JSONL, ATIF, SWE-agent .traj or recorded files to our format",
    )
    imp.add_argument("paths", nargs="+", help="files or folders to convert")
    imp.add_argument("--out", required=True, help="folder for one JSON file per trajectory")
    imp.set_defaults(func=_import)

    srv = sub.add_parser(
        "serve",
        help="run the HTTP sidecar (needs the serve extra: pip install 'loop-judge[serve]')",
        description="Serve one tracker per session over HTTP. Settings come from LOOP_JUDGE_* "
        "variables (tracker and server); these flags override them.",
    )
    srv.add_argument("--host", help="address to bind (default: LOOP_JUDGE_HOST or 127.0.0.1)")
    srv.add_argument("--port", type=int, help="port (default: LOOP_JUDGE_PORT or 8787)")
    srv.add_argument("--redis-url", help="keep sessions in Redis (default: LOOP_JUDGE_REDIS_URL)")
    srv.add_argument(
        "--dump-openapi",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the OpenAPI schema (default: the committed judge/service/openapi.json; "
        "'-' for stdout) and exit",
    )
    srv.set_defaults(func=_serve)

    chk = sub.add_parser(
        "check",
        help="replay one trajectory; exit 0 (no loop), 10 (warn) or 20 (stop or ask_user)",
        description="Replay a trajectory (any format `import` reads) through the tracker, "
        "with the LOOP_JUDGE_* judge when one is configured, else heuristics only. Prints the "
        "first loop's summary and explanation; stops at the first verdict that would have "
        "halted the agent.",
    )
    chk.add_argument("file", help="a trajectory file")
    chk.add_argument("--json", action="store_true", help="print the deciding verdict as JSON")
    chk.set_defaults(func=_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        # Piped or captured output has no width to fit; 80 columns would fold the tables.
        console = Console(width=PIPE_WIDTH)
    try:
        return int(args.func(args, console))
    except ConfigError as exc:
        parser.exit(EXIT_USAGE, f"loop-judge {args.command}: error: {exc}\n")


if __name__ == "__main__":
    sys.exit(main())
