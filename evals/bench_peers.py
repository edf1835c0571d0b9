"""What one ``turn_started`` costs on real runs, beside the lightest detectors of its peers.

Every recorded trajectory (``evals/data`` and ``../shared/recorded``, one copy of each id)
is replayed the way the peer harness replays it: at each turn boundary of the eval
(`judge.turns.assistant_turn_ends`) a detector is handed ``messages[:k]``, a
new list each turn holding the same message objects. Three detectors and one reference run
side by side, on
the same turn, in one process, so their ratio does not depend on the machine's load:

- loop-judge, heuristics only (no judge model, so no check is ever due), and in a second
  pass with the ``semantic`` extra when it is installed;
- a gemini-cli-style rule (``loopDetectionService.ts``): the same tool call with the same
  arguments five times in a row is a loop (``TOOL_CALL_LOOP_THRESHOLD``);
- an OpenHands-style detector (``stuck_detector.py``): on each turn it reads the events
  since the last user message and looks for the same action and observation four times,
  the same action failing three times, the same monologue three times, or an A-B pattern
  over six steps;
- a reference, ``one-regex-pass``: a single regex search over each new message's text and
  arguments, the floor for a CPython detector that reads the new text at all;
- two floors of loop-judge itself, which show what a turn costs before any detector
  runs: ``lj-reading-only``, the history reader alone
  (checking each new entry's shape, so a bad one is named by index and field, and
  normalizing it), and ``lj-no-detectors``, a whole ``turn_started`` of a tracker built
  with ``detectors=[]`` (reading, pairing each call with its result, classifying and
  keying the result, the turn's bookkeeping and its verdict).

The two baselines are ports in a few lines each, enough to cost what the originals cost
per turn (the originals also hash and compare event objects); they are not used for
detection anywhere else.

Run from the repository root:  .venv/bin/python evals/bench_peers.py
To compare with another commit, side by side on the same load, check it out as a git
worktree and pass it:  .venv/bin/python evals/bench_peers.py --baseline-tree /tmp/base
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import anyio

# Where the recorded runs live: the labelled copies in the repo and the shared originals.
DATA_PATHS = ("evals/data", "../shared/recorded")
# gemini-cli's TOOL_CALL_LOOP_THRESHOLD.
GEMINI_REPEATS = 5
# OpenHands StuckDetector's thresholds (action/observation 4, action/error 3, monologue 3,
# alternating pattern over 6 steps).
OH_PAIR_REPEATS = 4
OH_ERROR_REPEATS = 3
OH_MONOLOGUE = 3
OH_ALTERNATION = 6
# Passes over the whole set; the median per turn of each pass is reported with the spread.
PASSES = 3


class GeminiRule:
    """The same call and arguments N times in a row (gemini-cli's tool-call check)."""

    def __init__(self) -> None:
        self.seen = 0
        self.last: str | None = None
        self.count = 0

    def __call__(self, history: Sequence[dict[str, Any]]) -> bool:
        looping = False
        for msg in history[self.seen :]:
            for call in msg.get("tool_calls") or ():
                fn = call.get("function") or {}
                key = f"{fn.get('name')}:{fn.get('arguments')}"
                self.count = self.count + 1 if key == self.last else 1
                self.last = key
                looping = looping or self.count >= GEMINI_REPEATS
        self.seen = len(history)
        return looping


def _action(msg: dict[str, Any]) -> tuple[Any, ...]:
    calls = msg.get("tool_calls") or ()
    return tuple((c.get("function") or {}).get("name") for c in calls) + tuple(
        (c.get("function") or {}).get("arguments") for c in calls
    )


class OpenHandsRule:
    """OpenHands' StuckDetector: re-reads the events since the last user message each turn."""

    def __call__(self, history: Sequence[dict[str, Any]]) -> bool:
        start = 0
        for i in range(len(history) - 1, -1, -1):
            if history[i].get("role") == "user":
                start = i
                break
        events = history[start:]
        actions = [_action(m) for m in events if m.get("role") == "assistant"]
        observations = [str(m.get("content")) for m in events if m.get("role") == "tool"]
        monologue = [
            str(m.get("content"))
            for m in events
            if m.get("role") == "assistant" and not m.get("tool_calls")
        ]
        last_a, last_o = actions[-OH_PAIR_REPEATS:], observations[-OH_PAIR_REPEATS:]
        full = len(last_a) == OH_PAIR_REPEATS and len(last_o) == OH_PAIR_REPEATS
        if full and len(set(last_a)) == 1 and len(set(last_o)) == 1:
            return True
        errors = observations[-OH_ERROR_REPEATS:]
        failing = len(errors) == OH_ERROR_REPEATS and all(
            "error" in o.lower()[:200] for o in errors
        )
        if failing and len(set(actions[-OH_ERROR_REPEATS:])) == 1:
            return True
        mono = monologue[-OH_MONOLOGUE:]
        if len(mono) == OH_MONOLOGUE and len(set(mono)) == 1:
            return True
        alt_a, alt_o = actions[-OH_ALTERNATION:], observations[-OH_ALTERNATION:]
        return (
            len(alt_a) == OH_ALTERNATION
            and len(alt_o) == OH_ALTERNATION
            and alt_a[0::2].count(alt_a[0]) == OH_ALTERNATION // 2
            and alt_a[1::2].count(alt_a[1]) == OH_ALTERNATION // 2
            and alt_o[0::2].count(alt_o[0]) == OH_ALTERNATION // 2
        )


class OneScan:
    """A reference, not a detector: one regex pass over each new message's text and call
    arguments, the least any detector that reads text (rather than comparing call
    signatures) must do. Its median is the floor a CPython detector reading the new text
    at all cannot go below; loop-judge makes about ten such passes per message (masking,
    classifying, sentence and stutter checks, prose, keys)."""

    # A digit followed by a time unit: a typical detector pattern, tried at every position.
    PATTERN = re.compile(r"\d ?(?:ms|us|ns)\b")

    def __init__(self) -> None:
        self.seen = 0

    def __call__(self, history: Sequence[dict[str, Any]]) -> bool:
        found = False
        for msg in history[self.seen :]:
            content = msg.get("content")
            if isinstance(content, str):
                found = self.PATTERN.search(content) is not None or found
            for call in msg.get("tool_calls") or ():
                arguments = (call.get("function") or {}).get("arguments")
                if isinstance(arguments, str):
                    found = self.PATTERN.search(arguments) is not None or found
        self.seen = len(history)
        return found


Semantic = Literal["auto", "on", "off"]
# One recorded run: its messages and the turn boundaries at which a detector is asked.
Run = tuple[list[dict[str, Any]], list[int]]


def load_runs() -> list[Run]:
    """Each recorded run's messages and turn ends, one copy per trajectory id."""
    from judge.turns import assistant_turn_ends
    from judge_eval.dataset import load_dataset

    runs: dict[str, list[dict[str, Any]]] = {}
    for path in DATA_PATHS:
        if not Path(path).exists():
            continue
        trajectories, _ = load_dataset(path)
        for traj in trajectories:
            runs.setdefault(traj.id, traj.messages)
    return [(messages, list(assistant_turn_ends(messages))) for messages in runs.values()]


# Clocks a turn can be timed with: wall time (what the agent waits, and what the peers'
# figures mean) or the thread's CPU time, which leaves out the time the process waited for a
# core: on a shared, loaded machine the tails of wall time are mostly someone else's work.
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.thread_time_ns}


async def replay(
    runs: list[Run], semantic: Semantic, clock_name: str = "wall"
) -> dict[str, list[float]]:
    """Microseconds per turn of each detector, measured turn by turn side by side."""
    from judge import LoopTracker, TrackerConfig
    from judge.conversation import Conversation

    config = TrackerConfig(fast_model=None, confirm_model=None, semantic=semantic)
    out: dict[str, list[float]] = {
        "loop-judge": [],
        "lj-no-detectors": [],
        "lj-reading-only": [],
        "gemini-style": [],
        "openhands-style": [],
        "one-regex-pass": [],
    }
    clock = CLOCKS[clock_name]
    for messages, ends in runs:
        tracker = LoopTracker(config)
        bare = LoopTracker(config, detectors=[])
        reader = Conversation(
            history_messages=config.history_messages, message_chars=config.max_message_chars
        )
        rules: list[tuple[str, Callable[[Sequence[dict[str, Any]]], Any]]] = [
            ("gemini-style", GeminiRule()),
            ("openhands-style", OpenHandsRule()),
            ("one-regex-pass", OneScan()),
            ("lj-reading-only", reader.read),
        ]
        for end in ends:
            history = messages[:end]
            for name, lj in (("loop-judge", tracker), ("lj-no-detectors", bare)):
                started = clock()
                await lj.turn_started(history)
                out[name].append((clock() - started) / 1_000)
            for name, rule in rules:
                started = clock()
                rule(history)
                out[name].append((clock() - started) / 1_000)
    return out


def _percentile(values: list[float], percent: int) -> float:
    return statistics.quantiles(values, n=100)[percent - 1]


def report(label: str, passes: list[dict[str, list[float]]]) -> dict[str, Any]:
    """Print the median, p90 and p99 per turn of each detector (median over passes) and
    the medians' ratios to the two baselines."""
    names = list(passes[0])
    turns = len(passes[0][names[0]])
    print(f"\n{label}: {turns} turns per pass, {len(passes)} passes, us per turn_started")
    print(
        f"{'detector':>18} {'median':>9} {'p90':>9} {'p99':>9} {'mean':>9} "
        f"{'x gemini':>9} {'x openhands':>12}"
    )
    rows: dict[str, dict[str, float]] = {}
    for name in names:
        rows[name] = {
            "median": statistics.median(statistics.median(p[name]) for p in passes),
            "p90": statistics.median(_percentile(p[name], 90) for p in passes),
            "p99": statistics.median(_percentile(p[name], 99) for p in passes),
            "mean": statistics.median(statistics.fmean(p[name]) for p in passes),
        }
    for name, row in rows.items():
        row["x_gemini"] = row["median"] / rows["gemini-style"]["median"]
        row["x_openhands"] = row["median"] / rows["openhands-style"]["median"]
        print(
            f"{name:>18} {row['median']:>9.1f} {row['p90']:>9.1f} {row['p99']:>9.1f} "
            f"{row['mean']:>9.1f} {row['x_gemini']:>9.1f} {row['x_openhands']:>12.2f}"
        )
    return {"label": label, "turns": turns, "rows": rows}


def _load() -> str:
    """The machine's 1, 5 and 15 minute load averages: the figures mean little without."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _worker(runs_file: Path, out: Path, semantic: Semantic, clock_name: str) -> None:
    """One pass in this process, with whichever judge PYTHONPATH gives (see --baseline-tree)."""
    with runs_file.open("rb") as f:
        runs = pickle.load(f)
    out.write_text(json.dumps(anyio.run(replay, runs, semantic, clock_name)))


def against_baseline(runs: list[Run], tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The same passes with this checkout's judge and with ``tree``'s, in turns, one process
    per pass, alternating which goes first, so both see the same load; the ratio of the
    loop-judge medians (this / baseline) is taken pass by pass."""
    here = Path(__file__).resolve().parents[1]
    passes: dict[str, list[dict[str, list[float]]]] = {"this": [], "baseline": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs_file = Path(tmp) / "runs.pickle"
        with runs_file.open("wb") as f:
            pickle.dump(runs, f)
        for i in range(args.passes):
            order = [("this", here), ("baseline", tree)]
            for name, root in order if i % 2 == 0 else order[::-1]:
                out = Path(tmp) / f"{name}-{i}.json"
                env = {**os.environ, "PYTHONPATH": str(root)}
                command = [sys.executable, __file__, "--worker", str(runs_file), str(out)]
                command += ["--clock", args.clock]
                subprocess.run(command, check=True, env=env, cwd=here)
                passes[name].append(json.loads(out.read_text()))
    label = f"heuristics only ({args.clock} clock)"
    this = report(f"this checkout, {label}", passes["this"])
    base = report(f"baseline {tree}, {label}", passes["baseline"])
    ratios = [
        statistics.median(new["loop-judge"]) / statistics.median(old["loop-judge"])
        for new, old in zip(passes["this"], passes["baseline"], strict=True)
    ]
    ratio = statistics.median(ratios)
    print(
        f"\nloop-judge median per turn, this / baseline: {ratio:.3f} "
        f"(passes: {', '.join(f'{r:.3f}' for r in ratios)}); load average {_load()}"
    )
    return {"this": this, "baseline": base, "ratio": ratio, "ratios": ratios}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=PASSES)
    parser.add_argument("--semantic", action="store_true", help="also run with the extra")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    parser.add_argument(
        "--clock", choices=sorted(CLOCKS), default="wall", help="time turns by (default wall)"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="another checkout (a git worktree) to measure side by side: passes alternate "
        "between its judge and this one's, and the median ratio is reported",
    )
    parser.add_argument("--worker", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        runs_file, out = args.worker
        _worker(runs_file, out, "off", args.clock)
        return
    runs = load_runs()
    import judge

    # Which checkout is measured (PYTHONPATH may point at another, to compare two commits).
    print(f"judge from {Path(judge.__file__).parent}; load average {_load()}")
    print(f"{len(runs)} recorded runs, {sum(len(m) for m, _ in runs):,} messages")
    if args.baseline_tree:
        compared = against_baseline(runs, args.baseline_tree.resolve(), args)
        if args.json:
            args.json.write_text(json.dumps(compared, indent=2))
        return
    results = [
        report(
            f"heuristics only ({args.clock} clock)",
            [anyio.run(replay, runs, "off", args.clock) for _ in range(args.passes)],
        )
    ]
    if args.semantic:
        from judge.detectors import embeddings

        if embeddings.available():
            passes = [anyio.run(replay, runs, "on", args.clock) for _ in range(args.passes)]
            results.append(report(f"semantic extra on ({args.clock} clock)", passes))
        else:
            print("semantic extra not installed: skipped")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
