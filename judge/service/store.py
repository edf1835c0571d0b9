"""Where sessions live between turns: in this process, or in Redis for a fleet of replicas.

A store hands out one session's tracker at a time::

    async with store.session(session_id) as tracker:
        verdict = await tracker.turn_started(messages)

Entering loads the tracker (a fresh one for a new session) and takes the session's lock,
so turns of one session never interleave; leaving normally saves it. When the body
raises, nothing is saved, so a failed turn leaves the stored session as it was.
``readonly=True`` (preflight checks, which change no state) neither locks nor saves.

Errors (all `StoreError`, a `LoopJudgeError`)::

    StoreError
    +-- StoreUnavailable   Redis cannot be reached (the server answers 503)
    +-- SessionBusy        another turn of the session held the lock too long (503)
    +-- SessionLockLost    the lock expired or the session was deleted mid-turn (409)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from judge.config import TrackerConfig
from judge.errors import LoopJudgeError, StateError
from judge.llm._litellm import LLMClient
from judge.service.settings import (
    DEFAULT_KEY_PREFIX,
    DEFAULT_LOCK_LEASE_S,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SESSION_TTL_S,
)
from judge.service.state import StateFormatError, dump_tracker, load_tracker, new_tracker
from judge.tracker import LoopTracker

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from redis.asyncio.lock import Lock as RedisLock

logger = logging.getLogger("judge.service.store")

# How often a waiting request retries a held Redis lock. redis-py polls (default 0.1 s);
# 20 ms keeps the added latency of a contended turn below a typical turn's own cost.
LOCK_POLL_S = 0.02
# The lease is renewed this many times per lease period, so one missed renewal (a GC pause,
# a slow Redis) still leaves time for the next before the lock expires.
LOCK_RENEWALS_PER_LEASE = 3

# Saves only while we still hold the lock (a fencing check): a replica that stalled past
# its lease must not overwrite the turn another replica ran meanwhile.
# KEYS: lock, state. ARGV: our lock token, state bytes, TTL in ms.
_SAVE_IF_OWNER = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3])
return 1
"""


class StoreError(LoopJudgeError):
    """The session store could not serve a session; ``session_id`` says which."""

    def __init__(self, message: str, *, session_id: str | None = None):
        super().__init__(message)
        self.session_id = session_id


class StoreUnavailable(StoreError):
    """The backing store (Redis) did not answer; retrying later may work."""


class SessionBusy(StoreError):
    """Another turn of this session held its lock longer than ``lock_wait_s``."""


class SessionLockLost(StoreError):
    """The session's lock expired or the session was deleted while this turn ran.

    The turn's result was not saved, so the stored session never holds two turns that ran
    side by side.
    """


@runtime_checkable
class SessionStore(Protocol):
    """One seam for every backend: the server and the proxy guardrail only use this."""

    kind: str

    def session(
        self, session_id: str, *, readonly: bool = False
    ) -> AbstractAsyncContextManager[LoopTracker]:
        """Lock, load, yield and (unless the body raised, or ``readonly``) save a session."""
        ...

    async def delete(self, session_id: str) -> bool:
        """Forget a session; True when it existed."""
        ...

    async def live_sessions(self) -> int:
        """Sessions used within the idle TTL (for the sessions-live gauge)."""
        ...

    async def ping(self) -> None:
        """Raise `StoreUnavailable` when the store cannot serve requests."""
        ...

    async def aclose(self) -> None:
        """Release connections; the store is unusable afterwards."""
        ...


def _load_or_fresh(
    session_id: str,
    data: bytes | str | None,
    config: TrackerConfig,
    client: LLMClient | None,
) -> LoopTracker:
    if data is None:
        return new_tracker(config, client)
    try:
        return load_tracker(config, data, client)
    except (StateError, StateFormatError) as exc:
        # Saved by another configuration or version (a rolling deploy): starting the session
        # over loses its history, but refusing it would wedge the agent until the TTL.
        logger.warning("session %s: stored state unreadable (%s); starting over", session_id, exc)
        return new_tracker(config, client)


# -- in memory ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Entry:
    tracker: LoopTracker
    last_used: float
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0


class MemoryStore:
    """Sessions in this process: an LRU bounded by ``max_sessions`` with an idle TTL.

    The default for a single replica. Trackers stay live objects, so a turn costs no
    serialization. Sessions in use are never evicted; the bound may be exceeded while
    every session is busy.
    """

    kind = "memory"

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        judge_client: LLMClient | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config if config is not None else TrackerConfig()
        self._client = judge_client
        self._max = max_sessions
        self._ttl = session_ttl_s
        self._lock_wait = lock_wait_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self, now: float) -> None:
        cutoff = now - self._ttl
        for sid in list(self._entries):  # oldest use first
            entry = self._entries[sid]
            if entry.last_used > cutoff:
                break
            if entry.users == 0:
                del self._entries[sid]

    def _evict(self) -> None:
        excess = len(self._entries) - self._max
        if excess <= 0:
            return
        for sid in list(self._entries):
            if excess <= 0:
                break
            if self._entries[sid].users == 0:
                del self._entries[sid]
                excess -= 1

    def _use(self, session_id: str, now: float) -> _Entry:
        """The session's entry, marked in use (so eviction spares it) and most recent."""
        entry = self._entries.get(session_id)
        if entry is None:
            entry = _Entry(new_tracker(self.config, self._client), now)
            self._entries[session_id] = entry
        entry.users += 1
        entry.last_used = now
        self._entries.move_to_end(session_id)
        self._evict()
        return entry

    @asynccontextmanager
    async def session(
        self, session_id: str, *, readonly: bool = False
    ) -> AsyncIterator[LoopTracker]:
        now = self._clock()
        self._expire(now)
        if readonly:
            entry = self._entries.get(session_id)
            yield entry.tracker if entry is not None else new_tracker(self.config, self._client)
            return
        entry = self._use(session_id, now)
        try:
            try:
                with anyio.fail_after(self._lock_wait):
                    await entry.lock.acquire()
            except TimeoutError:
                raise SessionBusy(
                    f"session {session_id!r} is busy with another turn", session_id=session_id
                ) from None
            try:
                yield entry.tracker
            finally:
                entry.lock.release()
                entry.last_used = self._clock()
        finally:
            entry.users -= 1

    async def delete(self, session_id: str) -> bool:
        return self._entries.pop(session_id, None) is not None

    async def live_sessions(self) -> int:
        self._expire(self._clock())
        return len(self._entries)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._entries.clear()


# -- Redis -------------------------------------------------------------------------------


@contextlib.contextmanager
def _redis_errors(session_id: str | None = None) -> Iterator[None]:
    """Translate redis-py's failures into ours, at this one boundary."""
    from redis.exceptions import RedisError

    try:
        yield
    except RedisError as exc:
        raise StoreUnavailable(
            f"session store (Redis) failed: {type(exc).__name__}: {exc}", session_id=session_id
        ) from exc


class RedisStore:
    """Sessions in Redis, shared by every replica pointed at the same server.

    Each session is one key holding the tracker's bytes (expiring after the idle TTL)
    and one lock key (a redis-py `Lock`: a random token with a lease). A turn takes the
    lock, loads, runs, and saves with a script that writes only while the token is still
    ours; the lease is renewed in the background while the turn runs, so only a replica
    that dies holding it makes others wait, for at most one lease. Nothing lives in the
    replica between turns, so restarting it loses nothing.

    Both keys of a session share a hash tag, so the save script also runs on Redis Cluster.
    The live-session index (a sorted set) is for the metrics gauge only.
    """

    kind = "redis"

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        url: str | None = None,
        redis: Redis | None = None,
        judge_client: LLMClient | None = None,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        lock_lease_s: float = DEFAULT_LOCK_LEASE_S,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (url is None) == (redis is None):
            raise ValueError("RedisStore needs exactly one of url= or redis=")
        if redis is None:
            from redis.asyncio import Redis

            redis = Redis.from_url(url)  # type: ignore[arg-type]
        self.config = config if config is not None else TrackerConfig()
        self._redis = redis
        self._client = judge_client
        self._ttl_ms = max(1, round(session_ttl_s * 1000))
        self._ttl_s = session_ttl_s
        self._lease = lock_lease_s
        self._wait = lock_wait_s
        self._prefix = key_prefix
        self._index = f"{key_prefix}sessions"
        # Wall clock, not monotonic: index scores are compared across replicas.
        self._clock = clock
        self._save = redis.register_script(_SAVE_IF_OWNER)

    def _keys(self, session_id: str) -> tuple[str, str]:
        base = f"{self._prefix}{{{session_id}}}"
        return f"{base}:state", f"{base}:lock"

    async def _renew(self, lock: RedisLock) -> None:
        """Keep the lease alive while the turn runs (cancelled when it ends)."""
        from redis.exceptions import LockError, RedisError

        while True:
            await asyncio.sleep(self._lease / LOCK_RENEWALS_PER_LEASE)
            try:
                await lock.reacquire()
            except (LockError, RedisError) as exc:
                # Lost (expired, deleted) or Redis gone: the fenced save will refuse.
                logger.warning("could not renew session lock %s: %s", lock.name, exc)
                return

    @asynccontextmanager
    async def session(
        self, session_id: str, *, readonly: bool = False
    ) -> AsyncIterator[LoopTracker]:
        state_key, lock_key = self._keys(session_id)
        if readonly:
            with _redis_errors(session_id):
                data = await self._redis.get(state_key)
            yield _load_or_fresh(session_id, data, self.config, self._client)
            return

        lock = self._redis.lock(
            lock_key,
            timeout=self._lease,
            blocking_timeout=self._wait,
            sleep=LOCK_POLL_S,
            thread_local=False,  # one event loop thread serves every request
        )
        with _redis_errors(session_id):
            acquired = await lock.acquire()
        if not acquired:
            raise SessionBusy(
                f"session {session_id!r} is busy with another turn (waited {self._wait:g} s)",
                session_id=session_id,
            )
        # A plain task, not a task group: the body of this context manager runs in the
        # caller's scope (anyio: never yield from inside a task group).
        renewal = asyncio.create_task(self._renew(lock))
        try:
            with _redis_errors(session_id):
                data = await self._redis.get(state_key)
            tracker = _load_or_fresh(session_id, data, self.config, self._client)
            yield tracker
            blob = dump_tracker(tracker)
            with _redis_errors(session_id):
                async with self._redis.pipeline(transaction=False) as pipe:
                    await self._save(
                        keys=[lock_key, state_key],
                        args=[lock.local.token, blob, self._ttl_ms],
                        client=pipe,
                    )
                    pipe.zadd(self._index, {session_id: self._clock()})
                    saved, _ = await pipe.execute()
            if not saved:
                raise SessionLockLost(
                    f"session {session_id!r}: lock expired or session deleted during the "
                    "turn; its result was not saved",
                    session_id=session_id,
                )
        finally:
            renewal.cancel()
            with anyio.CancelScope(shield=True):
                await self._release(lock)

    @staticmethod
    async def _release(lock: RedisLock) -> None:
        from redis.exceptions import LockError, RedisError

        try:
            await lock.release()
        except (LockError, RedisError) as exc:
            # Already expired or deleted; it frees itself at the end of the lease anyway.
            logger.debug("session lock %s not released: %s", lock.name, exc)

    async def delete(self, session_id: str) -> bool:
        state_key, lock_key = self._keys(session_id)
        with _redis_errors(session_id):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(state_key, lock_key)
                pipe.zrem(self._index, session_id)
                removed, _ = await pipe.execute()
        return bool(removed)

    async def live_sessions(self) -> int:
        with _redis_errors():
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zremrangebyscore(self._index, "-inf", self._clock() - self._ttl_s)
                pipe.zcard(self._index)
                _, count = await pipe.execute()
        return int(count)

    async def ping(self) -> None:
        with _redis_errors():
            await self._redis.ping()

    async def aclose(self) -> None:
        await self._redis.aclose()


def build_store(
    config: TrackerConfig,
    *,
    redis_url: str | None,
    judge_client: LLMClient | None = None,
    session_ttl_s: float = DEFAULT_SESSION_TTL_S,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    lock_lease_s: float = DEFAULT_LOCK_LEASE_S,
    lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
    key_prefix: str = DEFAULT_KEY_PREFIX,
) -> SessionStore:
    """Redis when a URL is given, else in memory: the server and guardrail share this."""
    if redis_url:
        return RedisStore(
            config,
            url=redis_url,
            judge_client=judge_client,
            session_ttl_s=session_ttl_s,
            lock_lease_s=lock_lease_s,
            lock_wait_s=lock_wait_s,
            key_prefix=key_prefix,
        )
    return MemoryStore(
        config,
        judge_client=judge_client,
        max_sessions=max_sessions,
        session_ttl_s=session_ttl_s,
        lock_wait_s=lock_wait_s,
    )


def store_from_settings(
    settings: Any,
    config: TrackerConfig | None = None,
    *,
    judge_client: LLMClient | None = None,
) -> SessionStore:
    """The store a `ServerSettings` describes, with trackers built from ``config``."""
    return build_store(
        config if config is not None else TrackerConfig(),
        redis_url=settings.redis_url,
        judge_client=judge_client,
        session_ttl_s=settings.session_ttl_s,
        max_sessions=settings.max_sessions,
        lock_lease_s=settings.lock_lease_s,
        lock_wait_s=settings.lock_wait_s,
        key_prefix=settings.key_prefix,
    )
