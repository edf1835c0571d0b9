"""The runtime's command line (rich): the commands that run beside an agent.

``demo`` replays a bundled trajectory, ``serve`` runs the HTTP sidecar, ``doctor`` reports
the setup and ``hook`` answers an agent's hook event. Each command module adds its own
subparser and handles it; `shared` holds what several use. This module only builds the
parser from a list of command modules and runs the one asked for; `judge.cli` re-exports
its names and runs ``hook`` without it. The ``loop-judge`` console script (`judge_eval.cli`)
passes the tooling's commands (``eval``, ``import``, ``check``) into the same `main`, so
this package never imports the tooling.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Protocol

from pydantic import ValidationError
from rich.console import Console

from judge.cli import demo, doctor, hook, serve
from judge.cli.demo import DEMO_FILE
from judge.cli.shared import (
    EXIT_FAILED,
    EXIT_USAGE,
    PIPE_WIDTH,
    UsageError,
    validation_problems,
)
from judge.errors import ConfigError

__all__ = [
    "COMMANDS",
    "DEMO_FILE",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "PIPE_WIDTH",
    "Command",
    "UsageError",
    "build_parser",
    "main",
]


class Command(Protocol):
    """A command module: adds its subparser, whose ``func`` default runs it."""

    def add_parser(self, sub: argparse._SubParsersAction[argparse.ArgumentParser], /) -> None: ...


# The runtime's commands, in the order --help lists them.
COMMANDS: tuple[Command, ...] = (demo, serve, hook, doctor)


# The --help line. A constant, not the docstring: ``python -OO`` strips docstrings.
DESCRIPTION = (
    "Tells when an AI agent is stuck in an unproductive loop. Start with `loop-judge doctor` "
    "(what this installation will do) or `loop-judge eval` (replays the bundled labelled set)."
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="loop-judge", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in commands:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, commands: Sequence[Command] = COMMANDS) -> int:
    """Run one of ``commands``; a bad setting or flag exits 2 with one line."""
    parser = build_parser(commands)
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
