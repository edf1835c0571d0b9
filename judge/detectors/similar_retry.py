"""The same tool retried with slightly different arguments, failing the same way."""

from __future__ import annotations

from collections import deque

from rapidfuzz.distance import Levenshtein

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.verdict import LoopKind

# Arguments longer than this are compared on their first part only: whole file contents
# in an edit call would make every comparison slow and every edit "similar".
COMPARE_CHARS = 300


def _normal(text: str) -> str:
    return " ".join(text.lower().split())[:COMPARE_CHARS]


class SimilarRetryDetector:
    """``search("fo0")``, ``search("f00")``, ``read("./data.csv")``, ``read("data.csv")``.

    Within the last ``window`` calls, counts the distinct argument variants of the newest
    call's tool that are at least ``similarity`` alike and all got the same error or the
    same (non-acknowledgement) result. Identical calls count once: they are the exact
    repeat detector's business.
    """

    name = "similar_retry"
    reads_messages = False  # it reasons about call steps only
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = ("_steps", "_current")

    def __init__(self, min_variants: int, similarity: float, window: int) -> None:
        self._min_variants = min_variants
        self._similarity = similarity
        self._window = window
        self.reset()

    def reset(self) -> None:
        self._steps: deque[tuple[Step, str]] = deque(maxlen=self._window)
        self._current: Finding | None = None

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        self._steps.append((event, _normal(event.call.canonical)))
        self._current = self._assess()
        return self._current

    def _assess(self) -> Finding | None:
        last, last_text = self._steps[-1]
        if last.outcome in (Outcome.ACK, Outcome.NUMBER, Outcome.MISSING):
            return None
        variants: dict[str, Step] = {}
        evidence: list[int] = []
        for step, text in self._steps:
            if step.call.name != last.call.name or step.key != last.key:
                continue
            if step.edits != last.edits:
                continue  # a new file change between: a retry against changed code
            if (
                text != last_text
                and Levenshtein.normalized_similarity(
                    text, last_text, score_cutoff=self._similarity
                )
                < self._similarity
            ):
                continue
            variants.setdefault(step.call.canonical, step)
            evidence.append(step.call_index)
        count = len(variants)
        if count < 2:
            return None
        looping = count >= self._min_variants
        outcome = "the same error" if last.outcome.failed else "the same result"
        shown = ", ".join(short(s.call.canonical, 40) for s in list(variants.values())[-4:])
        return Finding(
            detector=self.name,
            kind=LoopKind.SIMILAR_RETRY,
            score=LOOP_SCORE if looping else near_miss(count, self._min_variants),
            evidence=tuple(evidence),
            summary=f"{last.call.name} retried with {count} near-identical argument variants, "
            f"{outcome} each time",
            pattern=f"similar:{last.call.name}:{last.key}",
            details={
                "tool": last.call.name,
                "variants": count,
                "arguments": shown,
                "result": short(last.result or "", 200),
                "failing": last.outcome.failed,
            },
        )
