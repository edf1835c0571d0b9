"""The sidecar counts each turn once and never forgets a session silently.

- a retried request (its response lost) is answered as the first was, without a new
  turn: by its Idempotency-Key, or without one as an exact resend of the last request;
- a session that vanished from the store (evicted, expired, Redis restarted) is said to
  have restarted, in the response and the log, and the store warns about a Redis
  eviction policy that would evict sessions;
- keys planted in Redis (a lock without expiry, a session key of another type) never
  wedge a session for ever;
- every 409 says where the stored history ends (``expected_start``);
- a body whose escapes make a lone surrogate gets a 422 naming the field, never a 500;
- the in-memory store is capped by bytes and refuses a new session with 507 when full.

Redis tests run a private redis-server on 127.0.0.1 and skip without one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is not installed")

from judge import TrackerConfig, Verdict
from judge.service.app import create_app
from judge.service.settings import ServerSettings
from judge.service.store import MemoryStore, RedisStore, SessionLockLost
from tests.service.exposition import sample
from tests.serving import failing_repeat_history, prefixes, redis_server, unique_prefix

pytestmark = pytest.mark.anyio
TOKEN = "once-token-0123456789abcdef"
CONFIG = TrackerConfig(semantic="off")
TURNS = "/v1/sessions/{}/turns"


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


def replica(url: str, prefix: str, **kwargs: Any) -> RedisStore:
    return RedisStore(CONFIG, url=url, key_prefix=prefix, **kwargs)


@pytest.fixture(params=["memory", "redis"])
async def apps(request: pytest.FixtureRequest) -> AsyncIterator[list[Any]]:
    """Two apps over one store: the same app twice in memory, two replicas with Redis."""
    if request.param == "memory":
        app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(CONFIG))
        yield [app, app]
        return
    url = request.getfixturevalue("redis_url")
    prefix = unique_prefix()
    pair = [create_app(ServerSettings(server_token=TOKEN), replica(url, prefix)) for _ in range(2)]
    try:
        yield pair
    finally:
        for app in pair:
            await app.state.store.aclose()


# -- retries ------------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_resent_request_counts_no_turn_and_gets_the_lost_warning(
    apps: list[Any],
) -> None:
    """The WARN of turn 3 is lost on the way back; the client resends turn 3's request
    50 times (to either replica): each gets that WARN, and the next turn is turn 4."""
    turns = prefixes(failing_repeat_history(5), 5)
    async with client_for(apps[0]) as a, client_for(apps[1]) as b:
        for h in turns[:3]:
            r = await a.post(TURNS.format("s"), json={"messages": h})
            assert r.status_code == 200
        lost = Verdict.model_validate(r.json())
        assert lost.looping and lost.action.value == "warn" and lost.turn == 3
        for i in range(50):
            again = await (a, b)[i % 2].post(TURNS.format("s"), json={"messages": turns[2]})
            assert again.status_code == 200
            assert again.headers["idempotent-replayed"] == "true"
            assert Verdict.model_validate(again.json()) == lost
        r = await b.post(TURNS.format("s"), json={"messages": turns[3]})
        assert r.json()["turn"] == 4
        metrics = (await a.get("/metrics")).text
    if apps[0] is apps[1]:
        assert sample(metrics, "loop_judge_replayed_turns_total") == 50
        assert sample(metrics, "loop_judge_turns_total") == 4


async def test_an_idempotency_key_names_the_request(apps: list[Any]) -> None:
    """With a key, the key decides: the same key is a resend (the same body required), a
    new key with the same body is a new turn."""
    history = failing_repeat_history(2)
    async with client_for(apps[0]) as a, client_for(apps[1]) as b:
        first = await a.post(
            TURNS.format("k"), json={"messages": history}, headers={"Idempotency-Key": "t-1"}
        )
        assert first.status_code == 200 and first.json()["turn"] == 1
        again = await b.post(
            TURNS.format("k"), json={"messages": history}, headers={"Idempotency-Key": "t-1"}
        )
        assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
        # the same key with another body: the client reused a key by mistake
        other = await a.post(
            TURNS.format("k"),
            json={"messages": history[:-1]},
            headers={"Idempotency-Key": "t-1"},
        )
        assert other.status_code == 422
        assert other.json()["detail"][0]["loc"] == ["header", "idempotency-key"]
        # a new key: a new request, whatever its body
        new = await b.post(
            TURNS.format("k"), json={"messages": history}, headers={"Idempotency-Key": "t-2"}
        )
        assert new.status_code == 200 and new.json()["turn"] == 2
        assert "idempotent-replayed" not in new.headers
        bad = await a.post(
            TURNS.format("k"), json={"messages": history}, headers={"Idempotency-Key": "a b"}
        )
        assert bad.status_code == 422 and "Idempotency-Key" in bad.json()["detail"][0]["msg"]


async def test_a_resend_with_a_charset_parameter_replays_too() -> None:
    """A request whose type carries a charset parameter is recognised as a resend too."""
    app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(CONFIG))
    body = json.dumps({"messages": failing_repeat_history(1)}).encode()
    headers = {"content-type": "application/json; charset=utf-8"}
    async with client_for(app) as c:
        first = await c.post(TURNS.format("v"), content=body, headers=headers)
        again = await c.post(TURNS.format("v"), content=body, headers=headers)
    assert first.json()["turn"] == 1 and again.json() == first.json()
    assert again.headers["idempotent-replayed"] == "true"


# -- vanished sessions --------------------------------------------------------------------


async def test_a_session_evicted_from_redis_is_reported_as_restarted(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique_prefix()
    store = replica(redis_url, prefix)
    app = create_app(ServerSettings(server_token=TOKEN), store)
    turns = prefixes(failing_repeat_history(4), 4)
    try:
        async with client_for(app) as c:
            for h in turns[:3]:
                r = await c.post(TURNS.format("e"), json={"messages": h})
                assert "loop-judge-session" not in r.headers
            # what an LRU eviction does: the session's keys are gone, nothing else is
            await store._redis.delete(f"{prefix}{{default/e}}:session")
            store._cache.clear()
            with caplog.at_level(logging.WARNING, logger="judge.service.app"):
                r = await c.post(TURNS.format("e"), json={"messages": turns[3]})
            assert r.status_code == 200 and r.json()["turn"] == 1
            assert r.headers["loop-judge-session"] == "restarted"
            assert "noeviction" in caplog.text and "default/e" in caplog.text
            # once counted again, its turns are ordinary
            r = await c.post(TURNS.format("e"), json={"messages": turns[3] + turns[0][-2:]})
            assert "loop-judge-session" not in r.headers
            metrics = (await c.get("/metrics")).text
        assert sample(metrics, "loop_judge_sessions_restarted_total") == 1
    finally:
        await store.aclose()


async def test_a_new_session_is_not_called_restarted() -> None:
    app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(CONFIG))
    async with client_for(app) as c:
        r = await c.post(
            TURNS.format("n"), json={"messages": prefixes(failing_repeat_history(1), 1)[0]}
        )
    assert r.status_code == 200 and "loop-judge-session" not in r.headers


async def test_an_evicting_redis_policy_is_warned_about(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = replica(redis_url, unique_prefix())
    try:
        await store._redis.config_set("maxmemory", "512mb")
        await store._redis.config_set("maxmemory-policy", "allkeys-lru")
        with caplog.at_level(logging.WARNING, logger="judge.service.store"):
            assert await store.check_eviction_policy() == "allkeys-lru"
        assert "maxmemory-policy noeviction" in caplog.text
    finally:
        await store._redis.config_set("maxmemory-policy", "noeviction")
        await store._redis.config_set("maxmemory", "0")
        await store.aclose()


# -- planted keys -------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_lock_without_expiry_frees_itself_within_a_lease(redis_url: str) -> None:
    prefix = unique_prefix()
    store = replica(redis_url, prefix, lock_lease_s=0.3, lock_wait_s=5.0)
    try:
        await store._redis.set(f"{prefix}{{s}}:lock", "planted")  # no expiry
        async with store.session("s") as tracker:
            assert (await tracker.turn_started(failing_repeat_history(1))).turn == 1
        # a lock key of another type, without expiry, as well
        await store._redis.hset(f"{prefix}{{s}}:lock", "x", "1")
        async with store.session("s") as tracker:
            assert (await tracker.turn_started(failing_repeat_history(2))).turn == 2
    finally:
        await store.aclose()


async def test_a_session_key_of_another_type_starts_the_session_over(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique_prefix()
    store = replica(redis_url, prefix)
    app = create_app(ServerSettings(server_token=TOKEN), store)
    try:
        await store._redis.set(f"{prefix}{{default/w}}:session", "planted")
        async with client_for(app) as c:
            call = {"name": "run_tests", "arguments": {"path": "tests/"}}
            assert (await c.post("/v1/sessions/w/calls", json=call)).status_code == 200
            with caplog.at_level(logging.WARNING, logger="judge.service.store"):
                r = await c.post(TURNS.format("w"), json={"messages": failing_repeat_history(1)})
            assert r.status_code == 200 and r.json()["turn"] == 1
            assert "held a Redis string" in caplog.text
            r = await c.post(TURNS.format("w"), json={"messages": failing_repeat_history(2)})
            assert r.status_code == 200 and r.json()["turn"] == 2
    finally:
        await store.aclose()


# -- 409 ----------------------------------------------------------------------------------


async def test_a_lock_lost_in_a_redis_restart_is_a_409_with_expected_start(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis restarts (without persistence) while a turn runs: the 409 says the stored
    history ends at 0, and a client that sends its history from there (the append protocol)
    recovers."""
    import redis as sync_redis

    import judge.service.app as app_module

    prefix = unique_prefix()
    store = replica(redis_url, prefix)
    app = create_app(ServerSettings(server_token=TOKEN), store)
    real_run_turn = app_module.run_turn
    restarts = [True]

    async def restarting_run_turn(*args: Any, **kwargs: Any) -> Any:
        if restarts and restarts.pop():
            with sync_redis.Redis.from_url(redis_url) as r:
                for key in r.scan_iter(f"{prefix}*"):
                    r.delete(key)
        return await real_run_turn(*args, **kwargs)

    history = failing_repeat_history(3)
    try:
        async with client_for(app) as c:
            r = await c.post(TURNS.format("r"), json={"messages": history[:4], "start": 0})
            assert r.status_code == 200
            monkeypatch.setattr(app_module, "run_turn", restarting_run_turn)
            r = await c.post(TURNS.format("r"), json={"messages": history[4:6], "start": 4})
            assert r.status_code == 409, r.text
            start = r.json()["expected_start"]
            assert start == 0
            r = await c.post(TURNS.format("r"), json={"messages": history[start:6], "start": start})
            assert r.status_code == 200 and r.json()["turn"] == 1
    finally:
        await store.aclose()


async def test_a_lost_lock_says_where_the_other_replicas_save_ends(redis_url: str) -> None:
    prefix = unique_prefix()
    a, b = replica(redis_url, prefix), replica(redis_url, prefix)
    history = failing_repeat_history(3)
    try:
        with pytest.raises(SessionLockLost) as lost:
            async with a.open("s") as session:
                session.length = 4
                await a._redis.delete(f"{prefix}{{s}}:lock")  # the lease ran out
                async with b.open("s") as other:
                    await other.tracker.turn_started(history[:6])
                    other.length = 6
        assert lost.value.expected_start == 6
    finally:
        await a.aclose()
        await b.aclose()


# -- lone surrogates ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (rb'{"messages":[{"role":"user","content":"x"}],"\ud800":1}', ["body", "\ud800"]),
        (rb'{"messages":"\ud800"}', ["body", "messages"]),
        (rb'{"messages":[{"role":"user","content":"x"}],"start":"\udc00"}', ["body", "start"]),
    ],
)
async def test_a_lone_surrogate_escape_is_a_422_naming_the_field(
    body: bytes, loc: list[str]
) -> None:
    app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(CONFIG))
    async with client_for(app) as c:
        r = await c.post(
            TURNS.format("u"), content=body, headers={"content-type": "application/json"}
        )
        assert r.status_code == 422, r.text
        assert r.json()["detail"][0]["loc"] == loc
        # the connection is still served
        assert (await c.get("/healthz")).status_code == 200


async def test_a_lone_surrogate_in_a_message_is_read_not_refused() -> None:
    app = create_app(ServerSettings(server_token=TOKEN), MemoryStore(CONFIG))
    body = rb'{"messages":[{"role":"user","content":"fix \ud800 this"}]}'
    async with client_for(app) as c:
        r = await c.post(
            TURNS.format("u"), content=body, headers={"content-type": "application/json"}
        )
    assert r.status_code == 200 and r.json()["turn"] == 1


# -- the in-memory byte cap ---------------------------------------------------------------


def _big_history(chars: int) -> list[dict[str, Any]]:
    history = failing_repeat_history(1)
    history[-1] = {**history[-1], "content": "x" * chars}
    return history


async def test_the_memory_store_refuses_a_new_session_at_its_byte_cap() -> None:
    store = MemoryStore(CONFIG, max_bytes=300_000)
    app = create_app(ServerSettings(server_token=TOKEN), store)
    async with client_for(app) as c:
        r = await c.post(TURNS.format("big"), json={"messages": _big_history(400_000)})
        assert r.status_code == 200
        assert store.bytes_held > 400_000  # the kept last entry counts
        refused = await c.post(TURNS.format("next"), json={"messages": failing_repeat_history(1)})
        assert refused.status_code == 507
        assert "LOOP_JUDGE_MAX_STORE_BYTES" in refused.json()["detail"]
        assert refused.json()["limit"] == "max_store_bytes"
        # the sessions held go on; a deleted one makes room
        more = _big_history(400_000) + failing_repeat_history(2)[-2:]
        assert (await c.post(TURNS.format("big"), json={"messages": more})).json()["turn"] == 2
        assert (await c.delete("/v1/sessions/big")).status_code == 200
        assert store.bytes_held == 0
        r = await c.post(TURNS.format("next"), json={"messages": failing_repeat_history(1)})
        assert r.status_code == 200


async def test_the_byte_cap_comes_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from judge.service.store import StoreFull, store_from_settings

    monkeypatch.setenv("LOOP_JUDGE_MAX_STORE_BYTES", "12345")
    store = store_from_settings(ServerSettings(server_token=TOKEN), CONFIG)
    assert isinstance(store, MemoryStore) and store.max_bytes == 12345
    with pytest.raises(StoreFull):
        store.bytes_held = 12345
        async with store.open("x"):
            pass


async def test_the_count_between_exact_counts_stays_near_the_bytes_held() -> None:
    """A turn counts its state exactly only now and then (writing it costs about a turn);
    in between the estimate from the text read keeps the store's figure near the truth."""
    from judge.service.session_codec import held_bytes

    store = MemoryStore(CONFIG)
    app = create_app(ServerSettings(server_token=TOKEN), store)
    history = failing_repeat_history(1)
    async with client_for(app) as c:
        for i in range(30):
            history = history + [
                {"role": "assistant", "content": f"Reading part {i} of the log."},
                {"role": "user", "content": f"Part {i}: " + "all fine here. " * 40},
            ]
            r = await c.post(TURNS.format("g"), json={"messages": history})
            assert r.status_code == 200
    async with store.open("default/g") as session:
        exact = held_bytes(session)[0]
    assert exact / 2 <= store.bytes_held <= 2 * exact, (store.bytes_held, exact)


# -- restored == never saved, over HTTP ---------------------------------------------------


async def test_two_replicas_taking_turns_answer_as_one_after_a_dropped_head(
    redis_url: str,
) -> None:
    """The agent's context window drops its oldest steps; calls reuse the id "call_0".
    Two replicas taking turns restore the session at every turn and must answer what one
    replica, which keeps the live tracker, answers."""
    from tests.state.test_state_restore import HEAD, step

    fail, other = step(0, 0, "call_0"), step(1, 0, "call_0")
    histories = [
        [*HEAD, *fail],
        [*HEAD, *fail, *fail, *other],
        [*HEAD, *other, *fail],  # the two oldest steps dropped
        [*HEAD, *other, *fail, *other],
    ]
    prefix_one, prefix_two = unique_prefix(), unique_prefix()
    one = create_app(ServerSettings(server_token=TOKEN), replica(redis_url, prefix_one))
    two = [
        create_app(ServerSettings(server_token=TOKEN), replica(redis_url, prefix_two))
        for _ in range(2)
    ]
    try:
        async with client_for(one) as c, client_for(two[0]) as a, client_for(two[1]) as b:
            for i, h in enumerate(histories):
                alone = await c.post(TURNS.format("w"), json={"messages": h})
                shared = await (a, b)[i % 2].post(TURNS.format("w"), json={"messages": h})
                assert shared.json() == alone.json(), f"turn {i + 1}"
    finally:
        for app in (one, *two):
            await app.state.store.aclose()


# -- refusals -----------------------------------------------------------------------------


async def test_a_call_refused_over_http_stays_refused_and_climbs(apps: list[Any]) -> None:
    """A client that asks /calls before each tool call and refuses the looping ones: the
    refusal is kept in the session (on either replica), so the identical call stays
    refused, each time a rung higher, and the failing tool ran only its limit."""
    call = {"name": "bash", "arguments": {"command": "pytest tests/test_x.py"}}
    failure = "FAILED tests/test_x.py::test_a - assert 1 == 2"
    history: list[dict[str, Any]] = [{"role": "user", "content": "fix the test"}]
    ran, refusals = 0, []
    clients = [client_for(app) for app in apps]
    try:
        for n in range(7):
            c = clients[n % 2]
            answer = await c.post("/v1/sessions/r/calls", json=call)
            assert answer.status_code == 200
            verdict = Verdict.model_validate(answer.json())
            tool_call = {"id": f"c{n}", "type": "function", "function": {"name": "bash"}}
            tool_call["function"]["arguments"] = json.dumps(call["arguments"])
            history.append({"role": "assistant", "content": "", "tool_calls": [tool_call]})
            if verdict.looping:
                refusals.append(verdict.action.value)
                result = verdict.recovery_message or "refused"
            else:
                ran += 1
                result = failure
            history.append({"role": "tool", "tool_call_id": f"c{n}", "content": result})
            turn = await c.post(TURNS.format("r"), json={"messages": history})
            assert turn.status_code == 200 and not turn.json()["looping"]
    finally:
        for c in clients:
            await c.aclose()
    assert ran == CONFIG.failure_repeat_limit
    assert refusals == ["warn", "warn", "ask_user", "stop", "stop"]
