"""loop-judge: tells when an AI agent is stuck in an unproductive loop.

Importing this package is cheap and makes no network call: litellm is imported only when
the first judge check runs.

The seams a user needs are public here: `LLMClient` and `ModelReply` (bring your own judge
client, or a test double; `judge.testing.ScriptedJudge` is one), `Detector` and `Finding`
(write a detector; its ``STATE`` names the attributes a saved `TrackerState` keeps), and
every error under `LoopJudgeError`.
"""

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
from judge.llm._litellm import LLMClient, ModelReply
from judge.response.ladder import LadderState, OverrideRecord, ResponseMode
from judge.response.memory import LoopMemory
from judge.response.stats import TrackerStats
from judge.response.telemetry import Telemetry
from judge.state import TrackerState
from judge.sync import SyncLoopTracker
from judge.tracker import LoopTracker
from judge.verdict import Action, JudgeCall, JudgeStage, LoopKind, Origin, Verdict

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

for _name in __all__:
    globals()[_name].__module__ = "judge"
del _name
