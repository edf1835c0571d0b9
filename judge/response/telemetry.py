"""Optional OpenTelemetry spans and metrics for judge checks and loop verdicts.

``opentelemetry-api`` (the ``otel`` extra) is imported lazily, when a tracker is built, never
at ``import judge``; without it every method is a no-op. With the API but no SDK configured
the API's own no-op tracer and meter apply, as for any instrumented library: the
application decides where telemetry goes.

Names follow the OpenTelemetry GenAI semantic conventions where they apply: one span per
model call named ``chat {model}`` with ``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens``, and the
``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` histograms. Our own
attributes are under ``loop_judge.*`` and carry the actual confidences. Patterns and
arguments are never exported: they may quote secrets.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from judge.verdict import JudgeCall, Verdict

logger = logging.getLogger("judge.response.telemetry")

INSTRUMENTATION_NAME = "loop-judge"
CHECK_SPAN = "loop_judge.check"
LOOP_SPAN = "loop_judge.loop"
OPERATION = "chat"  # the judge calls are chat completions
_NS = 1_000_000_000


def _provider(model: str) -> str | None:
    """litellm's provider prefix ("openai/gpt-4o" -> "openai"), if the model names one."""
    return model.split("/", 1)[0] if "/" in model else None


class Telemetry:
    """Emits one span per judge check (a child span per model call) and one per loop
    verdict, plus counters and histograms.

    ``tracer`` and ``meter`` are OpenTelemetry API objects or test doubles with the same
    methods; None disables that half. `Telemetry.default()` takes the global providers.
    """

    def __init__(self, tracer: Any = None, meter: Any = None, *, trace_api: Any = None) -> None:
        self.tracer = tracer
        self._trace_api = trace_api
        self._instruments: dict[str, Any] = {}
        if meter is not None:
            self._instruments = {
                "checks": meter.create_counter(
                    "loop_judge.checks", unit="{check}", description="judge checks run"
                ),
                "loops": meter.create_counter(
                    "loop_judge.loops", unit="{verdict}", description="loop verdicts"
                ),
                "duration": meter.create_histogram(
                    "gen_ai.client.operation.duration",
                    unit="s",
                    description="GenAI operation duration",
                ),
                "tokens": meter.create_histogram(
                    "gen_ai.client.token.usage",
                    unit="{token}",
                    description="Measures number of input and output tokens used",
                ),
                "confidence": meter.create_histogram(
                    "loop_judge.judge.confidence",
                    unit="1",
                    description="each judge model's own loop confidence",
                ),
            }

    @classmethod
    def default(cls) -> Telemetry:
        """The global tracer and meter when opentelemetry-api is installed, else a no-op."""
        try:
            trace = importlib.import_module("opentelemetry.trace")
            metrics = importlib.import_module("opentelemetry.metrics")
        except ImportError:
            return cls()
        return cls(
            trace.get_tracer(INSTRUMENTATION_NAME),
            metrics.get_meter(INSTRUMENTATION_NAME),
            trace_api=trace,
        )

    @classmethod
    def deferred(cls) -> Telemetry:
        """`default`, looked up at the first event (a judge check or a loop verdict) rather
        than now: a tracker whose turns are all quiet never imports opentelemetry (its
        import is a large part of a cold start). The API's global tracer and meter are
        proxies that follow a provider set later, so looking them up later changes nothing
        else."""
        return _Deferred()

    @property
    def enabled(self) -> bool:
        return self.tracer is not None or bool(self._instruments)

    # -- events ----------------------------------------------------------------------------

    def check(self, verdict: Verdict) -> None:
        """A turn on which the judge was consulted: one span, one child per model call."""
        if not self.enabled:
            return
        end = time.time_ns()
        start = end - int(sum(c.latency_s for c in verdict.judge_calls) * _NS)
        attributes = {
            "loop_judge.turn": verdict.turn,
            "loop_judge.looping": verdict.looping,
            "loop_judge.suspicion": verdict.suspicion,
            "loop_judge.judge_calls": len(verdict.judge_calls),
        }
        if verdict.confidence is not None:
            attributes["loop_judge.confidence"] = verdict.confidence
        self._add("checks", 1, {"loop_judge.looping": verdict.looping})
        parent = None
        if self.tracer is not None:
            parent = self.tracer.start_span(CHECK_SPAN, start_time=start, attributes=attributes)
        at = start
        for call in verdict.judge_calls:
            at = self._call(call, parent, at)
        if parent is not None:
            parent.end(end_time=end)

    def _call(self, call: JudgeCall, parent: Any, start: int) -> int:
        end = start + int(call.latency_s * _NS)
        common: dict[str, Any] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.request.model": call.model,
        }
        provider = _provider(call.model)
        if provider:
            common["gen_ai.provider.name"] = provider
        if call.error is not None:
            common["error.type"] = call.error.split(":", 1)[0]
        attributes = {
            **common,
            "loop_judge.judge.stage": call.stage.value,
            "loop_judge.judge.attempts": call.attempts,
        }
        if call.prompt_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = call.prompt_tokens
            self._add("tokens", call.prompt_tokens, {**common, "gen_ai.token.type": "input"})
        if call.completion_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = call.completion_tokens
            self._add("tokens", call.completion_tokens, {**common, "gen_ai.token.type": "output"})
        if call.confidence is not None:
            attributes["loop_judge.judge.confidence"] = call.confidence
            self._add(
                "confidence",
                call.confidence,
                {"gen_ai.request.model": call.model, "loop_judge.judge.stage": call.stage.value},
            )
        if call.cost_usd is not None:
            attributes["loop_judge.judge.cost_usd"] = call.cost_usd
        self._add("duration", call.latency_s, common)
        if self.tracer is not None:
            context = None
            if parent is not None and self._trace_api is not None:
                context = self._trace_api.set_span_in_context(parent)
            span = self.tracer.start_span(
                f"{OPERATION} {call.model}",
                context=context,
                start_time=start,
                attributes=attributes,
            )
            span.end(end_time=end)
        return end

    def loop(self, verdict: Verdict) -> None:
        """A loop verdict (after on_loop): a zero-length span and a counter."""
        if not self.enabled:
            return
        attributes: dict[str, Any] = {
            "loop_judge.source": verdict.source or "unknown",
            "loop_judge.kind": verdict.kind.value if verdict.kind else "unspecified",
            "loop_judge.action": verdict.action.value,
        }
        self._add("loops", 1, attributes)
        if self.tracer is None:
            return
        detail = {
            **attributes,
            "loop_judge.turn": verdict.turn,
            "loop_judge.suspicion": verdict.suspicion,
            "loop_judge.evidence_count": len(verdict.evidence),
        }
        if verdict.confidence is not None:
            detail["loop_judge.confidence"] = verdict.confidence
        now = time.time_ns()
        self.tracer.start_span(LOOP_SPAN, start_time=now, attributes=detail).end(end_time=now)

    def _add(self, name: str, value: float, attributes: dict[str, Any]) -> None:
        instrument = self._instruments.get(name)
        if instrument is None:
            return
        if name in ("checks", "loops"):
            instrument.add(value, attributes=attributes)
        else:
            instrument.record(value, attributes=attributes)


class _Deferred(Telemetry):
    """`Telemetry.deferred`: becomes `Telemetry.default` when first asked whether it is on
    (every event asks first)."""

    def __init__(self) -> None:
        super().__init__()
        self._resolved = False

    @property
    def enabled(self) -> bool:
        if not self._resolved:
            self._resolved = True
            real = Telemetry.default()
            self.tracer, self._trace_api, self._instruments = (
                real.tracer,
                real._trace_api,
                real._instruments,
            )
        return super().enabled
