"""A delegated request re-issued in new words: a suspicion for the judge, never a verdict.

Orchestrators (Magentic-One, sub-agent tools) rephrase the same instruction each time, so
literal matching misses these loops. On the dev split, string similarity of requests
separates looping from productive orchestrator runs poorly (a productive run also asks its
web surfer similar things), so this detector only raises suspicion to bring the LLM
judge's check forward; the judge decides.
"""

from __future__ import annotations

from collections import deque

from rapidfuzz import fuzz, utils

from judge.detectors.base import SUSPICION_CAP, Event, Finding, short
from judge.detectors.steps import Step
from judge.verdict import LoopKind

# A free-text argument at least this long is a request in words, not an identifier.
MIN_REQUEST_CHARS = 40
# Same-tool requests compared with each new one.
WINDOW = 6
# Token-set similarity (0..100) at which two requests ask for the same thing.
SIMILARITY = 80
# Earlier similar requests needed before the judge is asked to look.
EARLIER_NEEDED = 2
# Processed texts kept (`RepeatedRequestDetector._processed`): a few windows' worth of
# the WINDOW * 3 requests remembered, so the memo rarely refills.
MEMO_LIMIT = WINDOW * 3 * 4


def _request_text(step: Step) -> str | None:
    parsed = step.call.parsed
    values = parsed.values() if isinstance(parsed, dict) else [step.call.canonical]
    texts = [v for v in values if isinstance(v, str) and len(v) >= MIN_REQUEST_CHARS]
    return max(texts, key=len)[:1000] if texts else None


class RepeatedRequestDetector:
    name = "repeated_request"
    reads_messages = False  # it reasons about call steps only
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = ("_requests", "_current")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._requests: deque[tuple[str, str, int]] = deque(maxlen=WINDOW * 3)
        self._current: Finding | None = None
        self._memo: dict[str, str] = {}

    def _processed(self, text: str) -> str:
        """``utils.default_process(text)``, kept while the text is in the window: each
        request is compared with up to WINDOW others, and processing both sides of every
        comparison again would cost more than the comparisons. The scores are the same as
        with ``processor=default_process``, which applies this very function to both sides.
        Not saved state: a restored detector fills it again."""
        memo = self._memo
        found = memo.get(text)
        if found is None:
            if len(memo) >= MEMO_LIMIT:
                memo.clear()
            found = memo[text] = utils.default_process(text)
        return found

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        text = _request_text(event)
        self._current = None
        if text is None:
            return None
        same_tool = [(t, i) for name, t, i in self._requests if name == event.call.name]
        processed = self._processed(text)
        earlier = [
            i
            for t, i in same_tool[-WINDOW:]
            if fuzz.token_set_ratio(
                processed, self._processed(t), processor=None, score_cutoff=SIMILARITY
            )
        ]
        self._requests.append((event.call.name, text, event.call_index))
        if len(earlier) < EARLIER_NEEDED:
            return None
        self._current = Finding(
            detector=self.name,
            kind=LoopKind.COGNITIVE,
            score=SUSPICION_CAP,
            evidence=(*earlier, event.call_index),
            summary=f"{event.call.name} asked for the same thing {len(earlier) + 1}x in "
            f"other words: {short(text, 60)!r}",
            pattern=f"request:{event.call.name}",
            details={"tool": event.call.name, "text": short(text, 200)},
        )
        return self._current
