"""The redactor's one-pass trigger scan finds exactly what the rule-by-rule check found.

`Redactor.spans` used to test each rule's trigger words with ``in`` (about 90 us a call
even for a short text); it now finds all of them with one pattern (`_TriggerScan`). This is
security code, so the fast path is pinned to the old one, kept as `_spans_reference`: same
spans, same kinds, on the whole secrets corpus, on random texts built from the trigger
words themselves (where overlapping and nested words are likeliest to be missed) and on
trigger sets made up to exercise the scan's overlap cases.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from judge.llm import redaction
from judge.llm.redaction import (
    Redactor,
    _builtin_rules,
    _spans_reference,
    _trie_pattern,
    _TriggerScan,
    default_redactor,
)

CORPUS = Path(__file__).resolve().parent / "data" / "secrets"
BUILTIN_TRIGGERS = sorted({t for rule in _builtin_rules() for t in rule.triggers})
# Pieces random texts are made of: every trigger word (also upper-cased, as texts hold
# them), the characters the rules split on, and credential-shaped runs.
PIECES = [
    *BUILTIN_TRIGGERS,
    *(t.upper() for t in BUILTIN_TRIGGERS),
    " ",
    "\n",
    "=",
    ": ",
    '"',
    '\\"',
    "'",
    "@",
    "/",
    "-",
    "_",
    ".",
    ",",
    ";",
    "&",
    "{",
    "}",
    "[REDACTED:secret]",
    "abcdEFGH1234ijkl5678",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "hunter2hunter2",
    "$VAR",
]


def _corpus_texts() -> list[str]:
    texts = []
    for name in ("secrets.jsonl", "lookalikes.jsonl"):
        for line in (CORPUS / name).read_text(encoding="utf-8").splitlines():
            case = json.loads(line)
            if "text" in case:
                texts.append(case["text"])
    return texts


def _naive_present(triggers: list[str], text: str) -> frozenset[str]:
    lowered = text.lower()
    return frozenset(t for t in triggers if t in lowered)


def test_the_corpus_gives_the_same_spans_as_the_rule_by_rule_check() -> None:
    redactor = default_redactor()
    texts = _corpus_texts()
    assert len(texts) > 900  # both files read: 488 secrets, 468 look-alikes
    redacted = 0
    for text in texts:
        spans = redactor.spans(text)
        assert spans == _spans_reference(redactor._rules, text), text
        redacted += bool(spans)
    assert redacted >= 488  # the comparison covered texts that do hold secrets


def test_the_corpus_gives_the_same_trigger_words() -> None:
    scan = _TriggerScan(BUILTIN_TRIGGERS)
    for text in _corpus_texts():
        assert scan.present(text.lower()) == _naive_present(BUILTIN_TRIGGERS, text), text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.text(max_size=20))
def test_random_texts_give_the_same_spans(pieces: list[str], noise: str) -> None:
    text = "".join(pieces) + noise + "".join(reversed(pieces))
    redactor = default_redactor()
    assert redactor.spans(text) == _spans_reference(redactor._rules, text)
    assert _TriggerScan(BUILTIN_TRIGGERS).present(text.lower()) == _naive_present(
        BUILTIN_TRIGGERS, text
    )


@pytest.mark.parametrize(
    "redactor",
    [
        Redactor(disable=["secret", "jwt"]),
        Redactor(extra_patterns=[r"corp_[a-z0-9]{12}", r"id=(?P<secret>\d{6})"]),
        Redactor(builtins=False, extra_patterns=[r"corp_[a-z0-9]{12}"]),
        Redactor(builtins=False),
    ],
    ids=["disabled", "custom", "custom_only", "nothing"],
)
def test_configured_redactors_give_the_same_spans(redactor: Redactor) -> None:
    texts = [
        *_corpus_texts()[::7],
        "token corp_abcdef123456 id=123456 password=hunter2hunter2",
        "no trigger word here, only corp_abcdef123456 and id=654321",
    ]
    for text in texts:
        assert redactor.spans(text) == _spans_reference(redactor._rules, text), text


# Made-up trigger sets where one word is inside another, starts inside another and runs
# past it, or is a prefix of another: the cases a non-overlapping scan would miss.
OVERLAPPING = [
    ["ab", "bc", "abcd", "c", "bcx", "dxy", "cd-", "a"],
    ["sk-", "sk-proj-", "k-pr", "proj-x", "-x"],
    ["aaa", "aa", "aab", "baa"],
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(OVERLAPPING), st.data())
def test_overlapping_trigger_words_are_all_found(triggers: list[str], data: st.DataObject) -> None:
    alphabet = sorted(set("".join(triggers)) | {"z", "A", "B"})
    text = data.draw(st.text(alphabet=alphabet, max_size=30))
    assert _TriggerScan(triggers).present(text.lower()) == _naive_present(triggers, text)


def test_a_word_starting_inside_a_match_is_found() -> None:
    """ "abcd" is matched first; "bcx" starts inside it and only the straddle check sees it."""
    scan = _TriggerScan(["abcd", "bcx"])
    assert scan.present("zabcdz") == {"abcd"}
    assert scan.present("zabcx") == {"bcx"}
    assert scan.present("abcdbcx") == {"abcd", "bcx"}
    assert _TriggerScan(["abc", "bcde"]).present("abcde") == {"abc", "bcde"}


def test_the_prefix_tree_matches_the_longest_word() -> None:

    pattern = re.compile(_trie_pattern(["sk-", "sk-proj-", "sk-ant-", "s"]))
    assert pattern.findall("x sk-proj-1 sk-ant- sk-pro s") == ["sk-proj-", "sk-ant-", "sk-", "s"]


def test_an_empty_trigger_is_refused() -> None:
    with pytest.raises(ValueError):
        _TriggerScan(["token", ""])


def test_text_without_any_trigger_runs_no_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast exit: no trigger word, no rule call at all (a rule that ran would raise)."""
    redactor = Redactor()

    def boom(text: str) -> list[tuple[str, int, int]]:
        raise AssertionError("a rule ran")

    for rule in redactor._rules:
        monkeypatch.setattr(type(rule), "spans", lambda self, text: boom(text))
    assert redactor.spans("The agent re-ran the same failing command 5 times.") == []


# The two context patterns as they were before they were rewritten for speed, frozen here:
# the rewrites (an atomic key, "--" read before its lookbehind) must match exactly the same.
_Q = r"""(?:\\?["'])?"""
# A key never starts right after a backslash ("\\ntoken:" is read in the decoded view, where
# the line break is one): the same boundary in both, so only the rewrite is compared.
OLD_ASSIGNMENT = re.compile(
    rf"(?<![A-Za-z0-9_.\-\\])(?:--)?{_Q}(?P<key>[A-Za-z_][A-Za-z0-9_.\-]{{0,80}}){_Q}"
    r"(?P<assign>[ \t]*(?::=|=>|[:=])[ \t]*)(?=\\?[\"']|[^\s\"'`\\<>])"
)
OLD_FLAG = re.compile(
    r"(?<![\w-])--(?P<flag>[A-Za-z][A-Za-z0-9-]{0,40})[ \t]+(?P<value>[^\s-][^\s]{0,1023})"
)
REWRITTEN = [(OLD_ASSIGNMENT, redaction._ASSIGNMENT), (OLD_FLAG, redaction._FLAG)]
# Pieces for the rewritten patterns: keys, quotes, assignments and flags in every order.
PATTERN_PIECES = [
    "password",
    "DB_PASSWORD",
    "api.key",
    "a",
    "-",
    "--",
    "--token",
    "_",
    "x" * 79,
    "x" * 78,
    "x",
    '"',
    '\\"',
    "'",
    " ",
    "\t",
    "=",
    ":",
    ":=",
    "=>",
    "hunter2",
    "<",
    "`",
    "\n",
    "é",
]


def _matches(pattern: re.Pattern[str], text: str, pos: int = 0) -> list[tuple[Any, ...]]:
    """Every match from ``pos`` with the span of each group: all a rule reads of it."""
    return [
        (m.span(), *(m.span(g) for g in range(1, (pattern.groups or 0) + 1)))
        for m in pattern.finditer(text, pos)
    ]


def test_rewritten_patterns_match_as_before_on_the_corpus() -> None:
    for text in _corpus_texts():
        for old, new in REWRITTEN:
            assert _matches(new, text) == _matches(old, text), (new.pattern, text)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PATTERN_PIECES), max_size=14))
def test_rewritten_patterns_match_as_before_from_every_position(pieces: list[str]) -> None:
    text = "".join(pieces)
    for old, new in REWRITTEN:
        assert new.groupindex == old.groupindex
        for pos in range(len(text) + 1):
            assert _matches(new, text, pos) == _matches(old, text, pos), (new.pattern, text)
