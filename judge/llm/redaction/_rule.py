"""A rule: the spans one pattern, resolver or PEM envelope hides in a text."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from judge.llm.redaction._names import _MARKER_PREFIX, _PEM_MAX, _is_placeholder

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
