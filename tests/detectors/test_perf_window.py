"""Histories that lose their head or are rewritten are read in time linear in what is new.

An agent with a sliding window (or a summarised head) sends, each turn, the newest part of
its history; the tracker must find the messages it read before and read only what follows
them, keeping its detectors' memory. A real rewrite is re-read, from a bounded tail.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio

from judge import LoopTracker, TrackerConfig
from judge.history import REREAD_MESSAGES, HistoryCursor

SYSTEM = {"role": "system", "content": "You are an agent."}


def _pair(turn: int, failing: bool = False) -> list[dict[str, Any]]:
    call_id = f"c{turn}"
    name, arguments = ("deploy", '{"env": "prod"}') if failing else ("read", f'{{"n": {turn}}}')
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    result = "Error: deploy failed" if failing else f"body of {turn}"
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def test_a_sliding_window_is_read_once_with_indices_that_keep_counting() -> None:
    cursor = HistoryCursor()
    full: list[dict[str, Any]] = []
    for turn in range(30):
        full.extend(_pair(turn))
        new, rewound = cursor.advance([SYSTEM, *full[-6:]])
        assert not rewound
        if turn >= 3:  # the window is full: only this turn's two messages are new
            assert [m.index for m in new] == [2 * turn + 1, 2 * turn + 2]


def test_copies_of_the_window_are_recognised_by_content() -> None:
    """A server gets equal copies each turn, never the same objects."""
    cursor = HistoryCursor()
    full: list[dict[str, Any]] = []
    for turn in range(12):
        full.extend(_pair(turn))
        new, rewound = cursor.advance(copy.deepcopy([SYSTEM, *full[-4:]]))
        assert not rewound and (turn < 2 or len(new) == 2)


def test_a_summarised_head_keeps_the_tail_read_before() -> None:
    cursor = HistoryCursor()
    history = [SYSTEM, *_pair(0), *_pair(1), *_pair(2)]
    cursor.advance(history)
    summary = {"role": "user", "content": "Summary of the first steps: read f0 and f1."}
    compacted = [SYSTEM, summary, *history[-2:], *_pair(3)]
    new, rewound = cursor.advance(compacted)
    assert not rewound and [m.tool_call_id or m.role for m in new] == ["assistant", "c3"]


def test_a_restored_cursor_finds_its_place_by_content() -> None:
    first = HistoryCursor()
    history = [SYSTEM, *_pair(0), *_pair(1)]
    first.advance(history)
    restored = HistoryCursor()
    restored.restore(*first.snapshot())
    new, rewound = restored.advance([SYSTEM, *history[3:], *_pair(2)])
    assert not rewound and [m.index for m in new] == [5, 6]


def test_one_message_in_common_is_a_rewrite_not_a_slide() -> None:
    cursor = HistoryCursor()
    history = [SYSTEM, *_pair(0)]
    cursor.advance(history)
    new, rewound = cursor.advance([history[-1], *_pair(1)])
    assert rewound and len(new) == 3


def test_a_rewrite_re_reads_a_bounded_tail() -> None:
    cursor = HistoryCursor()
    history = [SYSTEM]
    for turn in range(REREAD_MESSAGES):
        history.extend(_pair(turn))
    cursor.advance(history)
    rewritten = [*history[:-1], {"role": "tool", "tool_call_id": "c0", "content": "new"}]
    new, rewound = cursor.advance(rewritten)
    assert rewound and len(new) == REREAD_MESSAGES
    assert new[-1].index == len(rewritten) - 1  # numbered by position again


async def _flags(window: int | None) -> list[int]:
    tracker = LoopTracker(TrackerConfig(semantic="off"))
    full: list[dict[str, Any]] = [{"role": "user", "content": "Deploy the service, please."}]
    flagged = []
    for turn in range(8):
        full.extend(_pair(turn, failing=True))  # the same call, the same error
        history = full if window is None else [SYSTEM, *full[-window:]]
        if await tracker.turn_started(history):
            flagged.append(turn)
    return flagged


def test_detectors_keep_their_memory_across_a_sliding_window() -> None:
    """A window of two calls never holds the whole loop; the tracker still sees it, on the
    same turn as with the full history."""
    assert anyio.run(_flags, 4) == anyio.run(_flags, None) != []
