"""The same request in new words, recognized by meaning (default install).

Orchestrators re-delegate a failing sub-task rephrased each time ("check Mariano's
website for salad prices", "visit marianos.com and verify whether they sell salads"), and
literal similarity cannot tell that from a productive run. Sentence embeddings can: on
the Magentic-One runs of the dev split, three earlier same-tool requests at cosine >= 0.9
within the last five flagged 11 of 14 loops and 2 of 13 productive runs, where the best
string similarity we tried (token-set ratio) could not separate them at all.

A walk is not a loop, though. An orchestrator working through one sub-goal restates its
long goal in every step ("search for the paper titled X", "open the full text of X", "open
the PDF of X", "search through the PDF of X"), and those embed as alike as any rephrasing.
What tells them apart is where the sub-agent got to: a re-delegation comes back because the
earlier asks got nowhere new (the same page again, a page already seen, no page at all),
while each step of a walk reaches a page the sub-agent had not been on. So the same request
asked a fourth time is no loop when every earlier ask reached a new page and this one did
not go back to a page already reached. Measured on the 27 Magentic-One runs of the dev
split: it clears the one walk among the flags (ww-magentic-20, search -> abstract -> PDF,
flagged before its onset; now caught at its FileSurfer loop), and every other first flag
stays where it was, each group holding a page reached twice or an ask that reached none.
ww-magentic-30's early flag stays: its re-searches landed on the same Zillow page twice,
the shape of ww-magentic-56's labelled loop (the same search on ever another site).
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

# Where a result says the sub-agent is: a markdown link's target ("Here is a screenshot of
# [title](url)", Magentic-One's WebSurfer), else the first address in it ("Address:
# file:///...", its FileSurfer). Matched within the first STEP_RESULT_CHARS a step keeps.
_LINKED_PLACE = re.compile(r"\]\(((?:https?|file)://[^\s)]+)")
_BARE_PLACE = re.compile(r"\b((?:https?|file)://[^\s)\]>\"']+)")
_DIGITS = re.compile(r"\d+")
_PLAIN_WORD = re.compile(r"^[\"'(]?[A-Za-z][A-Za-z'’-]*[.,;:!?)\"']*$")


def _same_but_numbers(a: str, b: str) -> bool:
    """Requests differing only in numbers walk a list ("result 3 of 5", "result 4 of 5")."""
    return a != b and _DIGITS.sub("#", a) == _DIGITS.sub("#", b)


def result_place(result: str | None) -> str | None:
    """The page a result reports the sub-agent on, without its query or fragment.

    A search with new words is the same search page: re-searching is how a failing
    re-delegation looks, not a step forward.
    """
    if not result:
        return None
    found = _LINKED_PLACE.search(result) or _BARE_PLACE.search(result)
    if found is None:
        return None
    return found.group(1).split("?", 1)[0].split("#", 1)[0].rstrip("/")


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


def _place(request: tuple[Any, ...]) -> str | None:
    """The new page a remembered request reached (None in a state saved before pages)."""
    return request[4] if len(request) > 4 else None


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
        # (tool, vector, call index, text, the page its result reached if new to the tool)
        self._requests: deque[tuple[str, Any, int, str, str | None]] = deque(maxlen=WINDOW * 4)
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
        tool_requests = [r for r in self._requests if r[0] == event.call.name]
        place = result_place(event.result)
        # a page this tool reached before (remembered while its requests are) is no news
        went_back = place is not None and any(_place(r) == place for r in tool_requests)
        # Identical requests are the exact-repeat detector's business (which lets polling
        # with changing results pass); enumerations are progress.
        matched = [
            r
            for r in tool_requests[-WINDOW:]
            if r[3] != text
            and not _same_but_numbers(text, r[3])
            and float(vector @ r[1]) >= SIMILARITY
        ]
        self._requests.append(
            (event.call.name, vector, event.call_index, text, None if went_back else place)
        )
        if not matched:
            return None
        earlier = [r[2] for r in matched]
        # Every earlier ask reached a new page and this one did not go back: a walk through
        # one sub-goal. Still worth the judge's early look (a near miss), never a verdict.
        walking = not went_back and all(_place(r) is not None for r in matched)
        looping = len(earlier) >= EARLIER_NEEDED and not walking
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
