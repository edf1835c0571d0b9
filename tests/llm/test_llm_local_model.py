"""A local judge model (llama.cpp-style server) as the docs set it up (docs/configuration.md).

Against a real HTTP server on 127.0.0.1: a prompt over the server's context window is a
clear judge error naming both sizes; a timeout names the configured ``timeout_s`` and a
retry after one gets a whole attempt or none; the reply cap is a validated setting; the
docs' local-model setup fits a CPU model's context and speed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import judge.llm._litellm as litellm_client
from judge import LoopTracker, TrackerConfig, Verdict
from judge.errors import ConfigError
from tests.fakes import answer, looping_history
from tests.fault_server import FaultServer, Reply, Request, completion, error

pytestmark = [pytest.mark.anyio, pytest.mark.model_requests]

FAST = "openai/local"
# The docs page that holds the local-model setup.
CONFIGURATION_DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# Measured on a CPU (Qwen2.5-Coder-1.5B Q4, llama-cpp-python, 2 threads) over the eval's
# judge windows: seconds per check and prompt tokens.
CPU_CHECK_P95_S = 372
PROMPT_TOKENS_MAX = 9_847
# llama-cpp-python's answer to a prompt over its context (its OpenAI-style wording) and
# llama.cpp's server's (its own error type, the sizes as fields).
LLAMA_CPP_PYTHON_400 = (
    "This model's maximum context length is 2048 tokens. However, you requested 5250 tokens "
    "(4650 in the messages, 600 in the completion). Please reduce the length of the "
    "messages or completion."
)


def tracker(port: int, delays: list[float] | None = None, **cfg: Any) -> LoopTracker:
    recorded = delays if delays is not None else []

    async def sleep(seconds: float) -> None:
        recorded.append(seconds)

    settings: dict[str, Any] = {
        "fast_model": FAST,
        "api_base": f"http://127.0.0.1:{port}/v1",
        "api_key": "k",
        "check_after_turns": 1,
        "initial_interval": 1,
        **cfg,
    }
    return LoopTracker(TrackerConfig(**settings), sleep=sleep)


async def one_check(t: LoopTracker) -> Verdict:
    return await t.turn_started(looping_history(3))


@pytest.mark.parametrize(
    "reply",
    [
        error(400, LLAMA_CPP_PYTHON_400),
        Reply(
            status=400,
            body={
                "error": {
                    "code": 400,
                    "message": "the request exceeds the available context size, try increasing it",
                    "type": "exceed_context_size_error",
                    "n_prompt_tokens": 4650,
                    "n_ctx": 2048,
                }
            },
        ),
    ],
    ids=["llama-cpp-python", "llama.cpp"],
)
async def test_a_prompt_over_the_context_is_a_clear_error(reply: Reply) -> None:
    with FaultServer([reply]) as server:
        verdict = await one_check(tracker(server.port, max_retries=2))
    [call] = verdict.judge_calls
    error_text = call.error or ""
    assert error_text.startswith("JudgeContextError: "), error_text
    assert "server's context is 2,048 tokens" in error_text
    assert "4,650 as the server counted" in error_text and "chars" in error_text
    assert "--n_ctx" in error_text and "LOOP_JUDGE_MAX_PROMPT_CHARS" in error_text
    # one request: no retry and no response_format fallback can make it fit
    assert len(server.requests) == 1 and call.attempts == 1
    assert not verdict and verdict.confidence is None
    assert verdict.errors == [f"fast judge {FAST}: {error_text}"]


@pytest.mark.slow
async def test_a_timeout_names_the_configured_value_and_no_short_retry_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Scaled down from the defaults (timeout_s 30 s, 10 s of retry budget): the retry would
    # get only the leftover, which a model that needed more than timeout_s cannot use.
    monkeypatch.setattr(litellm_client, "RETRY_TIME_BUDGET_S", 3.0)
    delays: list[float] = []
    with FaultServer([Reply(delay_s=20), completion(answer(0.2))]) as server:
        verdict = await one_check(tracker(server.port, delays, timeout_s=3.0, max_retries=2))
    [call] = verdict.judge_calls
    error_text = call.error or ""
    assert error_text.startswith("JudgeTimeout: "), error_text
    assert "timeout_s=3 s (LOOP_JUDGE_TIMEOUT_S)" in error_text
    assert "not retried" in error_text and "timeout value" not in error_text
    assert len(server.requests) == 1 and call.attempts == 1 and delays == []


@pytest.mark.slow
async def test_a_retry_after_a_timeout_gets_a_whole_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(litellm_client, "RETRY_TIME_BUDGET_S", 3.0)
    # The retry's answer takes most of timeout_s: only a whole attempt receives it.
    script = [Reply(delay_s=20), Reply(**{**vars(completion(answer(0.2))), "delay_s": 1.0})]
    with FaultServer(script) as server:
        verdict = await one_check(tracker(server.port, timeout_s=1.5, max_retries=1))
    [call] = verdict.judge_calls
    assert call.error is None and call.confidence == 0.2 and call.attempts == 2
    assert len(server.requests) == 2


async def test_the_reply_cap_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOP_JUDGE_MAX_REPLY_TOKENS", "4096")
    assert TrackerConfig().max_reply_tokens == 4096
    with FaultServer([completion(answer(0.2))]) as server:
        await one_check(tracker(server.port))
    assert server.requests[0].json()["max_tokens"] == 4096
    monkeypatch.delenv("LOOP_JUDGE_MAX_REPLY_TOKENS")
    assert TrackerConfig().max_reply_tokens == 600


@pytest.mark.parametrize("value", ["10", "100000", "many", "1.5"])
def test_a_bad_reply_cap_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LOOP_JUDGE_MAX_REPLY_TOKENS", value)
    with pytest.raises(ConfigError) as caught:
        TrackerConfig()
    message = str(caught.value)
    assert message.startswith(f"LOOP_JUDGE_MAX_REPLY_TOKENS={value!r}"), message
    if value.isdigit():
        assert "between 64 and 32768" in message


def local_model_section() -> str:
    text = CONFIGURATION_DOC.read_text(encoding="utf-8")
    start = text.index("## A local model")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_the_readme_local_setup_fits_a_cpu_model() -> None:
    """Pasted as written, the setup must fit our largest prompt plus the reply cap, and a
    CPU model's slow checks; else every check fails (2,048-token default context, 30 s)."""
    section = local_model_section()
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None
    commands = block.group(1)
    n_ctx = re.search(r"--n_ctx\s+(\d+)", commands)
    assert n_ctx is not None, "the server command sets no context size"
    assert int(n_ctx.group(1)) >= PROMPT_TOKENS_MAX + 600
    timeout = re.search(r"LOOP_JUDGE_TIMEOUT_S=(\d+)", commands)
    assert timeout is not None, "no timeout for a CPU model"
    assert int(timeout.group(1)) >= CPU_CHECK_P95_S
    settings = {m.group(1): m.group(2) for m in re.finditer(r"(LOOP_JUDGE_\w+)=(\S+)", commands)}
    config = TrackerConfig(
        **{k.removeprefix("LOOP_JUDGE_").lower(): v for k, v in settings.items()}
    )
    assert config.fast_model and config.api_base


def llama_server_script(n_ctx: int) -> Any:
    """llama.cpp's own server: replies carry ``timings``; GET /props says the context."""

    def handle(request: Request) -> Reply:
        if request.method == "GET" and request.path == "/props":
            return Reply(body={"default_generation_settings": {"n_ctx": n_ctx}})
        body = completion(answer(0.2)).body
        assert isinstance(body, dict)
        return Reply(body={**body, "timings": {"prompt_n": 900, "predicted_n": 30}})

    return handle


async def test_the_server_context_is_checked_at_the_first_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with FaultServer(llama_server_script(4096)) as server:
        t = tracker(server.port, min_interval=1, max_interval=1)
        with caplog.at_level("WARNING", logger="judge.llm"):
            for turns in (3, 4, 5):
                verdict = await t.turn_started(looping_history(turns))
                assert verdict.judge_calls[0].confidence == 0.2
    gets = [r for r in server.requests if r.method == "GET"]
    assert [r.path for r in gets] == ["/props"]  # once, at the first call
    [warning] = [r.getMessage() for r in caplog.records if "serves a context" in r.getMessage()]
    assert "context of 4096 tokens" in warning and "~15000" in warning and "-c 16384" in warning


async def test_a_server_with_room_gets_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with (
        FaultServer(llama_server_script(16384)) as server,
        caplog.at_level("WARNING", logger="judge.llm"),
    ):
        await one_check(tracker(server.port))
    assert len(server.requests) == 2
    assert not [r for r in caplog.records if "serves a context" in r.getMessage()]


async def test_servers_that_do_not_say_their_context_are_not_asked() -> None:
    with FaultServer([completion(answer(0.2))]) as server:
        await one_check(tracker(server.port))
    assert [r.method for r in server.requests] == ["POST"]
