"""Settings of the sidecar, from keyword arguments or ``LOOP_JUDGE_*`` environment variables.

The tracker's own settings stay in `judge.config.TrackerConfig` (same prefix, read when a
tracker is built); these are only about serving: where to bind, who may call, where
session state lives and how much of it to keep.
"""

from __future__ import annotations

import ipaddress

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
# In-memory LRU bound: a tracker is ~50-200 kB (detector windows, recent messages), so
# 10,000 sessions stay under ~2 GB on a replica.
DEFAULT_MAX_SESSIONS = 10_000
# Redis lock lease: renewed every third of it while a turn runs, so it only matters when a
# replica dies holding it: the session is usable again this long after the crash.
DEFAULT_LOCK_LEASE_S = 30.0
# How long a request waits for another request on the same session to finish. A turn with
# a judge check during an outage takes at most (timeout_s + 10 s retry budget + 1 s grace)
# x 2 stages = 82 s at the tracker defaults; waiting 90 s covers that, and longer means
# something is wrong and the caller should hear about it (503) rather than hang.
DEFAULT_LOCK_WAIT_S = 90.0
DEFAULT_KEY_PREFIX = "loop-judge:"


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


class ServerSettings(BaseSettings):
    """How the sidecar binds, authenticates and stores sessions.

    ``server_token`` is optional on loopback only: a sidecar reachable from the network
    without a token would let anyone read loop analyses of other agents' conversations and
    spend the judge's model budget.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    server_token: SecretStr | None = None
    redis_url: str | None = None
    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    max_body_bytes: int = Field(default=DEFAULT_MAX_BODY_BYTES, ge=1024)
    session_ttl_s: float = Field(default=DEFAULT_SESSION_TTL_S, gt=0)
    max_sessions: int = Field(default=DEFAULT_MAX_SESSIONS, ge=1)
    lock_lease_s: float = Field(default=DEFAULT_LOCK_LEASE_S, gt=0)
    lock_wait_s: float = Field(default=DEFAULT_LOCK_WAIT_S, ge=0)
    key_prefix: str = DEFAULT_KEY_PREFIX

    @field_validator("server_token", "redis_url", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        # An exported-but-empty variable means "not set", as in TrackerConfig.
        if isinstance(value, str) and not value.strip():
            return None
        return value

    def check_bind(self) -> None:
        """Refuse a network-reachable bind without a token (raises `ConfigError`)."""
        if self.server_token is None and not is_loopback(self.host):
            raise ConfigError(
                f"refusing to listen on {self.host} without a bearer token: set "
                f"{env_name('server_token')} (clients then send 'Authorization: Bearer "
                f"<token>'), or bind to 127.0.0.1 ({env_name('host')})"
            )
