"""The suite's own isolation: no test reaches a model unless it opts in.

`judge.llm._litellm.ALLOW_MODEL_REQUESTS` is off for every test (tests/conftest.py) and on
only for tests marked ``@pytest.mark.model_requests``.
"""

from __future__ import annotations

import pytest

import judge.llm._litellm as llm
from judge import LoopTracker, TrackerConfig
from tests.fakes import looping_history

pytestmark = pytest.mark.anyio

PROMPT = [{"role": "user", "content": "hi"}]


def test_model_requests_are_off_by_default() -> None:
    assert llm.ALLOW_MODEL_REQUESTS is False


@pytest.mark.model_requests
def test_the_marker_turns_model_requests_on() -> None:
    assert llm.ALLOW_MODEL_REQUESTS is True


async def test_client_refuses_before_importing_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_import() -> object:
        raise AssertionError("litellm was imported for a refused request")

    monkeypatch.setattr(llm, "_litellm", None)
    monkeypatch.setattr(llm, "_import_litellm", no_import)
    client = llm.LiteLLMClient(api_base="http://127.0.0.1:9/v1")
    with pytest.raises(llm.ModelRequestsDisabled, match="ALLOW_MODEL_REQUESTS") as exc:
        await client.complete("openai/x", PROMPT, schema={})
    assert "openai/x" in str(exc.value) and "model_requests" in str(exc.value)


async def test_tracker_does_not_fail_open_on_a_refused_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The refusal is no `JudgeError`: a tracker lets it through instead of turning it into
    a failed check, so a test that reaches a real model by mistake fails loudly."""

    def no_import() -> object:
        raise AssertionError("litellm was imported for a refused request")

    monkeypatch.setattr(llm, "_litellm", None)
    monkeypatch.setattr(llm, "_import_litellm", no_import)
    tracker = LoopTracker(
        TrackerConfig(fast_model="openai/gpt-4o-mini", check_after_turns=1, initial_interval=1)
    )
    with pytest.raises(llm.ModelRequestsDisabled):
        await tracker.turn_started(looping_history(1))
