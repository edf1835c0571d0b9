"""The full ``loop-judge`` command line (every command, rich). The only module that imports rich.

``demo`` replays a bundled trajectory, ``eval`` measures the tracker on labelled data,
``import`` converts other agents' trajectories into our labelled-trajectory JSON, ``serve``
runs the HTTP sidecar, ``check`` answers for one trajectory in its exit code, ``doctor``
reports the setup and ``hook`` answers an agent's hook event. Each command module adds its
own subparser and handles it; `shared` holds what several use. This module only builds the
parser and runs the command; `judge.cli` re-exports its names and runs ``hook`` without it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pydantic import ValidationError
from rich.console import Console

from judge.cli import check, demo, doctor, evaluate, hook, importer, serve
from judge.cli.check import EXIT_NO_LOOP, EXIT_STOP, EXIT_WARN
from judge.cli.demo import DEMO_FILE
from judge.cli.eval_plan import (
    DEFAULT_DATA_DIR,
    DEFAULT_OUT_DIR,
    JUDGES,
    MODES,
    SCHEDULES,
    RunPlan,
)
from judge.cli.shared import (
    EXIT_FAILED,
    EXIT_USAGE,
    PIPE_WIDTH,
    UsageError,
    validation_problems,
)
from judge.errors import ConfigError
from judge.evaluation.replay import assistant_turn_ends, replay

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_OUT_DIR",
    "DEMO_FILE",
    "EXIT_FAILED",
    "EXIT_NO_LOOP",
    "EXIT_STOP",
    "EXIT_USAGE",
    "EXIT_WARN",
    "JUDGES",
    "MODES",
    "PIPE_WIDTH",
    "SCHEDULES",
    "RunPlan",
    "UsageError",
    "assistant_turn_ends",
    "build_parser",
    "main",
    "replay",
]


# The --help line. A constant, not the docstring: ``python -OO`` strips docstrings.
DESCRIPTION = (
    "Tells when an AI agent is stuck in an unproductive loop. Start with `loop-judge doctor` "
    "(what this installation will do) or `loop-judge eval` (replays the bundled labelled set)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loop-judge", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (demo, evaluate, importer, serve, check, hook, doctor):
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        # Piped or captured output has no width to fit; 80 columns would fold the tables.
        console = Console(width=PIPE_WIDTH)
    try:
        return int(args.func(args, console))
    except ConfigError as exc:
        parser.exit(EXIT_USAGE, f"loop-judge {args.command}: error: {exc}\n")
    except ValidationError as exc:  # settings a command builds itself (the sidecar's)
        problems = validation_problems(exc)
        parser.exit(EXIT_USAGE, f"loop-judge {args.command}: error: {problems}\n")
