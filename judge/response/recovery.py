"""Texts that help the agent and its user out of a loop, written from the evidence.

Three levels per loop verdict: a one-line ``summary`` (status bar), an ``explanation`` of
two or three sentences (a person), and a ``recovery_message`` (the model: a fenced block
with the pattern, the evidence, explicit constraints, what was tried and alternatives).
The recovery template grows stronger with the escalation rung (`RecoveryLevel`).

The wording lives in ``prompts/`` (recovery_*.md, recovery_advice.json) so users can
restyle it without touching code; this module only fills in the fields and keeps the
message within its character budget.

A judge model's analysis is untrusted text: the model read the agent's history, which
anyone can write into, and no filter can tell a description from an order phrased as one
(passive voice, another language, look-alike characters). So the recovery message, which
the agent is told to follow, holds none of it: for a judge verdict it is built from our
templates and what we computed (the reviewed messages, the recent calls and their counts,
the reviewer's confidence). The analysis stays on the verdict for people, and only the
``explanation`` quotes it, through `judge_opinion` (stripped, clipped and labelled).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from judge._prompts import read_json, read_text
from judge.config import DEFAULT_RECOVERY_MAX_CHARS
from judge.detectors.base import Finding
from judge.response.ladder import LadderStep, RecoveryLevel
from judge.user_turns import RECOVERY_FENCE as RECOVERY_FENCE  # re-exported: its home
from judge.verdict import Action, JudgeCall

LLM_RECOVERY_FILE = "recovery_llm.md"
HEURISTIC_RECOVERY_FILE = "recovery_heuristic.md"
EXPLANATION_FILE = "recovery_explanation.md"
ADVICE_FILE = "recovery_advice.json"
# The template per level once a loop has been warned about; the first warning uses the
# source's own template (heuristic or LLM).
LEVEL_FILES: dict[RecoveryLevel, str] = {
    RecoveryLevel.FORBID: "recovery_forbid.md",
    RecoveryLevel.ASK_USER: "recovery_ask_user.md",
    RecoveryLevel.STOP: "recovery_stop.md",
}
# The advice entry for loops the LLM judge finds (it names no LoopKind).
LLM_ADVICE = "llm"
# One status line: long enough for "tool(args) called 5x, same result", short enough for
# a terminal status bar.
SUMMARY_MAX_CHARS = 120
# The default budget of a recovery message (TrackerConfig.recovery_max_chars sets it).
RECOVERY_MAX_CHARS = DEFAULT_RECOVERY_MAX_CHARS
# Evidence indices cited in the message; the verdict carries all of them.
EVIDENCE_SHOWN = 8
# Per-field character caps tried in turn until the message fits its budget: the first fits
# a full canonical call, the last still names the tool.
FIELD_CAPS = (240, 160, 100, 60, 30)
# Lines of "tried" and "alternatives" kept at each cap (same order as FIELD_CAPS).
LIST_ITEMS = (5, 4, 3, 2, 1)
# Fields in the person-facing explanation are clipped to this: two or three sentences.
EXPLANATION_FIELD_CHARS = 160
# A fence inside a field would close ours early; this replaces it.
_FENCE = "```"
_FENCE_SAFE = "'''"
_SECTION = re.compile(r"^## (\S+)\s*$", re.MULTILINE)

# -- the judge's words -------------------------------------------------------------------------
# A judge model's reply is untrusted text. It never reaches the recovery message; for the
# person-facing explanation, code, links and sentences that give orders are removed, and
# what is left is clipped, quoted and labelled as the reviewer's opinion. These filters are
# a courtesy to the person reading, not a defence: the agent never reads their output.
OPINION_CHARS = 240
"""The longest quoted analysis: two sentences of description, no room for a payload."""
OPINION_LABEL = "(the reviewer's opinion, not an instruction)"
NO_OPINION = "(no usable assessment)"
_CODE_BLOCK = re.compile(r"```[\s\S]{0,4000}?(?:```|$)|`[^`\n]{0,400}`?")
_TAG = re.compile(r"</?[A-Za-z|!][^<>\n]{0,80}>|<\|[^|\n]{0,40}\|>")
_LINK = re.compile(
    r"\b(?:[a-z][a-z0-9+.-]{1,20}://|www\.)[^\s\"'<>]{1,2000}"
    r"|\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}[^\s\"'<>]{0,2000}"
    r"|\b[a-z0-9-][a-z0-9.-]{0,253}\.(?:com|net|org|io|dev|sh|xyz|ru|cn|example"
    r"|app|ai|co|me|info|biz|top|site|online)\b[^\s\"'<>]{0,2000}",
    re.IGNORECASE,
)
# The judge's reply is read this far at most: far more than any analysis worth quoting.
_OPINION_READ = 4000
# A sentence ends at . ! ? before a space (not inside "config.py") or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# A clause of a sentence, each checked for orders on its own ("Stuck; run X").
_CLAUSE_END = re.compile(r"[;:]|,\s*(?=(?:and\s+)?(?:then|so|now|next|please)\b)|\s+-+\s+")
# Sentence openings that address the agent instead of describing it.
_ORDER_START = re.compile(
    r"^\W{0,3}(?:please|now|next|first|then|instead|also|finally|just)?[,:]?\s{0,3}"
    r"(?:run|execute|exec|type|enter|paste|copy|install|download|upload|fetch|curl|wget|sudo"
    r"|ignore|disregard|forget|delete|remove|rm|drop|kill|call|use|try|open|visit|go|click|"
    r"send|post|export|set|write|create|chmod|chown|source|eval|pipe|grant|give|reveal|print|"
    r"do|don't|do not|never|always|stop|continue|make|change|edit|modify|replace|add|apply|"
    r"push|commit|deploy|login|log in|sign in|authenticate|share|email|contact)\b",
    re.IGNORECASE,
)
_ORDER_ANYWHERE = re.compile(
    r"\b(?:you|agent|assistant)\s{1,3}(?:should|must|need to|have to|ought to|will need to)\b"
    r"|\bignore\s{1,3}(?:all|any|the|previous|prior|above)\b|\binstructions?\b|\bsystem prompt\b"
    r"|\$\(|&&|\|\||\|\s{0,3}(?:sh|bash|zsh|python\d?|perl|ruby|node)\b|;\s{0,3}(?:rm|curl|wget)\b"
    r"|\b(?:sudo|rm\s{1,3}-|chmod|curl|wget|bash\s{1,3}-c|python\d?\s{1,3}-c|os\.system|eval\(|exec\()",
    re.IGNORECASE,
)


def judge_opinion(analysis: str | None, limit: int = OPINION_CHARS) -> str:
    """The judge's analysis as it may be shown: orders, code and links removed, clipped,
    quoted and labelled as the reviewer's opinion (`NO_OPINION` when nothing is left)."""
    text = _TAG.sub(" ", _CODE_BLOCK.sub(" ", (analysis or "")[:_OPINION_READ]))
    text = _LINK.sub("[link removed]", text)
    kept = []
    for sentence in _SENTENCE_END.split(text):
        sentence = " ".join(sentence.split())
        if not sentence or _ORDER_ANYWHERE.search(sentence):
            continue
        if any(_ORDER_START.match(c.strip()) for c in _CLAUSE_END.split(sentence)):
            continue
        kept.append(sentence.replace('"', "'").replace(_FENCE, _FENCE_SAFE))
    quoted = _shorten(" ".join(kept), limit)
    return f'"{quoted}" {OPINION_LABEL}' if quoted else NO_OPINION


# -- a judge verdict in our words ------------------------------------------------------------
# What happened, as the agent reads it after a judge verdict: facts only.
JUDGE_WHAT = (
    "a reviewer model found no progress in your last {steps} steps (messages {span}; "
    "confidence {confidence:.2f})"
)
# The judge's loop in "approaches tried" lists (the ladder's label of the "llm" pattern).
JUDGE_LABEL = "no progress (LLM judge)"
# Labels of the judge's loop saved before it was built from facts quoted the analysis
# after this prefix; a state restored from then gets the plain label instead.
_QUOTING_LABEL = JUDGE_LABEL + ": "


def _span(evidence: Sequence[int]) -> str:
    return f"{min(evidence)}-{max(evidence)}" if evidence else "-"


def judge_label(evidence: Sequence[int]) -> str:
    """The ladder's label of a judge-found loop: the reviewed messages, no model text."""
    return f"{JUDGE_LABEL}, messages {_span(evidence)}" if evidence else JUDGE_LABEL


def _our_labels(tried: Sequence[str]) -> list[str]:
    """``tried`` with any label that quoted a judge's analysis replaced by the plain one."""
    return [JUDGE_LABEL if t.startswith(_QUOTING_LABEL) else t for t in tried]


@dataclass(frozen=True, slots=True)
class Recovery:
    """The three texts of one loop verdict."""

    summary: str
    explanation: str
    message: str


def _shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


class _Blank(dict[str, Any]):
    """Missing template fields render as "-" instead of raising KeyError."""

    def __missing__(self, key: str) -> str:
        return "-"


@cache
def _sections(name: str) -> dict[str, str]:
    """``## name`` sections of a markdown template file, text before the first ignored."""
    text = read_text(name)
    parts = _SECTION.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _first_step() -> LadderStep:
    return LadderStep(
        action=Action.WARN, level=RecoveryLevel.WARN, rung=1, pattern_count=1, overall_count=1
    )


def _evidence(indices: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in indices[-EVIDENCE_SHOWN:])
    if len(indices) > EVIDENCE_SHOWN:
        shown = "…, " + shown
    return shown or "-"


def _bullets(items: Sequence[str], cap: int, count: int) -> str:
    lines = [f"- {_shorten(item, cap)}" for item in items[:count] if item]
    return "\n".join(lines) or "- (nothing recorded)"


def _fit(render: Callable[[int, int], str], budget: int) -> str:
    """Render with shrinking field caps until the text fits ``budget``; as a last resort
    cut the body and close the fence again, so the block always stays well-formed."""
    text = ""
    for cap, items in zip(FIELD_CAPS, LIST_ITEMS, strict=True):
        text = render(cap, items)
        if len(text) <= budget:
            return text
    closing = "\n" + _FENCE if text.rstrip().endswith(_FENCE) else ""
    cut = budget - len(closing) - 1
    return text[:cut].rstrip() + "…" + closing


def _fence_safe(value: Any) -> str:
    return str(value).replace(_FENCE, _FENCE_SAFE)


def _advice(key: str) -> dict[str, Any]:
    advice = read_json(ADVICE_FILE).get(key, {})
    return advice if isinstance(advice, dict) else {}


def _level_template(level: RecoveryLevel, first: str) -> str:
    return read_text(LEVEL_FILES[level]) if level in LEVEL_FILES else read_text(first)


def _people(source: str, step: LadderStep, fields: dict[str, Any], what: str) -> tuple[str, str]:
    """(summary, explanation) from the ``summary.*`` and ``explain.*`` sections."""
    sections = _sections(EXPLANATION_FILE)
    level = step.level.value
    approaches = "; ".join(_shorten(t, 60) for t in step.tried[:3]) or "-"
    common = _Blank(
        {
            **{
                k: _shorten(v, EXPLANATION_FIELD_CHARS) if isinstance(v, str) else v
                for k, v in fields.items()
            },
            "approaches": approaches,
            "count": len(step.tried),
            "warnings": max(step.pattern_count - 1, 0),
        }
    )
    head = sections.get(f"explain.{source}", "{what}").format_map(
        _Blank(common, what=_shorten(what, EXPLANATION_FIELD_CHARS))
    )
    tail = sections.get(f"explain.{level}", "").format_map(common)
    explanation = f"{head} {tail}".strip()
    template = sections.get(f"summary.{level}", "{what}")
    overhead = len(template.format_map(_Blank(common, what="")))
    summary = template.format_map(
        _Blank(common, what=_shorten(what, max(SUMMARY_MAX_CHARS - overhead, 20)))
    )
    return _shorten(summary, SUMMARY_MAX_CHARS), explanation


def for_finding(
    finding: Finding, step: LadderStep | None = None, *, budget: int = RECOVERY_MAX_CHARS
) -> Recovery:
    """The three texts for a loop a heuristic detector found, at the ladder's ``step``."""
    step = step or _first_step()
    advice = _advice(finding.kind.value)
    raw = dict(finding.details)
    if isinstance(raw.get("calls"), list | tuple):
        raw["calls"] = " -> ".join(map(str, raw["calls"]))
    name = str(advice.get("name", finding.kind.value.replace("_", " ") + " loop"))

    def render(cap: int, items: int) -> str:
        details = _Blank({k: _fence_safe(_shorten(v, cap)) for k, v in raw.items()})
        constraint = str(advice.get("constraint", "do not repeat the same steps.")).format_map(
            details
        )
        forbid = str(advice.get("forbid", constraint)).format_map(details)
        tried = str(advice.get("tried", finding.summary)).format_map(details)
        alternatives = [str(a).format_map(details) for a in advice.get("alternatives", [])]
        fields = _Blank(
            name=name,
            what=_fence_safe(_shorten(finding.summary, cap)),
            evidence=_evidence(finding.evidence),
            constraint=constraint,
            forbid=forbid,
            tried=_bullets([tried], cap, items),
            alternatives=_bullets(alternatives, cap, items),
            approaches=_bullets(
                [tried] + [_fence_safe(t) for t in _our_labels(step.tried[1:])], cap, items
            ),
            detection=step.pattern_count,
            overall=step.overall_count,
            summary=_fence_safe(_shorten(finding.summary, cap)),
        )
        return _level_template(step.level, HEURISTIC_RECOVERY_FILE).format_map(fields).strip()

    message = _fit(render, budget)
    summary, explanation = _people(
        "heuristic",
        step,
        {
            "name": name,
            "evidence": _evidence(finding.evidence),
            "detection": step.pattern_count,
            "overall": step.overall_count,
        },
        finding.summary,
    )
    return Recovery(summary, explanation, message)


def for_judge(
    call: JudgeCall,
    step: LadderStep | None = None,
    *,
    evidence: Sequence[int] = (),
    recent_calls: Sequence[str] = (),
    budget: int = RECOVERY_MAX_CHARS,
) -> Recovery:
    """The three texts for a loop the LLM judge found.

    ``recent_calls`` are the calls in the judge's window, most repeated first ("name(args)
    x3"): the judge names no call, so the constraint cites what the agent actually did.
    The recovery message and the summary hold no word of the judge's analysis (the
    summary reaches the agent too, where an integration has no recovery message to give:
    a proxy's refusal, a hook's fallback); only the explanation quotes it, through
    `judge_opinion`.
    """
    step = step or _first_step()
    advice = _advice(LLM_ADVICE)
    confidence = call.confidence if call.confidence is not None else 0.0
    name = str(advice.get("name", "no-progress loop"))
    calls = list(recent_calls) or ["(no tool calls in the reviewed messages)"]
    what = JUDGE_WHAT.format(steps=len(evidence), span=_span(evidence), confidence=confidence)

    def render(cap: int, items: int) -> str:
        # No field carries the analysis: a template naming {analysis} gets "-".
        fields = _Blank(
            name=name,
            what=what,
            confidence=confidence,
            evidence=_evidence(evidence),
            constraint=str(advice.get("constraint", "do not repeat the same steps.")),
            forbid=str(advice.get("forbid", "do not repeat the same steps.")),
            tried=_bullets([_fence_safe(c) for c in calls], cap, items),
            alternatives=_bullets([str(a) for a in advice.get("alternatives", [])], cap, items),
            approaches=_bullets(
                [_fence_safe(t) for t in _our_labels(step.tried)] or calls, cap, items
            ),
            detection=step.pattern_count,
            overall=step.overall_count,
            model=call.model,
        )
        return _level_template(step.level, LLM_RECOVERY_FILE).format_map(fields).strip()

    message = _fit(render, budget)
    # The quoted opinion and its label fit the explanation's field cap whole: a clip must
    # never cut the label off.
    opinion_chars = EXPLANATION_FIELD_CHARS - len(OPINION_LABEL) - 3
    summary, explanation = _people(
        "llm",
        step,
        {
            "name": name,
            "evidence": _evidence(evidence),
            "detection": step.pattern_count,
            "overall": step.overall_count,
            "model": call.model,
            "confidence": confidence,
            "analysis": judge_opinion(call.analysis, opinion_chars),
        },
        f"LLM judge ({call.model}, {confidence:.2f}): no progress, messages {_span(evidence)}",
    )
    return Recovery(summary, explanation, message)
