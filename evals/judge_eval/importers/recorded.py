"""The project's own trajectory format (``shared/recorded`` and ``evals/data``).

``{"id", "source", "meta", "messages", "labels"?}`` with OpenAI chat messages. This is the
format the evaluation set is stored in, so it is read strictly and without normalisation:
whatever is on disk is exactly what the detector is scored on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge_eval.dataset import Trajectory, TrajectoryFormatError, make_trajectory

FORMAT = "recorded"
_REQUIRED = ("id", "source", "messages")
_ALLOWED = frozenset({"id", "source", "meta", "messages", "labels"})


def looks_like(data: Any) -> bool:
    """An object with ``id``, ``source`` (an object) and a ``messages`` list."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("source"), dict)
        and "id" in data
        and isinstance(data.get("messages"), list)
    )


def parse(data: Any, path: Path) -> Trajectory:
    """Validate one recorded-format object; unknown top-level keys are an error (typos)."""
    if not isinstance(data, dict):
        raise TrajectoryFormatError(path, f"expected an object, got {type(data).__name__}")
    for key in _REQUIRED:
        if key not in data:
            raise TrajectoryFormatError(path, f"{key!r} missing")
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise TrajectoryFormatError(path, f"unknown top-level key(s): {', '.join(unknown)}")
    if not isinstance(data["source"], dict):
        raise TrajectoryFormatError(path, "'source' must be an object")
    meta = data.get("meta", {})
    if not isinstance(meta, dict):
        raise TrajectoryFormatError(path, "'meta' must be an object")
    return make_trajectory(
        path,
        id=str(data["id"]),
        messages=data["messages"],
        source=data["source"],
        meta=meta,
        labels=data.get("labels"),
    )
