"""`LoopTracker`: the object an agent calls once per turn.

Thin orchestration: history in -> normalized messages -> detectors and (when due) the
judge -> verdict out. The parts live in their own modules; this one only decides who runs
when and folds their answers into a `Verdict`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

import anyio

from judge._llm import LiteLLMClient, LLMClient, Sleep
from judge.config import TrackerConfig
from judge.detectors.base import Detector, Finding
from judge.detectors.exact_repeat import ExactRepeatDetector
from judge.detectors.stream import StreamMonitor
from judge.detectors.suite import DetectorSuite
from judge.errors import HistoryError
from judge.escalation import action_for
from judge.history import HistoryCursor, Message, canonical_arguments
from judge.llm_judge import JudgeOutcome, TwoStageJudge
from judge.recovery import from_finding, from_judge
from judge.redaction import Redactor
from judge.schedule import Schedule
from judge.transcript import build_prompt, judge_window
from judge.verdict import Action, Verdict

logger = logging.getLogger("judge.tracker")

# Extra normalized messages kept beyond the judge window so that trimming a dangling call
# at the end still leaves a full window.
RECENT_SLACK = 32
# A suspicion at or above this brings the judge's check forward, even before turn 30.
SUSPICION_SCORE = 0.5


class LoopTracker:
    """Tracks one agent conversation and tells, each turn, whether it is looping.

    Not thread-safe, but safe for overlapping calls from one event loop: turns are
    serialized by a lock so two concurrent ``turn_started`` calls never interleave.
    """

    def __init__(
        self,
        config: TrackerConfig | None = None,
        *,
        client: LLMClient | None = None,
        detectors: Sequence[Detector] | None = None,
        sleep: Sleep | None = None,
    ) -> None:
        self.config = config if config is not None else TrackerConfig()
        cfg = self.config
        self._judge: TwoStageJudge | None = None
        if cfg.fast_model:
            if client is None:
                client = LiteLLMClient(
                    api_base=cfg.api_base,
                    api_key=cfg.api_key.get_secret_value() if cfg.api_key else None,
                    timeout_s=cfg.timeout_s,
                    max_retries=cfg.max_retries,
                    max_retry_after_s=cfg.max_retry_after_s,
                    sleep=sleep,
                )
            self._judge = TwoStageJudge(
                client,
                fast_model=cfg.fast_model,
                confirm_model=cfg.confirm_model,
                threshold=cfg.confidence_threshold,
            )
        self._suite = DetectorSuite(cfg, detectors)
        self._redactor = (
            Redactor(extra_patterns=cfg.redact_patterns) if cfg.redact_secrets else None
        )
        self._stream = StreamMonitor()
        self._schedule = Schedule(
            check_after_turns=cfg.check_after_turns,
            initial_interval=cfg.initial_interval,
            min_interval=cfg.min_interval,
            max_interval=cfg.max_interval,
        )
        self._cursor = HistoryCursor()
        self._recent: deque[Message] = deque(maxlen=cfg.history_messages + RECENT_SLACK)
        self._task: Message | None = None
        self._user_seen: set[int] = set()
        self._detections = 0
        self._lock = anyio.Lock()

    # -- public state -----------------------------------------------------------------

    @property
    def turn(self) -> int:
        """Turns counted in the current prompt (or session, with count_scope="session")."""
        return self._schedule.turn

    @property
    def check_interval(self) -> int:
        return self._schedule.check_interval

    @property
    def last_check_turn(self) -> int:
        return self._schedule.last_check_turn

    @property
    def detections(self) -> int:
        """Loop verdicts given so far; drives the escalation ladder."""
        return self._detections

    def reset(self) -> None:
        """Forget the conversation: turn count, schedule, detector state, escalation."""
        self._schedule.reset()
        self._cursor.reset()
        self._recent.clear()
        self._task = None
        self._user_seen.clear()
        self._detections = 0
        self._suite.reset()
        self._stream.reset()

    # -- per turn -----------------------------------------------------------------------

    async def turn_started(self, history: Any) -> Verdict:
        """Count one turn and say whether the agent is looping.

        Raises `HistoryError` for a malformed history (a bug in the caller); never raises
        for a judge failure, which is reported on the verdict instead.
        """
        async with self._lock:
            self._ingest(history)
            self._schedule.tick()
            self._stream.reset()
            found = self._suite.assess()
            if found.loop is not None:
                return self._heuristic_verdict(found.loop)
            suspicion = found.suspicion
            early = self.config.early_checks and suspicion >= SUSPICION_SCORE
            if self._judge is None or not self._schedule.due(early=early):
                return Verdict(turn=self.turn, suspicion=suspicion)
            outcome = await self._run_check()
            return self._judge_verdict(outcome, suspicion)

    def _ingest(self, history: Any) -> None:
        new, rewound = self._cursor.advance(history)
        if rewound:
            logger.info("history was rewritten; re-reading it from the start")
            self._recent.clear()
            self._suite.reset()
        for msg in new:
            if msg.role == "user":
                self._on_user_message(msg, rewound)
            self._recent.append(msg)
            self._suite.feed(msg)

    def _on_user_message(self, msg: Message, rewound: bool) -> None:
        key = hash(msg.content)
        is_new = not rewound or key not in self._user_seen
        self._user_seen.add(key)
        if not is_new:
            return
        self._task = msg
        # Detector windows survive a new prompt on purpose: a user saying "try again" does
        # not make the agent's next identical failure any less of a loop.
        if self.config.count_scope == "prompt":
            self._schedule.reset()

    async def _run_check(self) -> JudgeOutcome:
        assert self._judge is not None
        cfg = self.config
        window = judge_window(self._recent, cfg.history_messages)
        prompt = build_prompt(
            window,
            self._task,
            message_chars=cfg.max_message_chars,
            task_chars=cfg.max_task_chars,
            scrub=self._redactor.redact if self._redactor is not None else lambda t: t,
        )
        try:
            outcome = await self._judge.check(prompt)
        except BaseException:
            # Cancelled (or a bug): the turn still counts and the check is retried soon.
            self._schedule.failed()
            raise
        if outcome.deciding is None:
            self._schedule.failed()
        else:
            self._schedule.checked(outcome.deciding.confidence or 0.0)
        outcome.evidence = [m.index for m in window if m.role == "assistant"]
        return outcome

    # -- verdicts -----------------------------------------------------------------------

    def _next_action(self) -> Action:
        self._detections += 1
        return action_for(self._detections, self.config.response_mode, self.config.ladder)

    def _heuristic_verdict(self, finding: Finding) -> Verdict:
        summary, recovery = from_finding(finding)
        return Verdict(
            looping=True,
            source=f"heuristic:{finding.detector}",
            kind=finding.kind,
            confidence=finding.score,
            analysis=finding.summary,
            evidence=list(finding.evidence),
            action=self._next_action(),
            summary=summary,
            recovery_message=recovery,
            turn=self.turn,
            suspicion=finding.score,
        )

    def _judge_verdict(self, outcome: JudgeOutcome, suspicion: float) -> Verdict:
        deciding = outcome.deciding
        common: dict[str, Any] = {
            "source": "llm",
            "judge_calls": outcome.calls,
            "errors": outcome.errors,
            "turn": self.turn,
            "suspicion": suspicion,
            "confidence": deciding.confidence if deciding else None,
            "analysis": deciding.analysis if deciding else None,
        }
        if not outcome.looping or deciding is None:
            return Verdict(**common)
        summary, recovery = from_judge(deciding)
        return Verdict(
            looping=True,
            evidence=outcome.evidence,
            action=self._next_action(),
            summary=summary,
            recovery_message=recovery,
            **common,
        )

    # -- before a call, and while streaming -------------------------------------------

    def check_call(self, name: str, arguments: Any = None) -> Verdict:
        """Would this call, made now, be an exact repeat past its limit?

        Lets an agent refuse a call before running it. Counts no turn and changes no
        state; the verdict's action is what the next detection would get.
        """
        if not isinstance(name, str) or not name:
            raise HistoryError("tool name must be a non-empty string", field="name")
        canonical, _ = canonical_arguments("{}" if arguments is None else arguments)
        detector = self._suite.detector("exact_repeat")
        if not isinstance(detector, ExactRepeatDetector):
            return Verdict(turn=self.turn)
        signature, count, failing = detector.run
        if signature != f"{name}({canonical})":
            return Verdict(turn=self.turn)
        limit = detector.limit(name, failing)
        if count + 1 <= limit:
            return Verdict(turn=self.turn, suspicion=0.5 if count + 1 == limit else 0.0)
        finding = detector.preflight_finding(count + 1)
        summary, recovery = from_finding(finding)
        return Verdict(
            looping=True,
            source="heuristic:exact_repeat",
            kind=finding.kind,
            confidence=finding.score,
            analysis=finding.summary,
            evidence=list(finding.evidence),
            action=action_for(self._detections + 1, self.config.response_mode,
                              self.config.ladder),
            summary=summary,
            recovery_message=recovery,
            turn=self.turn,
            suspicion=finding.score,
        )

    def content_chunk(self, text: str) -> Verdict | None:
        """Feed streamed assistant text; a verdict when the response repeats itself.

        The monitor restarts at each ``turn_started``. Returns None while all is well so a
        streaming loop can do ``if (v := tracker.content_chunk(delta)): ...``.
        """
        finding = self._stream.feed(text)
        if finding is None:
            return None
        summary, recovery = from_finding(finding)
        return Verdict(
            looping=True,
            source=f"heuristic:{finding.detector}",
            kind=finding.kind,
            confidence=finding.score,
            analysis=finding.summary,
            action=action_for(self._detections + 1, self.config.response_mode,
                              self.config.ladder),
            summary=summary,
            recovery_message=recovery,
            turn=self.turn,
            suspicion=finding.score,
        )
