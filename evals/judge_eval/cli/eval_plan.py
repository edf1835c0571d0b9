"""What ``loop-judge eval`` replays: which trajectories, and which runs with which judge.

Turns the flags into data (PATHS, ``--subset``) and into `RunPlan`s: tracker settings and a
judge client per trajectory (none, the oracle, the LOOP_JUDGE_* model through litellm, or
a cassette's recorded replies, optionally recording). Kept apart from the command's flow
in `judge_eval.cli.evaluate` because the flag combinations are where the rules are.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from judge.cli.shared import UsageError, tracker_config
from judge.config import TrackerConfig, env_name
from judge.llm._litellm import LiteLLMClient, LLMClient
from judge_eval.cassette import Cassette, CassetteRecorder
from judge_eval.dataset import Trajectory
from judge_eval.oracle import (
    ORACLE_CONFIRM_MODEL,
    ORACLE_FAST_MODEL,
    OracleClient,
    OracleSettings,
)

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OUT_DIR",
    "JUDGES",
    "MODES",
    "SCHEDULES",
    "RunPlan",
    "bundled_data_dir",
    "oracle_settings",
    "plan_runs",
    "resolve_paths",
    "select_subset",
]

# The repository folder of the labelled set `loop-judge eval` replays when given no paths
# (found beside the package, from any working directory: `bundled_data_dir`), and where it
# writes when given no --out (relative to the working directory).
DEFAULT_DATA_DIR = Path("evals/data")
# Where the wheel puts DEFAULT_DATA_DIR, relative to the judge_eval package.
BUNDLED_DATA_IN_WHEEL = Path("data/labelled")
DEFAULT_OUT_DIR = Path("evals/out")
MODES = ("heuristics", "judge", "full")
JUDGES = ("env", "oracle")
# The two schedules the oracle compares: gemini-cli's seed (judge from turn 30, every
# 5-15 turns) and ours, where a heuristic suspicion brings a check forward.
SCHEDULES: dict[str, dict[str, Any]] = {
    "seed": {"early_checks": False},
    "gated": {"early_checks": True},
}


@dataclass(slots=True)
class RunPlan:
    """One replay of the data: its name, tracker settings and how each trajectory's judge
    client is made."""

    name: str
    overrides: dict[str, Any]
    config: TrackerConfig
    client_factory: Callable[[Trajectory], LLMClient | None] | None = None


def bundled_data_dir() -> Path | None:
    """The labelled set that ships with loop-judge, wherever it is installed.

    A wheel carries ``evals/data`` as ``judge_eval/data/labelled`` (pyproject's
    force-include); an editable install or a checkout reads ``evals/data`` of the
    repository the package sits in (``evals/judge_eval``). None when neither is there (a
    build that left the data out).
    """
    package = Path(__file__).resolve().parent.parent
    checkout = package.parent.parent / DEFAULT_DATA_DIR
    for candidate in (package / BUNDLED_DATA_IN_WHEEL, checkout):
        if candidate.is_dir():
            return candidate
    return None


def resolve_paths(paths: Sequence[str]) -> list[Path]:
    """The PATHS given, else the bundled labelled set, from any working directory."""
    if paths:
        return [Path(p) for p in paths]
    bundled = bundled_data_dir()
    if bundled is not None:
        return [bundled]
    raise UsageError(
        f"no PATHS given and the bundled labelled set ({DEFAULT_DATA_DIR} in the repository) "
        "is not installed; pass trajectory files or folders, e.g. loop-judge eval --data DIR"
    )


def select_subset(
    trajectories: list[Trajectory], name: str, roots: Sequence[Path]
) -> list[Trajectory]:
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


def oracle_settings(args: argparse.Namespace) -> OracleSettings:
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


def plan_runs(args: argparse.Namespace) -> tuple[list[RunPlan], CassetteRecorder | None, str]:
    """Decide what to replay: configs, judge clients, and the cassette to record into."""
    replaying = args.cassette is not None and not args.record
    if args.record and args.cassette is None:
        raise UsageError("--record needs --cassette FILE to record into")
    mode = args.mode or ("judge" if args.judge or replaying else "heuristics")
    if mode == "heuristics":
        if args.judge or args.cassette:
            raise UsageError("--judge and --cassette need --mode judge (or full)")
        overrides = {"fast_model": None, "confirm_model": None}
        return [RunPlan("heuristics", overrides, tracker_config(overrides))], None, mode

    if replaying:
        cassette = Cassette.load(args.cassette)
        plans = []
        for spec in cassette.header.get("runs", []):
            name, overrides = spec["name"], spec["overrides"]

            def factory(traj: Trajectory, _run: str = name) -> LLMClient:
                return cassette.client(f"{_run}/{traj.id}")

            plans.append(RunPlan(name, overrides, tracker_config(overrides), factory))
        if not plans:
            raise UsageError(f"cassette {args.cassette} names no runs in its header")
        return plans, None, mode

    judge = args.judge or "env"
    inner: Callable[[Trajectory, TrackerConfig], LLMClient]
    if judge == "oracle":
        settings = oracle_settings(args)
        models: dict[str, str | None] = {
            "fast_model": ORACLE_FAST_MODEL,
            "confirm_model": ORACLE_CONFIRM_MODEL,
        }
        specs = [(name, {**models, **extra}) for name, extra in SCHEDULES.items()]

        def inner(traj: Trajectory, config: TrackerConfig) -> LLMClient:
            return OracleClient(traj.labels, trajectory_id=traj.id, settings=settings)

    else:
        env_config = tracker_config({})
        if env_config.fast_model is None:
            raise UsageError(
                f"--mode {mode} needs a judge model: set {env_name('fast_model')} (a litellm "
                "model string), or use --judge oracle, or --cassette FILE to replay a recording"
            )
        # Models are named explicitly so a cassette replays them on a machine without env.
        models = {
            "fast_model": env_config.fast_model,
            "confirm_model": env_config.confirm_model,
        }
        specs = [(mode, models)]

        def inner(traj: Trajectory, config: TrackerConfig) -> LLMClient:
            return LiteLLMClient.from_config(config)

    recorder = None
    if args.record:
        recorder = CassetteRecorder(
            args.cassette,
            {
                "judge": judge,
                "oracle": asdict(oracle_settings(args)) if judge == "oracle" else None,
                "runs": [{"name": n, "overrides": o} for n, o in specs],
            },
        )
    plans = []
    for name, overrides in specs:
        config = tracker_config(overrides)

        def make_client(
            traj: Trajectory, _run: str = name, _cfg: TrackerConfig = config
        ) -> LLMClient:
            client = inner(traj, _cfg)
            if recorder is not None:
                return recorder.client(client, f"{_run}/{traj.id}")
            return client

        plans.append(RunPlan(name, overrides, config, make_client))
    return plans, recorder, mode
