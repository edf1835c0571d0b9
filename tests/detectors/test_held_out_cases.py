"""Held-out heuristic cases: the same rule whatever a tool is named, parallel repeats, a
stream that chants a group of short sentences, and what a tool limit of 0 means."""

from __future__ import annotations

import json
from typing import Any

import pytest

from judge import LoopTracker, TrackerConfig
from judge.detectors import text_repetition
from judge.verdict import LoopKind

pytestmark = pytest.mark.anyio

CONFIG = TrackerConfig(semantic="off")


def _call(n: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(args)}
    return {"id": f"c{n}", "type": "function", "function": function}


async def _first_flag(
    name: str, args: dict[str, Any], result: str, *, times: int = 12, config: TrackerConfig = CONFIG
) -> int | None:
    """The call (1-based) at whose turn the same call with the same result is flagged."""
    tracker = LoopTracker(config)
    history: list[dict[str, Any]] = [{"role": "user", "content": "what is the weather?"}]
    for n in range(1, times + 1):
        history.append({"role": "assistant", "content": "", "tool_calls": [_call(n, name, args)]})
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})
        if await tracker.turn_started(history):
            return n
    return None


WEATHER = json.dumps({"city": "Paris", "temp_c": 12, "sky": "cloudy"})


@pytest.mark.parametrize(
    ("name", "args", "result"),
    [
        ("ls", {"path": "."}, "app.py\nREADME.md"),
        ("list_files", {"path": "src"}, "app.py\nREADME.md"),
        ("get_weather", {"city": "Paris"}, WEATHER),
        ("lookup_order", {"order_id": "A-7"}, json.dumps({"status": "shipped"})),
        ("search_docs", {"query": "refund policy"}, "Refunds within 30 days."),
        ("visit_webpage", {"url": "https://example.com/a"}, "<h1>A</h1>"),
    ],
)
async def test_identical_reads_are_flagged_at_the_same_point_whatever_the_name(
    name: str, args: dict[str, Any], result: str
) -> None:
    # Whatever a read-only tool is called, two identical answers in a row are allowed and
    # the 3rd is a loop: it asked for the same thing and learnt nothing new twice.
    assert await _first_flag(name, args, result) == 3


async def test_a_tool_that_is_no_read_by_name_keeps_the_other_class_limit() -> None:
    # "forecast" may be anything (a model run, a simulation): identical calls are counted
    # by the exact-repeat rule, three allowed in a row.
    assert await _first_flag("forecast", {"city": "Paris"}, WEATHER) == 4


async def test_a_tool_limit_of_its_own_bounds_its_rereads_too() -> None:
    config = TrackerConfig(semantic="off", tool_limits={"get_weather": 4})
    assert await _first_flag("get_weather", {"city": "Paris"}, WEATHER, config=config) == 5


async def test_a_status_poll_keeps_its_longer_limit() -> None:
    """Waiting on a build is asking again for the same answer until it changes: the
    explore class's limit (10 in a row), not the read rule."""
    flag = await _first_flag("get_build_status", {"build_id": "b-41"}, "running", times=12)
    assert flag == CONFIG.explore_repeat_limit + 1


async def test_a_tool_limit_of_zero_never_flags_that_tools_successful_repeats() -> None:
    config = TrackerConfig(semantic="off", tool_limits={"get_weather": 0, "ls": 0})
    assert await _first_flag("get_weather", {"city": "Paris"}, WEATHER, config=config) is None
    assert await _first_flag("ls", {"path": "."}, "app.py", config=config) is None
    # ... while its failures still are a loop.
    failing = await _first_flag("get_weather", {"city": "Paris"}, "Error: timeout", config=config)
    assert failing == CONFIG.failure_repeat_limit + 1


def test_a_negative_tool_limit_is_refused_naming_the_tool() -> None:
    with pytest.raises(ValueError, match=r"tool_limits\['get_weather'\].*0 = unlimited"):
        TrackerConfig(tool_limits={"get_weather": -1})


async def test_identical_parallel_calls_in_one_message_are_flagged() -> None:
    tracker = LoopTracker(CONFIG)
    calls = [_call(n, "get_weather", {"city": "Paris"}) for n in range(5)]
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "what is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": f"c{n}", "content": WEATHER} for n in range(5)),
    ]
    verdict = await tracker.turn_started(history)
    assert verdict.looping and verdict.kind is LoopKind.EXACT_REPEAT
    assert "5x in a row" in (verdict.summary or "")


@pytest.mark.parametrize("first", ["Thinking... ", "Done. "])
async def test_a_stream_chanting_a_group_of_short_sentences_is_flagged(first: str) -> None:
    tracker = LoopTracker(CONFIG)
    await tracker.turn_started([{"role": "user", "content": "summarize the log"}])
    chunks = [first] + ["Thinking... Done. "] * 500
    flagged = next((n for n, c in enumerate(chunks) if tracker.content_chunk(c)), None)
    assert flagged is not None and flagged <= text_repetition.CYCLE_REPEATS + 6
    # The same pattern whichever sentence the stream started with.
    tracker2 = LoopTracker(CONFIG)
    await tracker2.turn_started([{"role": "user", "content": "summarize the log"}])
    verdict = next(v for c in ["Thinking... Done. "] * 50 if (v := tracker2.content_chunk(c)))
    again = LoopTracker(CONFIG)
    await again.turn_started([{"role": "user", "content": "summarize the log"}])
    other = next(v for c in ["Done. Thinking... "] * 50 if (v := again.content_chunk(c)))
    assert verdict.pattern == other.pattern
    assert (verdict.summary or "").endswith(f"x{text_repetition.CYCLE_REPEATS}")


async def test_short_sentences_that_vary_are_not_a_chant() -> None:
    tracker = LoopTracker(CONFIG)
    await tracker.turn_started([{"role": "user", "content": "run the checklist"}])
    text = " ".join(f"Step {n} done. Next one." for n in range(1, 40))
    assert all(not tracker.content_chunk(text[i : i + 40]) for i in range(0, len(text), 40))
