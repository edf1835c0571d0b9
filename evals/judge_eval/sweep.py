"""Vary tracker settings over a grid and score each one, so defaults are chosen from data.

``--sweep FIELD=v1,v2`` names any `TrackerConfig` field; several axes form their cartesian
product. Every setting is validated before anything runs, so a typo costs no replay time
and the error names the field, the value and what the config would have accepted.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from judge.config import TrackerConfig
from judge.errors import ConfigError
from judge_eval.dataset import Trajectory
from judge_eval.metrics import Metrics, compute_metrics
from judge_eval.replay import ClientFactory, TrajectoryResult, replay_all

__all__ = [
    "DEFAULT_SETTING_NAME",
    "GridReplay",
    "SweepAxis",
    "SweepRow",
    "build_configs",
    "describe_setting",
    "parse_axis",
    "replay_grid",
    "run_sweep",
    "settings_grid",
]

# Fields a sweep may not touch: they choose where requests go, not how detection behaves.
_NOT_SWEEPABLE = frozenset({"api_base", "api_key"})
# How a setting that overrides nothing (the shipped defaults) is named in tables.
DEFAULT_SETTING_NAME = "defaults"


@dataclass(frozen=True, slots=True)
class SweepAxis:
    field: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SweepRow:
    setting: dict[str, str]
    metrics: Metrics


@dataclass(frozen=True, slots=True)
class GridReplay:
    """Every trajectory replayed under one setting, kept whole so it can be re-scored on
    any subset (leave-one-family-out scores each family apart) without replaying."""

    setting: dict[str, str]
    results: list[TrajectoryResult]
    elapsed_s: float


def describe_setting(setting: Mapping[str, str]) -> str:
    """``"field=value, ..."``, or "defaults" for a setting that overrides nothing."""
    return ", ".join(f"{k}={v}" for k, v in setting.items()) or DEFAULT_SETTING_NAME


def parse_axis(spec: str) -> SweepAxis:
    """``"field=v1,v2"`` -> `SweepAxis`; unknown fields are a `ConfigError` listing the known."""
    name, sep, raw = spec.partition("=")
    name = name.strip()
    if not sep or not name:
        raise ConfigError(f"--sweep {spec!r}: expected FIELD=v1,v2,...")
    fields = sorted(f for f in TrackerConfig.model_fields if f not in _NOT_SWEEPABLE)
    if name not in fields:
        raise ConfigError(
            f"--sweep {spec!r}: {name!r} is not a TrackerConfig field; known fields: "
            + ", ".join(fields)
        )
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not values:
        raise ConfigError(f"--sweep {spec!r}: no values after '='")
    return SweepAxis(name, values)


def settings_grid(axes: Sequence[SweepAxis]) -> list[dict[str, str]]:
    """The cartesian product of the axes, first axis varying slowest."""
    if not axes:
        return [{}]
    names = [axis.field for axis in axes]
    return [
        dict(zip(names, combo, strict=False))
        for combo in itertools.product(*(a.values for a in axes))
    ]


def build_configs(
    base: Mapping[str, Any], grid: Sequence[dict[str, str]]
) -> list[tuple[dict[str, str], TrackerConfig]]:
    """One validated `TrackerConfig` per setting, or a `ConfigError` for the first bad one.

    Values stay strings until pydantic parses them, so a sweep accepts exactly what the
    matching ``LOOP_JUDGE_*`` variable would.
    """
    built = []
    for setting in grid:
        try:
            config = TrackerConfig(**{**base, **setting})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()
            )
            shown = ", ".join(f"{k}={v}" for k, v in setting.items())
            raise ConfigError(f"--sweep setting {shown}: {problems}") from exc
        built.append((setting, config))
    return built


async def replay_grid(
    trajectories: Sequence[Trajectory],
    configs: Sequence[tuple[dict[str, str], TrackerConfig]],
    *,
    concurrency: int,
    client_factory: ClientFactory | None = None,
    on_done: Callable[[TrajectoryResult], None] | None = None,
) -> list[GridReplay]:
    """Replay the data once per setting, in the settings' order, results in input order."""
    replays = []
    for setting, config in configs:
        started = time.perf_counter()
        results = await replay_all(
            trajectories,
            config,
            client_factory=client_factory,
            concurrency=concurrency,
            on_done=on_done,
        )
        replays.append(GridReplay(setting, results, time.perf_counter() - started))
    return replays


async def run_sweep(
    trajectories: Sequence[Trajectory],
    configs: Sequence[tuple[dict[str, str], TrackerConfig]],
    *,
    concurrency: int,
    on_done: Callable[[TrajectoryResult], None] | None = None,
) -> list[SweepRow]:
    """Replay the data once per setting and score it (heuristics only: no client)."""
    replays = await replay_grid(trajectories, configs, concurrency=concurrency, on_done=on_done)
    return [SweepRow(r.setting, compute_metrics(r.results)) for r in replays]
