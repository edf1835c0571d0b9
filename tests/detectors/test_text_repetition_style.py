"""A house style is not a loop: replies that open alike but say and do different things.

Some models open nearly every reply the same way (a lone "." line, then "Let me check
..."). The histories below are shaped like such a coding run (written for these tests):
each reply opens in that style, then names a different file and makes a different call,
and every call fails, so no new tool data ever moves the detector on; that is the worst
case for the comparison of messages. A reply said again in full, opening, body and call
alike, is still a loop.
"""

from __future__ import annotations

from judge.detectors import text_repetition as tr
from judge.detectors.base import LOOP_SCORE
from judge.detectors.steps import StepBuilder
from judge.history import normalize_history
from tests.fakes import Agent

# Each reply: the house opening, then its own plan; the path is the call's argument.
STYLED = [
    (".\nLet me check the failing test first to see which assertion breaks.", "tests/a.py"),
    (".\nLet me check the parser module where the tokens are produced.", "src/parse.py"),
    (".\nLet me check the lexer module where the tokens are produced.", "src/lex.py"),
    (".\nLet me look at the config loader, it may pass the wrong flags.", "src/conf.py"),
    (".\nLet me look at the config writer, it may pass the wrong flags.", "src/out.py"),
    (".\nLet me check the fixtures that the failing test depends on.", "tests/fx.py"),
]
# Long replies that restate the same context (longer than the compared head) before
# saying what is new at their end.
CONTEXT = ".\nLet me check where we are. " + "The task is to make the date parser accept " * 50


def findings(agent: Agent) -> list[tuple[int, float]]:
    """(message index, score) of each text-repetition finding over the whole history."""
    detector = tr.TextRepetitionDetector(similarity=0.95, min_repeats=2)
    steps = StepBuilder()
    found = []
    for msg in normalize_history(agent.messages):
        finding = detector.observe(msg)
        for step in steps.feed(msg):
            detector.observe(step)
        if finding is not None and msg.role == "assistant":
            found.append((msg.index, finding.score))
    return found


def test_a_shared_opening_with_different_plans_and_calls_is_style() -> None:
    agent = Agent(task="Fix the tokenizer bug.")
    for text, path in STYLED:
        agent.call("read_file", {"path": path}, "Error: permission denied", text, is_error=True)
    assert findings(agent) == []


def test_the_same_opening_and_text_with_different_calls_is_different_actions() -> None:
    agent = Agent(task="Fix the tokenizer bug.")
    for _, path in STYLED:
        text = ".\nLet me check the next file that could produce the tokens."
        agent.call("read_file", {"path": path}, "Error: permission denied", text, is_error=True)
    assert findings(agent) == []


def test_long_replies_with_the_same_head_and_different_ends_are_not_repeats() -> None:
    agent = Agent(task="Fix the date parser.")
    ends = [
        "Week numbers next: ISO weeks start on Monday, and the first week of a year is the "
        "one holding its first Thursday, so 2021-01-03 belongs to week 53 of 2020. The "
        "tests already cover that, so I will add the parsing rule and a round-trip check. ",
        "Then time zones: an offset such as +05:30 must survive parsing and formatting, and "
        "a bare Z means UTC. The formatter drops the minutes of the offset today, which is "
        "why the Indian and Nepalese cases fail, so the offset writer gets fixed first. ",
        "Last, leap years: February 29 exists in 2024 and 2000 but not in 1900 or 2100; the "
        "validator uses a four-year rule only. Replacing it with the calendar module's "
        "isleap removes the special case and makes the century tests pass as expected. ",
    ]
    for end in ends * 2:
        agent.say(CONTEXT + end)
        agent.user("Error: the previous command timed out.")
    assert len(CONTEXT) > tr.COMPARE_CHARS  # the heads alone would be identical
    assert all(score < LOOP_SCORE for _, score in findings(agent))


def test_a_reply_said_again_with_the_same_call_is_still_a_loop() -> None:
    agent = Agent(task="Fix the tokenizer bug.")
    text, path = STYLED[1]
    for _ in range(3):
        agent.call("read_file", {"path": path}, "Error: permission denied", text, is_error=True)
    assert [score for _, score in findings(agent)][-1] == LOOP_SCORE


def test_a_reply_reworded_by_a_word_after_the_opening_is_still_a_loop() -> None:
    # "Now run X again." after "Run X again.": the rest, set apart from the shared opening,
    # stays within REST_SIMILARITY.
    agent = Agent(task="Fix the ignore option.")
    texts = [
        "THOUGHT: Run `reproduce_issue.py` again.",
        "THOUGHT: Now run `reproduce_issue.py` again.",
    ]
    for text in texts * 2:
        agent.call("bash", {"command": "python reproduce_issue.py"}, "exit 1", text, is_error=True)
    assert [score for _, score in findings(agent)][-1] == LOOP_SCORE


def test_opening_cuts_at_whole_shared_sentences() -> None:
    a, b = ". let me check a. foo", ". let me check a. bar"
    assert a[tr.opening(a, b) :] == "foo"
    # "let me check" is shared but not a whole sentence: only the "." line goes
    a, b = ". let me check the parser.", ". let me check the lexer."
    assert a[tr.opening(a, b) :] == "let me check the parser."
    assert tr.opening("same text.", "same text.") == len("same text.")
    assert tr.opening("abc", "abd") == 0
