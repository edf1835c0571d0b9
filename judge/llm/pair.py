"""The two-stage LLM judge: a fast model screens, a stronger model confirms.

Only a fast answer at or above the threshold costs a confirm call, so the expensive model
is consulted on a small fraction of checks. Failures are recorded, never raised. The pair
reports what its models said; whether that is a loop is `judge.decision.decide`'s call.

Cheap to import: the assessment parser (jsonschema) and the litellm wrapper (tenacity) are
imported when the first check runs, so a tracker without a judge model never pays for
them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from judge import errors
from judge.errors import JudgeError
from judge.verdict import JudgeCall, JudgeFailure, JudgeFailureKind, JudgeStage

if TYPE_CHECKING:
    from judge.llm.assessment import JudgeAssessment
    from judge.llm.client import LLMClient, ModelReply

logger = logging.getLogger("judge.llm.pair")

Prepare = Callable[[], Awaitable[Any]]
"""Makes the client ready before its first request (imports litellm); its time is counted
apart from the judge's latency."""


@dataclass(slots=True)
class JudgeOutcome:
    """What one check's models said.

    ``deciding`` is the call whose confidence decides (confirm when it answered, else
    fast); None means the judge gave no answer and the check must be retried.
    ``prepare_s`` is the time spent making the client ready (importing litellm) before the
    first request, kept out of every call's ``latency_s``; ``not_ready`` says that took
    longer than the deadline, so no model was asked (not the endpoint's fault).
    """

    deciding: JudgeCall | None = None
    calls: list[JudgeCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    evidence: list[int] = field(default_factory=list)
    prepare_s: float = 0.0
    not_ready: bool = False


# Most specific first: JudgeContextError is a JudgeHTTPError.
_FAILURE_KINDS: tuple[tuple[type[JudgeError], JudgeFailureKind], ...] = (
    (errors.JudgeTimeout, JudgeFailureKind.TIMEOUT),
    (errors.JudgeConnectionError, JudgeFailureKind.CONNECTION),
    (errors.JudgeRateLimited, JudgeFailureKind.RATE_LIMITED),
    (errors.JudgeContextError, JudgeFailureKind.CONTEXT),
    (errors.JudgeHTTPError, JudgeFailureKind.HTTP),
    (errors.JudgeOutputError, JudgeFailureKind.OUTPUT),
)
# A rate limit is an HTTP 429 whether or not the error class carries a status.
_RATE_LIMITED_STATUS = 429


def failure_of(exc: JudgeError) -> JudgeFailure:
    """The typed reason a judge call failed, for `JudgeCall.failure`."""
    kind = next((k for cls, k in _FAILURE_KINDS if isinstance(exc, cls)), JudgeFailureKind.OTHER)
    if isinstance(exc, errors.JudgeRateLimited):
        return JudgeFailure(kind=kind, status=_RATE_LIMITED_STATUS, retry_after=exc.retry_after)
    status = exc.status if isinstance(exc, errors.JudgeHTTPError) else None
    return JudgeFailure(kind=kind, status=status)


def preload_litellm() -> None:
    """Start importing litellm in a daemon thread, never on the event loop: a tracker with
    a judge model is built long before its first check (turn 30), and the import takes
    seconds. One thread per process, however many trackers are built while it runs. The
    first check waits for it only if it is still running, for at most its deadline, and a
    check it held up stays due for the next turn. Nothing starts while model requests are
    disabled (the test suite)."""
    from judge.llm._litellm import start_import

    start_import()


class TwoStageJudge:
    def __init__(
        self,
        client: LLMClient,
        *,
        fast_model: str,
        confirm_model: str | None,
        threshold: float,
        prepare: Prepare | None = None,
        prepare_deadline_s: float | None = None,
    ) -> None:
        self.client = client
        self.fast_model = fast_model
        self.confirm_model = confirm_model
        self.threshold = threshold
        self._prepare = prepare
        self._prepare_deadline_s = prepare_deadline_s
        self._schema: dict[str, Any] | None = None

    def _read_schema(self) -> dict[str, Any]:
        if self._schema is None:
            from judge._prompts import read_json
            from judge.llm.assessment import SCHEMA_FILE

            self._schema = read_json(SCHEMA_FILE)
        return self._schema

    async def _ready(self, outcome: JudgeOutcome) -> bool:
        """Wait (at most the deadline) for the client to be ready; the wait is recorded on
        the outcome, apart from any call's latency."""
        if self._prepare is None:
            return True
        started = time.perf_counter()
        with anyio.move_on_after(self._prepare_deadline_s) as scope:
            await self._prepare()
            self._prepare = None  # ready for good
        outcome.prepare_s = time.perf_counter() - started
        if scope.cancelled_caught:
            outcome.not_ready = True
            outcome.errors.append(
                f"judge client not ready after {outcome.prepare_s:.1f} s (litellm is still "
                "importing); no model asked, the check is retried"
            )
            return False
        if outcome.prepare_s >= 0.1:
            logger.info(
                "judge client ready after %.1f s (not counted as latency)", outcome.prepare_s
            )
        return True

    async def _ask(
        self, model: str, stage: JudgeStage, prompt: list[dict[str, str]]
    ) -> tuple[JudgeCall, JudgeAssessment | None]:
        from judge.llm.assessment import parse_assessment

        schema = self._read_schema()
        started = time.perf_counter()
        reply: ModelReply | None = None
        try:
            reply = await self.client.complete(model, prompt, schema=schema)
            assessment = parse_assessment(
                reply.content, finish_reason=reply.finish_reason, max_tokens=reply.max_tokens
            )
        except JudgeError as exc:
            latency = time.perf_counter() - started
            attempts = exc.attempts or (reply.attempts if reply is not None else 1)
            # The check's failure is logged once, redacted, on the "judge" logger by the
            # responder; this per-call detail is for debugging and is redacted as well.
            from judge.llm.redaction import redact

            logger.debug(
                "%s judge %s failed after %d attempt(s): %s",
                stage.value,
                model,
                attempts,
                redact(str(exc)),
            )
            call = JudgeCall(
                model=model,
                stage=stage,
                attempts=attempts,
                latency_s=latency,
                prompt_tokens=reply.prompt_tokens if reply is not None else None,
                completion_tokens=reply.completion_tokens if reply is not None else None,
                cost_usd=reply.cost_usd if reply is not None else None,
                error=f"{type(exc).__name__}: {exc}",
                failure=failure_of(exc),
            )
            return call, None
        call = JudgeCall(
            model=model,
            stage=stage,
            confidence=assessment.confidence,
            analysis=assessment.analysis,
            attempts=reply.attempts,
            latency_s=time.perf_counter() - started,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            cost_usd=reply.cost_usd,
        )
        return call, assessment

    async def check(
        self, prompt: list[dict[str, str]], *, skip_confirm: str | None = None
    ) -> JudgeOutcome:
        """Ask the fast model, then the confirm model when the fast one is sure.

        ``skip_confirm`` (a reason, e.g. a spent call budget) trusts a sure fast model
        without asking the confirm one, and says why on the outcome; so does a confirm
        model that fails (the fast call stays the deciding one).
        """
        outcome = JudgeOutcome()
        if not await self._ready(outcome):
            return outcome
        fast_call, fast = await self._ask(self.fast_model, JudgeStage.FAST, prompt)
        outcome.calls.append(fast_call)
        if fast is None:
            outcome.errors.append(f"fast judge {self.fast_model}: {fast_call.error}")
            return outcome
        outcome.deciding = fast_call
        if fast.confidence < self.threshold:
            return outcome
        if self.confirm_model is None:
            return outcome
        if skip_confirm is not None:
            outcome.errors.append(
                f"{skip_confirm}; confirm judge {self.confirm_model} not asked, "
                "trusting the fast model"
            )
            return outcome
        confirm_call, confirm = await self._ask(self.confirm_model, JudgeStage.CONFIRM, prompt)
        outcome.calls.append(confirm_call)
        if confirm is None:
            # Confirm unavailable: trust the fast model, but say so.
            outcome.errors.append(
                f"confirm judge {self.confirm_model}: {confirm_call.error}; trusting the fast model"
            )
            return outcome
        outcome.deciding = confirm_call
        return outcome
