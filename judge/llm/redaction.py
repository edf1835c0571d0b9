"""Redact secrets from every text that leaves the tracker.

An agent's history routinely holds credentials: a ``cat .env``, a ``curl -u``, a stack
trace printing a connection URL, a tool call whose JSON arguments carry a token. The judge
needs to see that the agent is stuck, never the secret, and neither do logs, telemetry or a
verdict's texts; so every secret-looking span is replaced by a placeholder that still tells
a reader what was there: ``[REDACTED:<kind>]``, or, from a keyed redactor
(`Redactor.keyed`, one per tracker), ``[REDACTED:<kind>:<hash>]`` with a short keyed hash
of the secret, so equal secrets read as equal and different ones as different.

The rules read the text as its reader would see it. A tool call's arguments and many tool
results are JSON, where a line break is the two characters ``\n``, so a token at the start
of a line follows an ``n`` and no boundary; a terminal colours a token with escape codes
that stand between it and its boundary too, and folds a token wider than itself onto the
next line. So the rules run on the text as written and on views of it with one, two and
three levels of JSON string escapes decoded and colour codes (raw or escaped as
``\u001b``) dropped (`_View`), and on the last of them with folded lines joined again
(`_folds`); every span found in a view is mapped back to the original, widened to whole
escapes, so a JSON text stays valid JSON with its formatting untouched. Each view is one
linear pass.

Two families of rules find the spans; all run on the original text and its views, their
spans are merged (overlaps become one marker, named by the rule listed first), and only
then replaced, so no rule ever reads another's marker:

**Formats with a shape of their own** (``secret_rules.json``, beside this module): provider
tokens recognised by prefix, alphabet and length: ``anthropic_key``, ``openai_key``,
``google_api_key``, ``google_oauth_token``, ``aws_access_key_id``, ``aws_session_token``,
``github_token``, ``gitlab_token``, ``slack_token``, ``slack_webhook``, ``discord_webhook``,
``teams_webhook``, ``sendgrid_key``, ``npm_token``, ``pypi_token``, ``rubygems_token``,
``stripe_key``, ``stripe_webhook_secret``, ``vault_token``, ``jwt``, ``grafana_token``,
``azure_storage_key``, ``azure_client_secret``, ``huggingface_token``, ``groq_key``,
``xai_key``, ``perplexity_key``, ``twilio_key``, ``mailchimp_key``, ``mailgun_key``,
``sendinblue_key``, ``shopify_token``, ``telegram_bot_token``, ``digitalocean_token``,
``databricks_token``, ``linear_key``, ``doppler_token``, ``age_secret_key``,
``square_token``, ``facebook_token``, ``atlassian_token``, ``supabase_token``,
``newrelic_key``, ``postman_key``, ``pulumi_token``, ``sentry_token``, ``heroku_key``,
``onepassword_token``, ``artifactory_key``, ``dynatrace_token``, ``easypost_key``,
``flutterwave_key``, ``frameio_token``, ``notion_token``, ``planetscale_token``,
``prefect_token``, ``readme_token``, ``scalingo_token``, ``shippo_token``,
``duffel_token``, ``infracost_token``, ``cloudflare_origin_ca_key``, ``clojars_token``,
``openshift_token``, ``replicate_token``, ``figma_token``, ``flyio_token``,
``terraform_token``, ``docker_hub_token``, ``tailscale_key``, ``langsmith_key``,
``pinecone_key``, ``airtable_token``, ``contentful_token``, ``mapbox_token``,
``dropbox_token``, ``braintree_token``, ``resend_key``, ``netlify_token``. Most follow
gitleaks' rule set (MIT; provenance in the data file), re-expressed for Python; the rest
are ours, each from the prefix and shape its provider documents. A token must stand
alone, not inside a longer token such as base64 image data.

**Secrets known by their context** (here, because each needs a few lines of judgement):

``private_key``
    A PEM block from ``-----BEGIN ... PRIVATE KEY-----`` to its END line, across real or
    JSON-escaped newlines; a block cut off before its END line is hidden up to the last
    base64 character.
``url_password``
    The password in ``scheme://user:password@host``; user and host are kept.
``authorization``
    The credential after ``Authorization:``, header or JSON style, behind any scheme word
    (Bearer, Basic, SSWS, OAuth, Negotiate, a vendor's own) or none.
``bearer_token``
    ``Bearer <token>`` anywhere else, when the token looks machine-made.
``aws_secret_key``
    The 40-character value of ``aws_secret_access_key``.
``cookie``
    In a ``Cookie:`` or ``Set-Cookie:`` header, the value of a cookie named for a session,
    token or login (``sessionid``, ``sid``, ``auth``...), or any random-looking value of 16
    characters or more; ``theme=dark`` and the attributes (``Path``, ``Expires``) stay.
``command_password``
    Credentials on a command line: ``curl -u user:pass`` (and ``--user``), ``mysql -pPASS``,
    ``docker login -p PASS``, ``sshpass -p PASS``, ``twine -p PASS``, ``htpasswd -b``,
    ``skopeo --creds user:pass``, a ``.netrc`` line, and ``--password PASS`` /
    ``--token TOKEN`` (any flag that names a secret) separated by a space.
``password`` / ``secret``
    ``KEY=value``, ``KEY: value``, ``"key": "value"`` (env files, YAML, JSON, query strings,
    headers such as ``X-API-Key:``, also with JSON-escaped quotes) where the key names a
    secret. A pair whose key names nothing secret is looked into, so the secret in
    ``{"cmd": "DB_PASSWORD=hunter2hunter2"}`` is still found. Keys are split into words
    (``DB_PASSWORD``, ``dbPassword``, ``db.password`` -> db, password) and:

    * a key with a password word (any word containing password, passwd or passphrase,
      ``PGPASSWORD`` included; pwd; pass as the last word) takes a value of 4 or more
      characters -> ``password``;
    * a key with a secret word (secret, token, apikey, credential(s), authorization,
      privatekey, accesskey, secretkey, signature; auth or pat as the last word), or ending
      in ``key`` after api/access/private/secret/signing/encryption/master/client/service/
      auth/session/app/license/webhook, takes a value of 8 or more characters that is not
      purely numeric -> ``secret``;
    * any other key ending in ``key`` (``SENTRY_KEY``) needs a value that looks random: 8 or
      more characters with a letter and a digit;
    * never a key ending in a word that describes the secret instead of holding it
      (``password_hint``, ``token_count``, ``max_tokens``, ``PASSWORD_HASHER``,
      ``api_key_id``, ``key_path``...), nor a key whose word before ``key`` says it is not
      secret (``public_key``, ``primary_key``, ``sort_key``, ``cache_key``...);
    * never a placeholder value: ``$VAR``, ``${VAR}``, ``{{ var }}``, ``<your-key>``, ``%s``,
      ``null``/``none``/``true``/``false``, ``changeme``, only ``*``, ``x`` or ``.``; nor,
      outside env files, code: ``os.environ[...]``, ``get_password()``, ``settings.api_key``,
      a type annotation (``api_key: SecretStr = ...``).

    In an env-style line (``UPPER_KEY=value``, no spaces) the value runs to whitespace or a
    quote, so a Django key full of punctuation is hidden whole; elsewhere an unquoted value
    also ends at one of ``, ; & ( ) [ ] { }``.

``private_key`` (JWK)
    A JSON Web Key's private members (``d``, ``p``, ``q``, ``dp``, ``dq``, ``qi``, a
    symmetric key's ``k``) in a text that holds ``"kty"``; ``n``, ``e``, ``x``, ``y`` stay.
``aws_secret_key`` (prompt)
    The answer to ``aws configure``'s ``AWS Secret Access Key [None]:``.

``clipped_secret``
    What a clip left of a credential: a known prefix (``ghp_``, ``sk-ant-``, ``AKIA``...)
    or a URL's password, cut by an ellipsis (the detectors' summaries quote a call that
    way), too short for its full rule and too long to show; or any run of 12 or more token
    characters cut by the ellipsis that looks machine-made (`_secret_like`).

``private_key`` (other envelopes)
    An SSH2 key (``---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----`` to its END line), a PuTTY
    key's private lines and MAC (``Private-Lines: N``, the lines, ``Private-MAC:``; the
    public lines stay; where a clip took the header, the lines left between the clip and
    the MAC), and a PEM private key that is itself base64 (kubeconfig's
    ``client-key-data: LS0tLS1CRUdJTi...``, decoded far enough to see ``PRIVATE KEY``; a
    certificate's ``client-certificate-data`` stays), also wrapped over lines.

``opaque_token``
    A token of no known format where its place says credential, hidden when it also looks
    machine-made: at least 20 characters (12 where the context names a secret), letters
    and digits, character classes alternating as random ones do, and Shannon entropy near
    the most its length and alphabet allow (`_secret_like`; the way gitleaks and
    detect-secrets pair a keyword with an entropy threshold, with the context first). The
    places: a URL's user part with no password (``https://<token>@github.com``); a URL's
    path segment (``/hooks/catch/<token>``; any token after a segment naming a secret,
    ``/with/key/<token>``); a name that says secret whose value is not beside it but on
    the next lines or inside a nested structure (``client_secret:`` then an indented block,
    ``{"api_key": {"value": ...}}``). Never where no context names or allows one, and never
    a hex digest, a UUID or base64 file data (PNG, JPEG, PDF...) outside a named context.

**A name and its value apart** (reported as ``password`` or ``secret`` by the same word
test as an assignment's key):

* a name field and the value field after it, within a short window and before the next
  name field: a Kubernetes env list (``- name: DB_PASSWORD`` / ``value: ...``, also as
  JSON), AWS SSM (``"Name": "/prod/db/password"``, ``"Value": ...``), CloudFormation's
  ``ParameterKey``/``ParameterValue``, ``<add key="..." value="..."/>``;
* an XML element named for a secret: ``<password>``, ``<secret>``, ``<apiKey>``,
  ``<token>``; ``<maxTokens>`` and ``<traceId>`` stay;
* a Java system property: ``-Dspring.datasource.password=...``;
* SQL: ``PASSWORD '...'`` (quoted only: the bare word is prose), ``IDENTIFIED [WITH
  plugin] BY ...``; psql's ``:'variable'`` stays;
* Oracle's ``user/password@connect`` after ``sqlplus`` (and its kin) or ``connect``; never
  elsewhere, where ``actions/checkout@v4`` has the same shape;
* a ``.pgpass`` line ``host:port:database:user:password`` whose host reads as one and
  whose password has a digit or a sign, so log fields and MAC addresses stay;
* a CSV whose header names a secret column (AWS's ``credentials.csv``): that column of
  the rows below it, up to 50 rows of the same width; flattened onto one line (a verdict's
  summary joins lines with blanks), every credential-looking field after the header.

Placeholders are never secrets: ``$VAR``, ``<YOUR_TOKEN>``, ``your-api-key-here``, and
AWS's documented example keys (``AKIAIOSFODNN7EXAMPLE``, ``...EXAMPLEKEY``); nor are masks
(``********``) or empty values. ``changeme`` counts as a placeholder: it is a template's
default, known to everyone, so hiding it protects nothing and would hide from the judge
that the template was never filled in.

Left alone on purpose: hex digests (git SHAs, sha256), UUIDs (unless a key names them a
secret), base64 data, public keys and certificates, numbers, and words that merely mention
"password" or "token".

Every pattern is linear in the length of its input: bounded repeats, no quantified group
that holds another quantifier, and no rule rescans more than a bounded window (the tests
time each on megabyte inputs built to make backtracking engines stall).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from itertools import pairwise
from typing import Any

from judge.errors import ConfigError

MARKER = "[REDACTED:{kind}]"
# A keyed redactor's placeholder (`Redactor.placeholder`): the kind and a short keyed hash.
KEYED_MARKER = "[REDACTED:{kind}:{hash}]"
# Hex digits of the keyed hash: 32 bits, so two different secrets of one tracker share a
# placeholder with odds near 2**-32, and the placeholder says little about its secret.
PLACEHOLDER_HEX = 8
# Bytes of a random placeholder key, and the fewest a given key may have.
_KEY_BYTES = 32
_KEY_BYTES_MIN = 16
# Every built-in rule's marker starts with this; a value already holding it is skipped, so
# redacting twice changes nothing.
_MARKER_PREFIX = "[REDACTED:"
# Kind reported for a user-supplied pattern.
CUSTOM_KIND = "custom"
# The format rules' data file, a sibling of this module.
RULES_FILE = "secret_rules.json"
# What {start} and {end} stand for in the data file: a token does not continue a longer one
# (letters, digits, _ and -, and base64's + and / before it).
_START = r"(?<![A-Za-z0-9_+/-])"
_END = r"(?![A-Za-z0-9_-])"

# Longest key name the assignment rule looks at; bounds its scan of long identifiers.
_KEY_MAX = 80
# A value longer than this is not a credential someone typed; bounds every value scan.
_VALUE_MAX = 1024
# How far a command line is read for its credential flags, in characters and in words.
_COMMAND_MAX = 1000
_COMMAND_WORDS = 64
# Longest Cookie header body read.
_COOKIE_MAX = 4096
# A PEM block's body is read this far at most when its END line is missing.
_PEM_MAX = 20_000
# A cookie value this long and random-looking is treated as a credential whatever its name.
_RANDOM_COOKIE_MIN = 16
# A part of a dotted value this long and random-looking is no attribute name.
_RANDOM_PART = 16
# What a clipped quote ends with: the detectors' summaries cut a long call with it.
_ELLIPSIS = "…"


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Prefixes that make a token a credential however little of it is left: a summary that
# clipped "ghp_cLq0tI1jksz…" leaves too little for the full rule, and too much to show.
_CUT_PREFIXES = sorted(
    _wordset(
        "ghp_ gho_ ghu_ ghs_ ghr_ github_pat_ glpat- glptt- glrt- sk-ant- sk-proj- sk-svcacct- "
        "sk-admin- sk_live_ rk_live_ sk_test_ rk_test_ whsec_ xoxa- xoxb- xoxe- xoxo- xoxp- xoxr- "
        "xoxs- xapp- AKIA ASIA ABIA ACCA AIza ya29. 1//0 hf_ api_org_ npm_ pypi-AgEIcHlwaS5vcmc "
        "SG. eyJ hvs. hvb. hvr. glc_ glsa_ gsk_ xai- pplx- lin_api_ shpat_ shpca_ shppa_ shpss_ "
        "dop_v1_ doo_v1_ dor_v1_ dapi sbp_ NRAK- PMAK- pul- sntrys_ sntryu_ HRKU-AA ops_eyJ "
        "dt0c01. AGE-SECRET-KEY-1 xkeysib- rubygems_ CLOJARS_ r8_ figd_ fm2_ fo1_ dckr_pat_ "
        "dckr_oat_ tskey- lsv2_ pcsk_ CFPAT- sk.eyJ xsmtpsib- sb_secret_ nfp_ sl.u. "
        "access_token$production$ secret_ r8_ figd_"
    ),
    key=lambda prefix: (-len(prefix), prefix),
)


# A prefix this long names its format unmistakably ("glpat-", "github_pat_"): what follows
# it is a token's piece however short. A shorter one ("hf_", "npm_") needs a random piece.
_CUT_PREFIX_DISTINCT = 5
_CUT_REST = 6
_WORDLIKE = re.compile(r"[a-z_]*")


def _clipped_prefix_ok(value: str) -> bool:
    """A clipped credential's start, not a word cut short ("npm_package_ver…"): random, or
    a distinctive prefix followed by anything but small letters and underscores."""
    for prefix in _CUT_PREFIXES:  # longest first
        if value.startswith(prefix):
            rest = value[len(prefix) :]
            if len(prefix) >= _CUT_PREFIX_DISTINCT and not _WORDLIKE.fullmatch(rest):
                return True
            return len(rest) >= _CUT_REST and _looks_random(value)
    return False


# A key ending in one of these words describes a secret instead of holding one.
_NON_SECRET_LAST = _wordset(
    "count counts hint hints length len size limit limits type types name names id ids "
    "path paths file files dir url urls uri endpoint env var field label prompt prompts "
    "policy expiry expires expiration ttl timeout version format usage min max total rate "
    "budget required enabled disabled set prefix suffix header param params kind mode "
    "method provider scheme strategy index idx pattern regex rotation created updated "
    "used in at ms seconds estimate estimates hasher hashers algorithm algo backend "
    "backends validator validators reset stdin store storage manager source ref strength "
    "complexity age history attempts retries lifetime reminder"
)
_PASSWORD_STEMS = ("password", "passwd", "passphrase")
_SECRET_WORDS = _wordset(
    "secret secrets token apikey credential credentials authorization privatekey accesskey "
    "secretkey signature"
)
# Secret only as the last word: "auth" and "pat" are too common inside names.
_SECRET_LAST = _wordset("auth pat sig")
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
_PLACEHOLDERS = _wordset(
    "null none nil true false undefined redacted changeme change_me example xxxx string"
)

_ENV_CODE = re.compile(r"[a-z_][a-z_.]{1,60}[(\[]")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


def _is_dotted_name(value: str) -> bool:
    """``settings.api_key``: an attribute path in source code, not a literal."""
    parts = value.split(".")
    return len(parts) > 1 and all(
        p
        and not p[0].isdigit()
        and p.replace("_", "a").isalnum()
        and p.isascii()
        # A name is words; a JWT's base64 parts ("eyJhbGciOi...") are not.
        and not (len(p) >= _RANDOM_PART and _looks_random(p))
        for p in parts
    )


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


# First words of a value that tells the reader what to put there ("your-api-key-here").
_PLACEHOLDER_LEADS = _wordset("your my insert enter replace put paste some dummy fake sample")
_PLACEHOLDER_SPLIT = re.compile(r"[-_. ]")


def _is_placeholder(value: str) -> bool:
    if value.startswith(("$", "{{", "<", "%", _MARKER_PREFIX)) or _MARKER_PREFIX in value:
        return True
    lowered = value.lower()
    if lowered in _PLACEHOLDERS:
        return True
    # AWS's documented example credentials (AKIAIOSFODNN7EXAMPLE and its secret, ending in
    # EXAMPLEKEY) fill every tutorial; a random key ends so with negligible chance.
    if value.endswith(("EXAMPLE", "EXAMPLEKEY")):
        return True
    words = _PLACEHOLDER_SPLIT.split(lowered)
    if len(words) > 1 and words[0] in _PLACEHOLDER_LEADS and all(w.isalpha() for w in words):
        return True
    if value.startswith("[") and value.endswith("]"):
        return True  # [REDACTED], [hidden]: already masked by someone else
    return set(value) <= set("*xX.")


@lru_cache(maxsize=4096)
def _key_class(key: str) -> str | None:
    """'password', 'secret', 'key' (needs a random value) or None for a harmless key.

    Cached: the same few keys recur in every text (a log repeats its field names)."""
    words = _words(key)
    if not words or words[-1] in _NON_SECRET_LAST:
        return None
    if any(stem in w for w in words for stem in _PASSWORD_STEMS):
        return "password"
    # "pass" alone is too common a word (pass_through, pass_rate) except as the last one.
    if "pwd" in words or words[-1] == "pass":
        return "password"
    if any(w in _SECRET_WORDS for w in words) or words[-1] in _SECRET_LAST:
        return "secret"
    if words[-1] in ("key", "keys"):
        before = words[-2] if len(words) > 1 else ""
        if before in _PUBLIC_KEY_PREFIXES:
            return None
        return "secret" if before in _SECRET_KEY_PREFIXES else "key"
    return None


# Authorization schemes, never a credential by themselves ("Authorization: Bearer" and
# nothing after it).
_SCHEMES = _wordset("bearer basic token digest bot apikey key ssws oauth negotiate ntlm hoba")


def _not_a_scheme(value: str) -> bool:
    return value.lower() not in _SCHEMES


def _value_ok(key_class: str | None, value: str) -> bool:
    if key_class == "password":
        return len(value) >= 4
    if key_class == "secret":
        return len(value) >= 8 and not value.isdigit()
    if key_class == "key":
        return len(value) >= 8 and _looks_random(value)
    return False


def _marker_kind(key_class: str) -> str:
    return "password" if key_class == "password" else "secret"


Span = tuple[str, int, int]
"""(kind, start, end) of one secret in the text."""


class _Rule:
    """One built-in or custom rule: the spans it hides in a text.

    ``triggers`` are lowercase substrings one of which must occur for the rule to run at
    all (empty: always runs); most texts hold none, which makes most rules free.
    """

    kind: str
    triggers: tuple[str, ...]

    def spans(self, text: str) -> list[Span]:
        raise NotImplementedError


@cache
def _compiled(source: str, flags: int) -> re.Pattern[str]:
    """Compiled on first use: most rules never run (their keywords are absent), and a
    short-lived process (a hook) should not pay for compiling ninety patterns."""
    return re.compile(source, flags)


@dataclass(frozen=True, slots=True)
class _PatternRule(_Rule):
    """A regular expression; its ``secret`` group (or the whole match) is the secret."""

    kind: str
    source: str
    triggers: tuple[str, ...] = ()
    accept: Callable[[str], bool] | None = None
    placeholders: bool = True
    flags: int = 0

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compiled(self.source, self.flags)

    def spans(self, text: str) -> list[Span]:
        found: list[Span] = []
        pattern = self.pattern
        secret_group = "secret" in pattern.groupindex
        for m in pattern.finditer(text):
            group = "secret" if secret_group and m.group("secret") else 0
            value = m.group(group)
            if not value or _MARKER_PREFIX in value:
                continue
            if self.placeholders and _is_placeholder(value):
                continue
            if self.accept is not None and not self.accept(value):
                continue
            found.append((self.kind, m.start(group), m.end(group)))
        return found


Resolve = Callable[[re.Match[str]], tuple[list[Span], int]]
"""Spans to hide in a match, and where the next search starts (inside the match when the
match was not a secret, so a secret nested in its value is still found)."""


@dataclass(frozen=True, slots=True)
class _ResolvedRule(_Rule):
    """A pattern whose matches need judgement (`Resolve`)."""

    kind: str
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]
    resolve: Resolve

    def spans(self, text: str) -> list[Span]:
        found: list[Span] = []
        pos = 0
        while pos <= len(text):
            m = self.pattern.search(text, pos)
            if m is None:
                break
            spans, resume = self.resolve(m)
            found.extend(spans)
            pos = max(resume, m.start() + 1)
        return found


@dataclass(frozen=True, slots=True)
class _PemRule(_Rule):
    """PEM private keys: BEGIN to END, or to the last base64 character when END is gone;
    with ``begin`` and ``end`` of their own, another envelope of the same shape (SSH2).

    The END line is searched for once per block and remembered, so a text of many BEGIN
    lines without END is still read in one pass.
    """

    kind: str = "private_key"
    triggers: tuple[str, ...] = ("private key",)
    begin: re.Pattern[str] | None = None
    end: re.Pattern[str] | None = None
    body: re.Pattern[str] | None = None

    def spans(self, text: str) -> list[Span]:
        begins = self.begin or _PEM_BEGIN
        ends = self.end or _PEM_END
        found: list[Span] = []
        pos = 0
        end_match: re.Match[str] | None = None
        no_end_after = len(text) + 1
        while True:
            begin = begins.search(text, pos)
            if begin is None:
                return found
            end: int | None = None
            if begin.end() < no_end_after:
                if end_match is None or end_match.start() < begin.end():
                    end_match = ends.search(text, begin.end())
                if end_match is None:
                    no_end_after = begin.end()
                else:
                    end = end_match.end()
            if end is None:
                cut = (self.body or _PEM_BODY).match(text, begin.end())
                end = cut.end() if cut else begin.end()
            found.append((self.kind, begin.start(), end))
            pos = end


_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END = re.compile(r"-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_BODY = re.compile(rf"[A-Za-z0-9+/=\s\\:,-]{{0,{_PEM_MAX}}}")

# An optional quote, possibly JSON-escaped (\" inside a JSON string).
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


# -- opaque tokens in context ------------------------------------------------------------------
#
# A credential of a format no rule knows is still a run of random characters, and where
# it stands says what it is: after a name that says secret in the same structure, as the
# user of a URL, as a path segment of one, cut short by a clip. The rules below read
# those places and hide a token there only when it also looks machine-made (`_secret_like`):
# long enough, of several character classes that alternate the way random ones do, and of
# high Shannon entropy for its length and alphabet. This is how gitleaks and detect-secrets
# pair a keyword with an entropy threshold; the context comes first here, since entropy
# alone would hide every checksum, UUID and base64 image as well. Digests (hex only), UUIDs,
# data URIs and file contents in base64 (by their first bytes) never count as secrets in a
# context that does not name one.

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_HEX = re.compile(r"[0-9a-fA-F]+")
# base64 of a file's first bytes: PNG, JPEG, GIF, PDF, ZIP, RIFF (WebP, WAV), gzip, MP4 and
# other ISO media ("AAAA" + box size), WOFF2; data, never a credential.
_DATA_PREFIXES = (
    "iVBORw0KGgo",
    "/9j/",
    "R0lGOD",
    "JVBERi0",
    "UEsDB",
    "UklGR",
    "H4sI",
    "AAAA",
    "d09GMg",
)
# The fewest characters an opaque token is judged at, where the context names a secret
# (lenient) and where it only allows one (strict).
_OPAQUE_MIN_NAMED = 12
_OPAQUE_MIN = 20
_OPAQUE_MAX = 4096
# Of a random token's characters, at least this share are letters or digits (a path or a
# sentence has more punctuation).
_ALNUM_SHARE = 0.75
# Entropy, as a share of the most a string of its length and alphabet can have: random
# base62 of 20 characters reaches about 0.9 of it, "DeployNightlyBuild2024" about 0.75.
_ENTROPY_SHARE = 0.72
_ENTROPY_SHARE_NAMED = 0.6
# Changes of character class (lower, upper, digit) between neighbours, per character:
# about 0.6 for random base62, 0.45 for random hex, 0.15 for CamelCase words.
_CLASS_CHANGES = 0.28
_CLASS_CHANGES_NAMED = 0.18


_LOWER_RUN = re.compile(r"[a-z]{4,}")
# Of a token with capitals and small letters, at most this share in runs of four or more
# small letters: about 0.1 for random base62, 0.7 for CamelCase.
_WORD_SHARE = 0.4


def _entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits per character."""
    n = len(value)
    counts: dict[str, int] = {}
    for c in value:
        counts[c] = counts.get(c, 0) + 1
    return -sum(k / n * math.log2(k / n) for k in counts.values())


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}")
# Characters of a token decoded to see whether it is text in base64.
_DECODED_HEAD = 64
# Of the bytes decoded, this share printable (ASCII letters, signs, blanks) makes text:
# random bytes are printable with odds of 97 in 256 each, so 48 bytes of a key decode so
# with odds far below 10**-15.
_PRINTABLE_SHARE = 0.95


def _encoded_text(value: str) -> bool:
    """Whether ``value`` is text in base64 (a message, a JSON document, a script): what it
    decodes to is printable. A key or token is random bytes, or random characters that
    decode to random bytes."""
    run = _BASE64_RUN.match(value)
    if run is None:
        return False
    head = run.group()[:_DECODED_HEAD]
    head = head[: len(head) // 4 * 4]
    try:
        raw = base64.b64decode(head.replace("-", "+").replace("_", "/"), validate=True)
    except (ValueError, binascii.Error):
        return False
    printable = sum(1 for b in raw if 32 <= b < 127 or b in (9, 10, 13))
    return printable >= _PRINTABLE_SHARE * len(raw)


def _char_class(c: str) -> int:
    if "a" <= c <= "z":
        return 1
    if "A" <= c <= "Z":
        return 2
    if "0" <= c <= "9":
        return 3
    return 0


def _secret_like(value: str, *, named: bool = False, shortest: int | None = None) -> bool:
    """Whether an opaque token reads as machine-made (see above). ``named``: the context
    names a secret (a key, a header, a URL's user part), so a shorter token, a hex one, or
    one of fewer classes counts. ``shortest``: the fewest characters judged, if not the
    context's default."""
    n = len(value)
    if shortest is None:
        shortest = _OPAQUE_MIN_NAMED if named else _OPAQUE_MIN
    if not shortest <= n <= _OPAQUE_MAX:
        return False
    if _is_placeholder(value) or _UUID.search(value) or value.startswith(_DATA_PREFIXES):
        return False
    if _encoded_text(value):
        return False  # text in base64: data, not a key
    core = value.rstrip("=")
    hex_only = _HEX.fullmatch(core) is not None
    if hex_only and not named:
        return False  # a digest, a git SHA, a checksum
    classes = [_char_class(c) for c in core]
    alnum = sum(1 for k in classes if k)
    if alnum < _ALNUM_SHARE * len(core):
        return False
    present = {k for k in classes if k}
    if len(present) < 2 or (not named and 3 not in present):
        return False
    changes = sum(1 for a, b in pairwise(classes) if a != b and a and b)
    if changes < (_CLASS_CHANGES_NAMED if named else _CLASS_CHANGES) * len(core):
        return False
    if 2 in present and 1 in present:
        # CamelCase words: most small letters stand in runs of four or more ("Deploy",
        # "Nightly"); in random base62 few do.
        in_words = sum(len(run) for run in _LOWER_RUN.findall(core))
        if in_words > _WORD_SHARE * len(core):
            return False
    alphabet = 16 if hex_only else 64
    most = min(math.log2(alphabet), math.log2(len(core)))
    share = _ENTROPY_SHARE_NAMED if named else _ENTROPY_SHARE
    return _entropy(core) >= share * most


def _named_secret_like(value: str) -> bool:
    return _secret_like(value, named=True)


# A URL's user part with no password ("https://<token>@github.com"): a name like "git" or
# "alice" stays, a token goes.
_URL_USER = (
    r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://(?P<secret>[^\s:/?#@\"'<>\\]{12,256})@"
    r"(?=[^\s/?#@\"'<>\\])"
)
# A URL and its path, up to a query, a fragment, a quote or a blank.
_URL_PATH = re.compile(
    r"\b[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^\s/?#\"'<>\\]{1,256}(?P<path>/[^\s?#\"'<>\\]{1,2048})"
)
_PATH_SEGMENT = re.compile(r"[^/;,=]+")
# Words of a URL (host labels and path segments) that make it a place for secrets: a
# webhook's or a bot's address, an endpoint taking a key or token in its path. Elsewhere a
# path's random segments are ids (a CDN's asset ids, a short link, a hashed file name) and
# stay.
_URL_SECRET_WORDS = (
    "hook",
    "token",
    "key",
    "secret",
    "auth",
    "cred",
    "passw",
    "signature",
    "bot",
    "invite",
    "callback",
)
_FILE_NAME = re.compile(r".+\.[A-Za-z][A-Za-z0-9]{0,4}")


def _resolve_url_path(m: re.Match[str]) -> tuple[list[Span], int]:
    """Path segments that are tokens, in a URL whose host or path has a word of
    `_URL_SECRET_WORDS`: any after a segment naming a secret ("/key/<token>",
    "/token/<token>"), else one that looks machine-made by the strict test (a webhook's
    secret path). A file's name (a hashed image name) is never one."""
    lowered = m.group().lower()
    if not any(word in lowered for word in _URL_SECRET_WORDS):
        return [], m.end()
    spans: list[Span] = []
    base = m.start("path")
    previous = ""
    for seg in _PATH_SEGMENT.finditer(m.group("path")):
        value = seg.group()
        named = _key_class(previous) is not None
        if not _FILE_NAME.fullmatch(value) and _secret_like(value, named=named):
            spans.append(("opaque_token", base + seg.start(), base + seg.end()))
        previous = value
    return spans, m.end()


# A name that says secret whose value is not beside it: on the next lines ("client_secret:"
# then an indented block), in a nested structure ({"api_key": {"value": ...}}), in a list.
_NAME_ALONE = re.compile(
    rf"(?<![A-Za-z0-9_.\-\\]){_Q}(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,{_KEY_MAX}}}){_Q}"
    # A YAML block scalar's indicator, or a list's first dash, may follow on the same line
    # (a verdict's summary joins the lines with blanks).
    r"[ \t]*[:=][ \t]*(?:[|>][+-]?(?:[ \t]+|(?=\r?\n|\\r?\\n))|-[ \t]+"
    r"|(?=[\[{]|\r?\n|\\r?\\n))"
)
# How far after such a name its value is looked for, and how many tokens are read there.
_NEARBY = 200
_NEARBY_TOKENS = 6
# A token does not start inside another, nor right after a backslash (the "n" of an
# escaped line break is no token's first character; the decoded view reads it).
_OPAQUE_TOKEN = re.compile(r"(?<![A-Za-z0-9+/_.~=$\\-])[A-Za-z0-9+/_.~=$-]{12,4096}")


def _resolve_name_alone(m: re.Match[str]) -> tuple[list[Span], int]:
    key = m.group("key")
    # A list's name is plural ("registration_tokens:", "tokens": [...]).
    if _key_class(key) is None and not (key.endswith("s") and _key_class(key[:-1])):
        return [], m.end()
    text = m.string
    spans: list[Span] = []
    stop = min(len(text), m.end() + _NEARBY)
    for n, token in enumerate(_OPAQUE_TOKEN.finditer(text, m.end(), stop)):
        if n == _NEARBY_TOKENS:
            break
        value = token.group()
        if token.end() == stop and stop < len(text):
            break  # cut by the window: judged where it ends
        if _secret_like(value):
            spans.append(("opaque_token", token.start(), token.end()))
    return spans, m.end()


# What a clip left of a token: a run of token characters cut by an ellipsis. Whatever its
# format, a random run this long is a credential's piece (the known prefixes shorter than
# this are read by the clipped_secret rule).
_CLIPPED_RUN = r"(?<![A-Za-z0-9_+/$.~\\-])(?P<secret>[A-Za-z0-9_$.~-]{12,4096})" + _ELLIPSIS


# A provider token's parts are joined by one of these ("secret_...", "<id>.atlasv1.<key>",
# "access_token$production$..."); base64 data (a hash, a certificate, a public key, an
# integrity string), whose clipped start is as random, has none of them, nor does the run
# take its "+" and "/".
_TOKEN_SEPARATORS = "_.$"


def _clipped_like(value: str) -> bool:
    """A clipped token's piece: random by the strict test (a digit among letters of both
    cases or many class changes; "BeautifulSoup…" and "RemovedInDjango…" stay), only
    shorter, as the clip left it."""
    return any(c in _TOKEN_SEPARATORS for c in value) and _secret_like(
        value, shortest=_OPAQUE_MIN_NAMED
    )


# A CSV that a summary flattened onto one line ("id,name,api_token,created 1,ci-bot,<token>,
# 2026-01-02"): the header names a secret column, the rows follow after a space. Which
# field is which is lost, so every field after the header that looks like a credential
# (a letter and a digit, or a sign among letters) is hidden.
_CSV_FLAT = re.compile(r"(?<![A-Za-z0-9_,])[A-Za-z_][A-Za-z0-9 _.-]{0,60},[A-Za-z_][^\r\n]{0,4000}")
_CSV_HEADER_FIELD = re.compile(r"[ \t]*[A-Za-z_][A-Za-z _.-]{0,60}")
_CSV_FIELD = re.compile(r"[^,\s]+")


def _resolve_csv_flat(m: re.Match[str]) -> tuple[list[Span], int]:
    """The header is the leading fields that are names (letters, no digits); the fields
    after it are rows, the first of them joined to the header's last name by a space."""
    fields = m.group().split(",")
    header = 0
    while header < len(fields) and _CSV_HEADER_FIELD.fullmatch(fields[header]):
        header += 1
    at = m.start() + sum(len(f) + 1 for f in fields[:header])
    names = [f.strip() for f in fields[:header]]
    if header < len(fields):
        # The field where the rows begin: its name, a blank, the first row's first value.
        joined = _CSV_HEADER_FIELD.match(fields[header])
        name = joined.group().strip().rpartition(" ")[0] if joined is not None else ""
        if name:
            names.append(name)
    if len(names) < 2 or not any(_key_class(name) for name in names):
        return [], m.start() + len(fields[0]) + 1
    spans: list[Span] = []
    for field in _CSV_FIELD.finditer(m.string, at, m.end()):
        raw = field.group()
        value = raw.strip("\"'").rstrip(_ELLIPSIS)
        if len(value) < 8 or _MARKER_PREFIX in value or "://" in value or _is_placeholder(value):
            continue
        signs = any(not c.isalnum() for c in value) and sum(c.isalpha() for c in value) >= 4
        if _looks_random(value) or (signs and any(c.isdigit() for c in value)):
            start = field.start() + raw.index(value)
            spans.append(("secret", start, start + len(value)))
    return spans, m.end()


# -- private keys in other envelopes -----------------------------------------------------------

# PuTTY's .ppk: a header, the public part, then "Private-Lines: N", the private key's base64
# lines and its MAC. From Private-Lines to the end of the MAC line is hidden (or to the last
# base64 character when the MAC is gone); the public lines stay.
# A verdict's summary joins the lines with blanks: those separate them as well.
_PUTTY_LINES = re.compile(r"Private-Lines:[ \t]*(?P<n>\d{1,4})[ \t]*(?:\r?\n|[ \t])")
_PUTTY_LINE = re.compile(r"[A-Za-z0-9+/=]{1,256}(?:\r?\n|[ \t]|(?=…)|$)")
_PUTTY_MAC = re.compile(r"Private-(?:MAC|Hash):[ \t]*[0-9a-fA-F]{1,128}")


def _resolve_putty(m: re.Match[str]) -> tuple[list[Span], int]:
    text = m.string
    at = m.end()
    for _ in range(int(m.group("n"))):
        line = _PUTTY_LINE.match(text, at)
        if line is None:
            break
        at = line.end()
    mac = _PUTTY_MAC.match(text, at)
    end = mac.end() if mac is not None else at
    return ([("private_key", m.start(), end)] if end > m.end() else []), max(end, m.end())


# The same key when a clip took its head: what is left of the private lines, then the MAC
# ("... [... 1400 chars, blake2b ...] +IX7r...Od\nJxI0...Yg==\nPrivate-MAC: 3d31..."). With
# "Private-Lines: N" gone, the lines are found by walking back from the MAC: PuTTY writes
# its base64 64 characters a line, so the line before the MAC (the last, 1 to 64) and the
# full lines above it are the key's, up to the clip; the line under the clip may be
# shorter (the clip cut it). A walk that meets no clip ("Private-Lines: 14", a public
# part's short last line, prose) takes no line: a whole key is the forward rule's, and a
# word before a MAC is no key's. A walk reads back only over base64 and line breaks, and
# a MAC's label is neither: it stops at the MAC line before it, so the text is read once.
_PUTTY_MAC_ANCHOR = re.compile(r"Private-(?:MAC|Hash):[ \t]*(?P<mac>[0-9a-fA-F]{1,128})")
_PUTTY_WIDTH = 64
_PUTTY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
# What ends where a clip cut a text: `judge.history.bounded`'s marker, an ellipsis.
_CLIP_ENDS = ("...] ", _ELLIPSIS, _ELLIPSIS + " ")
# A MAC with no lines before it is hidden at a MAC's length (40 or 64 hex digits; an
# encrypted key's MAC is keyed by the passphrase, so it lets one test guesses offline),
# not a word that happens to be hex ("Private-MAC: bad").
_PUTTY_MAC_ALONE = 32


def _putty_break_before(text: str, pos: int) -> int:
    """Where the line break or blank that ends at ``pos`` starts, or -1 if none does."""
    if pos >= 1 and text[pos - 1] in " \t":
        return pos - 1
    if pos >= 1 and text[pos - 1] == "\n":
        return pos - 2 if pos >= 2 and text[pos - 2] == "\r" else pos - 1
    return -1


def _putty_clipped_lines(text: str, mac: int) -> int | None:
    """Where the private lines a clip left before the MAC at ``mac`` start, or None."""
    at = _putty_break_before(text, mac)
    last = True
    while at > 0:
        line_start = at
        while (
            line_start > 0
            and at - line_start <= _PUTTY_WIDTH
            and text[line_start - 1] in _PUTTY_CHARS
        ):
            line_start -= 1
        width = at - line_start
        if width == 0 or width > _PUTTY_WIDTH:
            return None
        if text.endswith(_CLIP_ENDS, 0, line_start):
            return line_start
        if width < _PUTTY_WIDTH and not last:
            return None  # a short line above the last that no clip cut
        at = _putty_break_before(text, line_start)
        last = False
    return None


def _resolve_putty_tail(m: re.Match[str]) -> tuple[list[Span], int]:
    start = _putty_clipped_lines(m.string, m.start())
    if start is None:
        if len(m.group("mac")) < _PUTTY_MAC_ALONE:
            return [], m.end()
        start = m.start()
    return [("private_key", start, m.end())], m.end()


# The SSH2 (RFC 4716, ssh.com) private key: "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----".
_SSH2_BEGIN = re.compile(r"---- BEGIN SSH2 (?:ENCRYPTED )?PRIVATE KEY ----")
_SSH2_END = re.compile(r"---- END SSH2 (?:ENCRYPTED )?PRIVATE KEY ----")
# Its headers may be quoted ('Comment: "rsa-key-2026"'), unlike a PEM block's.
_SSH2_BODY = re.compile(rf"[A-Za-z0-9+/=\s\\:,\"'._-]{{0,{_PEM_MAX}}}")
# A private key whose PEM is itself base64 (kubeconfig's client-key-data, a Kubernetes
# secret's data): "-----BEGIN" encodes to "LS0tLS1CRUdJTi" at the start of the value. It is
# read whole, its start decoded to see that a private key's BEGIN line is inside.
_B64_PEM = re.compile(r"(?<![A-Za-z0-9+/])LS0tLS1CRUdJTi[A-Za-z0-9+/]{8,20000}={0,2}")
_B64_HEAD = 96


# The tail of such a key when a clip took its start: a base64 run whose end decodes to a
# private key's END line. The dashes encode to one of these, whatever the alignment.
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40,20000}={0,2}(?![A-Za-z0-9+/=])")
_B64_DASHES = ("ls0tls", "0tls0t", "tls0tl")
_B64_TAIL = 64


def _resolve_b64_pem_tail(m: re.Match[str]) -> tuple[list[Span], int]:
    run = m.group()
    # A whole base64 text is a multiple of 4 long, so its end is aligned wherever a clip
    # cut its start: the last characters decode as they are.
    tail = run[-min(_B64_TAIL, len(run) // 4 * 4) :]
    try:
        decoded = base64.b64decode(tail).decode("ascii", "replace")
    except (ValueError, binascii.Error):
        return [], m.end()
    if "PRIVATE KEY-----" not in decoded or "-----END" not in decoded:
        return [], m.end()
    return [("private_key", m.start(), m.end())], m.end()


def _resolve_b64_pem(m: re.Match[str]) -> tuple[list[Span], int]:
    head = m.group()[:_B64_HEAD]
    head = head[: len(head) // 4 * 4]
    try:
        decoded = base64.b64decode(head).decode("ascii", "replace")
    except (ValueError, binascii.Error):
        return [], m.end()
    if "PRIVATE KEY" not in decoded:
        return [], m.end()  # a certificate, a public key
    return [("private_key", m.start(), m.end())], m.end()


# Words one of which a secret's name holds (the assignment, pair, element and CSV rules).
_SECRET_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "credential", "auth", "sig", "pat")


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


# -- the text as its reader sees it ----------------------------------------------------------

# What a reader never sees as written: JSON string escapes (a tool call's arguments are
# JSON, so the line after "\n" starts a line only once decoded; "\r\n" ends an HTTP header
# in a printed request) and terminal colour codes (raw, or JSON-escaped as \u001b), which
# stand between a token and the boundary its rule looks for. One pass decodes one level of
# escaping; a JSON text quoted inside a JSON string needs two.
_UNSEEN = re.compile(
    r"\\(?:u001[bB]\[[0-?]{0,32}[ -/]{0,8}[@-~]|u[0-9a-fA-F]{4}|[nrtbf\"\\/])"
    r"|\x1b\[[0-?]{0,32}[ -/]{0,8}[@-~]"
)
_SIMPLE_ESCAPES = {
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "b": "\b",
    "f": "\f",
    '"': '"',
    "\\": "\\",
    "/": "/",
}
# Levels of escaping decoded: JSON in a string in JSON (a command's JSON body in a tool
# call's arguments) and one more; each level is one linear pass.
VIEW_DEPTH = 3


def _unescaped(unit: str) -> str:
    """What one `_UNSEEN` unit shows its reader: nothing for a colour code."""
    if unit[0] == "\x1b" or (unit[1] == "u" and unit[2:6].lower() == "001b" and len(unit) > 6):
        return ""
    if unit[1] == "u":
        char = chr(int(unit[2:6], 16))
        # A lone surrogate half (an escaped emoji) is shown as a character of its own.
        return char if not 0xD800 <= ord(char) <= 0xDFFF else "\ufffd"
    return _SIMPLE_ESCAPES[unit[1]]


class _View:
    """A text with one level of escapes decoded and colour codes dropped, and the way
    back: a span found in the view is a span of the original covering whole escapes."""

    __slots__ = ("_olen", "_opos", "_vend", "_vpos", "text")

    def __init__(self, original: str, units: Iterable[tuple[int, int, str]] | None = None) -> None:
        """``units``: (start, end, shown) of each piece of ``original`` the reader sees
        otherwise, in order; by default its escapes and colour codes (`_UNSEEN`)."""
        if units is None:
            units = (
                (m.start(), m.end(), _unescaped(m.group())) for m in _UNSEEN.finditer(original)
            )
        parts: list[str] = []
        self._vpos: list[int] = []  # where each decoded unit starts in the view
        self._vend: list[int] = []  # and ends
        self._opos: list[int] = []  # where it starts in the original
        self._olen: list[int] = []  # its length there
        at = shift = 0  # shift: view position minus original position
        for start, end, shown in units:
            parts.append(original[at:start])
            parts.append(shown)
            view_start = start + shift
            self._vpos.append(view_start)
            self._vend.append(view_start + len(shown))
            self._opos.append(start)
            self._olen.append(end - start)
            shift += len(shown) - (end - start)
            at = end
        parts.append(original[at:])
        self.text = "".join(parts)

    def _unit(self, pos: int) -> int:
        """The last unit starting at or before view position ``pos`` (-1: none)."""
        return bisect_right(self._vpos, pos) - 1

    def start(self, pos: int) -> int:
        """The original position of view position ``pos`` (a unit's start when inside one)."""
        u = self._unit(pos)
        if u < 0:
            return pos
        if pos < self._vend[u]:
            return self._opos[u]
        return self._opos[u] + self._olen[u] + (pos - self._vend[u])

    def end(self, pos: int) -> int:
        """The original end of a span ending at view position ``pos`` (exclusive)."""
        if pos <= 0:
            return 0
        u = self._unit(pos - 1)
        if u >= 0 and pos - 1 < self._vend[u]:
            return self._opos[u] + self._olen[u]
        return self.start(pos - 1) + 1


# A line break a terminal put inside a token: the line before it is at least _FOLD_LINE
# characters long and ends in a run of 16 token characters, and the next line goes on
# with a run that reads as the rest of a token (`_continues`). A line of prose or a log
# ends in a word or a number, rarely in 16 characters without a space; a token wider than
# the terminal always does.
# A verdict's summary joins a result's lines with a blank: after a run of 40 token
# characters (a line of a wrapped key), a blank followed by the rest of a token is one too.
_FOLD = re.compile(
    r"(?:(?<=[A-Za-z0-9+/=_.~-]{16})\r?\n|(?<=[A-Za-z0-9+/=_.~-]{40}) )"
    r"(?P<next>[A-Za-z0-9+/=_.~-]{1,4096})"
)
_FOLD_LINE = 40


def _continues(run: str) -> bool:
    """The start of a line that goes on a token: a digit in it, or a capital after its
    first character beside small letters (random), not a word ("region", "Done") nor an
    assignment ("PASSWORD=..."; a token's "=" is padding at its end)."""
    if "=" in run.rstrip("="):
        return False
    if any(c.isdigit() for c in run):
        return True
    return any(c.isupper() for c in run[1:]) and any(c.islower() for c in run)


def _folds(text: str) -> list[tuple[int, int, str]]:
    """The line breaks of ``text`` a terminal's folding put there (`_FOLD`), as view units
    that show nothing. Each line is read once: linear."""
    units: list[tuple[int, int, str]] = []
    line_start = 0
    scanned = 0
    pos = 0
    while True:
        m = _FOLD.search(text, pos)
        if m is None:
            return units
        # The start of the line this break ends: the last break before it, searched only
        # from the previous break on, so the text is read once.
        before = text.rfind("\n", scanned, m.start())
        if before != -1:
            line_start = before + 1
        scanned = m.start("next")
        if m.start() - line_start >= _FOLD_LINE and _continues(m.group("next")):
            units.append((m.start(), m.start("next"), ""))
        line_start = m.start("next")
        pos = m.start("next")


def _reader_spans(
    text: str, spans_of: Callable[[str], list[tuple[int, int, int, str]]]
) -> list[tuple[int, int, int, str]]:
    """``spans_of`` the text as written and as read: each level of decoded escapes (up to
    VIEW_DEPTH), colour codes dropped, and then lines a terminal folded joined again;
    every span in the original's positions."""
    found = spans_of(text)
    views: list[_View] = []
    current = text
    while len(views) < VIEW_DEPTH and ("\\" in current or "\x1b" in current):
        view = _View(current)
        if view.text == current:
            break
        views.append(view)
        current = view.text
        found.extend(_back(spans_of(current), views))
    folds = _folds(current)
    if folds:
        views.append(_View(current, folds))
        found.extend(_back(spans_of(views[-1].text), views))
    return found


def _back(
    spans: Iterable[tuple[int, int, int, str]], views: Sequence[_View]
) -> Iterator[tuple[int, int, int, str]]:
    """Spans of the last of ``views`` in the positions of the text the first was made of."""
    for start, end, priority, kind in spans:
        for back in reversed(views):
            start, end = back.start(start), back.end(end)
        yield start, end, priority, kind


def _merge(spans: Sequence[tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    """Overlapping spans become one, named by the highest-priority rule among them."""
    merged: list[tuple[int, int, int, str]] = []
    for start, end, priority, kind in sorted(spans):
        if merged and start < merged[-1][1]:
            m_start, m_end, m_priority, m_kind = merged[-1]
            if priority < m_priority:
                m_priority, m_kind = priority, kind
            merged[-1] = (m_start, max(m_end, end), m_priority, m_kind)
        else:
            merged.append((start, end, priority, kind))
    return [(start, end, kind) for start, end, _, kind in merged]


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<kind>]``, or with a stable placeholder.

    ``extra_patterns`` are regular expressions for secrets of your own (an internal token
    format); a pattern with a named group ``secret`` hides only that group, otherwise the
    whole match, and is reported as ``custom``. ``builtins=False`` turns every built-in
    rule off; ``disable`` turns off the named kinds (see `BUILTIN_KINDS`; ``secret`` also
    turns off ``password``, which the same rule reports). Patterns are compiled once; an
    invalid one raises `ConfigError`.

    With a ``key`` each secret becomes ``[REDACTED:<kind>:<hash>]``, the hash a keyed
    digest of the secret (`placeholder`): equal secrets get equal placeholders and different
    ones (almost surely) different ones, so a reader still sees that two calls differ only
    in their token, or that they use the same one, and nobody without the key can test a
    guess against it. `keyed` gives a twin with a fresh random key: one per tracker, for
    what leaves it (the judge's prompt, verdicts, logs). Without a key the marker is the
    same for every secret of a kind, which is what a saved state holds: a tracker restored
    in another process, with no way to know the key, reads what is new the same way.
    """

    def __init__(
        self,
        *,
        extra_patterns: Iterable[str] = (),
        builtins: bool = True,
        disable: Iterable[str] = (),
        key: bytes | None = None,
    ) -> None:
        disabled = set(disable)
        unknown = disabled - set(BUILTIN_KINDS)
        if unknown:
            raise ConfigError(
                f"unknown redaction rule(s) {sorted(unknown)}; known: {list(BUILTIN_KINDS)}"
            )
        rules: list[_Rule] = (
            [r for r in _builtin_rules() if r.kind not in disabled] if builtins else []
        )
        for source in extra_patterns:
            try:
                compiled = re.compile(source)
            except re.error as exc:
                raise ConfigError(f"invalid redaction pattern {source!r}: {exc}") from exc
            if compiled.fullmatch("") is not None:
                raise ConfigError(f"redaction pattern {source!r} matches the empty string")
            rules.append(_PatternRule(CUSTOM_KIND, source, placeholders=False))
        self._rules: tuple[_Rule, ...] = tuple(rules)
        if key is not None and len(key) < _KEY_BYTES_MIN:
            raise ValueError(f"a placeholder key needs {_KEY_BYTES_MIN} bytes or more")
        self._key = key

    def keyed(self, key: bytes | None = None) -> Redactor:
        """The same rules, writing stable placeholders under ``key`` (random if None)."""
        twin = object.__new__(Redactor)
        twin._rules = self._rules
        twin._key = key if key is not None else os.urandom(_KEY_BYTES)
        if len(twin._key) < _KEY_BYTES_MIN:
            raise ValueError(f"a placeholder key needs {_KEY_BYTES_MIN} bytes or more")
        return twin

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of rule this redactor runs, in priority order."""
        return _kinds(self._rules)

    def placeholder(self, kind: str, secret: str) -> str:
        """What replaces ``secret`` (found by a rule of ``kind``)."""
        if self._key is None:
            return MARKER.format(kind=kind)
        digest = hmac.new(self._key, secret.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return KEYED_MARKER.format(kind=kind, hash=digest.hexdigest()[:PLACEHOLDER_HEX])

    def spans(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, kind) of every secret in ``text``, merged and in order."""
        if not text:
            return []
        spans = _merge(_reader_spans(text, self._text_spans))
        if _MARKER_PREFIX in text:
            spans = _outside_markers(text, spans)
        return spans

    def _text_spans(self, text: str) -> list[tuple[int, int, int, str]]:
        """(start, end, priority, kind) of what the rules find in ``text`` as it is. A rule
        runs only where one of its trigger words occurs: most texts hold none of most."""
        lowered = text.lower()
        # Each trigger word is looked for once per text: several rules share theirs.
        seen: dict[str, bool] = {}

        def present(word: str) -> bool:
            found = seen.get(word)
            if found is None:
                found = seen[word] = word in lowered
            return found

        found: list[tuple[int, int, int, str]] = []
        for priority, rule in enumerate(self._rules):
            if rule.triggers and not any(present(t) for t in rule.triggers):
                continue
            found.extend((s, e, priority, kind) for kind, s, e in rule.spans(text) if e > s)
        return found

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by its placeholder; unchanged if none."""
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        at = 0
        for start, end, kind in spans:
            parts.append(text[at:start])
            parts.append(self.placeholder(kind, _secret_text(text[start:end])))
            at = end
        parts.append(text[at:])
        return "".join(parts)

    __call__ = redact


# A placeholder as any redactor writes it (`MARKER`, `KEYED_MARKER`).
_PLACED = re.compile(r"\[REDACTED:[a-z0-9_]{1,40}(?::[0-9a-f]{1,16})?\]")


def _outside_markers(text: str, spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """``spans`` without those that touch a placeholder already in ``text``: a rule that
    reads one ("password:1a2b3c4d" inside "[REDACTED:password:1a2b3c4d]", a URL whose user
    is a placeholder) finds no secret, so redacting twice changes nothing."""
    placed = [m.span() for m in _PLACED.finditer(text)]
    if not placed:
        return spans
    starts = [start for start, _ in placed]
    kept = []
    for start, end, kind in spans:
        # The last placeholder starting before the span's end is the only one that can
        # overlap it: placeholders do not overlap each other.
        i = bisect_right(starts, end - 1) - 1
        if i >= 0 and placed[i][1] > start:
            continue
        kept.append((start, end, kind))
    return kept


def _secret_text(span: str) -> str:
    """The secret a span holds as its reader sees it (JSON escapes decoded, colour codes
    dropped), so the same secret in a tool call's JSON and in a plain result hashes alike."""
    for _ in range(VIEW_DEPTH):
        if "\\" not in span and "\x1b" not in span:
            break
        span = _View(span).text
    return span


@cache
def default_redactor() -> Redactor:
    """The shared redactor with every built-in rule and no extras."""
    return Redactor()


def redact(text: str) -> str:
    """``text`` with secrets replaced by ``[REDACTED:<kind>]`` (all built-in rules)."""
    return default_redactor().redact(text)


@cache
def _shared(patterns: tuple[str, ...]) -> Redactor:
    return Redactor(extra_patterns=patterns)


def redactor_for(*, enabled: bool, patterns: Iterable[str] = ()) -> Redactor | None:
    """The redactor a tracker's settings ask for (``redact_secrets``, ``redact_patterns``),
    or None when redaction is off. Trackers with the same settings share one, so the
    judge's prompt, the verdict texts and the logs all go through the same rules; each
    tracker writes what leaves it through its own `Redactor.keyed` twin."""
    return _shared(tuple(patterns)) if enabled else None
