"""The built-in rule list: the formats file, the structural and context rules, and their kinds."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from functools import cache
from importlib import resources
from typing import Any

from judge.errors import ConfigError
from judge.llm.redaction._names import (
    _CUT_PREFIXES,
    _ELLIPSIS,
    _END,
    _START,
    _VALUE_MAX,
    RULES_FILE,
    _clipped_prefix_ok,
    _looks_random,
    _not_a_scheme,
)
from judge.llm.redaction._opaque import (
    _B64_DASHES,
    _B64_PEM,
    _B64_RUN,
    _CLIPPED_RUN,
    _CSV_FLAT,
    _NAME_ALONE,
    _PUTTY_LINES,
    _PUTTY_MAC_ANCHOR,
    _SECRET_TRIGGERS,
    _SSH2_BEGIN,
    _SSH2_BODY,
    _SSH2_END,
    _URL_PATH,
    _URL_USER,
    _clipped_like,
    _named_secret_like,
    _resolve_b64_pem,
    _resolve_b64_pem_tail,
    _resolve_csv_flat,
    _resolve_name_alone,
    _resolve_putty,
    _resolve_putty_tail,
    _resolve_url_path,
)
from judge.llm.redaction._rule import _PatternRule, _PemRule, _ResolvedRule, _Rule
from judge.llm.redaction._structured import (
    _ASSIGNMENT,
    _AWS_CONFIGURE,
    _COMMAND,
    _COOKIE,
    _CSV_HEADER,
    _FLAG,
    _HEADER_ASSIGN,
    _JAVA_PROPERTY,
    _JWK_PRIVATE,
    _ORACLE_LOGON,
    _PAIR_NAME,
    _PGPASS,
    _SQL_PASSWORD,
    _XML_ELEMENT,
    _resolve_assignment,
    _resolve_command,
    _resolve_cookie,
    _resolve_csv,
    _resolve_flag,
    _resolve_pair,
    _resolve_pgpass,
    _resolve_sql,
    _resolve_xml,
)

# -- building the rule list --------------------------------------------------------------------


def _accept(name: str | None) -> Callable[[str], bool] | None:
    if name is None:
        return None
    if name == "random":
        return _looks_random
    raise ConfigError(f"{RULES_FILE}: unknown accept {name!r}")


@cache
def _format_rules() -> tuple[_PatternRule, ...]:
    """The shape rules of ``secret_rules.json``, compiled once per process."""
    data: dict[str, Any] = json.loads(
        resources.files("judge.llm").joinpath(RULES_FILE).read_text(encoding="utf-8")
    )
    rules = []
    for entry in data["rules"]:
        source = entry["pattern"].replace("{start}", _START).replace("{end}", _END)
        rules.append(
            _PatternRule(
                entry["kind"], source, tuple(entry["keywords"]), _accept(entry.get("accept"))
            )
        )
    return tuple(rules)


@cache
def _builtin_rules() -> tuple[_Rule, ...]:
    """Every built-in rule, in priority order (an overlap is named by the earliest)."""
    context: list[_Rule] = [
        _PatternRule(
            "url_password",
            r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s:/?#@\"'<>\\]{0,256}:"
            r"(?P<secret>[^\s/\"'<>\\]{1,256})@(?=[^\s/?#@\"'<>\\])",
            ("://",),
        ),
        _PatternRule(
            "authorization",
            rf"\bauthorization{_HEADER_ASSIGN}"
            # Any scheme word (Bearer, Basic, SSWS, OAuth, Negotiate, a vendor's own) or
            # none: whatever follows the header's name is the credential.
            r"(?:[A-Za-z][A-Za-z0-9._-]{0,30}[ \t]+)?"
            r"(?P<secret>[^\s\"'\\,;\x1b]{4,4096})",
            ("authorization",),
            _not_a_scheme,
            flags=re.IGNORECASE,
        ),
        _PatternRule(
            "aws_secret_key",
            rf"aws_?secret_?access_?key{_HEADER_ASSIGN}"
            r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
            ("secret",),
            flags=re.IGNORECASE,
        ),
        _ResolvedRule("cookie", _COOKIE, ("cookie",), _resolve_cookie),
        _ResolvedRule(
            "command_password",
            _COMMAND,
            (
                "curl",
                "wget",
                "mysql",
                "mariadb",
                "login",
                "sshpass",
                "twine",
                "htpasswd",
                "creds",
                "redis-cli",
                "mongo",
                "sqlcmd",
                "openssl",
            ),
            _resolve_command,
        ),
        _PatternRule(
            "command_password",
            r"\b(?:login|user(?:name)?)[ \t]+[^\s]{1,256}[ \t]+password[ \t]+"
            rf"(?P<secret>[^\s\"'\\]{{1,{_VALUE_MAX}}})",
            ("password",),
        ),
        _ResolvedRule(
            "command_password",
            _FLAG,
            ("pass", "pwd", "secret", "token", "key", "credential", "auth"),
            _resolve_flag,
        ),
        _PatternRule(
            "bearer_token",
            r"\bbearer[ \t]+(?P<secret>[A-Za-z0-9\-._~+/]{8,4096}={0,3})",
            ("bearer",),
            _looks_random,
            flags=re.IGNORECASE,
        ),
        _PatternRule("private_key", _JWK_PRIVATE, ("kty",), _looks_random),
        _PatternRule("aws_secret_key", _AWS_CONFIGURE, ("secret access key",)),
        _ResolvedRule("secret", _PAIR_NAME, _SECRET_TRIGGERS, _resolve_pair),
        _ResolvedRule("secret", _XML_ELEMENT, _SECRET_TRIGGERS, _resolve_xml),
        _ResolvedRule("secret", _JAVA_PROPERTY, _SECRET_TRIGGERS, _resolve_assignment),
        _ResolvedRule("secret", _SQL_PASSWORD, ("password", "identified"), _resolve_sql),
        _PatternRule(
            "secret",
            _ORACLE_LOGON.pattern,
            ("sqlplus", "sqlldr", "expdp", "impdp", "rman", "dgmgrl", "conn"),
            flags=re.IGNORECASE,
        ),
        _ResolvedRule("secret", _PGPASS, (":",), _resolve_pgpass),
        _ResolvedRule("secret", _CSV_HEADER, _SECRET_TRIGGERS, _resolve_csv),
        _ResolvedRule("secret", _ASSIGNMENT, _SECRET_TRIGGERS, _resolve_assignment),
        # A credential's start left by a clip ("ghp_cLq0…", "postgres://app:s3cr…"): the
        # full rules need the whole token, the reader needs none of it.
        _PatternRule(
            "clipped_secret",
            r"(?<![A-Za-z0-9_+/-])(?P<secret>(?:"
            + "|".join(re.escape(prefix) for prefix in _CUT_PREFIXES)
            + r")[A-Za-z0-9_./+~$-]{2,4096})"
            + _ELLIPSIS,
            (_ELLIPSIS,),
            _clipped_prefix_ok,
            placeholders=False,
        ),
        _PatternRule(
            "clipped_secret",
            r"hooks\.slack\.com/(?:services|workflows|triggers)/"
            r"(?P<secret>[A-Za-z0-9+/_-]{2,250})" + _ELLIPSIS,
            (_ELLIPSIS,),
        ),
        _PatternRule(
            "clipped_secret",
            r"://[^\s:/?#@\"'<>\\]{0,256}:(?P<secret>[^\s/?#@\"'<>\\]{1,256})" + _ELLIPSIS,
            (_ELLIPSIS,),
        ),
    ]
    envelopes: list[_Rule] = [
        _PemRule(),
        _PemRule(triggers=("ssh2",), begin=_SSH2_BEGIN, end=_SSH2_END, body=_SSH2_BODY),
        _ResolvedRule("private_key", _B64_RUN, _B64_DASHES, _resolve_b64_pem_tail),
        _ResolvedRule("private_key", _PUTTY_LINES, ("private-lines",), _resolve_putty),
        _ResolvedRule(
            "private_key", _PUTTY_MAC_ANCHOR, ("private-mac", "private-hash"), _resolve_putty_tail
        ),
        _ResolvedRule("private_key", _B64_PEM, ("ls0tls1crudjt",), _resolve_b64_pem),
    ]
    # Last: an opaque token is named by the rule of its format or context when one finds
    # it too (an overlap takes the earliest rule's kind).
    opaque: list[_Rule] = [
        _PatternRule("opaque_token", _URL_USER, ("://",), _named_secret_like),
        _ResolvedRule("opaque_token", _URL_PATH, ("://",), _resolve_url_path),
        _ResolvedRule("opaque_token", _NAME_ALONE, _SECRET_TRIGGERS, _resolve_name_alone),
        _ResolvedRule("secret", _CSV_FLAT, _SECRET_TRIGGERS, _resolve_csv_flat),
        _PatternRule("clipped_secret", _CLIPPED_RUN, (_ELLIPSIS,), _clipped_like),
        # A URL's user part cut before its "@" ("https://<token>…"): a host has dots. Only
        # schemes that take a user: ipfs:// and its kin put a random hash there.
        _PatternRule(
            "clipped_secret",
            r"\b(?:https?|git|ssh|s?ftp|wss?)://(?P<secret>[A-Za-z0-9_~+-]{12,256})" + _ELLIPSIS,
            (_ELLIPSIS,),
            _named_secret_like,
        ),
    ]
    return (*envelopes, *_format_rules(), *context, *opaque)


def _kinds(rules: Iterable[_Rule]) -> tuple[str, ...]:
    kinds: list[str] = []
    for rule in rules:
        if rule.kind not in kinds:
            kinds.append(rule.kind)
        if rule.kind == "secret" and "password" not in kinds:
            kinds.append("password")  # the assignment rule's second marker
    return tuple(kinds)


BUILTIN_KINDS: tuple[str, ...] = _kinds(_builtin_rules())
