"""`SyncLoopTracker`: the same verdicts as `LoopTracker`, from code that cannot await."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import anyio
import pytest

from judge import Action, HistoryError, LoopTracker, SyncLoopTracker, TrackerConfig, Verdict
from judge.sync import PORTAL_THREAD_NAME
from judge.testing import SCRIPTED_FAST_MODEL, ScriptedJudge
from tests.fakes import looping_history

# Heuristics only, no semantic extra: the same verdicts on every machine.
CONFIG = TrackerConfig(semantic="off")


def repeating(n: int) -> list[dict[str, Any]]:
    """A history whose agent calls the same tool with the same result ``n`` times."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": "Where is order 7?"},
    ]
    for i in range(n):
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "create_ticket", "arguments": '{"order": 7}'},
        }
        history.append({"role": "assistant", "content": None, "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": "ticket 12 open"})
    return history


def portal_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == PORTAL_THREAD_NAME]


def run_script(tracker: SyncLoopTracker, n: int) -> list[Verdict]:
    """A synchronous agent's loop: one turn per assistant step."""
    history = repeating(n)
    return [tracker.turn_started(history[: 2 + 2 * i]) for i in range(1, n + 1)]


def test_a_script_gets_the_async_trackers_verdicts() -> None:
    with SyncLoopTracker(CONFIG) as tracker:
        verdicts = run_script(tracker, 6)
    reference = LoopTracker(CONFIG)
    history = repeating(6)

    async def replay() -> list[Verdict]:
        return [await reference.turn_started(history[: 2 + 2 * i]) for i in range(1, 7)]

    expected = anyio.run(replay)
    assert [v.model_dump() for v in verdicts] == [v.model_dump() for v in expected]
    flagged = [v for v in verdicts if v]
    assert flagged and flagged[0].action is Action.WARN and flagged[0].recovery_message
    assert tracker.detections == reference.detections and tracker.turn == 6


def test_preflight_and_state_need_no_event_loop() -> None:
    tracker = SyncLoopTracker(CONFIG)
    verdict = tracker.check_call("create_ticket", {"order": 7})
    assert not verdict and tracker.state.version >= 1
    # Nothing asynchronous ran, so no thread was started for it.
    assert tracker._portal._thread_id is None
    tracker.close()


def test_usable_from_a_sync_callback_inside_a_running_loop() -> None:
    """Async code calling a sync hook: asyncio.run would fail here, the portal does not."""
    tracker = SyncLoopTracker(CONFIG)
    history = repeating(4)
    seen: list[Verdict] = []

    def sync_hook(messages: list[dict[str, Any]]) -> None:
        seen.append(tracker.turn_started(messages))

    async def agent() -> None:
        coroutine = LoopTracker(CONFIG).turn_started(history)
        with pytest.raises(RuntimeError, match="running event loop"):
            asyncio.run(coroutine)
        coroutine.close()
        for i in range(1, 5):
            sync_hook(history[: 2 + 2 * i])
            await asyncio.sleep(0)

    asyncio.run(agent())
    tracker.close()
    assert len(seen) == 4 and seen[-1].looping and seen[-1].kind is not None


def test_on_loop_callback_and_override_from_the_caller() -> None:
    calls: list[str] = []

    async def on_loop(verdict: Verdict) -> None:
        calls.append(threading.current_thread().name)

    with SyncLoopTracker(CONFIG, on_loop=on_loop) as tracker:
        verdicts = run_script(tracker, 4)
        first = next(v for v in verdicts if v)
        record = tracker.override(first, "the ticket system is slow, keep going")
        later = tracker.turn_started(repeating(5))
    # The async callback ran on the tracker's own loop, not in the caller's thread.
    assert calls and calls[0] == PORTAL_THREAD_NAME
    assert record.pattern == first.pattern and tracker.overrides == [record]
    assert not later


def test_a_scripted_judge_is_asked_through_the_portal() -> None:
    judge = ScriptedJudge(lambda request: 0.95 if request.newest_index >= 8 else 0.1)
    config = TrackerConfig(
        semantic="off",
        fast_model=SCRIPTED_FAST_MODEL,
        check_after_turns=2,
        initial_interval=1,
        min_interval=1,
        max_interval=2,
    )
    history = looping_history(8)
    with SyncLoopTracker(config, client=judge) as tracker:
        verdicts = [tracker.turn_started(history[: 2 + 2 * i]) for i in range(1, 9)]
    assert judge.calls, "the judge was never asked"
    assert not any(verdicts[:3])
    flagged = [v for v in verdicts if v]
    assert flagged and flagged[0].source == "llm" and flagged[0].confidence == 0.95
    assert flagged[0].judge_calls and tracker.judge_calls_used == len(judge.calls)


def test_state_round_trips_between_sync_and_async() -> None:
    history = repeating(6)
    with SyncLoopTracker(CONFIG) as first:
        for i in range(1, 4):
            first.turn_started(history[: 2 + 2 * i])
        saved = first.state.model_dump_json()

    # Sync -> async -> sync, each continuing where the last stopped.
    middle = LoopTracker.from_state(CONFIG, saved)
    fourth = anyio.run(middle.turn_started, history[:10])
    with SyncLoopTracker.from_state(CONFIG, middle.state) as last:
        fifth = last.turn_started(history[:12])
        assert last.turn == 5

    with SyncLoopTracker(CONFIG) as straight:
        expected = [straight.turn_started(history[: 2 + 2 * i]) for i in range(1, 6)]
    assert fourth.model_dump() == expected[3].model_dump()
    assert fifth.model_dump() == expected[4].model_dump()


def test_wraps_an_existing_tracker_and_refuses_mixed_arguments() -> None:
    inner = LoopTracker(CONFIG)
    with SyncLoopTracker(tracker=inner) as tracker:
        tracker.turn_started(repeating(1))
    assert inner.turn == 1
    with pytest.raises(TypeError):
        SyncLoopTracker(CONFIG, tracker=inner)


def test_a_bad_history_raises_and_the_tracker_stays_usable() -> None:
    with SyncLoopTracker(CONFIG) as tracker:
        with pytest.raises(HistoryError):
            tracker.turn_started([{"role": "assistant", "tool_calls": "not a list"}])
        assert not tracker.turn_started(repeating(1))


def test_close_stops_the_thread_and_refuses_new_turns() -> None:
    before = len(portal_threads())
    tracker = SyncLoopTracker(CONFIG)
    tracker.turn_started(repeating(1))
    assert len(portal_threads()) == before + 1
    tracker.close()
    tracker.close()  # idempotent
    assert len(portal_threads()) == before and tracker.closed
    with pytest.raises(RuntimeError, match="closed"):
        tracker.turn_started(repeating(2))


def test_a_forgotten_tracker_stops_its_thread_when_collected() -> None:
    before = len(portal_threads())
    tracker = SyncLoopTracker(CONFIG)
    tracker.turn_started(repeating(1))
    assert len(portal_threads()) == before + 1
    del tracker
    gc.collect()
    assert len(portal_threads()) == before
