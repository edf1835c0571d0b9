"""Catch a response that repeats itself while it is still being streamed."""

from __future__ import annotations

from judge.detectors.base import LOOP_SCORE, Finding, short
from judge.detectors.text_repetition import degenerate
from judge.verdict import LoopKind

# Only the tail of a long response is rescanned: a degenerate response repeats its last
# sentences, and a bounded tail keeps each chunk O(1).
TAIL_CHARS = 4000
# Rescan after this much new text: a sentence or so, not every token.
RESCAN_CHARS = 80


class StreamMonitor:
    name = "text_repetition"
    STATE = ("_text", "_since_scan", "_fired")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._text = ""
        self._since_scan = 0
        self._fired = False

    def feed(self, chunk: str) -> Finding | None:
        if not isinstance(chunk, str) or not chunk or self._fired:
            return None
        self._text = (self._text + chunk)[-TAIL_CHARS:]
        self._since_scan += len(chunk)
        if self._since_scan < RESCAN_CHARS:
            return None
        self._since_scan = 0
        found = degenerate(self._text)
        if found is None:
            return None
        self._fired = True  # one verdict per response; the agent decides what to do
        unit, count = found
        return Finding(
            detector=self.name,
            kind=LoopKind.TEXT_REPETITION,
            score=LOOP_SCORE,
            evidence=(),
            summary=f"the response being streamed repeats itself: {short(unit, 60)!r} x{count}",
            pattern=f"stream:{short(unit, 60)}",
            details={"text": short(unit, 200), "count": count},
        )
