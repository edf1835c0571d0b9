"""Texts that help the agent and its user out of a loop, written from the evidence.

The wording lives in ``prompts/`` (recovery_*.md, recovery_advice.json) so users can
restyle it without touching code.
"""

from __future__ import annotations

from typing import Any

from judge._prompts import read_json, read_text
from judge.detectors.base import Finding
from judge.verdict import JudgeCall

LLM_RECOVERY_FILE = "recovery_llm.md"
HEURISTIC_RECOVERY_FILE = "recovery_heuristic.md"
ADVICE_FILE = "recovery_advice.json"
# One status line: long enough for "tool(args) called 5x, same result", short enough for
# a terminal status bar.
SUMMARY_MAX_CHARS = 120
# The recovery message is injected into the agent's context on every loop verdict; keep
# it to a paragraph so it steers without crowding out the task.
RECOVERY_MAX_CHARS = 1500
# Evidence indices cited in the message; the verdict carries all of them.
EVIDENCE_SHOWN = 8


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Blank(dict[str, Any]):
    """Missing template fields render as "-" instead of raising KeyError."""

    def __missing__(self, key: str) -> str:
        return "-"


def from_judge(call: JudgeCall) -> tuple[str, str]:
    """(summary, recovery message) for a loop the LLM judge found."""
    analysis = call.analysis or "no analysis given"
    confidence = call.confidence if call.confidence is not None else 0.0
    summary = _shorten(f"LLM judge ({call.model}, {confidence:.2f}): {analysis}",
                       SUMMARY_MAX_CHARS)
    message = read_text(LLM_RECOVERY_FILE).format(
        confidence=confidence, analysis=_shorten(analysis, RECOVERY_MAX_CHARS // 2)
    )
    return summary, message[:RECOVERY_MAX_CHARS]


def from_finding(finding: Finding) -> tuple[str, str]:
    """(summary, recovery message) for a loop a heuristic detector found."""
    details = _Blank({k: _shorten(str(v), 160) for k, v in finding.details.items()})
    if "calls" in finding.details:
        details["calls"] = " -> ".join(finding.details["calls"])
    advice = read_json(ADVICE_FILE).get(finding.kind.value, {})
    constraint = str(advice.get("constraint", "do not repeat the same steps.")).format_map(
        details)
    alternatives = "\n".join(
        f"- {str(a).format_map(details)}" for a in advice.get("alternatives", [])[:3]
    )
    tried = details.get("arguments") or details.get("calls") or details.get("text") or "-"
    evidence = ", ".join(str(i) for i in finding.evidence[-EVIDENCE_SHOWN:])
    summary = _shorten(finding.summary, SUMMARY_MAX_CHARS)
    message = read_text(HEURISTIC_RECOVERY_FILE).format(
        summary=finding.summary, evidence=evidence, constraint=constraint,
        tried=tried, alternatives=alternatives,
    )
    return summary, message[:RECOVERY_MAX_CHARS]
