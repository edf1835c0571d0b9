"""The cheap checks that spare the detectors' costly regexes (issue 11) must agree with
the checks they stand in for: a fast path that says "no" where the full check says "yes"
would silently stop a detector from detecting."""

from __future__ import annotations

import random

import pytest

from judge.detectors import outcome, text_repetition
from judge.detectors.outcome import _ID_GATE, _VOLATILE, volatile_masked

STUTTER_CASES = [
    "",
    "the the the",
    "The the THE end",
    "no no",  # two is not a stutter
    "x-bar bar bar",  # the first occurrence inside a token
    "bar bar barx",  # the third continues into a word: no match
    "bar bar bar.",
    "foo\tfoo\nfoo",
    "a a a a",  # one-letter words never count
    "über über über",
    "ÜBER über Über",
    "K\u212a k k",  # Kelvin sign: IGNORECASE folds it to k
    "ſs ſs ſs",
    "retry retry",
    "I will retry now. I will retry now.",
    "word  word\u00a0word",
    "then the then the then",
    "the then the",
    "abc abcabc abc",
    "1 1 1 22 22 22",
    "__ __ __",
]


@pytest.mark.parametrize("text", STUTTER_CASES)
def test_stutter_prefilter_never_hides_a_stutter(text: str) -> None:
    if text_repetition._WORD_STUTTER.search(text):
        assert text_repetition.may_stutter(text)


def test_stutter_prefilter_agrees_on_random_word_soup() -> None:
    rng = random.Random(11)
    vocab = ["go", "Go", "GO", "ago", "goal", "x", "ok", "OK.", "k", "\u212a", "é", "É"]
    seps = [" ", "  ", "\n", "\t", ". ", "-", ""]
    for _ in range(3000):
        text = "".join(rng.choice(vocab) + rng.choice(seps) for _ in range(rng.randint(1, 9)))
        if text_repetition._WORD_STUTTER.search(text):
            assert text_repetition.may_stutter(text), text


def test_degenerate_with_and_without_a_given_body_agree() -> None:
    for text in [*STUTTER_CASES, "Done. " * 9, "I retry. " * 3, "```\nx x x\n``` ok ok ok"]:
        body = text_repetition.prose(text)
        assert text_repetition.degenerate(text, body) == text_repetition.degenerate(text)


def test_questions_without_a_question_mark_skip_the_split() -> None:
    assert text_repetition.questions("Could you tell me the booking reference please.") == []
    asked = text_repetition.questions("Could you tell me the booking reference please?")
    assert asked == ["could you tell me the booking reference please?"]


ID_CASES = [
    "",
    "id",
    "request_id=abc",
    "X-Request-Id: 1234",
    "REQID 7",
    "run id: 3",
    "runid",
    "valid did idle",  # "id" everywhere, no prefix
    "grid-id",
    "trace-id trace_idx",
    "correlation id",
    "session-id",
    "jobid",
    "a" * 50 + "spanid",
    "idididid run",
]


@pytest.mark.parametrize("text", ID_CASES)
def test_id_gate_matches_its_literals(text: str) -> None:
    lowered = text.lower()
    assert _ID_GATE.passes(lowered) == any(lit in lowered for lit in _ID_GATE.literals())


def test_id_gate_agrees_on_random_text() -> None:
    rng = random.Random(15)
    parts = ["id", "i", "d", "run", "req", "uest", "_", "-", " ", "job", "span", "x"]
    for _ in range(3000):
        lowered = "".join(rng.choice(parts) for _ in range(rng.randint(0, 12)))
        assert _ID_GATE.passes(lowered) == any(lit in lowered for lit in _ID_GATE.literals())


def test_id_gate_still_masks_request_ids() -> None:
    assert volatile_masked("ok request_id=ab12cd") != "ok request_id=ab12cd"
    assert volatile_masked("a valid grid") == "a valid grid"
    assert any(gate is _ID_GATE for gate, _, _ in _VOLATILE)
    assert outcome.result_key("Request-ID: 1", outcome.Outcome.OK) == outcome.result_key(
        "Request-ID: 2", outcome.Outcome.OK
    )


PROSE_CASES = [
    "",
    "```",
    "a```x```b",
    "a ``` b",
    "x\r\ny\r\n| t |\r\n",
    "- item\n- item\n# head\nplain words here",
    "1. one\n2) two\n\x1c\x85\u2028tail",
    "```python\nprint(1)\n```\n" * 5 + "and then",
    "\n\n\n   \t",
]


@pytest.mark.parametrize("text", PROSE_CASES)
def test_prose_is_never_longer_than_its_text(text: str) -> None:
    """repeated_feedback skips reading messages shorter than an answer on this ground."""
    assert len(" ".join(text_repetition.prose(text).split())) <= len(text)


def test_kept_prose_is_the_prose_of_the_text_asked_about() -> None:
    texts = [*PROSE_CASES, "abc", "abc", "- abc"]
    rng = random.Random(5)
    for _ in range(200):
        text = rng.choice(texts)
        fresh = "".join(text)  # a new object: the kept answer must not leak across texts
        assert text_repetition.prose(text) == text_repetition.prose(fresh)
        text_repetition._LAST_PROSE[0] = ("", "")
        assert text_repetition.prose(fresh) == text_repetition.prose(text)


ERROR_CASES = [
    "",
    "Traceback (most recent call last):\n  File",
    "x Traceback (most recent call",
    "ls: cannot access 'x'",
    "sed: can't read f",
    "build: error in step",
    "a/b.py: failed",
    "  error: boom",
    "!!!error here",
    "....error",  # four non-word characters: the start branch does not reach
    "warning\nerror: no",  # "^" is the start of the head, not of a line
    "foo: errors",
    "bash: x: command not found",
    "exit code 0",
    "exit code: 2",
    "Process returned non-zero exit status 1",
    "  File x, line 1\nSyntaxError: bad",
    "ModuleNotFoundError: no",
    "KeyError: 'a'",
    'reply {"error" : "bad"}',
    '{"status_code": 503}',
    '{"status": 200}',
    "The path does not exist",
    "No exact match found for",
    "'x' is not recognized as an internal",
    "Invalid action: foo",
    "all good, 3 tests passed",
    "error",
    "ERROR: upper case",
]


@pytest.mark.parametrize("head", ERROR_CASES)
def test_error_marker_prefilter_agrees_with_the_search(head: str) -> None:
    assert outcome.error_anywhere(head) == (outcome._ERROR_ANYWHERE.search(head) is not None)


def test_error_marker_prefilter_agrees_on_random_heads() -> None:
    rng = random.Random(21)
    parts = [
        *(lit[: rng.randint(1, len(lit))] for lit in outcome._ERROR_ANYWHERE_LITERALS),
        *outcome._ERROR_ANYWHERE_LITERALS,
        "error", "Error", ": ", "x", " ", "\n", "!", "-", "1", "5", "0", ":", '"', "cannot",
    ]  # fmt: skip
    for _ in range(5000):
        head = "".join(rng.choice(parts) for _ in range(rng.randint(0, 6)))
        expected = outcome._ERROR_ANYWHERE.search(head) is not None
        assert outcome.error_anywhere(head) == expected, head


def _masked_as_before(text: str) -> str:
    """volatile_masked with the gates as they were before issue 11: literals tested one
    by one with ``in`` (the try gate: "attempt", "retry", "try"), regexes searched."""
    if len(text) > outcome.VOLATILE_MAX_CHARS:
        return text
    lowered = text.lower()
    for gate, pattern, placeholder in _VOLATILE:
        if isinstance(gate, outcome._SuffixGate):
            passes = any(lit in lowered for lit in gate.literals())
        elif isinstance(gate, outcome._ConfirmedGate):
            passes = any(lit in lowered for lit in ("attempt", "retry", "try"))
        elif isinstance(gate, tuple):
            passes = any(lit in lowered for lit in gate)
        else:
            passes = gate.search(text) is not None
        if passes:
            text = pattern.sub(placeholder, text)
    return text


MASK_CASES = [
    "retry 3 of 5 failed",
    "Attempt #2/4",
    "TRY  7",
    "try\t#12 of 20",
    "entry 3 in the registry",
    "country code 44",
    "retrying in 5s",
    "retry\u00a05",  # no-break space is whitespace to \s
    "try\u0663",  # an Arabic-Indic digit is a \d
    "request_id=abc run-id 7 session id: x",
    "took 0.31s, pid 4242, at 12:30:01",
    "<Foo object at 0x7f3a1c2b9d30> tmpabcd1234",
    "valid did idle grid",
    "",
]


@pytest.mark.parametrize("text", MASK_CASES)
def test_volatile_masking_unchanged_by_the_gates(text: str) -> None:
    assert volatile_masked(text) == _masked_as_before(text)


def test_volatile_masking_unchanged_on_random_text() -> None:
    rng = random.Random(33)
    parts = ["try", "TRY", "retry", "attempt", "en", " ", "  ", "#", "3", "12", "/", "of",
             "id", "run", "_", "-", "req", "job", "0x", "ab12cd", "\n", "\u0663", "é"]  # fmt: skip
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        assert volatile_masked(text) == _masked_as_before(text), text


def _split_sentences(body: str) -> list[str]:
    """The definition `normalized_sentences` must keep: split, then normalize each."""
    pieces = (" ".join(s.lower().split()) for s in text_repetition._SENTENCE_SPLIT.split(body))
    return [s for s in pieces if s]


SENTENCE_CASES = [
    "",
    "One. Two! Three? Four",
    "a.\n\nb",
    "a.. b",
    "a!!  b",
    "x\n. y",
    "A. \n  B",
    "no punctuation at all just words",
    "e.g.this stays one",
    "tab.\tafter",
    "nbsp.\u00a0after",
    "line\u2028sep. next",
    "\x1cfile sep.\x1cnext",
    "CAPS. Caps. caps.",
    "\u0130stanbul. \u0130STANBUL.",
    "trailing space. ",
    "   \n  \n ",
]


@pytest.mark.parametrize("body", SENTENCE_CASES)
def test_normalized_sentences_are_the_split_pieces(body: str) -> None:
    assert text_repetition.normalized_sentences(body) == _split_sentences(body)


def test_normalized_sentences_agree_on_random_text() -> None:
    rng = random.Random(17)
    alphabet = ["ab", "Ab", "a.", "b!", " ", "\n", "?", ". ", ".\n", "\t", "\r", "\u00a0"]
    alphabet += ["\u2028", "\x1c", "\u0130", "ab ab ab", "AB ab ", "..", "!?"]
    for _ in range(20_000):
        body = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14)))
        assert text_repetition.normalized_sentences(body) == _split_sentences(body), body
