"""Catch a response that repeats itself while it is still being streamed."""

from __future__ import annotations

from typing import Any

from judge._codec import dump_attrs, load_attrs
from judge.detectors.base import LOOP_SCORE, Finding, short
from judge.detectors.text_repetition import degenerate
from judge.verdict import LoopKind

# Only the tail of the response's prose is rescanned: a degenerate response repeats its
# last sentences, and a bounded tail keeps each chunk O(chunk).
TAIL_CHARS = 4000
# Rescan after this much new prose: a sentence or so, not every token.
RESCAN_CHARS = 80
# A code fence. Its state is tracked as chunks arrive: once the opening fence of a long
# block has left the kept tail, the text alone cannot tell code from prose.
FENCE = "```"


class StreamMonitor:
    """Feeds the prose of a streamed response (fenced code left out) to `degenerate`.

    ``_text`` holds only text outside code fences; ``_in_fence`` says whether the stream
    is inside one; ``_carry`` holds trailing backticks that may be the start of a fence
    marker split across chunks.
    """

    name = "text_repetition"
    STATE = ("_text", "_since_scan", "_fired", "_in_fence", "_carry")

    def __init__(self) -> None:
        self.reset()

    def snapshot(self) -> dict[str, Any]:
        return dump_attrs(self, self.STATE)

    def restore(self, data: dict[str, Any]) -> None:
        load_attrs(self, self.STATE, data)

    def reset(self) -> None:
        self._text = ""
        self._since_scan = 0
        self._fired = False
        self._in_fence = False
        self._carry = ""

    def _prose(self, chunk: str) -> str:
        """The part of ``chunk`` outside code fences, updating the fence state.

        A fence marker is a run of three or more backticks, however long (Markdown's rule),
        so the trailing run of a chunk is held back until the next one shows where it
        ends; three backticks stand for a longer run, which keeps the carry bounded. One
        pass over the chunk.
        """
        data = self._carry + chunk
        keep = len(data) - len(data.rstrip("`"))
        self._carry = data[len(data) - keep :][: len(FENCE)] if keep else ""
        if keep:
            data = data[: len(data) - keep]
        parts: list[str] = []
        pos = 0
        while True:
            at = data.find(FENCE, pos)
            if at < 0:
                if not self._in_fence:
                    parts.append(data[pos:])
                break
            if not self._in_fence:
                parts.append(data[pos:at])
                parts.append("\n")  # the block ends a sentence
            self._in_fence = not self._in_fence
            end = at + len(FENCE)
            while end < len(data) and data[end] == "`":
                end += 1  # the rest of a longer marker
            pos = end
        return "".join(parts)

    def feed(self, chunk: str) -> Finding | None:
        if not isinstance(chunk, str) or not chunk or self._fired:
            return None
        new = self._prose(chunk)
        if not new:
            return None
        self._text = (self._text[-TAIL_CHARS:] + new[-TAIL_CHARS:])[-TAIL_CHARS:]
        self._since_scan += len(new)
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
            # The same pattern as a finished message's degenerate text, so a person's
            # override of one silences the other (one override, every entry point).
            pattern=f"degenerate:{short(unit, 60)}",
            details={"text": short(unit, 200), "count": count},
        )
