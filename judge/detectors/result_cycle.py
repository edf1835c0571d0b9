"""Different calls, same result; and errors that come back after being "fixed"."""

from __future__ import annotations

from collections import deque
from typing import Any

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.edits import modifies_files
from judge.detectors.exact_repeat import blamed_values
from judge.detectors.outcome import Outcome, missing_paths, related_paths
from judge.detectors.steps import Step, user_error
from judge.user_turns import is_observation, is_recovery
from judge.verdict import LoopKind

# How many recent errors whack-a-mole remembers: A, B, A, B, A needs five; a little more
# lets a third error in, without linking errors from unrelated phases of a long run.
WHACK_WINDOW = 7
# Returns of an error after others before it is a loop. On the dev split a single return
# (A, B, A) is ordinary debugging as often as not (a traceback, a fix that breaks
# something else, the first traceback again), so one return is only a suspicion for the
# judge and the second return is the loop.
WHACK_RETURNS = 2
WHACK_OCCURRENCES = 3
# Flip-flop: the same command (a test run) failing, run after run, alternately with the
# same two errors (A, B, A, B, A) while the agent edits between runs: each edit undoes the
# last. Five runs is two full round trips plus the return, the whack-a-mole bar; the
# runs are looked for among this many recent failures.
FLIP_RUNS = 5
FLIP_WINDOW = 40
# Stuck: the same tool failing with the same error this many times with no new file change
# in between, whatever else happens between (re-reading the file, searching). The labelling
# rule's ">= 4 varied attempts that get the same error" (shared/recorded/LABELING.md).
STUCK_FAILURES = 4
# Same failure: one obstacle (spent credits, a denied permission, one missing directory)
# reported again and again whatever the agent tries: other tools, reworded arguments, other code.
# Compared by substance (`outcome.obstacle`), not by text, because each tool words it
# differently and echoes its own input. Only failures no change of the call's input can
# fix are grouped: an error about the input ("order not found", an assertion, another
# guessed directory) is what trying other inputs is for. The obstacle named once is the
# agent being told; a third failure on it with nothing succeeding, nothing written and no
# new words from a person in between is a loop: the bar of three identical failures
# (exact_repeat's failure limit) applied to calls that differ. Counted among the last
# SAME_FAILURE_WINDOW failures, so one other failure in between (a typo, an undefined
# helper tried instead) does not hide it. Written from smolagents' web searches failing on
# spent credits through reworded code; the exemptions from productive WebShop,
# mini-swe-agent and tau-bench shapes that a plain count of three flags.
SAME_FAILURE = 3
SAME_FAILURE_WINDOW = 4
# The substance of a missing file or directory (`outcome.obstacle`).
MISSING_FILE = "F:missing-file"
# Outcomes that say nothing about progress and never form "the same result".
_NO_RESULT = (Outcome.ACK, Outcome.NUMBER, Outcome.MISSING)


class ResultCycleDetector:
    """Flags ``min_calls`` distinct calls in a row returning the same result or error,
    and whack-a-mole: error A, a fix, error B, a fix, error A again (same tool)."""

    name = "result_cycle"
    # Call steps, and user messages: a person's new words end a run of the same failure.
    reads_messages = True
    # Attributes that make up the detector's state (serialized by LoopTracker.state).
    STATE = (
        "_key",
        "_streak_edits",
        "_signatures",
        "_evidence",
        "_whack",
        "_current",
        "_failures",
        "_same",
        "_same_edits",
    )
    # Added after the first saved states: such a state starts with no failure run.
    STATE_OPTIONAL = frozenset({"_same", "_same_edits"})

    def __init__(self, min_calls: int) -> None:
        self._min_calls = min_calls
        self.reset()

    def reset(self) -> None:
        self._key: str | None = None
        self._streak_edits = 0
        self._signatures: dict[str, Step] = {}
        self._evidence: list[int] = []
        # (signature, result key, call index, tool, edit epoch) of recent errors: flip-flops
        # and stuck errors read all of them, whack-a-mole the last WHACK_WINDOW
        self._failures: deque[tuple[str, str, int, str, int]] = deque(maxlen=FLIP_WINDOW)
        self._whack: Finding | None = None
        self._current: Finding | None = None
        # The current run of failures (substance, call index, tool), nothing succeeding
        # or changed in between, and the edit epoch it belongs to.
        # (substance, call index, tool, the argument values the error named)
        self._same: deque[tuple[str, int, str, tuple[str, ...]]] = deque(maxlen=SAME_FAILURE_WINDOW)
        self._same_edits = 0

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            if (
                event.role == "user"
                and not (is_observation(event) or is_recovery(event))
                and user_error(event) is None  # a harness's error report is a result
            ):
                # A person's new words (another email, a name and zip code) make the next
                # failure a new attempt with new information, not the same obstacle again.
                self._same.clear()
            return self._current
        self._whack = None  # whack-a-mole speaks once, on the step that closes the circle
        self._track_streak(event)
        self._track_errors(event)
        streak = self._streak_finding(event)
        same = self._same_failure(event)
        candidates = [f for f in (streak, self._whack, same) if f is not None]
        self._current = max(candidates, key=lambda f: f.score) if candidates else None
        return self._current

    def _track_streak(self, step: Step) -> None:
        if step.outcome in _NO_RESULT:
            self._key, self._signatures, self._evidence = None, {}, []
            return
        # A new file change starts a new streak: edits that each change the code and get the
        # same reply are not calls asking for the same thing.
        if step.key != self._key or step.edits != self._streak_edits:
            self._key, self._signatures, self._evidence = step.key, {}, []
            self._streak_edits = step.edits
        self._signatures.setdefault(step.signature, step)
        # The newest calls: a finding must cite the step that made it, or a long run would
        # read as already answered and never flag again.
        self._evidence = [*self._evidence, step.call_index][-2 * self._min_calls :]

    def _streak_finding(self, step: Step) -> Finding | None:
        count = len(self._signatures)
        if self._key is None or count < 2:
            return None
        looping = count >= self._min_calls
        what = "failed with the same error" if step.outcome.failed else "returned the same result"
        calls = [
            f"{s.call.name}({short(s.call.canonical, 30)})"
            for s in list(self._signatures.values())[-4:]
        ]
        return Finding(
            detector=self.name,
            kind=LoopKind.ERROR_CYCLE,
            score=LOOP_SCORE if looping else near_miss(count, self._min_calls),
            evidence=tuple(self._evidence),
            summary=f"{count} different calls in a row {what}: {short(step.result or '', 80)}",
            pattern=f"result:{self._key}",
            details={
                "calls": calls,
                "count": count,
                "result": short(step.result or "", 200),
                "failing": step.outcome.failed,
            },
        )

    def _error_finding(
        self,
        step: Step,
        *,
        kind: LoopKind,
        score: float,
        evidence: tuple[int, ...],
        summary: str,
        pattern: str,
        **details: Any,
    ) -> Finding:
        """A finding about ``step``'s error coming back (flip-flop, stuck, whack-a-mole)."""
        return Finding(
            detector=self.name,
            kind=kind,
            score=score,
            evidence=evidence,
            summary=f"{summary}: {short(step.result or '', 80)}",
            pattern=pattern,
            details={
                "tool": step.call.name,
                "result": short(step.result or "", 200),
                "failing": True,
                **details,
            },
        )

    def _flip(self, step: Step) -> bool:
        """The same call's last runs failing A, B, A, B, A (edits or not between)."""
        runs = [(k, i) for sig, k, i, _, _ in self._failures if sig == step.signature]
        runs = runs[-FLIP_RUNS:]
        if len(runs) < FLIP_RUNS:
            return False
        a, b = runs[-1][0], runs[-2][0]
        if a == b or any(k != (a if n % 2 == 0 else b) for n, (k, _) in enumerate(reversed(runs))):
            return False
        self._whack = self._error_finding(
            step,
            kind=LoopKind.ERROR_CYCLE,
            score=LOOP_SCORE,
            evidence=tuple(i for _, i in runs),
            summary=f"{step.call.name} keeps flipping between the same two errors "
            f"({FLIP_RUNS} runs)",
            pattern=f"flip:{step.signature}",
            count=FLIP_RUNS,
        )
        return True

    def _stuck(self, step: Step) -> bool:
        """The same tool, the same error, again and again with nothing changed between."""
        same = [
            i
            for _, key, i, tool, edits in self._failures
            if key == step.key and tool == step.call.name and edits == step.edits
        ]
        if len(same) < STUCK_FAILURES:
            return False
        self._whack = self._error_finding(
            step,
            kind=LoopKind.SIMILAR_RETRY,
            score=LOOP_SCORE,
            evidence=tuple(same[-2 * STUCK_FAILURES :]),
            summary=f"{step.call.name} failed the same way {len(same)}x with nothing changed "
            "in between",
            pattern=f"stuck:{step.call.name}:{step.key}",
            count=len(same),
            limit=STUCK_FAILURES - 1,
        )
        return True

    def _track_errors(self, step: Step) -> None:
        # Only real errors: "no results" from searches with new arguments is exploring.
        if step.outcome is not Outcome.ERROR:
            return
        # An error coming back after a new file change is the edit-and-rerun debugging of
        # every coding agent; only errors since the last new change are compared.
        # The last WHACK_WINDOW errors before this one, as (key, tool, call index).
        recent = [
            (key, tool, index)
            for _, key, index, tool, edits in list(self._failures)[-WHACK_WINDOW:]
            if edits == step.edits
        ]
        self._failures.append(
            (step.signature, step.key, step.call_index, step.call.name, step.edits)
        )
        if self._flip(step) or self._stuck(step):
            return
        if not recent or recent[-1][0] == step.key:
            return
        # Count returns: occurrences of this error (same tool) each preceded by another error.
        history = [*recent, (step.key, step.call.name, step.call_index)]
        returns, seen_other = 0, False
        evidence: list[int] = []
        for key, tool, index in history:
            if key == step.key and tool == step.call.name:
                if evidence and seen_other:
                    returns += 1
                evidence.append(index)
                seen_other = False
            elif evidence:
                seen_other = True
        if returns == 0:
            return
        # A, A, B, A: the error came back once but is now three strong; also a loop.
        looping = returns >= WHACK_RETURNS or len(evidence) >= WHACK_OCCURRENCES
        self._whack = self._error_finding(
            step,
            kind=LoopKind.ERROR_CYCLE,
            score=LOOP_SCORE if looping else near_miss(returns, WHACK_RETURNS),
            evidence=tuple(evidence),
            summary=f"whack-a-mole: the same {step.call.name} error came back {returns}x "
            "after other errors",
            pattern=f"whack:{step.key}",
        )

    def _same_failure(self, step: Step) -> Finding | None:
        """The same failure (by substance) SAME_FAILURE times among the last few failures,
        through any calls, with no success and no file change in between."""
        if step.outcome is Outcome.MISSING:
            return None  # no result: says nothing either way
        if not step.outcome.failed:
            self._same.clear()
            return None
        # A new file change (or a failing command that also writes files: "cat > conf.py
        # && build") makes the next failure a new attempt against changed input, as
        # coding agents debug; so does a new edit epoch.
        if step.edits != self._same_edits or modifies_files(step.call):
            self._same.clear()
            self._same_edits = step.edits
        substance = step.substance if step.outcome is Outcome.ERROR else ""
        if substance == MISSING_FILE:
            # Which paths are missing decides whether this is the same obstacle.
            named = missing_paths(step.result or "")
            earlier = next((e for e in reversed(self._same) if e[0] == substance), None)
            if (
                earlier is not None
                and named
                and earlier[3]
                and not related_paths(named, earlier[3])
            ):
                kept = [e for e in self._same if e[0] != substance]
                self._same.clear()
                self._same.extend(kept)
        else:
            named = tuple(sorted(blamed_values(step))) if substance else ()
        if named and substance != MISSING_FILE:
            # The error names what the agent passed ("flight HAT031 not available"): when
            # the last failure of this substance named a value this one does not, the agent
            # tried another option and it failed too, a search through alternatives rather
            # than the same obstacle met again. Errors naming nothing the call passed (a missing
            # directory reached through a shell command, a spent credit) still group.
            earlier = next((e for e in reversed(self._same) if e[0] == substance), None)
            if earlier is not None and earlier[3] and not set(earlier[3]) <= set(named):
                kept = [e for e in self._same if e[0] != substance]
                self._same.clear()
                self._same.extend(kept)
        self._same.append((substance, step.call_index, step.call.name, named))
        if not substance:
            return None  # "no results": exploring, never the obstacle itself
        same = [(i, tool) for s, i, tool, _ in self._same if s == substance]
        needed = SAME_FAILURE
        if len(same) < 2:
            return None
        looping = len(same) >= needed
        tools = sorted({tool for _, tool in same})
        return self._error_finding(
            step,
            kind=LoopKind.SIMILAR_RETRY,
            score=LOOP_SCORE if looping else near_miss(len(same), needed),
            evidence=tuple(i for i, _ in same),
            summary=f"the same failure {len(same)}x through {', '.join(tools)} with nothing "
            "succeeding or changed in between",
            pattern=f"failure:{substance}",
            count=len(same),
            limit=needed - 1,
        )
