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
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge import LoopTracker, TrackerConfig
from judge.service.state import dump_session, load_session, new_tracker

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
