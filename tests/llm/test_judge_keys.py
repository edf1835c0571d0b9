"""A judge model with no API key: said once when the tracker is built, never
retried as an outage, and one line on the verdict."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import respx

import judge.llm._litellm as litellm_client
from judge import LoopTracker, TrackerConfig
from judge.errors import JudgeHTTPError
from judge.llm._litellm import (
    KEY_CHECK_THREAD,
    LiteLLMClient,
    map_exception,
    missing_keys,
    one_line,
)
from tests.fakes import looping_history

GEMINI = "gemini/gemini-2.5-flash"
GEMINI_KEYS = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
# What litellm 1.106 raises for a Gemini model without a key: an APIConnectionError whose
# message carries a folded traceback.
GEMINI_NO_KEY = (
    "litellm.APIConnectionError: Missing Gemini API key. Set the GEMINI_API_KEY or "
    "GOOGLE_API_KEY environment variable.\nTraceback (most recent call last):\n  File "
    '"litellm/main.py", line 687, in acompletion\n    response = await resolve()'
)


@pytest.fixture
def no_gemini_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in GEMINI_KEYS:
        monkeypatch.delenv(name, raising=False)
    # Each test sees its own first warning.
    monkeypatch.setattr(litellm_client, "_keys_checked", set())
    yield


def join_key_checks() -> None:
    for thread in threading.enumerate():
        if thread.name == KEY_CHECK_THREAD:
            thread.join(timeout=120)


def test_the_gemini_missing_key_error_is_a_401_never_a_connection_error() -> None:
    litellm = litellm_client._import_litellm()
    exc = litellm.APIConnectionError(message=GEMINI_NO_KEY, llm_provider="gemini", model=GEMINI)
    err = map_exception(exc, GEMINI)
    assert isinstance(err, JudgeHTTPError) and err.status == 401 and not err.retryable
    text = str(err)
    assert text.startswith(f"no usable API key for {GEMINI}: APIConnectionError: Missing Gemini")
    assert "\n" not in text and "Traceback" not in text and "litellm.APIConnection" not in text


def test_an_authentication_error_is_not_retried() -> None:
    litellm = litellm_client._import_litellm()
    exc = litellm.AuthenticationError(message="bad key", llm_provider="openai", model="gpt-4o")
    err = map_exception(exc, "gpt-4o")
    assert isinstance(err, JudgeHTTPError) and err.status == 401 and not err.retryable


def test_one_line_drops_folded_tracebacks_and_repeated_prefixes() -> None:
    class APIError(Exception):
        pass

    text = one_line(APIError("litellm.APIError: first\n  second\nTraceback (most recent...)"))
    assert text == "APIError: first second Traceback (most recent...)"
    text = one_line(APIError(GEMINI_NO_KEY.replace("APIConnectionError", "APIError")))
    assert text == (
        "APIError: Missing Gemini API key. Set the GEMINI_API_KEY or GOOGLE_API_KEY "
        "environment variable."
    )


@pytest.mark.anyio
@pytest.mark.model_requests
async def test_a_missing_gemini_key_fails_in_one_attempt(
    no_gemini_key: None, httpx_litellm: Any, no_sleep: Any
) -> None:
    """The real litellm path: it raises before any request (respx would refuse one)."""
    _delays, sleep = no_sleep
    client = LiteLLMClient(sleep=sleep)
    with respx.mock(assert_all_mocked=True), pytest.raises(JudgeHTTPError) as info:
        await client.complete(GEMINI, [{"role": "user", "content": "hi"}], schema={})
    assert info.value.status == 401 and info.value.attempts == 1  # type: ignore[attr-defined]
    assert "\n" not in str(info.value)


@pytest.mark.anyio
@pytest.mark.model_requests
async def test_the_verdict_gets_one_line_and_no_retries(
    no_gemini_key: None, httpx_litellm: Any, no_sleep: Any
) -> None:
    _delays, sleep = no_sleep
    config = TrackerConfig(fast_model=GEMINI, check_after_turns=1, initial_interval=1)
    tracker = LoopTracker(config, sleep=sleep)
    with respx.mock(assert_all_mocked=True):
        verdicts = [await tracker.turn_started(looping_history(n)) for n in (1, 2, 3)]
    failed = [c for v in verdicts for c in v.judge_calls if c.error]
    assert failed and all(c.attempts == 1 for c in failed)
    errors = [e for v in verdicts for e in v.errors]
    assert errors and all("\n" not in e and "no usable API key" in e for e in errors)
    join_key_checks()


@pytest.mark.model_requests  # the check runs only where requests may
def test_tracker_construction_warns_once_per_model(
    no_gemini_key: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="judge.llm"):
        LoopTracker(TrackerConfig(fast_model=GEMINI))
        join_key_checks()
        LoopTracker(TrackerConfig(fast_model=GEMINI))
        join_key_checks()
    warnings = [r.getMessage() for r in caplog.records if "has no API key" in r.getMessage()]
    assert len(warnings) == 1
    assert GEMINI in warnings[0] and "GEMINI_API_KEY" in warnings[0]


@pytest.mark.model_requests  # the check runs only where requests may
def test_no_warning_when_the_key_or_an_endpoint_is_set(
    no_gemini_key: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="judge.llm"):
        local = LiteLLMClient.from_config(
            TrackerConfig(fast_model="openai/smollm", api_base="http://127.0.0.1:8080/v1")
        )
        assert local.key_check is None  # a local endpoint decides its own auth
        monkeypatch.setenv("GEMINI_API_KEY", "k")
        hosted = LiteLLMClient.from_config(TrackerConfig(fast_model=GEMINI))
        assert hosted.key_check is not None
        hosted.key_check.join(timeout=120)
    assert not [r for r in caplog.records if "has no API key" in r.getMessage()]
    assert missing_keys(GEMINI) == []
