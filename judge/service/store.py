"""Where sessions live between turns: in this process, or in Redis for a fleet of replicas.

A store hands out one session's tracker at a time::

    async with store.session(key) as tracker:
        verdict = await tracker.turn_started(messages)

Entering loads the tracker (a fresh one for a new session) and takes the session's lock,
so turns of one session never interleave; leaving normally saves it. When the body
raises, nothing is saved, so a failed turn leaves the stored session as it was.
``readonly=True`` (preflight checks, which change no state) neither creates nor saves.
The server uses `open`, the same with the whole `Session` (the tracker plus what the
append API needs), which it may serialize itself off the event loop or `discard`.

Keys are opaque here: the server makes them ``<principal>/<session id>``, so sessions of
different principals never meet in a store.

Errors (all `StoreError`, a `LoopJudgeError`)::

    StoreError
    +-- StoreUnavailable   Redis cannot be reached (the server answers 503)
    +-- SessionBusy        another turn of the session held the lock too long (503)
    +-- SessionLockLost    the lock expired or the session was deleted mid-turn (409)
    +-- StoreFull          the in-memory store holds its byte cap of sessions (507)

Nothing a store holds can wedge a session for ever: a lock key without an expiry (none
of ours lacks one) is given a lease and then frees itself, and a session key holding
another type than ours is replaced as unreadable state is (logged, the session starts
over). Redis must not evict session keys (``maxmemory-policy noeviction``): an evicted
session would start over at turn 1; the store warns at its first turn when the policy
could evict, and the server reports a session whose history outgrew what is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio

from judge.config import TrackerConfig
from judge.errors import LoopJudgeError, StateError
from judge.llm.client import LLMClient
from judge.service.session_codec import (
    SessionData,
    StateFormatError,
    empty_state_bytes,
    held_bytes,
    load_session,
    load_tracker,
    new_tracker,
    pack_session,
    session_json,
)
from judge.service.settings import (
    DEFAULT_KEY_PREFIX,
    DEFAULT_LOCK_LEASE_S,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_STORE_BYTES,
    DEFAULT_SESSION_TTL_S,
)
from judge.state import MAX_STATE_BYTES
from judge.tracker import LoopTracker

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger("judge.service.store")

# How often a waiting request retries a held Redis lock. redis-py polls (default 0.1 s);
# 20 ms keeps the added latency of a contended turn below a typical turn's own cost.
LOCK_POLL_S = 0.02
# The lease is renewed this many times per lease period, so one missed renewal (a GC pause,
# a slow Redis) still leaves time for the next before the lock expires.
LOCK_RENEWALS_PER_LEASE = 3
# Bytes of randomness in a save's generation tag: a cached tracker is reused only if the
# stored tag is still the one this replica wrote, and 64 bits never collide by chance.
GENERATION_BYTES = 8

# Redis connections per replica. A turn holds one only for a round trip (never while its
# tracker runs), so 100 (redis-py's own default) is more than a replica's two cores can keep
# busy; past it, a request waits for a free connection rather than failing with
# "Too many connections" (which 1,000 concurrent sessions hit: ~1 request in 60 got 503).
REDIS_MAX_CONNECTIONS = 100
# How long a request waits for a free connection before it is a 503 (redis-py's default).
REDIS_POOL_WAIT_S = 20.0
# The one maxmemory-policy under which Redis never drops a session key: at its memory limit
# it refuses writes (a 503 the client retries) instead of evicting keys, and every other
# policy may evict ours (all of them have a TTL, so volatile-* policies take them too).
SAFE_EVICTION_POLICY = "noeviction"
# A served session's tracker state is counted exactly for the in-memory byte cap every this
# many turns: writing a 30-turn session's state costs ~2.6 ms, four times a turn, so at every
# turn it would make the memory store's turns ~40% dearer; every 64 it is ~40 us a turn.
# (A count at each session's first turn alone added ~15% to a 30-turn session's turns.)
REMEASURE_TURNS = 64
# Between exact counts, a state is taken to grow by this many bytes per byte of JSON of the
# messages a turn read: the benchmark's 30-turn sessions of short tool calls
# (evals/bench_sidecar.py) hold a 30 kB state for 11.7 kB of messages (2.6), a session of
# long prose messages ~1.2 of them; the next exact count corrects either.
STATE_BYTES_PER_NEW_BYTE = 2
# Bytes of randomness in a lock token: only the holder knows it, so only the holder can
# renew, save under or release the lock.
TOKEN_BYTES = 16

# The live-session index (the metrics gauge's) is refreshed by a session's saves at most
# once per this fraction of the idle TTL: a session then leaves the gauge at most 1/60 of
# its TTL early (1 minute of the default hour), and most turns save in one command; the
# index was a second command at every save.
INDEX_REFRESH_FRACTION = 1 / 60

# Each turn costs two round trips: one script takes the lock and reads the session, one
# saves it and releases the lock (redis-py's Lock took four: acquire, read, save, release,
# and each command costs the server's loop redis-py's own CPU besides the wait); a save
# that refreshes the index adds a third.

# Every script is sent as EVAL with its text, not registered with redis-py: its script
# object checks its client against a Protocol at each call (a measurable share of a Redis
# turn's CPU) and runs a pipeline holding one only after a SCRIPT EXISTS round trip of
# its own. Redis compiles a text once and keeps it by digest, and EVAL cannot miss a
# script that a restart or SCRIPT FLUSH lost.

# Takes the lock and reads the session, skipping its (large) data when the caller's
# cached copy is current.
# KEYS: lock, session hash. ARGV: our token, lease in ms, the generation the caller holds
# ('' for none). Returns 0 (the lock is held by another turn), -1 (held by a key without
# an expiry, which is given one now, so it frees itself within a lease), {} (no session),
# {gen} (the caller's copy is current), {gen, data}, or {'', '', type} (the session key
# held another type, now deleted: the session starts over).
_LOCK_AND_READ = """
if not redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('pttl', KEYS[1]) == -1 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return -1
  end
  return 0
end
local kind = redis.call('type', KEYS[2])['ok']
if kind ~= 'hash' and kind ~= 'none' then
  redis.call('del', KEYS[2])
  return {'', '', kind}
end
local gen = redis.call('hget', KEYS[2], 'gen')
if not gen then return {} end
if gen == ARGV[3] then return {gen} end
return {gen, redis.call('hget', KEYS[2], 'data')}
"""

# Saves and releases only while we still hold the lock (a fencing check): a replica that
# stalled past its lease must not overwrite the turn another replica ran meanwhile.
# ``len`` (the history's length) is kept beside the data so a turn that lost its lock can
# say where the stored history ends without decoding it.
# KEYS: lock, session hash. ARGV: our lock token, generation, data, TTL in ms, length.
_SAVE_AND_UNLOCK = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('hset', KEYS[2], 'gen', ARGV[2], 'data', ARGV[3], 'len', ARGV[5])
redis.call('pexpire', KEYS[2], ARGV[4])
redis.call('del', KEYS[1])
return 1
"""

# Extends the lease while the turn runs. KEYS: lock. ARGV: our token, lease in ms.
_RENEW = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('pexpire', KEYS[1], ARGV[2])
"""

# Releases the lock without saving (a failed or discarded turn). KEYS: lock. ARGV: token.
_UNLOCK = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('del', KEYS[1])
"""


class StoreError(LoopJudgeError):
    """The session store could not serve a session; ``session_id`` says which."""

    session_id: str | None

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
    side by side. ``expected_start``: where the stored history ends now (0 when the
    session is gone), so a client appending can continue from there (the 409 says it).
    """

    expected_start: int

    def __init__(self, message: str, *, session_id: str | None = None, expected_start: int = 0):
        super().__init__(message, session_id=session_id)
        self.expected_start = expected_start


class StoreFull(StoreError):
    """The in-memory store holds ``max_bytes`` of sessions: a new one is refused (507)
    rather than the replica running out of memory or a session forgotten unannounced."""


@dataclass(eq=False)
class Session(SessionData):
    """A session checked out of a store for one request.

    ``blob``: the caller's own `pack` of the finished turn (made off the event loop),
    saved as is; without one the store packs it. ``discard()``: the tracker may
    be half-updated (a turn stopped mid-way), so it is not saved, and a store that keeps
    live trackers forgets it.
    """

    blob: bytes | None = None
    discarded: bool = False
    # The turn changed nothing (a retried request answered from `SessionData.replay`):
    # the lock is released without a save.
    unchanged: bool = False
    # No state was stored for it: a new session, or one that expired, was evicted or was
    # unreadable (the server tells these apart by the history the client sends).
    fresh: bool = False
    # The generation this session was read at (`RedisStore`), to cache an unchanged one.
    generation: bytes | None = None
    # When this replica last put the session in the live-session index (`RedisStore`).
    indexed_at: float | None = None
    # Bytes of its state's JSON at its last save here (0: a fresh session; None: not
    # known, as for a session read from Redis): what the next save will cost, roughly.
    state_bytes: int | None = None
    # What it holds, as `measure` last counted it (the in-memory store's byte cap).
    held: int = 0
    # The tracker state's part of ``held`` when last counted exactly, what it is thought
    # to have grown by since, and the turns since.
    _state_part: int | None = None
    _state_growth: int = 0
    _unmeasured_turns: int = 0
    _tail_part: int = 0

    def discard(self) -> None:
        self.discarded = True

    def measure(self, new_bytes: int = 0, tail_bytes: int | None = None) -> int:
        """Count the bytes this session holds into ``held``: its kept history entry
        (``tail_bytes``, its JSON's size, counted by the turn that read it; None: the
        entry is the one counted before) and reply at every turn, since either can be as
        large as a request, and its tracker's state as a save would write it. Writing the
        state costs about as much as a turn, so it is counted exactly only every
        `REMEASURE_TURNS` turns; until the first count, and between counts, it is
        estimated: an empty state's bytes, plus `STATE_BYTES_PER_NEW_BYTE` per JSON byte
        of the messages each turn read (``new_bytes``), never past the state's cap."""
        if self._state_part is None:
            self._state_part = empty_state_bytes(self.tracker.config)
        if self._unmeasured_turns + 1 >= REMEASURE_TURNS:
            self.held, self._state_part = held_bytes(self)
            self._state_growth = self._unmeasured_turns = 0
            self._tail_part = self.held - self._state_part - self._replay_part()
            return self.held
        self._unmeasured_turns += 1
        self._state_growth += STATE_BYTES_PER_NEW_BYTE * new_bytes
        if tail_bytes is not None:
            self._tail_part = tail_bytes
        cap = self.tracker.config.max_state_bytes or MAX_STATE_BYTES
        state = min(self._state_part + self._state_growth, cap)
        self.held = state + self._tail_part + self._replay_part()
        return self.held

    def _replay_part(self) -> int:
        return len(self.replay.body) if self.replay is not None else 0

    def pack(self) -> bytes:
        """Serialize the session as it stands into ``blob`` (the bytes a store keeps),
        noting the size of its JSON in ``state_bytes``."""
        body = session_json(self.tracker, self.length, self.tail, self.replay)
        self.blob, self.state_bytes = pack_session(body), len(body)
        return self.blob


@runtime_checkable
class SessionStore(Protocol):
    """One seam for every backend: the server, the proxy guardrail and the framework
    integrations only use this."""

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


@runtime_checkable
class ServedStore(SessionStore, Protocol):
    """What the HTTP server needs beyond `SessionStore`: whole sessions, and whether they
    are serialized after each turn (so the server does it in the turn's worker thread)."""

    persists: bool
    config: TrackerConfig
    judge_client: LLMClient | None

    def open(self, key: str, *, readonly: bool = False) -> AbstractAsyncContextManager[Session]:
        """As `session`, yielding the whole `Session`."""
        ...


def _load_or_fresh(
    session_id: str,
    data: bytes | str | None,
    config: TrackerConfig,
    client: LLMClient | None,
) -> LoopTracker:
    """A tracker from plain `dump_tracker` bytes, or a fresh one if they are unreadable."""
    if data is None:
        return new_tracker(config, client)
    try:
        return load_tracker(config, data, client)
    except (StateError, StateFormatError) as exc:
        logger.warning("session %s: stored state unreadable (%s); starting over", session_id, exc)
        return new_tracker(config, client)


def _session_or_fresh(
    key: str, data: bytes | str | None, config: TrackerConfig, client: LLMClient | None
) -> Session:
    if data is not None:
        try:
            raw = data.encode("latin-1") if isinstance(data, str) else data
            loaded = load_session(config, raw, client)
            return Session(loaded.tracker, loaded.length, loaded.tail, loaded.replay)
        except StateError as exc:
            # Saved by another configuration or version (a rolling deploy): starting the
            # session over loses its history, but refusing it would wedge the agent until
            # the TTL. The key is logged, never the state (it quotes the conversation).
            logger.warning("session %s: stored state unreadable (%s); starting over", key, exc)
    return Session(new_tracker(config, client), state_bytes=0, fresh=True)


# -- in memory ---------------------------------------------------------------------------


@dataclass(eq=False)
class _Entry:
    session: Session
    last_used: float
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    users: int = 0


class MemoryStore:
    """Sessions in this process: an LRU bounded by ``max_sessions`` with an idle TTL, and
    by ``max_bytes`` of what they hold.

    The default for a single replica. Trackers stay live objects, so a turn costs no
    serialization. Sessions in use are never evicted; the count bound may be exceeded
    while every session is busy. The byte bound is never met by forgetting a session: at
    it, a new session is refused (`StoreFull`, 507) and those already held go on. A turn
    counts its session's bytes (`Session.measure`); the total may pass the bound by what
    the turns running at that moment add.
    """

    kind = "memory"
    persists = False

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        judge_client: LLMClient | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        max_bytes: int | None = DEFAULT_MAX_STORE_BYTES,
        session_ttl_s: float = DEFAULT_SESSION_TTL_S,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config if config is not None else TrackerConfig()
        self.judge_client = judge_client
        self._max = max_sessions
        self.max_bytes = max_bytes
        # What the held sessions hold, by their last `Session.measure`.
        self.bytes_held = 0
        self._ttl = session_ttl_s
        self._lock_wait = lock_wait_s
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def measures(self) -> bool:
        """Whether a turn must count its session's bytes (`Session.measure`)."""
        return self.max_bytes is not None

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes_held -= entry.session.held

    def _expire(self, now: float) -> None:
        # Runs on every request: walks only the expired head (oldest use first), never
        # copies the whole table.
        cutoff = now - self._ttl
        expired = []
        for sid, entry in self._entries.items():
            if entry.last_used > cutoff:
                break
            if entry.users == 0:
                expired.append(sid)
        for sid in expired:
            self._drop(sid)

    def _evict(self) -> None:
        excess = len(self._entries) - self._max
        if excess <= 0:
            return
        for sid in list(self._entries):
            if excess <= 0:
                break
            if self._entries[sid].users == 0:
                logger.info("session %s evicted: more than %d sessions held", sid, self._max)
                self._drop(sid)
                excess -= 1

    def _use(self, key: str, now: float) -> _Entry | None:
        """The session's entry, if any, marked in use."""
        entry = self._entries.get(key)
        return self._mark(key, entry, now) if entry is not None else None

    def _mark(self, key: str, entry: _Entry, now: float) -> _Entry:
        """Mark ``entry`` in use (so eviction spares it) and most recent."""
        entry.users += 1
        entry.last_used = now
        self._entries.move_to_end(key)
        self._evict()
        return entry

    @asynccontextmanager
    async def open(self, key: str, *, readonly: bool = False) -> AsyncIterator[Session]:
        now = self._clock()
        self._expire(now)
        entry = self._use(key, now)
        if entry is None:
            if not readonly:
                self._check_room(key)
            # Building a tracker costs milliseconds of CPU: off the loop.
            fresh = Session(
                await anyio.to_thread.run_sync(new_tracker, self.config, self.judge_client),
                fresh=True,
            )
            if readonly:  # a preflight on an unknown session: a fresh tracker, not kept
                yield fresh
                return
            # Another request may have made the session meanwhile: then that one is used.
            now = self._clock()
            entry = self._use(key, now)
            if entry is None:
                entry = self._entries[key] = _Entry(fresh, now)
                self._mark(key, entry, now)
        try:
            # Readers lock too: turns run in worker threads, and a preflight must not read
            # detector state while a turn is changing it.
            try:
                # The usual case, without a cancel scope. Unlike acquire() it neither
                # yields nor checks for cancellation: an inline turn then runs to its end
                # without giving the loop a turn, as it would once it held the lock.
                entry.lock.acquire_nowait()
            except anyio.WouldBlock:
                try:
                    with anyio.fail_after(self._lock_wait):
                        await entry.lock.acquire()
                except TimeoutError:
                    raise SessionBusy(
                        f"session {key!r} is busy with another turn", session_id=key
                    ) from None
            before = entry.session.held
            try:
                yield entry.session
            finally:
                entry.lock.release()
                entry.last_used = self._clock()
                if self._entries.get(key) is entry:
                    self.bytes_held += entry.session.held - before
                    if entry.session.discarded:
                        self._drop(key)
        finally:
            entry.users -= 1

    def _check_room(self, key: str) -> None:
        """Refuse a new session while the held ones are at the byte cap (`StoreFull`)."""
        if self.max_bytes is None or self.bytes_held < self.max_bytes:
            return
        raise StoreFull(
            f"the in-memory session store holds {self.bytes_held:,} bytes of "
            f"{len(self._entries):,} sessions, at its cap of {self.max_bytes:,} "
            "(LOOP_JUDGE_MAX_STORE_BYTES): no new session until idle ones expire "
            "(LOOP_JUDGE_SESSION_TTL_S) or are deleted; raise the cap, or use Redis",
            session_id=key,
        )

    @asynccontextmanager
    async def session(
        self, session_id: str, *, readonly: bool = False
    ) -> AsyncIterator[LoopTracker]:
        async with self.open(session_id, readonly=readonly) as session:
            yield session.tracker

    async def delete(self, session_id: str) -> bool:
        existed = session_id in self._entries
        self._drop(session_id)
        return existed

    async def live_sessions(self) -> int:
        self._expire(self._clock())
        return len(self._entries)

    async def ping(self) -> None:
        return None

    async def aclose(self) -> None:
        self._entries.clear()
        self.bytes_held = 0


# -- Redis -------------------------------------------------------------------------------


def _config_value(reply: Any, name: str) -> str | None:
    """One setting of a CONFIG GET reply (keys are bytes or str, as the client decodes)."""
    if not isinstance(reply, dict):
        return None
    value = reply.get(name, reply.get(name.encode()))
    if value is None:
        return None
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


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

    Each session is one hash (``gen``: a random tag of the last save; ``data``: the
    compressed session, `dump_session`) expiring after the idle TTL, and one lock key (a
    random token with a lease). A turn takes the lock and reads the session in one script,
    runs, and saves and unlocks in another that writes only while the token is still ours;
    the lease is renewed while a turn runs past a third of it, so only a replica that dies
    holding it makes others wait, for at most one lease (5 s by default). Nothing is lost
    when a replica restarts.

    Each replica keeps the live trackers it saved last (an LRU of ``max_sessions``) with
    their tags: when the stored tag is still its own, the turn reuses the tracker instead
    of reading and rebuilding it (the usual case behind a sticky load balancer, and always
    with one replica); any other replica's save changes the tag, and the state is read.
    A cached session is taken out of the cache for the turn and put back only after a
    fenced save succeeded, so a failed, discarded or unsaved turn is never reused.

    Both keys of a session share a hash tag, so the scripts also run on Redis Cluster.
    The live-session index (a sorted set) is for the metrics gauge only.
    """

    kind = "redis"
    persists = True

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
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if (url is None) == (redis is None):
            raise ValueError("RedisStore needs exactly one of url= or redis=")
        if redis is None:
            from redis.asyncio import BlockingConnectionPool, Redis

            pool = BlockingConnectionPool.from_url(
                str(url), max_connections=REDIS_MAX_CONNECTIONS, timeout=REDIS_POOL_WAIT_S
            )
            redis = Redis.from_pool(pool)  # closes the pool with the client
        self.config = config if config is not None else TrackerConfig()
        self.judge_client = judge_client
        self._redis = redis
        self._ttl_ms = max(1, round(session_ttl_s * 1000))
        self._ttl_s = session_ttl_s
        self._index_refresh_s = session_ttl_s * INDEX_REFRESH_FRACTION
        self._lease = lock_lease_s
        self._wait = lock_wait_s
        self._prefix = key_prefix
        self._index_key = f"{key_prefix}sessions"
        # Wall clock, not monotonic: index scores are compared across replicas.
        self._clock = clock
        self._lease_ms = max(1, round(lock_lease_s * 1000))
        self._cache: OrderedDict[str, tuple[bytes, Session]] = OrderedDict()
        self._cache_size = max_sessions
        # Whether Redis's eviction policy was looked at (`check_eviction_policy`).
        self._policy_checked = False
        self._policy: str | None = None

    def _keys(self, key: str) -> tuple[str, str]:
        base = f"{self._prefix}{{{key}}}"
        return f"{base}:session", f"{base}:lock"

    async def _renew(self, lock_key: str, token: bytes) -> None:
        """Keep the lease alive while the turn runs (cancelled when it ends)."""
        from redis.exceptions import RedisError

        while True:
            try:
                renewed = await self._redis.eval(_RENEW, 1, lock_key, token, self._lease_ms)
            except RedisError as exc:
                logger.warning("could not renew session lock %s: %s", lock_key, exc)
                return
            if not renewed:
                # Lost (expired, deleted): the fenced save will refuse.
                logger.warning("could not renew session lock %s: it is no longer ours", lock_key)
                return
            await asyncio.sleep(self._lease / LOCK_RENEWALS_PER_LEASE)

    async def _index(self, key: str, now: float) -> float | None:
        """Put ``key`` in the live-session index at ``now``; when it was indexed (None if
        Redis refused: the next save tries again). Only the metrics gauge reads the index,
        so a failure here is logged, never the turn's."""
        from redis.exceptions import RedisError

        try:
            await self._redis.zadd(self._index_key, {key: now})
        except RedisError as exc:
            logger.warning("session %s not put in the live-session index: %s", key, exc)
            return None
        return now

    async def _lock_and_fetch(
        self, key: str, session_key: str, lock_key: str, token: bytes
    ) -> Session:
        """Take the session's lock (waiting up to ``lock_wait_s``) and read the session:
        this replica's cached copy when the stored tag is still ours."""
        cached = self._cache.pop(key, None)  # in use now; put back only after a save
        generation = cached[0] if cached is not None else b""
        deadline = time.monotonic() + self._wait
        while True:
            with _redis_errors(key):
                reply = await self._redis.eval(
                    _LOCK_AND_READ, 2, lock_key, session_key, token, self._lease_ms, generation
                )
            if reply == -1:
                logger.warning(
                    "session %s: its lock key %s had no expiry (not set by loop-judge, whose "
                    "locks always have a lease); it now expires in %g s",
                    key,
                    lock_key,
                    self._lease,
                )
            elif reply != 0:
                break
            if time.monotonic() + LOCK_POLL_S > deadline:
                raise SessionBusy(
                    f"session {key!r} is busy with another turn (waited {self._wait:g} s)",
                    session_id=key,
                )
            await asyncio.sleep(LOCK_POLL_S)
        if len(reply) == 1 and cached is not None:
            session = cached[1]
            session.blob, session.discarded, session.unchanged = None, False, False
            session.generation = reply[0]
            return session
        if len(reply) == 3:
            kind = reply[2].decode("latin-1") if isinstance(reply[2], bytes) else str(reply[2])
            logger.warning(
                "session %s: its key %s held a Redis %s, not a session; deleted, the "
                "session starts over",
                key,
                session_key,
                kind,
            )
        data = reply[1] if len(reply) == 2 else None
        try:
            # Decoding a state (or building a tracker) costs milliseconds: off the loop.
            session = await anyio.to_thread.run_sync(
                _session_or_fresh, key, data, self.config, self.judge_client
            )
        except BaseException:  # cancelled, or a bug: the lock is ours, free it now
            with anyio.CancelScope(shield=True):
                await self._release(lock_key, token)
            raise
        session.generation = reply[0] if len(reply) == 2 else None
        return session

    async def _read_data(self, key: str, session_key: str) -> bytes | str | None:
        """The session's stored bytes without a lock; None for none, or for a key of
        another type (which the next turn replaces)."""
        from redis.exceptions import ResponseError

        try:
            with _redis_errors(key):
                data: bytes | str | None = await self._redis.hget(session_key, "data")
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, ResponseError) and "WRONGTYPE" in str(exc.__cause__):
                return None
            raise
        return data

    async def _stored_length(self, key: str, session_key: str) -> int:
        """Where the stored history of the session ends now (0 when there is none)."""
        from redis.exceptions import ResponseError

        try:
            with _redis_errors(key):
                length = await self._redis.hget(session_key, "len")
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, ResponseError) and "WRONGTYPE" in str(exc.__cause__):
                return 0  # not a session: the next turn replaces it
            raise
        if length is not None:
            return int(length)
        data = await self._read_data(key, session_key)
        if data is None:
            return 0
        # Saved before the length was kept beside the data: read it from the session.
        session = await anyio.to_thread.run_sync(
            _session_or_fresh, key, data, self.config, self.judge_client
        )
        return session.length

    async def check_eviction_policy(self) -> str | None:
        """Warn once if Redis may evict session keys; the policy, or None where the
        server does not say (CONFIG disabled, as on some managed services)."""
        from redis.exceptions import RedisError

        if self._policy_checked:
            return self._policy
        self._policy_checked = True
        try:
            config = await self._redis.config_get("maxmemory-policy")
            maxmemory = await self._redis.config_get("maxmemory")
        except RedisError as exc:
            logger.info("could not read Redis maxmemory-policy (%s); it must be noeviction", exc)
            return None
        policy = _config_value(config, "maxmemory-policy")
        limit = _config_value(maxmemory, "maxmemory")
        self._policy = policy
        if policy not in (None, SAFE_EVICTION_POLICY) and limit not in (None, "0"):
            logger.warning(
                "Redis maxmemory-policy is %s with maxmemory %s: at the limit Redis evicts "
                "session keys and those sessions start over at turn 1; set "
                "maxmemory-policy %s (a full Redis then refuses writes: 503, not a silent "
                "reset)",
                policy,
                limit,
                SAFE_EVICTION_POLICY,
            )
        return policy

    @asynccontextmanager
    async def open(self, key: str, *, readonly: bool = False) -> AsyncIterator[Session]:
        session_key, lock_key = self._keys(key)
        if not self._policy_checked:
            await self.check_eviction_policy()
        if readonly:
            # No lock and no cache: a fresh copy that nobody else is changing.
            data = await self._read_data(key, session_key)
            yield await anyio.to_thread.run_sync(
                _session_or_fresh, key, data, self.config, self.judge_client
            )
            return

        token = secrets.token_hex(TOKEN_BYTES).encode()
        session = await self._lock_and_fetch(key, session_key, lock_key, token)
        # The lease is renewed only once a turn has run a third of it (most end sooner):
        # a timer, not a task per turn. A plain task when it fires, not a task group: the
        # body of this context manager runs in the caller's scope.
        renewal: asyncio.Task[None] | None = None

        def start_renewal() -> None:
            nonlocal renewal
            renewal = asyncio.create_task(self._renew(lock_key, token))

        timer = asyncio.get_running_loop().call_later(
            self._lease / LOCK_RENEWALS_PER_LEASE, start_renewal
        )
        saved = False
        try:
            yield session
            if session.discarded:
                return
            if session.unchanged:
                # Nothing to save; the copy read is still the stored one, so it is cached
                # as it was (the lock is released below).
                if session.generation is not None:
                    self._cache_put(key, session.generation, session)
                return
            blob = session.blob if session.blob is not None else session.pack()
            generation = secrets.token_hex(GENERATION_BYTES).encode()
            timer.cancel()
            if renewal is not None:
                renewal.cancel()
            # Every script is sent as EVAL with its text (see _LOCK_AND_READ).
            save = (_SAVE_AND_UNLOCK, 2, lock_key, session_key, token, generation, blob)
            with _redis_errors(key):
                ok = await self._redis.eval(*save, self._ttl_ms, session.length)
            if not ok:
                expected = await self._stored_length(key, session_key)
                raise SessionLockLost(
                    f"session {key!r}: lock expired or session deleted during the "
                    f"turn (a stalled replica, a Redis restart); its result was not saved: "
                    f"the stored history ends at message {expected}, continue from there",
                    session_id=key,
                    expected_start=expected,
                )
            saved = True
            session.blob = None
            now = self._clock()
            indexed = session.indexed_at
            if indexed is None or now - indexed >= self._index_refresh_s:
                # Only after a save that landed, so a deleted session is not indexed again.
                session.indexed_at = await self._index(key, now)
            session.generation = generation
            self._cache_put(key, generation, session)
        finally:
            timer.cancel()
            if renewal is not None:
                renewal.cancel()
            if not saved:
                with anyio.CancelScope(shield=True):
                    await self._release(lock_key, token)

    def _cache_put(self, key: str, generation: bytes, session: Session) -> None:
        self._cache[key] = (generation, session)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)

    @asynccontextmanager
    async def session(
        self, session_id: str, *, readonly: bool = False
    ) -> AsyncIterator[LoopTracker]:
        async with self.open(session_id, readonly=readonly) as session:
            yield session.tracker

    async def _release(self, lock_key: str, token: bytes) -> None:
        """Unlock without saving; a lock already gone (expired, deleted, saved with) or
        a Redis error is fine: it frees itself at the end of the lease anyway."""
        from redis.exceptions import RedisError

        try:
            await self._redis.eval(_UNLOCK, 1, lock_key, token)
        except RedisError as exc:
            logger.debug("session lock %s not released: %s", lock_key, exc)

    async def delete(self, session_id: str) -> bool:
        session_key, lock_key = self._keys(session_id)
        self._cache.pop(session_id, None)
        with _redis_errors(session_id):
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.delete(session_key, lock_key)
                pipe.zrem(self._index_key, session_id)
                removed, _ = await pipe.execute()
        return bool(removed)

    async def live_sessions(self) -> int:
        with _redis_errors():
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.zremrangebyscore(self._index_key, "-inf", self._clock() - self._ttl_s)
                pipe.zcard(self._index_key)
                _, count = await pipe.execute()
        return int(count)

    async def ping(self) -> None:
        with _redis_errors():
            await self._redis.ping()

    async def aclose(self) -> None:
        self._cache.clear()
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
    max_store_bytes: int | None = DEFAULT_MAX_STORE_BYTES,
) -> MemoryStore | RedisStore:
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
            max_sessions=max_sessions,
        )
    return MemoryStore(
        config,
        judge_client=judge_client,
        max_sessions=max_sessions,
        max_bytes=max_store_bytes,
        session_ttl_s=session_ttl_s,
        lock_wait_s=lock_wait_s,
    )


def store_from_settings(
    settings: Any,
    config: TrackerConfig | None = None,
    *,
    judge_client: LLMClient | None = None,
) -> MemoryStore | RedisStore:
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
        max_store_bytes=settings.max_store_bytes,
    )
