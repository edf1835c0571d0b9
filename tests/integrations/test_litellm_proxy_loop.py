"""The litellm-proxy guardrail leaves the proxy's event loop free.

A probe task on the same loop wakes every 10 ms while the guardrail judges a 10 MB
history (seconds of the detectors' CPU): it must never wait more than 100 ms, as another
request of the proxy would not. And the sidecar's CPU budget bounds the turn: past it the
request goes on unjudged, counted, never failed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import TrackerConfig
from judge.integrations.litellm_proxy import LoopJudgeGuardrail
from judge.service.store import MemoryStore

pytestmark = pytest.mark.anyio
HISTORY_BYTES = 10_000_000
PROBE_INTERVAL_S = 0.01
MAX_WAIT_S = 0.1


def big_history(total: int) -> list[dict[str, Any]]:
    """A coding session whose tool results add up to ``total`` characters, all distinct."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Find the bug."},
    ]
    size = i = 0
    while size < total:
        text = f"file {i}\n" + "".join(f"line {i}.{j}: value = {i * j}\n" for j in range(400))
        call = {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/f{i}.py"}}'},
        }
        history += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": text},
        ]
        size += len(text)
        i += 1
    return history


def request(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": messages,
        "metadata": {"loop_judge_session_id": "big"},
    }


def guardrail(**kwargs: Any) -> LoopJudgeGuardrail:
    return LoopJudgeGuardrail(
        guardrail_name="loop-judge",
        event_hook="pre_call",
        default_on=True,
        loop_judge_mode="observe",
        store=MemoryStore(TrackerConfig(semantic="off")),
        **kwargs,
    )


@pytest.mark.slow
async def test_a_10_mb_history_never_holds_the_loop_100_ms() -> None:
    g = guardrail()
    data = request(big_history(HISTORY_BYTES))
    worst = 0.0
    wakes = 0
    done = asyncio.Event()

    async def probe() -> None:
        nonlocal worst, wakes
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(PROBE_INTERVAL_S)
            worst = max(worst, time.perf_counter() - asked - PROBE_INTERVAL_S)
            wakes += 1

    task = asyncio.create_task(probe())
    await asyncio.sleep(PROBE_INTERVAL_S * 3)
    started = time.perf_counter()
    out = await g.async_pre_call_hook(None, None, data, "completion")
    took = time.perf_counter() - started
    done.set()
    await task
    assert worst < MAX_WAIT_S, f"the loop waited {worst * 1000:.0f} ms behind the turn"
    assert out is data
    assert g.metrics.value("loop_judge_turns_total") == 1
    # The turn did run (a second or more of CPU), and the loop kept turning meanwhile.
    assert took > 20 * PROBE_INTERVAL_S and wakes > 10


async def test_a_turn_past_the_cpu_budget_lets_the_request_through() -> None:
    g = guardrail(turn_cpu_budget_s=0.05)
    data = request(big_history(HISTORY_BYTES // 2))
    assert await g.async_pre_call_hook(None, None, data, "completion") is data
    assert g.metrics.value("loop_judge_rejected_requests_total", reason="cpu_budget") == 1
    assert g.metrics.value("loop_judge_turns_total") == 0
