"""The contract every heuristic detector follows.

A detector is pure and incremental: it sees each new event exactly once, in order, keeps
bounded state, and after each event says what it currently suspects. It never does I/O
and never looks back at the full history, so a turn costs time proportional to the new
messages only. Events are normalized messages and completed (call, result) steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from judge.detectors.steps import Step
from judge.history import Message, ToolCall
from judge.verdict import LoopKind

Event = Message | Step

# Below its own threshold a detector reports at most this, so that only the judge (via an
# early check) and not a combination of weak signals can act on a near-miss.
SUSPICION_CAP = 0.5
# The score of a detector whose own threshold is met.
LOOP_SCORE = 1.0


@dataclass(frozen=True, slots=True)
class Finding:
    """A detector's current suspicion.

    ``score`` is 0..1: at or above 0.9 the detector's own threshold is met; below its
    threshold a detector reports at most 0.5. ``pattern`` identifies the loop (e.g. the
    canonical call) so escalation can tell a relapse from a new loop.
    """

    detector: str
    kind: LoopKind
    score: float
    evidence: tuple[int, ...]
    summary: str
    pattern: str
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Detector(Protocol):
    """``name`` keys its findings and saved state. A detector may also set
    ``reads_messages = False`` to be given call steps only (the default is both).

    State contract: a detector whose memory must survive ``LoopTracker.state`` /
    ``from_state`` declares ``STATE``, the names of the attributes that hold it (scalars,
    tuples, deques, dicts, `Message`, `Step` and `Finding` values round-trip exactly). A
    detector without ``STATE`` works, but saving the tracker raises `judge.StateError`
    naming it. Names in an optional ``STATE_OPTIONAL`` set may be missing from a state
    saved before they were added; they keep their reset value. Each `Finding` cites the
    newest message it rests on in ``evidence``: a finding that cites only messages a loop
    verdict already answered never flags again.
    """

    name: str

    def observe(self, event: Event) -> Finding | None:
        """Take in one new event; return the current suspicion, if any."""
        ...

    def reset(self) -> None:
        """Forget everything (rewritten history, explicit reset)."""
        ...


@runtime_checkable
class Preflight(Protocol):
    """A detector that can say, before a call is run, what the call would bring: used by
    ``LoopTracker.check_call`` so an agent can refuse a looping call. Optional."""

    def preflight(self, call: ToolCall) -> Finding | None:
        """The finding ``call`` would produce if it were the next step; changes nothing."""
        ...


@runtime_checkable
class Refusal(Protocol):
    """A `Preflight` detector that also hears when its loop finding made the caller refuse
    the call: the refused call counts as an attempt, so the identical call stays refused
    (and climbs the ladder) until something changes. Optional."""

    def refused(self, call: ToolCall) -> Finding | None:
        """``call`` was refused before it ran (it brings no result of its own); return the
        current suspicion, as `Detector.observe` does."""
        ...


def near_miss(count: int, limit: int) -> float:
    """Sub-threshold score growing towards SUSPICION_CAP as ``count`` nears ``limit``."""
    if limit <= 0:
        return SUSPICION_CAP
    return round(SUSPICION_CAP * min(count, limit) / limit, 3)


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_call(step: Step, limit: int = 60) -> str:
    return f"{step.call.name}({short(step.call.canonical, limit)})"
