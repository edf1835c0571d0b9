"""Which action a detection calls for, given how many came before.

Kept pure so the ladder can be tested and documented apart from the tracker.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from judge.verdict import Action


class ResponseMode(str, Enum):
    """How hard the tracker pushes back when it finds a loop."""

    GRADUATED = "graduated"  # follow the ladder: warn, warn, stop by default
    WARN = "warn"  # never stop
    BLOCK = "block"  # stop at the first detection
    CHANCE_THEN_BLOCK = "chance_then_block"  # warn once, then stop


# Two warnings before a stop: one chance to read the recovery message, one more to act on
# it after a relapse (the default ladder in our design notes).
DEFAULT_LADDER: tuple[Action, ...] = (Action.WARN, Action.WARN, Action.STOP)


def action_for(detection: int, mode: ResponseMode, ladder: Sequence[Action]) -> Action:
    """The action for the ``detection``-th detection (1-based) in this tracker."""
    if detection < 1:
        return Action.CONTINUE
    if mode is ResponseMode.WARN:
        return Action.WARN
    if mode is ResponseMode.BLOCK:
        return Action.STOP
    if mode is ResponseMode.CHANCE_THEN_BLOCK:
        return Action.WARN if detection == 1 else Action.STOP
    steps = list(ladder) or list(DEFAULT_LADDER)
    return steps[min(detection, len(steps)) - 1]
