"""What a name and a value say: the placeholders, and whether a key names a secret and its
value reads as one.
"""

from __future__ import annotations

import re
from functools import lru_cache

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
