"""`LoopTracker`: the object an agent calls once per turn.

Thin orchestration, one path per turn: read the new messages (`Conversation`) -> feed the
detectors (`DetectorSuite`) -> `decide` (and, when a check is due and nothing flagged,
ask the judge and decide again) -> respond (`Responder`). The parts live in their own
modules; this one only orders them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from judge.config import TrackerConfig
from judge.conversation import Conversation
from judge.decision import Decision, decide
from judge.detectors.base import Detector
from judge.detectors.stream import StreamMonitor
from judge.detectors.suite import DetectorSuite
from judge.errors import HistoryError, StateError
from judge.history import Message, ToolCall, canonical_arguments
from judge.llm.breaker import CircuitBreaker, Clock, skip_message
from judge.llm.budget import JudgeBudget
from judge.llm.transcript import fit_prompt
from judge.response.ladder import LadderState, OverrideRecord
from judge.response.responder import LoopCallback, Responder
from judge.schedule import Schedule
from judge.verdict import Verdict

if TYPE_CHECKING:
    import anyio

    from judge.llm._litellm import LLMClient, Sleep
    from judge.llm.pair import JudgeOutcome, TwoStageJudge
    from judge.response.stats import TrackerStats
    from judge.response.telemetry import Telemetry
    from judge.state import TrackerState

# judge.state (the saved state's model and codec) is imported by `state` and `from_state`
# only: a tracker that is never saved (a hook's first event) does not start up slower for it.

logger = logging.getLogger("judge.tracker")

# After a loop verdict the judge only reads what came after the evidence it answered; it is
# not asked until the agent has taken this many turns since (one fewer than the 5-turn
# minimum interval, so a relapse is judged at the next scheduled check).
FRESH_ASSISTANT_TURNS = 3


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
        clock: Clock | None = None,
        on_loop: LoopCallback | None = None,
        agent_model: str | None = None,
        telemetry: Telemetry | None = None,
        name: str | None = None,
    ) -> None:
        # name (a session id) names this tracker in the library's log lines.
        # agent_model picks the matching config.model_overrides blocks (ConfigError if bad).
        self.config = (config if config is not None else TrackerConfig()).for_model(agent_model)
        cfg = self.config
        self._judge: TwoStageJudge | None = None
        if cfg.fast_model:
            # The judge's machinery (and anyio, which it awaits with) only with a judge
            # model: a heuristics-only process (a hook) never imports it and starts sooner.
            from judge.llm.pair import TwoStageJudge, preload_litellm

            prepare = None
            if client is None:
                # litellm (seconds to import) is wanted only at the first check, turn 30 at
                # the earliest: it is imported in a background thread from now on, and the
                # first check waits for it at most timeout_s (judge.llm.pair).
                from judge.llm._litellm import LiteLLMClient, load_litellm

                client = LiteLLMClient.from_config(cfg, sleep=sleep)
                preload_litellm()
                prepare = load_litellm
            self._judge = TwoStageJudge(
                client,
                fast_model=cfg.fast_model,
                confirm_model=cfg.confirm_model,
                threshold=cfg.confidence_threshold,
                prepare=prepare,
                prepare_deadline_s=cfg.timeout_s,
            )
        self._suite = DetectorSuite(cfg, detectors)
        self._stream = StreamMonitor()
        self._schedule = Schedule(
            check_after_turns=cfg.check_after_turns,
            initial_interval=cfg.initial_interval,
            min_interval=cfg.min_interval,
            max_interval=cfg.max_interval,
        )
        self._conversation = Conversation(
            history_messages=cfg.history_messages, message_chars=cfg.max_message_chars
        )
        # Ladder, texts, overrides, memory, on_loop, stats, telemetry (judge/response/responder.py).
        # It also owns the redactor (built on first use), the one every text leaving the
        # tracker goes through: the judge's prompt, the verdicts and the logs.
        self._responder = Responder(cfg, on_loop=on_loop, telemetry=telemetry, name=name)
        # The turn lock, made when a turn first awaits the judge (`_lock`).
        self._turn_lock: anyio.Lock | None = None
        # Judge health and spending outlive reset(): they belong to the endpoint and the
        # tracker's owner, not to one conversation.
        self._breaker = CircuitBreaker(
            failures=cfg.breaker_failures,
            cooldown_s=cfg.breaker_cooldown_s,
            clock=clock,
        )
        self._budget = JudgeBudget(max_calls=cfg.max_judge_calls, max_tokens=cfg.max_judge_tokens)

    # -- public state -----------------------------------------------------------------

    @property
    def name(self) -> str:
        """The name given (a session id), else ``tracker-<n>``: how log lines call it."""
        return self._responder.name

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
    def judge_calls_used(self) -> int:
        """Judge model calls made so far (fast and confirm), counted against max_judge_calls."""
        return self._budget.calls_used

    @property
    def judge_tokens_used(self) -> int:
        """Judge tokens spent so far (reported usage, else estimated), against max_judge_tokens."""
        return self._budget.tokens_used

    @property
    def detections(self) -> int:
        """Loop verdicts given so far; drives the escalation ladder."""
        return self._responder.detections

    @property
    def stats(self) -> TrackerStats:
        """Totals of this tracker's life (a copy): turns, checks, detections, actions,
        recoveries, overrides, judge calls, tokens, cost and latency."""
        return self._responder.stats.model_copy(deep=True)

    @property
    def overrides(self) -> list[OverrideRecord]:
        """Every `override` made in this session, oldest first."""
        return self._responder.overrides

    @property
    def ladder_state(self) -> LadderState:
        """The escalation ladder's state (a copy), JSON-serializable."""
        return self._conversation.save_answered(self._responder.snapshot()[0])

    def load_ladder_state(self, state: LadderState) -> None:
        """Restore a state from `ladder_state` (e.g. after a restart)."""
        self._responder.load_state(state)
        self._conversation.load_answered(state)

    def override(self, pattern_or_verdict: str | Verdict, reason: str) -> OverrideRecord:
        """A person says "keep going" about a loop (a verdict, or its ``pattern``).

        The 1st override silences that pattern for ``override_silence_turns`` turns, the
        2nd for twice as long, the 3rd disables its detection for the session (the record's
        message says so). A silenced pattern still shows in ``suspicion`` but never flags.
        """
        return self._responder.override(pattern_or_verdict, reason)

    @property
    def state(self) -> TrackerState:
        """Everything this tracker remembers, serializable (e.g. to Redis).

        ``LoopTracker.from_state(config, tracker.state)`` continues exactly where this one
        stopped. Not included: the judge client, callbacks and telemetry (pass them again)
        and the known-loop memory (a file of its own).
        """
        from judge.state import MAX_STATE_BYTES, STATE_VERSION, TrackerState

        ladder, stats = self._responder.snapshot()
        calls_used, tokens_used = self._budget.snapshot()
        return TrackerState(
            version=STATE_VERSION,
            schedule=self._schedule.snapshot(),
            **self._conversation.snapshot(),
            detectors=self._suite.snapshot(),
            stream=self._stream.snapshot(),
            ladder=self._conversation.save_answered(ladder),
            stats=stats,
            breaker=self._breaker.snapshot(),
            judge_calls_used=calls_used,
            judge_tokens_used=tokens_used,
        ).with_max_bytes(self.config.max_state_bytes or MAX_STATE_BYTES, self._responder.redactor())

    @classmethod
    def from_state(
        cls,
        config: TrackerConfig | None,
        state: TrackerState | dict[str, Any] | str,
        **kwargs: Any,
    ) -> LoopTracker:
        """A tracker that continues from ``state`` (a `TrackerState`, its dict or JSON).

        ``config`` must be the one the state was saved with (detector windows depend on
        it); keyword arguments are those of `LoopTracker` (client, on_loop, ...). Raises
        `StateError` for a state that cannot be read (pydantic's ``ValidationError`` for
        one that is not a `TrackerState` at all).
        """
        from judge.state import STATE_VERSION, TrackerState

        if isinstance(state, str):
            state = TrackerState.model_validate_json(state)
        elif isinstance(state, dict):
            state = TrackerState.model_validate(state)
        if state.version != STATE_VERSION:
            raise StateError(f"state version {state.version} is not {STATE_VERSION}")
        tracker = cls(config, **kwargs)
        try:
            tracker._load(state)
        except StateError:
            raise
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # Tampered or from another version (a breaker state we do not know, a tagged
            # entry of the wrong shape): a server must be able to start the session over.
            raise StateError(f"unreadable state: {type(exc).__name__}: {exc}") from exc
        return tracker

    def _load(self, state: TrackerState) -> None:
        # Each part restores its own snapshot; the conversation (cursor, recent messages,
        # task, user messages seen) is the tracker's own.
        self._schedule.restore(state.schedule)
        self._conversation.restore(
            state.seen,
            state.last_message,
            state.recent,
            state.task,
            state.user_seen,
            state.before_last,
        )
        # The state holds redacted text: read what is new the same way (judge/state.py).
        redactor = self._responder.redactor()
        if redactor is not None and state.redacted:
            from judge.state import redacting_reader

            self._conversation.read_redacted(redacting_reader(redactor))
        self._suite.restore(state.detectors)
        self._stream.restore(state.stream)
        self._responder.restore(state.ladder, state.stats)
        self._conversation.load_answered(state.ladder)
        self._breaker.restore(state.breaker)
        self._budget.restore(state.judge_calls_used, state.judge_tokens_used)

    def reset(self) -> None:
        """Forget the conversation: turn count, schedule, detector state, escalation."""
        self._schedule.reset()
        self._conversation.reset()
        self._responder.reset()
        self._suite.reset()
        self._stream.reset()

    # -- per turn -----------------------------------------------------------------------

    @property
    def _lock(self) -> anyio.Lock:
        """The lock a turn holds while it may await the judge, made on first use, in the
        event loop that runs the turn. A tracker without a judge has none: nothing in its
        turn suspends, so no turn can overlap another, and it never imports anyio."""
        if self._turn_lock is None:
            import anyio

            self._turn_lock = anyio.Lock(fast_acquire=True)
        return self._turn_lock

    async def turn_started(self, history: Any) -> Verdict:
        """Count one turn and say whether the agent is looping.

        Raises `HistoryError` for a malformed history (a bug in the caller); never raises
        for a judge failure or an ``on_loop`` callback's, which are reported on the verdict.
        """
        if self._judge is None:
            verdict = await self._turn(history)
        else:
            # A turn awaiting the judge holds the lock: the next one waits, then runs whole.
            async with self._lock:
                verdict = await self._turn(history)
        # Outside the lock: the on_loop callback may take its time, or call override().
        return await self._responder.settle(verdict)

    async def _turn(self, history: Any) -> Verdict:
        """Read -> feed the detectors -> decide -> respond."""
        self._read(history)
        self._schedule.tick()
        self._responder.begin_turn()
        self._stream.reset()
        findings = self._suite.findings()
        # The decision reads the state as the turn found it, before any await.
        policy = self._responder.policy(findings, answered=self._conversation.answered)
        decision = decide(findings, None, policy)
        outcome: JudgeOutcome | None = None
        errors: list[str] = []
        if not decision.looping and self._check_due(decision):
            # None while too little happened since a loop verdict: the check stays due.
            window = self._conversation.window(min_turns=FRESH_ASSISTANT_TURNS)
            skipped = self._check_skipped() if window is not None else None
            if skipped is not None:
                errors.append(skipped)
            elif window is not None:
                outcome = await self._run_check(window)
                decision = decide(findings, outcome, policy)
        if decision.looping:
            self._conversation.answer()
        return self._responder.respond(
            decision,
            turn=self.turn,
            judge=outcome,
            recent=self._conversation.recent,
            errors=errors,
        )

    def _read(self, history: Any) -> None:
        """Read what is new in ``history`` and feed it to the detectors."""
        reading = self._conversation.read(history)
        if reading.rewound:
            logger.info("history was rewritten; re-reading it from the start")
            self._suite.reset()
        for msg in reading.new:
            self._suite.feed(msg)
        self._suite.read()
        # Detector windows survive a new prompt on purpose: a user saying "try again" does
        # not make the agent's next identical failure any less of a loop.
        if reading.new_prompt and self.config.count_scope == "prompt":
            self._schedule.reset()

    def _check_due(self, decision: Decision) -> bool:
        """Whether the judge is to be asked this turn (nothing flagged it yet): by the
        schedule, or early when a finding is one repeat short of a loop."""
        if self._judge is None:
            return False
        return self._schedule.due(early=self.config.early_checks and decision.suspect)

    def _check_skipped(self) -> str | None:
        """Why a due check must not run (budget spent, circuit open), or None.

        The schedule is left alone, so the check stays due and runs on the first turn the
        reason is gone (the half-open trial after a cool-down).
        """
        spent = self._budget.spent()
        if spent is not None:
            return spent
        left = self._breaker.seconds_left()
        if left is not None:
            return skip_message(left, self._breaker.consecutive_failures)
        return None

    async def _run_check(self, messages: list[Message]) -> JudgeOutcome:
        assert self._judge is not None
        cfg = self.config
        window, prompt = fit_prompt(
            messages,
            self._conversation.task,
            message_chars=cfg.max_message_chars,
            task_chars=cfg.max_task_chars,
            max_chars=cfg.max_prompt_chars,
            scrub=self._responder.scrub,
        )
        calls_left = self._budget.calls_left()
        skip_confirm = (
            f"judge budget spent: {self._budget.calls_used + 1} of {cfg.max_judge_calls} calls "
            "used by the fast judge"
            if calls_left is not None and calls_left < 2
            else None
        )
        try:
            outcome = await self._judge.check(prompt, skip_confirm=skip_confirm)
        except BaseException:
            # Cancelled (or a bug): the turn still counts and the check is retried soon. The
            # request in flight may be billed, so it counts against max_judge_calls.
            self._schedule.failed()
            self._budget.calls_used += 1
            raise
        self._budget.record(outcome.calls, sum(len(m["content"]) for m in prompt))
        if outcome.not_ready:
            # litellm is still importing, so no model was asked: the check stays due and
            # runs at the next turn (waiting again, at most timeout_s), and the endpoint is
            # not at fault. Pushing it back min_interval turns lost a thousand trackers'
            # first checks on a loaded machine.
            pass
        elif outcome.deciding is None:
            self._schedule.failed()
            self._breaker.record_failure()
        else:
            self._schedule.checked(outcome.deciding.confidence or 0.0)
            self._breaker.record_success()
        outcome.evidence = [m.index for m in window if m.role == "assistant"]
        return outcome

    # -- before a call, and while streaming -------------------------------------------

    def check_call(self, name: str, arguments: Any = None, *, refuse: bool = True) -> Verdict:
        """Would this call, made now, be an exact repeat past its limit?

        Lets an agent refuse a call before running it; counts no turn. A looping verdict
        is a refusal, and is recorded as one: the refused call counts as an attempt of its
        run, the ladder climbs (each refusal is a detection, with the same texts as a
        turn's), and the identical call is refused again, one rung higher, until something
        changes: another call, a different result, or a person's message (after which it
        may run once more). The refused call's echo in the history (the call, answered by
        the refusal) is not read as a new attempt.

        ``refuse=False`` is for a caller that cannot refuse the call (a hook that only
        watches): the verdict is what the next detection would get, and nothing is
        recorded, so the call's real result is read at the next turn as usual.
        """
        if not isinstance(name, str) or not name:
            raise HistoryError("tool name must be a non-empty string", field="name")
        canonical, parsed = canonical_arguments("{}" if arguments is None else arguments)
        call = ToolCall(id=None, name=name, arguments=canonical, canonical=canonical, parsed=parsed)
        call = self._conversation.scrubbed(call)
        findings = self._suite.preflight(call)
        policy = self._responder.policy(
            findings, answered=self._conversation.answered, prompt=self._conversation.prompt
        )
        decision = decide(findings, None, policy, preflight=True)
        if not decision.looping:
            if refuse:
                self._suite.allowed(call)
            return Verdict(turn=self.turn, suspicion=decision.suspicion)
        if not refuse:
            return self._responder.preview(decision, turn=self.turn)
        verdict = self._responder.refuse(decision, turn=self.turn)
        self._suite.refuse(call)
        self._conversation.answer()
        return verdict

    def content_chunk(self, text: str) -> Verdict | None:
        """Feed streamed assistant text; a verdict when the response repeats itself.

        The monitor restarts at each ``turn_started``. Returns None while all is well so a
        streaming loop can do ``if (v := tracker.content_chunk(delta)): ...``.
        """
        finding = self._stream.feed(text)
        if finding is None:
            return None
        decision = decide([finding], None, self._responder.policy([finding]), preflight=True)
        if not decision.looping:
            return None
        return self._responder.preview(decision, turn=self.turn, evidence=False)
