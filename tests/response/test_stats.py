"""tracker.stats numbers, and OpenTelemetry: a no-op without the package, spans with it."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest

from judge import LoopTracker, TrackerConfig, Verdict
from judge.response.telemetry import Telemetry
from judge.turns import assistant_turn_ends
from tests.fakes import Agent, answer, fake_judge, looping_history

FAST, CONFIRM = "openai/fast", "openai/confirm"


def play(tracker: LoopTracker, history: list[dict[str, Any]]) -> list[Verdict]:
    async def go() -> list[Verdict]:
        return [await tracker.turn_started(history[:e]) for e in assistant_turn_ends(history)]

    return anyio.run(go)


def relapsing_agent() -> Agent:
    """write_file x4 (2 loop verdicts), 5 clean turns, then the loop again (3 more)."""
    agent = Agent()
    for _ in range(4):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    for i in range(5):
        agent.call("read_file", {"path": f"n{i}.md"}, f"note {i}")
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    return agent


def test_heuristic_stats() -> None:
    tracker = LoopTracker(TrackerConfig(recovery_turns=5))
    verdicts = play(tracker, relapsing_agent().history)
    flagged = [v for v in verdicts if v]
    stats = tracker.stats
    assert stats.turns == len(verdicts) == 12
    # each write after a warning is the loop again (new evidence), so each one climbs
    assert [v.turn for v in flagged] == [3, 4, 10, 11, 12]
    assert stats.detections == len(flagged) == 5
    assert stats.detections_by_kind == {"exact_repeat": 5}
    assert stats.detections_by_source == {"heuristic:exact_repeat": 5}
    assert stats.actions == {"warn": 2, "ask_user": 1, "stop": 2}
    # turns 4, 11 and 12 came within 5 turns of a warning: failed recoveries; turns 5-9
    # were clean after the warning of turn 4: a recovery
    assert (stats.recoveries_succeeded, stats.recoveries_failed) == (1, 3)
    assert stats.checks == stats.judge_calls == 0 and stats.cost_usd == 0.0
    # a copy: changing it changes nothing
    stats.turns = 0
    assert tracker.stats.turns == 12


def test_judge_stats() -> None:
    client = fake_judge({FAST: [answer(0.95, "same reads")], CONFIRM: [answer(0.97, "yes")]})
    tracker = LoopTracker(TrackerConfig(fast_model=FAST, confirm_model=CONFIRM), client=client)
    verdicts = play(tracker, looping_history(30))
    assert verdicts[-1] and verdicts[-1].source == "llm"
    stats = tracker.stats
    assert stats.checks == 1 and stats.judge_calls == 2 and stats.judge_errors == 0
    assert (stats.input_tokens, stats.output_tokens) == (200, 40)  # fake_judge: 100 + 20 each
    assert stats.cost_usd == pytest.approx(0.0002)
    assert stats.judge_latency_s_max <= stats.judge_latency_s_sum
    assert stats.judge_latency_s_sum == pytest.approx(
        sum(c.latency_s for c in verdicts[-1].judge_calls)
    )
    assert stats.detections_by_source == {"llm": 1}
    # distinct reads, no heuristic signal under the judge: no progress is "cognitive"
    assert stats.detections_by_kind == {"cognitive": 1}
    assert verdicts[-1].pattern == "llm" and verdicts[-1].explanation


# -- telemetry ---------------------------------------------------------------------------------


@dataclass
class FakeSpan:
    name: str
    attributes: dict[str, Any]
    context: Any = None
    start_time: int | None = None
    end_time: int | None = None

    def end(self, end_time: int | None = None) -> None:
        self.end_time = end_time


@dataclass
class FakeTracer:
    spans: list[FakeSpan] = field(default_factory=list)

    def start_span(
        self,
        name: str,
        context: Any = None,
        attributes: Any = None,
        start_time: int | None = None,
        **_: Any,
    ) -> FakeSpan:
        span = FakeSpan(name, dict(attributes or {}), context, start_time)
        self.spans.append(span)
        return span


@dataclass
class FakeInstrument:
    name: str
    points: list[tuple[float, dict[str, Any]]] = field(default_factory=list)

    def add(self, value: float, attributes: Any = None) -> None:
        self.points.append((value, dict(attributes or {})))

    record = add


@dataclass
class FakeMeter:
    instruments: dict[str, FakeInstrument] = field(default_factory=dict)

    def _make(self, name: str, **_: Any) -> FakeInstrument:
        return self.instruments.setdefault(name, FakeInstrument(name))

    create_counter = _make
    create_histogram = _make


def test_telemetry_with_a_test_double() -> None:
    tracer, meter = FakeTracer(), FakeMeter()
    client = fake_judge({FAST: [answer(0.95, "same reads")], CONFIRM: [answer(0.97, "yes")]})
    tracker = LoopTracker(
        TrackerConfig(fast_model=FAST, confirm_model=CONFIRM),
        client=client,
        telemetry=Telemetry(tracer, meter),
    )
    play(tracker, looping_history(30))
    names = [s.name for s in tracer.spans]
    assert names == ["loop_judge.check", f"chat {FAST}", f"chat {CONFIRM}", "loop_judge.loop"]
    check, fast, confirm, loop = tracer.spans
    assert check.attributes["loop_judge.looping"] is True
    assert check.attributes["loop_judge.confidence"] == 0.97
    assert fast.attributes["gen_ai.request.model"] == FAST
    assert fast.attributes["gen_ai.operation.name"] == "chat"
    assert fast.attributes["gen_ai.provider.name"] == "openai"
    assert fast.attributes["gen_ai.usage.input_tokens"] == 100
    assert fast.attributes["gen_ai.usage.output_tokens"] == 20
    assert fast.attributes["loop_judge.judge.confidence"] == 0.95
    assert confirm.attributes["loop_judge.judge.confidence"] == 0.97
    assert all(s.end_time is not None and s.start_time is not None for s in tracer.spans)
    assert loop.attributes["loop_judge.action"] == "warn"
    assert loop.attributes["loop_judge.source"] == "llm"
    assert not any("pattern" in k for s in tracer.spans for k in s.attributes)
    tokens = meter.instruments["gen_ai.client.token.usage"].points
    assert sorted((v, a["gen_ai.token.type"]) for v, a in tokens) == [
        (20, "output"),
        (20, "output"),
        (100, "input"),
        (100, "input"),
    ]
    assert [v for v, _ in meter.instruments["loop_judge.judge.confidence"].points] == [0.95, 0.97]
    assert len(meter.instruments["gen_ai.client.operation.duration"].points) == 2
    assert meter.instruments["loop_judge.checks"].points == [(1, {"loop_judge.looping": True})]
    assert meter.instruments["loop_judge.loops"].points[0][1]["loop_judge.action"] == "warn"


def test_telemetry_heuristic_loop_emits_a_loop_span_only() -> None:
    tracer = FakeTracer()
    tracker = LoopTracker(TrackerConfig(), telemetry=Telemetry(tracer))
    agent = Agent()
    for _ in range(3):
        agent.call("write_file", {"path": "a.txt"}, "File written.")
    play(tracker, agent.history)
    assert [s.name for s in tracer.spans] == ["loop_judge.loop"]
    assert tracer.spans[0].attributes["loop_judge.kind"] == "exact_repeat"


def test_telemetry_is_a_no_op_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("opentelemetry", "opentelemetry.trace", "opentelemetry.metrics"):
        monkeypatch.setitem(sys.modules, name, None)  # "import opentelemetry" now fails
    telemetry = Telemetry.default()
    assert not telemetry.enabled
    client = fake_judge({FAST: [answer(0.95)]})
    tracker = LoopTracker(TrackerConfig(fast_model=FAST), client=client, telemetry=telemetry)
    assert play(tracker, looping_history(30))[-1]


def test_telemetry_with_the_real_api_and_no_sdk() -> None:
    pytest.importorskip("opentelemetry.trace")
    telemetry = Telemetry.default()  # the API's global no-op providers
    assert telemetry.enabled
    client = fake_judge({FAST: [answer(0.95)]})
    tracker = LoopTracker(TrackerConfig(fast_model=FAST), client=client, telemetry=telemetry)
    assert play(tracker, looping_history(30))[-1]


def test_import_judge_does_not_import_opentelemetry() -> None:
    code = "import sys, judge; print('opentelemetry' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
