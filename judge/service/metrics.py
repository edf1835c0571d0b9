"""Prometheus metrics of the sidecar and the proxy guardrail, kept by prometheus_client.

Each `Metrics` has a `CollectorRegistry` of its own, never the process-wide default one:
replicas in one test process, tests from each other, and the guardrail from the litellm
proxy's own metrics (same process) stay apart.

Everything is derived from verdicts, so the server and the guardrail count the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from judge.verdict import Verdict

# Judge model latency buckets (s): hosted flash models answer in 0.5-10 s, retries and the
# 30 s default timeout push the tail to a minute.
JUDGE_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# Whole-request latency buckets (s): heuristics-only turns take ~0.1-1 ms in the tracker
# (evals/bench_turn.py) plus store and HTTP overhead; judge checks add the model's seconds.
REQUEST_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
    5.0,
    30.0,
    120.0,
)

# The text format (version 0.0.4) every Prometheus server reads, as before.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

# Counter name -> (help, label names), in exposition order. Unlabelled counters are shown as
# 0 before their first event, so a dashboard's rate() has a starting point.
_COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "loop_judge_turns_total": ("Turns counted (turn_started calls that returned).", ()),
    "loop_judge_preflight_checks_total": ("Preflight check_call requests.", ()),
    "loop_judge_judge_checks_total": ("Turns on which the judge model was asked.", ()),
    "loop_judge_judge_calls_total": (
        "Judge model calls, by model, stage, outcome.",
        ("model", "stage", "outcome"),
    ),
    "loop_judge_loops_total": (
        "Loop verdicts, by loop kind, source and endpoint.",
        ("kind", "source", "endpoint"),
    ),
    "loop_judge_judge_errors_total": ("Errors reported on verdicts (judge failures).", ()),
    "loop_judge_judge_tokens_total": (
        "Judge tokens, by model and direction.",
        ("model", "direction"),
    ),
    "loop_judge_judge_cost_usd_total": ("Judge cost in US$ as litellm priced it.", ("model",)),
    "loop_judge_history_errors_total": ("Requests refused for a malformed history.", ()),
    "loop_judge_store_errors_total": ("Requests failed by the session store.", ("error",)),
    "loop_judge_replayed_turns_total": (
        "Turn requests answered again without a new turn (a resend of the session's last).",
        (),
    ),
    "loop_judge_sessions_restarted_total": (
        "Sessions found without stored state whose history shows earlier turns (lost).",
        (),
    ),
    "loop_judge_rejected_requests_total": (
        "Requests refused before or during a turn, by reason (host, token, cpu_budget, "
        "append_conflict, idempotency_key).",
        ("reason",),
    ),
    "loop_judge_unjudged_requests_total": (
        "Requests the proxy guardrail passed on unjudged, by reason (no_session, bad_session_id).",
        ("reason",),
    ),
}
_JUDGE_LATENCY = "loop_judge_judge_latency_seconds"
_REQUEST_DURATION = "loop_judge_request_duration_seconds"
_SESSIONS_LIVE = "loop_judge_sessions_live"


class _Exposition:
    """The one collector in a `Metrics` registry: its counters and histograms, less their
    ``_created`` samples, then the live-session gauge when the store could say.

    ``_created`` is dropped because in the text format Prometheus stores it as one more
    gauge series beside every series (twice the series, none queried); prometheus_client's
    `disable_created_metrics` would drop it process-wide, the proxy's own metrics included.
    """

    def __init__(self, metrics: Sequence[Counter | Histogram]) -> None:
        self.metrics = metrics
        self.sessions_live: int | None = None

    def collect(self) -> Iterable[Metric]:
        for metric in self.metrics:
            for family in metric.collect():  # a fresh family per call: ours to trim
                created = family.name + "_created"
                family.samples = [s for s in family.samples if s.name != created]
                yield family
        if self.sessions_live is not None:
            yield GaugeMetricFamily(
                _SESSIONS_LIVE, "Sessions used within the idle TTL.", value=self.sessions_live
            )


class Metrics:
    """Counters and histograms of one server or guardrail instance (thread-safe, as
    prometheus_client's metrics are)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._counters = {
            name: Counter(name, help_text, labels, registry=None)
            for name, (help_text, labels) in _COUNTERS.items()
        }
        self._judge_latency = Histogram(
            _JUDGE_LATENCY,
            "Latency of one judge model call.",
            ("model", "stage"),
            buckets=JUDGE_LATENCY_BUCKETS,
            registry=None,
        )
        self._request_duration = Histogram(
            _REQUEST_DURATION,
            "Time to answer a turn or call.",
            ("endpoint",),
            buckets=REQUEST_LATENCY_BUCKETS,
            registry=None,
        )
        self._exposition = _Exposition(
            [*self._counters.values(), self._judge_latency, self._request_duration]
        )
        self.registry.register(self._exposition)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add ``amount`` to counter ``name`` (``ValueError`` for a name not declared
        above, or labels other than its own)."""
        counter = self._counters.get(name)
        if counter is None:
            raise ValueError(f"no counter named {name!r}; declared: {', '.join(_COUNTERS)}")
        (counter.labels(**labels) if labels else counter).inc(amount)

    def value(self, name: str, **labels: str) -> float:
        """A sample's current value, 0.0 before its first event (tests, dashboards-in-a-pinch)."""
        return self.registry.get_sample_value(name, labels) or 0.0

    # -- recording verdicts -------------------------------------------------------------

    def record_turn(self, verdict: Verdict, duration_s: float) -> None:
        """Count one turn and everything its verdict says about the judge."""
        self.inc("loop_judge_turns_total")
        self._request_duration.labels(endpoint="turn").observe(duration_s)
        self._record_verdict(verdict, endpoint="turn")
        if verdict.judge_calls:
            self.inc("loop_judge_judge_checks_total")
        for call in verdict.judge_calls:
            model, stage = call.model, call.stage.value
            outcome = "ok" if call.ok else "error"
            self.inc("loop_judge_judge_calls_total", model=model, stage=stage, outcome=outcome)
            self._judge_latency.labels(model=model, stage=stage).observe(call.latency_s)
            if call.prompt_tokens:
                self.inc(
                    "loop_judge_judge_tokens_total",
                    call.prompt_tokens,
                    model=model,
                    direction="prompt",
                )
            if call.completion_tokens:
                self.inc(
                    "loop_judge_judge_tokens_total",
                    call.completion_tokens,
                    model=model,
                    direction="completion",
                )
            if call.cost_usd:
                self.inc("loop_judge_judge_cost_usd_total", call.cost_usd, model=model)
        if verdict.errors:
            self.inc("loop_judge_judge_errors_total", len(verdict.errors))

    def record_call(self, verdict: Verdict, duration_s: float) -> None:
        """Count one preflight check."""
        self.inc("loop_judge_preflight_checks_total")
        self._request_duration.labels(endpoint="call").observe(duration_s)
        self._record_verdict(verdict, endpoint="call")

    def _record_verdict(self, verdict: Verdict, *, endpoint: str) -> None:
        if verdict.looping:
            kind = verdict.kind.value if verdict.kind is not None else "unknown"
            self.inc(
                "loop_judge_loops_total",
                kind=kind,
                source=verdict.source or "unknown",
                endpoint=endpoint,
            )

    # -- exposition ---------------------------------------------------------------------

    def render(self, *, sessions_live: int | None = None) -> str:
        """prometheus_client's text format (version 0.0.4, `CONTENT_TYPE`); the live-session
        gauge is left out when ``sessions_live`` is None (the store could not say)."""
        self._exposition.sessions_live = sessions_live
        try:
            return generate_latest(self.registry).decode()
        finally:
            self._exposition.sessions_live = None
