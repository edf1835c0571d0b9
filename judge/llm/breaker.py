"""A circuit breaker for the judge: stop paying for an endpoint that keeps failing.

During an outage every check costs up to ``timeout_s`` per attempt plus backoff. After
``failures`` failed checks in a row the breaker opens and checks are skipped for
``cooldown_s``; then one trial check is let through (half-open). Its success closes the
breaker, its failure opens it for another cool-down. Pure state with an injected clock, so
tests step through hours of outage in microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from enum import Enum

from pydantic import BaseModel, ConfigDict

from judge.config import DEFAULT_BREAKER_COOLDOWN_S, DEFAULT_BREAKER_FAILURES

Clock = Callable[[], float]


class BreakerState(str, Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class BreakerSnapshot(BaseModel):
    """The circuit breaker, with the cool-down as time left: monotonic clocks of two
    processes cannot be compared."""

    # Built on first validation (a saved state), not at import: a fresh process answers its
    # first turn sooner.
    model_config = ConfigDict(defer_build=True)

    failures: int = 0
    state: str = "closed"
    cooldown_left_s: float | None = None


class CircuitBreaker:
    """Counts failed checks in a row and says when checks should be skipped.

    ``clock`` is monotonic seconds (``time.monotonic`` by default), never wall time, so a
    system clock change cannot open or close the breaker.
    """

    __slots__ = ("_clock", "_failures", "_opened_at", "_state", "cooldown_s", "threshold")

    def __init__(
        self,
        *,
        failures: int = DEFAULT_BREAKER_FAILURES,
        cooldown_s: float = DEFAULT_BREAKER_COOLDOWN_S,
        clock: Clock | None = None,
    ) -> None:
        if failures < 1:
            raise ValueError(f"failures must be at least 1, got {failures}")
        self.threshold = failures
        self.cooldown_s = cooldown_s
        self._clock = clock if clock is not None else time.monotonic
        self._failures = 0
        self._opened_at = 0.0
        self._state = BreakerState.CLOSED

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def consecutive_failures(self) -> int:
        return self._failures

    def seconds_left(self) -> float | None:
        """Seconds of cool-down left, or None when a check may run now.

        Moves an open breaker whose cool-down is over to half-open: the caller's next check
        is the trial.
        """
        if self._state is not BreakerState.OPEN:
            return None
        left = self._opened_at + self.cooldown_s - self._clock()
        if left > 0:
            return left
        self._state = BreakerState.HALF_OPEN
        return None

    def record_success(self) -> None:
        self._failures = 0
        self._state = BreakerState.CLOSED

    def record_failure(self) -> None:
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or self._failures >= self.threshold:
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()

    def reset(self) -> None:
        self.record_success()

    def snapshot(self) -> BreakerSnapshot:
        """The breaker for a saved tracker state, its cool-down as time left."""
        left = None
        if self._state is BreakerState.OPEN:
            left = max(self._opened_at + self.cooldown_s - self._clock(), 0.0)
        return BreakerSnapshot(
            failures=self._failures, state=self._state.value, cooldown_left_s=left
        )

    def restore(self, snapshot: BreakerSnapshot) -> None:
        self._failures = snapshot.failures
        self._state = BreakerState(snapshot.state)
        if self._state is BreakerState.OPEN:
            self._opened_at = self._clock() - self.cooldown_s + (snapshot.cooldown_left_s or 0.0)


def skip_message(seconds_left: float, failures: int, *, now: datetime | None = None) -> str:
    """The verdict's line for a skipped check; the time is wall-clock UTC for humans."""
    now = now if now is not None else datetime.now(timezone.utc)
    until = now + timedelta(seconds=seconds_left)
    return (
        f"judge skipped: circuit open until {until:%Y-%m-%dT%H:%M:%SZ} "
        f"({failures} failed checks in a row; {seconds_left:.0f} s left)"
    )
