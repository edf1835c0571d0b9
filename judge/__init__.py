"""loop-judge: tells when an AI agent is stuck in an unproductive loop.

Importing this package is cheap and makes no network call: litellm is imported only when
the first judge check runs.
"""

from judge.config import TrackerConfig
from judge.detectors.base import Detector, Finding
from judge.errors import (
    ConfigError,
    HistoryError,
    JudgeConnectionError,
    JudgeError,
    JudgeHTTPError,
    JudgeOutputError,
    JudgeRateLimited,
    JudgeTimeout,
    LoopJudgeError,
)
from judge.response.ladder import LadderState, OverrideRecord, ResponseMode
from judge.response.memory import LoopMemory
from judge.response.stats import TrackerStats
from judge.response.telemetry import Telemetry
from judge.tracker import LoopTracker
from judge.verdict import Action, JudgeCall, JudgeStage, LoopKind, Verdict

__all__ = [
    "Action",
    "ConfigError",
    "Detector",
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
    "LadderState",
    "LoopJudgeError",
    "LoopKind",
    "LoopMemory",
    "LoopTracker",
    "OverrideRecord",
    "ResponseMode",
    "Telemetry",
    "TrackerConfig",
    "TrackerStats",
    "Verdict",
]

for _name in __all__:
    globals()[_name].__module__ = "judge"
del _name
