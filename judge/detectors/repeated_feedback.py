"""The harness telling the agent the same thing again and again.

Agents driven by a harness get corrective user messages when a reply cannot be run
("Please provide exactly one bash block", "found 2 actions"), and text-only agents get
their tool output in the user role. The same such message arriving several times in a row,
with no new data in between, means the agent keeps making the same mistake: an error
cycle, whatever the agent's own messages say.

"In a row" means without recovery between. A correction the agent answers with a valid,
new action (a call it has not made lately, which the harness ran) has been heeded: the
agent made a mistake, was told, and moved on, even when the command it ran then failed or
found nothing. Long productive runs slip on the reply format now and then ("found 2
actions" at turn 115, again at turn 120 after four new commands): those corrections are
each answered, and adding them up over the run would call the agent stuck for mistakes it
fixed. Only a correction that returns with no new action between (the agent replies
badly again, or repeats a call it had already made) counts towards the run.

Harnesses that want a tool call nag differently: the agent answers in prose, is told
"please provide a tool call", makes one token search, and answers in prose again. The
search brings new data, so the nags are never in a row; what repeats is the pair, the same
nag after the same answer. That is the second rule here: the same nag after near-identical
text-only answers, several times within a few turns and with no file changed between.
"""

from __future__ import annotations

import re
from collections import deque

from rapidfuzz import fuzz

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.detectors.text_repetition import COMPARE_CHARS, prose
from judge.history import Message, message_digest
from judge.user_turns import digest, is_observation, is_recovery
from judge.verdict import LoopKind

# Identical user messages in a row that make a loop: the third time the harness has to
# say the same thing, as with the tracker's failure limit of 3 identical failing calls.
REPEATS = 3
# Shorter messages ("continue", "go on") are a person's or an auto-continue harness's
# nudges, which repeat while the agent works.
MIN_CHARS = 20
# Evidence kept per run: enough to cite the loop, bounded whatever its length.
MAX_EVIDENCE = 12
# Result keys remembered to tell new data from a result seen before (as text_repetition).
SEEN_RESULTS = 64
# Call signatures remembered to tell a new action from one made lately: as many as the
# results, so a call counts as new exactly when its result could be new data.
SEEN_CALLS = SEEN_RESULTS
# Harnesses put counts in their nudges ("found 2 actions", "found 4 actions"): the same
# nudge whatever the number. Only for a message this long, a filled-in template (the
# mini-swe-agent format error is about 600 characters): a person's short notes that differ
# in a number ("meeting 3 moved to room 103") differ, and so does tool output.
TEMPLATE_CHARS = 200
_NUMBER = re.compile(r"\d+")

# The nag-after-the-same-answer rule. Measured on evals/coding_dev, where Moatless Tools
# nags "Please provide a tool call." after each text-only reply: its 4 labelled nag loops
# get that nag 3 times; the 7 productive Moatless runs nagged at all get it at most twice.
NAG_REPEATS = 3
# ... within this many assistant turns, first nagged answer to last inclusive: the loops
# answer every 2nd or 3rd turn (5 or 6 turns for three answers) with one or two searches
# between. Far apart, the same nag is the agent slipping now and then, not stuck.
NAG_WINDOW = 6
# ... and the answers at least this alike (token-set ratio, 0..100, on their lowercased
# prose: code blocks left out). The loops' answers are paraphrases of one plan: 58-72 for
# their least alike pair. mini-swe-agent's format nag ("found 2 actions") comes 3 times
# within the window with no file changed between on 3 productive gemini runs, after answers
# about different steps: 40-50. (With files changed between, up to 62: the edit rule.)
NAG_SIMILARITY = 55
# An answer shorter than this (prose only) is a narration ("Let me check the tests."):
# short texts share most of their words by chance. The loops' answers: 279+ characters.
MIN_ANSWER_CHARS = 200
# The answer is read from the head of the message: bounded cost whatever its length, and
# enough to hold the COMPARE_CHARS of prose compared (code blocks are dropped first).
ANSWER_SCAN_CHARS = 3 * COMPARE_CHARS


class RepeatedFeedbackDetector:
    """Counts identical user-role messages in a row (our own recovery messages skipped),
    and the same nag after the same text-only answer within a few turns.

    A successful tool result with new data, or a new file change, in between ends the run:
    a harness that says "continue" after each productive step is not stuck, while one that
    says "provide a tool call" after each re-run of the same search is. The nagged answers
    survive new data (a token search between them is the loop's shape) but not a file
    change: an agent that edits between nags has taken the hint.
    """

    name = "repeated_feedback"
    STATE = (
        "_key",
        "_count",
        "_evidence",
        "_text",
        "_current",
        "_seen",
        "_edits",
        "_action",
        "_run_action",
        "_turn",
        "_answer",
        "_nags",
        "_nagged",
        "_calls",
    )
    # Attributes a state saved before they existed may lack (their reset value is kept).
    STATE_OPTIONAL = frozenset({"_calls"})

    def __init__(self, repeats: int = REPEATS) -> None:
        self._repeats = repeats
        self.reset()

    def reset(self) -> None:
        self._seen: deque[str] = deque(maxlen=SEEN_RESULTS)
        self._calls: deque[str] = deque(maxlen=SEEN_CALLS)  # signatures of recent calls
        self._edits = 0
        self._action = ""  # digest of the agent's latest message (what it did)
        self._turn = 0  # assistant messages seen
        # (index, prose) of the latest assistant message when it is a text-only answer
        self._answer: tuple[int, str] | None = None
        # (nag key, turn, edits, answer's prose, answer index, nag index) of recent nags
        # that followed a text-only answer, newest last; pruned to the window on each nag.
        self._nags: deque[tuple[str, int, int, str, int, int]] = deque(maxlen=NAG_WINDOW + 1)
        self._nagged: Finding | None = None  # what the nag rule says now
        self._end_run()

    def _end_run(self) -> None:
        self._run_action: str | None = None  # the action before each observation of the run
        self._key: str | None = None
        self._count = 0
        self._evidence: tuple[int, ...] = ()
        self._text = ""
        self._current: Finding | None = None

    def observe(self, event: Event) -> Finding | None:
        if isinstance(event, Step):
            new_data = event.outcome is Outcome.OK and event.key not in self._seen
            if new_data:
                self._seen.append(event.key)
            # A new call that ran is the correction heeded: the run of corrections ends.
            # (Not the nag rule's: its loops make a new token search between nags and
            # return to the same answer; they are bounded by NAG_WINDOW instead.)
            heeded = event.outcome is not Outcome.MISSING and event.signature not in self._calls
            if heeded:
                self._calls.append(event.signature)
                if not new_data and event.edits == self._edits:
                    self._end_run()
            if event.edits != self._edits:
                self._nags.clear()  # a file changed: the nags before it are answered
            if new_data or event.edits != self._edits:
                self._edits = event.edits
                self._nagged = None
                self._end_run()
            return self._strongest()
        if event.role == "assistant":
            self._action = message_digest(event)
            self._turn += 1
            self._answer = _answer(event)
            return self._strongest()
        if is_recovery(event):
            # Our recovery message answers the nags before it: an agent that obeys it with
            # one more plan in prose, nagged once more, is not the loop again.
            self._nags.clear()
            self._answer = None
            return self._strongest()
        if event.role != "user":
            return self._strongest()
        answer, self._answer = self._answer, None  # what this message replies to, if prose
        text = " ".join(event.content.split())
        if len(text) < MIN_CHARS:
            self._end_run()
            self._nagged = None
            return None
        # Tool output in the user role differs by its numbers ("page 3 of 9"); a nudge's
        # numbers are noise.
        templated = len(text) >= TEMPLATE_CHARS and not is_observation(event)
        key = digest(_NUMBER.sub("#", text) if templated else text)
        # The same tool output back after a *different* action is that action's answer
        # ("<returncode>0</returncode>" after each new edit), not the agent stuck.
        observed = is_observation(event)
        if key == self._key and observed and self._action != self._run_action:
            self._key = None
        if key == self._key:
            self._count += 1
            self._evidence = (*self._evidence, event.index)[-MAX_EVIDENCE:]
        else:
            self._key, self._count, self._evidence, self._text = key, 1, (event.index,), text
        self._run_action = self._action if observed else None
        self._current = self._assess()
        self._nagged = None if observed or answer is None else self._nag(event, key, text, answer)
        return self._strongest()

    def _strongest(self) -> Finding | None:
        found = [f for f in (self._current, self._nagged) if f is not None]
        return max(found, key=lambda f: f.score) if found else None

    def _nag(self, msg: Message, key: str, text: str, answer: tuple[int, str]) -> Finding | None:
        """The same nag after near-identical text-only answers, within the window.

        Each nag is compared with the few kept (bounded by the window), each comparison on
        at most COMPARE_CHARS: the cost of a message is bounded whatever the history.
        """
        while self._nags and self._turn - self._nags[0][1] >= NAG_WINDOW:
            self._nags.popleft()
        earlier = [
            (answered, nagged)
            for other, _, edits, said, answered, nagged in self._nags
            if other == key
            and edits == self._edits
            and fuzz.token_set_ratio(answer[1], said, score_cutoff=NAG_SIMILARITY)
        ]
        self._nags.append((key, self._turn, self._edits, answer[1], answer[0], msg.index))
        if not earlier:
            return None
        count = len(earlier) + 1
        looping = count >= NAG_REPEATS
        evidence = tuple(i for pair in (*earlier, (answer[0], msg.index)) for i in pair)
        return Finding(
            detector=self.name,
            kind=LoopKind.ERROR_CYCLE,
            score=LOOP_SCORE if looping else near_miss(count, NAG_REPEATS),
            evidence=evidence[-MAX_EVIDENCE:],
            summary=f"the same answer got the same reply {count}x within {NAG_WINDOW} turns: "
            f"{short(text, 60)!r}",
            pattern=f"feedback:{short(text, 60)}",
            details={
                "text": short(text, 200),
                "answer": short(answer[1], 200),
                "count": count,
                "limit": NAG_REPEATS - 1,
            },
        )

    def _assess(self) -> Finding | None:
        if self._count < 2:
            return None
        looping = self._count >= self._repeats
        return Finding(
            detector=self.name,
            kind=LoopKind.ERROR_CYCLE,
            score=LOOP_SCORE if looping else near_miss(self._count, self._repeats),
            evidence=self._evidence,
            summary=f"the same message came back {self._count}x in a row: "
            f"{short(self._text, 60)!r}",
            pattern=f"feedback:{short(self._text, 60)}",
            details={
                "text": short(self._text, 200),
                "count": self._count,
                "limit": self._repeats - 1,
            },
        )


def _answer(msg: Message) -> tuple[int, str] | None:
    """(index, the head of its prose, lowercased) of a text-only answer, else None.

    A message with a tool call acted, and a short one narrates: neither is the answer a
    nag corrects.
    """
    # Prose is never longer than the text it is read from (code blocks shrink to a space,
    # dropped lines go, whitespace runs to one): a shorter message cannot be an answer.
    if msg.tool_calls or len(msg.content) < MIN_ANSWER_CHARS:
        return None
    head = " ".join(prose(msg.content[:ANSWER_SCAN_CHARS]).split())[:COMPARE_CHARS]
    return (msg.index, head.lower()) if len(head) >= MIN_ANSWER_CHARS else None
