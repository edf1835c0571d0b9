"""loop-judge: tells when an AI agent is stuck in an unproductive loop.

Importing this package is cheap and makes no network call: each public name is imported
from its module the first time it is used (PEP 562), so ``import judge`` costs what the
interpreter's own start does, and litellm is imported only when a tracker with a judge
model is built (in a background thread) or the first judge check runs.

Here are the names an agent builder needs: the trackers and their configuration, the
verdict and its action and kind, the seams (`LLMClient` and `ModelReply`, defined in
`judge.llm.client`: bring your own judge client, or `judge.testing.ScriptedJudge` in tests;
`Detector` and `Finding`: write a detector, whose ``STATE`` names the attributes a saved
`TrackerState` keeps) and the errors users catch. The rest is public in its own module:
every error in `judge.errors`, a verdict's parts in `judge.verdict`, what follows a loop in
`judge.response`.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

# A library's log lines are the application's to route: without this, Python's last-resort
# handler would print every WARNING (a stop verdict, a failed judge check) to the agent's
# stderr whenever the application configured no logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

if TYPE_CHECKING:  # what a type checker and an IDE see; at run time see __getattr__
    from judge.config import TrackerConfig
    from judge.detectors.base import Detector, Finding
    from judge.errors import (
        ConfigError,
        HistoryError,
        JudgeError,
        LoopDetected,
        LoopJudgeError,
        StateError,
    )
    from judge.llm.client import LLMClient, ModelReply
    from judge.state import TrackerState
    from judge.sync import SyncLoopTracker
    from judge.tracker import LoopTracker
    from judge.verdict import Action, JudgeFailure, LoopKind, Verdict

# Public name -> the module that defines it. To export a name, add it here, to the
# TYPE_CHECKING imports above and to __all__. Kept small: what building an agent with a
# tracker needs. Everything else is public in its own module (`judge.errors` for every
# error, `judge.verdict` for a verdict's parts, `judge.response` for what follows a loop).
_EXPORTS: dict[str, str] = {
    "Action": "judge.verdict",
    "ConfigError": "judge.errors",
    "Detector": "judge.detectors.base",
    "Finding": "judge.detectors.base",
    "HistoryError": "judge.errors",
    "JudgeError": "judge.errors",
    "JudgeFailure": "judge.verdict",
    "LLMClient": "judge.llm.client",
    "LoopDetected": "judge.errors",
    "LoopJudgeError": "judge.errors",
    "LoopKind": "judge.verdict",
    "LoopTracker": "judge.tracker",
    "ModelReply": "judge.llm.client",
    "StateError": "judge.errors",
    "SyncLoopTracker": "judge.sync",
    "TrackerConfig": "judge.config",
    "TrackerState": "judge.state",
    "Verdict": "judge.verdict",
}

__all__ = [
    "Action",
    "ConfigError",
    "Detector",
    "Finding",
    "HistoryError",
    "JudgeError",
    "JudgeFailure",
    "LLMClient",
    "LoopDetected",
    "LoopJudgeError",
    "LoopKind",
    "LoopTracker",
    "ModelReply",
    "StateError",
    "SyncLoopTracker",
    "TrackerConfig",
    "TrackerState",
    "Verdict",
]

# Names this package exported before its surface was cut down -> their module. They still
# resolve, with a DeprecationWarning naming the import to use, so existing code keeps
# running while it moves; they are in neither __all__ nor dir().
_MOVED: dict[str, str] = {
    "EmbeddingsUnavailable": "judge.errors",
    "JudgeCall": "judge.verdict",
    "JudgeConnectionError": "judge.errors",
    "JudgeHTTPError": "judge.errors",
    "JudgeOutputError": "judge.errors",
    "JudgeRateLimited": "judge.errors",
    "JudgeStage": "judge.verdict",
    "JudgeTimeout": "judge.errors",
    "LadderState": "judge.response.ladder",
    "LoopMemory": "judge.response.memory",
    "Origin": "judge.verdict",
    "OverrideRecord": "judge.response.ladder",
    "ResponseMode": "judge.response.ladder",
    "Telemetry": "judge.response.telemetry",
    "TrackerStats": "judge.response.stats",
    "TrajectoryFormatError": "judge.errors",
}


def _load(module_name: str) -> None:
    """Import one defining module and publish every name it exports here.

    All of a module's names at once, so that an error raised deep inside (say a
    `HistoryError` from judge.history) already reads ``judge.HistoryError`` even if the
    user never touched ``judge.HistoryError`` itself: the users see one front, never the
    private path (as httpx does).
    """
    module = importlib.import_module(module_name)
    for name, where in _EXPORTS.items():
        if where == module_name:
            value = getattr(module, name)
            value.__module__ = "judge"
            globals()[name] = value


def __getattr__(name: str) -> Any:
    """PEP 562: a public name is imported on first use; ``judge.<submodule>`` too."""
    where = _EXPORTS.get(name)
    if where is not None:
        _load(where)
        return globals()[name]
    moved = _MOVED.get(name)
    if moved is not None:
        import warnings

        warnings.warn(
            f"judge.{name} moved: import it from {moved} (from {moved} import {name})",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(moved), name)
    from importlib.util import find_spec

    if not name.startswith("_") and find_spec(f"judge.{name}") is not None:
        return importlib.import_module(f"judge.{name}")
    raise AttributeError(f"module 'judge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
