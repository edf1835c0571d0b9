"""The harness telling the agent the same thing again and again.

Agents driven by a harness get corrective user messages when a reply cannot be run
("Please provide exactly one bash block", "found 2 actions"), and text-only agents get
their tool output in the user role. The same such message arriving several times in a row,
with no new data in between, means the agent keeps making the same mistake: an error
cycle, whatever the agent's own messages say.
"""

from __future__ import annotations

import re
from collections import deque

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.history import message_digest
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
# Harnesses put counts in their nudges ("found 2 actions", "found 4 actions"): the same
# nudge whatever the number. Only for a message this long, a filled-in template (the
# mini-swe-agent format error is about 600 characters): a person's short notes that differ
# in a number ("meeting 3 moved to room 103") differ, and so does tool output.
TEMPLATE_CHARS = 200
_NUMBER = re.compile(r"\d+")


class RepeatedFeedbackDetector:
    """Counts identical user-role messages in a row (our own recovery messages skipped).

    A successful tool result with new data, or a new file change, in between ends the run:
    a harness that says "continue" after each productive step is not stuck, while one that
    says "provide a tool call" after each re-run of the same search is.
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
    )

    def __init__(self, repeats: int = REPEATS) -> None:
        self._repeats = repeats
        self.reset()

    def reset(self) -> None:
        self._seen: deque[str] = deque(maxlen=SEEN_RESULTS)
        self._edits = 0
        self._action = ""  # digest of the agent's latest message (what it did)
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
            if new_data or event.edits != self._edits:
                self._edits = event.edits
                self._end_run()
            return self._current
        if event.role == "assistant":
            self._action = message_digest(event)
            return self._current
        if event.role != "user" or is_recovery(event):
            return self._current
        text = " ".join(event.content.split())
        if len(text) < MIN_CHARS:
            self._end_run()
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
        return self._current

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
