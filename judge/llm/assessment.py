"""Read the judge model's reply into a validated `JudgeAssessment`, or refuse it.

Models wrap JSON in prose or markdown fences, emit NaN, quote numbers, or stop mid-object.
Anything that is not exactly the schema is a `JudgeOutputError`: a made-up confidence is
worse than none, because the tracker would act on it.

Reasoning models (DeepSeek R1 distills, Qwen3, some o-series routes) think before they
answer, in a ``<think>...</think>`` block that may hold a draft JSON or code with braces.
Only the text after the thinking is the answer; a reply that ends inside its thinking has
no answer at all, whatever JSON the thinking held.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict, Field

from judge._prompts import read_json
from judge.errors import JudgeOutputError

SCHEMA_FILE = "assessment.schema.json"
ANALYSIS_KEY = "unproductive_state_analysis"
CONFIDENCE_KEY = "unproductive_state_confidence"

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)
# A thinking block at the start of a reply (leading whitespace allowed), and the tag that
# ends one. R1 distills' chat templates write the opening tag into the prompt, so their
# replies hold only the closing one.
_THINK_OPEN = re.compile(r"\A\s*<(think|thinking|reasoning)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)\s*>", re.IGNORECASE)
# The setting that raises the reply cap, named where a reply was cut off at it.
REPLY_CAP_VARIABLE = "LOOP_JUDGE_MAX_REPLY_TOKENS"


class JudgeAssessment(BaseModel):
    """A judge's answer: why, and how sure it is that the agent is looping."""

    model_config = ConfigDict(frozen=True)

    analysis: str
    confidence: float = Field(ge=0.0, le=1.0)


@cache
def assessment_schema() -> dict[str, Any]:
    schema: dict[str, Any] = read_json(SCHEMA_FILE)
    return schema


@cache
def _validator() -> Draft202012Validator:
    schema = assessment_schema()
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        # "[[[[..." nested past the interpreter's limit: an unusable reply, not a crash.
        raise ValueError("JSON nested too deeply") from None


def _candidates(text: str) -> list[str]:
    """Plausible JSON object texts in a reply, most likely first."""
    out = [text.strip()]
    out.extend(m.group(1).strip() for m in _FENCE.finditer(text))
    start = text.find("{")
    if start >= 0:
        end = text.rfind("}")
        if end > start:
            out.append(text[start : end + 1])
        # the first balanced object, for replies with trailing chatter containing braces
        depth, in_str, esc = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    out.append(text[start : i + 1])
                    break
    return out


def extract_object(text: str) -> dict[str, Any]:
    """The first JSON object found in ``text`` (bare, fenced, or inside prose)."""
    problems: list[str] = []
    for candidate in _candidates(text):
        try:
            value = _loads(candidate)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if isinstance(value, dict):
            return value
        problems.append(f"expected a JSON object, got {type(value).__name__}")
    detail = problems[0] if problems else "empty reply"
    raise JudgeOutputError(f"no JSON object in the reply ({detail})")


def _cap(max_tokens: int | None) -> str:
    said = f"max_tokens={max_tokens}" if max_tokens is not None else "max_tokens"
    return f"{said}; raise {REPLY_CAP_VARIABLE} for a model that thinks first"


def _is_object(text: str) -> bool:
    try:
        return isinstance(_loads(text.strip()), dict)
    except ValueError:
        return False


def final_answer(
    text: str, *, finish_reason: str | None = None, max_tokens: int | None = None
) -> str:
    """The reply without the model's thinking: what follows the first closing tag.

    Raises `JudgeOutputError` when the reply opens a thinking block and never closes it:
    the model was cut off (or stopped) before it answered, and a draft in its thinking is
    not an answer.
    """
    opened = _THINK_OPEN.match(text)
    if opened is not None:
        close = re.compile(rf"</{opened.group(1)}\s*>", re.IGNORECASE).search(text, opened.end())
    else:
        close = _THINK_CLOSE.search(text)
        if close is not None and _is_object(text):
            return text  # the tag is quoted inside a bare JSON answer, not thinking's end
    if close is not None:
        return text[close.end() :]
    if opened is None:
        return text
    if finish_reason == "length":
        raise JudgeOutputError(
            f"the reply was cut off inside the model's thinking, before any answer, at "
            f"{_cap(max_tokens)}"
        )
    raise JudgeOutputError("the reply ended inside the model's thinking, before any answer")


def parse_assessment(
    text: str | None, *, finish_reason: str | None = None, max_tokens: int | None = None
) -> JudgeAssessment:
    """Validate a reply against the schema file and return the `JudgeAssessment`.

    ``max_tokens`` is the reply cap the request was sent with, named when the reply was
    cut off at it.
    """
    if text is None or not text.strip():
        reason = "refused or empty" if finish_reason != "length" else "cut off at max_tokens"
        raise JudgeOutputError(f"the reply has no content ({reason})")
    text = final_answer(text, finish_reason=finish_reason, max_tokens=max_tokens)
    if not text.strip():
        reason = (
            f"cut off at {_cap(max_tokens)}" if finish_reason == "length" else "nothing followed it"
        )
        raise JudgeOutputError(f"the reply has no answer after the model's thinking ({reason})")
    try:
        data = extract_object(text)
    except JudgeOutputError as exc:
        if finish_reason == "length":
            raise JudgeOutputError(f"the reply was cut off at max_tokens: {exc}") from exc
        raise
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.path) or "reply"
        raise JudgeOutputError(
            f"the reply breaks the assessment schema at {where}: {first.message}"
        )
    # One check per reply: the schema file above is what the model was asked to follow, so
    # it is the check; the model's own bounds guard only code that builds one directly.
    return JudgeAssessment.model_construct(
        analysis=data[ANALYSIS_KEY], confidence=float(data[CONFIDENCE_KEY])
    )
