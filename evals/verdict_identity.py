"""Did a change keep every verdict? Replays every run turn by turn and compares.

A speed change to the reader or a detector must not change what the tracker says. This
replays every trajectory it can find (the labelled set in ``evals/data`` and
``evals/coding_dev``, and, when present, ``../shared/recorded``, ``../shared/coding_runs_dev``
and ``../shared/coding_runs``), one id once, the way the eval does (``messages[:k]`` at
each turn boundary), with heuristics only, and writes each turn's verdict and each run's
final saved state as JSON. Two such files, one per tree, are then compared; clock
readings in the state (``last_step_at`` and kin) are left out of the comparison.

Record this tree, then an earlier one (a ``git worktree``, imported through
``PYTHONPATH``), then compare:

    .venv/bin/python evals/verdict_identity.py record /tmp/now.json
    PYTHONPATH=/tmp/base .venv/bin/python evals/verdict_identity.py record /tmp/base.json
    .venv/bin/python evals/verdict_identity.py compare /tmp/base.json /tmp/now.json

``compare`` prints the first differences and exits 1 when any verdict or state differs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio

REPO = Path(__file__).resolve().parents[1]
# Every place a trajectory may sit: the repository's own sets, then the shared material.
DATA_PATHS = (
    REPO / "evals" / "data",
    REPO / "evals" / "coding_dev",
    REPO.parent / "shared" / "recorded",
    REPO.parent / "shared" / "coding_runs_dev",
    REPO.parent / "shared" / "coding_runs",
)
# Fields holding a clock reading (seconds since the epoch), which differ on every replay.
_CLOCK_FIELDS = re.compile(r'"(last_step_at|at|started_at|created_at)":\s*[0-9.eE+-]+')
# Differences printed before the count.
SHOWN = 5


def _runs() -> dict[str, list[dict[str, Any]]]:
    from judge_eval.dataset import load_dataset

    runs: dict[str, list[dict[str, Any]]] = {}
    for path in DATA_PATHS:
        if path.exists():
            trajectories, _ = load_dataset(path)
            for trajectory in trajectories:
                runs.setdefault(trajectory.id, trajectory.messages)
    return runs


async def _record(semantic: str) -> dict[str, Any]:
    import judge
    from judge import LoopTracker, TrackerConfig
    from judge.turns import assistant_turn_ends

    config = TrackerConfig(fast_model=None, confirm_model=None, semantic=semantic)
    runs: dict[str, Any] = {}
    for run_id, messages in sorted(_runs().items()):
        tracker = LoopTracker(config)
        verdicts = []
        for end in assistant_turn_ends(messages):
            verdict = await tracker.turn_started(messages[:end])
            verdicts.append(verdict.model_dump_json())
        runs[run_id] = {"verdicts": verdicts, "state": tracker.state.model_dump_json()}
    return {"package": str(Path(judge.__file__).resolve().parent), "runs": runs}


def _steady(text: str) -> str:
    return _CLOCK_FIELDS.sub(lambda m: f'"{m.group(1)}":0', text)


def _fields(before: str, after: str) -> str:
    """The verdict fields that differ, each as ``name: before -> after`` (values cut)."""
    x, y = json.loads(before), json.loads(after)
    changed = [k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)]
    return "; ".join(f"{k}: {str(x.get(k))[:80]!r} -> {str(y.get(k))[:80]!r}" for k in changed)


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Every difference between two recordings, as lines to print."""
    found: list[str] = []
    a, b = before["runs"], after["runs"]
    for run_id in sorted(set(a) ^ set(b)):
        found.append(f"{run_id}: replayed by one tree only")
    for run_id in sorted(set(a) & set(b)):
        va, vb = a[run_id]["verdicts"], b[run_id]["verdicts"]
        if len(va) != len(vb):
            found.append(f"{run_id}: {len(va)} turns against {len(vb)}")
        for turn, (x, y) in enumerate(zip(va, vb, strict=False)):
            if x != y:
                found.append(f"{run_id} turn {turn}: verdict {_fields(x, y)}")
        if _steady(a[run_id]["state"]) != _steady(b[run_id]["state"]):
            found.append(f"{run_id}: final state differs")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    record = sub.add_parser("record", help="replay every run and write the verdicts here")
    record.add_argument("out", type=Path)
    record.add_argument("--semantic", choices=("off", "on"), default="off")
    diff = sub.add_parser("compare", help="compare two recordings; exit 1 on a difference")
    diff.add_argument("before", type=Path)
    diff.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.command == "record":
        result = anyio.run(_record, args.semantic)
        args.out.write_text(json.dumps(result))
        turns = sum(len(run["verdicts"]) for run in result["runs"].values())
        print(f"{result['package']}: {len(result['runs'])} runs, {turns:,} turns -> {args.out}")
        return 0
    before = json.loads(args.before.read_text())
    after = json.loads(args.after.read_text())
    found = compare(before, after)
    turns = sum(len(run["verdicts"]) for run in after["runs"].values())
    for line in found[:SHOWN]:
        print(line)
    print(
        f"{before['package']} -> {after['package']}: {len(after['runs'])} runs, "
        f"{turns:,} turns, {len(found)} differences"
    )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
