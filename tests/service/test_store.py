"""Session stores: the in-memory LRU, state round trips, and Redis shared by two replicas.

The Redis tests run a real redis-server on 127.0.0.1 (tests/serving.py) and skip when it
is not installed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.service.session_codec import _empty_state, dump_tracker, load_tracker, new_tracker
from judge.service.settings import DEFAULT_LOCK_LEASE_S
from judge.service.store import (
    INDEX_REFRESH_FRACTION,
    MemoryStore,
    RedisStore,
    SessionBusy,
    SessionLockLost,
    StoreUnavailable,
)
from tests.serving import (
    alternation_history,
    failing_repeat_history,
    free_port,
    prefixes,
    redis_server,
    unique_prefix,
)

pytestmark = pytest.mark.anyio
N_TURNS = 12
REPO_ROOT = Path(__file__).resolve().parents[2]
# A waiting replica polls the lock every 20 ms; 2 s covers a loaded CI machine.
KILL_SLACK_S = 2.0


async def library_verdicts(history: list[dict[str, Any]], n: int) -> list[Verdict]:
    tracker = LoopTracker(TrackerConfig())
    return [await tracker.turn_started(h) for h in prefixes(history, n)]


# -- state --------------------------------------------------------------------------------


@pytest.mark.parametrize("make_history", [failing_repeat_history, alternation_history])
async def test_reloading_every_turn_changes_no_verdict(make_history: Any) -> None:
    config = TrackerConfig()
    history = make_history(N_TURNS)
    data = dump_tracker(LoopTracker(config))
    got = []
    for h in prefixes(history, N_TURNS):
        tracker = load_tracker(config, data)
        got.append(await tracker.turn_started(h))
        data = dump_tracker(tracker)
    assert got == await library_verdicts(history, N_TURNS)


# -- in memory ----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def turn(store: Any, session_id: str, history: list[dict[str, Any]]) -> Verdict:
    async with store.session(session_id) as tracker:
        return await tracker.turn_started(history)


async def test_new_sessions_continue_from_one_empty_state_and_share_nothing_else() -> None:
    """`new_tracker` validates each configuration's empty state once; sessions made from
    it behave as one built the long way and do not see each other's turns."""
    config = TrackerConfig(semantic="off")
    first, second = new_tracker(config), new_tracker(config)
    shared = _empty_state(config).model_dump()

    def long_way() -> LoopTracker:
        return LoopTracker.from_state(config, LoopTracker(config).state.model_dump())

    reference = long_way()
    for history in prefixes(failing_repeat_history(N_TURNS), N_TURNS):
        assert await first.turn_started(history) == await reference.turn_started(history)
    assert first.turn == N_TURNS and second.turn == 0
    assert _empty_state(config).model_dump() == shared  # the turns left it as it was
    assert _timeless(first) == _timeless(reference)
    assert _timeless(second) == _timeless(long_way())
    one_turn = failing_repeat_history(1)
    assert await second.turn_started(one_turn) == await long_way().turn_started(one_turn)


def _timeless(tracker: LoopTracker) -> dict[str, Any]:
    """A tracker's saved state without the wall-clock time of its last step."""
    state = json.loads(dump_tracker(tracker))
    del state["detectors"]["last_step_at"]
    return dict(state)


async def test_memory_lru_evicts_least_recently_used() -> None:
    store = MemoryStore(max_sessions=2)
    history = failing_repeat_history(1)
    for sid in ("a", "b"):
        await turn(store, sid, history)
    await turn(store, "a", history)  # "b" is now the least recently used
    await turn(store, "c", history)
    assert len(store) == 2
    assert (await turn(store, "a", history)).turn == 3
    assert (await turn(store, "b", history)).turn == 1  # evicted, started over


async def test_memory_idle_ttl() -> None:
    clock = Clock()
    store = MemoryStore(session_ttl_s=60, clock=clock)
    history = failing_repeat_history(1)
    await turn(store, "a", history)
    clock.now += 30
    await turn(store, "b", history)
    clock.now += 45  # a idle 75 s, b idle 45 s
    assert await store.live_sessions() == 1
    assert (await turn(store, "b", history)).turn == 2
    assert (await turn(store, "a", history)).turn == 1


async def test_memory_never_evicts_a_session_in_use() -> None:
    store = MemoryStore(max_sessions=1)
    history = failing_repeat_history(1)
    async with store.session("busy") as tracker:
        await tracker.turn_started(history)
        await turn(store, "other", history)
        assert len(store) == 2  # over the bound while "busy" is in use
    await turn(store, "third", history)
    assert len(store) == 1


async def test_memory_turns_of_one_session_are_serialized() -> None:
    store = MemoryStore()
    inside = 0
    overlap = False
    history = failing_repeat_history(1)

    async def one() -> None:
        nonlocal inside, overlap
        async with store.session("s") as tracker:
            inside += 1
            overlap = overlap or inside > 1
            await anyio.sleep(0.01)
            await tracker.turn_started(history)
            inside -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
    assert not overlap
    assert (await turn(store, "s", history)).turn == 6


async def test_memory_busy_session_times_out() -> None:
    store = MemoryStore(lock_wait_s=0.05)
    entered, release = anyio.Event(), anyio.Event()

    async def hold() -> None:
        async with store.session("s"):
            entered.set()
            await release.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(hold)
        await entered.wait()
        with pytest.raises(SessionBusy):
            async with store.session("s"):
                pass
        release.set()


async def test_readonly_creates_nothing() -> None:
    store = MemoryStore()
    async with store.session("ghost", readonly=True) as tracker:
        assert tracker.turn == 0
    assert await store.live_sessions() == 0


# -- Redis --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with redis_server(Path(tmp_path_factory.mktemp("redis"))) as url:
        yield url


@pytest.fixture
def prefix() -> str:
    return unique_prefix()


def replica(redis_url: str, prefix: str, **kwargs: Any) -> RedisStore:
    return RedisStore(TrackerConfig(), url=redis_url, key_prefix=prefix, **kwargs)


@pytest.fixture
async def two_replicas(redis_url: str, prefix: str) -> AsyncIterator[tuple[Any, Any]]:
    """Two sidecar apps with their own RedisStore (own connections), one Redis."""
    from judge.service.app import create_app
    from judge.service.settings import ServerSettings

    apps = [
        create_app(ServerSettings(insecure_no_token=True), replica(redis_url, prefix))
        for _ in range(2)
    ]
    clients = [
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")
        for app in apps
    ]
    try:
        yield clients[0], clients[1]
    finally:
        for client, app in zip(clients, apps, strict=True):
            await client.aclose()
            await app.state.store.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("make_history", [failing_repeat_history, alternation_history])
async def test_alternating_replicas_detect_at_the_same_turn(
    two_replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], make_history: Any
) -> None:
    pytest.importorskip("fastapi")
    history = make_history(N_TURNS)
    got = []
    for i, h in enumerate(prefixes(history, N_TURNS)):
        client = two_replicas[i % 2]
        r = await client.post("/v1/sessions/agent-7/turns", json={"messages": h})
        assert r.status_code == 200, r.text
        got.append(Verdict.model_validate(r.json()))
    expected = await library_verdicts(history, N_TURNS)
    assert got == expected
    first = next(v.turn for v in got if v)
    assert first == next(v.turn for v in expected if v)


async def test_killing_a_replica_mid_session_loses_no_turn(redis_url: str, prefix: str) -> None:
    history = alternation_history(N_TURNS)
    turns = prefixes(history, N_TURNS)
    got = []
    first = replica(redis_url, prefix)
    for h in turns[:5]:
        got.append(await turn(first, "s", h))
    # The replica dies: its connections drop and its objects are gone.
    await first.aclose()
    del first
    second = replica(redis_url, prefix)
    try:
        for h in turns[5:]:
            got.append(await turn(second, "s", h))
    finally:
        await second.aclose()
    assert [v.turn for v in got] == list(range(1, N_TURNS + 1))
    assert got == await library_verdicts(history, N_TURNS)


async def test_concurrent_turns_across_replicas_are_serialized(redis_url: str, prefix: str) -> None:
    stores = [replica(redis_url, prefix) for _ in range(2)]
    history = failing_repeat_history(1)
    seen: list[int] = []
    try:

        async def one(store: RedisStore) -> None:
            async with store.session("s") as tracker:
                await asyncio.sleep(0.005)  # widen the window a lost update would need
                seen.append((await tracker.turn_started(history)).turn)

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(one, stores[i % 2])
    finally:
        for store in stores:
            await store.aclose()
    assert sorted(seen) == list(range(1, 11))


async def test_failed_turn_saves_nothing(redis_url: str, prefix: str) -> None:
    store = replica(redis_url, prefix)
    try:
        history = failing_repeat_history(2)
        await turn(store, "s", history[:4])
        with pytest.raises(ValueError, match="message 1"):
            await turn(store, "s", [history[0], {"role": "assistant", "tool_calls": 3}])
        assert (await turn(store, "s", history)).turn == 2
    finally:
        await store.aclose()


async def test_session_state_expires_and_is_indexed(redis_url: str, prefix: str) -> None:
    store = replica(redis_url, prefix, session_ttl_s=120)
    try:
        await turn(store, "a", failing_repeat_history(1))
        await turn(store, "b", failing_repeat_history(1))
        assert await store.live_sessions() == 2
        ttl_ms = await store._redis.pttl(f"{prefix}{{a}}:session")
        assert 0 < ttl_ms <= 120_000
        assert await store.delete("a") is True
        assert await store.delete("a") is False
        assert await store.live_sessions() == 1
    finally:
        await store.aclose()


async def test_index_is_refreshed_once_per_interval_not_every_save(
    redis_url: str, prefix: str
) -> None:
    """Saves within INDEX_REFRESH_FRACTION of the TTL skip the index (one command, not a
    pipeline of two); a later save, another replica's, or a session that left this
    replica's cache puts its score back, so the gauge never loses a session it holds."""
    now = [1_000.0]
    ttl = 600.0
    refresh = ttl * INDEX_REFRESH_FRACTION
    store = replica(redis_url, prefix, session_ttl_s=ttl, clock=lambda: now[0])
    other = replica(redis_url, prefix, session_ttl_s=ttl, clock=lambda: now[0])
    history = failing_repeat_history(3)

    async def score() -> float | None:
        return await store._redis.zscore(f"{prefix}sessions", "s")

    try:
        await turn(store, "s", history[:2])
        assert await score() == 1_000.0
        now[0] += refresh / 2
        await turn(store, "s", history[:4])
        assert await score() == 1_000.0  # skipped: refreshed less than an interval ago
        now[0] += refresh
        await turn(store, "s", history[:6])
        assert await score() == now[0]
        now[0] += 1
        await turn(other, "s", history)  # not in the other replica's cache: indexed
        assert await score() == now[0]
        now[0] += ttl - refresh  # idle almost a TTL: still counted
        assert await store.live_sessions() == 1
    finally:
        await store.aclose()
        await other.aclose()


async def test_a_save_the_store_makes_itself_records_the_state_size(
    redis_url: str, prefix: str
) -> None:
    """Through `session()` (no blob from the turn) the store serializes the session; the
    size it records is what decides whether the next turn may run inline."""
    store = replica(redis_url, prefix)
    try:
        await turn(store, "s", failing_repeat_history(3))
        _generation, cached = store._cache["s"]
        assert cached.state_bytes is not None and cached.state_bytes > 1_000
    finally:
        await store.aclose()


async def test_busy_session_and_lost_lock(redis_url: str, prefix: str) -> None:
    holder = replica(redis_url, prefix)
    waiter = replica(redis_url, prefix, lock_wait_s=0.05)
    try:
        with pytest.raises(SessionLockLost):
            async with holder.session("s") as tracker:
                with pytest.raises(SessionBusy):
                    async with waiter.session("s"):
                        pass
                await tracker.turn_started(failing_repeat_history(1))
                await waiter.delete("s")  # deleted mid-turn: the save must not resurrect it
        async with waiter.session("s", readonly=True) as tracker:
            assert tracker.turn == 0
    finally:
        await holder.aclose()
        await waiter.aclose()


@pytest.mark.slow
async def test_lease_is_renewed_during_a_long_turn(redis_url: str, prefix: str) -> None:
    store = replica(redis_url, prefix, lock_lease_s=0.2)
    other = replica(redis_url, prefix, lock_wait_s=0.0)
    try:
        async with store.session("s") as tracker:
            await asyncio.sleep(0.5)  # 2.5 leases
            with pytest.raises(SessionBusy):
                async with other.session("s"):
                    pass
            await tracker.turn_started(failing_repeat_history(1))
        async with other.session("s") as tracker:
            assert tracker.turn == 1
    finally:
        await store.aclose()
        await other.aclose()


async def test_redis_down_is_store_unavailable_and_503() -> None:
    from judge.service.app import create_app
    from judge.service.settings import ServerSettings

    store = RedisStore(TrackerConfig(), url=f"redis://127.0.0.1:{free_port()}/0")
    app = create_app(ServerSettings(insecure_no_token=True), store)
    try:
        with pytest.raises(StoreUnavailable):
            await turn(store, "s", failing_repeat_history(1))
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://localhost"
        ) as client:
            r = await client.post("/v1/sessions/s/turns", json={"messages": []})
            assert r.status_code == 503 and "Redis" in r.json()["detail"]
            assert r.headers["retry-after"] == "1"
            assert (await client.get("/healthz")).status_code == 503
            assert (await client.get("/metrics")).status_code == 200
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_a_killed_replica_frees_its_session_within_one_lease(
    redis_url: str, prefix: str
) -> None:
    """A replica SIGKILLed mid-turn cannot release its lock; the lease (5 s by default,
    once 30 s) is how long the session stays blocked."""
    code = (
        "import asyncio\n"
        "from judge import TrackerConfig\n"
        "from judge.service.store import RedisStore\n"
        "async def main():\n"
        f"    store = RedisStore(TrackerConfig(), url={redis_url!r}, key_prefix={prefix!r})\n"
        "    async with store.session('s'):\n"
        "        print('locked', flush=True)\n"
        "        await asyncio.sleep(3600)\n"
        "asyncio.run(main())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOP_JUDGE_")}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT
    )
    try:
        assert proc.stdout is not None
        assert (await anyio.to_thread.run_sync(proc.stdout.readline)).strip() == b"locked"
    finally:
        proc.kill()
        proc.wait()
    killed = time.monotonic()
    survivor = replica(redis_url, prefix)
    try:
        async with survivor.session("s") as tracker:
            waited = time.monotonic() - killed
            await tracker.turn_started(failing_repeat_history(1))
    finally:
        await survivor.aclose()
    assert DEFAULT_LOCK_LEASE_S <= 5.0
    assert 1.0 < waited < DEFAULT_LOCK_LEASE_S + KILL_SLACK_S


# -- the replica's cache of live trackers ---------------------------------------------------


class DecodeCounter:
    """Counts the sessions a store rebuilt from Redis bytes (cache misses)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import judge.service.store as store_module

        self.count = 0
        real = store_module.load_session

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(store_module, "load_session", counted)


async def test_cached_tracker_matches_one_restored_from_redis(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes = DecodeCounter(monkeypatch)
    history = alternation_history(N_TURNS)
    turns = prefixes(history, N_TURNS)
    cached, fresh = replica(redis_url, prefix), replica(redis_url, prefix)
    try:
        got = [await turn(cached, "s", h) for h in turns[:-1]]
        # One replica: every turn after the first reused its live tracker.
        assert decodes.count == 0
        # The same next turn on the cached tracker and on one restored from the store
        # (readonly: the restored copy is not saved) says the same.
        async with fresh.session("s", readonly=True) as restored:
            assert decodes.count == 1
            from_store = await restored.turn_started(turns[-1])
        got.append(await turn(cached, "s", turns[-1]))
        assert decodes.count == 1
    finally:
        await cached.aclose()
        await fresh.aclose()
    assert got[-1] == from_store
    assert got == await library_verdicts(history, N_TURNS)


async def test_another_replicas_save_invalidates_the_cache(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes = DecodeCounter(monkeypatch)
    history = failing_repeat_history(N_TURNS)
    turns = prefixes(history, N_TURNS)
    a, b = replica(redis_url, prefix), replica(redis_url, prefix)
    try:
        got = [await turn(a, "s", h) for h in turns[:3]]
        got.append(await turn(b, "s", turns[3]))  # B reads A's save
        assert decodes.count == 1
        got.append(await turn(a, "s", turns[4]))  # A's copy is stale: it must read B's
        assert decodes.count == 2
        got += [await turn(a, "s", h) for h in turns[5:]]
        assert decodes.count == 2
    finally:
        await a.aclose()
        await b.aclose()
    assert [v.turn for v in got] == list(range(1, N_TURNS + 1))
    assert got == await library_verdicts(history, N_TURNS)


async def test_a_turn_whose_lock_expired_is_neither_saved_nor_cached(
    redis_url: str, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalls past its lease, B runs the next turn meanwhile: A's save is fenced off,
    and A's half-way tracker is not reused for the turn after."""
    decodes = DecodeCounter(monkeypatch)
    history = failing_repeat_history(N_TURNS)
    turns = prefixes(history, N_TURNS)
    a, b = replica(redis_url, prefix), replica(redis_url, prefix)
    try:
        got = [await turn(a, "s", turns[0])]
        with pytest.raises(SessionLockLost):
            async with a.session("s") as stalled:
                await stalled.turn_started(turns[1])
                await a._redis.delete(f"{prefix}{{s}}:lock")  # the lease ran out
                got.append(await turn(b, "s", turns[1]))
        assert "s" not in a._cache
        got += [await turn(a, "s", h) for h in turns[2:]]
        assert decodes.count == 2  # B read A's first save; A read B's
    finally:
        await a.aclose()
        await b.aclose()
    assert [v.turn for v in got] == list(range(1, N_TURNS + 1))
    assert got == await library_verdicts(history, N_TURNS)


async def test_lock_is_released_after_every_kind_of_turn(redis_url: str, prefix: str) -> None:
    """Saved, failed, discarded: each frees the lock at once (no one waits out a lease)."""
    store = replica(redis_url, prefix)
    other = replica(redis_url, prefix, lock_wait_s=0.0)
    lock_key = f"{prefix}{{s}}:lock"
    try:
        await turn(store, "s", failing_repeat_history(1))
        assert await store._redis.exists(lock_key) == 0
        with pytest.raises(ValueError):
            await turn(store, "s", [{"role": "assistant", "tool_calls": 3}])
        assert await store._redis.exists(lock_key) == 0
        async with store.open("s") as session:
            session.discard()
        assert await store._redis.exists(lock_key) == 0
        assert (await turn(other, "s", failing_repeat_history(2))).turn == 2
    finally:
        await store.aclose()
        await other.aclose()
