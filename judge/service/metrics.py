"""Prometheus metrics of the sidecar and the proxy guardrail, in the text exposition format.

Written by hand rather than with prometheus_client: a dozen counters and two histograms
do not justify a dependency, and an instance per app (no global default registry) keeps
replicas in tests, and tests from each other, apart.

Everything is derived from verdicts, so the server and the guardrail count the same way.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

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

Labels = tuple[tuple[str, str], ...]

_HELP: dict[str, tuple[str, str]] = {
    "loop_judge_turns_total": ("counter", "Turns counted (turn_started calls that returned)."),
    "loop_judge_preflight_checks_total": ("counter", "Preflight check_call requests."),
    "loop_judge_judge_checks_total": ("counter", "Turns on which the judge model was asked."),
    "loop_judge_judge_calls_total": ("counter", "Judge model calls, by model, stage, outcome."),
    "loop_judge_loops_total": ("counter", "Loop verdicts, by loop kind, source and endpoint."),
    "loop_judge_judge_errors_total": ("counter", "Errors reported on verdicts (judge failures)."),
    "loop_judge_judge_tokens_total": ("counter", "Judge tokens, by model and direction."),
    "loop_judge_judge_cost_usd_total": ("counter", "Judge cost in US$ as litellm priced it."),
    "loop_judge_history_errors_total": ("counter", "Requests refused for a malformed history."),
    "loop_judge_store_errors_total": ("counter", "Requests failed by the session store."),
    "loop_judge_replayed_turns_total": (
        "counter",
        "Turn requests answered again without a new turn (a resend of the session's last).",
    ),
    "loop_judge_sessions_restarted_total": (
        "counter",
        "Sessions found without stored state whose history shows earlier turns (lost).",
    ),
    "loop_judge_rejected_requests_total": (
        "counter",
        "Requests refused before or during a turn, by reason (host, token, cpu_budget, "
        "append_conflict, idempotency_key).",
    ),
    "loop_judge_judge_latency_seconds": ("histogram", "Latency of one judge model call."),
    "loop_judge_request_duration_seconds": ("histogram", "Time to answer a turn or call."),
    "loop_judge_sessions_live": ("gauge", "Sessions used within the idle TTL."),
}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _fmt_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Histogram:
    __slots__ = ("buckets", "count", "counts", "total")

    def __init__(self, buckets: Sequence[float]) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.count = 0
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str, labels: Labels) -> Iterable[str]:
        for bound, count in zip(self.buckets, self.counts, strict=True):
            yield f"{name}_bucket{_fmt_labels((*labels, ('le', _fmt_value(bound))))} {count}"
        yield f"{name}_bucket{_fmt_labels((*labels, ('le', '+Inf')))} {self.count}"
        yield f"{name}_sum{_fmt_labels(labels)} {_fmt_value(self.total)}"
        yield f"{name}_count{_fmt_labels(labels)} {self.count}"


class Metrics:
    """Counters and histograms of one server or guardrail instance.

    Not thread-safe; both users run on one event loop.
    """

    def __init__(self) -> None:
        self._counters: dict[str, dict[Labels, float]] = defaultdict(lambda: defaultdict(float))
        self._histograms: dict[str, dict[Labels, _Histogram]] = defaultdict(dict)

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        self._counters[name][tuple(sorted(labels.items()))] += amount

    def observe(self, name: str, value: float, buckets: Sequence[float], **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        hist = self._histograms[name].get(key)
        if hist is None:
            hist = self._histograms[name][key] = _Histogram(buckets)
        hist.observe(value)

    def value(self, name: str, **labels: str) -> float:
        """A counter's current value (tests and dashboards-in-a-pinch)."""
        return self._counters.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    # -- recording verdicts -------------------------------------------------------------

    def record_turn(self, verdict: Verdict, duration_s: float) -> None:
        """Count one turn and everything its verdict says about the judge."""
        self.inc("loop_judge_turns_total")
        self.observe(
            "loop_judge_request_duration_seconds",
            duration_s,
            REQUEST_LATENCY_BUCKETS,
            endpoint="turn",
        )
        self._record_verdict(verdict, endpoint="turn")
        if verdict.judge_calls:
            self.inc("loop_judge_judge_checks_total")
        for call in verdict.judge_calls:
            model, stage = call.model, call.stage.value
            outcome = "ok" if call.ok else "error"
            self.inc("loop_judge_judge_calls_total", model=model, stage=stage, outcome=outcome)
            self.observe(
                "loop_judge_judge_latency_seconds",
                call.latency_s,
                JUDGE_LATENCY_BUCKETS,
                model=model,
                stage=stage,
            )
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
        self.observe(
            "loop_judge_request_duration_seconds",
            duration_s,
            REQUEST_LATENCY_BUCKETS,
            endpoint="call",
        )
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
        """The Prometheus text format (version 0.0.4); every family has HELP and TYPE."""
        out: list[str] = []
        for name, (kind, help_text) in _HELP.items():
            if kind == "gauge":
                if sessions_live is None:
                    continue
                out += [
                    f"# HELP {name} {help_text}",
                    f"# TYPE {name} gauge",
                    f"{name} {sessions_live}",
                ]
                continue
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            if kind == "counter":
                series = self._counters.get(name, {})
                if not series and name in _UNLABELLED:
                    out.append(f"{name} 0")
                for labels, value in sorted(series.items()):
                    out.append(f"{name}{_fmt_labels(labels)} {_fmt_value(value)}")
            else:
                for labels, hist in sorted(self._histograms.get(name, {}).items()):
                    out.extend(hist.lines(name, labels))
        return "\n".join(out) + "\n"


# Counters without labels are shown as 0 before their first event, so a dashboard's rate()
# has a starting point.
_UNLABELLED = frozenset(
    {
        "loop_judge_turns_total",
        "loop_judge_preflight_checks_total",
        "loop_judge_judge_checks_total",
        "loop_judge_judge_errors_total",
        "loop_judge_history_errors_total",
        "loop_judge_replayed_turns_total",
        "loop_judge_sessions_restarted_total",
    }
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
