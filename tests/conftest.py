from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

import judge.llm._litellm as litellm_client
from judge.config import ENV_PREFIX

with contextlib.suppress(ImportError):  # a partial install without the semantic packages
    # Imported here, before any tracker starts the semantic detector's background load: a
    # tracker built in one test imports numpy in that thread, and `pytest.approx` in a later
    # test reads `sys.modules["numpy"]` without importing it, so it could find the module
    # half-initialized ("partially initialized module 'numpy'"; docs/detectors.md).
    import numpy  # noqa: F401


@pytest.fixture
def anyio_backend() -> str:
    """Every ``@pytest.mark.anyio`` test runs on asyncio (redis-py's asyncio client, litellm)."""
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _refuse_model_requests() -> Iterator[None]:
    """No test reaches a model unless it opts in: `ALLOW_MODEL_REQUESTS` is off for the whole
    session, module- and session-scoped fixtures included. See `_model_requests`."""
    old = litellm_client.ALLOW_MODEL_REQUESTS
    litellm_client.ALLOW_MODEL_REQUESTS = False
    try:
        yield
    finally:
        litellm_client.ALLOW_MODEL_REQUESTS = old


@pytest.fixture(autouse=True)
def _model_requests(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests marked ``@pytest.mark.model_requests`` may send real requests through litellm,
    to a local fake endpoint only (respx, tests/fault_server.py, a local llama.cpp server);
    every other test gets `ModelRequestsDisabled` from `LiteLLMClient.complete`."""
    allowed = request.node.get_closest_marker("model_requests") is not None
    monkeypatch.setattr(litellm_client, "ALLOW_MODEL_REQUESTS", allowed)


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
