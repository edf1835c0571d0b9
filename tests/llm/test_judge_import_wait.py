"""A judge check is never lost because litellm is still importing.

litellm (seconds to import, far more on a loaded machine) is imported in the background
when a tracker with a judge model is built; a check that comes due first waits for it at
most ``timeout_s``. One that could not run for that reason stays due and runs at the next
turn, and the wait is reported apart from the judge's latency. Here 100 trackers reach
their first check together while the import is held back (a thousand did in production,
where a loaded machine made the import outlast the wait), then take their next turn once
it is done; every check must reach the judge server on 127.0.0.1.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import pytest

import judge.llm._litellm as litellm_client
from judge import LoopTracker, TrackerConfig, Verdict
from tests.fakes import answer, looping_history
from tests.fault_server import FaultServer, completion

pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]

TRACKERS = 100
# timeout_s: the import wait's bound, and each request's (100 at once on a loaded machine).
WAIT_S = 4.0
FIRST_CHECK_TURN = 3
# Seconds for the released import to be seen by every waiter.
RELEASE_S = 10.0


class HeldImport:
    """Stands in for litellm's import: blocks until released, counts who asked."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> Any:
        with self._lock:
            self.calls += 1
        if not self.release.wait(RELEASE_S * 3):
            raise RuntimeError("the held import was never released")
        litellm_client._litellm = self.real
        return self.real


@pytest.fixture
def held_import(monkeypatch: pytest.MonkeyPatch) -> Any:
    held = HeldImport(litellm_client._import_litellm())
    monkeypatch.setattr(litellm_client, "_litellm", None)
    monkeypatch.setattr(litellm_client, "_import_litellm", held)
    monkeypatch.setattr(litellm_client, "_import_thread", None, raising=False)
    yield held
    held.release.set()


async def all_turn(trackers: list[LoopTracker], turns: int) -> list[Verdict]:
    verdicts: list[Verdict | None] = [None] * len(trackers)

    async def one(i: int) -> None:
        verdicts[i] = await trackers[i].turn_started(looping_history(turns))

    async with anyio.create_task_group() as group:
        for i in range(len(trackers)):
            group.start_soon(one, i)
    return [v for v in verdicts if v is not None]


@pytest.mark.slow  # a hundred trackers, each waiting its bound once: ~10 s
async def test_checks_not_run_while_litellm_imports_run_at_the_next_turn(
    held_import: HeldImport,
) -> None:
    with FaultServer([completion(answer(0.2))]) as server:
        config = TrackerConfig(
            fast_model="openai/x",
            api_base=server.api_base,
            api_key="k",
            check_after_turns=FIRST_CHECK_TURN,
            initial_interval=1,
            timeout_s=WAIT_S,
            max_retries=0,
        )
        trackers = [LoopTracker(config) for _ in range(TRACKERS)]
        for turn in range(1, FIRST_CHECK_TURN):
            assert not any(v.errors for v in await all_turn(trackers, turn))

        started = time.perf_counter()
        waited = await all_turn(trackers, FIRST_CHECK_TURN)
        elapsed = time.perf_counter() - started
        # Each waited its bound, together (not one after another), and asked no model.
        assert elapsed < WAIT_S + 5.0
        assert server.requests == []
        for verdict in waited:
            assert verdict.judge_calls == [] and not verdict
            [line] = verdict.errors
            assert "not ready" in line and "litellm is still importing" in line

        held_import.release.set()
        deadline = time.monotonic() + RELEASE_S
        while litellm_client._litellm is None and time.monotonic() < deadline:
            await anyio.sleep(0.01)

        ran = await all_turn(trackers, FIRST_CHECK_TURN + 1)
    # Every check that could not run is made at the next turn: none is lost.
    assert len(server.requests) == TRACKERS
    for verdict in ran:
        [call] = verdict.judge_calls
        assert call.error is None and call.confidence == 0.2 and verdict.errors == []
    # A hundred trackers built and waiting while litellm imports: one import, one thread.
    assert held_import.calls == 1


async def test_a_check_not_run_is_not_a_judge_failure(held_import: HeldImport) -> None:
    """Waiting for the import says nothing about the endpoint: the breaker stays closed
    however many turns the import takes."""
    with FaultServer([completion(answer(0.2))]) as server:
        tracker = LoopTracker(
            TrackerConfig(
                fast_model="openai/x",
                api_base=server.api_base,
                api_key="k",
                check_after_turns=1,
                initial_interval=1,
                timeout_s=0.05,
                breaker_failures=1,
            )
        )
        for turn in range(1, 4):
            verdict = await tracker.turn_started(looping_history(turn))
            assert "not ready" in verdict.errors[0]
        held_import.release.set()
        verdict = await tracker.turn_started(looping_history(4))
    assert verdict.judge_calls[0].confidence == 0.2 and len(server.requests) == 1
