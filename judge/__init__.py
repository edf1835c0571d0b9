"""loop-judge: tells when an AI agent is stuck in an unproductive loop.

Importing this package is cheap and makes no network call: each public name is imported
from its module the first time it is used (PEP 562), so ``import judge`` costs what the
interpreter's own start does, and litellm is imported only when a tracker with a judge
model is built (in a background thread) or the first judge check runs.

The seams a user needs are public here: `LLMClient` and `ModelReply` (bring your own judge
client, or a test double; `judge.testing.ScriptedJudge` is one), `Detector` and `Finding`
(write a detector; its ``STATE`` names the attributes a saved `TrackerState` keeps), and
every error under `LoopJudgeError`.
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
        EmbeddingsUnavailable,
        HistoryError,
        JudgeConnectionError,
        JudgeError,
        JudgeHTTPError,
        JudgeOutputError,
        JudgeRateLimited,
        JudgeTimeout,
        LoopDetected,
        LoopJudgeError,
        StateError,
        TrajectoryFormatError,
    )
    from judge.llm.client import LLMClient, ModelReply
    from judge.response.ladder import LadderState, OverrideRecord, ResponseMode
    from judge.response.memory import LoopMemory
    from judge.response.stats import TrackerStats
    from judge.response.telemetry import Telemetry
    from judge.state import TrackerState
    from judge.sync import SyncLoopTracker
    from judge.tracker import LoopTracker
    from judge.verdict import Action, JudgeCall, JudgeStage, LoopKind, Origin, Verdict

# Public name -> the module that defines it. To export a name, add it here, to the
# TYPE_CHECKING imports above and to __all__.
_EXPORTS: dict[str, str] = {
    "Action": "judge.verdict",
    "ConfigError": "judge.errors",
    "Detector": "judge.detectors.base",
    "EmbeddingsUnavailable": "judge.errors",
    "Finding": "judge.detectors.base",
    "HistoryError": "judge.errors",
    "JudgeCall": "judge.verdict",
    "JudgeConnectionError": "judge.errors",
    "JudgeError": "judge.errors",
    "JudgeHTTPError": "judge.errors",
    "JudgeOutputError": "judge.errors",
    "JudgeRateLimited": "judge.errors",
    "JudgeStage": "judge.verdict",
    "JudgeTimeout": "judge.errors",
    "LLMClient": "judge.llm.client",
    "LadderState": "judge.response.ladder",
    "LoopDetected": "judge.errors",
    "LoopJudgeError": "judge.errors",
    "LoopKind": "judge.verdict",
    "LoopMemory": "judge.response.memory",
    "LoopTracker": "judge.tracker",
    "ModelReply": "judge.llm.client",
    "Origin": "judge.verdict",
    "OverrideRecord": "judge.response.ladder",
    "ResponseMode": "judge.response.ladder",
    "StateError": "judge.errors",
    "SyncLoopTracker": "judge.sync",
    "Telemetry": "judge.response.telemetry",
    "TrackerConfig": "judge.config",
    "TrackerState": "judge.state",
    "TrackerStats": "judge.response.stats",
    "TrajectoryFormatError": "judge.errors",
    "Verdict": "judge.verdict",
}

__all__ = [
    "Action",
    "ConfigError",
    "Detector",
    "EmbeddingsUnavailable",
    "Finding",
    "HistoryError",
    "JudgeCall",
    "JudgeConnectionError",
    "JudgeError",
    "JudgeHTTPError",
    "JudgeOutputError",
    "JudgeRateLimited",
    "JudgeStage",
    "JudgeTimeout",
    "LLMClient",
    "LadderState",
    "LoopDetected",
    "LoopJudgeError",
    "LoopKind",
    "LoopMemory",
    "LoopTracker",
    "ModelReply",
    "Origin",
    "OverrideRecord",
    "ResponseMode",
    "StateError",
    "SyncLoopTracker",
    "Telemetry",
    "TrackerConfig",
    "TrackerState",
    "TrackerStats",
    "TrajectoryFormatError",
    "Verdict",
]


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
    import importlib.util

    if not name.startswith("_") and importlib.util.find_spec(f"judge.{name}") is not None:
        return importlib.import_module(f"judge.{name}")
    raise AttributeError(f"module 'judge' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
