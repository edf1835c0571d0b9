"""The same request in new words, recognized by meaning (default install).

Orchestrators re-delegate a failing sub-task rephrased each time ("check Mariano's
website for salad prices", "visit marianos.com and verify whether they sell salads"), and
literal similarity cannot tell that from a productive run. Sentence embeddings can: on
the Magentic-One runs of the dev split, three earlier same-tool requests at cosine >= 0.9
within the last five flagged 11 of 14 loops and 2 of 13 productive runs, where the best
string similarity we tried (token-set ratio) could not separate them at all.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from typing import Any

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.embeddings import TextEmbedder
from judge.detectors.steps import Step
from judge.errors import EmbeddingsUnavailable
from judge.verdict import LoopKind

logger = logging.getLogger("judge.detectors.semantic_repeat")

# Same-tool requests compared with each new one (dev split: wider windows add false
# positives from productive runs that return to an earlier sub-goal).
WINDOW = 5
# Earlier requests this alike count as the same request (dev split sweep 0.8-0.96).
SIMILARITY = 0.9
# Earlier same requests needed for a loop; one fewer raises suspicion for the judge.
EARLIER_NEEDED = 3
# Only natural-language requests are compared: code and commands that differ by a token
# embed almost identically, yet such a change is often the whole fix.
MIN_WORDS = 6
# Share of plain words (letters, with trailing punctuation): prose is above 0.9, a shell
# command like "gh run view --branch fix/retry --json status" about 0.6.
MIN_WORD_SHARE = 0.75
MAX_LINES = 6
MAX_CHARS = 1000

_DIGITS = re.compile(r"\d+")
_PLAIN_WORD = re.compile(r"^[\"'(]?[A-Za-z][A-Za-z'’-]*[.,;:!?)\"']*$")


def _same_but_numbers(a: str, b: str) -> bool:
    """Requests differing only in numbers walk a list ("result 3 of 5", "result 4 of 5")."""
    return a != b and _DIGITS.sub("#", a) == _DIGITS.sub("#", b)


def request_text(step: Step) -> str | None:
    """The call's natural-language request, if it has one."""
    parsed = step.call.parsed
    values = parsed.values() if isinstance(parsed, dict) else [step.call.canonical]
    texts = [v for v in values if isinstance(v, str)]
    if not texts:
        return None
    text = max(texts, key=len)[:MAX_CHARS]
    words = text.split()
    if len(words) < MIN_WORDS or text.count("\n") > MAX_LINES:
        return None
    plain = sum(1 for w in words if _PLAIN_WORD.match(w))
    return text if plain / len(words) >= MIN_WORD_SHARE else None


class SemanticRepeatDetector:
    name = "semantic_repeat"
    reads_messages = False  # it reasons about call steps only
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = ("_requests", "_current")

    def __init__(self, embedder: TextEmbedder) -> None:
        self._embedder = embedder
        self._broken = False  # not state: a restored tracker retries the model once
        self.reset()

    def reset(self) -> None:
        self._requests: deque[tuple[str, Any, int, str]] = deque(maxlen=WINDOW * 4)
        self._current: Finding | None = None

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        self._current = None
        text = request_text(event)
        if text is None:
            return None
        if self._broken:
            return None
        try:
            vector = self._embedder.embed([text])[0]
        except EmbeddingsUnavailable as exc:
            # A broken install (onnxruntime present but unloadable) must not crash the
            # agent's turn: the detector steps aside for the rest of the tracker's life and
            # says so once; the other detectors keep running.
            self._broken = True
            logger.warning("semantic detector disabled: %s", exc)
            return None
        same_tool = [r for r in self._requests if r[0] == event.call.name][-WINDOW:]
        # Identical requests are the exact-repeat detector's business (which lets polling
        # with changing results pass); enumerations are progress.
        earlier = [
            index
            for _, other, index, other_text in same_tool
            if other_text != text
            and not _same_but_numbers(text, other_text)
            and float(vector @ other) >= SIMILARITY
        ]
        self._requests.append((event.call.name, vector, event.call_index, text))
        if not earlier:
            return None
        looping = len(earlier) >= EARLIER_NEEDED
        self._current = Finding(
            detector=self.name,
            kind=LoopKind.COGNITIVE,
            # one request short of the loop asks the judge early (every near miss does)
            score=LOOP_SCORE if looping else near_miss(len(earlier), EARLIER_NEEDED - 1),
            evidence=(*earlier, event.call_index),
            summary=f"{event.call.name} asked for the same thing {len(earlier) + 1}x in "
            f"other words: {short(text, 60)!r}",
            pattern=f"semantic:{event.call.name}:{short(text, 40)}",
            details={"tool": event.call.name, "text": short(text, 200), "count": len(earlier) + 1},
        )
        return self._current
