"""The sidecar's settings and the checks a server runs on them before it binds.

The variables themselves, their defaults and how they are read are declared with every
other ``LOOP_JUDGE_*`` variable in `judge.config` (`ServerVariables`); this module adds
what only a server needs: its principals and tokens, the Host names it answers, and the
refusal to serve without a token off loopback.
"""

from __future__ import annotations

import ipaddress
import re

from judge.config import (
    DEFAULT_HOST,
    DEFAULT_KEEP_ALIVE_S,
    DEFAULT_KEY_PREFIX,
    DEFAULT_LOCK_LEASE_S,
    DEFAULT_LOCK_WAIT_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_STORE_BYTES,
    DEFAULT_PORT,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_SESSION_TTL_S,
    DEFAULT_TURN_CPU_BUDGET_S,
    DEFAULT_WORKER_THREADS,
    ServerVariables,
    env_name,
)
from judge.errors import ConfigError

# The defaults are re-exported: the sidecar's modules take them from here.
__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_KEEP_ALIVE_S",
    "DEFAULT_KEY_PREFIX",
    "DEFAULT_LOCK_LEASE_S",
    "DEFAULT_LOCK_WAIT_S",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_STORE_BYTES",
    "DEFAULT_PORT",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "DEFAULT_SESSION_TTL_S",
    "DEFAULT_TURN_CPU_BUDGET_S",
    "DEFAULT_WORKER_THREADS",
    "ServerSettings",
    "is_loopback",
]

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


class ServerSettings(ServerVariables):
    """How the sidecar binds, authenticates, stores sessions and bounds each request.

    A token is required unless the operator sets ``insecure_no_token`` (loopback only): a
    sidecar without one lets any local process, or a web page through DNS rebinding,
    read loop analyses of other agents' conversations and spend the judge's budget.
    """

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
