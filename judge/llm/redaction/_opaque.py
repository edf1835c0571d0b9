"""Opaque tokens in context (a URL, a named value, a clip) judged by how machine-made they
look, and private keys in envelopes other than PEM.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from itertools import pairwise

from judge.llm.redaction._names import (
    _ELLIPSIS,
    _KEY_MAX,
    _MARKER_PREFIX,
    _PEM_MAX,
    _is_placeholder,
    _key_class,
    _looks_random,
)
from judge.llm.redaction._rule import Span
from judge.llm.redaction._structured import _Q

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
