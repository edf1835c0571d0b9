"""A tracker restored from its saved state at every turn gives the verdicts of one never
saved, whatever the agent does to its history between turns.

Agents append, drop the head of their history (a sliding context window), drop its end
(an undo, a retry) and rewrite messages in it (a summary, an edit). A sidecar with two
replicas behind a load balancer restores the session at every turn; with one it keeps
the live tracker. Both must answer alike, turn for turn.

The generated histories reuse tool-call ids and results on purpose (several frameworks
number calls per message, "call_0"), so the place of the last message read is ambiguous
after a dropped head unless the restored tracker remembers as much as the live one.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

import anyio
import pydantic_core
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from judge import LoopTracker, TrackerConfig
from judge._codec import compact, expand
from judge.errors import StateError
from judge.service.session_codec import (
    SESSION_FORMAT,
    StateFormatError,
    dump_session,
    dump_tracker,
    load_session,
    new_tracker,
    stored_tail,
)
from judge.state import TrackerState

# A small alphabet, so calls, results and ids recur as in a looping agent.
CALLS = [
    ("bash", {"cmd": "pytest -x"}),
    ("read_file", {"path": "app.py"}),
    ("bash", {"cmd": "ls"}),
    ("search", {"query": "retry"}),
]
RESULTS = ["FAILED tests/test_app.py::test_retry", "ok", "app.py tests", "no match"]
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HEAD = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix it."}]


def step(call: int, result: int, call_id: str) -> list[dict[str, Any]]:
    name, arguments = CALLS[call]
    tool_call = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return [
        {"role": "assistant", "content": None, "tool_calls": [tool_call]},
        {"role": "tool", "tool_call_id": call_id, "content": RESULTS[result]},
    ]


steps = st.lists(
    st.builds(
        step,
        st.integers(0, len(CALLS) - 1),
        st.integers(0, len(RESULTS) - 1),
        st.sampled_from(["call_0", "call_1"]),
    ),
    min_size=1,
    max_size=2,
)
# What happens to the history before a turn's new steps are appended.
edits = st.one_of(
    st.just(("append", 0)),
    st.tuples(st.just("drop_head"), st.integers(1, 8)),
    st.tuples(st.just("drop_tail"), st.integers(1, 4)),
    st.tuples(st.just("rewrite"), st.integers(0, 20)),
)
turns = st.lists(st.tuples(edits, steps), min_size=2, max_size=14)


def edited(history: list[dict[str, Any]], edit: tuple[str, int], turn: int) -> list[dict[str, Any]]:
    kind, n = edit
    body = history[len(HEAD) :]
    if kind == "drop_head":  # a sliding window: keep the prompt, drop the oldest steps
        body = body[min(2 * n, len(body)) :]
    elif kind == "drop_tail":
        body = body[: max(len(body) - n, 0)]
    elif kind == "rewrite" and body:  # one message replaced by a summary of what came before
        at = n % len(body)
        body = [*body[:at], {"role": "user", "content": f"Summary {turn}: keep going."}]
    while body and body[0]["role"] == "tool":  # a window never starts with orphan results
        body = body[1:]
    return [*HEAD, *body]


def histories(plan: list[tuple[tuple[str, int], list[list[dict[str, Any]]]]]) -> list[Any]:
    history: list[dict[str, Any]] = list(HEAD)
    out = []
    for turn, (edit, new_steps) in enumerate(plan):
        history = edited(history, edit, turn)
        for s in new_steps:
            history = [*history, *s]
        out.append(list(history))
    return out


@pytest.mark.slow
@given(turns)
@SETTINGS
def test_a_session_restored_every_turn_answers_as_one_never_saved(plan: Any) -> None:
    """The sidecar's path: a session's bytes (`dump_session`) as Redis holds them."""
    config = TrackerConfig(semantic="off")

    async def run() -> None:
        live = new_tracker(config)
        saved = dump_session(new_tracker(config), 0, None)
        for turn, history in enumerate(histories(plan)):
            expected = await live.turn_started(history)
            restored = load_session(config, saved).tracker
            got = await restored.turn_started(history)
            assert got == expected, f"turn {turn}"
            saved = dump_session(restored, len(history), None)

    anyio.run(run)


@pytest.mark.slow
@given(turns)
@SETTINGS
def test_a_tracker_restored_every_turn_answers_as_one_never_saved(plan: Any) -> None:
    """The library's path: ``LoopTracker.from_state(config, tracker.state)``."""
    config = TrackerConfig(semantic="off")

    async def run() -> None:
        live = LoopTracker(config)
        state = LoopTracker(config).state.model_dump_json()
        for turn, history in enumerate(histories(plan)):
            expected = await live.turn_started(history)
            restored = LoopTracker.from_state(config, state)
            got = await restored.turn_started(history)
            assert got == expected, f"turn {turn}"
            state = restored.state.model_dump_json()

    anyio.run(run)


# -- saved sessions reading back ------------------------------------------------------------

SAVE_CONFIG = TrackerConfig(semantic="off")
GITHUB_PAT = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"


def _read(data: bytes | str) -> dict[str, Any]:
    """A serialized state as the loader sees it: validated, each field as it is held."""
    state = TrackerState.model_validate_json(data)
    return {name: getattr(state, name) for name in type(state).model_fields}


def test_a_state_saved_without_its_string_table_still_loads() -> None:
    """Sidecars of earlier releases saved small states without the table of long strings;
    a session saved so continues where it stopped."""
    tracker = new_tracker(SAVE_CONFIG)
    history = [*HEAD]
    for n in range(6):
        history += step(n % 2, 0, f"c{n}")
        anyio.run(tracker.turn_started, history)
    state = tracker.state
    fields = {
        name: value.model_dump(mode="json") if isinstance(value, BaseModel) else value
        for name in type(state).model_fields
        for value in [getattr(state, name)]
    }
    fields["redacted"] = True
    plain = pydantic_core.to_json(fields)
    saved = tracker.state.model_dump_json()
    assert b'"strings"' not in plain and '"strings"' in saved
    assert _read(plain) == _read(saved)
    restored = LoopTracker.from_state(SAVE_CONFIG, plain.decode("utf-8"))
    history += step(0, 0, "c9")
    assert anyio.run(restored.turn_started, history) == anyio.run(tracker.turn_started, history)


def test_streamed_text_is_saved_redacted() -> None:
    tracker = new_tracker(SAVE_CONFIG)  # restored: it reads redacted, streams raw
    anyio.run(tracker.turn_started, [{"role": "user", "content": "Deploy it."}])
    tracker.content_chunk(f"Using the token {GITHUB_PAT} to push")
    assert GITHUB_PAT[4:14] not in tracker.state.model_dump_json()


def test_expand_in_place_reads_what_the_copying_expand_reads() -> None:
    """`load_session` expands the JSON it just parsed in place; `TrackerState` copies (its
    input may be the caller's). Both read the same data back, and only in place changes
    the input."""
    long = "y" * 70
    data = {
        "\x00nul": [long, {"k": long}, "short", 1, None],
        long: {"$dict": {"\x00\x00k": long + "z", "plain": [long, [long]]}},
        "nested": [[[{"a": long}]]],
    }
    packed, strings = compact(data)
    text = json.dumps(packed)
    untouched = json.loads(text)
    assert expand(untouched, strings) == data
    assert untouched == json.loads(text)  # the copying expand left its input alone
    parsed = json.loads(text)
    assert expand(parsed, strings, in_place=True) == data
    with pytest.raises(StateError, match="out of range"):
        expand(json.loads(text), strings[:1], in_place=True)


def test_a_session_whose_tail_holds_a_lone_surrogate_reads_back() -> None:
    """pydantic-core's parser refuses a lone surrogate's escape, which ``json`` writes for
    a message that held one (JSON allows it): `load_session` reads it with ``json``."""
    tracker = new_tracker(SAVE_CONFIG)
    history: list[dict[str, Any]] = [{"role": "user", "content": "half an emoji: \ud83d"}]
    anyio.run(tracker.turn_started, history)
    blob = dump_session(tracker, 1, stored_tail(tracker, history[-1]))
    session = load_session(SAVE_CONFIG, blob)
    assert session.length == 1 and session.tail["content"] == "half an emoji: \ud83d"
    assert _read(dump_tracker(session.tracker)) == _read(dump_tracker(tracker))


def test_a_planted_session_nested_past_any_parser_is_a_state_format_error() -> None:
    depth = 100_000
    body = b'{"length":1,"tail":' + b"[" * depth + b"]" * depth + b',"state":{}}'
    with pytest.raises(StateFormatError):
        load_session(SAVE_CONFIG, SESSION_FORMAT + zlib.compress(body))


def test_a_fresh_ladder_state_and_stats_equal_their_defaults_and_share_nothing() -> None:
    """Built without pydantic reading the default factories (`_fresh_state`,
    `TrackerStats.fresh`): equal to the validated defaults, and no two share a dict."""
    from judge.response.ladder import LadderState, _fresh_state
    from judge.response.stats import TrackerStats

    assert _fresh_state() == LadderState()
    assert TrackerStats.fresh() == TrackerStats()
    one, two = TrackerStats.fresh(), TrackerStats.fresh()
    one.actions["stop"] = 1
    one.detections_by_kind["action"] = 1
    assert two.actions == {} and two.detections_by_kind == {}
    first, second = _fresh_state(), _fresh_state()
    first.overrides.append(None)  # type: ignore[arg-type]
    assert second.overrides == [] and first.patterns is not second.patterns
