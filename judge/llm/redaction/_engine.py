"""Applying the rules: the text as its reader sees it (escapes decoded, folded lines joined),
merging spans, and the `Redactor`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cache

from judge.errors import ConfigError
from judge.llm.redaction._names import (
    _KEY_BYTES,
    _KEY_BYTES_MIN,
    _MARKER_PREFIX,
    CUSTOM_KIND,
    KEYED_MARKER,
    MARKER,
    PLACEHOLDER_HEX,
)
from judge.llm.redaction._rule import _PatternRule, _Rule
from judge.llm.redaction._rules import BUILTIN_KINDS, _builtin_rules, _kinds

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
