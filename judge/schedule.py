"""When to ask the judge next: a small state machine with no I/O.

Kept apart from the tracker so the schedule can be tested over hundreds of turns in
microseconds and replayed by the eval suite's simulated judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from pydantic import BaseModel


class ScheduleState(BaseModel):
    """The schedule in a saved tracker state."""

    turn: int = 0
    last_check_turn: int = 0
    check_interval: int = 0


def adapted_interval(confidence: float, min_interval: int, max_interval: int) -> int:
    """``min + (max - min) * (1 - confidence)``, rounded half up.

    A confident "no loop" (low confidence) waits longest. Decimal arithmetic on the
    decimal text of the confidence keeps 12.5 -> 13 exact; float maths and Python's
    banker's ``round`` would both get some halves wrong.
    """
    c = min(max(Decimal(repr(float(confidence))), Decimal(0)), Decimal(1))
    raw = Decimal(min_interval) + Decimal(max_interval - min_interval) * (Decimal(1) - c)
    return int(raw.to_integral_value(rounding=ROUND_HALF_UP))


@dataclass(slots=True)
class Schedule:
    """Turn counter plus the judge's check schedule for the current prompt."""

    check_after_turns: int
    initial_interval: int
    min_interval: int
    max_interval: int
    turn: int = 0
    last_check_turn: int = 0
    check_interval: int = 0

    def __post_init__(self) -> None:
        if self.check_interval == 0:
            self.check_interval = self.initial_interval

    def snapshot(self) -> ScheduleState:
        return ScheduleState(
            turn=self.turn,
            last_check_turn=self.last_check_turn,
            check_interval=self.check_interval,
        )

    def restore(self, state: ScheduleState) -> None:
        self.turn = state.turn
        self.last_check_turn = state.last_check_turn
        self.check_interval = state.check_interval

    def reset(self) -> None:
        self.turn = 0
        self.last_check_turn = 0
        self.check_interval = self.initial_interval

    def tick(self) -> None:
        self.turn += 1

    def due(self, *, early: bool = False) -> bool:
        """Is a check due this turn?

        ``early`` lets heuristic suspicion bring the check forward before
        ``check_after_turns``; an interval still applies so a suspicious stretch does not
        call the model every turn, but only the shortest one: a confident "no loop" early in
        a run (a few similar searches) would otherwise hold off the check for up to
        max_interval turns while a loop starts (moatless sympy-23262 in coding_dev: cleared
        at turn 6, re-read loop suspected at turn 16, over by turn 20).
        """
        since = self.turn - self.last_check_turn
        if early:
            return not self.last_check_turn or since >= min(self.min_interval, self.check_interval)
        if since < self.check_interval and self.last_check_turn:
            return False
        return (
            self.turn >= self.check_after_turns
            and self.turn - self.last_check_turn >= self.check_interval
        )

    def checked(self, confidence: float) -> None:
        """A check got an answer with this deciding confidence."""
        self.last_check_turn = self.turn
        self.check_interval = adapted_interval(confidence, self.min_interval, self.max_interval)

    def failed(self) -> None:
        """A check produced no answer (error or cancellation): retry after min_interval."""
        self.last_check_turn = self.turn
        self.check_interval = self.min_interval
