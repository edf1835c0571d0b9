from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from judge.config import ENV_PREFIX


@pytest.fixture(autouse=True)
def _hermetic_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The user's shell never changes a test: every ``LOOP_JUDGE_*`` variable is cleared
    (an exported model would otherwise make tests call it). Tests that need one set it
    themselves with ``monkeypatch.setenv``."""
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)


@pytest.fixture
def no_sleep() -> tuple[list[float], object]:
    """An injected sleep that records requested delays and returns at once."""
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    return delays, sleep


@pytest.fixture
def httpx_litellm(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """litellm routed through httpx so respx can intercept it (aiohttp bypasses respx)."""
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from judge.llm._litellm import _import_litellm

    litellm = _import_litellm()
    old = litellm.disable_aiohttp_transport
    litellm.disable_aiohttp_transport = True
    try:
        yield litellm
    finally:
        litellm.disable_aiohttp_transport = old
