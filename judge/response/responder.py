"""What the tracker does once `judge.decision.decide` has spoken.

`Responder` turns a `Decision` into a `Verdict`: a loop climbs the escalation ladder and
gets its three texts; then it runs the ``on_loop`` callback and keeps the stats,
telemetry and the known-loop memory's record. It also keeps the policy state the decision
reads (a person's overrides and the judge's agreement, on the ladder; the memory) and
hands it over as a `Policy`. It never decides whether there is a loop.

It is also the one exit of a verdict: `Responder.publish` passes every text the verdict
carries (summary, explanation, recovery message, analysis, pattern, errors, the judge
calls' analyses and errors) through the tracker's redactor before anyone sees it (the
agent, ``on_loop``, stats, telemetry, logs, the eval report), and logs loop verdicts and
judge failures, one line each, on the ``judge`` logger.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from judge.config import TrackerConfig
from judge.decision import (
    LLM_PATTERN,
    NOTHING_ANSWERED,
    Answered,
    Decision,
    Outcome,
    Policy,
    Rules,
)
from judge.detectors.base import Finding, short
from judge.history import Message
from judge.response.ladder import (
    Ladder,
    LadderPolicy,
    LadderState,
    LadderStep,
    OverrideRecord,
    RecoveryLevel,
)
from judge.response.stats import TrackerStats
from judge.response.telemetry import Telemetry
from judge.verdict import Action, JudgeCall, Origin, Verdict

if TYPE_CHECKING:
    from judge.llm.pair import JudgeOutcome
    from judge.llm.redaction import Redactor
    from judge.response.memory import LoopMemory

# Imported where used, not here, so a hook's process starts sooner: the known-loop memory
# (sqlite3) only with a memory_path, the recovery texts (templates, their patterns) only on a loop
# verdict. Most processes, and every quiet turn, need neither.

logger = logging.getLogger("judge.response")
VERDICT_LOGGER = "judge"
"""The logger of loop verdicts and judge failures: INFO for a warning, WARNING for a stop,
an ask-the-user and a failed judge check; one line each, named by the tracker, redacted."""
verdict_logger = logging.getLogger(VERDICT_LOGGER)
# Actions logged at WARNING: the agent is halted or handed to a person.
_LOUD_ACTIONS = frozenset({Action.STOP, Action.ASK_USER})
# Redacted patterns remembered for override(): a session flags a handful, this is plenty.
PUBLIC_PATTERNS_KEPT = 256
# Verdict texts whose redaction is remembered: a loop's pattern and summary come back at
# each relapse, and a heuristic verdict's analysis repeats its summary, and every rule's
# triggers are looked for in each text whatever its length. A session has a handful of
# loops, each with five texts: 64 covers them.
REDACTED_KEPT = 64
# The policy's pattern sets most turns: none, or only the judge's.
_NONE: frozenset[str] = frozenset()
_LLM_ONLY = frozenset({LLM_PATTERN})
# Characters of a verdict's summary in its log line.
LOG_SUMMARY_CHARS = 200
_tracker_numbers = itertools.count(1)


def tracker_name(name: str | None) -> str:
    """``name`` when given (a session id), else ``tracker-<n>``, unique in the process."""
    return name if name else f"tracker-{next(_tracker_numbers)}"


LoopCallback: TypeAlias = Callable[
    [Verdict], "Action | str | Verdict | Awaitable[Action | str | Verdict | None] | None"
]
"""``on_loop``: sees each loop verdict; returns None (keep it), an `Action` (or its value),
or a new `Verdict` (e.g. ``verdict.model_copy(update=...)``). Sync or async."""

# Distinct calls the LLM judge's recovery message cites (most repeated first).
RECENT_CALLS_SHOWN = 5
# Characters of a call's arguments shown in that list.
CALL_ARGS_CHARS = 80


def recent_calls(messages: Iterable[Message], limit: int) -> list[str]:
    """ "name(args) xN" for the calls in the last ``limit`` messages, most repeated first."""
    window = list(messages)[-limit:]
    counts = Counter(c.signature for m in window if m.role == "assistant" for c in m.tool_calls)
    names = {c.signature: (c.name, c.canonical) for m in window for c in m.tool_calls}
    shown = []
    for signature, n in counts.most_common(RECENT_CALLS_SHOWN):
        name, args = names[signature]
        shown.append(f"{name}({short(args, CALL_ARGS_CHARS)})" + (f" x{n}" if n > 1 else ""))
    return shown


class Responder:
    """Responds to one tracker's decisions: ladder step, texts, publish (redaction),
    callback, stats, telemetry, logs and the memory's record."""

    def __init__(
        self,
        config: TrackerConfig,
        *,
        on_loop: LoopCallback | None = None,
        telemetry: Telemetry | None = None,
        memory: LoopMemory | None = None,
        name: str | None = None,
    ) -> None:
        self.config = config
        self.name = tracker_name(name)
        # model_construct: every value comes from the validated config, whose bounds are
        # the policy's own, so validating again would only build the policy's schema.
        self.ladder = Ladder(
            LadderPolicy.model_construct(
                mode=config.response_mode,
                ladder=config.ladder,
                overall_every=config.ladder_overall_every,
                recovery_turns=config.recovery_turns,
                silence_turns=config.override_silence_turns,
            ),
            redactor=self.redactor,
        )
        self.stats = TrackerStats.fresh()
        self.telemetry = telemetry if telemetry is not None else Telemetry.deferred()
        if memory is None and config.memory_path is not None:
            from judge.response.memory import LoopMemory

            memory = LoopMemory(config.memory_path)
        self.memory = memory
        self.rules = Rules.from_config(config)
        self._on_loop = on_loop
        # Built on the first verdict with text: a plain turn never imports the rules.
        self._redactor: Redactor | None = None
        self._redactor_ready = False
        # Its keyed twin, for what leaves the tracker: a secret becomes a placeholder of
        # this tracker's own, equal for equal secrets (judge.llm.redaction.Redactor.keyed).
        self._outward: Redactor | None = None
        # Redacted pattern -> the ladder's own, so override(verdict) still finds its loop.
        self._patterns: OrderedDict[str, str] = OrderedDict()
        # Text -> its redaction, for the texts of recent verdicts (REDACTED_KEPT).
        self._redacted: OrderedDict[str, str] = OrderedDict()

    def reset(self) -> None:
        """A new conversation: the ladder and overrides start afresh; stats go on."""
        self.ladder.reset()

    # -- a turn -----------------------------------------------------------------------------

    def begin_turn(self) -> None:
        self.ladder.tick()
        self.stats.turns += 1

    async def settle(self, verdict: Verdict) -> Verdict:
        """End of a turn: redaction, recoveries, the callback, stats, telemetry and logs."""
        verdict = self.publish(verdict)
        for pattern in self.ladder.end_turn():
            self.stats.recoveries_succeeded += 1
            verdict = self._remember_recovery(verdict, pattern, succeeded=True)
        if verdict.judge_calls:
            self.stats.record_check(verdict)
            self.telemetry.check(verdict)
        if verdict.looping:
            verdict = await self._call_back(verdict)
            if verdict.looping:
                self.stats.record_loop(verdict)
                self.telemetry.loop(verdict)
        self._log(verdict)
        return verdict

    # -- what leaves the tracker --------------------------------------------------------------

    def redactor(self) -> Redactor | None:
        """The tracker's redactor (None with ``redact_secrets`` off), built on first use."""
        if not self._redactor_ready:
            from judge.llm.redaction import redactor_for

            self._redactor = redactor_for(
                enabled=self.config.redact_secrets, patterns=self.config.redact_patterns
            )
            self._redactor_ready = True
        return self._redactor

    def outward_redactor(self) -> Redactor | None:
        """The redactor of what leaves the tracker (prompt, verdicts, logs): the tracker's,
        writing placeholders under a random key of this tracker's own. A saved state keeps
        the plain markers, which a tracker restored elsewhere, without the key, can match."""
        if self._outward is None:
            redactor = self.redactor()
            self._outward = redactor.keyed() if redactor is not None else None
        return self._outward

    def scrub(self, text: str) -> str:
        """``text`` as it may leave the tracker (a log line, an error)."""
        redactor = self.outward_redactor()
        return redactor.redact(text) if redactor is not None and text else text

    def publish(self, verdict: Verdict) -> Verdict:
        """``verdict`` with every text it carries redacted: the one exit for secrets.

        A verdict without text (most turns) is returned as it is, without loading the
        rules. The redacted pattern is remembered so `override` maps it back.
        """
        texts = (verdict.summary, verdict.explanation, verdict.recovery_message)
        if not (any(texts) or verdict.analysis or verdict.errors or verdict.judge_calls):
            return verdict
        redactor = self.outward_redactor()
        if redactor is None:
            return verdict
        clean = self._remembered(redactor.redact)

        def opt(text: str | None) -> str | None:
            return clean(text) if text else text

        update: dict[str, Any] = {
            "summary": opt(verdict.summary),
            "explanation": opt(verdict.explanation),
            "recovery_message": opt(verdict.recovery_message),
            "analysis": opt(verdict.analysis),
            "errors": [clean(e) for e in verdict.errors],
            "judge_calls": [self._clean_call(c, clean) for c in verdict.judge_calls],
        }
        if verdict.pattern:
            public = clean(verdict.pattern)
            if public != verdict.pattern:
                self._patterns[public] = verdict.pattern
                self._patterns.move_to_end(public)
                while len(self._patterns) > PUBLIC_PATTERNS_KEPT:
                    self._patterns.popitem(last=False)
            update["pattern"] = public
        return verdict.model_copy(update=update)

    def _remembered(self, redact: Callable[[str], str]) -> Callable[[str], str]:
        """``redact`` answering a text seen in a recent verdict from memory (the redactor is
        the tracker's, fixed for its life, so the answer would be the same)."""
        memory = self._redacted

        def clean(text: str) -> str:
            done = memory.get(text)
            if done is None:
                done = memory[text] = redact(text)
                if len(memory) > REDACTED_KEPT:
                    memory.popitem(last=False)
            else:
                memory.move_to_end(text)
            return done

        return clean

    @staticmethod
    def _clean_call(call: JudgeCall, clean: Callable[[str], str]) -> JudgeCall:
        if not call.analysis and not call.error:
            return call
        return call.model_copy(
            update={
                "analysis": clean(call.analysis) if call.analysis else call.analysis,
                "error": clean(call.error) if call.error else call.error,
            }
        )

    def _log(self, verdict: Verdict) -> None:
        """One line per loop verdict and per failed judge check; never raises.

        The texts are the published (redacted) ones; a skipped check (budget spent, circuit
        open) is on the verdict's errors but not logged, or a long outage would log a line
        every turn.
        """
        failed = [c for c in verdict.judge_calls if c.error is not None]
        if not verdict.looping and not failed:
            return
        try:
            if verdict.looping:
                level = logging.WARNING if verdict.action in _LOUD_ACTIONS else logging.INFO
                verdict_logger.log(
                    level,
                    "loop-judge %s turn %d: loop (%s, %s, %s): %s",
                    self.name,
                    verdict.turn,
                    verdict.action.value,
                    verdict.source or "unknown",
                    verdict.kind.value if verdict.kind is not None else "unclassified",
                    short(verdict.summary or "-", LOG_SUMMARY_CHARS),
                )
            if failed:
                verdict_logger.warning(
                    "loop-judge %s turn %d: judge %s: %s",
                    self.name,
                    verdict.turn,
                    "check failed" if all(not c.ok for c in verdict.judge_calls) else "call failed",
                    "; ".join(f"{c.model}: {short(c.error or '', 160)}" for c in failed),
                )
        except Exception:
            # A broken log handler or filter is the application's; it must never reach the
            # agent, whose turn this is (logging's own handleError covers emit only).
            pass

    # -- verdicts ---------------------------------------------------------------------------

    def _heuristic_verdict(self, finding: Finding, *, turn: int) -> Verdict:
        step = self.ladder.escalate(finding.pattern, label=finding.summary, kind=finding.kind)
        errors: list[str] = []
        if self.memory is not None:
            import sqlite3

            try:
                self.memory.record_loop(finding)
            except (sqlite3.Error, OSError) as exc:
                errors.append(self._memory_failed(exc))
        verdict = self._finding_verdict(finding, step, turn=turn, errors=errors)
        if step.failed_recovery:
            self.stats.recoveries_failed += 1
            verdict = self._remember_recovery(verdict, finding.pattern, succeeded=False)
        return verdict

    def _finding_verdict(
        self,
        finding: Finding,
        step: LadderStep,
        *,
        turn: int,
        errors: list[str] | None = None,
        evidence: bool = True,
    ) -> Verdict:
        from judge.response.recovery import for_finding

        found = for_finding(finding, step, budget=self.config.recovery_max_chars)
        return Verdict(
            looping=True,
            source=f"{Origin.HEURISTIC.value}:{finding.detector}",
            kind=finding.kind,
            confidence=finding.score,
            analysis=finding.summary,
            evidence=list(finding.evidence) if evidence else [],
            action=step.action,
            summary=found.summary,
            explanation=found.explanation,
            recovery_message=found.message,
            pattern=finding.pattern,
            errors=errors or [],
            turn=turn,
            suspicion=finding.score,
        )

    # -- the decision's inputs, and its answer ----------------------------------------------

    def policy(
        self,
        findings: Sequence[Finding],
        *,
        answered: Answered = NOTHING_ANSWERED,
        prompt: int = -1,
    ) -> Policy:
        """The policy state `judge.decision.decide` reads about ``findings``: the person's
        silences and the judge's agreement (the ladder), the patterns the known-loop memory
        has seen; ``answered`` and ``prompt`` come from the conversation."""
        ladder, state = self.ladder, self.ladder.state
        known: frozenset[str] = _NONE
        if findings:
            patterns = {f.pattern for f in findings}
            if self.memory is not None:
                known = frozenset(filter(self.memory.knows, patterns))
            patterns.add(LLM_PATTERN)
            silenced = frozenset(filter(ladder.silenced, patterns))
        else:
            # Most turns: nothing found, so only the judge's own pattern can matter.
            silenced = _LLM_ONLY if state.patterns and ladder.silenced(LLM_PATTERN) else _NONE
        agreed = tuple(state.judge_agreed)
        return Policy(
            rules=self.rules,
            turn=state.turn,
            silenced=silenced,
            answered=answered,
            known=known,
            judge_agreed=agreed,
            prompt=prompt,
        )

    def respond(
        self,
        decision: Decision,
        *,
        turn: int,
        judge: JudgeOutcome | None = None,
        recent: Iterable[Message] = (),
        errors: Sequence[str] = (),
    ) -> Verdict:
        """The turn's verdict for ``decision`` (``judge``: the check asked this turn); a loop
        climbs its pattern's ladder. `settle` then finishes it."""
        if judge is not None:
            if decision.judge_agreed is not None:
                self.ladder.state.judge_agreed = list(decision.judge_agreed)
            if decision.judge_said is False and self.ladder.cleared(LLM_PATTERN):
                self.stats.recoveries_succeeded += 1
        if decision.outcome is Outcome.FINDING or decision.outcome is Outcome.REFUSE:
            assert decision.finding is not None
            return self._heuristic_verdict(decision.finding, turn=turn)
        if judge is None:
            return Verdict(turn=turn, suspicion=decision.suspicion, errors=list(errors))
        deciding = judge.deciding
        common: dict[str, Any] = {
            "source": Origin.LLM.value,
            "judge_calls": judge.calls,
            "errors": judge.errors,
            "turn": turn,
            "suspicion": decision.suspicion,
            "confidence": deciding.confidence if deciding else None,
            "analysis": deciding.analysis if deciding else None,
        }
        if decision.outcome is not Outcome.JUDGE or deciding is None:
            return Verdict(**common)
        return self._judge_loop(decision, judge, deciding, recent, common)

    def _judge_loop(
        self,
        decision: Decision,
        judge: JudgeOutcome,
        deciding: JudgeCall,
        recent: Iterable[Message],
        common: dict[str, Any],
    ) -> Verdict:
        """A judge's loop climbs the ``"llm"`` pattern's ladder. The judge alone never stops
        a run before its models' agreement has lasted (``Decision.judge_may_stop``): until
        then the rung's stop becomes ask-the-user."""
        from judge.response.recovery import for_judge, judge_label

        # The label is quoted back to the agent in later recovery messages (the approaches
        # tried), so it is built from the evidence, never from the judge's words.
        label = judge_label(judge.evidence)
        step = self.ladder.escalate(LLM_PATTERN, label=label, kind=decision.kind)
        if step.action is Action.STOP and not decision.judge_may_stop:
            step = step.model_copy(
                update={"action": Action.ASK_USER, "level": RecoveryLevel.ASK_USER}
            )
        texts = for_judge(
            deciding,
            step,
            evidence=judge.evidence,
            recent_calls=recent_calls(recent, self.config.history_messages),
            budget=self.config.recovery_max_chars,
        )
        if step.failed_recovery:
            self.stats.recoveries_failed += 1
        return Verdict(
            looping=True,
            kind=decision.kind,
            evidence=judge.evidence,
            action=step.action,
            summary=texts.summary,
            explanation=texts.explanation,
            recovery_message=texts.message,
            pattern=LLM_PATTERN,
            **common,
        )

    def refuse(self, decision: Decision, *, turn: int) -> Verdict:
        """The verdict of a call ``check_call`` refuses (`Outcome.REFUSE`): a detection like
        a turn's (the ladder climbs, stats and logs count it, the texts are the same), so
        each refusal of the identical call is one rung higher. The ``on_loop`` callback is
        not run: it is awaited, and a preflight answers synchronously, before the call
        runs."""
        verdict = self.publish(self.respond(decision, turn=turn))
        self.stats.record_loop(verdict)
        self.telemetry.loop(verdict)
        self._log(verdict)
        return verdict

    def preview(self, decision: Decision, *, turn: int, evidence: bool = True) -> Verdict:
        """The verdict the next detection of the decision's finding would get; records
        nothing (``check_call`` that may not refuse, and a streamed response)."""
        assert decision.finding is not None
        finding = decision.finding
        step = self.ladder.preview(finding.pattern)
        return self.publish(self._finding_verdict(finding, step, turn=turn, evidence=evidence))

    # -- control ----------------------------------------------------------------------------

    def override(self, target: str | Verdict, reason: str) -> OverrideRecord:
        """A person says "keep going"; see `Ladder.override` for the growing friction."""
        if isinstance(target, Verdict):
            if not target.pattern:
                raise ValueError("override() needs a loop verdict (this one names no pattern)")
            pattern, label = target.pattern, target.summary
        elif isinstance(target, str) and target:
            pattern, label = target, None
        else:
            raise TypeError("override() takes a loop Verdict or its non-empty pattern string")
        # A published verdict carries the redacted pattern; the ladder knows the real one.
        pattern = self._patterns.get(pattern, pattern)
        # The ladder saves the record with the state's plain markers; the caller gets it with
        # this tracker's own placeholders, so record.pattern equals the verdict's pattern.
        # redacted_by also catches the pieces of a secret in a label clipped mid-secret.
        outward = self.outward_redactor()
        public: Callable[[str], str] | None = None
        if outward is not None:
            from judge.state import redacted_by

            public = redacted_by(outward)
        record = self.ladder.override(pattern, reason, label=label, public=public)
        self.stats.overrides += 1
        log = logger.warning if record.disabled else logger.info
        log("%s; reason: %s", record.message, self.scrub(reason))
        return record

    @property
    def detections(self) -> int:
        """Loop verdicts given so far (the ladder's count)."""
        return self.ladder.state.detections

    @property
    def overrides(self) -> list[OverrideRecord]:
        """Every override made in this session, oldest first (a copy of the list)."""
        return list(self.ladder.state.overrides)

    def load_state(self, state: LadderState) -> None:
        self.ladder.state = state.model_copy(deep=True)

    def snapshot(self) -> tuple[LadderState, TrackerStats]:
        """The ladder and the stats (copies), for a saved tracker state."""
        return self.ladder.state.model_copy(deep=True), self.stats.model_copy(deep=True)

    def restore(self, ladder: LadderState, stats: TrackerStats) -> None:
        self.load_state(ladder)
        self.stats = stats.model_copy(deep=True)

    async def _call_back(self, verdict: Verdict) -> Verdict:
        if self._on_loop is None:
            return verdict
        try:
            result = self._on_loop(verdict)
            if inspect.isawaitable(result):
                result = await result
        except Exception as exc:
            # The callback is the user's code: its failure is reported on the verdict and
            # never reaches the agent. Cancellation is a BaseException and passes through.
            problem = self.scrub(f"on_loop failed: {type(exc).__name__}: {exc}")
            logger.warning("%s", problem, exc_info=True)
            self.stats.callback_errors += 1
            return verdict.model_copy(update={"errors": [*verdict.errors, problem]})
        return self._apply(verdict, result)

    def _apply(self, verdict: Verdict, result: object) -> Verdict:
        if result is None:
            return verdict
        if isinstance(result, Verdict):
            return result
        if isinstance(result, str):
            try:
                return verdict.model_copy(update={"action": Action(result)})
            except ValueError:
                pass
        problem = self.scrub(
            f"on_loop returned {result!r}, not an Action, a Verdict or None; ignored"
        )
        logger.warning("%s", problem)
        self.stats.callback_errors += 1
        return verdict.model_copy(update={"errors": [*verdict.errors, problem]})

    # -- memory -----------------------------------------------------------------------------

    def _remember_recovery(self, verdict: Verdict, pattern: str, *, succeeded: bool) -> Verdict:
        if self.memory is None or pattern == LLM_PATTERN:
            return verdict
        import sqlite3

        try:
            self.memory.record_recovery(pattern, succeeded=succeeded)
        except (sqlite3.Error, OSError) as exc:
            return verdict.model_copy(
                update={"errors": [*verdict.errors, self._memory_failed(exc)]}
            )
        return verdict

    @staticmethod
    def _memory_failed(exc: BaseException) -> str:
        # A broken memory file must not stop loop detection: the verdict says so instead.
        logger.warning("known-loop memory failed: %s", exc)
        return f"known-loop memory failed: {type(exc).__name__}: {exc}"
