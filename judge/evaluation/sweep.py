"""Vary tracker settings over a grid and score each one, so defaults are chosen from data.

``--sweep FIELD=v1,v2`` names any `TrackerConfig` field; several axes form their cartesian
product. Every setting is validated before anything runs, so a typo costs no replay time
and the error names the field, the value and what the config would have accepted.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from judge.config import TrackerConfig
from judge.errors import ConfigError
from judge.evaluation.metrics import Metrics, compute_metrics
from judge.evaluation.replay import TrajectoryResult, replay_all
from judge.trajectories.dataset import Trajectory

__all__ = ["SweepAxis", "SweepRow", "build_configs", "parse_axis", "run_sweep", "settings_grid"]

# Fields a sweep may not touch: they choose where requests go, not how detection behaves.
_NOT_SWEEPABLE = frozenset({"api_base", "api_key"})


@dataclass(frozen=True, slots=True)
class SweepAxis:
    field: str
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SweepRow:
    setting: dict[str, str]
    metrics: Metrics


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


async def run_sweep(
    trajectories: Sequence[Trajectory],
    configs: Sequence[tuple[dict[str, str], TrackerConfig]],
    *,
    concurrency: int,
    on_done: Callable[[TrajectoryResult], None] | None = None,
) -> list[SweepRow]:
    """Replay the data once per setting and score it (heuristics only: no client)."""
    rows = []
    for setting, config in configs:
        results = await replay_all(trajectories, config, concurrency=concurrency, on_done=on_done)
        rows.append(SweepRow(setting, compute_metrics(results)))
    return rows
