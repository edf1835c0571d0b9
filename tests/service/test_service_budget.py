"""CPU-bound turns run off the event loop, under a CPU budget.

A huge history on one session must not stall ``/healthz`` or other sessions (it once
held the loop for 17.9 s), and a turn past ``turn_cpu_budget_s`` is stopped and answered
413 on that session only.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import anyio
import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

import judge.service.store as store_module
from judge import LoopTracker, TrackerConfig
from judge.detectors.suite import default_detectors
from judge.service.app import create_app
from judge.service.settings import ServerSettings
from judge.service.store import MemoryStore
from judge.service.worker import TurnOverBudget, TurnRunner
from tests.service.exposition import sample
from tests.serving import failing_repeat_history

pytestmark = pytest.mark.anyio
TOKEN = "budget-token-0123456789abcdef"
# The huge history: 1,000 messages, ~6 MB of JSON, ~1.5 s of detector CPU on one core of
# a shared 2-core machine (and well over HEALTH_BOUND_S anywhere).
HUGE_PAIRS = 500
HUGE_CHARS = 4000
# /healthz must answer within this while the huge turn runs. Parsing the 6 MB body stays on
# the loop (~0.1-0.3 s, bounded by the body cap); the detectors do not.
HEALTH_BOUND_S = 0.75
HEALTH_POLL_S = 0.01
# CPU each event costs in the added slow detector: ~1,000 events make a ~3 s turn.
SLOW_EVENT_S = 0.003


def huge_history() -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Summarize the logs."},
    ]
    for i in range(HUGE_PAIRS):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "read_log", "arguments": json.dumps({"part": i})},
        }
        text = f"Step {i}: reading. " + "word " * (HUGE_CHARS // 10)
        history.append({"role": "assistant", "content": text, "tool_calls": [call]})
        log = f"line {i} of output\n" * (HUGE_CHARS // 20)
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": log})
    return history


class SlowDetector:
    """A CPU-bound detector (pure Python, as all of ours are): ~SLOW_EVENT_S per event, so
    the huge turn is slow on any machine however fast the real detectors get."""

    name = "slow"
    STATE = ()

    def observe(self, event: Any) -> None:
        deadline = time.thread_time() + SLOW_EVENT_S
        while time.thread_time() < deadline:
            pass

    def reset(self) -> None:
        return None


def slow_tracker(config: TrackerConfig, client: Any = None) -> LoopTracker:
    detectors = [*default_detectors(config), SlowDetector()]
    return LoopTracker(config, client=client, detectors=detectors)


@pytest.fixture(autouse=True)
def _slow_detectors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "new_tracker", slow_tracker)


def app_with(**kwargs: Any) -> Any:
    settings = ServerSettings(server_token=TOKEN, max_body_bytes=16 * 1024 * 1024, **kwargs)
    return create_app(settings, MemoryStore(TrackerConfig()))


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://localhost",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=120,
    )


async def huge_turn_while_polling(app: Any) -> tuple[httpx.Response, float, list[float], Any]:
    """Send the huge turn; meanwhile poll /healthz and run a small turn on another session.
    Returns the huge response, its seconds, the health latencies, the small response."""
    body = json.dumps({"messages": huge_history()}).encode()
    health: list[float] = []
    small: dict[str, httpx.Response] = {}
    done = anyio.Event()
    async with client_for(app) as c:

        async def poll() -> None:
            while not done.is_set():
                started = time.perf_counter()
                assert (await c.get("/healthz")).status_code == 200
                health.append(time.perf_counter() - started)
                await anyio.sleep(HEALTH_POLL_S)

        async def other_session() -> None:
            await anyio.sleep(0.2)
            small["r"] = await c.post(
                "/v1/sessions/other/turns", json={"messages": failing_repeat_history(1)}
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            tg.start_soon(other_session)
            started = time.perf_counter()
            huge = await c.post(
                "/v1/sessions/huge/turns",
                content=body,
                headers={"content-type": "application/json"},
            )
            seconds = time.perf_counter() - started
            done.set()
    return huge, seconds, health, small.get("r")


@pytest.mark.slow
async def test_a_huge_turn_does_not_stall_healthz_or_other_sessions() -> None:
    huge, seconds, health, other = await huge_turn_while_polling(app_with())
    assert huge.status_code == 200, huge.text
    assert seconds > HEALTH_BOUND_S, "the huge turn was too quick to show anything"
    assert len(health) >= 5
    assert max(health) < HEALTH_BOUND_S, f"/healthz waited {max(health):.2f} s"
    assert other is not None and other.status_code == 200 and other.json()["turn"] == 1


@pytest.mark.slow
async def test_a_turn_over_its_cpu_budget_is_413_on_that_session_only() -> None:
    app = app_with(turn_cpu_budget_s=0.2)
    huge, _seconds, health, other = await huge_turn_while_polling(app)
    assert huge.status_code == 413
    assert huge.json()["limit"] == "turn_cpu_budget_s" and huge.json()["budget_s"] == 0.2
    assert "LOOP_JUDGE_TURN_CPU_BUDGET_S" in huge.json()["detail"]
    assert max(health) < HEALTH_BOUND_S
    assert other is not None and other.status_code == 200
    async with client_for(app) as c:
        # the stopped turn's tracker was dropped: the session starts over, and works
        r = await c.post("/v1/sessions/huge/turns", json={"messages": failing_repeat_history(1)})
        assert r.status_code == 200 and r.json()["turn"] == 1
        text = (await c.get("/metrics")).text
    assert sample(text, "loop_judge_rejected_requests_total", reason="cpu_budget") == 1


async def spin(seconds: float) -> int:
    """Pure-Python CPU work, as the detectors do."""
    deadline = time.monotonic() + seconds
    count = 0
    while time.monotonic() < deadline:
        count += 1
    return count


async def test_the_runner_stops_python_work_at_its_cpu_budget() -> None:
    runner = TurnRunner(threads=2, cpu_budget_s=0.2)
    started = time.monotonic()
    with pytest.raises(TurnOverBudget) as caught:
        await runner.run(lambda: spin(30.0))
    assert time.monotonic() - started < 10.0  # stopped, not run to its 30 s end
    assert caught.value.budget_s == 0.2 and caught.value.used_s >= 0.2
    # The threads stay usable and no interruption is left pending in them.
    for _ in range(20):
        assert await runner.run(lambda: spin(0.0)) >= 0
    assert threading.active_count() < 50


@pytest.mark.slow
async def test_waiting_is_not_cpu_time() -> None:
    runner = TurnRunner(threads=2, cpu_budget_s=0.2)

    async def wait_for_the_judge() -> str:
        await anyio.sleep(0.6)  # three budgets of waiting, as for a model's reply
        return "answered"

    assert await runner.run(wait_for_the_judge) == "answered"


@pytest.mark.slow
async def test_the_runner_uses_at_most_its_threads_and_finishes_what_it_started() -> None:
    runner = TurnRunner(threads=3, cpu_budget_s=None)
    inside = 0
    most = 0
    finished: list[int] = []

    async def turn(n: int) -> int:
        nonlocal inside, most
        inside += 1  # the worker threads share this counter under the GIL
        most = max(most, inside)
        await anyio.sleep(0.05)  # waits as a judge call would, holding its thread
        inside -= 1
        finished.append(n)
        return n

    async with anyio.create_task_group() as tg:
        for n in range(12):
            tg.start_soon(runner.run, lambda n=n: turn(n))
    assert most == 3 and sorted(finished) == list(range(12))
    # A caller cancelled mid-turn still waits for its thread: the turn ends before the
    # caller goes on (nothing holds a session's tracker behind its back).
    started = threading.Event()  # set in the worker thread

    async def long_turn() -> int:
        started.set()
        await anyio.sleep(0.3)
        finished.append(99)
        return 99

    with anyio.move_on_after(0.1):
        await runner.run(long_turn)
    assert started.is_set() and finished[-1] == 99


async def test_a_plain_task_cancel_still_waits_for_the_turn() -> None:
    """litellm's proxy and ``asyncio.wait_for`` cancel with ``Task.cancel()``, which anyio's
    shield does not stop; the caller still waits for its thread, then is cancelled."""
    runner = TurnRunner(threads=1, cpu_budget_s=None)
    started = threading.Event()
    finished: list[int] = []

    async def long_turn() -> int:
        started.set()
        await anyio.sleep(0.3)
        finished.append(1)
        return 1

    task = asyncio.ensure_future(runner.run(long_turn))
    while not started.is_set():
        await anyio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == [1]


def test_a_worker_thread_reuses_its_loop_and_closes_it_when_the_thread_ends() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    threads: list[threading.Thread] = []

    async def turn() -> None:
        loops.append(asyncio.get_running_loop())
        threads.append(threading.current_thread())

    async def serve() -> None:
        runner = TurnRunner(threads=1, cpu_budget_s=1.0)
        for _ in range(3):
            await runner.run(turn)
        assert len({id(loop) for loop in loops}) == 1 and not loops[0].is_closed()

    asyncio.run(serve())  # anyio ends its worker threads with the loop that made them
    assert len(set(threads)) == 1 and threads[0] is not threading.main_thread()
    threads[0].join(10.0)
    assert not threads[0].is_alive()
    assert loops[0].is_closed()
