"""`SyncLoopTracker`: the same verdicts as `LoopTracker`, from code that cannot await."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import anyio
import pytest

from judge import Action, HistoryError, LoopTracker, SyncLoopTracker, TrackerConfig, Verdict
from judge.sync import WORKER_THREAD_NAME
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


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WORKER_THREAD_NAME)]


def in_running_loop(tracker: SyncLoopTracker, history: list[dict[str, Any]]) -> Verdict:
    """A sync call made from async code: the caller's thread runs an event loop."""

    async def agent() -> Verdict:
        return tracker.turn_started(history)

    return asyncio.run(agent())


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
    # Nothing asynchronous ran, so not even the event loop was made.
    assert tracker._runner.loop is None
    tracker.close()


def test_a_script_needs_no_thread() -> None:
    before = len(worker_threads())
    with SyncLoopTracker(CONFIG) as tracker:
        run_script(tracker, 3)
        assert len(worker_threads()) == before


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
    loops: list[int] = []

    async def on_loop(verdict: Verdict) -> None:
        loops.append(id(asyncio.get_running_loop()))

    with SyncLoopTracker(CONFIG, on_loop=on_loop) as tracker:
        verdicts = run_script(tracker, 4)
        first = next(v for v in verdicts if v)
        record = tracker.override(first, "the ticket system is slow, keep going")
        later = tracker.turn_started(repeating(5))
    assert loops, "the async on_loop callback never ran"
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
    before = len(worker_threads())
    tracker = SyncLoopTracker(CONFIG)
    in_running_loop(tracker, repeating(1))
    assert len(worker_threads()) == before + 1
    loop = tracker._runner.loop
    tracker.close()
    tracker.close()  # idempotent
    assert len(worker_threads()) == before and tracker.closed
    assert loop is not None and loop.is_closed()
    with pytest.raises(RuntimeError, match="closed"):
        tracker.turn_started(repeating(2))


@pytest.mark.slow
def test_a_forgotten_tracker_stops_its_thread_when_collected() -> None:
    before = len(worker_threads())
    tracker = SyncLoopTracker(CONFIG)
    in_running_loop(tracker, repeating(1))
    loop = tracker._runner.loop
    assert len(worker_threads()) == before + 1
    del tracker
    gc.collect()
    assert len(worker_threads()) == before
    assert loop is not None and loop.is_closed()


def judged_config() -> TrackerConfig:
    """A judge check on every turn."""
    return TrackerConfig(
        semantic="off",
        fast_model=SCRIPTED_FAST_MODEL,
        check_after_turns=1,
        initial_interval=1,
        min_interval=1,
        max_interval=1,
    )


def test_every_turn_runs_on_one_loop_from_scripts_and_async_code() -> None:
    """The judge client's connections belong to one loop: scripts and async callers share it."""
    loops: list[int] = []

    def script(request: Any) -> float:
        loops.append(id(asyncio.get_running_loop()))
        return 0.1

    history = looping_history(4)
    with SyncLoopTracker(judged_config(), client=ScriptedJudge(script)) as tracker:
        tracker.turn_started(history[:4])
        in_running_loop(tracker, history[:6])
        tracker.turn_started(history[:8])
        in_running_loop(tracker, history[:10])
    assert len(loops) == 4 and len(set(loops)) == 1


def test_an_interrupted_turn_leaves_the_tracker_usable() -> None:
    """Ctrl-C during a judge request: the turn ends at once, the next one runs."""
    judge = ScriptedJudge([0.1], default=0.1)
    interrupted = False

    class InterruptOnce:
        async def complete(self, model: str, messages: Any, *, schema: Any) -> Any:
            nonlocal interrupted
            if not interrupted:
                interrupted = True
                raise KeyboardInterrupt  # as a signal arriving mid-request would
            return await judge.complete(model, messages, schema=schema)

    history = looping_history(3)
    with SyncLoopTracker(judged_config(), client=InterruptOnce()) as tracker:
        with pytest.raises(KeyboardInterrupt):
            tracker.turn_started(history[:4])
        verdict = tracker.turn_started(history[:6])
    assert not verdict and verdict.judge_calls and judge.calls
