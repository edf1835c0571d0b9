"""Redact secrets from text before it is sent to a judge model.

An agent's history routinely holds credentials: a ``cat .env``, a ``curl -H
"Authorization: ..."``, a stack trace printing a connection URL. The judge only needs to
see that the agent is stuck, never the secret itself, so every secret-looking span is
replaced by a marker ``[REDACTED:<kind>]`` that still tells the judge what was there.

The rules, in the order they run (a later rule never re-redacts a marker):

``private_key``
    A PEM block from ``-----BEGIN ... PRIVATE KEY-----`` to its ``-----END ...-----``
    line, across lines (real or JSON-escaped ``\\n``). A block cut off before its END line
    is redacted up to the last base64 character.
``url_password``
    The password in ``scheme://user:password@host``; the user and host are kept, so
    ``postgres://app:[REDACTED:url_password]@db:5432`` still reads as a database URL.
``authorization``
    The credential after ``Authorization: <scheme>`` (Bearer, Basic, Token, Digest,
    Bot, ApiKey), header or JSON style.
Provider keys, by their documented prefixes (each must stand alone, not inside a longer
token such as base64 image data):
    ``anthropic_key`` ``sk-ant-...``; ``openai_key`` ``sk-...``/``sk-proj-...`` (the tail
    must look random: a letter and a digit, so ``sk-learn-style-names`` pass);
    ``google_api_key`` ``AIza`` + 35; ``aws_access_key_id`` ``AKIA``/``ASIA`` + 16;
    ``aws_secret_key`` the 40-character value of ``aws_secret_access_key``;
    ``github_token`` ``ghp_ gho_ ghu_ ghs_ ghr_`` and ``github_pat_``; ``slack_token``
    ``xoxa- xoxb- xoxp- xoxr- xoxs-``; ``stripe_key`` ``sk_live_ rk_live_`` (and
    ``_test_``); ``huggingface_token`` ``hf_`` + 30 or more (random-looking).
``jwt``
    ``eyJ<header>.eyJ<payload>.<signature>``.
``bearer_token``
    ``Bearer <token>`` anywhere else, when the token looks random (a letter and a
    digit), so prose like "bearer authentication" is left alone.
``password`` / ``secret``
    ``KEY=value``, ``KEY: value``, ``"key": "value"`` (env files, YAML, JSON, also with
    JSON-escaped quotes) where the key names a secret. Keys are split into words
    (``DB_PASSWORD``, ``dbPassword``, ``db.password`` -> db, password) and:

    * a key with a password word (password, passwd, pwd, passphrase, pass) takes any
      value of 4 or more characters -> ``password``;
    * a key with a secret word (secret, token, apikey, credential(s), authorization,
      privatekey, accesskey, secretkey), or ending in ``key`` after api/access/private/
      secret/signing/encryption/master/client/service/auth/session/app/license, takes a
      value of 8 or more characters that is not purely numeric -> ``secret``;
    * any other key ending in ``key`` (``SENTRY_KEY``) needs a value that looks random:
      8 or more characters with a letter and a digit;
    * never a key ending in a word that describes the secret instead of holding it:
      ``password_hint``, ``token_count``, ``max_tokens`` (plural), ``token_type``,
      ``secret_name``, ``api_key_id``, ``key_path``..., nor a key whose word before
      ``key`` says it is not secret: ``public_key``, ``primary_key``, ``sort_key``,
      ``cache_key``, ``idempotency_key``...;
    * never a placeholder value: ``$VAR``, ``${VAR}``, ``{{ var }}``, ``<your-key>``,
      ``%s``, ``null``/``none``/``true``/``false``, or only ``*``, ``x`` or ``.``.

    Quoted values end at the closing quote or a backslash; unquoted values end at
    whitespace, a quote, or one of ``, ; ) ] } < >``, so a password containing those
    characters is redacted only up to them.

Left alone on purpose: hex digests (git SHAs, sha256), UUIDs, base64 data URLs, numbers,
and any word that merely mentions "password" or "token" without a value.

Redact the raw strings (message content, tool arguments) before clipping and before JSON
rendering: clipping can cut a PEM block's END line off, and rendering escapes quotes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache

from judge.errors import ConfigError

MARKER = "[REDACTED:{kind}]"
# Every built-in rule's marker starts with this; a value already holding it is skipped so
# rules never redact each other's markers.
_MARKER_PREFIX = "[REDACTED:"
# Kind reported for a user-supplied pattern.
CUSTOM_KIND = "custom"

# Longest key name the assignment rule looks at; bounds backtracking on long identifiers.
_KEY_MAX = 80
# A quoted value longer than this is not a credential someone typed; bounds the match.
_VALUE_MAX = 1024


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# A key ending in one of these words describes a secret instead of holding one.
_NON_SECRET_LAST = _wordset(
    "count counts hint hints length len size limit limits type types name names id ids "
    "path paths file files dir url urls uri endpoint env var field label prompt prompts "
    "policy expiry expires expiration ttl timeout version format usage min max total rate "
    "budget required enabled disabled set prefix suffix header param params kind mode "
    "method provider scheme strategy index idx pattern regex rotation created updated "
    "used in at ms seconds estimate estimates"
)
_PASSWORD_WORDS = frozenset({"password", "passwd", "pwd", "passphrase"})
_SECRET_WORDS = frozenset(
    {
        "secret",
        "secrets",
        "token",
        "apikey",
        "credential",
        "credentials",
        "authorization",
        "privatekey",
        "accesskey",
        "secretkey",
    }
)
# "<word>_key" that always names a secret.
_SECRET_KEY_PREFIXES = _wordset(
    "api access private secret signing encryption master client service auth session "
    "app license webhook"
)
# "<word>_key" that never does.
_PUBLIC_KEY_PREFIXES = _wordset(
    "public publishable primary foreign sort partition cache lookup hash idempotency "
    "dedup dedupe group routing shard row range dict map"
)
_PLACEHOLDERS = frozenset({"null", "none", "nil", "true", "false", "undefined", "redacted"})

_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _words(key: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(key)]


def _looks_random(value: str) -> bool:
    """A machine-made token: a letter and a digit, or long and mixed case."""
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    if has_digit and has_alpha:
        return True
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return len(value) >= 32 and mixed_case


def _is_placeholder(value: str) -> bool:
    if value.startswith(("$", "{{", "<", "%", _MARKER_PREFIX)):
        return True
    if value.lower() in _PLACEHOLDERS:
        return True
    return set(value) <= set("*xX.")


def _key_class(key: str) -> str | None:
    """'password', 'secret', 'key' (needs a random value) or None for a harmless key."""
    words = _words(key)
    if not words or words[-1] in _NON_SECRET_LAST:
        return None
    # "pass" alone is too common a word (pass_through, pass_rate) except as the last one.
    if any(w in _PASSWORD_WORDS for w in words) or words[-1] == "pass":
        return "password"
    if any(w in _SECRET_WORDS for w in words):
        return "secret"
    if words[-1] in ("key", "keys"):
        before = words[-2] if len(words) > 1 else ""
        if before in _PUBLIC_KEY_PREFIXES:
            return None
        return "secret" if before in _SECRET_KEY_PREFIXES else "key"
    return None


def _is_code(m: re.Match[str], value: str) -> bool:
    """An unquoted value that is an expression in source code, not a literal secret."""
    if m.string[m.end("uval") : m.end("uval") + 1] in ("(", "["):
        return True  # password = get_password(...), token = os.environ["TOKEN"]
    return _DOTTED_NAME.fullmatch(value) is not None  # api_key = settings.api_key


Span = tuple[str, int, int]
Resolver = Callable[[re.Match[str]], Span | None]


@dataclass(frozen=True, slots=True)
class _Rule:
    """One compiled pattern. ``resolve`` picks the span to hide, or None to keep the match."""

    kind: str
    pattern: re.Pattern[str]
    # Lowercase substrings one of which must occur for the rule to possibly match; empty
    # means the rule always runs.
    triggers: tuple[str, ...]
    resolve: Resolver


def _secret_group(
    kind: str, accept: Callable[[str], bool] | None = None, *, placeholders: bool = True
) -> Resolver:
    """Hide the ``secret`` group when the pattern has one, else the whole match."""

    def resolve(m: re.Match[str]) -> Span | None:
        group = "secret" if "secret" in m.re.groupindex and m.group("secret") else 0
        value = m.group(group)
        if not value or value.startswith(_MARKER_PREFIX):
            return None
        if placeholders and _is_placeholder(value):
            return None
        if accept is not None and not accept(value):
            return None
        return kind, m.start(group), m.end(group)

    return resolve


def _resolve_assignment(m: re.Match[str]) -> Span | None:
    group = "qval" if m.group("qval") is not None else "uval"
    value = m.group(group)
    if _is_placeholder(value) or _MARKER_PREFIX in value:
        return None
    if group == "uval" and _is_code(m, value):
        return None
    key_class = _key_class(m.group("key"))
    if key_class == "password":
        ok = len(value) >= 4
    elif key_class == "secret":
        ok = len(value) >= 8 and not value.isdigit()
    elif key_class == "key":
        ok = len(value) >= 8 and _looks_random(value)
    else:
        ok = False
    if not ok:
        return None
    kind = "password" if key_class == "password" else "secret"
    return kind, m.start(group), m.end(group)


# Not inside a longer token: the character before a key is not part of one.
_B = r"(?<![A-Za-z0-9_\-])"
_B_PLUS = r"(?<![A-Za-z0-9_\-+/=])"  # also not inside base64 (which has + / =)
# An optional quote, possibly JSON-escaped (\" inside a JSON string).
_Q = r"""(?:\\?["'])?"""


def _builtin_rules() -> list[_Rule]:
    def rule(
        kind: str,
        pattern: str,
        triggers: Iterable[str],
        *,
        flags: int = 0,
        accept: Callable[[str], bool] | None = None,
        resolve: Resolver | None = None,
    ) -> _Rule:
        return _Rule(
            kind,
            re.compile(pattern, flags),
            tuple(triggers),
            resolve or _secret_group(kind, accept),
        )

    pem_begin = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    pem_end = r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
    pem_cut = r"[A-Za-z0-9+/=\s\\:,-]*"  # base64 lines of a block that lost its END line
    assign = r"[ \t]*(?::=|=>|[:=])[ \t]*"
    header_assign = rf"{_Q}\s*[:=]\s*{_Q}"
    key_name = rf"(?P<key>[A-Za-z][A-Za-z0-9_.\-]{{0,{_KEY_MAX}}})"
    quoted = rf"(?P<quote>\\?[\"'])(?P<qval>[^\"'\n\\]{{1,{_VALUE_MAX}}})"
    unquoted = r"(?P<uval>[^\s\"'`,;&()\[\]{}<>]+)"
    return [
        rule(
            "private_key",
            rf"{pem_begin}(?:[\s\S]*?{pem_end}|{pem_cut})",
            ["private key"],
        ),
        rule(
            "url_password",
            r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/?#@\"'<>\\]*:"
            r"(?P<secret>[^\s/?#\"'<>\\]+)(?=@[^\s/?#@\"'<>\\]+)",
            ["://"],
        ),
        rule(
            "authorization",
            rf"\bauthorization{header_assign}"
            r"(?:bearer|basic|token|digest|bot|apikey)\s+(?P<secret>[^\s\"'\\,;]{4,})",
            ["authorization"],
            flags=re.IGNORECASE,
        ),
        rule("anthropic_key", _B + r"sk-ant-[A-Za-z0-9_\-]{20,}", ["sk-ant-"]),
        rule(
            "openai_key",
            _B + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}",
            ["sk-"],
            accept=_looks_random,
        ),
        rule("google_api_key", _B + r"AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])", ["aiza"]),
        rule(
            "aws_access_key_id",
            r"(?<![A-Za-z0-9/+=])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9/+=])",
            ["akia", "asia"],
        ),
        rule(
            "aws_secret_key",
            rf"aws_?secret_?access_?key{header_assign}"
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
            ["secret"],
            flags=re.IGNORECASE,
        ),
        rule(
            "github_token",
            _B + r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})",
            ["ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"],
        ),
        rule("slack_token", _B + r"xox[abprs]-[A-Za-z0-9\-]{10,}", ["xox"]),
        rule("stripe_key", _B + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}", ["_live_", "_test_"]),
        rule(
            "huggingface_token",
            _B + r"hf_[A-Za-z0-9]{30,}(?![A-Za-z0-9])",
            ["hf_"],
            accept=_looks_random,
        ),
        rule(
            "jwt",
            _B_PLUS + r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*",
            ["eyj"],
        ),
        rule(
            "bearer_token",
            r"\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)",
            ["bearer"],
            flags=re.IGNORECASE,
            accept=_looks_random,
        ),
        rule(
            "secret",
            rf"(?<![A-Za-z0-9_.]){_Q}{key_name}{_Q}{assign}(?:{quoted}|{unquoted})",
            ["pass", "pwd", "secret", "token", "key", "credential", "authorization"],
            resolve=_resolve_assignment,
        ),
    ]


def _apply(rule: _Rule, text: str) -> str:
    def replace(m: re.Match[str]) -> str:
        found = rule.resolve(m)
        if found is None:
            return m.group(0)
        kind, start, end = found
        whole, base = m.group(0), m.start()
        return whole[: start - base] + MARKER.format(kind=kind) + whole[end - base :]

    return rule.pattern.sub(replace, text)


BUILTIN_KINDS: tuple[str, ...] = tuple(r.kind for r in _builtin_rules())


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<kind>]``.

    ``extra_patterns`` are regular expressions for secrets of your own (an internal token
    format); a pattern with a named group ``secret`` hides only that group, otherwise the
    whole match, and is reported as ``custom``. ``builtins=False`` turns every built-in
    rule off; ``disable`` turns off the named ones (see `BUILTIN_KINDS`). Patterns are
    compiled once, here; an invalid one raises `ConfigError`.
    """

    def __init__(
        self,
        *,
        extra_patterns: Iterable[str] = (),
        builtins: bool = True,
        disable: Iterable[str] = (),
    ) -> None:
        disabled = set(disable)
        unknown = disabled - set(BUILTIN_KINDS)
        if unknown:
            raise ConfigError(
                f"unknown redaction rule(s) {sorted(unknown)}; known: {list(BUILTIN_KINDS)}"
            )
        rules = [r for r in _builtin_rules() if r.kind not in disabled] if builtins else []
        for source in extra_patterns:
            try:
                compiled = re.compile(source)
            except re.error as exc:
                raise ConfigError(f"invalid redaction pattern {source!r}: {exc}") from exc
            if compiled.fullmatch("") is not None:
                raise ConfigError(f"redaction pattern {source!r} matches the empty string")
            resolve = _secret_group(CUSTOM_KIND, placeholders=False)
            rules.append(_Rule(CUSTOM_KIND, compiled, (), resolve))
        self._rules: tuple[_Rule, ...] = tuple(rules)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of rule this redactor runs, in order."""
        return tuple(r.kind for r in self._rules)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by its marker; unchanged if none."""
        if not text:
            return text
        lowered: str | None = None
        for rule in self._rules:
            if rule.triggers:
                if lowered is None:
                    lowered = text.lower()
                if not any(t in lowered for t in rule.triggers):
                    continue
            redacted = _apply(rule, text)
            if redacted != text:
                text = redacted
                lowered = None
        return text

    __call__ = redact


@cache
def default_redactor() -> Redactor:
    """The shared redactor with every built-in rule and no extras."""
    return Redactor()


def redact(text: str) -> str:
    """``text`` with secrets replaced by ``[REDACTED:<kind>]`` (all built-in rules)."""
    return default_redactor().redact(text)
