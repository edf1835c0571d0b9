"""Edit after edit, and the test result never moves.

Edit-and-rerun is how coding agents make progress, so the other detectors leave it alone
as long as the edits are new (`judge.detectors.edits`). Progress shows in the result,
though: when six new edits in a row leave the same test command's output exactly as it
was ("70 passed. 16 failed." every time), the agent is trying variants of one idea that
does not work. Two shapes are read:

- a command (a test run) re-run after each new edit, returning the same result each time;
- an editor that reports the test summary with each edit (Moatless Tools): successful
  edits of the same file whose result ends with the same line.

"In a row" is bounded in time too: a target re-checked after `MAX_GAP_STEPS` steps of
other work starts a new count. A long run returns to an old test now and then, after
other fixes elsewhere, and finding it unchanged then says nothing about the edits made
for it, so unchanged results far apart must not add up to six.
"""

from __future__ import annotations

from judge.detectors.base import LOOP_SCORE, Event, Finding, near_miss, short
from judge.detectors.edits import edited_file
from judge.detectors.outcome import Outcome
from judge.detectors.steps import Step
from judge.verdict import LoopKind

# New edits in a row after which an unchanged result is a loop. The labelling rule calls
# ">= 4 varied attempts that get the same error" a loop; edits that each change the code
# deserve more benefit of the doubt (a refactor in several steps keeps tests red), so six:
# a dozen-variant tweak loop is caught halfway, a multi-step fix is not.
NO_EFFECT_EDITS = 6
# Steps (completed calls) after which a target's next run starts a new count. Measured on
# evals/coding_dev and evals/data, on every run whose count reaches 3: an agent re-runs
# its check 1 to 15 steps after the previous run (psf-requests-863, the labelled loop: 1
# to 3). A few more than the longest: no run there changes, and a check re-run after
# twenty steps of other work is a new look, not the same attempt again.
MAX_GAP_STEPS = 20
# Commands and files followed at once: a debugging session alternates between a few.
TRACKED = 8
# The last line of an edit's result is its test summary, when it has one ("70 passed. 16
# failed."): a short line with a count in it. Longer last lines are code or a diff, and a
# line without a digit is the editor's boilerplate ("Review the changes ..."), the same
# after every edit.
SUMMARY_MAX_CHARS = 120


def _last_line(text: str) -> str:
    tail = text[-2 * SUMMARY_MAX_CHARS :].rstrip()
    for suffix in ("</observation>", "</output>"):
        if tail.endswith(suffix):
            tail = tail[: -len(suffix)].rstrip()
    return tail.rsplit("\n", 1)[-1].strip()


class NoEffectDetector:
    """Counts new edits after which a result stayed exactly the same."""

    name = "no_effect"
    reads_messages = False  # it reasons about call steps only
    STATE = ("_runs", "_current", "_steps", "_at")
    # Attributes a state saved before they existed may lack (their reset value is kept).
    STATE_OPTIONAL = frozenset({"_steps", "_at"})

    def __init__(self, edits: int = NO_EFFECT_EDITS) -> None:
        self._edits = edits
        self.reset()

    def reset(self) -> None:
        # target -> (result key, edit epoch of the last run, unchanged runs, evidence)
        self._runs: dict[str, tuple[str, int, int, tuple[int, ...]]] = {}
        self._current: Finding | None = None
        self._steps = 0  # completed calls seen: the clock of MAX_GAP_STEPS
        self._at: dict[str, int] = {}  # target -> the step of its latest run

    def observe(self, event: Event) -> Finding | None:
        if not isinstance(event, Step):
            return self._current
        self._current = None
        self._steps += 1
        if event.outcome in (Outcome.MISSING, Outcome.ACK) or event.result is None:
            return None
        target, key = self._target(event)
        if target is None:
            return None
        key_then, epoch, count, evidence = self._runs.pop(target, (None, -1, 0, ()))
        last = self._at.pop(target, None)
        if last is not None and self._steps - last > MAX_GAP_STEPS:
            key_then, count, evidence = None, 0, ()  # a new look after other work
        self._at[target] = self._steps
        if key == key_then and event.edits > epoch:
            count, evidence = count + 1, (*evidence, event.call_index)[-2 * self._edits :]
        elif key != key_then:
            count, evidence = 0, (event.call_index,)
        self._runs[target] = (key, event.edits, count, evidence)
        while len(self._runs) > TRACKED:
            del self._runs[next(iter(self._runs))]
        while len(self._at) > TRACKED:
            del self._at[next(iter(self._at))]
        if count < 2:
            return None
        self._current = Finding(
            detector=self.name,
            kind=LoopKind.SIMILAR_RETRY,
            score=LOOP_SCORE if count >= self._edits else near_miss(count, self._edits),
            evidence=evidence,
            summary=f"{count} new edits in a row and {short(target, 50)} still gives the same "
            f"result: {short(_last_line(event.result), 60)}",
            pattern=f"no_effect:{target}",
            details={"count": count, "limit": self._edits - 1, "target": short(target, 200)},
        )
        return self._current

    @staticmethod
    def _target(step: Step) -> tuple[str | None, str]:
        """What is being re-checked, and the result to compare."""
        path = edited_file(step.call)
        if path is not None:
            line = _last_line(step.result or "")
            if len(line) > SUMMARY_MAX_CHARS or not any(c.isdigit() for c in line):
                return None, ""
            return f"edits of {path}", line
        return step.signature, step.key
