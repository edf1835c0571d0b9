"""Properties over generated OpenAI-format histories (hypothesis).

Any structurally valid history normalizes without raising, whatever its text (lone
surrogates, control characters, astral planes, non-JSON tool arguments); the judge prompt
built from it is valid UTF-8 and within its size cap; and with the judge faked, the same
input always gives the same verdicts.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge import LoopTracker, TrackerConfig, Verdict
from judge.history import ROLES, normalize_history
from judge.testing import ScriptedJudge
from tests.fakes import answer, fake_judge

FAST, CONFIRM = "fake/fast", "fake/confirm"
# Every code point, surrogates (category Cs) included: agents pass through whatever their
# tools decoded, and Python strings can hold a lone surrogate.
ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, exclude_categories=())
TEXT = st.text(ANY_CHAR, max_size=60)
NAMES = st.sampled_from(["read_file", "write_file", "bash", "search", "run_tests", "ünï"])
# A judge prompt cap small enough that generated histories actually hit it.
SMALL_PROMPT_CAP = 6000
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

content = st.one_of(
    st.none(),
    TEXT,
    st.lists(
        st.one_of(
            st.builds(lambda t: {"type": "text", "text": t}, TEXT),
            st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}),
            TEXT,  # a bare string part
        ),
        max_size=3,
    ),
)
arguments = st.one_of(
    TEXT,  # anything, JSON or not
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), TEXT, st.none()), max_size=3).map(
        json.dumps
    ),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),  # an already-parsed dict
)


@st.composite
def turn(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """One agent step: prose, or tool calls followed by their results."""
    if draw(st.booleans()):
        return [{"role": "assistant", "content": draw(content)}]
    calls = [
        {
            "id": f"c{n}_{k}",
            "type": "function",
            "function": {"name": draw(NAMES), "arguments": draw(arguments)},
        }
        for k in range(draw(st.integers(1, 3)))
    ]
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": draw(content), "tool_calls": calls}
    ]
    msgs += [{"role": "tool", "tool_call_id": c["id"], "content": draw(content)} for c in calls]
    return msgs


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": draw(content)},
        {"role": "user", "content": draw(content)},
    ]
    for n in range(draw(st.integers(0, 12))):
        if draw(st.integers(0, 9)) == 0:
            history.append(
                {"role": draw(st.sampled_from(["user", "developer"])), "content": draw(content)}
            )
        history += draw(turn(n))
    return history


@pytest.mark.slow
@given(histories())
@SETTINGS
def test_normalization_never_raises_on_valid_shapes(history: list[dict[str, Any]]) -> None:
    msgs = normalize_history(history)
    assert [m.role for m in msgs] == [h["role"] for h in history]
    assert all(m.role in ROLES for m in msgs)
    for m in msgs:
        m.content.encode("utf-8")
        for c in m.tool_calls:
            c.canonical.encode("utf-8")
            c.arguments.encode("utf-8")


def _tracker(client: ScriptedJudge) -> LoopTracker:
    return LoopTracker(
        TrackerConfig(
            fast_model=FAST,
            confirm_model=CONFIRM,
            check_after_turns=1,
            initial_interval=1,
            min_interval=1,
            max_interval=3,
            max_prompt_chars=SMALL_PROMPT_CAP,
        ),
        client=client,
    )


def _fingerprint(v: Verdict) -> tuple[Any, ...]:
    calls = tuple((c.model, c.stage, c.confidence, c.error) for c in v.judge_calls)
    return (
        v.looping,
        v.source,
        v.kind,
        v.confidence,
        v.analysis,
        tuple(v.evidence),
        v.action,
        v.turn,
        v.suspicion,
        tuple(v.errors),
        calls,
    )


async def _replay(history: list[dict[str, Any]], script: list[float]) -> tuple[Any, ...]:
    client = fake_judge({FAST: [answer(c) for c in script], CONFIRM: [answer(0.5)]})
    tracker = _tracker(client)
    verdicts = [
        _fingerprint(await tracker.turn_started(history[:end]))
        for end in range(2, len(history) + 1)
        if history[end - 1]["role"] != "tool" or end == len(history)
    ]
    for _, prompt in client.requests:
        assert sum(len(m["content"]) for m in prompt) <= SMALL_PROMPT_CAP
        for m in prompt:
            m["content"].encode("utf-8")
    return tuple(verdicts)


@pytest.mark.slow
@given(histories(), st.lists(st.sampled_from([0.0, 0.3, 0.9, 0.95, 1.0]), min_size=1, max_size=4))
@SETTINGS
def test_verdicts_are_deterministic_with_the_judge_faked(
    history: list[dict[str, Any]], script: list[float]
) -> None:
    first = anyio.run(_replay, history, list(script))
    second = anyio.run(_replay, history, list(script))
    assert first == second
