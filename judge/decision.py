"""Is the agent looping? The one place that answers.

`decide` reads the detectors' findings, the judge's outcome (when it was asked this turn)
and the policy state, and says what to do: nothing (with the suspicion to show), act on a
finding, act on the judge, or refuse the call (or streamed response) about to happen. It
is pure: no I/O, no mutation, nothing but its arguments. The tracker gathers them, the
responder acts on the answer.

The rules, in the order they apply:

1. Policy first. A pattern a person silenced (an override) neither flags nor brings the
   judge forward, but its score still shows as the verdict's suspicion. A finding that
   cites only evidence a loop verdict already answered (`Answered.covers`) is dropped the
   same way: the agent was told, and it must do the thing again before it is flagged
   again. A pattern the known-loop memory knows has its sub-threshold score raised to the
   suspicion cap (an early judge check), or, with ``memory_lowers_threshold``, flags one
   repeat early.
2. What is left is a loop when one detector is at its threshold, two signals are strong,
   or their weighted sum is enough (`combine`). Otherwise a finding at the suspicion cap
   makes the turn suspect: the judge's check may come early.
3. The judge is asked only when the heuristics found no loop. Its deciding call (confirm
   when it answered, else fast) at or above the threshold is a loop, unless a person
   silenced the judge's pattern. The judge alone stops a run only on agreement that has
   lasted: both models found a loop on two checks at least ``min_interval`` turns apart,
   with no check in between finding none (`may_stop`). One model is one opinion, and a
   model that answers "loop" on everything would otherwise end every run it watches.
4. Before a call runs (``preflight``), and while a response streams, only a detector at
   its own threshold refuses, and a person's prompt after the newest call the finding
   cites lets the call run once more (they may have changed what it depends on).

Then the ``on_loop`` callback, the user's code, has the last word on a loop verdict
(`judge.response.responder`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from judge.detectors.base import LOOP_SCORE, SUSPICION_CAP, Finding
from judge.verdict import JudgeStage, LoopKind

if TYPE_CHECKING:
    from judge.config import TrackerConfig
    from judge.llm.pair import JudgeOutcome

# Combination rules: one detector at its threshold, two strong signals, or enough
# weighted evidence.
SINGLE_SCORE = 0.9
PAIR_SCORE = 0.7
WEIGHTED_SUM = 0.6
# The pattern of every loop the LLM judge finds: it names no call, so all its verdicts are
# one loop for counting and overriding.
LLM_PATTERN = "llm"
# What a known loop's finding says when the memory makes it flag one repeat early.
KNOWN_LOOP_NOTE = " (this loop was seen in an earlier session)"


class Outcome(str, Enum):
    """What a decision calls for."""

    CLEAR = "clear"  # no loop to act on; show the suspicion
    FINDING = "finding"  # a heuristic finding is a loop
    JUDGE = "judge"  # the judge found a loop
    REFUSE = "refuse"  # the call (or streamed response) about to happen is a loop


@dataclass(frozen=True, slots=True)
class Answered:
    """What the latest loop verdict answered: every message up to index ``through`` (-1:
    nothing yet), and a digest of that message to find it again in a rewritten history.

    A verdict is tied to its evidence: a finding citing nothing newer is the loop already
    answered, not a new repeat, so the ladder climbs only when the agent repeats a pattern
    after it was told, and an agent that obeys the recovery message is never pushed
    towards a stop.
    """

    through: int = -1
    digest: str | None = None

    def covers(self, evidence: Sequence[int]) -> bool:
        """Whether a finding citing ``evidence`` was already answered (a finding citing no
        message cannot be tied to one, and never is)."""
        return bool(evidence) and max(evidence) <= self.through

    def upto(self, index: int, digest: str) -> Answered:
        """A loop verdict was given with message ``index`` the newest read."""
        return Answered(index, digest) if index >= self.through else self

    def moved(self, index: int | None) -> Answered:
        """After a rewrite, where the newest answered message is now (None: it is gone, so
        everything left is newer: a sliding window dropped it, or a summary replaced it)."""
        if self.digest is None:
            return self
        if index is None:
            return NOTHING_ANSWERED
        return Answered(index, self.digest)


NOTHING_ANSWERED = Answered()


@dataclass(frozen=True, slots=True)
class Rules:
    """The fixed part of the policy: the configuration's thresholds."""

    weights: Mapping[str, float] = field(default_factory=dict)
    threshold: float = 0.7
    min_interval: int = 5
    memory_lowers_threshold: bool = False

    @classmethod
    def from_config(cls, config: TrackerConfig) -> Rules:
        return cls(
            weights=config.detector_weights,
            threshold=config.confidence_threshold,
            min_interval=config.min_interval,
            memory_lowers_threshold=config.memory_lowers_threshold,
        )


@dataclass(frozen=True, slots=True)
class Policy:
    """Everything besides the findings and the judge that a decision reads.

    ``silenced``: the patterns a person's override keeps from flagging now (only those
    asked about need be listed; the judge's is `LLM_PATTERN`). ``known``: the patterns the
    known-loop memory has seen loop before. ``judge_agreed``: the session turns of the
    first and the latest check on which both judge models found a loop, since a check
    last found none. ``turn``: the session turn. ``prompt``: the index of a person's
    latest prompt (-1: none), for ``preflight``.
    """

    rules: Rules = field(default_factory=Rules)
    turn: int = 0
    silenced: frozenset[str] = frozenset()
    answered: Answered = NOTHING_ANSWERED
    known: frozenset[str] = frozenset()
    judge_agreed: tuple[int, ...] = ()
    prompt: int = -1


@dataclass(frozen=True, slots=True)
class Decision:
    """What `decide` says to do.

    ``suspicion`` is what the verdict shows. ``finding`` is the loop's finding (`FINDING`,
    `REFUSE`); ``findings`` what the policy left of the detectors' findings, strongest
    first; ``suspect`` that one of them is one repeat short of a loop (the judge may be
    asked early); ``kind`` the judge's loop's kind (the strongest heuristic signal under
    it names the mechanism). ``judge_said`` is the judge's answer (None: not asked, or no
    answer), ``judge_agreed`` the agreement to keep after this check (None: unchanged) and
    ``judge_may_stop`` whether the judge alone may stop the run now.
    """

    outcome: Outcome
    suspicion: float
    finding: Finding | None = None
    findings: tuple[Finding, ...] = ()
    suspect: bool = False
    kind: LoopKind | None = None
    judge_said: bool | None = None
    judge_agreed: tuple[int, ...] | None = None
    judge_may_stop: bool = False

    @property
    def looping(self) -> bool:
        return self.outcome is not Outcome.CLEAR


@dataclass(frozen=True, slots=True)
class Combined:
    """The detectors' findings combined: the loop (if any), the top score, all ranked."""

    loop: Finding | None
    suspicion: float
    findings: tuple[Finding, ...]


# What most turns find: nothing (immutable, so one is shared).
NOTHING_FOUND = Combined(None, 0.0, ())
CLEAR = Decision(Outcome.CLEAR, 0.0)


def combine(findings: Sequence[Finding], weights: Mapping[str, float]) -> Combined:
    """One detector at its threshold, two strong signals, or enough weighted evidence."""
    if not findings:
        return NOTHING_FOUND
    ranked = tuple(sorted(findings, key=lambda f: f.score, reverse=True))
    top = ranked[0]
    strong = [f for f in ranked if f.score >= PAIR_SCORE]
    weighted = sum(weights.get(f.detector, 0.0) * f.score for f in ranked)
    looping = top.score >= SINGLE_SCORE or len(strong) >= 2 or weighted >= WEIGHTED_SUM
    return Combined(top if looping else None, top.score, ranked)


def agreement(agreed: Sequence[int], turn: int, *, both: bool, looping: bool) -> tuple[int, ...]:
    """The judge's agreement after a check that got an answer: ``both`` when both models
    found a loop, ``looping`` when the check's verdict was a loop (a sure fast model trusted
    alone is a loop without agreement). A check that found no loop ends the stretch: what
    follows must agree twice again. Only the first and the latest turn are kept (the widest
    span is all `may_stop` reads)."""
    if both:
        return (agreed[0], turn) if agreed else (turn,)
    if not looping:
        return ()
    return tuple(agreed)


def may_stop(agreed: Sequence[int], min_interval: int) -> bool:
    """Whether the judge alone may stop the run: both models agreed on two checks at
    least ``min_interval`` session turns apart."""
    return len(agreed) >= 2 and agreed[-1] - agreed[0] >= min_interval


def one_short(finding: Finding) -> bool:
    """Whether the finding is one repeat short of its detector's threshold.

    exact_repeat says so exactly (``count`` reaches ``limit``, the calls allowed); other
    detectors report their near-miss as a score that reaches the suspicion cap only there.
    """
    count, limit = finding.details.get("count"), finding.details.get("limit")
    if isinstance(count, int) and isinstance(limit, int):
        return count >= limit
    return finding.score >= SUSPICION_CAP


def _recalled(finding: Finding, policy: Policy) -> Finding:
    """``finding`` as the known-loop memory weighs it."""
    if finding.score >= SINGLE_SCORE or finding.pattern not in policy.known:
        return finding
    if policy.rules.memory_lowers_threshold and one_short(finding):
        summary = finding.summary + KNOWN_LOOP_NOTE
        return dataclasses.replace(finding, score=LOOP_SCORE, summary=summary)
    if finding.score < SUSPICION_CAP:
        return dataclasses.replace(finding, score=SUSPICION_CAP)
    return finding


def decide(
    findings: Sequence[Finding],
    judge: JudgeOutcome | None,
    policy: Policy,
    *,
    preflight: bool = False,
) -> Decision:
    """What to do about ``findings`` (and the judge's ``judge``, when it was asked) under
    ``policy``; see the module docstring for the rules. ``preflight``: the findings are
    about a call not yet run (or a response still streaming), to refuse or let through."""
    if preflight:
        return _before_call(findings, policy)
    if not findings and judge is None:
        return CLEAR
    shown = max((f.score for f in findings), default=0.0)
    active = [
        _recalled(f, policy)
        for f in findings
        if f.pattern not in policy.silenced and not policy.answered.covers(f.evidence)
    ]
    found = combine(active, policy.rules.weights)
    if found.loop is not None:
        return Decision(Outcome.FINDING, found.loop.score, found.loop, found.findings)
    clear = Decision(
        Outcome.CLEAR,
        max(found.suspicion, shown),
        findings=found.findings,
        suspect=found.suspicion >= SUSPICION_CAP,
    )
    if judge is None or judge.deciding is None:
        return clear
    deciding = judge.deciding
    looping = (deciding.confidence or 0.0) >= policy.rules.threshold
    # Confirm decides only after a sure fast model, so a loop decided by confirm is both
    # models agreeing; one decided by fast is the fast model trusted alone.
    both = looping and deciding.stage is JudgeStage.CONFIRM
    agreed = agreement(policy.judge_agreed, policy.turn, both=both, looping=looping)
    if not looping or LLM_PATTERN in policy.silenced:
        return dataclasses.replace(clear, judge_said=looping, judge_agreed=agreed)
    return Decision(
        Outcome.JUDGE,
        found.suspicion,
        findings=found.findings,
        suspect=clear.suspect,
        # The judge names no mechanism; the strongest heuristic signal under it does, and
        # without one, no progress in spite of varied actions is what "cognitive" means.
        kind=found.findings[0].kind if found.findings else LoopKind.COGNITIVE,
        judge_said=True,
        judge_agreed=agreed,
        judge_may_stop=may_stop(agreed, policy.rules.min_interval),
    )


def _before_call(findings: Sequence[Finding], policy: Policy) -> Decision:
    shown = max((f.score for f in findings), default=0.0)
    loops = [f for f in findings if f.score >= SINGLE_SCORE]
    loop = next((f for f in loops if f.pattern not in policy.silenced), None)
    if loop is None or (bool(loop.evidence) and policy.prompt > max(loop.evidence)):
        # A loop that is not acted on shows as a suspicion, as a turn's would.
        return Decision(Outcome.CLEAR, min(shown, SUSPICION_CAP) if loops else shown)
    return Decision(Outcome.REFUSE, loop.score, loop, (loop,))
