"""``loop-judge scan``'s engine: read runs from trace exports, replay them, say which looped.

Runs come from OTLP JSON exports of OpenTelemetry GenAI spans (`judge_eval.otlp_reader`),
Langfuse exports (`judge_eval.langfuse_reader`) or any trajectory file ``eval`` reads
(`judge_eval.importers`). Each run is replayed through a fresh `LoopTracker` turn by turn,
as the agent would have driven it, and every turn's verdict is kept so the report can
draw the whole run, not only its first flag.

Everything a report shows comes from the tracker's published verdicts (whose texts the
tracker has already redacted) or from names passed through the same redactor; no message
content of a run is ever copied into a report, so a secret in a trace cannot reach one.

"Wasted" is counted from the loop's onset: the turn of the earliest message the first
flag cites as evidence (the first iteration of the repeated pattern), else the flagged
turn itself. Wasted turns are the turns after the onset, to the end of the run; wasted
tokens are what the model calls of those turns reported (input plus output), or, where a
call reported no usage, an estimate: the characters of the history that call was sent plus
what it wrote, at `judge.llm.budget.CHARS_PER_TOKEN` characters a token.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from judge.config import TrackerConfig
from judge.llm.budget import CHARS_PER_TOKEN
from judge.llm.redaction import redactor_for
from judge.tracker import LoopTracker
from judge.turns import assistant_turns
from judge.verdict import Verdict
from judge_eval import langfuse_reader, otlp_reader
from judge_eval.dataset import TrajectoryFormatError, iter_trajectory_files
from judge_eval.importers import load_trajectories
from judge_eval.importers._common import read_json_or_jsonl
from judge_eval.replay import DEFAULT_CONCURRENCY
from judge_eval.scan_history import TraceRun

__all__ = [
    "SCHEMA",
    "JudgeEstimate",
    "RunReport",
    "ScanReport",
    "TurnMark",
    "estimate_judge",
    "load_runs",
    "read_paths",
    "scan_runs",
]

#: Names the JSON report's shape; bumped when a field changes meaning or goes away.
SCHEMA = "loop-judge.scan/1"


def load_runs(path: Path) -> list[TraceRun]:
    """Every run in one file, whatever its format; a file that cannot be read raises
    `TrajectoryFormatError` (a `judge_eval.scan_history.TraceFormatError` for traces)."""
    try:
        document, lines = read_json_or_jsonl(path)
    except FileNotFoundError:
        raise TrajectoryFormatError(path, "no such file") from None
    documents: list[tuple[int | None, Any]] = (
        [(None, document)] if lines is None else [(n, r) for n, r in lines]
    )
    values = [value for _, value in documents]
    if values and all(otlp_reader.looks_like(v) for v in values):
        return otlp_reader.read_runs(path, documents)
    if values and all(langfuse_reader.looks_like(v) for v in values):
        return langfuse_reader.read_runs(path, documents)
    runs = []
    for traj in load_trajectories(path):
        fmt = traj.source.get("format") or traj.meta.get("format") or "trajectory"
        runs.append(TraceRun(traj.id, path, str(fmt), traj.messages))
    return runs


@dataclass(frozen=True, slots=True)
class FileProblem:
    """A file the scan could not read, and why (the reader's whole message)."""

    file: str
    reason: str


def read_paths(paths: Iterable[str | Path]) -> tuple[list[TraceRun], list[FileProblem]]:
    """The runs under ``paths`` (folders walked for .json, .jsonl and .traj), and the files
    that could not be read: one bad file is reported and the others are still scanned."""
    runs: list[TraceRun] = []
    problems: list[FileProblem] = []
    for path in paths:
        files = list(iter_trajectory_files([path]))
        if not files:  # a mistyped folder must not read as "no run looped"
            problems.append(FileProblem(str(path), "no .json, .jsonl or .traj file in it"))
        for file in files:
            try:
                runs += load_runs(file)
            except TrajectoryFormatError as exc:
                problems.append(FileProblem(str(file), exc.reason))
            except OSError as exc:
                problems.append(FileProblem(str(file), f"cannot read: {exc.strerror or exc}"))
    return runs, problems


@dataclass(slots=True)
class TurnMark:
    """One turn of a run as the report draws it.

    ``tools`` are the names of the tools the turn called (redacted like the verdicts);
    ``evidence`` the message indices a flag cites, ``evidence_turns`` the turns they are in.
    """

    turn: int
    message_index: int
    tools: list[str] = field(default_factory=list)
    flagged: bool = False
    source: str | None = None
    kind: str | None = None
    action: str | None = None
    summary: str | None = None
    explanation: str | None = None
    analysis: str | None = None
    evidence: list[int] = field(default_factory=list)
    evidence_turns: list[int] = field(default_factory=list)


@dataclass(slots=True)
class RunReport:
    """What the tracker said about one run (see the module docstring for "wasted")."""

    id: str
    file: str
    format: str
    messages: int
    turns: int
    looped: bool = False
    flagged_turn: int | None = None
    onset_turn: int | None = None
    kind: str | None = None
    source: str | None = None
    action: str | None = None
    summary: str | None = None
    wasted_turns: int = 0
    wasted_tokens: int = 0
    tokens_source: str = "none"
    judge_calls: int = 0
    judge_cost_usd: float = 0.0
    crash: str | None = None
    timeline: list[TurnMark] = field(default_factory=list)


@dataclass(slots=True)
class ScanReport:
    """The whole scan: every run, and every file that could not be read."""

    runs: list[RunReport]
    problems: list[FileProblem]
    judge: bool

    @property
    def looped(self) -> int:
        return sum(run.looped for run in self.runs)

    @property
    def crashed(self) -> int:
        return sum(run.crash is not None for run in self.runs)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document (its fields are described in docs/scan.md)."""
        return {
            "schema": SCHEMA,
            "judge": self.judge,
            "totals": {
                "runs": len(self.runs),
                "looped": self.looped,
                "wasted_turns": sum(r.wasted_turns for r in self.runs),
                "wasted_tokens": sum(r.wasted_tokens for r in self.runs),
                "files_failed": len(self.problems),
                "crashed": self.crashed,
            },
            "runs": [asdict(run) for run in self.runs],
            "errors": [asdict(problem) for problem in self.problems],
        }


def _chars(message: dict[str, Any]) -> int:
    size = len(str(message.get("content") or ""))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        size += len(str(function.get("name") or "")) + len(str(function.get("arguments") or ""))
    return size


def _turn_of(index: int, starts: Sequence[int]) -> int:
    """The 1-based turn holding message ``index`` (messages before the first turn: 1)."""
    turn = 1
    for number, start in enumerate(starts, start=1):
        if start <= index:
            turn = number
    return turn


def _wasted(run: TraceRun, report: RunReport, starts: Sequence[int]) -> None:
    onset = report.onset_turn
    if onset is None:
        return
    after = list(starts[onset:])  # the assistant messages of the turns after the onset
    report.wasted_turns = len(after)
    reported = estimated = 0
    prefix = [0]
    for message in run.messages:
        prefix.append(prefix[-1] + _chars(message))
    for index in after:
        tokens = run.reported_tokens.get(index)
        if tokens is None:
            # The call's prompt (the history before it) plus what it wrote.
            tokens = math.ceil(prefix[index + 1] / CHARS_PER_TOKEN)
            estimated += 1
        else:
            reported += 1
        report.wasted_tokens += tokens
    if after:
        report.tokens_source = (
            "reported" if not estimated else "estimated" if not reported else "partly estimated"
        )


def _mark(verdict: Verdict, mark: TurnMark, starts: Sequence[int]) -> None:
    mark.flagged = True
    mark.source = verdict.source
    mark.kind = verdict.kind.value if verdict.kind is not None else None
    mark.action = verdict.action.value
    mark.summary = verdict.summary
    mark.explanation = verdict.explanation
    mark.analysis = verdict.analysis
    mark.evidence = list(verdict.evidence)
    mark.evidence_turns = sorted({_turn_of(i, starts) for i in verdict.evidence})


async def replay_run(run: TraceRun, config: TrackerConfig) -> RunReport:
    """Replay one run through a fresh tracker; a crash is recorded on the report, not raised,
    so one run the tracker rejects does not hide the others."""
    redactor = redactor_for(enabled=config.redact_secrets, patterns=config.redact_patterns)

    def clean(text: str) -> str:
        return redactor.redact(text) if redactor is not None else text

    turns = assistant_turns(run.messages)
    starts = [index for index, _ in turns]
    report = RunReport(
        id=clean(run.id),
        file=str(run.path),
        format=run.format,
        messages=len(run.messages),
        turns=len(turns),
    )
    try:
        tracker = LoopTracker(config)
        for number, (index, end) in enumerate(turns, start=1):
            verdict = await tracker.turn_started(run.messages[:end])
            calls = run.messages[index].get("tool_calls") or []
            mark = TurnMark(
                turn=number,
                message_index=index,
                tools=[clean(str((c.get("function") or {}).get("name") or "?")) for c in calls],
            )
            report.judge_calls += len(verdict.judge_calls)
            report.judge_cost_usd += sum(c.cost_usd or 0.0 for c in verdict.judge_calls)
            if verdict:
                _mark(verdict, mark, starts)
                if not report.looped:
                    report.looped = True
                    report.flagged_turn = number
                    report.kind, report.source = mark.kind, mark.source
                    report.action, report.summary = mark.action, mark.summary
                    cited = [t for t in mark.evidence_turns if t <= number]
                    report.onset_turn = min(cited) if cited else number
            report.timeline.append(mark)
    except Exception as exc:  # the harness boundary: a crash is a finding, not an abort
        report.crash = clean(f"{type(exc).__name__}: {exc}")
    _wasted(run, report, starts)
    return report


async def _replay_all(
    runs: Sequence[TraceRun],
    config: TrackerConfig,
    concurrency: int,
    on_done: Callable[[RunReport], None] | None,
) -> list[RunReport]:
    limiter = anyio.CapacityLimiter(concurrency)
    results: list[RunReport | None] = [None] * len(runs)

    async def one(position: int, run: TraceRun) -> None:
        async with limiter:
            report = await replay_run(run, config)
        results[position] = report
        if on_done is not None:
            on_done(report)

    async with anyio.create_task_group() as group:
        for position, run in enumerate(runs):
            group.start_soon(one, position, run)
    return [r for r in results if r is not None]


def scan_runs(
    runs: Sequence[TraceRun],
    problems: Sequence[FileProblem],
    config: TrackerConfig,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    on_done: Callable[[RunReport], None] | None = None,
) -> ScanReport:
    """Replay every run (at most ``concurrency`` at once; judge calls are I/O bound)."""
    reports = anyio.run(_replay_all, runs, config, concurrency, on_done)
    return ScanReport(reports, list(problems), config.judge_enabled)


def _prompt_turns(messages: Sequence[dict[str, Any]]) -> list[int]:
    """The number of assistant turns after each user message (and before the first)."""
    counts = [0]
    for message in messages:
        if message.get("role") == "user" and counts[-1]:
            counts.append(0)
        elif message.get("role") == "assistant":
            counts[-1] += 1
    return counts


@dataclass(frozen=True, slots=True)
class JudgeEstimate:
    """The most judge calls a scan can make, and what they would cost at most.

    ``cost_usd`` is None when litellm has no price for a model.
    """

    calls: int
    cost_usd: float | None


def _price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    from judge.llm._litellm import _import_litellm

    try:
        prompt, completion = _import_litellm().cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # litellm raises its own errors for unknown models
        return None
    return float(prompt) + float(completion)


def estimate_judge(runs: Sequence[TraceRun], config: TrackerConfig) -> JudgeEstimate:
    """An upper bound on the judge calls and their cost, before any is made.

    Calls: every turn the schedule could check on, at its shortest interval (heuristic
    suspicion can bring a check forward to any turn, then the interval applies), counted
    afresh for each user prompt (the schedule restarts there, with the default
    ``count_scope``), twice
    where a confirm model is set, within ``max_judge_calls`` per run. Cost: each prompt at
    the history's size capped by ``max_prompt_chars``, each reply at ``max_reply_tokens``.
    """
    fast_calls = confirm_calls = 0
    fast_cost = confirm_cost = 0.0
    step = max(1, min(config.min_interval, config.initial_interval))
    unknown = False
    for run in runs:
        checks = sum(min(turns, turns // step + 1) for turns in _prompt_turns(run.messages))
        confirms = checks if config.confirm_model else 0
        if config.max_judge_calls is not None:
            checks = min(checks, config.max_judge_calls)
            confirms = min(confirms, config.max_judge_calls - checks)
        chars = min(sum(_chars(m) for m in run.messages), config.max_prompt_chars)
        prompt = math.ceil(chars / CHARS_PER_TOKEN)
        for model, count, add in (
            (config.fast_model, checks, "fast"),
            (config.confirm_model, confirms, "confirm"),
        ):
            if not model or not count:
                continue
            price = _price(model, prompt, config.max_reply_tokens)
            if price is None:
                unknown = True
                price = 0.0
            if add == "fast":
                fast_calls += count
                fast_cost += price * count
            else:
                confirm_calls += count
                confirm_cost += price * count
    total = fast_calls + confirm_calls
    return JudgeEstimate(total, None if unknown else fast_cost + confirm_cost)
