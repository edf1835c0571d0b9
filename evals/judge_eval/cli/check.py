"""``loop-judge check``: replay one trajectory and answer in the exit code.

For scripts and orchestrators: 0 no loop, 10 the agent would have been warned,
20 it would have been stopped or handed to the user; the replay ends at the first verdict
that would have halted the agent.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
from rich.console import Console

from judge.cli.shared import UsageError, tracker_config
from judge.tracker import LoopTracker
from judge.turns import assistant_turn_ends
from judge.verdict import Action, Verdict
from judge_eval.dataset import TrajectoryFormatError
from judge_eval.importers import load_trajectory

__all__ = ["EXIT_NO_LOOP", "EXIT_STOP", "EXIT_WARN", "add_parser", "run"]

# Exit codes of `check`, for scripts and orchestrators: 0 no loop, 10 the agent
# would have been warned, 20 it would have been stopped or handed to the user. Far from
# 1 and 2 (failure, usage) so the three outcomes never read as an error.
EXIT_NO_LOOP = 0
EXIT_WARN = 10
EXIT_STOP = 20
_HALTING = (Action.STOP, Action.ASK_USER)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chk = sub.add_parser(
        "check",
        help="replay one trajectory; exit 0 (no loop), 10 (warn) or 20 (stop or ask_user)",
        description="Replay a trajectory (any format `import` reads) through the tracker, "
        "with the LOOP_JUDGE_* judge when one is configured, else heuristics only. Prints the "
        "first loop's summary and explanation; stops at the first verdict that would have "
        "halted the agent.",
    )
    chk.add_argument("file", help="a trajectory file")
    chk.add_argument("--json", action="store_true", help="print the deciding verdict as JSON")
    chk.set_defaults(func=run)


async def _replay_until_halt(messages: list[dict[str, Any]], tracker: LoopTracker) -> list[Verdict]:
    """Verdicts turn by turn, up to the first that would have halted the agent."""
    verdicts = []
    for end in assistant_turn_ends(messages):
        verdict = await tracker.turn_started(messages[:end])
        verdicts.append(verdict)
        if verdict and verdict.action in _HALTING:
            break
    return verdicts


def run(args: argparse.Namespace, console: Console) -> int:
    """Replay one trajectory; exit 0 / 10 / 20 by the most severe action it would get."""
    try:
        trajectory = load_trajectory(args.file)
    except TrajectoryFormatError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"{args.file}: cannot read: {exc.strerror or exc}") from exc
    tracker = LoopTracker(tracker_config({}))  # the env's judge when configured, else heuristics
    verdicts = anyio.run(_replay_until_halt, trajectory.messages, tracker)
    loops = [v for v in verdicts if v]
    halted = next((v for v in loops if v.action in _HALTING), None)
    deciding = halted or (loops[0] if loops else (verdicts[-1] if verdicts else Verdict()))
    code = EXIT_STOP if halted else EXIT_WARN if loops else EXIT_NO_LOOP
    if args.json:
        sys.stdout.write(deciding.model_dump_json(indent=2) + "\n")
        return code
    if not loops:
        console.print(f"{args.file}: no loop in {len(verdicts)} turns", highlight=False)
        return code
    first = loops[0]
    console.print(
        f"{args.file}: loop at turn {first.turn} ({first.source}, {first.action.value}): "
        f"{first.summary}",
        markup=False,
        highlight=False,
    )
    console.print(first.explanation or "", markup=False, highlight=False)
    if halted is not None and halted is not first:
        console.print(
            f"then at turn {halted.turn} ({halted.action.value}): {halted.summary}",
            markup=False,
            highlight=False,
        )
    return code
