"""Attempts that differ from one another: when the variation is progress and when it is not.

A harness that never runs the varied calls it refuses is still the same mistake made
again; a retry that brings new input (another order id) is a new attempt even when the
error names a value it kept; and a reply's own text never breaks how replies are compared.
"""

from __future__ import annotations

import json
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig, Verdict
from tests.fakes import Agent, replay_turns

NUDGE = (
    "Your last reply called a tool that is not available in this step. You must reply with "
    "exactly one action in the format ```bash ... ``` and nothing else. Please try again."
)


def _replay(history: list[dict[str, Any]]) -> list[Verdict]:
    return anyio.run(replay_turns, LoopTracker(TrackerConfig()), history)


def _first(verdicts: list[Verdict]) -> tuple[int, str | None] | None:
    return next(((i + 1, v.source) for i, v in enumerate(verdicts) if v), None)


def test_a_harness_refusing_varied_calls_it_never_ran_is_repeated_feedback() -> None:
    """Each call names another file, but the harness runs none of them and says the same
    thing each time: no call was heeded, so the corrections add up."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for n in range(6):
        call = {
            "id": f"c{n}",
            "type": "function",
            "function": {"name": "open_file", "arguments": json.dumps({"path": f"m{n}.py"})},
        }
        history.append({"role": "assistant", "content": "", "tool_calls": [call]})
        history.append({"role": "user", "content": NUDGE})
    assert _first(_replay(history)) == (3, "heuristic:repeated_feedback")


def test_a_nul_in_a_reply_does_not_hide_its_repetition() -> None:
    for separator in ("", "\x00"):
        history: list[dict[str, Any]] = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "Write the report."},
        ]
        for n in range(6):
            text = (
                "I am going to write the report now, section by section, starting"
                f"{separator} with the introduction and the summary of findings."
            )
            history.append({"role": "assistant", "content": text})
            history.append({"role": "user", "content": f"continue {n}"})
        assert _first(_replay(history)) == (3, "heuristic:text_repetition"), repr(separator)


def test_a_retry_with_new_input_is_a_new_attempt_even_if_the_error_names_a_kept_value() -> None:
    """The error names the store, which every call passes; the order id is new each time.
    A retry that only drops parts of the failed call (the same booking minus a leg) is the
    same request again; one that brings a new value is not."""
    agent = Agent()
    for order in ("W2378156", "W2378157", "W9911002"):
        agent.call(
            "get_order",
            {"store": "retail-main", "order_id": order},
            "Error: order not found in store retail-main",
        )
    assert _first(_replay(agent.history)) is None
    legs = [{"flight": "HAT030"}, {"flight": "HAT052"}, {"flight": "HAT124"}]
    booking = Agent()
    for n in range(3):
        booking.call(
            "update_reservation_flights",
            {"reservation_id": "ZFA04Y", "flights": legs[: 3 - n]},
            "Error: flight HAT030 not available on date 2024-05-13",
        )
    assert _first(_replay(booking.history)) == (3, "heuristic:exact_repeat")
