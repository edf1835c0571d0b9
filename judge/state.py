"""`TrackerState`: everything a `LoopTracker` remembers, as one serializable model.

It lets a service keep trackers in Redis and serve one session from several replicas:
``LoopTracker.from_state(config, tracker.state)`` continues exactly where the tracker
stopped. Detector state is encoded by `judge._codec` (tagged JSON); the rest are plain
fields. The state quotes the conversation (recent messages, the looping call's
arguments): store it like the conversation itself.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from judge.llm.breaker import BreakerSnapshot
from judge.response.ladder import LadderState
from judge.response.stats import TrackerStats
from judge.schedule import ScheduleState

# 2: the ladder remembers the evidence it answered; tool results carry their error flag;
# detectors keep fence, run and failure-run state (the live-loop fixes). A state of another
# version is refused with a StateError, so a server starts that session over.
STATE_VERSION = 2


__all__ = ["STATE_VERSION", "BreakerSnapshot", "ScheduleState", "TrackerState"]


class TrackerState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = STATE_VERSION
    schedule: ScheduleState = Field(default_factory=ScheduleState)
    seen: int = Field(default=0, description="messages of the history already read")
    last_message: Any = Field(default=None, description="the last message read (encoded)")
    recent: Any = Field(default=None, description="recent normalized messages (encoded)")
    task: Any = None
    user_seen: list[str] = Field(default_factory=list)
    detectors: dict[str, Any] = Field(default_factory=dict)
    stream: dict[str, Any] = Field(default_factory=dict)
    ladder: LadderState = Field(default_factory=LadderState)
    stats: TrackerStats = Field(default_factory=TrackerStats)
    breaker: BreakerSnapshot = Field(default_factory=BreakerSnapshot)
    judge_calls_used: int = 0
    judge_tokens_used: int = 0
