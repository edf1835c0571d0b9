"""The same call, with the same outcome, again and again in a row."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable

from judge.detectors.base import (
    LOOP_SCORE,
    SUSPICION_CAP,
    Event,
    Finding,
    describe_call,
    near_miss,
    short,
)
from judge.detectors.steps import STEP_RESULT_CHARS, Step
from judge.detectors.tool_classes import UNLIMITED
from judge.history import ToolCall
from judge.verdict import LoopKind

# Evidence kept per run: enough to cite the loop, bounded whatever its length.
MAX_EVIDENCE = 12
# What is read of an error to find the argument values it names: the head a step keeps.
_ERROR_HEAD_CHARS = STEP_RESULT_CHARS
# Argument values looked at per call, and their shortest length: "id" or "a" would be found
# in almost any error text.
_MAX_VALUES = 32
_MIN_BLAMED_CHARS = 3
# An error's words, without the quotes and punctuation around them ("'HAT030'," -> HAT030).
_WORD_EDGES = "'\"`()[]{}<>,;:.!?"


def _values(value: object, out: list[str]) -> None:
    """The call's string and number arguments (bounded walk)."""
    if len(out) >= _MAX_VALUES:
        return
    if isinstance(value, str):
        out.append(value.strip())
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out.append(str(value))
    elif isinstance(value, dict):
        for v in value.values():
            _values(v, out)
    elif isinstance(value, list):
        for v in value:
            _values(v, out)


def blamed_values(step: Step) -> frozenset[str]:
    """The argument values a failed step's error names: what the tool said was wrong."""
    if not step.outcome.failed or not step.result:
        return frozenset()
    head = step.result[:_ERROR_HEAD_CHARS]
    words = {w.strip(_WORD_EDGES) for w in head.split()}
    values: list[str] = []
    _values(step.call.parsed, values)
    return frozenset(
        v
        for v in values
        if len(v) >= _MIN_BLAMED_CHARS and (v in words if " " not in v else v in head)
    )


def keeps_blamed(previous: Step, step: Step) -> bool:
    """Whether ``step`` passes again every value ``previous``'s error named, and nothing
    the previous call did not pass.

    The second half tells a retry that only drops or reorders around the blamed value (the
    same booking minus one leg, still with the unavailable flight) from a new attempt that
    happens to keep a value the error mentions: another order id in the store the error
    names, another endpoint on the host it names. Those bring new input; only the first
    is the same request again."""
    blamed = blamed_values(previous)
    if not blamed:
        return False
    values: list[str] = []
    _values(step.call.parsed, values)
    before: list[str] = []
    _values(previous.call.parsed, before)
    return blamed <= set(values) and set(values) <= set(before)


class ExactRepeatDetector:
    """Counts identical calls in a row whose results do not change.

    A changed result resets the run: polling a build or re-running tests after a fix is
    progress. An identical call failing right after it failed continues the run whatever
    the error says: "command not found", then "permission denied", then a traceback for
    the same call with nothing between is one obstacle hit again, not new information.
    Runs of failures use the (lower) failure limit whatever the tool's class. A tool with
    an unlimited limit (``tool_limits`` of 0) is never flagged for successful repeats.

    A failed run also continues with a variant of the call, the same tool failing with the
    same error, when the variant still passes every argument value the error named ("flight
    HAT030 not available": the retry books HAT030 again with one leg fewer). What the tool
    said was wrong is unchanged; the agent changed something else, so the error can only
    come back. A variant that drops or changes the named value starts a new run.

    A call ``check_call`` refused (`refused`) counts as one more attempt of the run: the
    agent tried it, and nothing changed that could make it turn out differently. So the
    identical call stays refused, each time one rung higher, until the run ends (another
    call, a changed result). Counts name what ran and what was refused apart, so the
    count shown always matches the messages cited.
    """

    name = "exact_repeat"
    reads_messages = False  # it reasons about call steps only
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = (
        "_signature",
        "_key",
        "_count",
        "_all_failed",
        "_varied",
        "_evidence",
        "_last",
        "_current",
        "_recent",
        "_refused",
        "_variants",
    )
    # Attributes a state saved before they existed may lack (their reset value is kept).
    STATE_OPTIONAL = frozenset({"_refused", "_variants"})

    def __init__(
        self,
        limit_for: Callable[[str], int],
        failure_limit: int,
        recur_min: int,
        recur_window: int,
    ) -> None:
        self._limit_for = limit_for
        self._failure_limit = failure_limit
        self._recur_min = recur_min
        self._recent: deque[Step] = deque(maxlen=recur_window)
        self.reset()

    def reset(self) -> None:
        self._signature: str | None = None
        self._key: str | None = None
        self._count = 0
        self._all_failed = True
        self._varied = False  # the run's failures did not all say the same
        self._evidence: deque[int] = deque(maxlen=MAX_EVIDENCE)
        self._last: Step | None = None
        self._current: Finding | None = None
        self._recent.clear()
        # Attempts of the current run that were refused before they ran (`refused`).
        self._refused = 0
        # Calls of the current failed run that were variants keeping the blamed values.
        self._variants = 0

    def limit(self, name: str, failing: bool) -> int:
        """Identical calls allowed in a row (UNLIMITED: any number)."""
        limit = self._limit_for(name)
        return min(limit, self._failure_limit) if failing else limit

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        same_call = event.signature == self._signature
        # Within a run every step failed, or every step gave the same result: a failed
        # run continues with any failure of the same call.
        failed_again = self._all_failed and event.outcome.failed
        last = self._last
        variant = (
            not same_call
            and failed_again
            and last is not None
            and self._count > 0
            and event.call.name == last.call.name
            and event.key == self._key
            and keeps_blamed(last, event)
        )
        if (same_call and (event.key == self._key or failed_again)) or variant:
            self._count += 1
            self._all_failed = self._all_failed and event.outcome.failed
            self._varied = self._varied or event.key != self._key
            self._key = event.key
            if variant:  # the variant is the call that would be repeated next
                self._signature = event.signature
                self._variants += 1
                self._refused = 0
        else:
            self._signature, self._key, self._count = event.signature, event.key, 1
            self._all_failed = event.outcome.failed
            self._varied = False
            self._evidence.clear()
            self._refused = 0
            self._variants = 0
        self._evidence.append(event.call_index)
        self._last = event
        self._recent.append(event)
        # A run just under its limit must not hide the same call's return after others
        # (write, look, write, write: two in a row, four in the window).
        found = [f for f in (self._assess(), self._recurring(event)) if f is not None]
        self._current = max(found, key=lambda f: f.score) if found else None
        return self._current

    def _recurring(self, step: Step) -> Finding | None:
        """The same call and result coming back with other calls in between: asking again
        for what the agent was already told, e.g. order status re-checked between lookups.
        """
        sig, key = step.signature, step.key
        if not step.outcome.failed and self._limit_for(step.call.name) >= UNLIMITED:
            return None
        # Only since the last new file change: re-running a test after each new edit is
        # how coding agents debug, not asking again for what they were told.
        same = [
            s for s in self._recent if s.key == key and s.signature == sig and s.edits == step.edits
        ]
        count = len(same)
        if count <= self._count:
            return None  # one unbroken run: the in-a-row limit (per tool class) decides
        if count < 2 or step.outcome.name == "MISSING":
            return None
        looping = count >= self._recur_min
        return Finding(
            detector=self.name,
            kind=LoopKind.EXACT_REPEAT,
            score=LOOP_SCORE if looping else near_miss(count - 1, self._recur_min),
            evidence=tuple(s.call_index for s in same),
            summary=f"{describe_call(step)} called {count}x in the last {len(self._recent)} "
            "calls with other calls in between, same result each time",
            pattern=f"exact:{step.signature}",
            details={
                "tool": step.call.name,
                "arguments": step.call.canonical,
                "count": count,
                "limit": self._recur_min - 1,
                "failing": step.outcome.failed,
                "result": short(step.result or "", 200),
            },
        )

    def preflight(self, call: ToolCall) -> Finding | None:
        """What ``call``, made next, would bring (`judge.detectors.base.Preflight`): the
        same call extends the run as if its result repeats. Under the limit nothing; at the
        limit a suspicion; past it the loop finding itself."""
        if call.signature != self._signature:
            return None
        attempts = self._count + self._refused + 1
        limit = self.limit(call.name, self._all_failed)
        if attempts < limit:
            return None
        finding = self._assess(proposed=True)
        if finding is None:
            return None
        return finding if attempts > limit else dataclasses.replace(finding, score=SUSPICION_CAP)

    def refused(self, call: ToolCall) -> Finding | None:
        """``call`` was refused before it ran (`judge.detectors.base.Refusal`): it counts
        as one more attempt of the run it extends."""
        if call.signature == self._signature and self._last is not None:
            self._refused += 1
            self._current = self._assess()
        return self._current

    def _assess(self, *, proposed: bool = False) -> Finding | None:
        step = self._last
        attempts = self._count + self._refused + int(proposed)
        if step is None or attempts < 2:
            return None
        limit = self.limit(step.call.name, self._all_failed)
        if limit >= UNLIMITED:
            return None
        looping = attempts > limit
        if self._all_failed:
            outcome = "failing each time" if self._varied else "the same error"
        else:
            outcome = "the same result"
        # What ran and what did not are counted apart: the messages cited are the calls
        # that ran, and the count beside them must agree with them.
        summary = f"{describe_call(step)} called {self._count}x in a row, {outcome}"
        if self._variants:
            summary = (
                f"{step.call.name} called {self._count}x in a row ({self._variants} of them "
                f"variants still passing what the error named), {outcome}: "
                f"{describe_call(step)}"
            )
        if proposed:  # the call being checked, refused if this is a loop
            summary += f"; attempt {attempts} refused"
        elif self._refused:
            summary += f"; {self._refused} more attempt(s) refused"
        details: dict[str, object] = {
            "tool": step.call.name,
            "arguments": step.call.canonical,
            "count": self._count,
            "limit": limit,
            "failing": self._all_failed,
            "result": short(step.result or "", 200),
        }
        if attempts != self._count:  # refused or proposed calls: what the texts count
            details["attempts"] = attempts
        return Finding(
            detector=self.name,
            kind=LoopKind.EXACT_REPEAT,
            score=LOOP_SCORE if looping else near_miss(attempts, limit),
            evidence=tuple(self._evidence),
            summary=summary,
            pattern=f"exact:{step.signature}",
            details=details,
        )
