"""The judge tier: score the judge model alone, one window at a time, against the labels.

`loop-judge eval` replays whole runs, so a judge's figures there are mixed with the
heuristics' and the schedule's. This tier asks one model, single stage, about a fixed
sample of the very prompts the tracker would send it, and scores each answer against the
labels: ROC AUC of the confidence, precision and recall at the threshold, how many replies
the schema rejected, latency and tokens.

Windows are chosen by the runtime, not by a copy of it: each labelled run is replayed
through a real `LoopTracker` whose judge is a recording `ScriptedJudge` that always answers
0.0 ("still productive", the answer that keeps the tracker asking), so the prompts
recorded are exactly those the tracker builds (`judge.llm.transcript.fit_prompt` on its
own window, task and redaction), at the turns its schedule asks, with a heuristic loop
verdict taking a turn away from the judge as it does in use. The recording answer is the
same for every run and never reads the labels.

A window is positive when it comes from a looping run, ends at or after the labelled
onset and shows at least `LOOP_VISIBLE_TURNS` assistant turns from the onset on; negative
when it comes from a productive run or ends before the onset; otherwise (the loop has
begun but is barely in view) it is left out. The sample is balanced and seeded
(`sample_windows`).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from judge.config import TrackerConfig
from judge.llm.client import LLMClient, ModelReply
from judge.llm.pair import Prepare, TwoStageJudge
from judge.testing import SCRIPTED_FAST_MODEL, JudgeRequest, ScriptedJudge
from judge.tracker import LoopTracker
from judge.turns import assistant_turns
from judge_eval.dataset import Trajectory
from judge_eval.replay import origin_of

__all__ = [
    "DEFAULT_SEED",
    "DEFAULT_TIMEOUT_S",
    "DEFAULT_WINDOWS",
    "LOOP_VISIBLE_TURNS",
    "RECORDING_CONFIDENCE",
    "TierResult",
    "TierSummary",
    "Window",
    "WindowResult",
    "collect_windows",
    "label_window",
    "percentile",
    "roc_auc",
    "run_tier",
    "sample_windows",
    "summarize",
    "write_results",
]

# What the recording judge answers: "no loop" with full certainty, so the schedule waits
# its longest (max_interval) between checks and the tracker keeps asking to the run's end,
# as it would for a judge that never sees a loop.
RECORDING_CONFIDENCE = 0.0
# A window shows a loop when at least this many assistant turns from the onset on are in
# it: the default `other_repeat_limit` (3 identical calls), what the heuristics themselves
# need before they call a run looping. Fewer is the first iteration or two, which a person
# reading the window could not yet tell from a retry.
LOOP_VISIBLE_TURNS = 3
# Windows scored by default: 40 calls of about a minute each on a small local model fit an
# hour (docs/evaluation.md, "judge on a real model").
DEFAULT_WINDOWS = 40
DEFAULT_SEED = 20261128
# Timeout of one call: docs/configuration.md's CPU setting (a 1.5B model on 2 threads took
# a p95 of 372 s per check); a hosted model answers far sooner and never reaches it.
DEFAULT_TIMEOUT_S = 600.0
# Percentile reported for latency besides the median.
TAIL_PERCENTILE = 95.0


@dataclass(frozen=True, slots=True)
class Window:
    """One prompt the tracker would send, with where it came from and its label.

    ``label`` is True for a loop in view, False for productive work, None when left out.
    ``newest_index`` is the history index of the newest message the judge is shown.
    """

    run_id: str
    origin: str
    turn: int
    newest_index: int
    onset: int | None
    loop_turns_visible: int
    label: bool | None
    prompt: list[dict[str, str]] = field(repr=False, compare=False)

    @property
    def prompt_chars(self) -> int:
        return sum(len(m.get("content") or "") for m in self.prompt)


def label_window(traj: Trajectory, request: JudgeRequest) -> tuple[bool | None, int]:
    """The window's label (see the module docstring) and the assistant turns it shows from
    the onset on (0 for a productive run)."""
    labels = traj.labels
    if labels is None:
        return None, 0
    if not labels.looping or labels.onset_message_index is None:
        return False, 0
    onset = labels.onset_message_index
    records = request.transcript
    visible = sum(
        1
        for r in records
        if r.get("role") == "assistant" and isinstance(r.get("n"), int) and r["n"] >= onset
    )
    if request.newest_index < onset:
        return False, visible
    if visible >= LOOP_VISIBLE_TURNS:
        return True, visible
    return None, visible


async def collect_windows(traj: Trajectory, config: TrackerConfig) -> list[Window]:
    """Every prompt a fresh tracker sends while replaying ``traj`` turn by turn, labelled.

    ``config`` is the tracker's settings; its models are replaced by the recording judge
    (single stage), so only the schedule, window and prompt settings matter.
    """
    recorder = ScriptedJudge(lambda _request: RECORDING_CONFIDENCE)
    settings = config.model_copy(update={"fast_model": SCRIPTED_FAST_MODEL, "confirm_model": None})
    tracker = LoopTracker(settings, client=recorder)
    turn_of_call: list[int] = []
    for turn, (_index, end) in enumerate(assistant_turns(traj.messages), start=1):
        before = len(recorder.calls)
        await tracker.turn_started(traj.messages[:end])
        turn_of_call.extend([turn] * (len(recorder.calls) - before))
    onset = traj.labels.onset_message_index if traj.labels is not None else None
    origin = origin_of(traj)
    windows = []
    for call, turn in zip(recorder.calls, turn_of_call, strict=True):
        label, visible = label_window(traj, call.request)
        windows.append(
            Window(
                run_id=traj.id,
                origin=origin,
                turn=turn,
                newest_index=call.request.newest_index,
                onset=onset,
                loop_turns_visible=visible,
                label=label,
                prompt=call.request.messages,
            )
        )
    return windows


def _round_robin(windows: Sequence[Window], count: int, rng: random.Random) -> list[Window]:
    """``count`` windows spread over the runs: the runs in a seeded order, one window of
    each (drawn at random) per round, so no long run fills the sample alone."""
    by_run: dict[str, list[Window]] = {}
    for window in windows:
        by_run.setdefault(window.run_id, []).append(window)
    runs = sorted(by_run)
    rng.shuffle(runs)
    pools = {run: rng.sample(by_run[run], len(by_run[run])) for run in runs}
    chosen: list[Window] = []
    while len(chosen) < count and any(pools.values()):
        for run in runs:
            if pools[run] and len(chosen) < count:
                chosen.append(pools[run].pop())
    return chosen


def sample_windows(windows: Iterable[Window], count: int, seed: int = DEFAULT_SEED) -> list[Window]:
    """A balanced, seeded sample: half positive, half negative (the smaller class caps
    both), each half spread over its runs round-robin (`_round_robin`), in alternating
    order, so a run stopped early has scored a balanced prefix."""
    if count < 2:
        raise ValueError(
            f"the judge tier needs at least 2 windows (one of each label), got {count}"
        )
    pool = [w for w in windows if w.label is not None]
    # Candidates in a fixed order whatever order the data was read in.
    pool.sort(key=lambda w: (w.run_id, w.turn))
    positives = [w for w in pool if w.label]
    negatives = [w for w in pool if not w.label]
    half = min(count // 2, len(positives), len(negatives))
    rng = random.Random(seed)
    chosen_pos = _round_robin(positives, half, rng)
    chosen_neg = _round_robin(negatives, half, rng)
    return [w for pair in zip(chosen_pos, chosen_neg, strict=True) for w in pair]


@dataclass(frozen=True, slots=True)
class WindowResult:
    """What the model said about one window: ids and figures only, never text."""

    run_id: str
    origin: str
    turn: int
    newest_index: int
    onset: int | None
    label: bool
    prompt_chars: int
    confidence: float | None
    failure: str | None
    error_shape: str | None
    latency_s: float
    prompt_tokens: int | None
    completion_tokens: int | None


def _error_shape(error: str) -> str:
    """The error's kind and place, without any value it quotes: a schema message can echo
    the model's text, which may echo the transcript."""
    cut = min(
        (i for i in (error.find("'"), error.find('"'), error.find("(")) if i >= 0),
        default=len(error),
    )
    return error[:cut].rstrip(" :")[:200]


@dataclass
class _Recording:
    """An `LLMClient` wrapper that keeps the last raw reply, so the command can show the
    shape of replies the schema rejected (on the console only, never in a file)."""

    inner: LLMClient
    last: ModelReply | None = None

    async def complete(
        self, model: str, messages: list[dict[str, str]], *, schema: dict[str, Any]
    ) -> ModelReply:
        self.last = None
        self.last = await self.inner.complete(model, messages, schema=schema)
        return self.last


async def run_tier(
    windows: Sequence[Window],
    client: LLMClient,
    model: str,
    *,
    threshold: float,
    prepare: Prepare | None = None,
    prepare_deadline_s: float | None = None,
    on_result: Callable[[WindowResult, str | None], None] | None = None,
) -> list[WindowResult]:
    """Ask ``model`` about each window in order, single stage, through the judge's own
    call path (`TwoStageJudge` without a confirm model: the schema, the reply parsing and
    the error mapping are the tracker's). ``on_result`` gets each result, with the raw
    reply when the schema rejected it (for the console)."""
    recording = _Recording(client)
    judge = TwoStageJudge(
        recording,
        fast_model=model,
        confirm_model=None,
        threshold=threshold,
        prepare=prepare,
        prepare_deadline_s=prepare_deadline_s,
    )
    results = []
    for window in windows:
        if window.label is None:
            raise ValueError(f"window {window.run_id} turn {window.turn} has no label")
        outcome = await judge.check(window.prompt)
        call = outcome.calls[0] if outcome.calls else None
        failure = None
        if call is None:
            failure = "not_ready"
        elif call.failure is not None:
            failure = call.failure.kind.value
        error = call.error if call is not None else "; ".join(outcome.errors)
        result = WindowResult(
            run_id=window.run_id,
            origin=window.origin,
            turn=window.turn,
            newest_index=window.newest_index,
            onset=window.onset,
            label=bool(window.label),
            prompt_chars=window.prompt_chars,
            confidence=call.confidence if call is not None and call.error is None else None,
            failure=failure,
            error_shape=_error_shape(error) if error else None,
            latency_s=call.latency_s if call is not None else 0.0,
            prompt_tokens=call.prompt_tokens if call is not None else None,
            completion_tokens=call.completion_tokens if call is not None else None,
        )
        results.append(result)
        if on_result is not None:
            raw = recording.last.content if failure == "output" and recording.last else None
            on_result(result, raw)
    return results


def roc_auc(scores: Sequence[tuple[float, bool]]) -> float | None:
    """Area under the ROC curve of (score, label) pairs: the chance that a random positive
    scores above a random negative, ties counting half (Mann-Whitney U / (P * N)). None
    without at least one of each label."""
    positives = [s for s, label in scores if label]
    negatives = [s for s, label in scores if not label]
    if not positives or not negatives:
        return None
    wins = 0.0
    for p in positives:
        for n in negatives:
            wins += 1.0 if p > n else 0.5 if p == n else 0.0
    return wins / (len(positives) * len(negatives))


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (the smallest value with ``pct`` % at or below it)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class TierSummary:
    """The tier's figures. Precision and recall count a failed call as "no loop", as the
    tracker does; the AUC is over the replies the schema accepted."""

    windows: int
    positives: int
    negatives: int
    valid: int
    failures: dict[str, int]
    auc: float | None
    threshold: float
    tp: int
    fp: int
    fn: int
    precision: float | None
    recall: float | None
    latency_median_s: float | None
    latency_p95_s: float | None
    prompt_tokens_median: float | None
    prompt_tokens_max: int | None
    completion_tokens_median: float | None

    @property
    def replies(self) -> int:
        """Calls that got a reply to parse (valid or rejected by the schema)."""
        return self.valid + self.failures.get("output", 0)

    @property
    def validity(self) -> float | None:
        """Share of replies that matched the schema (transport failures not counted)."""
        return self.valid / self.replies if self.replies else None


def _median(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize(results: Sequence[WindowResult], threshold: float) -> TierSummary:
    valid = [r for r in results if r.confidence is not None]
    failures: dict[str, int] = {}
    for r in results:
        if r.failure is not None:
            failures[r.failure] = failures.get(r.failure, 0) + 1
    flagged = [r for r in valid if r.confidence is not None and r.confidence >= threshold]
    tp = sum(1 for r in flagged if r.label)
    fp = len(flagged) - tp
    positives = sum(1 for r in results if r.label)
    replied = [r for r in results if r.failure in (None, "output")]
    prompt_tokens = [r.prompt_tokens for r in replied if r.prompt_tokens is not None]
    completion = [r.completion_tokens for r in replied if r.completion_tokens is not None]
    latencies = [r.latency_s for r in replied]
    return TierSummary(
        windows=len(results),
        positives=positives,
        negatives=len(results) - positives,
        valid=len(valid),
        failures=dict(sorted(failures.items())),
        auc=roc_auc([(r.confidence, r.label) for r in valid if r.confidence is not None]),
        threshold=threshold,
        tp=tp,
        fp=fp,
        fn=positives - tp,
        precision=tp / len(flagged) if flagged else None,
        recall=tp / positives if positives else None,
        latency_median_s=_median(latencies),
        latency_p95_s=percentile(latencies, TAIL_PERCENTILE),
        prompt_tokens_median=_median([float(t) for t in prompt_tokens]),
        prompt_tokens_max=max(prompt_tokens, default=None),
        completion_tokens_median=_median([float(t) for t in completion]),
    )


@dataclass(frozen=True, slots=True)
class TierResult:
    """A finished (or stopped) tier run: its settings, figures and per-window rows."""

    settings: dict[str, Any]
    summary: TierSummary
    results: list[WindowResult]
    elapsed_s: float = 0.0
    finished: float = field(default_factory=time.time)


def write_results(tier: TierResult, path: Path) -> Path:
    """The run as JSON: settings, summary and one row per window (ids and figures only)."""
    summary = asdict(tier.summary)
    summary["validity"] = tier.summary.validity
    data = {
        "settings": tier.settings,
        "summary": summary,
        "elapsed_s": round(tier.elapsed_s, 1),
        "windows": [asdict(r) for r in tier.results],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path
