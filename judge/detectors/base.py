"""The contract every heuristic detector follows.

A detector is pure and incremental: it sees each new message exactly once, in order, keeps
bounded state, and after each message says what it currently suspects. It never does I/O
and never looks back at the full history, so a turn costs time proportional to the new
messages only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from judge.history import Message
from judge.verdict import LoopKind


@dataclass(frozen=True, slots=True)
class Finding:
    """A detector's current suspicion.

    ``score`` is 0..1: at or above 0.9 the detector's own threshold is met; below its
    threshold a detector reports at most 0.5, so combinations cannot fire early.
    ``pattern`` identifies the loop (e.g. the canonical call) so escalation can count
    repeats of the same loop separately from new ones.
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
    name: str

    def observe(self, message: Message) -> Finding | None:
        """Take in one new message; return the current suspicion, if any."""
        ...

    def reset(self) -> None:
        """Forget everything (new prompt, rewritten history)."""
        ...
