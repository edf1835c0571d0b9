"""Settings of the sidecar, from keyword arguments or ``LOOP_JUDGE_*`` environment variables.

The tracker's own settings stay in `judge.config.TrackerConfig` (same prefix, read when a
tracker is built); these are only about serving: where to bind, who may call, where
session state lives, how much of it to keep, and how much one request may cost.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from judge.config import ENV_PREFIX, env_name
from judge.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
# Unassigned by IANA and unused by the usual sidecars (Envoy 15000-15090, Dapr 3500/50001).
DEFAULT_PORT = 8787
# A 200-turn coding session whose tool results average 20 kB is ~4 MB of JSON; 8 MiB fits
# that twice over while still bounding what one request can make a replica hold.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
# A session idle this long is forgotten: agents pause for minutes (a human reviewing, a slow
# build), rarely for hours; matches the default idle timeout of most agent runtimes' sessions.
DEFAULT_SESSION_TTL_S = 3600.0
# In-memory LRU bound (and the Redis store's cache of live trackers): a saved state is 26 kB
# at the median turn of the labelled runs, 110 kB at p95, 125 kB at most, and bounded by
# max_state_bytes (2 MiB) whatever the input (evals/bench_state.py), so 10,000 typical
# sessions stay around 1 GB on a replica.
DEFAULT_MAX_SESSIONS = 10_000
# In-memory byte cap: the sessions' state as a save would write it (JSON), plus the
# history's last entry kept for the append API, which is as large as the agent made it (a
# 7.9 MB tool result pins 7.9 MB). evals/bench_sidecar.py prints both figures per session:
# a 30-turn session counts 30 kB and takes 87 kB of Python memory, one whose last result is
# 7.9 MB counts 8.0 MB and takes 8.1 MB; so with DEFAULT_MAX_SESSIONS the sessions of a
# replica stay near 1 GB in the usual case, and about this plus that when they are huge.
DEFAULT_MAX_STORE_BYTES = 1024 * 1024 * 1024
# Redis lock lease: renewed every third of it while a turn runs, so it only matters when a
# replica dies holding it: the session is usable again at most this long after the crash.
# Turns run off the event loop, so the renewal (every 1.7 s) is late only if the loop
# stalls that long; then the fenced save refuses the turn (409) rather than corrupt it.
DEFAULT_LOCK_LEASE_S = 5.0
# How long a request waits for another request on the same session to finish. A turn with
# a judge check during an outage takes at most (timeout_s + 10 s retry budget + 1 s grace)
# x 2 stages = 82 s at the tracker defaults; waiting 90 s covers that, and longer means
# something is wrong and the caller should hear about it (503) rather than hang.
DEFAULT_LOCK_WAIT_S = 90.0
DEFAULT_KEY_PREFIX = "loop-judge:"
# CPU seconds one turn (or preflight) may spend in the detectors before it is stopped and
# answered 413. A heuristics-only turn costs ~1 ms; re-reading a whole 8 MiB history (the
# body cap) after a rewrite costs ~1-2 s on one core of a 2-core CI machine; 10 s is a
# pathological input, not a slow machine.
DEFAULT_TURN_CPU_BUDGET_S = 10.0
# Threads that run turns off the event loop (40: anyio's default thread limiter, which
# turns ran under before the runner had its own pool). A
# turn holds its thread while its judge check waits for the model, so this also bounds
# how many judge checks run at once; CPU work is bounded by the GIL regardless.
DEFAULT_WORKER_THREADS = 40
# A request's head and body must have arrived this long after its first byte (slowloris).
# 8 MiB (the body cap) in 30 s needs 2.3 Mbit/s: any client on the same host or network.
DEFAULT_REQUEST_TIMEOUT_S = 30.0
# Idle keep-alive connections are closed after this (uvicorn's own default).
DEFAULT_KEEP_ALIVE_S = 5.0
# Open connections beyond this are answered 503 (uvicorn's limit_concurrency): below the
# usual 1,024 open-files limit of a process, so a connection flood cannot exhaust it.
DEFAULT_MAX_CONNECTIONS = 900
# A bearer token shorter than this is a placeholder ("changeme"), not a secret; 16 chars
# of `secrets.token_urlsafe()` carry 96 bits.
MIN_TOKEN_CHARS = 16
# A principal's name is a log field and part of every store key: short, no separators.
PRINCIPAL_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
# The principal of the single LOOP_JUDGE_SERVER_TOKEN, and of every caller when the
# operator opted out of tokens.
DEFAULT_PRINCIPAL = "default"
ANONYMOUS_PRINCIPAL = "anonymous"
# Host header values a loopback sidecar answers; anything else is a DNS-rebinding page
# in a browser (or a misrouted request) and gets 421.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def _parse_token_pairs(text: str, where: str) -> list[tuple[str, str]]:
    """``name=token`` pairs separated by commas or newlines (``#`` starts a comment line)."""
    pairs = []
    for raw in re.split(r"[,\n]", text):
        item = raw.strip()
        if not item or item.startswith("#"):
            continue
        name, sep, token = item.partition("=")
        if not sep:
            name, _, token = item.partition(" ")
        pairs.append((name.strip(), token.strip()))
        if not pairs[-1][1]:
            raise ConfigError(f"{where}: entry for principal {name.strip()!r} has no token")
    return pairs


class ServerSettings(BaseSettings):
    """How the sidecar binds, authenticates, stores sessions and bounds each request.

    A token is required unless the operator sets ``insecure_no_token`` (loopback only): a
    sidecar without one lets any local process, or a web page through DNS rebinding,
    read loop analyses of other agents' conversations and spend the judge's budget.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    server_token: SecretStr | None = Field(
        default=None, description="one bearer token; its principal is 'default'"
    )
    server_tokens: SecretStr | None = Field(
        default=None, description="several principals: 'name=token,name=token'"
    )
    server_tokens_file: Path | None = Field(
        default=None, description="a file of 'name=token' lines (# comments)"
    )
    insecure_no_token: bool = Field(
        default=False, description="serve without tokens (loopback binds only)"
    )
    allowed_hosts: str | None = Field(
        default=None,
        description="comma list of Host header names accepted besides the loopback "
        "names and the bind address; '*' accepts any",
    )
    redis_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    session_ttl_s: float = Field(default=DEFAULT_SESSION_TTL_S, gt=0)
    max_sessions: int = Field(default=DEFAULT_MAX_SESSIONS, ge=1)
    max_store_bytes: int = Field(
        default=DEFAULT_MAX_STORE_BYTES,
        ge=1,
        description="in-memory store: bytes of sessions held before new ones are refused (507)",
    )
    lock_lease_s: float = Field(default=DEFAULT_LOCK_LEASE_S, gt=0)
    lock_wait_s: float = Field(default=DEFAULT_LOCK_WAIT_S, ge=0)
    key_prefix: str = DEFAULT_KEY_PREFIX
    turn_cpu_budget_s: float = Field(default=DEFAULT_TURN_CPU_BUDGET_S, gt=0)
    worker_threads: int = Field(default=DEFAULT_WORKER_THREADS, ge=1)
    request_timeout_s: float = Field(default=DEFAULT_REQUEST_TIMEOUT_S, gt=0)
    keep_alive_s: float = Field(default=DEFAULT_KEEP_ALIVE_S, gt=0)
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1)
    access_log: bool = Field(
        default=True,
        description="one INFO line per request (uvicorn's access log); off, a busy "
        "replica serves 10-15% more requests per second",
    )

    @field_validator(
        "server_token",
        "server_tokens",
        "server_tokens_file",
        "redis_url",
        "allowed_hosts",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        # An exported-but-empty variable means "not set", as in TrackerConfig.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    def principals(self) -> dict[str, str]:
        """Token -> principal name, from every configured source; raises `ConfigError`.

        Names and tokens must each be unique: two principals sharing a token would share
        sessions, which is what principals exist to prevent.
        """
        pairs: list[tuple[str, str, str]] = []
        if self.server_token is not None:
            pairs.append((DEFAULT_PRINCIPAL, self.server_token.get_secret_value(), "server_token"))
        if self.server_tokens is not None:
            where = env_name("server_tokens")
            text = self.server_tokens.get_secret_value()
            pairs += [(n, t, where) for n, t in _parse_token_pairs(text, where)]
        if self.server_tokens_file is not None:
            where = f"{env_name('server_tokens_file')} ({self.server_tokens_file})"
            try:
                text = self.server_tokens_file.read_text("utf-8")
            except OSError as exc:
                raise ConfigError(f"{where}: cannot read it: {exc.strerror}") from exc
            pairs += [(n, t, where) for n, t in _parse_token_pairs(text, where)]
        tokens: dict[str, str] = {}
        for name, token, where in pairs:
            if not PRINCIPAL_PATTERN.fullmatch(name):
                raise ConfigError(
                    f"{where}: principal name {name[:80]!r} must be 1-64 of A-Z a-z 0-9 . _ -"
                )
            if len(token) < MIN_TOKEN_CHARS:
                raise ConfigError(
                    f"{where}: the token of principal {name!r} is shorter than "
                    f"{MIN_TOKEN_CHARS} characters (python -c 'import secrets; "
                    "print(secrets.token_urlsafe())' makes one)"
                )
            if token in tokens:
                raise ConfigError(
                    f"{where}: principals {tokens[token]!r} and {name!r} share a token"
                )
            if name in tokens.values():
                raise ConfigError(f"{where}: principal {name!r} is configured twice")
            tokens[token] = name
        return tokens

    def host_names(self) -> frozenset[str] | None:
        """Host header names this server answers (lower case, no port); None: any."""
        names = set(LOOPBACK_NAMES)
        if self.host not in ("0.0.0.0", "::", ""):
            names.add(self.host.strip("[]").lower())
        for item in (self.allowed_hosts or "").split(","):
            name = item.strip().lower()
            if name == "*":
                return None
            if name:
                names.add(name.strip("[]"))
        return frozenset(names)

    def check_bind(self) -> None:
        """Refuse a configuration that would serve unsafely (raises `ConfigError`).

        No token needs ``insecure_no_token``, and that only on loopback; tokens and the
        opt-out together are a contradiction, refused rather than guessed at.
        """
        tokens = self.principals()
        if tokens and self.insecure_no_token:
            raise ConfigError(
                f"{env_name('insecure_no_token')} is set but tokens are configured: "
                "remove one or the other"
            )
        if tokens:
            return
        if not self.insecure_no_token:
            raise ConfigError(
                f"no bearer token configured: set {env_name('server_token')} (or "
                f"{env_name('server_tokens')} / {env_name('server_tokens_file')} for "
                "several principals); clients send 'Authorization: Bearer <token>'. To "
                "serve without one on loopback, pass --insecure-no-token "
                f"({env_name('insecure_no_token')}=1)"
            )
        if not is_loopback(self.host):
            raise ConfigError(
                f"refusing to listen on {self.host} without a bearer token: "
                f"{env_name('insecure_no_token')} is for loopback binds only; set "
                f"{env_name('server_token')}, or bind to 127.0.0.1 ({env_name('host')})"
            )
