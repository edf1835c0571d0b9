"""The append API: a turn sends only its new messages and the index they start at.

The verdicts must be exactly those of full-history turns (and of the library), in memory
and through Redis; a start that does not continue the stored session is a 409 that says
where it ends, and the client recovers by sending its whole history once.
"""

from __future__ import annotations

import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import LoopTracker, TrackerConfig, Verdict
from judge.service.app import create_app
from judge.service.session_codec import SESSION_FORMAT, dump_tracker
from judge.service.settings import ServerSettings
from judge.service.store import MemoryStore, RedisStore
from tests.service.exposition import sample
from tests.serving import (
    alternation_history,
    failing_repeat_history,
    prefixes,
    redis_server,
    threaded_turns,
    tool_turn,
    unique_prefix,
)

pytestmark = pytest.mark.anyio
TOKEN = "append-token-0123456789abcdef"
N_TURNS = 12


def client_for(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://localhost",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(Path(tmp_path_factory.mktemp("redis"))) as url:
        yield url


def memory_app() -> Any:
    return create_app(ServerSettings(server_token=TOKEN), MemoryStore(TrackerConfig()))


def redis_app(url: str, prefix: str, config: TrackerConfig | None = None) -> Any:
    store = RedisStore(config or TrackerConfig(), url=url, key_prefix=prefix)
    return create_app(ServerSettings(server_token=TOKEN), store)


@pytest.fixture(params=["memory", "redis"])
async def apps(request: pytest.FixtureRequest) -> AsyncIterator[list[Any]]:
    """Two apps over one store: the same app twice in memory, two replicas with Redis."""
    if request.param == "memory":
        app = memory_app()
        yield [app, app]
        return
    url = request.getfixturevalue("redis_url")
    prefix = unique_prefix()
    pair = [redis_app(url, prefix), redis_app(url, prefix)]
    try:
        yield pair
    finally:
        for app in pair:
            await app.state.store.aclose()


def appends(history: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """Each turn's append request: the messages added since the previous turn."""
    bodies, sent = [], 0
    for h in prefixes(history, n):
        bodies.append({"messages": h[sent:], "start": sent})
        sent = len(h)
    return bodies


@pytest.mark.parametrize("make_history", [failing_repeat_history, alternation_history])
async def test_appended_turns_match_full_turns_and_the_library(
    apps: list[Any], make_history: Any
) -> None:
    history = make_history(N_TURNS)
    tracker = LoopTracker(TrackerConfig())
    expected = [await tracker.turn_started(h) for h in prefixes(history, N_TURNS)]
    got = []
    async with client_for(apps[0]) as first, client_for(apps[1]) as second:
        for i, body in enumerate(appends(history, N_TURNS)):
            r = await (first, second)[i % 2].post("/v1/sessions/a/turns", json=body)
            assert r.status_code == 200, r.text
            got.append(Verdict.model_validate(r.json()))
    assert got == expected
    assert any(got)


async def test_redis_turns_run_inline_while_the_state_they_save_is_small(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small append turn of a Redis session runs on the event loop when the state its
    save writes is known to be small (fresh, or saved here within INLINE_MAX_STATE_BYTES);
    a session this replica did not save last, or a big state, goes to a worker thread.
    Verdicts are the library's either way."""
    from judge.service import app as app_module

    threaded = threaded_turns(monkeypatch)
    history = failing_repeat_history(N_TURNS)
    config = TrackerConfig(semantic="off")  # the ONNX model keeps turns in threads
    tracker = LoopTracker(config)
    expected = [await tracker.turn_started(h) for h in prefixes(history, N_TURNS)]
    prefix = unique_prefix()
    pair = [redis_app(redis_url, prefix, config), redis_app(redis_url, prefix, config)]
    bodies = appends(history, N_TURNS)
    got = []
    try:
        async with client_for(pair[0]) as first, client_for(pair[1]) as second:
            for body in bodies[:4]:  # fresh, then saved here: small states
                got.append(await _verdict(first, body))
            assert threaded == []
            got.append(await _verdict(second, bodies[4]))  # read from Redis: size unknown
            assert threaded == [1]
            got.append(await _verdict(second, bodies[5]))  # saved there since: inline
            assert threaded == [1]
            monkeypatch.setattr(app_module, "INLINE_MAX_STATE_BYTES", 100)
            for body in bodies[6:]:
                got.append(await _verdict(second, body))
            assert len(threaded) == 1 + len(bodies[6:])
    finally:
        for app in pair:
            await app.state.store.aclose()
    assert got == expected


def test_inline_redis_turns_need_a_known_save_well_under_the_state_cap() -> None:
    from judge.service.app import INLINE_MAX_STATE_BYTES, _small_save
    from judge.service.store import Session

    tracker = LoopTracker(TrackerConfig(semantic="off"))
    assert _small_save(Session(tracker, state_bytes=0))
    assert _small_save(Session(tracker, state_bytes=INLINE_MAX_STATE_BYTES))
    assert not _small_save(Session(tracker, state_bytes=INLINE_MAX_STATE_BYTES + 1))
    assert not _small_save(Session(tracker))  # read from another replica's save: unknown
    # Near its cap a state is written twice and shed: such a save stays off the loop.
    capped = LoopTracker(TrackerConfig(semantic="off", max_state_bytes=16_384))
    assert _small_save(Session(capped, state_bytes=8_192))
    assert not _small_save(Session(capped, state_bytes=8_193))


async def _verdict(client: httpx.AsyncClient, body: dict[str, Any]) -> Verdict:
    r = await client.post("/v1/sessions/inline/turns", json=body)
    assert r.status_code == 200, r.text
    return Verdict.model_validate(r.json())


async def test_a_start_that_does_not_fit_is_409_and_a_full_history_recovers(
    apps: list[Any],
) -> None:
    history = failing_repeat_history(6)
    async with client_for(apps[0]) as c:
        r = await c.post("/v1/sessions/b/turns", json={"messages": history[2:4], "start": 2})
        assert r.status_code == 409 and r.json()["expected_start"] == 0
        assert "send the whole history" in r.json()["detail"]
        for body in appends(history, 2):
            assert (await c.post("/v1/sessions/b/turns", json=body)).status_code == 200
        # a lost response: the client re-sends the turn the server counted last, and
        # gets its answer again without another turn
        r = await c.post("/v1/sessions/b/turns", json=appends(history, 2)[-1])
        assert r.status_code == 200 and r.json()["turn"] == 2
        assert r.headers["idempotent-replayed"] == "true"
        # one counted before that is stale: 409 with where the session ends
        stale = appends(history, 2)[-2]
        r = await c.post("/v1/sessions/b/turns", json=stale)
        assert r.status_code == 409 and r.json()["expected_start"] == 6
        # it falls back to its whole history, then appends again
        r = await c.post("/v1/sessions/b/turns", json={"messages": history[:8]})
        assert r.status_code == 200 and r.json()["turn"] == 3
        r = await c.post("/v1/sessions/b/turns", json={"messages": history[8:10], "start": 8})
        assert r.status_code == 200 and r.json()["turn"] == 4 and r.json()["looping"]
        text = (await c.get("/metrics")).text
    assert sample(text, "loop_judge_rejected_requests_total", reason="append_conflict") == 2


async def test_append_after_a_rewrite_continues_from_the_rewritten_history() -> None:
    history = alternation_history(6)
    compacted = [history[0], {"role": "user", "content": "Summary: read a.py and b.py."}]
    tracker = LoopTracker(TrackerConfig())
    expected = [
        await tracker.turn_started(h) for h in (history[:8], compacted, compacted + history[8:10])
    ]
    async with client_for(memory_app()) as c:
        got = [
            await c.post("/v1/sessions/r/turns", json={"messages": history[:8]}),
            await c.post("/v1/sessions/r/turns", json={"messages": compacted}),
            await c.post("/v1/sessions/r/turns", json={"messages": history[8:10], "start": 2}),
        ]
    assert [Verdict.model_validate(r.json()) for r in got] == expected


async def test_redis_sessions_are_stored_compressed(redis_url: str) -> None:
    prefix = unique_prefix()
    app = redis_app(redis_url, prefix)
    history = alternation_history(N_TURNS)
    try:
        async with client_for(app) as c:
            for body in appends(history, N_TURNS):
                assert (await c.post("/v1/sessions/z/turns", json=body)).status_code == 200
        redis = app.state.store._redis
        stored = await redis.hget(f"{prefix}{{default/z}}:session", "data")
    finally:
        await app.state.store.aclose()
    assert stored.startswith(SESSION_FORMAT)
    plain = zlib.decompress(stored[len(SESSION_FORMAT) :])
    tracker = LoopTracker(TrackerConfig())
    for h in prefixes(history, N_TURNS):
        await tracker.turn_started(h)
    assert len(plain) > len(dump_tracker(tracker))  # the state, plus length and tail
    assert len(stored) < len(plain) / 3


SECRET = "DB_PASSWORD=hunter2hunter2-7Qx"


def secret_history(n_turns: int) -> list[dict[str, Any]]:
    """A loop whose every result, so every stored tail, carries a password."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Deploy the service."},
    ]
    for i in range(n_turns):
        history += tool_turn(i, "run_deploy", {"env": "prod"}, f"failed: {SECRET} rejected")
    return history


@pytest.mark.slow
async def test_stored_sessions_hold_no_secret_and_appends_still_fit(redis_url: str) -> None:
    # The append API keeps the history's last entry next to the state: it is redacted like
    # the state, and the next append still continues from it (no 409, no re-read).
    prefix = unique_prefix()
    apps = [redis_app(redis_url, prefix), redis_app(redis_url, prefix)]
    history = secret_history(N_TURNS)
    tracker = LoopTracker(TrackerConfig())
    expected = [await tracker.turn_started(h) for h in prefixes(history, N_TURNS)]
    got = []
    try:
        async with client_for(apps[0]) as first, client_for(apps[1]) as second:
            for i, body in enumerate(appends(history, N_TURNS)):
                r = await (first, second)[i % 2].post("/v1/sessions/s/turns", json=body)
                assert r.status_code == 200, r.text
                got.append(Verdict.model_validate(r.json()))
        stored = await apps[0].state.store._redis.hget(f"{prefix}{{default/s}}:session", "data")
    finally:
        for app in apps:
            await app.state.store.aclose()
    assert [bool(v) for v in got] == [bool(v) for v in expected]
    assert [v.kind for v in got] == [v.kind for v in expected]
    assert any(got)
    plain = zlib.decompress(stored[len(SESSION_FORMAT) :]).decode()
    assert "hunter2hunter2" not in plain
    assert '"tail":{' in plain  # the tail is kept, redacted, not dropped


class _SidecarTracker:
    """A tracker an agent drives through the sidecar's append API, each turn on the next
    of ``clients`` (with Redis, every turn restores the state another replica saved)."""

    def __init__(self, clients: list[httpx.AsyncClient]) -> None:
        self.clients = clients
        self.sent = 0
        self.turns = 0

    async def turn_started(self, history: list[dict[str, Any]]) -> Verdict:
        client = self.clients[self.turns % len(self.clients)]
        body = {"messages": history[self.sent :], "start": self.sent}
        r = await client.post("/v1/sessions/live/turns", json=body)
        assert r.status_code == 200, r.text
        self.sent, self.turns = len(history), self.turns + 1
        return Verdict.model_validate(r.json())


async def test_the_live_loop_through_the_sidecar_matches_the_library(apps: list[Any]) -> None:
    """The flow an agent lives in, across saves: it loops, the recovery message is
    appended, it obeys, later relapses; each turn's verdict equals the library's on the
    same history, and obeying is not flagged again."""
    from tests.fakes import live_agent

    async with client_for(apps[0]) as first, client_for(apps[1]) as second:
        agent = live_agent(_SidecarTracker([first, second]))
        library = LoopTracker(TrackerConfig())
        verdicts = []

        async def turn() -> Verdict:
            expected = await library.turn_started(list(agent.messages))
            got = await agent.turn()
            assert isinstance(got, Verdict) and got == expected
            verdicts.append(got)
            return got

        order, shipped = {"customer": "42"}, "order 7: shipped, 2 items"
        for _ in range(8):  # the same lookup until it is flagged
            agent.call("testTool", order, shipped)
            flagged = await turn()
            if flagged:
                break
        assert flagged and agent.messages[-1]["content"] == flagged.recovery_message
        agent.say("Your order 7 has shipped with 2 items.")
        assert not await turn()  # obeyed: not flagged again
        agent.user("Thanks. And order 8?")
        assert not await turn()
        for _ in range(8):  # the same lookup again: a relapse
            agent.call("testTool", order, shipped)
            if await turn():
                break
    assert sum(bool(v) for v in verdicts) >= 2  # the first loop and the relapse


# -- where a turn runs ------------------------------------------------------------------------


async def test_small_turns_run_on_the_loop_and_big_ones_in_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from judge.service.app import INLINE_MAX_BODY_BYTES

    threaded = threaded_turns(monkeypatch)
    n_turns = 10
    history = failing_repeat_history(n_turns)
    app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(TrackerConfig(semantic="off")))
    tracker = LoopTracker(TrackerConfig(semantic="off"))
    async with client_for(app) as c:
        # Append turns, each a couple of small messages: all inline, verdicts as the library's.
        start = 0
        for h in prefixes(history, n_turns):
            r = await c.post(
                "/v1/sessions/small/turns", json={"messages": h[start:], "start": start}
            )
            assert r.status_code == 200, r.text
            assert Verdict.model_validate(r.json()) == await tracker.turn_started(h)
            start = len(h)
        assert threaded == []
        # A body over the inline bound goes to a worker thread.
        big = [{"role": "user", "content": "x" * INLINE_MAX_BODY_BYTES}]
        assert (await c.post("/v1/sessions/big/turns", json={"messages": big})).status_code == 200
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
