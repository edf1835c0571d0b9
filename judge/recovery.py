"""Texts that help the agent and its user out of a loop, written from the evidence."""

from __future__ import annotations

from judge._prompts import read_text
from judge.verdict import JudgeCall

LLM_RECOVERY_FILE = "recovery_llm.md"
# One status line: long enough for "tool(args) called 5x, same result", short enough for
# a terminal status bar.
SUMMARY_MAX_CHARS = 120
# The recovery message is injected into the agent's context on every loop verdict; keep
# it to a paragraph so it steers without crowding out the task.
RECOVERY_MAX_CHARS = 1500


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def from_judge(call: JudgeCall) -> tuple[str, str]:
    """(summary, recovery message) for a loop the LLM judge found."""
    analysis = call.analysis or "no analysis given"
    confidence = call.confidence if call.confidence is not None else 0.0
    summary = _shorten(f"LLM judge ({call.model}, {confidence:.2f}): {analysis}", SUMMARY_MAX_CHARS)
    message = read_text(LLM_RECOVERY_FILE).format(
        confidence=confidence, analysis=_shorten(analysis, RECOVERY_MAX_CHARS // 2)
    )
    return summary, message[:RECOVERY_MAX_CHARS]
