"""The escalation ladder: which action a loop verdict calls for, and what came of it.

Pure bookkeeping, no I/O and no tracker: a `Ladder` counts detections per distinct loop
pattern (``Finding.pattern``, or ``"llm"`` for the judge) and overall, turns the count into
a rung, and the response mode turns the rung into an action. It also keeps the person's
overrides (silences) and counts recoveries. Its whole state is one pydantic model,
`LadderState`, so a tracker's state can be saved and restored as JSON.

Counting rules, chosen so the ladder is predictable and documented in one place:

- Every loop verdict counts, including one on the very next turn while the loop is still
  running: the agent saw the warning and went on anyway, so it climbs a rung.
- The rung of a detection is the larger of the pattern's own count and the overall count
  divided by ``overall_every`` (rounded up): a relapse into the same loop climbs at full
  speed, a string of different loops at half speed by default.
- A loop verdict opens a recovery attempt for its pattern. No detection of that pattern for
  ``recovery_turns`` turns closes it as a recovery; a detection before that closes it as a
  failed recovery (and opens the next attempt). A pattern flagged again after it was
  escaped keeps its count: relapsing is exactly what the higher rungs are for. The LLM
  judge's pattern is the exception: the judge is asked every 5-15 turns, so silence proves
  nothing; its attempt closes as a recovery only when a later check finds no loop.
- The ladder never decides whether there is a loop (`judge.decision.decide` does, from
  the overrides and the judge's agreement kept here, and what the conversation says a
  verdict already answered); it only counts the verdicts that come of it. A judge verdict
  that the rung would make a stop asks the user instead until the judge's agreement has
  lasted (`judge.decision.may_stop`): a person can always say "keep going", a stopped run
  cannot.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

# The response settings' enum and defaults are declared with the other settings.
from judge.config import (
    DEFAULT_LADDER,
    DEFAULT_OVERALL_EVERY,
    DEFAULT_RECOVERY_TURNS,
    DEFAULT_SILENCE_TURNS,
    ResponseMode,
)
from judge.decision import LLM_PATTERN as LLM_PATTERN  # where the tests and callers look
from judge.decision import agreement, may_stop
from judge.verdict import Action, LoopKind

if TYPE_CHECKING:
    from judge.llm.redaction import Redactor


class RecoveryLevel(str, Enum):
    """Which recovery template a verdict gets; grows with the rung."""

    WARN = "warn"  # 1st: constraints and alternatives
    FORBID = "forbid"  # 2nd: the looping call is forbidden outright
    ASK_USER = "ask_user"  # 3rd: stop and ask the person, listing what was tried
    STOP = "stop"  # beyond: the run ends; hand over what was learned


OVERRIDES_TO_DISABLE = 3
# The ladder's models build their pydantic schema on first validation, not at import: a
# tracker starts from defaults (`model_construct`, no validation) and validates a
# `PatternState` or a `LadderStep` only on a loop verdict, so a quiet process never builds them
# and a hook's process starts sooner.
_DEFERRED = ConfigDict(defer_build=True)


def action_for(detection: int, mode: ResponseMode, ladder: Sequence[Action]) -> Action:
    """The action for rung ``detection`` (1-based) under ``mode``."""
    if detection < 1:
        return Action.CONTINUE
    if mode is ResponseMode.WARN:
        return Action.WARN
    if mode is ResponseMode.BLOCK:
        return Action.STOP
    if mode is ResponseMode.CHANCE_THEN_BLOCK:
        return Action.WARN if detection == 1 else Action.STOP
    steps = list(ladder) or list(DEFAULT_LADDER)
    return steps[min(detection, len(steps)) - 1]


def level_for(action: Action, rung: int) -> RecoveryLevel:
    """The recovery template for an action on a rung: the action decides, except that a
    repeated warning gets the stronger text (so warn mode still tightens its message)."""
    if action is Action.STOP:
        return RecoveryLevel.STOP
    if action is Action.ASK_USER:
        return RecoveryLevel.ASK_USER
    return RecoveryLevel.WARN if rung <= 1 else RecoveryLevel.FORBID


class PatternState(BaseModel):
    """What the ladder knows about one loop pattern in this session."""

    model_config = _DEFERRED

    label: str = Field(description="the latest summary of this loop, for 'approaches tried'")
    kind: LoopKind | None = None
    detections: int = 0
    first_turn: int = 0
    last_turn: int = 0
    awaiting_recovery: bool = False
    recoveries: int = 0
    failed_recoveries: int = 0
    overrides: int = 0
    silenced_until: int | None = Field(default=None, description="last silenced session turn")
    disabled: bool = False


class OverrideRecord(BaseModel):
    """A person's "keep going" for one pattern, as recorded by `Ladder.override`."""

    model_config = _DEFERRED

    pattern: str
    reason: str
    turn: int = Field(description="session turn of the override")
    count: int = Field(description="1 for the first override of this pattern, ...")
    silenced_until: int | None = None
    disabled: bool = False
    message: str


class LadderState(BaseModel):
    """Everything the ladder remembers; JSON-serializable, part of the tracker's state.

    Pattern keys are the detectors' pattern strings, which quote the looping call's
    arguments: treat a saved state like the conversation it came from.
    """

    model_config = _DEFERRED

    turn: int = Field(default=0, description="session turns (never reset by a new prompt)")
    detections: int = 0
    recoveries: int = 0
    failed_recoveries: int = 0
    patterns: dict[str, PatternState] = Field(default_factory=dict)
    overrides: list[OverrideRecord] = Field(default_factory=list)
    # What a loop verdict answered is the conversation's (judge.decision.Answered); a saved
    # state keeps it here, where states saved before it moved have it.
    acted_through: int = Field(
        default=-1, description="newest message index read when a loop verdict was given"
    )
    acted_digest: str | None = Field(
        default=None, description="digest of that message, to find it after a rewrite"
    )
    judge_agreed: list[int] = Field(
        default_factory=list,
        description="session turns of the first and the latest check on which both judge "
        "models found a loop, since a check last found none",
    )


class LadderPolicy(BaseModel):
    """The ladder's settings (from `TrackerConfig`)."""

    model_config = _DEFERRED

    mode: ResponseMode = ResponseMode.GRADUATED
    ladder: tuple[Action, ...] = DEFAULT_LADDER
    overall_every: int = Field(default=DEFAULT_OVERALL_EVERY, ge=1)
    recovery_turns: int = Field(default=DEFAULT_RECOVERY_TURNS, ge=1)
    silence_turns: int = Field(default=DEFAULT_SILENCE_TURNS, ge=1)


class LadderStep(BaseModel):
    """The ladder's answer for one detection."""

    model_config = _DEFERRED

    action: Action
    level: RecoveryLevel
    rung: int
    pattern_count: int = Field(description="detections of this pattern, this one included")
    overall_count: int = Field(description="detections in the session, this one included")
    failed_recovery: bool = Field(
        default=False, description="this pattern was flagged again before it was escaped"
    )
    tried: list[str] = Field(
        default_factory=list, description="labels of the loops flagged so far, newest first"
    )


def _fresh_state() -> LadderState:
    """``LadderState()`` without validating its defaults (they are not validated anyway:
    ``validate_default`` is off), so the schema waits until a state is read or saved.

    The fields with a default factory are given: for each one left out, pydantic reads the
    factory's signature (to see whether it takes the validated data), on every tracker a
    sidecar session builds or restores.
    """
    return LadderState.model_construct(patterns={}, overrides=[], judge_agreed=[])


def _as_is(text: str) -> str:
    return text


# Labels listed as "approaches tried": enough to show a pattern, short enough for a prompt.
TRIED_SHOWN = 5


class Ladder:
    """Counts detections and overrides for one tracker; see the module docstring."""

    def __init__(
        self,
        policy: LadderPolicy | None = None,
        state: LadderState | None = None,
        *,
        redactor: Callable[[], Redactor | None] | None = None,
    ):
        self.policy = policy or LadderPolicy.model_construct()
        self.state = state or _fresh_state()
        # The tracker's redactor (built on first use): an override record keeps the
        # person's reason and the loop's pattern and label, which may quote a secret, and
        # outlives the turn (tracker.overrides, the saved state).
        self._redactor = redactor

    def reset(self) -> None:
        self.state = _fresh_state()

    # -- turns ---------------------------------------------------------------------------

    def tick(self) -> None:
        """Count one session turn (call once per ``turn_started``)."""
        self.state.turn += 1

    def end_turn(self) -> list[str]:
        """Close the recovery attempts that have now gone ``recovery_turns`` turns without a
        detection; returns their patterns (each counted as a recovery)."""
        recovered = []
        for pattern, entry in self.state.patterns.items():
            if pattern == LLM_PATTERN:
                continue  # closed by `cleared`, when a later check finds no loop
            clean = self.state.turn - entry.last_turn
            if entry.awaiting_recovery and clean >= self.policy.recovery_turns:
                entry.awaiting_recovery = False
                entry.recoveries += 1
                self.state.recoveries += 1
                recovered.append(pattern)
        return recovered

    def cleared(self, pattern: str) -> bool:
        """A check found no loop of ``pattern``: close its open recovery attempt as a
        recovery. Returns whether one was open."""
        entry = self.state.patterns.get(pattern)
        if entry is None or not entry.awaiting_recovery:
            return False
        entry.awaiting_recovery = False
        entry.recoveries += 1
        self.state.recoveries += 1
        return True

    # -- the judge's agreement -------------------------------------------------------------

    def judge_checked(self, *, agreed: bool, looping: bool) -> None:
        """Record one judge check that got an answer: ``agreed`` when both models found a
        loop, ``looping`` when the check's verdict was a loop (a sure fast model trusted
        alone is a loop without agreement). A check that found no loop ends the stretch of
        agreement: what follows must agree twice again."""
        kept = agreement(self.state.judge_agreed, self.state.turn, both=agreed, looping=looping)
        self.state.judge_agreed = list(kept)

    def judge_may_stop(self, min_interval: int) -> bool:
        """Whether the judge alone may stop the run: both models agreed on two checks at
        least ``min_interval`` session turns apart (`judge.decision.may_stop`)."""
        return may_stop(self.state.judge_agreed, min_interval)

    # -- detections ----------------------------------------------------------------------

    def _rung(self, pattern_count: int, overall_count: int) -> int:
        return max(pattern_count, math.ceil(overall_count / self.policy.overall_every))

    def _tried(self, first: str | None = None) -> list[str]:
        entries = sorted(self.state.patterns.values(), key=lambda e: e.last_turn, reverse=True)
        labels = [e.label for e in entries]
        if first is not None:
            labels = [first, *(label for label in labels if label != first)]
        return labels[:TRIED_SHOWN]

    def preview(self, pattern: str) -> LadderStep:
        """The step the next detection of ``pattern`` would get; changes nothing."""
        entry = self.state.patterns.get(pattern)
        count = (entry.detections if entry else 0) + 1
        overall = self.state.detections + 1
        rung = self._rung(count, overall)
        action = action_for(rung, self.policy.mode, self.policy.ladder)
        return LadderStep(
            action=action,
            level=level_for(action, rung),
            rung=rung,
            pattern_count=count,
            overall_count=overall,
            failed_recovery=bool(entry and entry.awaiting_recovery),
            tried=self._tried(),
        )

    def escalate(self, pattern: str, *, label: str, kind: LoopKind | None = None) -> LadderStep:
        """Record a loop verdict for ``pattern`` and say what it calls for."""
        step = self.preview(pattern)
        entry = self.state.patterns.get(pattern)
        if entry is None:
            entry = PatternState(label=label, kind=kind, first_turn=self.state.turn)
            self.state.patterns[pattern] = entry
        if entry.awaiting_recovery:
            entry.failed_recoveries += 1
            self.state.failed_recoveries += 1
        entry.label, entry.kind = label, kind
        entry.detections = step.pattern_count
        entry.last_turn = self.state.turn
        entry.awaiting_recovery = True
        self.state.detections = step.overall_count
        return step.model_copy(update={"tried": self._tried(first=label)})

    # -- overrides -----------------------------------------------------------------------

    def silenced(self, pattern: str) -> bool:
        """Whether a person's override keeps ``pattern`` from flagging this turn."""
        entry = self.state.patterns.get(pattern)
        if entry is None:
            return False
        if entry.disabled:
            return True
        return entry.silenced_until is not None and self.state.turn <= entry.silenced_until

    def _record_scrub(self) -> Callable[[str], str]:
        """The saved state's scrubber (judge.state.redacted_by): it also redacts the pieces
        of a secret it has seen whole, so a label clipped mid-secret is caught."""
        redactor = self._redactor() if self._redactor is not None else None
        if redactor is None:
            return _as_is
        from judge.state import redacted_by

        return redacted_by(redactor)

    def override(
        self,
        pattern: str,
        reason: str,
        *,
        label: str | None = None,
        public: Callable[[str], str] | None = None,
    ) -> OverrideRecord:
        """A person says "keep going" about ``pattern``; friction grows with each one.

        The 1st silences it for ``silence_turns`` turns, the 2nd for twice that, the 3rd
        disables it for the rest of the session. An open recovery attempt is dropped: the
        person, not the agent, ended the loop. The record kept in the state is scrubbed for
        saving; the one returned is scrubbed by ``public`` when given (the caller's own
        placeholders, the same as on the verdict it answers), else the same way.
        """
        entry = self.state.patterns.get(pattern)
        if entry is None:
            entry = PatternState(
                label=label or pattern, first_turn=self.state.turn, last_turn=self.state.turn
            )
            self.state.patterns[pattern] = entry
        entry.overrides += 1
        entry.awaiting_recovery = False
        count = entry.overrides
        name = entry.label
        if count >= OVERRIDES_TO_DISABLE:
            entry.disabled = True
            entry.silenced_until = None
            message = (
                f"override {count}: detection of this loop is now off for the rest of "
                f"this session ({name})"
            )
        else:
            turns = self.policy.silence_turns * 2 ** (count - 1)
            entry.silenced_until = self.state.turn + turns
            left = OVERRIDES_TO_DISABLE - count
            message = (
                f"override {count}: this loop will not be flagged for the next {turns} "
                f"turns; {left} more override(s) turn its detection off for the session "
                f"({name})"
            )

        def scrubbed(clean: Callable[[str], str]) -> OverrideRecord:
            pattern_text = clean(pattern)  # first: it holds the whole call, the label a clip
            return OverrideRecord(
                pattern=pattern_text,
                reason=clean(reason),
                turn=self.state.turn,
                count=count,
                silenced_until=entry.silenced_until,
                disabled=entry.disabled,
                message=clean(message),
            )

        record = scrubbed(self._record_scrub())
        self.state.overrides.append(record)
        return record if public is None else scrubbed(public)
