"""The sidecar's HTTP API, in process (httpx over ASGI), with the in-memory store."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import LoopTracker, TrackerConfig, Verdict
from judge.errors import ConfigError, JudgeTimeout
from judge.service.app import OPENAPI_FILE, create_app, openapi_schema
from judge.service.settings import ServerSettings, is_loopback
from judge.service.store import MemoryStore
from tests.fakes import answer, fake_judge, looping_history
from tests.service.exposition import sample, samples, types
from tests.serving import alternation_history, failing_repeat_history, prefixes

pytestmark = pytest.mark.anyio
FAST, CONFIRM = "fake/fast", "fake/confirm"
TOKEN = "s3cret-token-0123456789"


def settings(**kwargs: Any) -> ServerSettings:
    """Server settings with one principal's token unless the test says otherwise."""
    return ServerSettings(**({"server_token": TOKEN} | kwargs))


def client_for(app: Any, token: str | None = TOKEN) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://localhost", headers=headers
    )


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings(), MemoryStore(TrackerConfig()))
    async with client_for(app) as c:
        yield c


async def library_verdicts(history: list[dict[str, Any]], n: int) -> list[Verdict]:
    tracker = LoopTracker(TrackerConfig())
    return [await tracker.turn_started(h) for h in prefixes(history, n)]


@pytest.mark.parametrize("make_history", [failing_repeat_history, alternation_history])
async def test_turns_match_the_library(client: httpx.AsyncClient, make_history: Any) -> None:
    history = make_history(10)
    expected = await library_verdicts(history, 10)
    got = []
    for h in prefixes(history, 10):
        r = await client.post("/v1/sessions/agent-1/turns", json={"messages": h})
        assert r.status_code == 200, r.text
        got.append(Verdict.model_validate(r.json()))
    assert got == expected
    assert any(got) and not got[0]


async def test_sessions_are_independent(client: httpx.AsyncClient) -> None:
    history = failing_repeat_history(4)
    for h in prefixes(history, 4):
        v = (await client.post("/v1/sessions/a/turns", json={"messages": h})).json()
    assert v["looping"] and v["turn"] == 4
    r = await client.post("/v1/sessions/b/turns", json={"messages": history})
    assert r.json()["turn"] == 1


async def test_history_error_is_422_naming_index_and_field(client: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": "nope"}]
    r = await client.post("/v1/sessions/s/turns", json={"messages": messages})
    assert r.status_code == 422
    (item,) = r.json()["detail"]
    assert item["index"] == 1 and item["field"] == "tool_calls"
    assert item["loc"] == ["body", "messages", 1, "tool_calls"]
    assert "message 1" in item["msg"]
    # the failed turn was not counted
    r = await client.post("/v1/sessions/s/turns", json={"messages": messages[:1]})
    assert r.json()["turn"] == 1


async def test_request_shape_errors_are_422(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/sessions/s/turns", json={"messages": "not a list"})
    assert r.status_code == 422
    r = await client.post("/v1/sessions/s/turns", json={"messages": [], "extra": 1})
    assert r.status_code == 422
    r = await client.post("/v1/sessions/bad%7Bid%7D/turns", json={"messages": []})
    assert r.status_code == 422


async def test_dot_session_ids_are_refused(client: httpx.AsyncClient) -> None:
    # "." and ".." are path steps to every URL parser that normalizes (fetch, browsers):
    # only an escaped form reaches the server, and it names the rule.
    for escaped in ("%2e", "%2e%2e"):
        r = await client.post(f"/v1/sessions/{escaped}/turns", json={"messages": []})
        assert r.status_code == 422, escaped
        assert "not '.' or '..'" in r.text
    for fine in ("...", ".a", "run.1"):
        r = await client.post(f"/v1/sessions/{fine}/turns", json={"messages": []})
        assert r.status_code == 200, fine
    r = await client.post(f"/v1/sessions/{'x' * 129}/turns", json={"messages": []})
    assert r.status_code == 422


async def test_preflight_call_counts_no_turn(client: httpx.AsyncClient) -> None:
    history = failing_repeat_history(3)
    for h in prefixes(history, 3):
        await client.post("/v1/sessions/s/turns", json={"messages": h})
    r = await client.post(
        "/v1/sessions/s/calls", json={"name": "run_tests", "arguments": {"path": "tests/"}}
    )
    assert r.status_code == 200
    v = Verdict.model_validate(r.json())
    assert v.looping and v.source == "heuristic:exact_repeat" and v.turn == 3
    other = await client.post("/v1/sessions/s/calls", json={"name": "read_file"})
    assert not other.json()["looping"]
    bad = await client.post("/v1/sessions/s/calls", json={"name": ""})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "name"
    # a preflight on an unknown session creates nothing
    await client.post("/v1/sessions/new/calls", json={"name": "x"})
    assert (await client.delete("/v1/sessions/new")).status_code == 404


async def test_delete_forgets_the_session(client: httpx.AsyncClient) -> None:
    history = looping_history(3)
    for h in prefixes(history, 3):
        await client.post("/v1/sessions/s/turns", json={"messages": h})
    assert (await client.delete("/v1/sessions/s")).json() == {"deleted": True}
    r = await client.post("/v1/sessions/s/turns", json={"messages": history})
    assert r.json()["turn"] == 1


async def test_judge_failure_is_on_the_verdict_not_a_5xx() -> None:
    config = TrackerConfig(
        fast_model=FAST, check_after_turns=1, initial_interval=1, early_checks=False
    )
    fake = fake_judge({FAST: [JudgeTimeout("no answer in 30 s", model=FAST)]})
    app = create_app(settings(), MemoryStore(config, judge_client=fake))
    async with client_for(app) as c:
        r = await c.post("/v1/sessions/s/turns", json={"messages": looping_history(1)})
        assert r.status_code == 200
        v = Verdict.model_validate(r.json())
        assert not v.looping and v.errors and v.judge_calls[0].error
        text = (await c.get("/metrics")).text
    assert sample(text, "loop_judge_judge_errors_total") == 1
    calls = sample(text, "loop_judge_judge_calls_total", model=FAST, outcome="error", stage="fast")
    assert calls == 1


async def test_metrics_count_turns_loops_and_judge_spend() -> None:
    config = TrackerConfig(
        fast_model=FAST,
        confirm_model=CONFIRM,
        check_after_turns=2,
        initial_interval=1,
        early_checks=False,
    )
    fake = fake_judge({FAST: [answer(0.95)], CONFIRM: [answer(0.97, "circling")]})
    app = create_app(settings(), MemoryStore(config, judge_client=fake))
    history = looping_history(2)
    async with client_for(app) as c:
        for h in prefixes(history, 2):
            await c.post("/v1/sessions/s/turns", json={"messages": h})
        await c.post("/v1/sessions/other/turns", json={"messages": history[:2]})
        r = await c.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    found = samples(r.text)

    def value(name: str, **labels: str) -> float | None:
        return found.get((name, frozenset(labels.items())))

    assert value("loop_judge_turns_total") == 3
    assert value("loop_judge_judge_checks_total") == 1
    assert value("loop_judge_loops_total", endpoint="turn", kind="cognitive", source="llm") == 1
    assert value("loop_judge_judge_tokens_total", direction="prompt", model=FAST) == 100
    assert value("loop_judge_judge_cost_usd_total", model=CONFIRM) == 0.0001
    assert value("loop_judge_judge_latency_seconds_count", model=FAST, stage="fast") == 1
    assert value("loop_judge_sessions_live") == 2
    declared = types(r.text)
    assert declared["loop_judge_turns"] == "counter"
    assert declared["loop_judge_judge_latency_seconds"] == "histogram"
    assert declared["loop_judge_sessions_live"] == "gauge"
    # One registry per app, without the library's `_created` series.
    assert not [name for name, _labels in found if name.endswith("_created")]


async def test_loops_are_counted_by_kind_and_source(client: httpx.AsyncClient) -> None:
    for h in prefixes(failing_repeat_history(4), 4):
        await client.post("/v1/sessions/s/turns", json={"messages": h})
    text = (await client.get("/metrics")).text
    loops = sample(
        text,
        "loop_judge_loops_total",
        endpoint="turn",
        kind="exact_repeat",
        source="heuristic:exact_repeat",
    )
    assert loops == 2  # turns 3 and 4


async def test_token_is_required_when_set() -> None:
    app = create_app(settings(), MemoryStore())
    body = {"messages": looping_history(1)}
    async with (
        client_for(app, None) as anonymous,
        client_for(app, "wrong") as wrong,
        client_for(app, TOKEN) as right,
    ):
        r = await anonymous.post("/v1/sessions/s/turns", json=body)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert (await wrong.post("/v1/sessions/s/turns", json=body)).status_code == 401
        assert (await anonymous.get("/metrics")).status_code == 401
        assert (await anonymous.delete("/v1/sessions/s")).status_code == 401
        assert (await right.post("/v1/sessions/s/turns", json=body)).status_code == 200
        assert (await right.get("/metrics")).status_code == 200
        # health probes come from load balancers that hold no token
        assert (await anonymous.get("/healthz")).json() == {"status": "ok", "store": "memory"}


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "sidecar.internal"])
def test_non_loopback_bind_needs_a_token(host: str) -> None:
    with pytest.raises(ConfigError, match="LOOP_JUDGE_SERVER_TOKEN"):
        create_app(ServerSettings(host=host, insecure_no_token=True), MemoryStore())
    create_app(ServerSettings(host=host, server_token=TOKEN), MemoryStore())


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost", True),
        ("127.8.0.1", True),
        ("0.0.0.0", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


async def test_body_over_the_limit_is_413() -> None:
    app = create_app(settings(max_body_bytes=4096), MemoryStore())
    big = {"messages": [{"role": "user", "content": "x" * 5000}]}
    async with client_for(app) as c:
        r = await c.post("/v1/sessions/s/turns", json=big)
        assert r.status_code == 413 and "LOOP_JUDGE_MAX_BODY_BYTES" in r.json()["detail"]

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"x" * 1000
            yield b'"}]}'

        r = await c.post(
            "/v1/sessions/s/turns", content=chunks(), headers={"content-type": "application/json"}
        )
        assert r.status_code == 413
        small = {"messages": [{"role": "user", "content": "x" * 100}]}
        assert (await c.post("/v1/sessions/s/turns", json=small)).status_code == 200


def test_committed_openapi_matches_the_app() -> None:
    committed = json.loads(OPENAPI_FILE.read_text("utf-8"))
    assert committed == openapi_schema(), (
        "judge/service/openapi.json is stale: run `loop-judge serve --dump-openapi`"
    )


def test_openapi_uses_the_library_verdict() -> None:
    schema = openapi_schema()
    turn = schema["paths"]["/v1/sessions/{session_id}/turns"]["post"]
    ref = turn["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ref.endswith("/Verdict")
    assert set(schema["components"]["schemas"]["Verdict"]["properties"]) == set(
        Verdict.model_fields
    )


@pytest.mark.slow
def test_cli_dumps_openapi_to_stdout() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "judge.cli", "serve", "--dump-openapi", "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert json.loads(out) == openapi_schema()


@pytest.mark.slow
def test_cli_refuses_public_bind_without_token() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "judge.cli", "serve", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "LOOP_JUDGE_SERVER_TOKEN": ""},
    )
    assert proc.returncode == 2 and "LOOP_JUDGE_SERVER_TOKEN" in proc.stderr


def test_import_judge_stays_light() -> None:
    code = (
        "import sys, judge; heavy = [m for m in ('fastapi', 'uvicorn', 'redis', 'litellm', "
        "'judge.service', 'judge.integrations.litellm_proxy') if m in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    assert out == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "--insecure-no-token"),
        (["--insecure-no-token", "--host", "0.0.0.0"], "loopback binds only"),
    ],
)
def test_cli_refuses_to_serve_without_a_token(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "judge.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2 and message in proc.stderr
