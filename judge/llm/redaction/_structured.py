"""Secrets found by the structure around them: assignments, headers, cookies, command lines and
flags, a name and its value apart (JSON pairs, XML, properties, SQL, .pgpass, CSV).
"""

from __future__ import annotations

import re

from judge.llm.redaction._names import (
    _COMMAND_MAX,
    _COMMAND_WORDS,
    _COOKIE_MAX,
    _ENV_CODE,
    _KEY_MAX,
    _RANDOM_COOKIE_MIN,
    _VALUE_MAX,
    _is_dotted_name,
    _is_placeholder,
    _key_class,
    _looks_random,
    _marker_kind,
    _value_ok,
    _wordset,
)
from judge.llm.redaction._rule import Span

_Q = r"""(?:\\?["'])?"""
_HEADER_ASSIGN = rf"{_Q}[ \t]*[:=][ \t]*{_Q}"


# -- the assignment rule ---------------------------------------------------------------------

# Step one finds a key and its assignment only; the value is read (step two) only when the
# key names a secret, so a long run of harmless "a=b=c=..." costs one short match per pair.
# The key is read whole, never shortened: a shorter key would be followed by a key
# character, which can start neither a quote nor an assignment, so giving characters back
# only wastes time (it doubled the cost of every word of prose). The lookahead reads the
# longest key and the back-reference consumes it; lookarounds do not backtrack, so this is
# an atomic group, which ``re`` has only from Python 3.11.
_ASSIGNMENT = re.compile(
    rf"(?<![A-Za-z0-9_.\-\\])(?:--)?{_Q}"
    rf"(?=(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,{_KEY_MAX}}}))(?P=key){_Q}"
    r"(?P<assign>[ \t]*(?::=|=>|[:=])[ \t]*)(?=\\?[\"']|[^\s\"'`\\<>])"
)
_QUOTED_VALUE = re.compile(rf"\\?[\"'](?P<value>[^\"'\n\\\x1b]{{1,{_VALUE_MAX}}})")
# Env files: the value runs to whitespace or a quote (a Django key is full of punctuation).
_ENV_VALUE = re.compile(rf"(?P<value>[^\s\"'`\\<>\x1b]{{1,{_VALUE_MAX}}})")
# Elsewhere it also ends at , ; & ( ) [ ] { } and takes "=" only as base64 padding.
_PLAIN_VALUE = re.compile(rf"(?P<value>[^\s\"'`\\<>,;&()\[\]{{}}=\x1b]{{1,{_VALUE_MAX}}}={{0,3}})")
# Where a rejected value may still hide a nested pair: the search resumes at the first of these.
_VALUE_SEPARATOR = re.compile(r"[\s;&,]")
# What a clipped quote ends with (the detectors' summaries, our own clip marker).
_CUT = "…."
_ENV_KEY = re.compile(r"[A-Z][A-Z0-9_]*")
_PSQL_VARIABLE = re.compile(r"[ \t]+:'[A-Za-z_][A-Za-z0-9_]{0,62}")
_AUTH_SCHEME = re.compile(r"(?:bearer|basic|token|digest|bot|apikey|key)[ \t]+", re.IGNORECASE)


def _resolve_assignment(m: re.Match[str]) -> tuple[list[Span], int]:
    text = m.string
    key_class = _key_class(m.group("key"))
    if key_class is None:
        return [], m.end()  # the value may itself hold "KEY=secret"
    if m.group("key").lower() in ("authorization", "proxy-authorization"):
        # The authorization rule reads the header whole: a scheme word of its own
        # ("Negotiate") is no value to hide, the credential after it is.
        return [], m.end()
    quoted = _QUOTED_VALUE.match(text, m.end())
    if quoted is not None and _PSQL_VARIABLE.fullmatch(m.group("assign") + quoted.group()):
        # psql's ":'name'" interpolates a variable ("PASSWORD :'app_password'"); a YAML or
        # JSON value never follows a colon that has a space before it and none after.
        return [], quoted.end()
    env_style = m.group("assign") == "=" and _ENV_KEY.fullmatch(m.group("key")) is not None
    if quoted is not None:
        found: re.Match[str] | None = quoted
    else:
        found = (_ENV_VALUE if env_style else _PLAIN_VALUE).match(text, m.end())
    if found is None:
        return [], m.end()
    start, end = found.span("value")
    value = found.group("value")
    separator = _VALUE_SEPARATOR.search(text, start, end)
    reject: tuple[list[Span], int] = ([], separator.start() if separator else end)
    if quoted is None:
        follows = text[end : end + 1]
        if env_style:
            value = value.rstrip(",;")
            # API_KEY=os.getenv(...), SECRET=settings.secret: lowercase names, no digits,
            # which a generated key almost never starts with.
            code = _ENV_CODE.match(value) is not None or (
                _is_dotted_name(value.rstrip(_CUT)) and value.islower()
            )
        else:
            # A summary's clipped quote ("auth = requests.au…") is still code.
            code = follows in ("(", "[") or _is_dotted_name(value.rstrip(_CUT))
            if ":" in m.group("assign"):
                # A type annotation: "api_key: SecretStr = ...", "password: str | None".
                code = code or text[end : end + 3].lstrip().startswith(("=", "|"))
        if code or not value:
            return reject
        end = start + len(value)
    if _is_placeholder(value) or not _value_ok(key_class, value):
        return reject
    scheme = _AUTH_SCHEME.match(value)
    if scheme is not None:
        start += scheme.end()  # "Authorization": "Basic ...": the scheme is no secret
    return [(_marker_kind(key_class), start, end)], end


# -- headers, cookies and command lines --------------------------------------------------------

_COOKIE = re.compile(
    rf"\b(?:set-)?cookie[ \t]*:[ \t]*(?P<body>[^\r\n\"\\]{{1,{_COOKIE_MAX}}})", re.IGNORECASE
)
_COOKIE_PAIR = re.compile(r"(?:^|;)[ \t]*(?P<name>[^=;\s]{1,100})=(?P<value>[^;]*)")
_COOKIE_ATTRIBUTES = _wordset(
    "path domain expires max-age samesite secure httponly priority partitioned version comment"
)
_COOKIE_SECRET_WORDS = (
    "session",
    "sess",
    "sid",
    "token",
    "auth",
    "jwt",
    "login",
    "remember",
    "access",
    "refresh",
    "csrf",
    "xsrf",
    "secret",
    "key",
    "pass",
    "saml",
    "oauth",
)


def _resolve_cookie(m: re.Match[str]) -> tuple[list[Span], int]:
    spans: list[Span] = []
    base = m.start("body")
    for pair in _COOKIE_PAIR.finditer(m.group("body")):
        name = pair.group("name").lower()
        raw = pair.group("value")
        value = raw.strip()
        if name in _COOKIE_ATTRIBUTES or not value or _is_placeholder(value):
            continue
        named_secret = any(word in name for word in _COOKIE_SECRET_WORDS)
        random_value = len(value) >= _RANDOM_COOKIE_MIN and _looks_random(value)
        if (named_secret and len(value) >= 4) or random_value:
            start = base + pair.start("value") + (len(raw) - len(raw.lstrip()))
            spans.append(("cookie", start, start + len(value)))
    return spans, m.end()


_COMMAND = re.compile(
    r"(?<![\w./-])(?P<cmd>curl|wget|mysql|mysqldump|mysqladmin|mariadb|docker|podman|nerdctl"
    r"|helm|oras|skopeo|sshpass|twine|htpasswd|redis-cli|mongo|mongosh|sqlcmd|openssl)(?![\w.-])"
    rf"(?P<args>[^\n\r]{{0,{_COMMAND_MAX}}})"
)
_TOKEN = re.compile(r"\S+")
# Shell syntax that ends one command's arguments.
_COMMAND_ENDS = frozenset({"|", "||", "&&", ";", ">", ">>", "<", "2>", "&"})
_QUOTES = "\"'\\"
_MYSQL = frozenset({"mysql", "mysqldump", "mysqladmin", "mariadb"})
# Their -p means a password only after "login" ("docker run -p 8080:80" publishes a port).
_REGISTRY_LOGIN = frozenset({"docker", "podman", "nerdctl", "helm", "oras"})
# Flags whose next word is the password, per command.
_PASSWORD_FLAGS: dict[str, frozenset[str]] = {
    **{cmd: frozenset({"-p", "--password"}) for cmd in _REGISTRY_LOGIN},
    **{cmd: frozenset({"-p", "--password"}) for cmd in ("sshpass", "twine", "mongo", "mongosh")},
    "redis-cli": frozenset({"-a", "--pass"}),
    "sqlcmd": frozenset({"-P"}),
}


def _core(token: str, offset: int) -> tuple[int, int]:
    """The token's value without surrounding quotes (also JSON-escaped) or JSON after it."""
    start, end = 0, len(token)
    while start < end and token[start] in _QUOTES:
        start += 1
    for closing in ('\\"', '"', "'"):
        at = token.find(closing, start)
        if at != -1:
            end = min(end, at)
    return offset + start, offset + end


def _after_colon(text: str, start: int, end: int) -> Span | None:
    """The password of a ``user:password`` value."""
    colon = text.find(":", start, end)
    if colon == -1 or colon + 1 >= end:
        return None
    secret = text[colon + 1 : end]
    return None if _is_placeholder(secret) else ("command_password", colon + 1, end)


def _resolve_command(m: re.Match[str]) -> tuple[list[Span], int]:
    text, cmd = m.string, m.group("cmd")
    tokens: list[tuple[str, int, int]] = []  # (raw token, value start, value end)
    # Where the next search starts: the end of this command (a later command in the same
    # line is read on its own), or the last word read.
    resume = m.end()
    for tok in _TOKEN.finditer(m.group("args")):
        if tok.group() in _COMMAND_ENDS or len(tokens) == _COMMAND_WORDS:
            resume = tok.start() + m.start("args")
            break
        start, end = _core(tok.group(), tok.start() + m.start("args"))
        tokens.append((tok.group(), start, end))
    words = [text[s:e] for _, s, e in tokens]
    spans: list[Span] = []

    def value_at(i: int) -> Span | None:
        if i >= len(tokens):
            return None
        _, s, e = tokens[i]
        value = text[s:e]
        if not value or value.startswith("-") or _is_placeholder(value):
            return None
        return ("command_password", s, e)

    login = "login" in words
    positional: list[int] = []
    flags = ""
    for i, word in enumerate(words):
        found: Span | None = None
        _, s, e = tokens[i]
        if cmd in ("curl", "wget") and word in ("-u", "--user"):
            nxt = value_at(i + 1)
            found = _after_colon(text, nxt[1], nxt[2]) if nxt else None
        elif cmd in ("curl", "wget") and word.startswith("--user="):
            found = _after_colon(text, s + len("--user="), e)
        elif cmd == "curl" and word.startswith("-u") and len(word) > 2 and word[2] != "-":
            found = _after_colon(text, s + 2, e)
        elif cmd in _MYSQL and word.startswith("-p") and len(word) > 2:
            secret = word[2:]
            found = None if _is_placeholder(secret) else ("command_password", s + 2, e)
        elif word in _PASSWORD_FLAGS.get(cmd, ()) and (cmd not in _REGISTRY_LOGIN or login):
            found = value_at(i + 1)
        elif cmd == "openssl" and word in ("-passin", "-passout", "-pass", "-k"):
            nxt = value_at(i + 1)
            if nxt is not None:
                # "pass:SECRET" hides what follows the colon; env:VAR and file:PATH name none.
                value = text[nxt[1] : nxt[2]]
                if value.startswith("pass:"):
                    found = ("command_password", nxt[1] + 5, nxt[2]) if len(value) > 5 else None
                elif ":" not in value:
                    found = nxt
        elif cmd == "sshpass" and word.startswith("-p") and len(word) > 2:
            found = ("command_password", s + 2, e)
        elif cmd == "skopeo" and word.endswith("creds"):
            nxt = value_at(i + 1)
            found = _after_colon(text, nxt[1], nxt[2]) if nxt else None
        elif word.startswith("-") and not word.startswith("--"):
            flags += word[1:]
        elif not word.startswith("-"):
            positional.append(i)
        if found is not None:
            spans.append(found)
    if cmd == "htpasswd" and "b" in flags:
        # htpasswd -b [-c] file user password; with -n there is no file.
        at = 1 if "n" in flags else 2
        if len(positional) > at:
            found = value_at(positional[at])
            if found is not None:
                spans.append(found)
    return spans, resume


# "--" comes first and the check that no word character or dash precedes it follows (the
# same condition, read from after the dashes), so ``re`` can jump to each "--" with its
# literal-prefix search instead of trying the lookbehind at every position (50 times
# faster on a 5 kB log).
_FLAG = re.compile(
    r"--(?<![\w-]--)(?P<flag>[A-Za-z][A-Za-z0-9-]{0,40})[ \t]+(?P<value>[^\s-][^\s]{0,1023})"
)


def _resolve_flag(m: re.Match[str]) -> tuple[list[Span], int]:
    """``--password VALUE`` and ``--token VALUE``: a flag that names a secret, then a space."""
    key_class = _key_class(m.group("flag"))
    start, end = _core(m.group("value"), m.start("value"))
    value = m.string[start:end]
    if key_class is None or _is_placeholder(value) or not _value_ok(key_class, value):
        return [], m.start("value")
    return [(_marker_kind(key_class), start, end)], m.end()


# -- a name and its value apart ------------------------------------------------------------
#
# Structure often keeps a secret's name and its value in different fields: a Kubernetes env
# list ("- name: DB_PASSWORD" then "value: ..."), an SSM parameter ({"Name":
# "/prod/db/password", ..., "Value": ...}), a .NET "<add key=... value=.../>". The name is
# read by the same word test as an assignment's key (`_key_class`), then the value field is
# looked for in a short window after it, stopping at the next name field so a harmless
# entry's value is never taken for an earlier secret's.

# How far after a secret name its value field may be (SSM puts "Type" between them).
_PAIR_WINDOW = 240
_PAIR_NAME = re.compile(
    rf"(?<![A-Za-z0-9_\\-]){_Q}(?:name|Name|NAME|key|Key|ParameterKey|OptionName|variable)"
    rf"{_Q}[ \t]*[:=][ \t]*{_Q}(?P<name>[A-Za-z_/][A-Za-z0-9_./:-]{{0,120}})"
)
_PAIR_FIELD = re.compile(
    rf"(?<![A-Za-z0-9_\\-]){_Q}(?P<field>value|Value|VALUE|ParameterValue|SecretString"
    rf"|name|Name|NAME|key|Key|ParameterKey|OptionName|variable){_Q}[ \t]*[:=][ \t]*"
)
_VALUE_FIELDS = frozenset({"value", "Value", "VALUE", "ParameterValue", "SecretString"})


def _value_at(text: str, pos: int) -> tuple[int, int] | None:
    """The span of a field's value starting at ``pos``: quoted, or to the line's end."""
    quoted = _QUOTED_VALUE.match(text, pos)
    if quoted is not None:
        return quoted.span("value")
    plain = _ENV_VALUE.match(text, pos)
    if plain is None:
        return None
    start = plain.start("value")
    value = plain.group("value").rstrip(",;}]")
    return (start, start + len(value)) if value else None


def _resolve_pair(m: re.Match[str]) -> tuple[list[Span], int]:
    key_class = _key_class(m.group("name"))
    if key_class is None:
        return [], m.end()
    text = m.string
    field = _PAIR_FIELD.search(text, m.end(), min(len(text), m.end() + _PAIR_WINDOW))
    if field is None or field.group("field") not in _VALUE_FIELDS:
        return [], m.end()  # no value, or the next entry's name comes first
    span = _value_at(text, field.end())
    if span is None:
        return [], field.end()
    value = text[span[0] : span[1]]
    if _is_placeholder(value) or not _value_ok(key_class, value):
        return [], field.end()
    return [(_marker_kind(key_class), *span)], span[1]


# <password>...</password>, <apiKey>...</apiKey>: the element's name is the key.
_XML_ELEMENT = re.compile(
    # The value may end at a clip's ellipsis: a verdict quotes a long result cut short.
    r"<(?P<tag>[A-Za-z_][A-Za-z0-9_.:-]{0,60})>[ \t]*(?P<value>[^<>\n\x1b…]{1,1024})"
    # Or at a closing tag the clip cut ("</tok…").
    r"(?:</(?P=tag)>|</[A-Za-z0-9_.:-]{0,60}…|…)"
)


def _resolve_xml(m: re.Match[str]) -> tuple[list[Span], int]:
    key_class = _key_class(m.group("tag"))
    value = m.group("value").rstrip()
    if key_class is None or _is_placeholder(value) or not _value_ok(key_class, value):
        return [], m.end("tag")
    start = m.start("value")
    return [(_marker_kind(key_class), start, start + len(value))], m.end()


# A Java system property on a command line: "-Dspring.datasource.password=...". The
# assignment rule's key cannot start right after a dash (that would read every "--flag=").
_JAVA_PROPERTY = re.compile(
    r"(?<![\w-])-D(?=(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{0,80}))(?P=key)(?P<assign>=)"
    r"(?=\\?[\"']|[^\s\"'`\\<>])"
)

# SQL that sets a password: PostgreSQL's "PASSWORD '...'" (quoted: the bare word is prose),
# MySQL's and Oracle's "IDENTIFIED [WITH plugin] BY ..." (quoted or, in Oracle, bare).
_SQL_PASSWORD = re.compile(
    r"\b(?P<by>IDENTIFIED(?:[ \t]+WITH[ \t]+[A-Za-z0-9_]{1,64})?[ \t]+BY(?:[ \t]+PASSWORD)?"
    r"|PASSWORD)[ \t]+(?:'(?P<quoted>[^'\n]{1,256})'|(?P<bare>[A-Za-z0-9_#$!@%^*+~-]{1,256}))",
    re.IGNORECASE,
)


def _resolve_sql(m: re.Match[str]) -> tuple[list[Span], int]:
    group = "quoted" if m.group("quoted") is not None else "bare"
    if group == "bare" and not (
        m.group("by").startswith("IDENTIFIED") or _looks_random(m.group("bare"))
    ):
        # Prose says "identified by name"; SQL written by hand says IDENTIFIED BY, and a
        # generated password has a digit among its letters.
        return [], m.end("by")
    value = m.group(group)
    if _is_placeholder(value) or not _value_ok("password", value):
        return [], m.end("by")
    return [("password", m.start(group), m.end(group))], m.end()


# Oracle's logon string "user/password@connect": after an Oracle client's name, or in a
# connect call. Only there: "actions/checkout@v4" has the same shape.
_ORACLE_LOGON = re.compile(
    r"\b(?:sqlplus|sqlldr|expdp|impdp|rman|dgmgrl|connect|conn)(?:[ \t]+-[A-Za-z]{1,10})?"
    r"[ \t(]{1,4}\\?[\"']?[A-Za-z][A-Za-z0-9_$#]{0,30}/"
    r"(?P<secret>[^\s@/\"'\\]{1,128})@",
    re.IGNORECASE,
)

# A .pgpass line, hostname:port:database:username:password, between blanks (a verdict's
# quote joins a result's lines with spaces). The host must
# read as one (a letter, a dot or "*") and the password as one (a digit or a sign beside
# letters), so "app.py:120:main:INFO:started" and "00:1a:2b:3c:4d" stay.
_PGPASS = re.compile(
    r"(?<!\S)(?P<host>[A-Za-z0-9.*_-]{1,253}):(?:\d{1,5}|\*):[A-Za-z0-9_.*$-]{1,63}:"
    r"[A-Za-z0-9_.*@$-]{1,63}:(?P<secret>[^\s:]{4,256})(?!\S)"
)


def _resolve_pgpass(m: re.Match[str]) -> tuple[list[Span], int]:
    host, value = m.group("host"), m.group("secret")
    host_ok = host == "*" or any(c.isalpha() or c == "." for c in host)
    signs = any(not c.isalnum() for c in value) and any(c.isalnum() for c in value)
    if not host_ok or _is_placeholder(value) or not (_looks_random(value) or signs):
        return [], m.end()
    return [("password", m.start("secret"), m.end("secret"))], m.end()


# A CSV whose header names a secret column (AWS's downloaded credentials.csv, an export with
# an api_token column): that column of the rows below, up to a row of another width.
_CSV_HEADER = re.compile(
    r"(?m)^(?P<header>[A-Za-z_][A-Za-z0-9 _.-]{0,60},[A-Za-z0-9 _.,-]{1,1000})\r?$"
)
_CSV_ROWS = 50


def _resolve_csv(m: re.Match[str]) -> tuple[list[Span], int]:
    columns = [c.strip() for c in m.group("header").split(",")]
    secret = [(i, cls) for i, c in enumerate(columns) if (cls := _key_class(c)) is not None]
    if not secret:
        return [], m.end()
    text = m.string
    spans: list[Span] = []
    at = m.end()
    for _ in range(_CSV_ROWS):
        if at >= len(text) or text[at] not in "\r\n":
            break
        at += 2 if text.startswith("\r\n", at) else 1
        stop = text.find("\n", at, at + _VALUE_MAX * 4)
        end = stop if stop != -1 else min(len(text), at + _VALUE_MAX * 4)
        row = text[at:end].rstrip("\r")
        fields = row.split(",")
        if len(fields) != len(columns):
            break
        offset = at
        for i, field in enumerate(fields):
            for j, cls in secret:
                if i != j:
                    continue
                value = field.strip().strip('"')
                if value and not _is_placeholder(value) and _value_ok(cls, value):
                    start = offset + field.index(value)
                    spans.append((_marker_kind(cls), start, start + len(value)))
            offset += len(field) + 1
        at = end
    return spans, max(at, m.end())


# A JSON Web Key's private members (RFC 7518: RSA's d, p, q, dp, dq, qi; EC's d; a
# symmetric key's k); n, e, x and y are public and stay.
_JWK_PRIVATE = (
    # The value may end at a clip's ellipsis: a verdict quotes a long result cut short.
    r"\"(?:d|p|q|dp|dq|qi|k)\"[ \t]*:[ \t]*\"(?P<secret>[A-Za-z0-9_-]{6,8192})(?:\"|…)"
)
# The aws configure prompt: the answer follows the masked old value in brackets.
_AWS_CONFIGURE = (
    r"AWS Secret Access Key[ \t]*\[[^\]\n]{0,64}\]:[ \t]*(?P<secret>[A-Za-z0-9/+=]{16,128})"
)
