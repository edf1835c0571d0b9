"""A short sequence of calls repeating itself: A-B-A-B-A-B, A-B-C-A-B-C."""

from __future__ import annotations

from collections import deque

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.steps import Step
from judge.verdict import LoopKind

MIN_PERIOD = 2
MAX_PERIOD = 5


class CycleDetector:
    """Finds the last steps forming k repetitions of a block of 2-5 distinct steps.

    A step is (call, result): a cycle whose results change (edit, test, edit, test with
    new failures) is iteration, not a loop. Cycles are named by their canonical rotation,
    so A-B-C and B-C-A are the same loop.
    """

    name = "cycle"
    reads_messages = False  # it reasons about call steps only
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = ("_tokens", "_steps", "_current")

    def __init__(self, repeats_period2: int, repeats: int) -> None:
        self._repeats_p2 = repeats_period2
        self._repeats = repeats
        self._window = MAX_PERIOD * max(repeats_period2, repeats)
        self.reset()

    def reset(self) -> None:
        self._tokens: deque[tuple[str, str]] = deque(maxlen=self._window)
        self._steps: deque[Step] = deque(maxlen=self._window)
        self._current: Finding | None = None

    def _needed(self, period: int) -> int:
        return self._repeats_p2 if period == 2 else self._repeats

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        self._tokens.append((event.signature, event.key))
        self._steps.append(event)
        self._current = self._assess()
        return self._current

    def _assess(self) -> Finding | None:
        tokens = list(self._tokens)
        best: Finding | None = None
        for period in range(MIN_PERIOD, MAX_PERIOD + 1):
            block = tokens[-period:]
            if len(block) < period or len({sig for sig, _ in block}) < 2:
                continue
            reps = 1
            while (
                len(tokens) >= period * (reps + 1)
                and tokens[-period * (reps + 1) : -period * reps] == block
            ):
                reps += 1
            if reps < 2:
                continue
            needed = self._needed(period)
            looping = reps >= needed
            # One repetition short of the loop is the suspicion that asks the judge early,
            # as every detector's near miss is (A-B-A-B with the same results: an item page
            # and back to the list, twice).
            score = LOOP_SCORE if looping else near_miss(reps, needed - 1)
            if best is not None and score <= best.score:
                continue
            steps = list(self._steps)[-period * reps :]
            names = [f"{s.call.name}({short(s.call.canonical, 30)})" for s in steps[:period]]
            rotation = min(tuple(block[i:] + block[:i]) for i in range(period))
            best = Finding(
                detector=self.name,
                kind=LoopKind.ALTERNATION,
                score=round(score, 3),
                evidence=tuple(s.call_index for s in steps),
                summary=f"cycle of {period} steps repeated {reps}x: " + " -> ".join(names),
                pattern="cycle:" + "|".join(sig for sig, _ in rotation),
                details={"period": period, "repeats": reps, "calls": names},
            )
        return best
