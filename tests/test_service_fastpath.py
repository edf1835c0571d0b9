"""The turn fast path: well-formed turns skip FastAPI, everything else goes through it.

Both paths must answer alike: the same verdicts, the same error shapes and metrics. The
tests tell which path served a request by counting what reached FastAPI's own stack.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import LoopTracker, TrackerConfig, Verdict
from judge.service.app import SidecarApp, create_app
from judge.service.settings import ServerSettings
from judge.service.store import MemoryStore
from tests.serving import alternation_history, failing_repeat_history, prefixes, threaded_turns

pytestmark = pytest.mark.anyio
TOKEN = "fast-token-0123456789abcdef"
N_TURNS = 10


class Counted:
    """An app whose requests to FastAPI's own stack (the slow path) are counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.slow = 0
        inner = SidecarApp._inner

        async def counting(app: SidecarApp, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.slow += 1
            await inner(app, scope, receive, send)

        monkeypatch.setattr(SidecarApp, "_inner", counting)
        self.app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(TrackerConfig()))


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    return Counted(monkeypatch)


@pytest.fixture
async def client(counted: Counted) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=counted.app),
        base_url="http://localhost",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        yield c


async def library_verdicts(history: list[dict[str, Any]]) -> list[Verdict]:
    tracker = LoopTracker(TrackerConfig())
    return [await tracker.turn_started(h) for h in prefixes(history, N_TURNS)]


async def post(client: httpx.AsyncClient, session: str, body: Any) -> httpx.Response:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post(
        f"/v1/sessions/{session}/turns",
        content=raw,
        headers={"Content-Type": "application/json"},
    )


@pytest.mark.parametrize("make_history", [failing_repeat_history, alternation_history])
async def test_plain_turns_take_the_fast_path_and_match_the_library(
    client: httpx.AsyncClient, counted: Counted, make_history: Any
) -> None:
    history = make_history(N_TURNS)
    got = []
    for i, h in enumerate(prefixes(history, N_TURNS)):
        # Whole histories and appends alternate; "start": null is a whole history too.
        body = {"messages": h[-2:], "start": len(h) - 2} if i % 2 else {"messages": h}
        if i == 2:
            body["start"] = None
        r = await post(client, "a", body)
        assert r.status_code == 200, r.text
        got.append(Verdict.model_validate(r.json()))
    assert counted.slow == 0
    assert got == await library_verdicts(history)


async def test_requests_pydantic_would_coerce_take_the_slow_path_with_the_same_verdicts(
    client: httpx.AsyncClient, counted: Counted
) -> None:
    history = failing_repeat_history(N_TURNS)
    turns = prefixes(history, N_TURNS)
    fast, slow = [], []
    for i, h in enumerate(turns):
        start = 0 if i == 0 else len(h) - 2
        r = await post(client, "fast", {"messages": h[start:], "start": start})
        fast.append(r.json())
        # A float start, or a +json content type: FastAPI accepts both, the fast path
        # leaves them to it.
        slow_body = {"messages": h[start:], "start": float(start) if i % 2 else start}
        r = await client.post(
            "/v1/sessions/slow/turns",
            content=json.dumps(slow_body),
            headers={
                "Content-Type": "application/vnd.turn+json" if i % 2 == 0 else "application/json"
            },
        )
        assert r.status_code == 200, r.text
        slow.append(r.json())
    assert counted.slow == N_TURNS
    assert fast == slow
    metrics = (await client.get("/metrics")).text
    assert f"loop_judge_turns_total {2 * N_TURNS}" in metrics


@pytest.mark.parametrize(
    ("body", "status", "error_type"),
    [
        (b'{"messages": [', 422, "json_invalid"),
        ({"messages": [1]}, 422, "dict_type"),
        ({"messages": [], "start": -1}, 422, "greater_than_equal"),
        ({"messages": [], "extra": 1}, 422, "extra_forbidden"),
        ({"start": 0}, 422, "missing"),
        ([], 422, "model_attributes_type"),
    ],
)
async def test_malformed_requests_get_fastapis_own_errors(
    client: httpx.AsyncClient, counted: Counted, body: Any, status: int, error_type: str
) -> None:
    r = await post(client, "s", body)
    assert r.status_code == status, r.text
    assert r.json()["detail"][0]["type"] == error_type
    assert counted.slow == 1


async def test_turn_errors_answer_alike_on_the_fast_path(
    client: httpx.AsyncClient, counted: Counted
) -> None:
    # A malformed history passes the request model: the tracker's 422 names index, field.
    r = await post(client, "h", {"messages": [{"role": "assistant", "tool_calls": 3}]})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "messages", 0, "tool_calls"]
    # An append that does not continue the stored session: 409 naming where it ends.
    r = await post(client, "c", {"messages": [{"role": "user", "content": "hi"}], "start": 5})
    assert r.status_code == 409
    assert r.json()["expected_start"] == 0
    assert counted.slow == 0
    metrics = (await client.get("/metrics")).text
    assert "loop_judge_history_errors_total 1" in metrics
    assert 'loop_judge_rejected_requests_total{reason="append_conflict"} 1' in metrics


async def test_unknown_tokens_and_bad_ids_are_left_to_fastapi(
    client: httpx.AsyncClient, counted: Counted
) -> None:
    body = {"messages": failing_repeat_history(1)}
    r = await client.post(
        "/v1/sessions/s/turns", json=body, headers={"Authorization": "Bearer wrong"}
    )
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    r = await client.post("/v1/sessions/s/turns", json=body, headers={"Authorization": ""})
    assert r.status_code == 401
    r = await post(client, "x" * 129, body)
    assert r.status_code == 422 and "session id must be" in r.text
    assert counted.slow == 3


async def test_the_first_authorization_header_counts_as_in_fastapi(counted: Counted) -> None:
    body = json.dumps({"messages": failing_repeat_history(1)}).encode()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=counted.app), base_url="http://localhost"
    ) as client:
        request = client.build_request(
            "POST",
            "/v1/sessions/s/turns",
            content=body,
            headers=[
                ("Content-Type", "application/json"),
                ("Authorization", "Bearer wrong"),
                ("Authorization", f"Bearer {TOKEN}"),
            ],
        )
        assert (await client.send(request)).status_code == 401
        request = client.build_request(
            "POST",
            "/v1/sessions/s/turns",
            content=body,
            headers=[
                ("Content-Type", "application/json"),
                ("Authorization", f"Bearer {TOKEN}"),
                ("Authorization", "Bearer wrong"),
            ],
        )
        assert (await client.send(request)).status_code == 200


def heuristics_app(**settings: Any) -> Any:
    config = TrackerConfig(semantic="off")
    return create_app(ServerSettings(server_token=TOKEN, **settings), MemoryStore(config))


async def test_small_turns_run_on_the_loop_and_big_ones_in_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from judge.service.app import INLINE_MAX_BODY_BYTES

    threaded = threaded_turns(monkeypatch)
    history = failing_repeat_history(N_TURNS)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=heuristics_app()),
        base_url="http://localhost",
        headers={"Authorization": f"Bearer {TOKEN}"},
    ) as c:
        # Append turns, each a couple of small messages: all inline, verdicts as the library's.
        expected = await library_verdicts(history)
        got, start = [], 0
        for h in prefixes(history, N_TURNS):
            r = await post(c, "small", {"messages": h[start:], "start": start})
            assert r.status_code == 200, r.text
            got.append(Verdict.model_validate(r.json()))
            start = len(h)
        assert [v.model_dump(exclude={"timing"}) for v in got] == [
            v.model_dump(exclude={"timing"}) for v in expected
        ]
        assert threaded == []
        # A body over the inline bound goes to a worker thread.
        big = [{"role": "user", "content": "x" * INLINE_MAX_BODY_BYTES}]
        assert (await post(c, "big", {"messages": big})).status_code == 200
        assert threaded == [1]


@pytest.mark.parametrize(
    ("settings", "config"),
    [
        ({"turn_cpu_budget_s": 0.5}, TrackerConfig(semantic="off")),  # budget too tight
        ({}, TrackerConfig(semantic="off", fast_model="openai/gpt-4o-mini")),  # judge checks
    ],
    ids=["tight-budget", "judge-model"],
)
def test_turns_stay_in_threads_where_the_loop_would_not_bound_them(
    settings: dict[str, Any], config: TrackerConfig
) -> None:
    from judge.service.app import inline_allowed

    store = MemoryStore(config)
    assert not inline_allowed(store, ServerSettings(server_token=TOKEN, **settings))
    assert inline_allowed(store, ServerSettings(server_token=TOKEN)) is not bool(config.fast_model)
