"""Counters of one tracker's life: what it checked, found, did and spent.

Read through ``tracker.stats`` (a copy). They outlive ``tracker.reset()``: they describe the
tracker's owner's bill and the detectors' behaviour, not one conversation.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from judge.verdict import Verdict

# The bucket of a loop verdict that names no kind (the LLM judge's).
UNSPECIFIED_KIND = "unspecified"


class TrackerStats(BaseModel):
    """Running totals; every number is a plain count or sum, safe to export as metrics."""

    # Built on first validation (a restore, a copy read back), not at import: a tracker
    # starts from `model_construct`, and a schema built at import would slow a cold start.
    model_config = ConfigDict(defer_build=True)

    turns: int = 0
    checks: int = Field(default=0, description="judge checks run (each is 1-2 model calls)")
    detections: int = Field(default=0, description="loop verdicts, after on_loop")
    detections_by_kind: dict[str, int] = Field(default_factory=dict)
    detections_by_source: dict[str, int] = Field(default_factory=dict)
    actions: dict[str, int] = Field(default_factory=dict, description="final action per loop")
    recoveries_succeeded: int = 0
    recoveries_failed: int = 0
    overrides: int = 0
    callback_errors: int = 0
    judge_calls: int = 0
    judge_errors: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    judge_latency_s_sum: float = 0.0
    judge_latency_s_max: float = 0.0

    @classmethod
    def fresh(cls) -> TrackerStats:
        """All zero, without validation (the schema is built on first use). The dicts are
        given: pydantic reads each default factory's signature when it calls one, a cost
        paid for every tracker a sidecar session builds or restores."""
        return cls.model_construct(detections_by_kind={}, detections_by_source={}, actions={})

    def record_check(self, verdict: Verdict) -> None:
        """Count a turn whose verdict carries judge calls (one check)."""
        self.checks += 1
        for call in verdict.judge_calls:
            self.judge_calls += 1
            self.judge_errors += call.error is not None
            self.input_tokens += call.prompt_tokens or 0
            self.output_tokens += call.completion_tokens or 0
            self.cost_usd += call.cost_usd or 0.0
            self.judge_latency_s_sum += call.latency_s
            self.judge_latency_s_max = max(self.judge_latency_s_max, call.latency_s)

    def record_loop(self, verdict: Verdict) -> None:
        self.detections += 1
        kind = verdict.kind.value if verdict.kind is not None else UNSPECIFIED_KIND
        source = verdict.source or "unknown"
        self.detections_by_kind[kind] = self.detections_by_kind.get(kind, 0) + 1
        self.detections_by_source[source] = self.detections_by_source.get(source, 0) + 1
        action = verdict.action.value
        self.actions[action] = self.actions.get(action, 0) + 1
