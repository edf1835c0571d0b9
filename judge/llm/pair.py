"""The two-stage LLM judge: a fast model screens, a stronger model confirms.

Only a fast answer at or above the threshold costs a confirm call, so the expensive model
is consulted on a small fraction of checks. Failures are recorded, never raised.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from judge._prompts import read_json
from judge.errors import JudgeError
from judge.llm._litellm import LLMClient, ModelReply
from judge.llm.assessment import SCHEMA_FILE, Assessment, parse_assessment
from judge.verdict import JudgeCall, JudgeStage

logger = logging.getLogger("judge.llm.pair")


@dataclass(slots=True)
class JudgeOutcome:
    """What one check concluded.

    ``deciding`` is the call whose confidence decided it (confirm when it answered, else
    fast); None means the judge gave no answer and the check must be retried.
    """

    looping: bool = False
    deciding: JudgeCall | None = None
    calls: list[JudgeCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    evidence: list[int] = field(default_factory=list)


class TwoStageJudge:
    def __init__(
        self,
        client: LLMClient,
        *,
        fast_model: str,
        confirm_model: str | None,
        threshold: float,
    ) -> None:
        self.client = client
        self.fast_model = fast_model
        self.confirm_model = confirm_model
        self.threshold = threshold

    async def _ask(
        self, model: str, stage: JudgeStage, prompt: list[dict[str, str]]
    ) -> tuple[JudgeCall, Assessment | None]:
        started = time.perf_counter()
        reply: ModelReply | None = None
        try:
            reply = await self.client.complete(model, prompt, schema=read_json(SCHEMA_FILE))
            assessment = parse_assessment(reply.content, finish_reason=reply.finish_reason)
        except JudgeError as exc:
            latency = time.perf_counter() - started
            reply_obj = reply
            found: Any = getattr(exc, "attempts", None) or getattr(reply_obj, "attempts", 1)
            attempts = int(found)
            logger.warning(
                "%s judge %s failed after %d attempt(s): %s", stage.value, model, attempts, exc
            )
            call = JudgeCall(
                model=model,
                stage=stage,
                attempts=attempts,
                latency_s=latency,
                prompt_tokens=getattr(reply_obj, "prompt_tokens", None),
                completion_tokens=getattr(reply_obj, "completion_tokens", None),
                cost_usd=getattr(reply_obj, "cost_usd", None),
                error=f"{type(exc).__name__}: {exc}",
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
        without asking the confirm one, and says why on the outcome.
        """
        outcome = JudgeOutcome()
        fast_call, fast = await self._ask(self.fast_model, JudgeStage.FAST, prompt)
        outcome.calls.append(fast_call)
        if fast is None:
            outcome.errors.append(f"fast judge {self.fast_model}: {fast_call.error}")
            return outcome
        outcome.deciding = fast_call
        if fast.confidence < self.threshold:
            return outcome
        if self.confirm_model is None:
            outcome.looping = True
            return outcome
        if skip_confirm is not None:
            outcome.errors.append(
                f"{skip_confirm}; confirm judge {self.confirm_model} not asked, "
                "trusting the fast model"
            )
            outcome.looping = True
            return outcome
        confirm_call, confirm = await self._ask(self.confirm_model, JudgeStage.CONFIRM, prompt)
        outcome.calls.append(confirm_call)
        if confirm is None:
            # Confirm unavailable: trust the fast model, but say so.
            outcome.errors.append(
                f"confirm judge {self.confirm_model}: {confirm_call.error}; trusting the fast model"
            )
            outcome.looping = True
            return outcome
        outcome.deciding = confirm_call
        outcome.looping = confirm.confidence >= self.threshold
        return outcome
